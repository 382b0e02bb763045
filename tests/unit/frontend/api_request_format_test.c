/* tests/unit/frontend/api_request_format_test.c: frontend/api_request_format.c:
 * each constraint form (response_format json_object / json_schema, grammar,
 * json_schema, guided_*) lands in r->grammar as GBNF that compiles, and each
 * bad one is a 400 naming the field with the compiler's reason. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_request.h"
#include "model/grammar/grammar.h"

#define N_VOCAB 1000
#define CHAT SL_API_ENDPOINT_CHAT
#define CMPL SL_API_ENDPOINT_COMPLETIONS
#define M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define P "\"prompt\":\"hi\""
#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"
#define SCHEMA "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}"
#define RF_SCHEMA(js) "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":" js "}"

static void parse_ok(sl_api_request *r, sl_api_endpoint ep, const char *body)
{
    sl_api_error e;
    sl_status rc = sl_api_request_parse(r, ep, body, strlen(body), N_VOCAB, &e);
    cr_assert_eq(rc, SL_OK, "%s -> %s (param %s)", body, e.message, e.param);
}

/* The text the request carries compiles again (what the worker will do). */
static void expect_compiles(const char *text, const char *what)
{
    cr_assert_not_null(text, "%s: no grammar", what);
    sl_grammar *g = NULL;
    char err[256] = "";
    cr_expect_eq(sl_grammar_create(text, strlen(text), &g, err, sizeof err), SL_OK, "%s: %s\n%s", what, err, text);
    sl_grammar_destroy(g);
}

Test(api_request_format, every_constraint_form_gives_a_grammar)
{
    static const struct {
        sl_api_endpoint ep;
        const char *body;
    } forms[] = {
        {CHAT, "{" M ",\"response_format\":{\"type\":\"json_object\"}}"},
        {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"answer\",\"schema\":" SCHEMA "}") "}"},
        {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"a-b_1\",\"schema\":" SCHEMA ",\"strict\":false,"
                                   "\"description\":\"d\"}") "}"},
        {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"any\"}") "}"},   /* no schema: any JSON value */
        {CHAT, "{" M ",\"response_format\":{\"type\":\"json_object\",\"schema\":" SCHEMA "}}"},
        {CHAT, "{" M ",\"json_schema\":" SCHEMA "}"},
        {CHAT, "{" M ",\"guided_json\":" SCHEMA "}"},
        {CHAT, "{" M ",\"guided_json\":\"{\\\"type\\\":\\\"string\\\"}\"}"},
        {CHAT, "{" M ",\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"}"},
        {CHAT, "{" M ",\"guided_grammar\":\"root ::= [0-9]+\"}"},
        {CHAT, "{" M ",\"guided_regex\":\"[a-z]+@[a-z]+\\\\.com\"}"},
        {CHAT, "{" M ",\"guided_choice\":[\"yes\",\"no\",\"say \\\"hi\\\"\",\"a\\\\b\",\"line\\nbreak\",\"\xc3\xa9t\xc3\xa9\"]}"},
        {CMPL, "{" P ",\"response_format\":{\"type\":\"json_object\"}}"},
        {CMPL, "{" P ",\"grammar\":\"root ::= \\\"x\\\"\"}"},
        {CMPL, "{" P ",\"guided_choice\":[\"a\"]}"},
        /* an automatic tool choice leaves room for a format */
        {CHAT, "{" M "," TOOLS ",\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"json_object\"}}"},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        sl_api_request r;
        parse_ok(&r, forms[i].ep, forms[i].body);
        expect_compiles(r.grammar, forms[i].body);
        cr_expect(strstr(r.grammar, "root") != NULL, "%s", r.grammar);
        sl_api_request_fini(&r);
    }
}

Test(api_request_format, grammar_text_is_passed_as_given)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\\n\"}");
    cr_expect_str_eq(r.grammar, "root ::= \"yes\" | \"no\"\n");
    cr_expect_str_eq(r.grammar_from, "grammar");
    sl_api_request_fini(&r);
    parse_ok(&r, CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"schema\":" SCHEMA "}") "}");
    cr_expect_str_eq(r.grammar_from, "response_format.json_schema.schema");
    sl_api_request_fini(&r);
}

