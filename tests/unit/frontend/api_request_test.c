/* tests/unit/frontend/api_request_test.c: frontend/api_request.c on a table
 * of bad bodies (each must give the right status, type, param) and on good
 * bodies (each must land in the right struct fields). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_request.h"

#define N_VOCAB 1000
#define CHAT SL_API_ENDPOINT_CHAT
#define CMPL SL_API_ENDPOINT_COMPLETIONS
#define M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define BAD SL_API_ERR_INVALID_REQUEST
#define NUL_PARAM NULL

typedef struct {
    sl_api_endpoint ep;
    const char *body;
    size_t len;                 /* 0 = strlen(body) */
    const char *param;          /* expected param; NULL = null */
} bad_case;

static char deep_body[512];
#define NUL_BODY "{\"messages\":[{\"role\":\"user\",\"content\":\"a\0b\"}]}"

static const bad_case bad[] = {
    /* not JSON, or not an object */
    {CHAT, "", 0, NUL_PARAM},
    {CHAT, "{", 0, NUL_PARAM},
    {CHAT, "[]", 0, NUL_PARAM},
    {CHAT, "null", 0, NUL_PARAM},
    {CHAT, "\"hi\"", 0, NUL_PARAM},
    {CHAT, "{" M, 0, NUL_PARAM},
    {CHAT, "{" M "} trailing", 0, NUL_PARAM},
    {CHAT, "{" M ",\"messages\":[]}", 0, NUL_PARAM},            /* duplicate key */
    {CHAT, "{'messages':[]}", 0, NUL_PARAM},
    /* messages */
    {CHAT, "{}", 0, "messages"},
    {CHAT, "{\"messages\":null}", 0, "messages"},
    {CHAT, "{\"messages\":\"hi\"}", 0, "messages"},
    {CHAT, "{\"messages\":[]}", 0, "messages"},
    {CHAT, "{\"messages\":[1]}", 0, "messages[0]"},
    {CHAT, "{\"messages\":[{\"content\":\"hi\"}]}", 0, "messages[0].role"},
    {CHAT, "{\"messages\":[{\"role\":5,\"content\":\"hi\"}]}", 0, "messages[0].role"},
    {CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", 0, "messages[0].role"},
    {CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 0, "messages[0].content"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", 0, "messages[0].content"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":42}]}", 0, "messages[0].content"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[]}]}", 0, "messages[0].content"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"hi\"]}]}", 0, "messages[0].content[0]"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}", 0,
     "messages[0].content[0].type"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 0, "messages[0].content[0].text"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\"}]}", 0, "messages[1].content"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[]}]}", 0, "messages[0].tool_calls"},
    {CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":\"x\"}]}", 0, "messages[0].tool_calls"},
    {CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}", 0,
     "messages[0].tool_calls[0].function.name"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\"}]}", 0, "messages[1].content"},
    {CHAT, "{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":5}]}", 0, "messages[0].tool_call_id"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":3}]}", 0, "messages[0].name"},
    /* encoding: jansson refuses these while parsing */
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 0, NUL_PARAM},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", 0, NUL_PARAM},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", 0, NUL_PARAM},  /* UTF-8 surrogate */
    {CHAT, "{\"\xc0\xaf\":1," M "}", 0, NUL_PARAM},                                             /* overlong key */
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}", 0, NUL_PARAM},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 0, NUL_PARAM},
    {CHAT, NUL_BODY, sizeof NUL_BODY - 1, NUL_PARAM},                                         /* raw NUL byte */
    {CHAT, deep_body, 0, NUL_PARAM},
    /* numbers */
    {CHAT, "{" M ",\"temperature\":NaN}", 0, NUL_PARAM},
    {CHAT, "{" M ",\"temperature\":Infinity}", 0, NUL_PARAM},
    {CHAT, "{" M ",\"temperature\":1e999}", 0, NUL_PARAM},
    {CHAT, "{" M ",\"max_tokens\":99999999999999999999999}", 0, NUL_PARAM},
    {CHAT, "{" M ",\"temperature\":-0.5}", 0, "temperature"},
    {CHAT, "{" M ",\"temperature\":2.5}", 0, "temperature"},
    {CHAT, "{" M ",\"temperature\":\"hot\"}", 0, "temperature"},
    {CHAT, "{" M ",\"top_p\":0}", 0, "top_p"},
    {CHAT, "{" M ",\"top_p\":1.5}", 0, "top_p"},
    {CHAT, "{" M ",\"top_k\":-2}", 0, "top_k"},
    {CHAT, "{" M ",\"top_k\":1.5}", 0, "top_k"},
    {CHAT, "{" M ",\"top_k\":1e300}", 0, "top_k"},
    {CHAT, "{" M ",\"min_p\":2}", 0, "min_p"},
    {CHAT, "{" M ",\"presence_penalty\":3}", 0, "presence_penalty"},
    {CHAT, "{" M ",\"frequency_penalty\":-2.5}", 0, "frequency_penalty"},
    {CHAT, "{" M ",\"repetition_penalty\":0}", 0, "repetition_penalty"},
    {CHAT, "{" M ",\"repeat_penalty\":-1}", 0, "repeat_penalty"},
    {CHAT, "{" M ",\"repeat_last_n\":-2}", 0, "repeat_last_n"},
    {CHAT, "{" M ",\"max_tokens\":0}", 0, "max_tokens"},
    {CHAT, "{" M ",\"max_tokens\":-5}", 0, "max_tokens"},
    {CHAT, "{" M ",\"max_tokens\":\"100\"}", 0, "max_tokens"},
    {CHAT, "{" M ",\"max_tokens\":1e30}", 0, "max_tokens"},
    {CHAT, "{" M ",\"max_tokens\":9223372036854775807}", 0, "max_tokens"},
    {CHAT, "{" M ",\"max_completion_tokens\":0}", 0, "max_completion_tokens"},
    {CHAT, "{" M ",\"max_tokens\":5,\"min_tokens\":10}", 0, "min_tokens"},
    {CHAT, "{" M ",\"min_tokens\":-1}", 0, "min_tokens"},
    {CHAT, "{" M ",\"n\":17}", 0, "n"},
    {CHAT, "{" M ",\"n\":-1}", 0, "n"},
    {CHAT, "{" M ",\"n\":1.5}", 0, "n"},
    {CHAT, "{" M ",\"n\":\"2\"}", 0, "n"},
    {CHAT, "{" M ",\"n\":0}", 0, "n"},
    {CHAT, "{" M ",\"seed\":\"x\"}", 0, "seed"},
    {CHAT, "{" M ",\"seed\":1.5}", 0, "seed"},
    /* flags and options */
    {CHAT, "{" M ",\"stream\":\"yes\"}", 0, "stream"},
    {CHAT, "{" M ",\"stream_options\":{\"include_usage\":true}}", 0, "stream_options"},
    {CHAT, "{" M ",\"stream\":true,\"stream_options\":[]}", 0, "stream_options"},
    {CHAT, "{" M ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", 0, "stream_options.include_usage"},
    {CHAT, "{" M ",\"ignore_eos\":\"true\"}", 0, "ignore_eos"},
    {CHAT, "{" M ",\"model\":5}", 0, "model"},
    {CHAT, "{" M ",\"user\":[]}", 0, "user"},
    {CHAT, "{" M ",\"tools\":{}}", 0, "tools"},
    {CHAT, "{" M ",\"tools\":[1]}", 0, "tools[0]"},
    {CHAT, "{" M ",\"tool_choice\":5}", 0, "tool_choice"},
    /* stop */
    {CHAT, "{" M ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 0, "stop"},
    {CHAT, "{" M ",\"stop\":\"\"}", 0, "stop"},
    {CHAT, "{" M ",\"stop\":[\"a\",\"\"]}", 0, "stop[1]"},
    {CHAT, "{" M ",\"stop\":[1]}", 0, "stop[0]"},
    {CHAT, "{" M ",\"stop\":42}", 0, "stop"},
    {CHAT, "{" M ",\"stop\":{\"a\":1}}", 0, "stop"},
    /* logit_bias */
    {CHAT, "{" M ",\"logit_bias\":[]}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"abc\":1}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"-1\":1}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\" 5\":1}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"\":1}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"5\":101}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"5\":-100.5}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"1000\":1}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"99999999999\":1}}", 0, "logit_bias"},
    {CHAT, "{" M ",\"logit_bias\":{\"5\":\"x\"}}", 0, "logit_bias"},
    /* logprobs */
    {CHAT, "{" M ",\"top_logprobs\":3}", 0, "top_logprobs"},
    {CHAT, "{" M ",\"logprobs\":false,\"top_logprobs\":3}", 0, "top_logprobs"},
    {CHAT, "{" M ",\"logprobs\":true,\"top_logprobs\":21}", 0, "top_logprobs"},
    {CHAT, "{" M ",\"logprobs\":true,\"top_logprobs\":-1}", 0, "top_logprobs"},
    {CHAT, "{" M ",\"logprobs\":1}", 0, "logprobs"},
    /* completions */
    {CMPL, "{}", 0, "prompt"},
    {CMPL, "{\"prompt\":null}", 0, "prompt"},
    {CMPL, "{\"prompt\":5}", 0, "prompt"},
    {CMPL, "{\"prompt\":[]}", 0, "prompt"},
    {CMPL, "{\"prompt\":[\"a\",\"b\"]}", 0, "prompt"},
    {CMPL, "{\"prompt\":[1,\"a\"]}", 0, "prompt"},
    {CMPL, "{\"prompt\":[1,1000]}", 0, "prompt"},
    {CMPL, "{\"prompt\":[-1]}", 0, "prompt"},
    {CMPL, "{\"prompt\":[[1,2]]}", 0, "prompt"},
    {CMPL, "{\"prompt\":\"x\",\"logprobs\":6}", 0, "logprobs"},
    {CMPL, "{\"prompt\":\"x\",\"logprobs\":true}", 0, "logprobs"},
    {CMPL, "{\"prompt\":\"x\",\"n\":17}", 0, "n"},
    {CMPL, "{\"prompt\":\"x\",\"max_tokens\":0}", 0, "max_tokens"},
    {CMPL, "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":false}", 0, "max_tokens"},
    {CMPL, "{\"prompt\":\"x\",\"max_completion_tokens\":0}", 0, "max_completion_tokens"},
    {CMPL, "{\"prompt\":\"x\",\"max_tokens\":-1,\"echo\":true}", 0, "max_tokens"},
    {CMPL, "{\"prompt\":\"x\",\"echo\":\"yes\"}", 0, "echo"},
    {CMPL, "{\"prompt\":\"x\",\"max_tokens\":1,\"min_tokens\":2,\"echo\":true}", 0, "min_tokens"},
    {CHAT, "{" M ",\"echo\":true}", 0, "echo"},
    {CHAT, "{" M ",\"max_tokens\":0}", 0, "max_tokens"},
    {CMPL, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 0, "stop"},
};

