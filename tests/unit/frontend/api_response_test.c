/* tests/unit/frontend/api_response_test.c: frontend/api_response.c,
 * api_error.c and api_sse.c. Every object is parsed back with jansson and
 * checked field by field against OpenAI's (and llama-server's) names. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_error.h"
#include "frontend/api_json.h"
#include "frontend/api_response.h"
#include "frontend/api_sse.h"

static json_t *load(const char *s)
{
    cr_assert_not_null(s);
    json_error_t je;
    json_t *v = json_loads(s, 0, &je);
    cr_assert_not_null(v, "not JSON: %s (%s)", s, je.text);
    return v;
}

/* Keys of `o` exactly `keys` (NULL-terminated), in any order. */
static void expect_keys(json_t *o, const char *const *keys)
{
    size_t n = 0;
    for (; keys[n]; n++)
        cr_expect_not_null(json_object_get(o, keys[n]), "missing key %s", keys[n]);
    cr_expect_eq(json_object_size(o), n, "object has %zu keys, want %zu", json_object_size(o), n);
}

/* ------------------------------------------------------------------ ids */

Test(api_response, ids_have_prefix_hex_and_are_unique)
{
    enum { N = 2000 };
    char (*ids)[SL_API_ID_LEN] = malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++) sl_api_id_make(ids[i], i & 1 ? SL_API_ENDPOINT_CHAT : SL_API_ENDPOINT_COMPLETIONS);
    for (int i = 0; i < N; i++) {
        const char *p = i & 1 ? "chatcmpl-" : "cmpl-";
        cr_assert_eq(strncmp(ids[i], p, strlen(p)), 0, "%s", ids[i]);
        const char *h = ids[i] + strlen(p);
        cr_assert_eq(strlen(h), 32);
        cr_assert_eq(strspn(h, "0123456789abcdef"), 32);
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) cr_assert_str_neq(ids[i], ids[j]);
    free(ids);
}

/* ------------------------------------------------------- whole responses */

Test(api_response, chat_completion_has_openai_fields)
{
    sl_api_timings t = {.prompt_n = 10, .prompt_ms = 20.0, .predicted_n = 4, .predicted_ms = 8.0};
    const char *text = "h\xc3\xa9llo \xf0\x9f\x98\x80\n\"q\"";
    sl_api_result r = {
        .endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-abc", .created = 1700000000,
        .model = "tiny", .text = text, .text_len = strlen(text), .finish = SL_API_FINISH_STOP,
        .usage = {.prompt_tokens = 10, .completion_tokens = 4}, .timings = &t,
    };
    char *s = sl_api_response_build(&r);
    /* UTF-8 goes out as UTF-8, not \u escapes; compact (no spaces after ':'). */
    cr_expect_not_null(strstr(s, "h\xc3\xa9llo"));
    cr_expect_null(strstr(s, "\\u"));
    cr_expect_null(strstr(s, "\": "));
    json_t *o = load(s);
    expect_keys(o, (const char *[]){"id", "object", "created", "model", "choices", "usage", "timings", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "chatcmpl-abc");
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion");
    cr_expect_eq(json_integer_value(json_object_get(o, "created")), 1700000000);
    cr_expect_str_eq(json_string_value(json_object_get(o, "model")), "tiny");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    cr_assert_eq(json_array_size(json_object_get(o, "choices")), 1);
    expect_keys(ch, (const char *[]){"index", "message", "logprobs", "finish_reason", NULL});
    cr_expect_eq(json_integer_value(json_object_get(ch, "index")), 0);
    cr_expect(json_is_null(json_object_get(ch, "logprobs")));
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    json_t *msg = json_object_get(ch, "message");
    expect_keys(msg, (const char *[]){"role", "content", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "content")), text);
    json_t *u = json_object_get(o, "usage");
    expect_keys(u, (const char *[]){"prompt_tokens", "completion_tokens", "total_tokens", NULL});
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")), 14);
    json_t *tm = json_object_get(o, "timings");
    expect_keys(tm, (const char *[]){"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                                     "predicted_n", "predicted_ms", "predicted_per_token_ms",
                                     "predicted_per_second", NULL});
    cr_expect_eq(json_integer_value(json_object_get(tm, "prompt_n")), 10);
    cr_expect_float_eq(json_number_value(json_object_get(tm, "prompt_per_token_ms")), 2.0, 1e-9);
    cr_expect_float_eq(json_number_value(json_object_get(tm, "prompt_per_second")), 500.0, 1e-9);
    cr_expect_float_eq(json_number_value(json_object_get(tm, "predicted_per_token_ms")), 2.0, 1e-9);
    cr_expect_float_eq(json_number_value(json_object_get(tm, "predicted_per_second")), 500.0, 1e-9);
    json_decref(o);
    free(s);
}

