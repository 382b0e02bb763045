/* tests/unit/frontend/api_error_test.c: frontend/api_error.c: every error
 * kind's status, type and code, the status mapping, and message cutting. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_error.h"
#include "frontend/api_json.h"
#include "tests/unit/frontend/json_expect.h"

Test(api_error, every_kind_has_status_type_and_code)
{
    static const struct { sl_api_err_kind k; int http; const char *type; const char *code; } t[] = {
        {SL_API_ERR_INVALID_REQUEST, 400, "invalid_request_error", NULL},
        {SL_API_ERR_CONTEXT_LENGTH, 400, "invalid_request_error", "context_length_exceeded"},
        {SL_API_ERR_UNAUTHORIZED, 401, "authentication_error", "invalid_api_key"},
        {SL_API_ERR_NOT_FOUND, 404, "not_found_error", NULL},
        {SL_API_ERR_METHOD_NOT_ALLOWED, 405, "invalid_request_error", "method_not_allowed"},
        {SL_API_ERR_TOO_LARGE, 413, "invalid_request_error", "request_too_large"},
        {SL_API_ERR_QUEUE_FULL, 429, "rate_limit_error", "queue_full"},
        {SL_API_ERR_INTERNAL, 500, "server_error", NULL},
        {SL_API_ERR_UNAVAILABLE, 503, "unavailable_error", NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sl_api_error e;
        sl_api_error_set(&e, t[i].k, i % 2 ? "max_tokens" : NULL, "problem %zu", i);
        int http = 0;
        char *s = sl_api_error_body(&e, &http);
        cr_expect_eq(http, t[i].http);
        cr_expect_eq(e.retry_after_s, t[i].k == SL_API_ERR_QUEUE_FULL ? 1 : 0);
        json_t *o = json_expect_load(s);
        json_expect_keys(o, (const char *[]){"error", NULL});
        json_t *in = json_object_get(o, "error");
        json_expect_keys(in, (const char *[]){"message", "type", "param", "code", NULL});
        char want[32];
        snprintf(want, sizeof want, "problem %zu", i);
        cr_expect_str_eq(json_string_value(json_object_get(in, "message")), want);
        cr_expect_str_eq(json_string_value(json_object_get(in, "type")), t[i].type);
        if (i % 2) cr_expect_str_eq(json_string_value(json_object_get(in, "param")), "max_tokens");
        else cr_expect(json_is_null(json_object_get(in, "param")));
        if (t[i].code) cr_expect_str_eq(json_string_value(json_object_get(in, "code")), t[i].code);
        else cr_expect(json_is_null(json_object_get(in, "code")));
        json_decref(o);
        free(s);
    }
}

Test(api_error, statuses_map_to_http)
{
    static const struct { sl_status rc; int http; } t[] = {
        {SL_AGAIN, 429}, {SL_EINVAL, 400}, {SL_EFORMAT, 400}, {SL_EUNSUPPORTED, 400},
        {SL_ERANGE, 400}, {SL_ESTALE, 503}, {SL_ESTATE, 503}, {SL_ENOMEM, 500},
        {SL_EIO, 500}, {SL_EBACKEND, 500}, {-999, 500},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sl_api_error e;
        char *body = NULL;
        int http = sl_api_error_from_status(&e, t[i].rc, NULL, i % 2 ? "why" : NULL, &body);
        cr_expect_eq(http, t[i].http, "rc %d -> %d", t[i].rc, http);
        json_t *o = json_expect_load(body);
        cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "message")),
                         i % 2 ? "why" : sl_status_name(t[i].rc));
        json_decref(o);
        free(body);
    }
    sl_api_error e;
    char *body;
    sl_api_error_from_status(&e, SL_ERANGE, "messages", "prompt is 5000 tokens, context 4096", &body);
    json_t *o = json_expect_load(body);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "code")), "context_length_exceeded");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "param")), "messages");
    json_decref(o);
    free(body);
}

Test(api_error, long_message_is_cut_on_a_character_boundary)
{
    char big[600];
    size_t n = 0;
    while (n + 2 < sizeof big) { big[n++] = '\xc3'; big[n++] = '\xa9'; }   /* "é" * 299 */
    big[n] = '\0';
    sl_api_error e;
    sl_api_error_set(&e, SL_API_ERR_INVALID_REQUEST, NULL, "x%s", big);   /* odd offset */
    cr_expect_eq(sl_api_utf8_valid_prefix(e.message, strlen(e.message)), strlen(e.message));
    char *s = sl_api_error_body(&e, NULL);
    json_t *o = json_expect_load(s);
    json_decref(o);
    free(s);
}

