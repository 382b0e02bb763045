/* tests/unit/frontend/tool_calls_test.c: frontend/tool_calls.c: format
 * detection, each format's calls, what stays content, and streamed feeds
 * split at every byte giving what the whole answer gives. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/tool_calls.h"

static json_t *tools2(void)
{
    return json_pack("[{s:s,s:{s:s,s:{s:s}}},{s:s,s:{s:s}}]", "type", "function", "function", "name", "get_weather",
                     "parameters", "type", "object", "type", "function", "function", "name", "add");
}

/* What a feed reported: content concatenated, calls as "name=args;" lines,
 * and whether a content event came between or after calls empty. */
typedef struct {
    char content[4096];
    size_t n;
    char calls[4096];
    int n_calls;
    int n_content_events;
    bool empty_event;
} collected;

static sl_status on_ev(void *ctx, const sl_tool_event *ev)
{
    collected *c = ctx;
    if (ev->kind == SL_TOOL_EVENT_CONTENT) {
        cr_assert_lt(c->n + ev->len, sizeof c->content);
        memcpy(c->content + c->n, ev->text, ev->len);
        c->n += ev->len;
        c->content[c->n] = '\0';
        c->n_content_events++;
        if (ev->len == 0)
            c->empty_event = true;
        return SL_OK;
    }
    cr_assert_eq(ev->index, c->n_calls);
    cr_assert_eq(strlen(ev->id), SL_TOOL_CALL_ID_LEN - 1);
    cr_assert_eq(strncmp(ev->id, "call_", 5), 0);
    size_t l = strlen(c->calls);
    snprintf(c->calls + l, sizeof c->calls - l, "%s=%s;", ev->name, ev->arguments);
    c->n_calls++;
    return SL_OK;
}

/* Feeds text in pieces cut at `cuts` (sorted offsets, n_cuts of them). */
static collected feed_split(sl_tool_format f, const char *text, const size_t *cuts, size_t n_cuts)
{
    json_t *tools = tools2();
    sl_tool_parser *p;
    cr_assert_eq(sl_tool_parser_create(f, tools, &p), SL_OK);
    json_decref(tools);
    collected c;
    memset(&c, 0, sizeof c);
    size_t len = strlen(text), at = 0;
    for (size_t i = 0; i < n_cuts; i++) {
        cr_assert_eq(sl_tool_parser_feed(p, text + at, cuts[i] - at, false, on_ev, &c), SL_OK);
        at = cuts[i];
    }
    cr_assert_eq(sl_tool_parser_feed(p, text + at, len - at, true, on_ev, &c), SL_OK);
    cr_assert_eq(sl_tool_parser_feed(p, "", 0, true, on_ev, &c), SL_ESTATE);
    sl_tool_parser_destroy(p);
    return c;
}

/* The whole answer, parsed, and the same text split once at every byte and
 * fed byte by byte: all give the same content and calls. */
static collected check_all_splits(sl_tool_format f, const char *text)
{
    collected whole = feed_split(f, text, NULL, 0);
    size_t len = strlen(text);
    for (size_t k = 0; k <= len; k++) {
        collected c = feed_split(f, text, &k, 1);
        cr_assert_str_eq(c.content, whole.content, "split at %zu of %s", k, text);
        cr_assert_str_eq(c.calls, whole.calls, "split at %zu of %s", k, text);
        cr_assert(!c.empty_event);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t k = 0; k < len; k++)
        cuts[k] = k + 1;
    collected b = feed_split(f, text, cuts, len);
    free(cuts);
    cr_assert_str_eq(b.content, whole.content);
    cr_assert_str_eq(b.calls, whole.calls);
    /* and the one-shot API agrees */
    json_t *tools = tools2(), *calls = NULL;
    char *content = NULL;
    cr_assert_eq(sl_tool_calls_parse(f, tools, text, len, &calls, &content), SL_OK);
    json_decref(tools);
    cr_assert_eq((int)json_array_size(calls), whole.n_calls);
    bool blank = true;
    for (size_t i = 0; i < whole.n; i++)
        blank = blank && strchr(" \n\t\r", whole.content[i]) != NULL;
    if (blank)
        cr_assert_null(content);
    else
        cr_assert_str_eq(content, whole.content);
    json_decref(calls);
    free(content);
    return whole;
}