Test(api_response, text_completion_and_zero_timings)
{
    sl_api_timings t = {0};
    sl_api_result r = {
        .endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "cmpl-1", .created = 5, .model = "m",
        .text = "abc", .text_len = 3, .finish = SL_API_FINISH_LENGTH,
        .usage = {.prompt_tokens = 2, .completion_tokens = 3}, .timings = &t,
    };
    char *s = sl_api_response_build(&r);
    json_t *o = load(s);
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    expect_keys(ch, (const char *[]){"index", "text", "logprobs", "finish_reason", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(ch, "text")), "abc");
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
    /* no division by zero: derived rates are 0 */
    cr_expect_float_eq(json_number_value(json_object_get(json_object_get(o, "timings"), "prompt_per_second")), 0.0, 0);
    json_decref(o);
    free(s);
    r.timings = NULL;
    r.text = NULL;
    s = sl_api_response_build(&r);
    o = load(s);
    cr_expect_null(json_object_get(o, "timings"));
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text")), "");
    json_decref(o);
    free(s);
}

/* --------------------------------------------------------------- logprobs */

static sl_api_token_logprob tok(const char *text, size_t len, float lp)
{
    sl_api_token_logprob t;
    memset(&t, 0, sizeof t);
    t.chosen = (sl_api_token_alt){text, len, lp};
    return t;
}

Test(api_response, chat_logprobs_have_token_bytes_and_top)
{
    sl_api_logprobs lp;
    cr_assert_eq(sl_api_logprobs_init(&lp, SL_API_ENDPOINT_CHAT, 0), SL_OK);
    sl_api_token_logprob a = tok("Hi", 2, -0.25f);
    a.n_top = 2;
    a.top[0] = (sl_api_token_alt){"Hi", 2, -0.25f};
    a.top[1] = (sl_api_token_alt){"Hey", 3, -1.5f};
    cr_assert_eq(sl_api_logprobs_push(&lp, &a), SL_OK);
    sl_api_token_logprob b = tok("\xe2\x82", 2, -INFINITY);   /* first 2 bytes of the euro sign */
    cr_assert_eq(sl_api_logprobs_push(&lp, &b), SL_OK);
    sl_api_result r = {.endpoint = SL_API_ENDPOINT_CHAT, .id = "x", .model = "m", .text = "Hi",
                       .text_len = 2, .finish = SL_API_FINISH_STOP, .logprobs = &lp};
    char *s = sl_api_response_build(&r);
    sl_api_logprobs_fini(&lp);
    json_t *o = load(s);
    json_t *l = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    expect_keys(l, (const char *[]){"content", NULL});
    json_t *c = json_object_get(l, "content");
    cr_assert_eq(json_array_size(c), 2);
    json_t *e0 = json_array_get(c, 0);
    expect_keys(e0, (const char *[]){"token", "logprob", "bytes", "top_logprobs", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(e0, "token")), "Hi");
    cr_expect_float_eq(json_number_value(json_object_get(e0, "logprob")), -0.25, 1e-9);
    json_t *bytes = json_object_get(e0, "bytes");
    cr_expect_eq(json_array_size(bytes), 2);
    cr_expect_eq(json_integer_value(json_array_get(bytes, 0)), 'H');
    json_t *top = json_object_get(e0, "top_logprobs");
    cr_assert_eq(json_array_size(top), 2);
    expect_keys(json_array_get(top, 1), (const char *[]){"token", "logprob", "bytes", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(top, 1), "token")), "Hey");
    json_t *e1 = json_array_get(c, 1);
    cr_expect_str_eq(json_string_value(json_object_get(e1, "token")), "\xef\xbf\xbd");  /* U+FFFD */
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(e1, "bytes"), 0)), 0xe2);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(e1, "bytes"), 1)), 0x82);
    cr_expect_float_eq(json_number_value(json_object_get(e1, "logprob")), -9999.0, 0);
    cr_expect_eq(json_array_size(json_object_get(e1, "top_logprobs")), 0);
    json_decref(o);
    free(s);
}

