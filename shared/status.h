/* shared/status.h: the one status type every sluice module returns.
 * Where:  everywhere (libc only, no state).
 * Rule:   0 is success; a positive value means "not an error, try later"
 *         (the idea of nginx's NGX_AGAIN); a negative value is an error, so
 *         callers test `rc < 0`. Load, config and attach paths also fill a
 *         caller buffer `char err[SL_ERR_LEN]` with one line naming what was
 *         wrong; hot paths return the code alone. */
#ifndef SL_STATUS_H
#define SL_STATUS_H

typedef int sl_status;

enum {
    SL_OK           = 0,
    SL_AGAIN        = 1,   /* empty/full/not yet: retry later (a full queue is this) */
    SL_EINVAL       = -1,  /* an argument or a request field is out of range */
    SL_ENOMEM       = -2,  /* an allocation failed */
    SL_EIO          = -3,  /* a system call failed (errno logged at the call) */
    SL_EFORMAT      = -4,  /* a file or record is malformed */
    SL_EUNSUPPORTED = -5,  /* well-formed but not supported (tensor type, arch) */
    SL_ESTALE       = -6,  /* an incarnation or generation no longer matches */
    SL_ERANGE       = -7,  /* an index or length points outside its object */
    SL_ESTATE       = -8,  /* the object is not in a state that allows this */
    SL_EBACKEND     = -9,  /* the compute backend failed a step */
};

/* Size of the caller-owned error buffers filled on load/config/attach paths. */
#define SL_ERR_LEN 256

/* A short constant name for a status ("SL_EINVAL"); never NULL. */
const char *sl_status_name(sl_status rc);

#endif