static void make_deep_body(void)
{
    /* {"messages":[...], "x": [[[[...]]]]} nested past the limit */
    size_t n = (size_t)sprintf(deep_body, "{" M ",\"x\":");
    for (int i = 0; i < 100; i++) deep_body[n++] = '[';
    for (int i = 0; i < 100; i++) deep_body[n++] = ']';
    deep_body[n++] = '}';
    deep_body[n] = '\0';
}

Test(api_request, bad_requests_give_400_with_param)
{
    make_deep_body();
    size_t n = sizeof bad / sizeof bad[0];
    cr_assert_geq(n, 40);
    for (size_t i = 0; i < n; i++) {
        const bad_case *c = &bad[i];
        sl_api_request r;
        sl_api_error e;
        memset(&e, 0x5a, sizeof e);
        size_t len = c->len ? c->len : strlen(c->body);
        sl_status rc = sl_api_request_parse(&r, c->ep, c->body, len, N_VOCAB, &e);
        cr_expect_eq(rc, SL_EINVAL, "case %zu (%s): rc %d", i, c->body, rc);
        if (rc != SL_EINVAL) { sl_api_request_fini(&r); continue; }
        cr_expect_eq(e.kind, BAD, "case %zu: kind %d", i, e.kind);
        cr_expect_eq(sl_api_error_http_status(e.kind), 400);
        cr_expect_str_eq(sl_api_error_type(e.kind), "invalid_request_error");
        cr_expect_str_eq(e.param, c->param ? c->param : "", "case %zu (%s): param '%s' (%s)",
                         i, c->body, e.param, e.message);
        cr_expect_gt(strlen(e.message), 0, "case %zu has no message", i);
        cr_expect_null(r._root, "case %zu kept its JSON", i);
        sl_api_request_fini(&r);   /* safe after a failure */
    }
}

