/* tests/unit/frontend/alloc_sweep_test.c: allocation failure swept by
 * countdown (shared/alloc.h) through the request parser and the response and
 * chunk builders, jansson included: for N = 1, 2, ... the Nth allocation
 * fails; each run must end with a clean out-of-memory result (500 for the
 * parser, NULL for a builder) and leak nothing (LSan, at exit), until an N
 * past the last allocation succeeds. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_json.h"
#include "frontend/api_request.h"
#include "frontend/api_response.h"
#include "shared/alloc.h"

#define MAX_N 2000

static const char body[] =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}],"
    "\"max_tokens\":8,\"temperature\":0.5,\"top_p\":0.9,\"stop\":[\"a\",\"bc\"],"
    "\"logprobs\":true,\"top_logprobs\":3,\"logit_bias\":{\"5\":-100,\"7\":2},"
    "\"stream\":true,\"stream_options\":{\"include_usage\":true}}";

static void setup(void)
{
    sl_api_json_use_sl_alloc();
}

/* Runs one armed call; true when it injected a failure. */
#define ARMED(n, stmt)                         \
    do {                                       \
        int before_ = sl_alloc_failures();     \
        sl_alloc_fail_after(n);                \
        stmt;                                  \
        sl_alloc_fail_after(0);                \
        fired = sl_alloc_failures() > before_; \
    } while (0)

Test(alloc_sweep, request_parse, .init = setup)
{
    int n;
    for (n = 1; n <= MAX_N; n++) {
        sl_api_request r;
        memset(&r, 0, sizeof r);
        sl_api_error e;
        memset(&e, 0, sizeof e);
        sl_status rc;
        bool fired;
        ARMED(n, rc = sl_api_request_parse(&r, SL_API_ENDPOINT_CHAT, body, strlen(body), 1000, &e));
        if (fired) {
            cr_assert_lt(rc, 0, "N=%d: rc %d", n, rc);
            cr_assert_eq(e.kind, SL_API_ERR_INTERNAL, "N=%d: %s", n, e.message);
        } else {
            cr_assert_eq(rc, SL_OK, "N=%d: %s", n, e.message);
            cr_assert_eq(r.n_stop, 2);
        }
        sl_api_request_fini(&r);
        if (!fired)
            break;
    }
    cr_assert(n > 1 && n <= MAX_N, "N=%d", n);
}

/* The tool and format paths: legacy functions rewritten into tools, a named
 * choice, and a constraint turned into GBNF. */
static const char tools_body[] =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
    "\"functions\":[{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},{\"name\":\"g\"}],"
    "\"function_call\":\"auto\",\"chat_template_kwargs\":{\"enable_thinking\":false},"
    "\"guided_choice\":[\"yes\",\"no\"],\"metadata\":{\"k\":\"v\"}}";

Test(alloc_sweep, request_parse_tools_and_format, .init = setup)
{
    int n;
    for (n = 1; n <= MAX_N; n++) {
        sl_api_request r;
        memset(&r, 0, sizeof r);
        sl_api_error e;
        memset(&e, 0, sizeof e);
        sl_status rc;
        bool fired;
        ARMED(n, rc = sl_api_request_parse(&r, SL_API_ENDPOINT_CHAT, tools_body, strlen(tools_body), 1000, &e));
        if (fired) {
            cr_assert_lt(rc, 0, "N=%d: rc %d", n, rc);
            cr_assert_eq(e.kind, SL_API_ERR_INTERNAL, "N=%d: %s", n, e.message);
        } else {
            cr_assert_eq(rc, SL_OK, "N=%d: %s", n, e.message);
            cr_assert_eq(json_array_size(r.tools), 2);
            cr_assert_not_null(r.grammar);
        }
        sl_api_request_fini(&r);
        if (!fired)
            break;
    }
    cr_assert(n > 1 && n <= MAX_N, "N=%d", n);
}

static sl_api_token_logprob token(void)
{
    sl_api_token_logprob t;
    memset(&t, 0, sizeof t);
    t.chosen = (sl_api_token_alt){"Hi", 2, -0.25f};
    t.n_top = 2;
    t.top[0] = (sl_api_token_alt){"Hi", 2, -0.25f};
    t.top[1] = (sl_api_token_alt){"\xe2\x82", 2, -1.5f};
    return t;
}

