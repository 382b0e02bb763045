/* frontend/api_request_body.c: a request body's bytes -> a JSON object, with
 * the limits every JSON route applies before jansson sees the text (nesting
 * depth) and after (an object at the top). Runs in the front ends; its own
 * file because the request parser and the structured-output parser (a schema
 * given as a JSON string) both call it. */
#include <stdbool.h>
#include <stddef.h>

#include "shared/alloc.h"
#include "frontend/api_request_internal.h"

/* True when the JSON text nests arrays/objects deeper than `max`. Strings
 * are skipped (brackets inside them do not count). Done before jansson sees
 * the body so a body of a million '[' costs one pass and no recursion. */
static bool too_deep(const char *s, size_t len, int max)
{
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max) return true;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return false;
}

json_t *sl_api_json_parse_body(const char *body, size_t len, sl_api_error *err)
{
    if (!body || len == 0) {
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, NULL, "request body is empty");
        return NULL;
    }
    if (too_deep(body, len, SL_API_JSON_DEPTH_MAX)) {
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, NULL,
                         "JSON nested deeper than %d levels", SL_API_JSON_DEPTH_MAX);
        return NULL;
    }
    /* jansson already refuses invalid UTF-8, lone surrogates in \u escapes,
     * NaN/Infinity literals, overflowing reals and integers past int64, and
     * (without JSON_ALLOW_NUL) \u0000 in strings, which C strings could not
     * carry. */
    json_error_t je;
    unsigned nulls = sl_alloc_nulls();
    /* No injected failure inside the parser: jansson 2.14 writes out of
     * bounds after one of its allocations fails mid-parse (an ASan SEGV on a
     * write inside json_loadb, at the sweep's N=77). A real failure there is
     * jansson's to fix; injection covers everything around it. */
    sl_alloc_fault_hold(true);
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    sl_alloc_fault_hold(false);
    /* Out of memory: jansson reports a failed allocation as a syntax error
     * (or with no text at all), so the allocator's count decides. */
    if (!root && sl_alloc_nulls() != nulls) {
        sl_api_error_set(err, SL_API_ERR_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    if (!root) {
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, NULL,
                         "invalid JSON body: %s (at byte %d)", je.text, je.position);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

