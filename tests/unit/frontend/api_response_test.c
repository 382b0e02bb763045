/* tests/unit/frontend/api_response_test.c: frontend/api_response.c. Every
 * object is parsed back with jansson and checked field by field against
 * OpenAI's (and llama-server's) names; the last test runs a whole streamed
 * request through the API layer. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_response.h"
#include "frontend/api_sse.h"
#include "frontend/api_stop.h"
#include "tests/unit/frontend/json_expect.h"

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
        .usage = {.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens = 8}, .timings = &t,
    };
    char *s = sl_api_response_build(&r);
    /* UTF-8 goes out as UTF-8, not \u escapes; compact (no spaces after ':'). */
    cr_expect_not_null(strstr(s, "h\xc3\xa9llo"));
    cr_expect_null(strstr(s, "\\u"));
    cr_expect_null(strstr(s, "\": "));
    json_t *o = json_expect_load(s);
    json_expect_keys(o, (const char *[]){"id", "object", "created", "model", "choices", "usage", "timings", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "chatcmpl-abc");
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion");
    cr_expect_eq(json_integer_value(json_object_get(o, "created")), 1700000000);
    cr_expect_str_eq(json_string_value(json_object_get(o, "model")), "tiny");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    cr_assert_eq(json_array_size(json_object_get(o, "choices")), 1);
    json_expect_keys(ch, (const char *[]){"index", "message", "logprobs", "finish_reason", NULL});
    cr_expect_eq(json_integer_value(json_object_get(ch, "index")), 0);
    cr_expect(json_is_null(json_object_get(ch, "logprobs")));
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    json_t *msg = json_object_get(ch, "message");
    json_expect_keys(msg, (const char *[]){"role", "content", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "content")), text);
    json_t *u = json_object_get(o, "usage");
    json_expect_keys(u, (const char *[]){"prompt_tokens", "completion_tokens", "total_tokens",
                                         "prompt_tokens_details", NULL});
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")), 14);
    /* OpenAI's field for prompt tokens served from the prefix cache */
    json_t *details = json_object_get(u, "prompt_tokens_details");
    json_expect_keys(details, (const char *[]){"cached_tokens", NULL});
    cr_expect_eq(json_integer_value(json_object_get(details, "cached_tokens")), 8);
    json_t *tm = json_object_get(o, "timings");
    json_expect_keys(tm, (const char *[]){"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
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
    json_t *o = json_expect_load(s);
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    json_expect_keys(ch, (const char *[]){"index", "text", "logprobs", "finish_reason", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(ch, "text")), "abc");
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
    /* no division by zero: derived rates are 0 */
    cr_expect_float_eq(json_number_value(json_object_get(json_object_get(o, "timings"), "prompt_per_second")), 0.0, 0);
    json_decref(o);
    free(s);
    r.timings = NULL;
    r.text = NULL;
    s = sl_api_response_build(&r);
    o = json_expect_load(s);
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
    json_t *o = json_expect_load(s);
    json_t *l = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    json_expect_keys(l, (const char *[]){"content", NULL});
    json_t *c = json_object_get(l, "content");
    cr_assert_eq(json_array_size(c), 2);
    json_t *e0 = json_array_get(c, 0);
    json_expect_keys(e0, (const char *[]){"token", "logprob", "bytes", "top_logprobs", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(e0, "token")), "Hi");
    cr_expect_float_eq(json_number_value(json_object_get(e0, "logprob")), -0.25, 1e-9);
    json_t *bytes = json_object_get(e0, "bytes");
    cr_expect_eq(json_array_size(bytes), 2);
    cr_expect_eq(json_integer_value(json_array_get(bytes, 0)), 'H');
    json_t *top = json_object_get(e0, "top_logprobs");
    cr_assert_eq(json_array_size(top), 2);
    json_expect_keys(json_array_get(top, 1), (const char *[]){"token", "logprob", "bytes", NULL});
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
    json_t *o = json_expect_load(s);
    json_t *l = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    json_expect_keys(l, (const char *[]){"tokens", "token_logprobs", "top_logprobs", "text_offset", NULL});
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
    json_t *o = json_expect_load(s);
    free(s);
    return o;
}

Test(api_response, chat_stream_chunks_in_order)
{
    sl_api_usage u = {.prompt_tokens = 3, .completion_tokens = 2, .cached_tokens = 0};
    sl_api_timings t = {.prompt_n = 3, .prompt_ms = 3, .predicted_n = 2, .predicted_ms = 4};
    sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-z", .created = 9,
                      .model = "m", .include_usage = true};

    c.kind = SL_API_CHUNK_ROLE;
    json_t *o = chunk(&c);
    json_expect_keys(o, (const char *[]){"id", "object", "created", "model", "choices", "usage", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion.chunk");
    cr_expect(json_is_null(json_object_get(o, "usage")));
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    json_expect_keys(ch, (const char *[]){"index", "delta", "logprobs", "finish_reason", NULL});
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "role")), "assistant");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "content")), "");
    cr_expect(json_is_null(json_object_get(ch, "finish_reason")));
    json_decref(o);

    c.kind = SL_API_CHUNK_TEXT;
    c.text = "w\xc3\xb6rld";
    c.text_len = strlen(c.text);
    o = chunk(&c);
    ch = json_array_get(json_object_get(o, "choices"), 0);
    json_expect_keys(json_object_get(ch, "delta"), (const char *[]){"content", NULL});
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
    cr_expect_eq(json_integer_value(json_object_get(
                     json_object_get(json_object_get(o, "usage"), "prompt_tokens_details"), "cached_tokens")), 0,
                 "the streaming usage chunk carries cached_tokens too");
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
    json_expect_keys(ch, (const char *[]){"index", "text", "logprobs", "finish_reason", NULL});
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