Test(tool_calls, detects_formats_from_template_text)
{
    const char *h = "{% for t in tools %}{{ t }}{% endfor %}<tool_call>";
    cr_assert_eq(sl_tool_format_detect(h, strlen(h)), SL_TOOL_FORMAT_HERMES);
    const char *l = "{%- if tools %}<|start_header_id|>ipython<|end_header_id|>{% endif %}";
    cr_assert_eq(sl_tool_format_detect(l, strlen(l)), SL_TOOL_FORMAT_LLAMA3);
    const char *m = "{{ '[TOOL_CALLS]' + tool_calls|tojson }}";
    cr_assert_eq(sl_tool_format_detect(m, strlen(m)), SL_TOOL_FORMAT_MISTRAL);
    const char *t = "{% if tools %}{{ tools|tojson }}{% endif %}";
    cr_assert_eq(sl_tool_format_detect(t, strlen(t)), SL_TOOL_FORMAT_HERMES);
    const char *n = "{% for m in messages %}{{ m.content }}{% if m.tool_calls %}x{% endif %}{% endfor %}";
    cr_assert_eq(sl_tool_format_detect(n, strlen(n)), SL_TOOL_FORMAT_NONE);
    cr_assert_eq(sl_tool_format_detect(NULL, 0), SL_TOOL_FORMAT_NONE);
    cr_assert_str_eq(sl_tool_format_name(SL_TOOL_FORMAT_LLAMA3), "llama3");
}

Test(tool_calls, detects_the_repository_templates)
{
    static const struct { const char *file; sl_tool_format f; } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", SL_TOOL_FORMAT_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", SL_TOOL_FORMAT_HERMES},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", SL_TOOL_FORMAT_LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", SL_TOOL_FORMAT_LLAMA3},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", SL_TOOL_FORMAT_MISTRAL},
        {"google-gemma-2-2b-it.jinja", SL_TOOL_FORMAT_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* the templates live in the source tree, next to this file's folder */
        char path[1024];
        const char *root = getenv("SLUICE_SOURCE_DIR");
        if (root != NULL) {
            snprintf(path, sizeof path, "%s/tests/data/templates/%s", root, cases[i].file);
        } else {
            const char *src = __FILE__;
            const char *cut = strstr(src, "tests/unit/");
            cr_assert_not_null(cut);
            snprintf(path, sizeof path, "%.*stests/data/templates/%s", (int)(cut - src), src, cases[i].file);
        }
        FILE *fp = fopen(path, "rb");
        cr_assert_not_null(fp, "%s", path);
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        cr_assert_eq(sl_tool_format_detect(buf, n), cases[i].f, "%s", cases[i].file);
    }
}

Test(tool_calls, hermes_one_call)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES,
                                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                   "</tool_call>");
    cr_assert_eq(c.n_calls, 1);
    cr_assert_str_eq(c.calls, "get_weather={\"city\":\"Paris\"};");
    cr_assert_str_eq(c.content, "");
}

Test(tool_calls, hermes_parallel_calls_with_text_around)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES,
                                   "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
                                   "</tool_call>\n<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":[2,3]}}"
                                   "</tool_call>\nDone.");
    cr_assert_eq(c.n_calls, 2);
    cr_assert_str_eq(c.calls, "get_weather={};add={\"a\":1,\"b\":[2,3]};");
    cr_assert_str_eq(c.content, "Let me check.\n\n\nDone.");
}

Test(tool_calls, hermes_whitespace_between_calls_is_not_content)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES,
                                   "  \n<tool_call>{\"name\":\"add\",\"arguments\":{}}</tool_call>\n\n"
                                   "<tool_call>{\"name\":\"add\",\"arguments\":{\"x\":true}}</tool_call>\n");
    cr_assert_eq(c.n_calls, 2);
    cr_assert_eq(c.n_content_events, 0);
}

Test(tool_calls, hermes_malformed_call_stays_content)
{
    const char *t = "a <tool_call>{\"name\": \"add\", \"arguments\": {\"a\": }</tool_call> b";
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
}

Test(tool_calls, hermes_unknown_tool_stays_content)
{
    const char *t = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
}

Test(tool_calls, hermes_arguments_must_be_an_object)
{
    const char *t = "<tool_call>{\"name\": \"add\", \"arguments\": \"{}\"}</tool_call>";
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
}

Test(tool_calls, hermes_unterminated_call_is_a_call_only_if_whole)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n");
    cr_assert_eq(c.n_calls, 1);
    const char *t = "x <tool_call>\n{\"name\": \"add\", \"argum";
    c = check_all_splits(SL_TOOL_FORMAT_HERMES, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
}