Test(api_request, type_errors_say_invalid_type)
{
    sl_api_request r;
    sl_api_error e;
    const char *b = "{" M ",\"temperature\":\"hot\"}";
    cr_assert_eq(sl_api_request_parse(&r, CHAT, b, strlen(b), N_VOCAB, &e), SL_EINVAL);
    cr_expect_str_eq(sl_api_error_code(&e), "invalid_type");
    b = "{" M ",\"temperature\":7}";
    cr_assert_eq(sl_api_request_parse(&r, CHAT, b, strlen(b), N_VOCAB, &e), SL_EINVAL);
    cr_expect_str_eq(sl_api_error_code(&e), "invalid_value");
}

Test(api_request, deep_nesting_under_the_limit_is_fine)
{
    /* the body (1), chat_template_kwargs (2), then arrays up to the limit */
    char body[256];
    size_t n = (size_t)sprintf(body, "{" M ",\"chat_template_kwargs\":{\"x\":");
    for (int i = 0; i < SL_API_JSON_DEPTH_MAX - 2; i++) body[n++] = '[';
    for (int i = 0; i < SL_API_JSON_DEPTH_MAX - 2; i++) body[n++] = ']';
    body[n++] = '}';
    body[n++] = '}';
    sl_api_request r;
    sl_api_error e;
    cr_assert_eq(sl_api_request_parse(&r, CHAT, body, n, N_VOCAB, &e), SL_OK, "%s", e.message);
    sl_api_request_fini(&r);
    /* brackets inside strings do not count */
    n = (size_t)sprintf(body, "{" M ",\"user\":\"");
    for (int i = 0; i < 100; i++) body[n++] = '[';
    body[n++] = '"';
    body[n++] = '}';
    cr_assert_eq(sl_api_request_parse(&r, CHAT, body, n, N_VOCAB, &e), SL_OK, "%s", e.message);
    sl_api_request_fini(&r);
}