Test(api_response, models_list)
{
    char *s = sl_api_models_build("tiny-q4", 1700000000);
    cr_expect_str_eq(s, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny-q4\",\"object\":\"model\","
                        "\"created\":1700000000,\"owned_by\":\"sluice\"}]}");
    free(s);
}

/* ------------------------------------------------------------ whole flow */

/* What the server will do per streamed request, minus HTTP: parse, run the
 * decoded pieces through the stop matcher, build chunks, frame them. */
Test(api_response, stream_flow_from_request_to_sse)
{
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"stop\":[\"<|end|>\"]}";
    sl_api_request req;
    sl_api_error err;
    cr_assert_eq(sl_api_request_parse(&req, SL_API_ENDPOINT_CHAT, body, strlen(body), 100, &err), SL_OK);
    sl_api_stop stop;
    cr_assert_eq(sl_api_stop_init(&stop, req.stop, req.stop_len, req.n_stop), SL_OK);
    char id[SL_API_ID_LEN];
    sl_api_id_make(id, req.endpoint);
    sl_api_chunk c = {.endpoint = req.endpoint, .id = id, .created = 1, .model = "m",
                      .include_usage = req.include_usage};
    char sse[8192];
    size_t n = 0;
#define EMIT(json) do { char *j_ = (json); cr_assert_not_null(j_); \
        n += sl_api_sse_frame(sse + n, sizeof sse - n, j_, strlen(j_)); free(j_); } while (0)
    c.kind = SL_API_CHUNK_ROLE;
    EMIT(sl_api_chunk_build(&c));
    static const char *const pieces[] = {"Hel", "lo", " there", "<|", "end", "|>", "ignored"};
    int generated = 0;
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0] && !stop.hit; i++, generated++) {
        const char *e;
        size_t el;
        cr_assert_eq(sl_api_stop_push(&stop, pieces[i], strlen(pieces[i]), &e, &el), SL_OK);
        if (!el) continue;
        c.kind = SL_API_CHUNK_TEXT;
        c.text = e;
        c.text_len = el;
        EMIT(sl_api_chunk_build(&c));
    }
    cr_assert(stop.hit);
    c.kind = SL_API_CHUNK_FINISH;
    c.text = NULL;
    c.text_len = 0;
    c.finish = SL_API_FINISH_STOP;
    EMIT(sl_api_chunk_build(&c));
    sl_api_usage u = {.prompt_tokens = 5, .completion_tokens = generated};
    c.kind = SL_API_CHUNK_USAGE;
    c.usage = &u;
    EMIT(sl_api_chunk_build(&c));
