/* frontend/api_request_format.c: what the output must look like ->
 * r->grammar, GBNF text (model/grammar/grammar.h) the worker enforces.
 * Sources, at most one per request: OpenAI's response_format (text,
 * json_object, json_schema); llama.cpp's `grammar` (GBNF) and `json_schema`
 * (a schema); vLLM's guided_json (a schema, or a string holding one),
 * guided_regex, guided_grammar (GBNF) and guided_choice (a list of strings).
 * Runs in the front ends while a body is parsed. Trade-off: the grammar is
 * compiled here once only to be thrown away (the worker compiles the text
 * again), so that every bad schema, regex or grammar is a 400 naming the
 * field before anything is queued, never a failure in the worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_request_internal.h"
#include "shared/alloc.h"
#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"

typedef enum {
    SRC_NONE = 0,
    SRC_GBNF,       /* v: a string of GBNF */
    SRC_SCHEMA,     /* v: a schema (object or boolean); NULL = any JSON value */
    SRC_OBJECT,     /* any JSON object */
    SRC_REGEX,      /* v: a string */
    SRC_CHOICE,     /* v: a non-empty array of non-empty strings */
} src_kind;

typedef struct {
    src_kind kind;
    const json_t *v;
    char param[SL_API_PARAM_LEN];   /* where a refusal points */
} source;

/* The extensions, in the order they are looked at. */
static const struct {
    const char *name;
    src_kind kind;
} extensions[] = {
    {"grammar", SRC_GBNF},         {"guided_grammar", SRC_GBNF}, {"json_schema", SRC_SCHEMA},
    {"guided_json", SRC_SCHEMA},   {"guided_regex", SRC_REGEX},  {"guided_choice", SRC_CHOICE},
};

/* -------------------------------------------------------- response_format */

static bool only_keys(const json_t *o, const char *const *keys, size_t n, const char *at, sl_api_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        size_t i = 0;
        while (i < n && strcmp(k, keys[i]) != 0) i++;
        if (i == n) {
            char p[SL_API_PARAM_LEN];
            snprintf(p, sizeof p, "%s.%s", at, k);
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, p, "unrecognized argument '%.64s' in '%s'", k, at);
            return false;
        }
    }
    return true;
}

static bool parse_json_schema_format(const json_t *js, source *s, sl_api_error *err)
{
    static const char *const keys[] = {"name", "description", "schema", "strict"};
    const char *at = "response_format.json_schema";
    if (!js) return sl_api_req_value_error(err, at, "'%s' is a required property", at);
    if (!json_is_object(js)) return sl_api_req_type_error(err, at, "an object");
    if (!only_keys(js, keys, sizeof keys / sizeof keys[0], at, err)) return false;
    json_t *name = sl_api_req_field(js, "name");
    if (!name) return sl_api_req_value_error(err, "response_format.json_schema.name", "'%s.name' is a required "
                                             "property", at);
    if (!json_is_string(name)) return sl_api_req_type_error(err, "response_format.json_schema.name", "a string");
    if (!sl_api_req_name_ok(json_string_value(name)))
        return sl_api_req_value_error(err, "response_format.json_schema.name", "'%s.name' must be 1 to 64 of a-z, "
                                      "A-Z, 0-9, '_' and '-', got '%.64s'", at, json_string_value(name));
    json_t *v = sl_api_req_field(js, "description");
    if (v && !json_is_string(v)) return sl_api_req_type_error(err, "response_format.json_schema.description",
                                                              "a string");
    v = sl_api_req_field(js, "strict");
    if (v && !json_is_boolean(v)) return sl_api_req_type_error(err, "response_format.json_schema.strict",
                                                               "a boolean");
    /* strict: false still constrains: a schema is enforced or refused, never
     * taken as a hint (docs/API.md). */
    v = sl_api_req_field(js, "schema");
    if (v && !json_is_object(v) && !json_is_boolean(v))
        return sl_api_req_type_error(err, "response_format.json_schema.schema", "an object (a JSON Schema)");
    s->kind = SRC_SCHEMA;
    s->v = v;
    snprintf(s->param, sizeof s->param, "response_format.json_schema.schema");
    return true;
}

