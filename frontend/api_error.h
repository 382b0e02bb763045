/* frontend/api_error.h: errors in OpenAI's shape.
 * Where:     front ends, on every failed request; the one place that decides
 *            the HTTP status, `type` and `code` of an error.
 * Who:       any thread; no state.
 * Shape:     {"error":{"message":..., "type":..., "param":..., "code":...}}
 *            (param and code are null when not known), as OpenAI sends it.
 *            After an SSE stream has started the same object is sent as the
 *            final `data:` event instead (api_sse.h).
 * Ownership: sl_api_error lives on the caller's stack; bodies are malloc'd
 *            strings the caller frees.
 * Errors:    rendering fails only on allocation (NULL). */
#ifndef SL_API_ERROR_H
#define SL_API_ERROR_H

#include <stdarg.h>

#include "shared/status.h"

/* The error classes a client can see. Each fixes the HTTP status, type and
 * default code (see the table in docs/API.md). */
typedef enum {
    SL_API_ERR_INVALID_REQUEST = 0, /* 400 invalid_request_error (a field is wrong) */
    SL_API_ERR_CONTEXT_LENGTH,      /* 400 invalid_request_error, code context_length_exceeded */
    SL_API_ERR_UNAUTHORIZED,        /* 401 authentication_error, code invalid_api_key */
    SL_API_ERR_NOT_FOUND,           /* 404 not_found_error (route or model) */
    SL_API_ERR_METHOD_NOT_ALLOWED,  /* 405 invalid_request_error, code method_not_allowed */
    SL_API_ERR_TOO_LARGE,           /* 413 invalid_request_error, code request_too_large */
    SL_API_ERR_QUEUE_FULL,          /* 429 rate_limit_error, code queue_full; send Retry-After */
    SL_API_ERR_INTERNAL,            /* 500 server_error */
    SL_API_ERR_UNAVAILABLE,         /* 503 unavailable_error (worker down, draining) */
} sl_api_err_kind;

#define SL_API_PARAM_LEN 96     /* longest `param` path kept ("messages[12].content[3].text") */

typedef struct {
    sl_api_err_kind kind;
    const char *code;                /* static string or NULL = the kind's default */
    char param[SL_API_PARAM_LEN];    /* "" = null */
    char message[SL_ERR_LEN];
    int retry_after_s;               /* > 0: send `Retry-After: n` (queue full) */
} sl_api_error;

/* Fills `e`: kind, param (NULL = null), code NULL, message from printf-style
 * fmt (truncated to SL_ERR_LEN-1 bytes at a UTF-8 boundary), retry_after_s 1
 * for SL_API_ERR_QUEUE_FULL else 0. */
void sl_api_error_set(sl_api_error *e, sl_api_err_kind kind, const char *param,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void sl_api_error_vset(sl_api_error *e, sl_api_err_kind kind, const char *param,
                       const char *fmt, va_list ap);

/* The internal-status mapping: SL_AGAIN -> queue full (429), SL_EINVAL and
 * SL_EFORMAT -> 400, SL_ERANGE -> 400 context_length_exceeded,
 * SL_EUNSUPPORTED -> 400 (code unsupported), SL_ESTALE and SL_ESTATE -> 503,
 * anything else (SL_ENOMEM, SL_EIO, SL_EBACKEND, unknown) -> 500. */
sl_api_err_kind sl_api_error_kind_of(sl_status rc);

/* The one mapping from an internal status + message + param to what is sent:
 * fills `e` as sl_api_error_set(e, sl_api_error_kind_of(rc), param, "%s", msg)
 * (msg NULL = the status name), then returns the HTTP status and sets *body
 * to the malloc'd error JSON (NULL when out of memory: send the status with
 * an empty body). */
int sl_api_error_from_status(sl_api_error *e, sl_status rc, const char *param,
                             const char *msg, char **body);

int sl_api_error_http_status(sl_api_err_kind kind);
const char *sl_api_error_type(sl_api_err_kind kind);
/* The code sent: e->code if set, else the kind's default (may be NULL). */
const char *sl_api_error_code(const sl_api_error *e);

/* Renders {"error":{...}} compact; malloc'd, NULL on allocation failure.
 * Returns the HTTP status through *http (may be NULL). */
char *sl_api_error_body(const sl_api_error *e, int *http);

#endif