Test(tool_calls, hermes_partial_marker_at_the_end_is_content)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES, "a < b and <tool_ca");
    cr_assert_str_eq(c.content, "a < b and <tool_ca");
}

Test(tool_calls, hermes_plain_text_streams_at_once)
{
    json_t *tools = tools2();
    sl_tool_parser *p;
    cr_assert_eq(sl_tool_parser_create(SL_TOOL_FORMAT_HERMES, tools, &p), SL_OK);
    json_decref(tools);
    collected c;
    memset(&c, 0, sizeof c);
    cr_assert_eq(sl_tool_parser_feed(p, "Hello there <to", 15, false, on_ev, &c), SL_OK);
    cr_assert_str_eq(c.content, "Hello there");   /* the space waits for more content; "<to" may be a call */
    cr_assert_eq(sl_tool_parser_feed(p, "day", 3, false, on_ev, &c), SL_OK);
    cr_assert_str_eq(c.content, "Hello there <today");
    sl_tool_parser_destroy(p);
}

Test(tool_calls, llama3_bare_and_tagged_calls)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_LLAMA3,
                                   "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
    cr_assert_str_eq(c.calls, "get_weather={\"city\":\"Oslo\"};");
    c = check_all_splits(SL_TOOL_FORMAT_LLAMA3,
                         "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; "
                         "{\"name\": \"get_weather\", \"parameters\": {}}");
    cr_assert_eq(c.n_calls, 2);
    cr_assert_str_eq(c.content, "");
    c = check_all_splits(SL_TOOL_FORMAT_LLAMA3,
                         "\n{\"name\": \"add\", \"parameters\": {}}\n{\"name\": \"add\", \"parameters\": {\"b\": 2}}\n");
    cr_assert_eq(c.n_calls, 2);
}

Test(tool_calls, llama3_text_and_bad_calls_stay_content)
{
    const char *t = "The answer is {\"name\": \"add\"}.";
    collected c = check_all_splits(SL_TOOL_FORMAT_LLAMA3, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
    t = "{\"name\": \"add\", \"parameters\": {}} and then some text";
    c = check_all_splits(SL_TOOL_FORMAT_LLAMA3, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
    t = "{\"name\": \"nope\", \"parameters\": {}}";
    c = check_all_splits(SL_TOOL_FORMAT_LLAMA3, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
}

Test(tool_calls, mistral_array_and_args_forms)
{
    collected c = check_all_splits(SL_TOOL_FORMAT_MISTRAL,
                                   "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}}, "
                                   "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]");
    cr_assert_str_eq(c.calls, "add={\"a\":1};get_weather={\"city\":\"Rome\"};");
    c = check_all_splits(SL_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]add[ARGS]{\"a\": 2}[TOOL_CALLS]get_weather[ARGS]{}");
    cr_assert_str_eq(c.calls, "add={\"a\":2};get_weather={};");
    c = check_all_splits(SL_TOOL_FORMAT_MISTRAL, " [{\"name\": \"add\", \"arguments\": {}}]");
    cr_assert_eq(c.n_calls, 1);
    c = check_all_splits(SL_TOOL_FORMAT_MISTRAL, "Sure. [TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}]");
    cr_assert_eq(c.n_calls, 1);
    cr_assert_str_eq(c.content, "Sure. ");   /* text outside calls, as written */
}

Test(tool_calls, mistral_bad_calls_stay_content)
{
    const char *t = "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"zzz\", \"arguments\": {}}]";
    collected c = check_all_splits(SL_TOOL_FORMAT_MISTRAL, t);
    cr_assert_eq(c.n_calls, 0);
    cr_assert_str_eq(c.content, t);
    t = "[1, 2, 3]";
    c = check_all_splits(SL_TOOL_FORMAT_MISTRAL, t);
    cr_assert_str_eq(c.content, t);
    t = "[TOOL_CALLS]add[ARGS]not json";
    c = check_all_splits(SL_TOOL_FORMAT_MISTRAL, t);
    cr_assert_str_eq(c.content, t);
}

Test(tool_calls, invalid_utf8_and_nul_never_crash)
{
    const char t[] = "<tool_call>{\"name\": \"add\xff\", \"arguments\": {}}</tool_call>\x80";
    collected c = check_all_splits(SL_TOOL_FORMAT_HERMES, t);
    cr_assert_eq(c.n_calls, 0);
}

Test(tool_calls, none_format_has_no_parser)
{
    sl_tool_parser *p = (sl_tool_parser *)1;
    cr_assert_eq(sl_tool_parser_create(SL_TOOL_FORMAT_NONE, NULL, &p), SL_EINVAL);
    cr_assert_null(p);
    sl_tool_parser_destroy(NULL);
}

Test(tool_calls, parse_gives_openai_tool_calls)
{
    json_t *tools = tools2(), *calls = NULL;
    char *content = NULL;
    const char *t = "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call>";
    cr_assert_eq(sl_tool_calls_parse(SL_TOOL_FORMAT_HERMES, tools, t, strlen(t), &calls, &content), SL_OK);
    cr_assert_null(content);
    cr_assert_eq(json_array_size(calls), 1);
    json_t *c0 = json_array_get(calls, 0);
    cr_assert_str_eq(json_string_value(json_object_get(c0, "type")), "function");
    cr_assert_eq(strncmp(json_string_value(json_object_get(c0, "id")), "call_", 5), 0);
    json_t *fn = json_object_get(c0, "function");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "name")), "add");
    cr_assert_str_eq(json_string_value(json_object_get(fn, "arguments")), "{\"a\":1}");
    json_decref(calls);
    cr_assert_eq(sl_tool_calls_parse(SL_TOOL_FORMAT_HERMES, tools, "hi", 2, &calls, &content), SL_OK);
    cr_assert_null(calls);
    cr_assert_str_eq(content, "hi");
    free(content);
    json_decref(tools);
}

