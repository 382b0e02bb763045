/* frontend/api_request_tools.c: the tool-calling and template fields of a
 * chat request: tools, tool_choice, parallel_tool_calls, the deprecated
 * functions/function_call, chat_template_kwargs and reasoning_format.
 * Runs in the front ends while a chat body is parsed. Trade-off: the legacy
 * functions form is rewritten into the tools form inside the parsed body, so
 * the template, the tool grammar and the response code see one shape only;
 * the reply then carries `tool_calls`, not the legacy `function_call`. */
#include <stdio.h>
#include <string.h>

#include "frontend/api_request_internal.h"

/* ------------------------------------------------------------- functions */

/* One function definition: {"name", "description"?, "parameters"?, "strict"?}.
 * at is where it sits ("tools[2].function", "functions[0]"). */
static bool check_function(const json_t *fn, const char *at, sl_api_error *err)
{
    char p[SL_API_PARAM_LEN];
    if (!json_is_object(fn)) return sl_api_req_type_error(err, at, "an object");
    json_t *name = json_object_get(fn, "name");
    snprintf(p, sizeof p, "%s.name", at);
    if (!name || json_is_null(name))
        return sl_api_req_value_error(err, p, "'%s' is a required property", p);
    if (!json_is_string(name)) return sl_api_req_type_error(err, p, "a string");
    if (!sl_api_req_name_ok(json_string_value(name)))
        return sl_api_req_value_error(err, p, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, '_' and '-', got '%.64s'", p,
                                      json_string_value(name));
    json_t *v = sl_api_req_field(fn, "description");
    snprintf(p, sizeof p, "%s.description", at);
    if (v && !json_is_string(v)) return sl_api_req_type_error(err, p, "a string");
    v = sl_api_req_field(fn, "parameters");
    snprintf(p, sizeof p, "%s.parameters", at);
    if (v && !json_is_object(v)) return sl_api_req_type_error(err, p, "an object (a JSON Schema)");
    v = sl_api_req_field(fn, "strict");
    snprintf(p, sizeof p, "%s.strict", at);
    if (v && !json_is_boolean(v)) return sl_api_req_type_error(err, p, "a boolean");
    return true;
}

static const char *function_name(const json_t *tool)
{
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

static bool check_tools(const json_t *tools, sl_api_error *err)
{
    if (!json_is_array(tools)) return sl_api_req_type_error(err, "tools", "an array");
    size_t n = json_array_size(tools);
    if (n == 0) return sl_api_req_value_error(err, "tools", "'tools' must not be empty (leave it out instead)");
    if (n > SL_API_TOOLS_MAX)
        return sl_api_req_value_error(err, "tools", "at most %d tools are allowed, got %zu", SL_API_TOOLS_MAX, n);
    char p[SL_API_PARAM_LEN];
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return sl_api_req_type_error(err, p, "an object");
        json_t *type = json_object_get(t, "type");
        snprintf(p, sizeof p, "tools[%zu].type", i);
        if (!json_is_string(type)) return sl_api_req_type_error(err, p, "a string");
        if (strcmp(json_string_value(type), "function") != 0)
            return sl_api_req_unsupported(err, p, "tool type '%.40s' is not supported: only \"function\"",
                                          json_string_value(type));
        snprintf(p, sizeof p, "tools[%zu].function", i);
        if (!json_object_get(t, "function")) return sl_api_req_value_error(err, p, "'%s' is a required property", p);
        if (!check_function(json_object_get(t, "function"), p, err)) return false;
        const char *name = function_name(t);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(function_name(json_array_get(tools, j)), name) == 0) {
                snprintf(p, sizeof p, "tools[%zu].function.name", i);
                return sl_api_req_value_error(err, p, "tool name '%s' appears twice (tools[%zu] and tools[%zu])",
                                              name, j, i);
            }
        }
    }
    return true;
}

/* functions: [{name, ...}] -> tools: [{"type":"function","function":{...}}],
 * function_call: "none" | "auto" | {"name"} -> the matching tool_choice. The
 * new members are stored in the parsed body, which owns them. */