Test(api_request_format, guided_choice_escapes_each_literal)
{
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"guided_choice\":[\"a\\\"b\",\"c\\\\d\",\"e\\nf\",\"\\u0001\"]}");
    cr_expect_str_eq(r.grammar, "root ::= \"a\\\"b\" | \"c\\\\d\" | \"e\\nf\" | \"\\x01\"\n");
    sl_api_request_fini(&r);
}

Test(api_request_format, text_and_null_constrain_nothing)
{
    static const char *const bodies[] = {
        "{" M ",\"response_format\":{\"type\":\"text\"}}",
        "{" M ",\"response_format\":null,\"grammar\":null,\"guided_json\":null,\"guided_choice\":null}",
        /* text is no constraint, so one other source may come with it */
        "{" M ",\"response_format\":{\"type\":\"text\"},\"guided_regex\":null}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        sl_api_request r;
        parse_ok(&r, CHAT, bodies[i]);
        cr_expect_null(r.grammar, "%s", bodies[i]);
        sl_api_request_fini(&r);
    }
    sl_api_request r;
    parse_ok(&r, CHAT, "{" M ",\"response_format\":{\"type\":\"text\"},\"guided_choice\":[\"x\"]}");
    expect_compiles(r.grammar, "text + guided_choice");
    sl_api_request_fini(&r);
}

typedef struct {
    sl_api_endpoint ep;
    const char *body;
    const char *param;
    const char *says;
} refusal;