static bool parse_response_format(const json_t *rf, source *s, sl_api_error *err)
{
    if (!json_is_object(rf)) return sl_api_req_type_error(err, "response_format", "an object");
    json_t *type = json_object_get(rf, "type");
    if (!type) return sl_api_req_value_error(err, "response_format.type", "'response_format.type' is a required "
                                             "property");
    if (!json_is_string(type)) return sl_api_req_type_error(err, "response_format.type", "a string");
    const char *t = json_string_value(type);
    if (strcmp(t, "text") == 0) {
        static const char *const keys[] = {"type"};
        return only_keys(rf, keys, 1, "response_format", err);
    }
    if (strcmp(t, "json_object") == 0) {
        /* llama.cpp also takes {"type":"json_object","schema":{...}}. */
        static const char *const keys[] = {"type", "schema"};
        if (!only_keys(rf, keys, 2, "response_format", err)) return false;
        json_t *schema = sl_api_req_field(rf, "schema");
        if (schema) {
            if (!json_is_object(schema) && !json_is_boolean(schema))
                return sl_api_req_type_error(err, "response_format.schema", "an object (a JSON Schema)");
            s->kind = SRC_SCHEMA;
            s->v = schema;
            snprintf(s->param, sizeof s->param, "response_format.schema");
        } else {
            s->kind = SRC_OBJECT;
            snprintf(s->param, sizeof s->param, "response_format");
        }
        return true;
    }
    if (strcmp(t, "json_schema") == 0) {
        static const char *const keys[] = {"type", "json_schema"};
        if (!only_keys(rf, keys, 2, "response_format", err)) return false;
        return parse_json_schema_format(sl_api_req_field(rf, "json_schema"), s, err);
    }
    return sl_api_req_value_error(err, "response_format.type", "'response_format.type' must be \"text\", "
                                  "\"json_object\" or \"json_schema\", got '%.40s'", t);
}

/* ------------------------------------------------------------- the sources */

/* Finds the one source of the request; two is a 400 naming the second. */
static bool find_source(const sl_api_request *r, source *s, sl_api_error *err)
{
    memset(s, 0, sizeof *s);
    const char *first = NULL;
    json_t *rf = sl_api_req_field(r->_root, "response_format");
    if (rf) {
        if (!parse_response_format(rf, s, err)) return false;
        if (s->kind != SRC_NONE) first = "response_format";
    }
    for (size_t i = 0; i < sizeof extensions / sizeof extensions[0]; i++) {
        json_t *v = sl_api_req_field(r->_root, extensions[i].name);
        if (!v) continue;
        if (first)
            return sl_api_req_value_error(err, extensions[i].name, "only one output constraint may be given, got "
                                          "'%s' and '%s'", first, extensions[i].name);
        first = extensions[i].name;
        s->kind = extensions[i].kind;
        s->v = v;
        snprintf(s->param, sizeof s->param, "%s", extensions[i].name);
    }
    return true;
}

/* --------------------------------------------------------------- to GBNF */

/* guided_choice: root ::= "a" | "b" | ..., each string a GBNF literal. */
static bool choice_gbnf(const json_t *v, char **out, sl_api_error *err)
{
    if (!json_is_array(v)) return sl_api_req_type_error(err, "guided_choice", "an array of strings");
    size_t n = json_array_size(v);
    if (n == 0) return sl_api_req_value_error(err, "guided_choice", "'guided_choice' must not be empty");
    size_t cap = 16;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(v, i);
        char p[48];
        snprintf(p, sizeof p, "guided_choice[%zu]", i);
        if (!json_is_string(c)) return sl_api_req_type_error(err, p, "a string");
        if (json_string_length(c) == 0) return sl_api_req_value_error(err, p, "choices must not be empty strings");
        cap += json_string_length(c) * 4 + 8;   /* \xHH is the longest escape of a byte */
    }
    if (cap > SL_GRAMMAR_TEXT_MAX)
        return sl_api_req_value_error(err, "guided_choice", "'guided_choice' is too long: its grammar would exceed "
                                      "%u bytes", SL_GRAMMAR_TEXT_MAX);
    char *g = sl_malloc(cap);
    if (!g) return sl_api_req_oom(err);
    size_t at = (size_t)sprintf(g, "root ::= ");
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(v, i);
        const unsigned char *s = (const unsigned char *)json_string_value(c);
        size_t len = json_string_length(c);
        if (i > 0) at += (size_t)sprintf(g + at, " | ");
        g[at++] = '"';
        for (size_t k = 0; k < len; k++) {
            unsigned char b = s[k];
            if (b == '"' || b == '\\') { g[at++] = '\\'; g[at++] = (char)b; }
            else if (b == '\n') at += (size_t)sprintf(g + at, "\\n");
            else if (b == '\t') at += (size_t)sprintf(g + at, "\\t");
            else if (b == '\r') at += (size_t)sprintf(g + at, "\\r");
            else if (b < 0x20 || b == 0x7f) at += (size_t)sprintf(g + at, "\\x%02X", b);
            else g[at++] = (char)b;   /* UTF-8 goes through: literals are code points */
        }
        g[at++] = '"';
    }
    g[at++] = '\n';
    g[at] = '\0';
    *out = g;
    return true;
}