#undef EMIT
    memcpy(sse + n, SL_API_SSE_DONE, sizeof SL_API_SSE_DONE);
    n += sizeof SL_API_SSE_DONE - 1;

    /* Read it back as a client would: concatenate the deltas. */
    char text[256] = "";
    int events = 0;
    bool done = false, saw_usage = false;
    for (char *ev = sse; ev < sse + n;) {
        char *end = strstr(ev, "\n\n");
        cr_assert_not_null(end);
        *end = '\0';
        cr_assert_eq(strncmp(ev, "data: ", 6), 0);
        events++;
        if (strcmp(ev + 6, "[DONE]") == 0) { done = true; break; }
        json_t *o = json_expect_load(ev + 6);
        cr_expect_str_eq(json_string_value(json_object_get(o, "id")), id);
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        if (ch) {
            const char *d = json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
            if (d) strcat(text, d);
        } else {
            saw_usage = json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")) == 6;
        }
        json_decref(o);
        ev = end + 2;
    }
    cr_expect(done);
    cr_expect(saw_usage);
    cr_expect_str_eq(text, "Hello there");
    cr_expect_eq(events, 1 + 3 + 1 + 1 + 1);   /* role, 3 text, finish, usage, DONE */
    sl_api_stop_fini(&stop);
    sl_api_request_fini(&req);
}

Test(api_response, chat_message_with_tool_calls_and_reasoning)
{
    json_t *calls = json_pack("[{s:s,s:s,s:{s:s,s:s}}]", "id", "call_abc", "type", "function", "function", "name",
                              "add", "arguments", "{\"a\":1}");
    sl_api_result r = {.endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-x", .model = "m", .text = "",
                       .finish = SL_API_FINISH_TOOL_CALLS, .content_null = true, .reasoning = "hmm",
                       .reasoning_len = 3, .tool_calls = calls};
    char *s = sl_api_response_build(&r);
    json_t *o = json_expect_load(s);
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    json_expect_keys(msg, (const char *[]){"role", "content", "reasoning_content", "tool_calls", NULL});
    cr_assert(json_is_null(json_object_get(msg, "content")));
    cr_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "hmm");
    cr_assert(json_equal(json_object_get(msg, "tool_calls"), calls));
    cr_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_decref(o);
    free(s);
    json_decref(calls);
}

Test(api_response, delta_chunk_carries_the_given_delta_and_logprobs)
{
    json_t *d = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", 0, "function", "arguments", "{}");
    sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_CHAT, .kind = SL_API_CHUNK_DELTA, .id = "chatcmpl-x",
                      .model = "m", .delta = d};
    char *s = sl_api_chunk_build(&c);
    json_t *o = json_expect_load(s);
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    cr_assert(json_equal(json_object_get(ch, "delta"), d));
    cr_assert(json_is_null(json_object_get(ch, "finish_reason")));
    cr_assert(json_is_null(json_object_get(ch, "logprobs")));
    json_decref(o);
    free(s);
    json_decref(d);
}

/* ----------------------------------------------------------- n choices */