static bool map_functions(sl_api_request *r, sl_api_error *err)
{
    json_t *fns = sl_api_req_field(r->_root, "functions");
    json_t *fc = sl_api_req_field(r->_root, "function_call");
    if (fns && sl_api_req_field(r->_root, "tools"))
        return sl_api_req_value_error(err, "functions", "give 'tools' or the deprecated 'functions', not both");
    if (fc && sl_api_req_field(r->_root, "tool_choice"))
        return sl_api_req_value_error(err, "function_call",
                                      "give 'tool_choice' or the deprecated 'function_call', not both");
    if (fns) {
        if (!json_is_array(fns)) return sl_api_req_type_error(err, "functions", "an array");
        if (json_array_size(fns) == 0) return sl_api_req_value_error(err, "functions", "'functions' must not be empty");
        json_t *tools = json_array();
        if (!tools || json_object_set_new(r->_root, "tools", tools) != 0) return sl_api_req_oom(err);
        char p[SL_API_PARAM_LEN];
        size_t i;
        json_t *fn;
        json_array_foreach(fns, i, fn) {
            snprintf(p, sizeof p, "functions[%zu]", i);
            if (!check_function(fn, p, err)) return false;
            json_t *t = json_pack("{s:s, s:O}", "type", "function", "function", fn);
            if (!t || json_array_append_new(tools, t) != 0) return sl_api_req_oom(err);
        }
    }
    if (fc) {
        json_t *tc;
        if (json_is_string(fc)) {
            const char *s = json_string_value(fc);
            if (strcmp(s, "none") != 0 && strcmp(s, "auto") != 0)
                return sl_api_req_value_error(err, "function_call", "'function_call' must be \"none\", \"auto\" or "
                                                                    "{\"name\": ...}, got '%.40s'", s);
            tc = json_string(s);
        } else if (json_is_object(fc)) {
            json_t *name = json_object_get(fc, "name");
            if (!json_is_string(name)) return sl_api_req_type_error(err, "function_call.name", "a string");
            tc = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
        } else {
            return sl_api_req_type_error(err, "function_call", "a string or an object");
        }
        if (!tc || json_object_set_new(r->_root, "tool_choice", tc) != 0) return sl_api_req_oom(err);
    }
    return true;
}

/* ----------------------------------------------------------- tool_choice */

static bool parse_tool_choice(sl_api_request *r, sl_api_error *err)
{
    /* A mapped function_call is reported under its own name. */
    const char *at = sl_api_req_field(r->_root, "function_call") ? "function_call" : "tool_choice";
    json_t *tc = r->tool_choice;
    bool has_tools = r->tools != NULL;
    r->tool_choice_mode = has_tools ? SL_API_TOOL_CHOICE_AUTO : SL_API_TOOL_CHOICE_NONE;
    if (!tc) return true;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "none") == 0) r->tool_choice_mode = SL_API_TOOL_CHOICE_NONE;
        else if (strcmp(s, "auto") == 0) r->tool_choice_mode = has_tools ? SL_API_TOOL_CHOICE_AUTO
                                                                         : SL_API_TOOL_CHOICE_NONE;
        else if (strcmp(s, "required") == 0) r->tool_choice_mode = SL_API_TOOL_CHOICE_REQUIRED;
        else return sl_api_req_value_error(err, at, "'%s' must be \"none\", \"auto\", \"required\" or an object, "
                                                    "got '%.40s'", at, s);
        if (r->tool_choice_mode == SL_API_TOOL_CHOICE_REQUIRED && !has_tools)
            return sl_api_req_value_error(err, at, "'%s' \"required\" needs 'tools'", at);
        return true;
    }
    if (!json_is_object(tc)) return sl_api_req_type_error(err, at, "a string or an object");
    char p[SL_API_PARAM_LEN];
    json_t *type = json_object_get(tc, "type");
    snprintf(p, sizeof p, "%s.type", at);
    if (!json_is_string(type)) return sl_api_req_type_error(err, p, "a string");
    if (strcmp(json_string_value(type), "function") != 0)
        return sl_api_req_unsupported(err, p, "tool_choice type '%.40s' is not supported: only \"function\"",
                                      json_string_value(type));
    json_t *fn = json_object_get(tc, "function");
    snprintf(p, sizeof p, "%s.function", at);
    if (!json_is_object(fn)) return sl_api_req_type_error(err, p, "an object");
    json_t *name = json_object_get(fn, "name");
    snprintf(p, sizeof p, "%s.function.name", at);
    if (!json_is_string(name)) return sl_api_req_type_error(err, p, "a string");
    if (!has_tools) return sl_api_req_value_error(err, at, "a named '%s' needs 'tools'", at);
    const char *n = json_string_value(name);
    size_t i;
    json_t *t;
    json_array_foreach(r->tools, i, t)
        if (strcmp(function_name(t), n) == 0) {
            r->tool_choice_mode = SL_API_TOOL_CHOICE_NAMED;
            r->tool_choice_name = n;
            return true;
        }
    return sl_api_req_value_error(err, p, "'%.64s' is not the name of one of the tools", n);
}