Test(api_response, completion_logprobs_are_parallel_arrays)
{
    sl_api_logprobs lp;
    cr_assert_eq(sl_api_logprobs_init(&lp, SL_API_ENDPOINT_COMPLETIONS, 7), SL_OK);
    sl_api_token_logprob a = tok(" the", 4, -0.5f);
    a.n_top = 2;
    a.top[0] = (sl_api_token_alt){" the", 4, -0.5f};
    a.top[1] = (sl_api_token_alt){" a", 2, -1.0f};
    sl_api_token_logprob b = tok(" cat", 4, -2.0f);
    cr_assert_eq(sl_api_logprobs_push(&lp, &a), SL_OK);
    cr_assert_eq(sl_api_logprobs_push(&lp, &b), SL_OK);
    sl_api_result r = {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "x", .model = "m",
                       .text = " the cat", .text_len = 8, .logprobs = &lp};
    char *s = sl_api_response_build(&r);
    sl_api_logprobs_fini(&lp);
    json_t *o = load(s);
    json_t *l = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    expect_keys(l, (const char *[]){"tokens", "token_logprobs", "top_logprobs", "text_offset", NULL});
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(l, "tokens"), 1)), " cat");
    cr_expect_float_eq(json_number_value(json_array_get(json_object_get(l, "token_logprobs"), 1)), -2.0, 0);
    json_t *t0 = json_array_get(json_object_get(l, "top_logprobs"), 0);
    cr_expect(json_is_object(t0));
    cr_expect_float_eq(json_number_value(json_object_get(t0, " a")), -1.0, 0);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 0)), 7);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 1)), 11);
    /* null finish_reason while running */
    cr_expect(json_is_null(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "finish_reason")));
    json_decref(o);
    free(s);
}

/* ----------------------------------------------------------------- chunks */

static json_t *chunk(const sl_api_chunk *c)
{
    char *s = sl_api_chunk_build(c);
    cr_assert_null(strchr(s, '\n'), "a chunk must be one line: %s", s);
    json_t *o = load(s);
    free(s);
    return o;
}

Test(api_response, chat_stream_chunks_in_order)
{
    sl_api_usage u = {.prompt_tokens = 3, .completion_tokens = 2};
    sl_api_timings t = {.prompt_n = 3, .prompt_ms = 3, .predicted_n = 2, .predicted_ms = 4};
    sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-z", .created = 9,
                      .model = "m", .include_usage = true};

    c.kind = SL_API_CHUNK_ROLE;
    json_t *o = chunk(&c);
    expect_keys(o, (const char *[]){"id", "object", "created", "model", "choices", "usage", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion.chunk");
    cr_expect(json_is_null(json_object_get(o, "usage")));
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    expect_keys(ch, (const char *[]){"index", "delta", "logprobs", "finish_reason", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "role")), "assistant");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "content")), "");
    cr_expect(json_is_null(json_object_get(ch, "finish_reason")));
    json_decref(o);

    c.kind = SL_API_CHUNK_TEXT;
    c.text = "w\xc3\xb6rld";
    c.text_len = strlen(c.text);
    o = chunk(&c);
    ch = json_array_get(json_object_get(o, "choices"), 0);
    expect_keys(json_object_get(ch, "delta"), (const char *[]){"content", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "content")), "w\xc3\xb6rld");
    json_decref(o);

    c.kind = SL_API_CHUNK_FINISH;
    c.text = NULL;
    c.text_len = 0;
    c.finish = SL_API_FINISH_LENGTH;
    o = chunk(&c);
    ch = json_array_get(json_object_get(o, "choices"), 0);
    cr_expect_eq(json_object_size(json_object_get(ch, "delta")), 0);
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_decref(o);

    c.kind = SL_API_CHUNK_USAGE;
    c.usage = &u;
    c.timings = &t;
    o = chunk(&c);
    cr_expect_eq(json_array_size(json_object_get(o, "choices")), 0);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")), 5);
    cr_expect_float_eq(json_number_value(json_object_get(json_object_get(o, "timings"), "predicted_per_second")),
                       500.0, 1e-9);
    json_decref(o);

    /* without include_usage there is no usage key at all */
    c.include_usage = false;
    c.kind = SL_API_CHUNK_TEXT;
    c.text = "x";
    c.text_len = 1;
    o = chunk(&c);
    cr_expect_null(json_object_get(o, "usage"));
    json_decref(o);
}

Test(api_response, completion_stream_chunks)
{
    sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .kind = SL_API_CHUNK_TEXT,
                      .id = "cmpl-z", .created = 9, .model = "m", .text = "ab", .text_len = 2};
    json_t *o = chunk(&c);
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    expect_keys(ch, (const char *[]){"index", "text", "logprobs", "finish_reason", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(ch, "text")), "ab");
    json_decref(o);
    c.kind = SL_API_CHUNK_FINISH;
    c.finish = SL_API_FINISH_STOP;
    c.text = NULL;
    c.text_len = 0;
    o = chunk(&c);
    ch = json_array_get(json_object_get(o, "choices"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(ch, "text")), "");
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    json_decref(o);
}