Test(api_response, whole_response_with_three_choices_in_index_order)
{
    sl_api_timings t = {.prompt_n = 5, .prompt_ms = 10.0, .predicted_n = 9, .predicted_ms = 9.0};
    sl_api_logprobs lp;
    cr_assert_eq(sl_api_logprobs_init(&lp, SL_API_ENDPOINT_CHAT, 0), SL_OK);
    sl_api_token_logprob tl = {.chosen = {"b", 1, -0.5f}};
    cr_assert_eq(sl_api_logprobs_push(&lp, &tl), SL_OK);
    json_t *calls = json_pack("[{s:s,s:s,s:{s:s,s:s}}]", "id", "call_1", "type", "function", "function", "name",
                              "f", "arguments", "{}");
    sl_api_result r[3] = {
        {.endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-n", .created = 7, .model = "tiny", .text = "a",
         .text_len = 1, .finish = SL_API_FINISH_STOP, .timings = &t,
         .usage = {.prompt_tokens = 5, .completion_tokens = 9, .cached_tokens = 4}},
        {.text = "b", .text_len = 1, .finish = SL_API_FINISH_LENGTH, .logprobs = &lp, .reasoning = "hm",
         .reasoning_len = 2},
        {.content_null = true, .finish = SL_API_FINISH_TOOL_CALLS, .tool_calls = calls},
    };
    for (int i = 1; i < 3; i++)
        r[i].endpoint = SL_API_ENDPOINT_CHAT;   /* every choice's shape is its endpoint's */
    char *s = sl_api_response_build_n(r, 3);
    json_t *o = json_expect_load(s);
    json_t *ch = json_object_get(o, "choices");
    cr_assert_eq(json_array_size(ch), 3);
    static const char *const fin[] = {"stop", "length", "tool_calls"};
    for (int i = 0; i < 3; i++) {
        json_t *c = json_array_get(ch, (size_t)i);
        json_expect_keys(c, (const char *[]){"index", "message", "logprobs", "finish_reason", NULL});
        cr_expect_eq(json_integer_value(json_object_get(c, "index")), i);
        cr_expect_str_eq(json_string_value(json_object_get(c, "finish_reason")), fin[i]);
    }
    json_t *m0 = json_object_get(json_array_get(ch, 0), "message");
    json_t *m1 = json_object_get(json_array_get(ch, 1), "message");
    json_t *m2 = json_object_get(json_array_get(ch, 2), "message");
    cr_expect_str_eq(json_string_value(json_object_get(m0, "content")), "a");
    cr_expect(json_is_null(json_object_get(json_array_get(ch, 0), "logprobs")));
    cr_expect_str_eq(json_string_value(json_object_get(m1, "reasoning_content")), "hm");
    json_t *lc = json_object_get(json_object_get(json_array_get(ch, 1), "logprobs"), "content");
    cr_expect_eq(json_array_size(lc), 1);
    cr_expect(json_is_null(json_object_get(m2, "content")));
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(m2, "tool_calls"), 0), "id")),
                     "call_1");
    /* usage and timings are the request's, once */
    json_t *u = json_object_get(o, "usage");
    cr_expect_eq(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
    cr_expect_eq(json_integer_value(json_object_get(u, "completion_tokens")), 9);
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")), 14);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 4);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, "timings"), "predicted_n")), 9);
    json_decref(o);
    free(s);
    json_decref(calls);
    sl_api_logprobs_fini(&lp);
    cr_expect_null(sl_api_response_build_n(r, 0));
}

Test(api_response, completion_with_two_choices)
{
    sl_api_result r[2] = {
        {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "cmpl-n", .created = 7, .model = "tiny", .text = "x",
         .text_len = 1, .finish = SL_API_FINISH_STOP, .usage = {.prompt_tokens = 2, .completion_tokens = 6}},
        {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .text = "yz", .text_len = 2, .finish = SL_API_FINISH_LENGTH},
    };
    char *s = sl_api_response_build_n(r, 2);
    json_t *o = json_expect_load(s);
    cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "cmpl-n");
    json_t *ch = json_object_get(o, "choices");
    cr_assert_eq(json_array_size(ch), 2);
    json_t *c1 = json_array_get(ch, 1);
    json_expect_keys(c1, (const char *[]){"index", "text", "logprobs", "finish_reason", NULL});
    cr_expect_eq(json_integer_value(json_object_get(c1, "index")), 1);
    cr_expect_str_eq(json_string_value(json_object_get(c1, "text")), "yz");
    cr_expect_str_eq(json_string_value(json_object_get(c1, "finish_reason")), "length");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 6);
    cr_expect_null(json_object_get(o, "timings"));
    json_decref(o);
    free(s);
}

Test(api_response, chunks_carry_their_choice_index)
{
    sl_api_usage u = {.prompt_tokens = 3, .completion_tokens = 7, .cached_tokens = 2};
    json_t *d = json_pack("{s:s}", "reasoning_content", "r");
    for (int ep = 0; ep < 2; ep++) {
        sl_api_chunk c = {.endpoint = ep ? SL_API_ENDPOINT_COMPLETIONS : SL_API_ENDPOINT_CHAT, .id = "x",
                          .model = "m", .include_usage = true};
        sl_api_chunk_kind kinds[] = {SL_API_CHUNK_ROLE, SL_API_CHUNK_TEXT, SL_API_CHUNK_DELTA, SL_API_CHUNK_FINISH};
        for (int k = ep ? 1 : 0; k < 4; k++) {
            if (ep && kinds[k] == SL_API_CHUNK_DELTA)
                continue;   /* chat only */
            c.kind = kinds[k];
            c.index = 2 + k;
            c.text = "t";
            c.text_len = 1;
            c.delta = d;
            c.finish = SL_API_FINISH_LENGTH;
            json_t *o = chunk(&c);
            json_t *ch = json_object_get(o, "choices");
            cr_assert_eq(json_array_size(ch), 1, "one choice per chunk");
            cr_expect_eq(json_integer_value(json_object_get(json_array_get(ch, 0), "index")), 2 + k);
            json_decref(o);
        }
        /* the usage chunk has no choice: the request's sums */
        c.kind = SL_API_CHUNK_USAGE;
        c.index = 5;
        c.usage = &u;
        json_t *o = chunk(&c);
        cr_expect_eq(json_array_size(json_object_get(o, "choices")), 0);
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 7);
        json_decref(o);
    }
    json_decref(d);
}