/* ------------------------------------------------- template and reasoning */

static bool parse_template_kwargs(sl_api_request *r, sl_api_error *err)
{
    json_t *v = sl_api_req_field(r->_root, "chat_template_kwargs");
    if (!v) return true;
    if (!json_is_object(v)) return sl_api_req_type_error(err, "chat_template_kwargs", "an object");
    /* The template interpreter walks what it is given on every render; a
     * bound keeps a request from making that walk its own denial of service. */
    size_t bytes = json_dumpb(v, NULL, 0, JSON_COMPACT);
    if (bytes == 0) return sl_api_req_oom(err);   /* "{}" is 2: the dump's loop check failed to allocate */
    if (bytes > SL_API_TEMPLATE_KWARGS_BYTES_MAX)
        return sl_api_req_value_error(err, "chat_template_kwargs", "'chat_template_kwargs' may be at most %d bytes "
                                      "of JSON, got %zu", SL_API_TEMPLATE_KWARGS_BYTES_MAX, bytes);
    r->chat_template_kwargs = v;
    return true;
}

/* llama.cpp's names map onto the two behaviours: "none" leaves the text
 * inline; "deepseek" and "auto" separate it. */
static bool parse_reasoning_format(sl_api_request *r, sl_api_error *err)
{
    json_t *v = sl_api_req_field(r->_root, "reasoning_format");
    if (!v) return true;
    if (!json_is_string(v)) return sl_api_req_type_error(err, "reasoning_format", "a string");
    const char *s = json_string_value(v);
    if (strcmp(s, "separate") == 0 || strcmp(s, "deepseek") == 0 || strcmp(s, "auto") == 0)
        r->reasoning_format = SL_API_REASONING_SEPARATE;
    else if (strcmp(s, "inline") == 0 || strcmp(s, "none") == 0)
        r->reasoning_format = SL_API_REASONING_INLINE;
    else
        return sl_api_req_value_error(err, "reasoning_format", "'reasoning_format' must be \"separate\" (or "
                                      "\"deepseek\", \"auto\") or \"inline\" (or \"none\"), got '%.40s'", s);
    return true;
}

/* ------------------------------------------------------------------ main */

bool sl_api_req_parse_tools(sl_api_request *r, sl_api_error *err)
{
    if (!map_functions(r, err)) return false;
    r->tools = sl_api_req_field(r->_root, "tools");
    if (r->tools && !check_tools(r->tools, err)) return false;
    r->tool_choice = sl_api_req_field(r->_root, "tool_choice");
    if (!parse_tool_choice(r, err)) return false;
    json_t *v = sl_api_req_field(r->_root, "parallel_tool_calls");
    if (v && !json_is_boolean(v)) return sl_api_req_type_error(err, "parallel_tool_calls", "a boolean");
    r->parallel_tool_calls = v ? json_is_true(v) : true;
    if (!parse_template_kwargs(r, err)) return false;
    return parse_reasoning_format(r, err);
}
