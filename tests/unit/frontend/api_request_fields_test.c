/* tests/unit/frontend/api_request_fields_test.c: frontend/api_request_fields.c
 * and api_request_tools.c: every field is implemented, accepted as a
 * documented no-op or refused by name (status, param, code and a message
 * that says why), and the tool fields land in the struct. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_request.h"

#define N_VOCAB 1000
#define CHAT SL_API_ENDPOINT_CHAT
#define CMPL SL_API_ENDPOINT_COMPLETIONS
#define M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define P "\"prompt\":\"hi\""
#define TOOL(n) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\"}}"
#define TOOLS "\"tools\":[" TOOL("get_weather") "," TOOL("get-time_2") "]"

typedef struct {
    sl_api_endpoint ep;
    const char *body;
    const char *param;      /* expected param */
    const char *says;       /* a substring of the message */
    const char *code;       /* expected code; NULL = not checked */
} refusal;

static const refusal refused[] = {
    /* unknown to OpenAI and to sluice */
    {CHAT, "{" M ",\"bogus\":1}", "bogus", "unrecognized request argument 'bogus'", NULL},
    {CHAT, "{" M ",\"bogus\":null}", "bogus", "unrecognized request argument", NULL},
    {CMPL, "{" P ",\"n_predict\":5}", "n_predict", "unrecognized request argument 'n_predict'", NULL},
    {CHAT, "{\"Messages\":[]," M "}", "Messages", "unrecognized", NULL},
    /* the wrong endpoint's fields */
    {CMPL, "{" P "," M "}", "messages", "not a parameter of /v1/completions", NULL},
    {CMPL, "{" P ",\"tools\":[]}", "tools", "not a parameter of /v1/completions", NULL},
    {CMPL, "{" P ",\"top_logprobs\":2}", "top_logprobs", "not a parameter", NULL},
    {CHAT, "{" M "," P "}", "prompt", "not a parameter of /v1/chat/completions", NULL},
    {CHAT, "{" M ",\"echo\":false}", "echo", "not a parameter", NULL},
    {CHAT, "{" M ",\"suffix\":\"\"}", "suffix", "not a parameter", NULL},
    /* OpenAI's fields that this server cannot honour */
    {CHAT, "{" M ",\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}", "audio", "generates text only", "unsupported"},
    {CHAT, "{" M ",\"modalities\":[\"text\",\"audio\"]}", "modalities", "text only", "unsupported"},
    {CHAT, "{" M ",\"modalities\":[\"video\"]}", "modalities", "unknown modality", "invalid_value"},
    {CHAT, "{" M ",\"modalities\":\"text\"}", "modalities", "array", "invalid_type"},
    {CHAT, "{" M ",\"prediction\":{\"type\":\"content\",\"content\":\"x\"}}", "prediction", "predicted outputs",
     "unsupported"},
    {CHAT, "{" M ",\"store\":true}", "store", "keeps no completions", "unsupported"},
    {CHAT, "{" M ",\"store\":\"no\"}", "store", "boolean", "invalid_type"},
    {CHAT, "{" M ",\"metadata\":[]}", "metadata", "object", "invalid_type"},
    {CHAT, "{" M ",\"metadata\":{\"k\":1}}", "metadata", "object of strings", "invalid_type"},
    {CHAT, "{" M ",\"metadata\":{\"a\":\"1\",\"b\":\"1\",\"c\":\"1\",\"d\":\"1\",\"e\":\"1\",\"f\":\"1\",\"g\":\"1\","
           "\"h\":\"1\",\"i\":\"1\",\"j\":\"1\",\"k\":\"1\",\"l\":\"1\",\"m\":\"1\",\"n\":\"1\",\"o\":\"1\",\"p\":\"1\","
           "\"q\":\"1\"}}", "metadata", "16 pairs", "invalid_value"},
    {CHAT, "{" M ",\"service_tier\":\"flex\"}", "service_tier", "only \"default\"", "unsupported"},
    {CHAT, "{" M ",\"service_tier\":\"priority\"}", "service_tier", "not offered", "unsupported"},
    {CHAT, "{" M ",\"service_tier\":\"cheap\"}", "service_tier", "unknown service tier", "invalid_value"},
    {CHAT, "{" M ",\"reasoning_effort\":\"low\"}", "reasoning_effort", "chat_template_kwargs", "unsupported"},
    {CHAT, "{" M ",\"verbosity\":\"low\"}", "verbosity", "verbosity", "unsupported"},
    {CHAT, "{" M ",\"web_search_options\":{}}", "web_search_options", "no web search", "unsupported"},
    {CHAT, "{" M ",\"prompt_cache_retention\":\"24h\"}", "prompt_cache_retention", "in memory", "unsupported"},
    {CHAT, "{" M ",\"prompt_cache_retention\":\"1y\"}", "prompt_cache_retention", "in_memory or 24h", NULL},
    {CHAT, "{" M ",\"safety_identifier\":5}", "safety_identifier", "string", "invalid_type"},
    {CHAT, "{" M ",\"prompt_cache_key\":[]}", "prompt_cache_key", "string", "invalid_type"},
    {CHAT, "{" M ",\"n\":17}", "n", "between 1 and 16", "invalid_value"},
    {CHAT, "{" M ",\"n\":\"2\"}", "n", "integer", "invalid_type"},
    /* limits */
    {CHAT, "{" M ",\"max_tokens\":10,\"max_completion_tokens\":20}", "max_completion_tokens", "same limit",
     "invalid_value"},
    {CHAT, "{" M ",\"stream\":true,\"stream_options\":{\"include_obfuscation\":true}}",
     "stream_options.include_obfuscation", "obfuscation", "unsupported"},
    {CHAT, "{" M ",\"stream\":true,\"stream_options\":{\"include_obfuscation\":1}}",
     "stream_options.include_obfuscation", "boolean", "invalid_type"},
    {CHAT, "{" M ",\"stream\":true,\"stream_options\":{\"usage\":true}}", "stream_options.usage",
     "unrecognized argument 'usage'", NULL},
    /* completions */
    {CMPL, "{" P ",\"echo\":1}", "echo", "boolean", "invalid_type"},
    {CMPL, "{" P ",\"best_of\":2}", "best_of", "best_of=1", "unsupported"},
    {CMPL, "{" P ",\"best_of\":0}", "best_of", "between 1 and 20", "invalid_value"},
    {CMPL, "{" P ",\"best_of\":\"2\"}", "best_of", "integer", "invalid_type"},
    {CMPL, "{" P ",\"suffix\":\"}\"}", "suffix", "fill-in-the-middle", "unsupported"},
    {CMPL, "{" P ",\"suffix\":3}", "suffix", "string", "invalid_type"},
    /* tools */
    {CHAT, "{" M ",\"tools\":[]}", "tools", "must not be empty", "invalid_value"},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"function\"}]}", "tools[0].function", "required", NULL},
    {CHAT, "{" M ",\"tools\":[{\"function\":{\"name\":\"f\"}}]}", "tools[0].type", "string", "invalid_type"},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"custom\",\"custom\":{\"name\":\"f\"}}]}", "tools[0].type",
     "only \"function\"", "unsupported"},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":[]}]}", "tools[0].function", "object", NULL},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", "tools[0].function.name", "required", NULL},
    {CHAT, "{" M ",\"tools\":[" TOOL("a b") "]}", "tools[0].function.name", "1 to 64 of", "invalid_value"},
    {CHAT, "{" M ",\"tools\":[" TOOL("") "]}", "tools[0].function.name", "1 to 64 of", "invalid_value"},
    {CHAT, "{" M ",\"tools\":[" TOOL("x12345678901234567890123456789012345678901234567890123456789012345") "]}",
     "tools[0].function.name", "1 to 64 of", "invalid_value"},
    {CHAT, "{" M ",\"tools\":[" TOOL("f") "," TOOL("g") "," TOOL("f") "]}", "tools[2].function.name",
     "appears twice", "invalid_value"},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}",
     "tools[0].function.parameters", "object", "invalid_type"},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":1}}]}",
     "tools[0].function.description", "string", "invalid_type"},
    {CHAT, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":\"yes\"}}]}",
     "tools[0].function.strict", "boolean", "invalid_type"},
    /* tool_choice */
    {CHAT, "{" M ",\"tool_choice\":\"required\"}", "tool_choice", "needs 'tools'", "invalid_value"},
    {CHAT, "{" M ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}", "tool_choice",
     "needs 'tools'", "invalid_value"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":\"always\"}", "tool_choice", "\"required\"", "invalid_value"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
     "tool_choice.function.name", "not the name of one of the tools", "invalid_value"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice.function", "object",
     "invalid_type"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{}}}", "tool_choice.function.name",
     "string", "invalid_type"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"type\":\"allowed_tools\"}}", "tool_choice.type", "only", "unsupported"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"function\":{\"name\":\"get_weather\"}}}", "tool_choice.type",
     "string", "invalid_type"},
    {CHAT, "{" M "," TOOLS ",\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls", "boolean", "invalid_type"},
    /* legacy functions */
    {CHAT, "{" M "," TOOLS ",\"functions\":[{\"name\":\"f\"}]}", "functions", "not both", "invalid_value"},
    {CHAT, "{" M ",\"functions\":{}}", "functions", "array", "invalid_type"},
    {CHAT, "{" M ",\"functions\":[]}", "functions", "must not be empty", "invalid_value"},
    {CHAT, "{" M ",\"functions\":[{\"description\":\"d\"}]}", "functions[0].name", "required", NULL},
    {CHAT, "{" M ",\"functions\":[{\"name\":\"f\"}],\"function_call\":\"force\"}", "function_call", "\"auto\"",
     "invalid_value"},
    {CHAT, "{" M ",\"functions\":[{\"name\":\"f\"}],\"function_call\":{\"name\":\"g\"}}",
     "function_call.function.name", "not the name", "invalid_value"},
    {CHAT, "{" M ",\"functions\":[{\"name\":\"f\"}],\"function_call\":{\"name\":1}}", "function_call.name",
     "string", "invalid_type"},
    {CHAT, "{" M ",\"functions\":[{\"name\":\"f\"}],\"function_call\":\"auto\",\"tool_choice\":\"auto\"}",
     "function_call", "not both", "invalid_value"},
    {CHAT, "{" M ",\"function_call\":{\"name\":\"f\"}}", "function_call", "needs 'tools'", NULL},
    /* template and reasoning */
    {CHAT, "{" M ",\"chat_template_kwargs\":[]}", "chat_template_kwargs", "object", "invalid_type"},
    {CHAT, "{" M ",\"reasoning_format\":\"deepseek-legacy\"}", "reasoning_format", "\"separate\"", "invalid_value"},
    {CHAT, "{" M ",\"reasoning_format\":true}", "reasoning_format", "string", "invalid_type"},
};

