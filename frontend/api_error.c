/* frontend/api_error.c: internal status -> OpenAI error object and HTTP
 * status. Runs in the front ends. The table below is the whole policy;
 * docs/API.md repeats it for clients. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "frontend/api_error.h"
#include "frontend/api_json.h"

static const struct {
    int http;
    const char *type;
    const char *code;   /* default code, NULL = null */
} kinds[] = {
    [SL_API_ERR_INVALID_REQUEST]    = {400, "invalid_request_error", NULL},
    [SL_API_ERR_CONTEXT_LENGTH]     = {400, "invalid_request_error", "context_length_exceeded"},
    [SL_API_ERR_UNAUTHORIZED]       = {401, "authentication_error", "invalid_api_key"},
    [SL_API_ERR_NOT_FOUND]          = {404, "not_found_error", NULL},
    [SL_API_ERR_METHOD_NOT_ALLOWED] = {405, "invalid_request_error", "method_not_allowed"},
    [SL_API_ERR_TOO_LARGE]          = {413, "invalid_request_error", "request_too_large"},
    [SL_API_ERR_QUEUE_FULL]         = {429, "rate_limit_error", "queue_full"},
    [SL_API_ERR_INTERNAL]           = {500, "server_error", NULL},
    [SL_API_ERR_UNAVAILABLE]        = {503, "unavailable_error", NULL},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

static sl_api_err_kind clamp_kind(sl_api_err_kind k)
{
    return (unsigned)k < N_KINDS ? k : SL_API_ERR_INTERNAL;
}

void sl_api_error_vset(sl_api_error *e, sl_api_err_kind kind, const char *param,
                       const char *fmt, va_list ap)
{
    e->kind = clamp_kind(kind);
    e->code = NULL;
    e->param[0] = '\0';
    if (param) snprintf(e->param, sizeof e->param, "%s", param);
    int n = vsnprintf(e->message, sizeof e->message, fmt, ap);
    /* A message cut mid-character would make the JSON string invalid. */
    if (n >= (int)sizeof e->message) {
        size_t keep = sl_api_utf8_floor(e->message, sizeof e->message - 1);
        e->message[keep] = '\0';
    }
    e->retry_after_s = e->kind == SL_API_ERR_QUEUE_FULL ? 1 : 0;
}

void sl_api_error_set(sl_api_error *e, sl_api_err_kind kind, const char *param,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_api_error_vset(e, kind, param, fmt, ap);
    va_end(ap);
}

sl_api_err_kind sl_api_error_kind_of(sl_status rc)
{
    switch (rc) {
    case SL_AGAIN:        return SL_API_ERR_QUEUE_FULL;
    case SL_EINVAL:
    case SL_EFORMAT:
    case SL_EUNSUPPORTED: return SL_API_ERR_INVALID_REQUEST;
    case SL_ERANGE:       return SL_API_ERR_CONTEXT_LENGTH;
    case SL_ESTALE:
    case SL_ESTATE:       return SL_API_ERR_UNAVAILABLE;
    default:              return SL_API_ERR_INTERNAL;
    }
}

int sl_api_error_http_status(sl_api_err_kind kind)
{
    return kinds[clamp_kind(kind)].http;
}

const char *sl_api_error_type(sl_api_err_kind kind)
{
    return kinds[clamp_kind(kind)].type;
}

const char *sl_api_error_code(const sl_api_error *e)
{
    return e->code ? e->code : kinds[clamp_kind(e->kind)].code;
}

char *sl_api_error_body(const sl_api_error *e, int *http)
{
    if (http) *http = sl_api_error_http_status(e->kind);
    const char *code = sl_api_error_code(e);
    json_t *inner = json_object();
    json_t *root = json_object();
    char *out = NULL;
    if (!inner || !root) goto done;
    json_object_set_new(inner, "message",
                        sl_api_json_string_lossy(e->message, strnlen(e->message, sizeof e->message)));
    json_object_set_new(inner, "type", json_string(sl_api_error_type(e->kind)));
    json_object_set_new(inner, "param", e->param[0]
                        ? sl_api_json_string_lossy(e->param, strnlen(e->param, sizeof e->param))
                        : json_null());
    json_object_set_new(inner, "code", code ? json_string(code) : json_null());
    json_object_set(root, "error", inner);
    out = sl_api_json_dump(root);
done:
    json_decref(inner);
    json_decref(root);
    return out;
}

int sl_api_error_from_status(sl_api_error *e, sl_status rc, const char *param,
                             const char *msg, char **body)
{
    sl_api_error_set(e, sl_api_error_kind_of(rc), param, "%s", msg ? msg : sl_status_name(rc));
    if (rc == SL_EUNSUPPORTED) e->code = "unsupported";
    int http = 0;
    *body = sl_api_error_body(e, &http);
    return http;
}