/* ---------------------------------------------------------- good bodies */

static void parse_ok(sl_api_request *r, sl_api_endpoint ep, const char *body)
{
    sl_api_error e;
    sl_status rc = sl_api_request_parse(r, ep, body, strlen(body), N_VOCAB, &e);
    cr_assert_eq(rc, SL_OK, "%s -> %s (param %s)", body, e.message, e.param);
}

Test(api_request, minimal_chat_gets_openai_defaults)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M "}");
    cr_expect_eq(r.endpoint, CHAT);
    cr_expect_null(r.model);
    cr_expect(json_is_array(r.messages));
    cr_expect_eq(json_array_size(r.messages), 1);
    cr_expect_null(r.tools);
    cr_expect_null(r.tool_choice);
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NONE);
    cr_expect_null(r.tool_choice_name);
    cr_expect(r.parallel_tool_calls);
    cr_expect_null(r.chat_template_kwargs);
    cr_expect_eq(r.reasoning_format, SL_API_REASONING_SERVER);
    cr_expect_null(r.grammar);
    cr_expect_eq(r.max_tokens, -1);
    cr_expect_eq(r.min_tokens, 0);
    cr_expect_eq(r.n, 1);
    cr_expect(!r.stream && !r.include_usage && !r.ignore_eos && !r.logprobs && !r.has_seed);
    cr_expect_eq(r.n_stop, 0);
    cr_expect_float_eq(r.sampling.temperature, 1.0f, 1e-7);
    cr_expect_float_eq(r.sampling.top_p, 1.0f, 1e-7);
    cr_expect_eq(r.sampling.top_k, 0);
    cr_expect_eq(r.sampling.n_logprobs, -1);
    cr_expect_eq(r.sampling.n_logit_bias, 0);
    sl_api_request_fini(&r);
}