static bool schema_gbnf(const source *s, char **out, sl_api_error *err)
{
    char msg[SL_ERR_LEN];
    json_t *owned = NULL;
    const json_t *schema = s->v;
    if (json_is_string(schema)) {
        /* vLLM's guided_json may be the schema's text. */
        sl_api_error je;
        owned = sl_api_json_parse_body(json_string_value(schema), json_string_length(schema), &je);
        if (!owned) {
            if (je.kind == SL_API_ERR_INTERNAL) return sl_api_req_oom(err);
            return sl_api_req_value_error(err, s->param, "'%s' is a string that does not hold a JSON Schema "
                                          "object: %s", s->param, je.message);
        }
        schema = owned;
    } else if (s->v && !json_is_object(s->v) && !json_is_boolean(s->v)) {
        return sl_api_req_type_error(err, s->param, "an object (a JSON Schema)");
    }
    json_t *any = NULL;
    if (!schema) schema = any = json_object();
    sl_status rc = schema ? sl_json_schema_to_gbnf(schema, "root", out, msg, sizeof msg) : SL_ENOMEM;
    json_decref(owned);
    json_decref(any);
    if (rc == SL_ENOMEM) return sl_api_req_oom(err);
    if (rc < 0) return sl_api_req_value_error(err, s->param, "the JSON Schema in '%s' cannot be enforced: %s",
                                              s->param, msg);
    return true;
}

static bool build_gbnf(const source *s, char **out, sl_api_error *err)
{
    char msg[SL_ERR_LEN];
    sl_status rc;
    *out = NULL;
    switch (s->kind) {
    case SRC_NONE:
        return true;
    case SRC_GBNF: {
        if (!json_is_string(s->v)) return sl_api_req_type_error(err, s->param, "a string of GBNF");
        size_t len = json_string_length(s->v);
        if (len == 0) return sl_api_req_value_error(err, s->param, "'%s' must not be empty", s->param);
        *out = sl_malloc(len + 1);
        if (!*out) return sl_api_req_oom(err);
        memcpy(*out, json_string_value(s->v), len + 1);
        return true;
    }
    case SRC_SCHEMA:
        return schema_gbnf(s, out, err);
    case SRC_OBJECT:
        rc = sl_json_object_gbnf("root", out);
        return rc < 0 ? sl_api_req_oom(err) : true;
    case SRC_REGEX:
        if (!json_is_string(s->v)) return sl_api_req_type_error(err, s->param, "a string (a regular expression)");
        rc = sl_regex_to_gbnf(json_string_value(s->v), json_string_length(s->v), "root", false, out, msg,
                              sizeof msg);
        if (rc == SL_ENOMEM) return sl_api_req_oom(err);
        if (rc < 0) return sl_api_req_value_error(err, s->param, "the regular expression in '%s' cannot be "
                                                  "enforced: %s", s->param, msg);
        return true;
    case SRC_CHOICE:
        return choice_gbnf(s->v, out, err);
    }
    return true;
}

/* ------------------------------------------------------------------ main */

bool sl_api_req_parse_format(sl_api_request *r, sl_api_error *err)
{
    source s;
    if (!find_source(r, &s, err)) return false;
    if (s.kind == SRC_NONE) return true;
    if (r->tool_choice_mode == SL_API_TOOL_CHOICE_REQUIRED || r->tool_choice_mode == SL_API_TOOL_CHOICE_NAMED)
        return sl_api_req_value_error(err, s.param, "'%s' cannot be combined with tool_choice \"required\" or a "
                                      "named function: the tool call's own grammar decides the output", s.param);
    char *text = NULL;
    if (!build_gbnf(&s, &text, err)) return false;
    if (text == NULL) return sl_api_req_oom(err);

    /* The schema compiler has compiled its output once already (its
     * contract: a schema it accepts always compiles); every other form is
     * compiled here, so a bad one is a 400 before anything is queued. */
    char msg[SL_ERR_LEN];
    sl_grammar *g = NULL;
    sl_status rc = s.kind == SRC_SCHEMA ? SL_OK : sl_grammar_create(text, strlen(text), &g, msg, sizeof msg);
    sl_grammar_destroy(g);
    if (rc == SL_ENOMEM) {
        free(text);
        return sl_api_req_oom(err);
    }
    if (rc < 0) {
        free(text);
        /* A user's grammar is reported as such; a generated one failing is
         * a limit of the compiler reached by the schema, regex or choices. */
        if (s.kind == SRC_GBNF)
            return sl_api_req_value_error(err, s.param, "invalid grammar in '%s': %s", s.param, msg);
        return sl_api_req_value_error(err, s.param, "the constraint in '%s' cannot be enforced: %s", s.param, msg);
    }
    r->grammar = text;
    snprintf(r->grammar_from, sizeof r->grammar_from, "%s", s.param);
    return true;
}