Test(tool_calls, ids_differ)
{
    json_t *tools = tools2(), *calls = NULL;
    char *content = NULL;
    const char *t = "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"add\", "
                    "\"arguments\": {}}</tool_call>";
    cr_assert_eq(sl_tool_calls_parse(SL_TOOL_FORMAT_HERMES, tools, t, strlen(t), &calls, &content), SL_OK);
    cr_assert_eq(json_array_size(calls), 2);
    cr_assert_str_neq(json_string_value(json_object_get(json_array_get(calls, 0), "id")),
                      json_string_value(json_object_get(json_array_get(calls, 1), "id")));
    json_decref(calls);
    json_decref(tools);
}

/* ---- grammar ---- */

Test(tool_calls, grammar_hermes_required_and_named)
{
    json_t *tools = tools2();
    char *g = NULL;
    sl_api_error e;
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, NULL, false, &g, &e), SL_OK);
    cr_assert(strstr(g, "root ::= tc-call\n") != NULL, "%s", g);
    cr_assert(strstr(g, "tc-call ::= \"<tool_call>\\n\" tc-fn \"\\n</tool_call>\"") != NULL, "%s", g);
    cr_assert(strstr(g, "tc-fn ::= tc-f0 | tc-f1\n") != NULL, "%s", g);
    cr_assert(strstr(g, "tc-f0 ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" tc-a0 \"}\"") != NULL,
              "%s", g);
    cr_assert(strstr(g, "tc-a1 ::=") != NULL, "%s", g);
    free(g);
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, "add", true, &g, &e), SL_OK);
    cr_assert(strstr(g, "root ::= tc-call (\"\\n\" tc-call)*") != NULL, "%s", g);
    cr_assert(strstr(g, "tc-fn ::= tc-f1\n") != NULL, "%s", g);
    cr_assert(strstr(g, "get_weather") == NULL, "%s", g);
    free(g);
    json_decref(tools);
}

Test(tool_calls, grammar_other_formats)
{
    json_t *tools = tools2();
    char *g = NULL;
    sl_api_error e;
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_LLAMA3, tools, NULL, true, &g, &e), SL_OK);
    cr_assert(strstr(g, "root ::= tc-fn (\"; \" tc-fn)*") != NULL, "%s", g);
    cr_assert(strstr(g, "\\\"parameters\\\": ") != NULL, "%s", g);
    free(g);
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_MISTRAL, tools, NULL, false, &g, &e), SL_OK);
    cr_assert(strstr(g, "root ::= \"[\" tc-fn \"]\"") != NULL, "%s", g);
    free(g);
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_NONE, tools, NULL, false, &g, &e), SL_OK);
    cr_assert(strstr(g, "<tool_call>") != NULL, "%s", g);
    free(g);
    json_decref(tools);
}