/* echo with logprobs: the prompt's first token is unscored (token_logprobs
 * and top_logprobs null), the next ones scored; text_offset runs from 0 over
 * the echoed text and may be set to continue past it. */
Test(api_response, completion_logprobs_unscored_first_prompt_token)
{
    sl_api_logprobs lp;
    cr_assert_eq(sl_api_logprobs_init(&lp, SL_API_ENDPOINT_COMPLETIONS, 0), SL_OK);
    sl_api_token_logprob a = tok("Once", 4, 0.0f);
    a.unscored = true;
    a.n_top = 1;                     /* ignored when unscored */
    a.top[0] = (sl_api_token_alt){"x", 1, -1.0f};
    sl_api_token_logprob b = tok(" upon", 5, -3.5f);
    b.n_top = 1;
    b.top[0] = (sl_api_token_alt){" upon", 5, -3.5f};
    cr_assert_eq(sl_api_logprobs_push(&lp, &a), SL_OK);
    cr_assert_eq(sl_api_logprobs_push(&lp, &b), SL_OK);
    cr_expect_eq(lp.text_offset, 9);
    sl_api_result r = {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "x", .model = "m",
                       .text = "Once upon", .text_len = 9, .logprobs = &lp, .finish = SL_API_FINISH_LENGTH};
    char *s = sl_api_response_build(&r);
    sl_api_logprobs_fini(&lp);
    json_t *o = json_expect_load(s);
    json_t *l = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    json_t *tl = json_object_get(l, "token_logprobs"), *top = json_object_get(l, "top_logprobs");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(l, "tokens"), 0)), "Once");
    cr_expect(json_is_null(json_array_get(tl, 0)));
    cr_expect(json_is_null(json_array_get(top, 0)));
    cr_expect_float_eq(json_number_value(json_array_get(tl, 1)), -3.5, 0);
    cr_expect_float_eq(json_number_value(json_object_get(json_array_get(top, 1), " upon")), -3.5, 0);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 0)), 0);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 1)), 4);
    json_decref(o);
    free(s);
}

/* ---------------------------------------------------- system_fingerprint */

Test(api_response, system_fingerprint_follows_model_in_responses_and_chunks)
{
    sl_api_result r = {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "cmpl-a", .created = 1, .model = "m",
                       .system_fingerprint = "fp_0123456789ab", .text = "x", .text_len = 1,
                       .finish = SL_API_FINISH_STOP};
    char *s = sl_api_response_build(&r);
    cr_assert_not_null(s);
    cr_expect_not_null(strstr(s, "\"model\":\"m\",\"system_fingerprint\":\"fp_0123456789ab\",\"choices\""), "%s", s);
    free(s);
    sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_CHAT, .kind = SL_API_CHUNK_ROLE, .id = "chatcmpl-a", .created = 1,
                      .model = "m", .system_fingerprint = "fp_0123456789ab"};
    for (int k = SL_API_CHUNK_ROLE; k <= SL_API_CHUNK_USAGE; k++) {
        sl_api_usage u = {1, 1, 0};
        c.kind = (sl_api_chunk_kind)k;
        c.usage = &u;
        json_t *o = chunk(&c);
        cr_expect_str_eq(json_string_value(json_object_get(o, "system_fingerprint")), "fp_0123456789ab");
        json_decref(o);
    }
    /* NULL: no such field */
    r.system_fingerprint = NULL;
    s = sl_api_response_build(&r);
    cr_expect_null(strstr(s, "system_fingerprint"));
    free(s);
}