Test(api_request_fields, every_refusal_is_400_naming_the_field_and_why)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const refusal *c = &refused[i];
        sl_api_request r;
        sl_api_error e;
        sl_status rc = sl_api_request_parse(&r, c->ep, c->body, strlen(c->body), N_VOCAB, &e);
        cr_expect_eq(rc, SL_EINVAL, "case %zu (%s): rc %d", i, c->body, rc);
        if (rc != SL_EINVAL) { sl_api_request_fini(&r); continue; }
        cr_expect_eq(sl_api_error_http_status(e.kind), 400, "case %zu", i);
        cr_expect_str_eq(e.param, c->param, "case %zu (%s): param '%s' (%s)", i, c->body, e.param, e.message);
        cr_expect(strstr(e.message, c->says) != NULL, "case %zu (%s): message '%s' lacks '%s'", i, c->body,
                  e.message, c->says);
        if (c->code) {
            const char *code = sl_api_error_code(&e);
            cr_expect(code && strcmp(code, c->code) == 0, "case %zu (%s): code %s, want %s", i, c->body,
                      code ? code : "null", c->code);
        }
        sl_api_request_fini(&r);
    }
}

static void parse_ok(sl_api_request *r, sl_api_endpoint ep, const char *body)
{
    sl_api_error e;
    sl_status rc = sl_api_request_parse(r, ep, body, strlen(body), N_VOCAB, &e);
    cr_assert_eq(rc, SL_OK, "%s -> %s (param %s)", body, e.message, e.param);
}

