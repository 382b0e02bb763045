/* model/model_bind.c: the binder's basic helpers (a key as an integer or
 * a float in range, a tensor of an exact shape and a supported type, a
 * weight view, an F32 vector, the error line), shared by model.c and the
 * architecture files model_moe.c and model_gptoss.c, which model.c calls:
 * kept apart so that no two of those files depend on each other. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/model.h"
#include "model/model_bind.h"

sl_status sl_bind_fail(sl_binder *b, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(b->err, SL_ERR_LEN, "%s: %s", sl_gguf_path(b->g), what);
    return SL_EFORMAT;
}

/* {arch}.suffix as an integer in [lo, hi]; *out keeps def if absent and !required. */
sl_status sl_bind_int(sl_binder *b, const char *suffix, bool required, int64_t lo, int64_t hi,
                         int32_t def, int32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    int64_t v = def;
    sl_status rc = sl_gguf_get_int(b->g, key, &v);
    if (rc == SL_EINVAL && sl_gguf_find_key(b->g, key) >= 0)
        return sl_bind_fail(b, "key %s must be an integer", key);
    if (rc < 0 && sl_gguf_find_key(b->g, key) >= 0)
        return sl_bind_fail(b, "key %s is out of range", key);
    if (rc < 0 && required)
        return sl_bind_fail(b, "missing required key %s", key);
    if (v < lo || v > hi)
        return sl_bind_fail(b, "key %s = %lld is out of range", key, (long long)v);
    *out = (int32_t)v;
    return SL_OK;
}

sl_status sl_bind_float(sl_binder *b, const char *suffix, bool required, double lo, double hi,
                           float def, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", b->arch, suffix);
    double v = def;
    sl_status rc = sl_gguf_get_float(b->g, key, &v);
    if (rc < 0 && sl_gguf_find_key(b->g, key) >= 0)
        return sl_bind_fail(b, "key %s must be a float", key);
    if (rc < 0 && required)
        return sl_bind_fail(b, "missing required key %s", key);
    if (!isfinite(v) || v < lo || v > hi) {
        return sl_bind_fail(b, "key %s = %g is out of range", key, v);
    }
    *out = (float)v;
    return SL_OK;
}

/* Finds `name`, checks its shape (ne1 = 0 for a 1-D tensor) and type. */
sl_status sl_bind_tensor(sl_binder *b, const char *name, int64_t ne0, int64_t ne1, bool required,
                             bool f32_only, const sl_gguf_tensor **out)
{
    *out = NULL;
    const sl_gguf_tensor *t = sl_gguf_find_tensor(b->g, name);
    if (!t) {
        if (required)
            return sl_bind_fail(b, "missing tensor '%s'", name);
        return SL_OK;
    }
    uint32_t want_dims = ne1 ? 2 : 1;
    bool shape_ok = t->n_dims == want_dims && (int64_t)t->ne[0] == ne0 && (ne1 == 0 || (int64_t)t->ne[1] == ne1);
    if (!shape_ok) {
        return sl_bind_fail(b, "tensor '%s' has shape [%llu, %llu], expected [%lld, %lld]", name,
                    (unsigned long long)t->ne[0], (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1),
                    (long long)ne0, (long long)(ne1 ? ne1 : 1));
    }
    if (f32_only ? t->type != SL_GGML_TYPE_F32 : !sl_ggml_type_supported(t->type)) {
        const char *tn = sl_ggml_type_name(t->type);
        char list[192] = "F32 expected";   /* the supported names take 171 bytes; fits the error line */
        if (!f32_only) {   /* every supported type's name, in GGUF id order */
            size_t len = 0;
            for (uint32_t ty = 0; ty < SL_GGML_TYPE_COUNT; ty++)
                if (sl_ggml_type_supported(ty) && len < sizeof list)
                    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "",
                                            sl_ggml_type_name(ty));
            if (len < sizeof list)
                snprintf(list + len, sizeof list - len, " are supported");
        }
        snprintf(b->err, SL_ERR_LEN, "%s: tensor '%s' has type %s, which sluice does not support here (%s)",
                 sl_gguf_path(b->g), name, tn ? tn : "?", list);
        return SL_EUNSUPPORTED;
    }
    *out = t;
    return SL_OK;
}

sl_status sl_bind_weight(sl_binder *b, const char *name, int64_t ne0, int64_t ne1, bool required,
                             sl_weight *w, uint64_t *bytes)
{
    const sl_gguf_tensor *t;
    sl_status rc = sl_bind_tensor(b, name, ne0, ne1, required, false, &t);
    memset(w, 0, sizeof *w);
    if (rc < 0 || !t)
        return rc;
    *w = (sl_weight){.type = t->type, .ne0 = ne0, .ne1 = ne1,
                     .row_bytes = sl_ggml_row_bytes(t->type, (uint64_t)ne0), .data = t->data};
    *bytes += t->nbytes;
    return SL_OK;
}

sl_status sl_bind_vector(sl_binder *b, const char *name, int64_t n, bool required, const float **v,
                             uint64_t *bytes)
{
    const sl_gguf_tensor *t;
    sl_status rc = sl_bind_tensor(b, name, n, 0, required, true, &t);
    *v = t ? (const float *)t->data : NULL;
    if (t)
        *bytes += t->nbytes;
    return rc;
}