static const refusal refused[] = {
    /* response_format's shape */
    {CHAT, "{" M ",\"response_format\":\"json\"}", "response_format", "object"},
    {CHAT, "{" M ",\"response_format\":{}}", "response_format.type", "required"},
    {CHAT, "{" M ",\"response_format\":{\"type\":\"yaml\"}}", "response_format.type", "\"json_schema\""},
    {CHAT, "{" M ",\"response_format\":{\"type\":\"text\",\"x\":1}}", "response_format.x", "unrecognized"},
    {CHAT, "{" M ",\"response_format\":{\"type\":\"json_object\",\"schema\":5}}", "response_format.schema", "object"},
    {CHAT, "{" M ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format.json_schema", "required"},
    {CHAT, "{" M ",\"response_format\":{\"type\":\"json_schema\",\"schema\":{}}}", "response_format.schema",
     "unrecognized"},
    {CHAT, "{" M "," RF_SCHEMA("[]") "}", "response_format.json_schema", "object"},
    {CHAT, "{" M "," RF_SCHEMA("{\"schema\":" SCHEMA "}") "}", "response_format.json_schema.name", "required"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"has space\"}") "}", "response_format.json_schema.name", "1 to 64"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"\"}") "}", "response_format.json_schema.name", "1 to 64"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"strict\":1}") "}", "response_format.json_schema.strict",
     "boolean"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"description\":[]}") "}",
     "response_format.json_schema.description", "string"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"schema\":\"x\"}") "}", "response_format.json_schema.schema",
     "object"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"schemas\":{}}") "}", "response_format.json_schema.schemas",
     "unrecognized"},
    /* a schema the compiler refuses: its reason (keyword and path) comes back */
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"schema\":{\"if\":{\"type\":\"string\"}}}") "}",
     "response_format.json_schema.schema", "'if'"},
    {CHAT, "{" M ",\"json_schema\":{\"if\":{}}}", "json_schema", "'if'"},
    {CHAT, "{" M "," RF_SCHEMA("{\"name\":\"n\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":"
                               "{\"type\":\"string\",\"if\":{}}}}}") "}",
     "response_format.json_schema.schema", "'if' at /properties/a"},
    {CHAT, "{" M ",\"grammar\":\"root ::= undefined-rule\"}", "grammar", "undefined-rule"},
    {CHAT, "{" M ",\"guided_json\":{\"if\":{}}}", "guided_json", "'if'"},
    {CHAT, "{" M ",\"guided_json\":\"{not json\"}", "guided_json", "does not hold"},
    {CHAT, "{" M ",\"guided_json\":5}", "guided_json", "object"},
    {CHAT, "{" M ",\"json_schema\":[]}", "json_schema", "object"},
    /* grammars, regexes, choices */
    {CHAT, "{" M ",\"grammar\":\"this is not gbnf\"}", "grammar", "invalid grammar"},
    {CHAT, "{" M ",\"guided_grammar\":\"rot ::= \\\"x\\\"\"}", "guided_grammar", "invalid grammar"},
    {CHAT, "{" M ",\"grammar\":\"\"}", "grammar", "empty"},
    {CHAT, "{" M ",\"grammar\":5}", "grammar", "string"},
    {CHAT, "{" M ",\"guided_regex\":\"(ab\"}", "guided_regex", "cannot be enforced"},
    {CHAT, "{" M ",\"guided_regex\":[]}", "guided_regex", "string"},
    {CHAT, "{" M ",\"guided_choice\":[]}", "guided_choice", "empty"},
    {CHAT, "{" M ",\"guided_choice\":\"yes\"}", "guided_choice", "array"},
    {CHAT, "{" M ",\"guided_choice\":[\"a\",1]}", "guided_choice[1]", "string"},
    {CHAT, "{" M ",\"guided_choice\":[\"a\",\"\"]}", "guided_choice[1]", "empty"},
    /* one source at most */
    {CHAT, "{" M ",\"response_format\":{\"type\":\"json_object\"},\"grammar\":\"root ::= \\\"x\\\"\"}", "grammar",
     "only one output constraint"},
    {CHAT, "{" M ",\"guided_json\":{},\"guided_regex\":\"a\"}", "guided_regex", "'guided_json' and 'guided_regex'"},
    {CHAT, "{" M ",\"guided_choice\":[\"a\"],\"json_schema\":{}}", "guided_choice", "only one"},
    /* a forced tool call has its own grammar */
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
     "response_format", "tool_choice"},
    {CHAT, "{" M "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
           "\"guided_regex\":\"a\"}", "guided_regex", "tool_choice"},
};

Test(api_request_format, bad_constraints_give_400_naming_the_field)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const refusal *c = &refused[i];
        sl_api_request r;
        sl_api_error e;
        sl_status rc = sl_api_request_parse(&r, c->ep, c->body, strlen(c->body), N_VOCAB, &e);
        cr_expect_eq(rc, SL_EINVAL, "case %zu (%s): rc %d", i, c->body, rc);
        if (rc != SL_EINVAL) { sl_api_request_fini(&r); continue; }
        cr_expect_eq(sl_api_error_http_status(e.kind), 400);
        cr_expect_str_eq(e.param, c->param, "case %zu (%s): param '%s' (%s)", i, c->body, e.param, e.message);
        cr_expect(strstr(e.message, c->says) != NULL, "case %zu (%s): message '%s' lacks '%s'", i, c->body,
                  e.message, c->says);
        cr_expect_null(r.grammar);
        sl_api_request_fini(&r);
    }
}

Test(api_request_format, guided_choice_past_the_grammar_limit_is_refused)
{
    size_t len = SL_GRAMMAR_TEXT_MAX / 4 + 16;
    char *b = malloc(len + 128);
    size_t n = (size_t)sprintf(b, "{" M ",\"guided_choice\":[\"");
    memset(b + n, 'a', len);
    n += len;
    n += (size_t)sprintf(b + n, "\"]}");
    sl_api_request r;
    sl_api_error e;
    cr_expect_eq(sl_api_request_parse(&r, CHAT, b, n, N_VOCAB, &e), SL_EINVAL);
    cr_expect_str_eq(e.param, "guided_choice");
    sl_api_request_fini(&r);
    free(b);
}
