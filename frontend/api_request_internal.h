/* frontend/api_request_internal.h: what the api_request_*.c files share.
 * Where:     api_request.c (body, messages, prompt, sampling, limits),
 *            api_request_fields.c (the table of every known field),
 *            api_request_tools.c (tools, tool_choice, legacy functions,
 *            template kwargs, reasoning_format), api_request_format.c
 *            (response_format and the constraint extensions -> GBNF).
 * Who:       those files only; not part of the front end's interface.
 * Errors:    every helper returns false with err filled (400 with param
 *            named, or 500 for out of memory), so a parse step reads
 *            `if (!step(r, err)) return false;`. */
#ifndef SL_API_REQUEST_INTERNAL_H
#define SL_API_REQUEST_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>

#include "frontend/api_request.h"

/* A wrong JSON type: code invalid_type. */
static inline bool sl_api_req_type_error(sl_api_error *err, const char *key, const char *want)
{
    sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, key, "Invalid type for '%s': expected %s", key, want);
    err->code = "invalid_type";
    return false;
}

/* A value out of range or inconsistent with another field: code invalid_value. */
static inline bool sl_api_req_value_error(sl_api_error *err, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool sl_api_req_value_error(sl_api_error *err, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_api_error_vset(err, SL_API_ERR_INVALID_REQUEST, key, fmt, ap);
    va_end(ap);
    err->code = "invalid_value";
    return false;
}

/* A well-formed value asking for what this server does not do: code
 * unsupported (still 400: the request, not the server, must change). */
static inline bool sl_api_req_unsupported(sl_api_error *err, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool sl_api_req_unsupported(sl_api_error *err, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_api_error_vset(err, SL_API_ERR_INVALID_REQUEST, key, fmt, ap);
    va_end(ap);
    err->code = "unsupported";
    return false;
}

static inline bool sl_api_req_oom(sl_api_error *err)
{
    sl_api_error_set(err, SL_API_ERR_INTERNAL, NULL, "out of memory");
    return false;
}

/* The member, with JSON null read as absent (OpenAI treats null as not given). */
static inline json_t *sl_api_req_field(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* True when s is 1..64 bytes of [a-zA-Z0-9_-] (OpenAI's rule for function
 * and json_schema names). */
bool sl_api_req_name_ok(const char *s);

/* Every top-level key of the body is known for r->endpoint, and each field
 * that is accepted without effect or refused has been checked (fields with
 * an implementation are left to it). */
bool sl_api_req_check_fields(const sl_api_request *r, sl_api_error *err);

/* functions/function_call (rewritten as tools/tool_choice), tools,
 * tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_format.
 * May add "tools" and "tool_choice" members to r->_root. */
bool sl_api_req_parse_tools(sl_api_request *r, sl_api_error *err);

/* response_format and the constraint extensions -> r->grammar (malloc'd),
 * compiled once here so that a bad grammar is a 400 and not a worker error.
 * Runs after sl_api_req_parse_tools (a forced tool call excludes a format). */
bool sl_api_req_parse_format(sl_api_request *r, sl_api_error *err);

#endif