Test(api_request_fields, documented_no_ops_are_accepted)
{
    static const char *const chat[] = {
        "{" M ",\"user\":\"u\",\"metadata\":{\"k\":\"v\"},\"store\":false,\"service_tier\":\"auto\"}",
        "{" M ",\"service_tier\":\"default\",\"safety_identifier\":\"s\",\"prompt_cache_key\":\"k\"}",
        "{" M ",\"prompt_cache_retention\":\"in-memory\",\"modalities\":[\"text\"]}",
        "{" M ",\"prompt_cache_retention\":\"in_memory\"}",
        /* null is "not given", even for fields that would be refused */
        "{" M ",\"audio\":null,\"prediction\":null,\"reasoning_effort\":null,\"web_search_options\":null,"
        "\"verbosity\":null,\"store\":null,\"functions\":null,\"function_call\":null,\"response_format\":null}",
        "{" M ",\"stream\":true,\"stream_options\":{\"include_usage\":false,\"include_obfuscation\":false}}",
        "{" M ",\"max_tokens\":10,\"max_completion_tokens\":10}",
    };
    for (size_t i = 0; i < sizeof chat / sizeof chat[0]; i++) {
        sl_api_request r;
        parse_ok(&r, CHAT, chat[i]);
        cr_expect_null(r.grammar);
        sl_api_request_fini(&r);
    }
    sl_api_request r;
    parse_ok(&r, CMPL, "{" P ",\"echo\":false,\"best_of\":1,\"suffix\":\"\",\"user\":\"u\",\"max_completion_tokens\":3}");
    cr_expect_eq(r.max_tokens, 3);
    sl_api_request_fini(&r);
    parse_ok(&r, CMPL, "{" P ",\"echo\":null,\"best_of\":null,\"suffix\":null}");
    sl_api_request_fini(&r);
}