Test(tool_calls, grammar_escapes_names)
{
    json_t *tools = json_pack("[{s:s,s:{s:s}}]", "type", "function", "function", "name", "we\"ird\\n");
    char *g = NULL;
    sl_api_error e;
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, NULL, false, &g, &e), SL_OK);
    /* JSON escapes the quote and backslash; GBNF escapes those escapes */
    cr_assert(strstr(g, "\\\"we\\\\\\\"ird\\\\\\\\n\\\"") != NULL, "%s", g);
    free(g);
    json_decref(tools);
}

Test(tool_calls, grammar_refuses_unknown_name_and_bad_schema)
{
    json_t *tools = tools2();
    char *g = (char *)1;
    sl_api_error e;
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, "nope", false, &g, &e), SL_EINVAL);
    cr_assert_null(g);
    cr_assert_str_eq(e.param, "tool_choice");
    json_decref(tools);
    tools = json_pack("[{s:s,s:{s:s,s:{s:s}}},{s:s,s:{s:s,s:{s:{}}}}]", "type", "function", "function", "name", "a",
                      "parameters", "type", "object", "type", "function", "function", "name", "b", "parameters",
                      "if");
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, NULL, false, &g, &e), SL_EINVAL);
    cr_assert_null(g);
    cr_assert_str_eq(e.param, "tools[1].function.parameters");
    cr_assert(strstr(e.message, "tools[1].function.parameters: ") != NULL, "%s", e.message);
    cr_assert(strstr(e.message, "if") != NULL, "%s", e.message);
    json_decref(tools);
    cr_assert_eq(sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, NULL, NULL, false, &g, &e), SL_EINVAL);
    cr_assert_str_eq(e.param, "tools");
}

Test(tool_calls, grammar_refuses_what_passes_the_engine_limits_together)
{
    /* each tool's schema compiles alone; all of them at once have too many rules */
    json_t *tools = json_array();
    for (int i = 0; i < 128; i++) {
        json_t *props = json_object();
        for (int k = 0; k < 40; k++) {
            char pn[16];
            snprintf(pn, sizeof pn, "p%d", k);
            json_object_set_new(props, pn, json_pack("{s:s,s:i}", "type", "string", "maxLength", 3));
        }
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        json_array_append_new(tools, json_pack("{s:s,s:{s:s,s:{s:s,s:o}}}", "type", "function", "function", "name",
                                               name, "parameters", "type", "object", "properties", props));
    }
    char *g = (char *)1;
    sl_api_error e;
    sl_status rc = sl_tool_calls_grammar(SL_TOOL_FORMAT_HERMES, tools, NULL, true, &g, &e);
    cr_assert_eq(rc, SL_EINVAL);
    cr_assert_null(g);
    cr_assert_str_eq(e.param, "tools");
    cr_assert(strstr(e.message, "cannot be enforced") != NULL, "%s", e.message);
    json_decref(tools);
}

/* parallel_tool_calls false under tool_choice auto is enforced by the caller
 * (frontend/choice.c), which ends the answer at the first CALL event: that
 * event must come while the answer is still being fed, as soon as the call
 * closes (HERMES's </tool_call>), with nothing of what follows yet. (LLAMA3
 * and MISTRAL decide a call later, at the end of the answer at worst: the
 * choice then drops the calls after the first instead of stopping early.) */
static void first_call_before_the_rest(sl_tool_format f, const char *first, const char *rest)
{
    json_t *tools = tools2();
    sl_tool_parser *p;
    cr_assert_eq(sl_tool_parser_create(f, tools, &p), SL_OK);
    json_decref(tools);
    collected c;
    memset(&c, 0, sizeof c);
    cr_assert_eq(sl_tool_parser_feed(p, first, strlen(first), false, on_ev, &c), SL_OK);
    cr_assert_eq(c.n_calls, 1, "the call in %s is reported before the answer ends", first);
    cr_assert_str_eq(c.calls, "get_weather={\"city\":\"Paris\"};");
    cr_assert_eq(c.n, 0);
    cr_assert_eq(sl_tool_parser_feed(p, rest, strlen(rest), true, on_ev, &c), SL_OK);
    cr_assert_eq(c.n_calls, 2, "the rest (%s) holds a second call", rest);
    sl_tool_parser_destroy(p);
}

Test(tool_calls, first_call_is_reported_when_it_closes)
{
    first_call_before_the_rest(SL_TOOL_FORMAT_HERMES,
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                               "</tool_call>",
                               "\n<tool_call>{\"name\":\"add\",\"arguments\":{}}</tool_call>");
}