Test(api_request, full_chat_fills_every_field)
{
    sl_api_request r;
    parse_ok(&r, CHAT,
             "{\"model\":\"tiny\",\"messages\":["
             "{\"role\":\"system\",\"content\":\"be brief\"},"
             "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"dev\"}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}],\"name\":\"bob\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
             "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"},"
             "{\"role\":\"assistant\",\"content\":\"ok\"},"
             "{\"role\":\"user\",\"content\":\"\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80\"}],"
             "\"max_tokens\":50,\"max_completion_tokens\":50,\"min_tokens\":5,"
             "\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,"
             "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repeat_penalty\":1.1,"
             "\"repeat_last_n\":128,\"seed\":-1,\"logit_bias\":{\"5\":-100,\"999\":2.5},"
             "\"stop\":[\"\\n\\n\",\"END\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"logprobs\":true,\"top_logprobs\":3,\"n\":1,\"ignore_eos\":true,\"user\":\"u1\","
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"auto\","
             "\"parallel_tool_calls\":false,\"chat_template_kwargs\":{\"enable_thinking\":false},"
             "\"reasoning_format\":\"inline\",\"response_format\":{\"type\":\"text\"}}");
    cr_expect_str_eq(r.model, "tiny");
    cr_expect_eq(json_array_size(r.messages), 7);
    cr_expect_eq(r.max_tokens, 50);   /* both names, one limit */
    cr_expect_eq(r.min_tokens, 5);
    cr_expect_float_eq(r.sampling.temperature, 0.7f, 1e-6);
    cr_expect_float_eq(r.sampling.top_p, 0.9f, 1e-6);
    cr_expect_eq(r.sampling.top_k, 40);
    cr_expect_float_eq(r.sampling.min_p, 0.05f, 1e-6);
    cr_expect_float_eq(r.sampling.presence_penalty, 0.5f, 1e-6);
    cr_expect_float_eq(r.sampling.frequency_penalty, -0.5f, 1e-6);
    cr_expect_float_eq(r.sampling.repetition_penalty, 1.1f, 1e-6);
    cr_expect_eq(r.sampling.penalty_last_n, 128);
    cr_expect(r.has_seed);
    cr_expect_eq(r.sampling.seed, UINT64_MAX);
    cr_expect_eq(r.sampling.n_logit_bias, 2);
    /* jansson keeps insertion order */
    cr_expect_eq(r.sampling.logit_bias[0].token, 5);
    cr_expect_float_eq(r.sampling.logit_bias[0].bias, -100.0f, 1e-6);
    cr_expect_eq(r.sampling.logit_bias[1].token, 999);
    cr_expect_float_eq(r.sampling.logit_bias[1].bias, 2.5f, 1e-6);
    cr_expect_eq(r.n_stop, 2);
    cr_expect_eq(r.stop_len[0], 2);
    cr_expect(memcmp(r.stop[0], "\n\n", 2) == 0);
    cr_expect_str_eq(r.stop[1], "END");
    cr_expect(r.stream && r.include_usage && r.ignore_eos);
    cr_expect(r.logprobs);
    cr_expect_eq(r.top_logprobs, 3);
    cr_expect_eq(r.sampling.n_logprobs, 3);
    cr_expect_str_eq(r.user, "u1");
    cr_expect(json_is_array(r.tools));
    cr_expect_str_eq(json_string_value(r.tool_choice), "auto");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_AUTO);
    cr_expect(!r.parallel_tool_calls);
    cr_expect(json_is_false(json_object_get(r.chat_template_kwargs, "enable_thinking")));
    cr_expect_eq(r.reasoning_format, SL_API_REASONING_INLINE);
    cr_expect_null(r.grammar);   /* response_format text constrains nothing */
    const char *why = NULL;
    cr_expect_eq(sl_sampling_validate(&r.sampling, N_VOCAB, &why), SL_OK);
    sl_api_request_fini(&r);
}

Test(api_request, nulls_mean_absent_and_aliases_map)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"temperature\":null,\"stop\":null,"
                       "\"logprobs\":null,\"top_logprobs\":null,\"seed\":null,\"top_k\":-1,"
                       "\"repetition_penalty\":1.3,\"max_tokens\":7.0}");
    cr_expect_float_eq(r.sampling.temperature, 1.0f, 1e-7);
    cr_expect_eq(r.max_tokens, 7);   /* integral reals are integers */
    cr_expect_eq(r.sampling.top_k, 0);
    cr_expect_float_eq(r.sampling.repetition_penalty, 1.3f, 1e-6);
    cr_expect(!r.has_seed);
    sl_api_request_fini(&r);
}