Test(api_request_fields, unknown_field_is_refused_even_first_or_long)
{
    char body[512];
    sprintf(body, "{\"%0200d\":1," M "}", 7);
    sl_api_request r;
    sl_api_error e;
    cr_assert_eq(sl_api_request_parse(&r, CHAT, body, strlen(body), N_VOCAB, &e), SL_EINVAL);
    cr_expect(strstr(e.message, "unrecognized request argument '0000") != NULL, "%s", e.message);
    cr_expect_eq(strlen(e.param), SL_API_PARAM_LEN - 1);   /* cut, not overrun */
    sl_api_request_fini(&r);
}

/* ------------------------------------------------------------------ tools */

Test(api_request_fields, tool_choice_defaults_follow_openai)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M "," TOOLS "}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_AUTO);
    cr_expect_null(r.tool_choice_name);
    cr_expect(r.parallel_tool_calls);
    cr_expect_eq(json_array_size(r.tools), 2);
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M ",\"tool_choice\":\"auto\"}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NONE);   /* nothing to call */
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M ",\"tool_choice\":\"none\",\"parallel_tool_calls\":false}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NONE);
    cr_expect(!r.parallel_tool_calls);
    sl_api_request_fini(&r);
}

Test(api_request_fields, tool_choice_forms)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M "," TOOLS ",\"tool_choice\":\"none\"}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NONE);
    cr_expect(json_is_array(r.tools));   /* still for the template */
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M "," TOOLS ",\"tool_choice\":\"required\"}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_REQUIRED);
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get-time_2\"}}}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NAMED);
    cr_expect_str_eq(r.tool_choice_name, "get-time_2");
    sl_api_request_fini(&r);
    /* a full function definition, as clients send it */
    parse_ok(&r, CHAT, "{" M ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
                       "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}},"
                       "\"strict\":true}}]}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_AUTO);
    sl_api_request_fini(&r);
}