Test(api_response, invalid_utf8_text_becomes_replacement_chars)
{
    sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_CHAT, .kind = SL_API_CHUNK_TEXT, .id = "i",
                      .model = "m", .text = "a\xff" "b\xe2\x82", .text_len = 5};
    json_t *o = chunk(&c);
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "content")),
                     "a\xef\xbf\xbd" "b\xef\xbf\xbd");
    json_decref(o);
}

/* ------------------------------------------------------------------ UTF-8 */

Test(api_json, utf8_prefix_and_floor)
{
    cr_expect_eq(sl_api_utf8_valid_prefix("abc", 3), 3);
    cr_expect_eq(sl_api_utf8_valid_prefix("a\xc3\xa9", 3), 3);
    cr_expect_eq(sl_api_utf8_valid_prefix("a\xc3", 2), 1);
    cr_expect_eq(sl_api_utf8_valid_prefix("a\xc0\xaf", 3), 1);            /* overlong */
    cr_expect_eq(sl_api_utf8_valid_prefix("\xed\xa0\x80", 3), 0);         /* surrogate */
    cr_expect_eq(sl_api_utf8_valid_prefix("\xf4\x90\x80\x80", 4), 0);     /* > U+10FFFF */
    cr_expect_eq(sl_api_utf8_valid_prefix("\xf0\x9f\x98\x80", 4), 4);
    cr_expect_eq(sl_api_utf8_floor("ab\xe2\x82", 4), 2);
    cr_expect_eq(sl_api_utf8_floor("ab\xe2\x82\xac", 5), 5);
    cr_expect_eq(sl_api_utf8_floor("ab\xf0\x9f\x98", 5), 2);
    cr_expect_eq(sl_api_utf8_floor("abc", 3), 3);
}

/* ----------------------------------------------------------------- errors */

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
        json_t *o = load(s);
        expect_keys(o, (const char *[]){"error", NULL});
        json_t *in = json_object_get(o, "error");
        expect_keys(in, (const char *[]){"message", "type", "param", "code", NULL});
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
        json_t *o = load(body);
        cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "message")),
                         i % 2 ? "why" : sl_status_name(t[i].rc));
        json_decref(o);
        free(body);
    }
    sl_api_error e;
    char *body;
    sl_api_error_from_status(&e, SL_ERANGE, "messages", "prompt is 5000 tokens, context 4096", &body);
    json_t *o = load(body);
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
    json_t *o = load(s);
    json_decref(o);
    free(s);
}

/* -------------------------------------------------------------------- SSE */

Test(api_sse, frames_data_events)
{
    char out[64];
    size_t n = sl_api_sse_frame(out, sizeof out, "{\"a\":1}", 7);
    cr_assert_eq(n, strlen("data: {\"a\":1}\n\n"));
    cr_expect(memcmp(out, "data: {\"a\":1}\n\n", n) == 0);
    n = sl_api_sse_frame(out, sizeof out, "l1\nl2\r\nl3", 9);
    cr_assert_eq(n, strlen("data: l1\ndata: l2\ndata: l3\n\n"));
    cr_expect(memcmp(out, "data: l1\ndata: l2\ndata: l3\n\n", n) == 0);
    /* size query and truncation never write past cap */
    cr_expect_eq(sl_api_sse_frame(NULL, 0, "xyz", 3), 11);
    memset(out, '#', sizeof out);
    cr_expect_eq(sl_api_sse_frame(out, 4, "xyz", 3), 11);
    cr_expect_eq(out[4], '#');
    size_t m;
    char *d = sl_api_sse_frame_dup("", 0, &m);
    cr_expect_str_eq(d, "data: \n\n");
    cr_expect_eq(m, 8);
    free(d);
    cr_expect_str_eq(SL_API_SSE_DONE, "data: [DONE]\n\n");
    cr_expect_str_eq(SL_API_SSE_PING, ": ping\n\n");
}

Test(api_sse, error_event_is_one_data_line_with_error_object)
{
    sl_api_error e;
    sl_api_error_set(&e, SL_API_ERR_INTERNAL, NULL, "worker died\nmid-stream");
    size_t n;
    char *s = sl_api_sse_error(&e, &n);
    cr_assert_not_null(s);
    cr_expect_eq(strncmp(s, "data: {\"error\":", 15), 0, "%s", s);
    cr_expect_eq(strlen(s), n);
    cr_expect_str_eq(s + n - 2, "\n\n");
    cr_expect_null(strchr(s, '\n') == s + n - 2 ? NULL : strchr(s, '\n'));  /* one line only */
    json_t *o = load(s + 6);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "type")), "server_error");
    json_decref(o);
    free(s);
}