Test(api_request, stop_string_and_logprobs_zero)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"stop\":\"###\",\"logprobs\":true,\"temperature\":0}");
    cr_expect_eq(r.n_stop, 1);
    cr_expect_str_eq(r.stop[0], "###");
    cr_expect_eq(r.sampling.n_logprobs, 0);   /* chosen token only */
    cr_expect_float_eq(r.sampling.temperature, 0.0f, 0);
    sl_api_request_fini(&r);
}

Test(api_request, completion_text_prompt)
{
    sl_api_request r;
    parse_ok(&r, CMPL, "{\"prompt\":\"Once upon\",\"max_tokens\":16,\"logprobs\":2,\"echo\":false}");
    cr_expect_eq(r.endpoint, CMPL);
    cr_expect_null(r.messages);
    cr_expect_null(r.tools);
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NONE);
    cr_expect_str_eq(r.prompt, "Once upon");
    cr_expect_eq(r.prompt_len, 9);
    cr_expect_null(r.prompt_tokens);
    cr_expect_eq(r.max_tokens, 16);
    cr_expect(r.logprobs);
    cr_expect_eq(r.sampling.n_logprobs, 2);
    sl_api_request_fini(&r);
}

Test(api_request, completion_prompt_forms)
{
    sl_api_request r;
    parse_ok(&r, CMPL, "{\"prompt\":[1,2,999]}");
    cr_expect_null(r.prompt);
    cr_assert_eq(r.n_prompt_tokens, 3);
    cr_expect_eq(r.prompt_tokens[0], 1);
    cr_expect_eq(r.prompt_tokens[2], 999);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":[\"just one\"]}");
    cr_expect_str_eq(r.prompt, "just one");
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":\"\"}");
    cr_expect_eq(r.prompt_len, 0);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":\"x\",\"logprobs\":0}");
    cr_expect_eq(r.sampling.n_logprobs, 0);
    sl_api_request_fini(&r);
}

Test(api_request, body_need_not_be_nul_terminated)
{
    const char *b = "{\"prompt\":\"abc\"}GARBAGE";
    sl_api_request r;
    sl_api_error e;
    cr_assert_eq(sl_api_request_parse(&r, CMPL, b, strlen("{\"prompt\":\"abc\"}"), N_VOCAB, &e), SL_OK);
    cr_expect_str_eq(r.prompt, "abc");
    sl_api_request_fini(&r);
}

Test(api_request, three_hundred_logit_biases_fit_and_more_do_not)
{
    char *b = malloc(16384);
    for (int total = 300; total <= 301; total++) {
        size_t n = (size_t)sprintf(b, "{" M ",\"logit_bias\":{");
        for (int i = 0; i < total; i++) n += (size_t)sprintf(b + n, "%s\"%d\":1", i ? "," : "", i);
        n += (size_t)sprintf(b + n, "}}");
        sl_api_request r;
        sl_api_error e;
        sl_status rc = sl_api_request_parse(&r, CHAT, b, n, N_VOCAB, &e);
        if (total == 300) {
            cr_expect_eq(rc, SL_OK, "%s", e.message);
            cr_expect_eq(r.sampling.n_logit_bias, 300);
        } else {
            cr_expect_eq(rc, SL_EINVAL);
            cr_expect_str_eq(e.param, "logit_bias");
        }
        sl_api_request_fini(&r);
    }
    free(b);
}

Test(api_request, garbage_bytes_never_crash)
{
    /* A cheap stand-in for the fuzzer: every prefix of a valid body, and
     * the body with each byte flipped, must parse or fail cleanly. */
    const char *src = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"h\xc3\xa9\"}]}],"
                      "\"stop\":[\"a\"],\"logit_bias\":{\"3\":1},\"temperature\":0.5,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}}";
    size_t n = strlen(src);
    char *b = malloc(n);
    for (size_t i = 0; i <= n; i++) {
        sl_api_request r;
        sl_api_error e;
        if (sl_api_request_parse(&r, CHAT, src, i, N_VOCAB, &e) == SL_OK) sl_api_request_fini(&r);
    }
    for (size_t i = 0; i < n; i++) {
        static const unsigned char flips[] = {0x00, 0xff, '"', '[', '{', '}', '\\', '1', 0x80};
        for (size_t f = 0; f < sizeof flips; f++) {
            memcpy(b, src, n);
            b[i] = (char)flips[f];
            sl_api_request r;
            sl_api_error e;
            if (sl_api_request_parse(&r, CHAT, b, n, N_VOCAB, &e) == SL_OK) sl_api_request_fini(&r);
            else cr_expect_eq(e.kind, SL_API_ERR_INVALID_REQUEST);
        }
    }
    free(b);
}