Test(api_request_fields, legacy_functions_become_tools)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"functions\":[{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},{\"name\":\"g\"}],"
                       "\"function_call\":{\"name\":\"g\"}}");
    cr_assert(json_is_array(r.tools));
    cr_assert_eq(json_array_size(r.tools), 2);
    json_t *t0 = json_array_get(r.tools, 0);
    cr_expect_str_eq(json_string_value(json_object_get(t0, "type")), "function");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(t0, "function"), "name")), "f");
    cr_expect(json_is_object(json_object_get(json_object_get(t0, "function"), "parameters")));
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NAMED);
    cr_expect_str_eq(r.tool_choice_name, "g");
    cr_expect(json_is_object(r.tool_choice));
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M ",\"functions\":[{\"name\":\"f\"}],\"function_call\":\"none\"}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_NONE);
    cr_expect_str_eq(json_string_value(r.tool_choice), "none");
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M ",\"functions\":[{\"name\":\"f\"}]}");
    cr_expect_eq(r.tool_choice_mode, SL_API_TOOL_CHOICE_AUTO);
    sl_api_request_fini(&r);
}

Test(api_request_fields, tool_count_is_bounded)
{
    size_t cap = 64 + (SL_API_TOOLS_MAX + 1) * 64;
    char *b = malloc(cap);
    for (int total = SL_API_TOOLS_MAX; total <= SL_API_TOOLS_MAX + 1; total++) {
        size_t n = (size_t)sprintf(b, "{" M ",\"tools\":[");
        for (int i = 0; i < total; i++)
            n += (size_t)sprintf(b + n, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
        n += (size_t)sprintf(b + n, "]}");
        sl_api_request r;
        sl_api_error e;
        sl_status rc = sl_api_request_parse(&r, CHAT, b, n, N_VOCAB, &e);
        if (total == SL_API_TOOLS_MAX) cr_expect_eq(rc, SL_OK, "%s", e.message);
        else cr_expect(rc == SL_EINVAL && strcmp(e.param, "tools") == 0, "%s", e.message);
        sl_api_request_fini(&r);
    }
    free(b);
}

/* --------------------------------------------------- template, reasoning */

Test(api_request_fields, template_kwargs_are_kept_and_bounded)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"chat_template_kwargs\":{\"enable_thinking\":true,\"x\":[1,{\"y\":\"z\"}]}}");
    cr_assert(json_is_object(r.chat_template_kwargs));
    cr_expect(json_is_true(json_object_get(r.chat_template_kwargs, "enable_thinking")));
    sl_api_request_fini(&r);

    size_t big = SL_API_TEMPLATE_KWARGS_BYTES_MAX;
    char *b = malloc(big + 256);
    size_t n = (size_t)sprintf(b, "{" M ",\"chat_template_kwargs\":{\"s\":\"");
    memset(b + n, 'a', big);
    n += big;
    n += (size_t)sprintf(b + n, "\"}}");
    sl_api_error e;
    cr_expect_eq(sl_api_request_parse(&r, CHAT, b, n, N_VOCAB, &e), SL_EINVAL);
    cr_expect_str_eq(e.param, "chat_template_kwargs");
    cr_expect(strstr(e.message, "at most") != NULL, "%s", e.message);
    free(b);
}

Test(api_request_fields, reasoning_format_names)
{
    static const struct {
        const char *name;
        sl_api_reasoning_format want;
    } cases[] = {
        {"separate", SL_API_REASONING_SEPARATE}, {"deepseek", SL_API_REASONING_SEPARATE},
        {"auto", SL_API_REASONING_SEPARATE},     {"inline", SL_API_REASONING_INLINE},
        {"none", SL_API_REASONING_INLINE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256];
        sprintf(body, "{" M ",\"reasoning_format\":\"%s\"}", cases[i].name);
        sl_api_request r;
        parse_ok(&r, CHAT, body);
        cr_expect_eq(r.reasoning_format, cases[i].want, "%s", cases[i].name);
        sl_api_request_fini(&r);
    }
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"reasoning_format\":null}");
    cr_expect_eq(r.reasoning_format, SL_API_REASONING_SERVER);
    sl_api_request_fini(&r);
}