Test(alloc_sweep, response_and_chunk_build, .init = setup)
{
    int n;
    for (n = 1; n <= MAX_N; n++) {
        bool fired, any = false;
        sl_api_logprobs lp;
        sl_status rc;
        ARMED(n, rc = sl_api_logprobs_init(&lp, SL_API_ENDPOINT_CHAT, 0));
        any |= fired;
        cr_assert_eq(rc, fired ? SL_ENOMEM : SL_OK, "N=%d", n);
        sl_api_token_logprob t = token();
        char *whole = NULL, *chunk = NULL;
        if (rc == SL_OK) {
            ARMED(n, rc = sl_api_logprobs_push(&lp, &t));
            any |= fired;
            cr_assert_eq(rc, fired ? SL_ENOMEM : SL_OK, "N=%d", n);
        }
        if (rc == SL_OK) {
            sl_api_timings tm = {1, 2.0, 3, 4.0};
            sl_api_result r = {.endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-1", .created = 1, .model = "m",
                               .text = "Hi", .text_len = 2, .finish = SL_API_FINISH_LENGTH,
                               .usage = {1, 1}, .timings = &tm, .logprobs = &lp};
            ARMED(n, whole = sl_api_response_build(&r));
            any |= fired;
            cr_assert_eq(whole == NULL, fired, "N=%d", n);
            sl_api_chunk c = {.endpoint = SL_API_ENDPOINT_CHAT, .kind = SL_API_CHUNK_TEXT, .id = "chatcmpl-1",
                              .created = 1, .model = "m", .text = "Hi", .text_len = 2, .logprobs = &lp,
                              .include_usage = true};
            ARMED(n, chunk = sl_api_chunk_build(&c));
            any |= fired;
            cr_assert_eq(chunk == NULL, fired, "N=%d", n);
        }
        if (whole) {
            json_t *o = json_loads(whole, 0, NULL);
            cr_assert_not_null(o);
            json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                              "logprobs"), "content");
            cr_assert_eq(json_array_size(content), 1, "N=%d: %s", n, whole);
            json_decref(o);
        }
        free(whole);
        free(chunk);
        sl_api_logprobs_fini(&lp);
        if (!any)
            break;
    }
    cr_assert(n > 1 && n <= MAX_N, "N=%d", n);
}

/* The tool call parser (each format, a whole answer with calls and text) and
 * the forcing grammar: out of memory is SL_ENOMEM, never content or a crash. */
#include "frontend/tool_calls.h"

Test(alloc_sweep, tool_calls_parse, .init = setup)
{
    static const struct { sl_tool_format f; const char *text; } cases[] = {
        {SL_TOOL_FORMAT_HERMES, "Hi <tool_call>{\"name\": \"add\", \"arguments\": {\"a\": [1, {\"b\": 2}]}}</tool_call> "
                                "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call> bye"},
        {SL_TOOL_FORMAT_LLAMA3, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"x\": 1}}; "
                                "{\"name\": \"add\", \"parameters\": {}}"},
        {SL_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]add[ARGS]{\"a\": 1}[TOOL_CALLS]add[ARGS]{}"},
    };
    json_t *tools = json_pack("[{s:s,s:{s:s}}]", "type", "function", "function", "name", "add");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n;
        for (n = 1; n <= MAX_N; n++) {
            json_t *calls = NULL;
            char *content = NULL;
            sl_status rc;
            bool fired;
            ARMED(n, rc = sl_tool_calls_parse(cases[c].f, tools, cases[c].text, strlen(cases[c].text), &calls,
                                              &content));
            if (fired) {
                cr_assert_eq(rc, SL_ENOMEM, "case %zu N=%d: rc %d", c, n, rc);
                cr_assert_null(calls);
                cr_assert_null(content);
            } else {
                cr_assert_eq(rc, SL_OK, "case %zu N=%d", c, n);
                cr_assert_eq(json_array_size(calls), 2, "case %zu N=%d", c, n);
            }
            json_decref(calls);
            free(content);
            if (!fired)
                break;
        }
        cr_assert_lt(n, MAX_N);
    }
    json_decref(tools);
}

Test(alloc_sweep, tool_calls_grammar, .init = setup)
{
    json_t *tools = json_pack("[{s:s,s:{s:s,s:{s:s}}},{s:s,s:{s:s}}]", "type", "function", "function", "name",
                              "get_weather", "parameters", "type", "object", "type", "function", "function", "name",
                              "add");
    char *want = NULL;
    sl_api_error e0;
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, NULL, true, &want, &e0), SL_OK);
    int n;
    for (n = 1; n <= MAX_N; n++) {
        char *g = NULL;
        sl_api_error e;
        sl_status rc;
        bool fired;
        ARMED(n, rc = sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, NULL, true, &g, &e));
        if (fired && rc == SL_OK) {
            /* a failure the schema compiler absorbed (a cache it can do without): the text is whole */
            cr_assert_str_eq(g, want, "N=%d", n);
        } else if (fired) {
            cr_assert_eq(rc, SL_ENOMEM, "N=%d: rc %d", n, rc);
            cr_assert_eq(e.kind, SL_API_ERR_INTERNAL);
            cr_assert_null(g);
        } else {
            cr_assert_eq(rc, SL_OK, "N=%d: %s", n, e.message);
        }
        free(g);
        if (!fired)
            break;
    }
    cr_assert_lt(n, MAX_N);
    free(want);
    json_decref(tools);
}

/* A whole answer of three choices (n = 3): every choice's allocation too. */
Test(alloc_sweep, multi_choice_response_build, .init = setup)
{
    int n;
    for (n = 1; n <= MAX_N; n++) {
        sl_api_timings tm = {1, 2.0, 9, 4.0};
        sl_api_result r[3] = {
            {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "cmpl-1", .created = 1, .model = "m", .text = "a",
             .text_len = 1, .finish = SL_API_FINISH_STOP, .usage = {1, 9}, .timings = &tm},
            {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .text = "bb", .text_len = 2, .finish = SL_API_FINISH_LENGTH},
            {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .text = "ccc", .text_len = 3, .finish = SL_API_FINISH_STOP},
        };
        bool fired;
        char *whole = NULL;
        ARMED(n, whole = sl_api_response_build_n(r, 3));
        cr_assert_eq(whole == NULL, fired, "N=%d", n);
        if (!fired)
            cr_assert_not_null(strstr(whole, "\"index\":2"));
        free(whole);
        if (!fired)
            break;
    }
    cr_assert(n > 1 && n <= MAX_N, "N=%d", n);
}