Test(api_request, template_sees_string_content)
{
    /* Text parts are joined with "\n"; a null or absent content (tool calls
     * only, a tool result by id) becomes "": templates such as Qwen3's test
     * `'</think>' in content` and call content.startswith(). */
    sl_api_request r;
    parse_ok(&r, CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
             "{\"type\":\"text\",\"text\":\"\xc3\xa9\"}]},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]},"
             "{\"role\":\"assistant\",\"tool_calls\":[]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c1\"},"
             "{\"role\":\"system\",\"content\":\"kept\"}]}");
    static const char *want[] = {"a\n\xc3\xa9", "", "", "", "kept"};
    cr_assert_eq(json_array_size(r.messages), 5);
    for (size_t i = 0; i < 5; i++) {
        json_t *c = json_object_get(json_array_get(r.messages, i), "content");
        cr_assert(json_is_string(c), "messages[%zu].content", i);
        cr_expect_str_eq(json_string_value(c), want[i], "messages[%zu].content", i);
    }
    cr_expect(json_is_array(json_object_get(json_array_get(r.messages, 1), "tool_calls")));
    sl_api_request_fini(&r);
}

Test(api_request, tiny_value_past_open_bound_is_kept_positive)
{
    /* 5e-324 > 0 is allowed, but as a float it is 0, which the sampler refuses. */
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"top_p\":5e-324,\"repeat_penalty\":1e-300}");
    cr_expect_gt(r.sampling.top_p, 0.0f);
    cr_expect_gt(r.sampling.repetition_penalty, 0.0f);
    sl_api_request_fini(&r);
}

Test(api_request, n_takes_one_to_sixteen_choices)
{
    static const char *const ok[] = {"{" M ",\"n\":1}", "{" M ",\"n\":16}", "{" M ",\"n\":3.0}"};
    static const int32_t want[] = {1, 16, 3};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sl_api_request r;
        parse_ok(&r, CHAT, ok[i]);
        cr_expect_eq(r.n, want[i], "%s", ok[i]);
        sl_api_request_fini(&r);
    }
    sl_api_request r;
    parse_ok(&r, CMPL, "{\"prompt\":\"x\",\"n\":5,\"stream\":true}");
    cr_expect_eq(r.n, 5);
    sl_api_request_fini(&r);
    /* the message names the limit */
    sl_api_error e;
    const char *body = "{" M ",\"n\":17}";
    cr_assert_eq(sl_api_request_parse(&r, CHAT, body, strlen(body), N_VOCAB, &e), SL_EINVAL);
    cr_expect_str_eq(e.param, "n");
    cr_expect(strstr(e.message, "16") != NULL, "%s", e.message);
}

/* echo (completions): true and false parse; with echo, max_tokens (or its
 * newer name) may be 0, the prompt alone (lm-eval-harness's loglikelihood). */
Test(api_request, completion_echo_and_max_tokens_zero)
{
    sl_api_request r;
    parse_ok(&r, CMPL, "{\"prompt\":\"Once upon\",\"echo\":true}");
    cr_expect(r.echo);
    cr_expect_eq(r.max_tokens, -1);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":\"Once upon\",\"echo\":false,\"max_tokens\":3}");
    cr_expect_not(r.echo);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":\"Once upon\",\"echo\":null}");
    cr_expect_not(r.echo);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":[1,2,3],\"echo\":true,\"max_tokens\":0,\"logprobs\":1}");
    cr_expect(r.echo);
    cr_expect_eq(r.max_tokens, 0);
    cr_expect(r.logprobs);
    cr_expect_eq(r.n_prompt_tokens, 3);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{\"prompt\":\"x\",\"echo\":true,\"max_completion_tokens\":0,\"n\":2}");
    cr_expect_eq(r.max_tokens, 0);
    cr_expect_eq(r.n, 2);
    sl_api_request_fini(&r);
}
