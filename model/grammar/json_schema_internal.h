/* model/grammar/json_schema_internal.h: what the schema compiler's files
 * share: the walk's context, the error and path helpers
 * (json_schema_ctx.c), and the pieces that live in their own files
 * (json_schema_num.c: numbers and integer ranges; json_schema_rules.c: the
 * fixed-named shared rules). Calls go one way: json_schema.c walks and
 * calls into the others; json_schema_num.c calls only json_schema_ctx.c.
 * Private to model/grammar. */
#ifndef SL_JSON_SCHEMA_INTERNAL_H
#define SL_JSON_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "model/grammar/gbnf_text.h"
#include "shared/status.h"

#define JS_DEPTH_MAX 64        /* nested subschemas, counted through $ref targets (bounds the walk's stack) */
#define JS_NAME_MAX 96         /* root name length */
#define JS_PREFIX_MAX 64       /* prefixItems entries */
#define JS_REPEAT_MAX 1000     /* minLength/maxLength/minItems/maxItems */
#define JS_PATH_MAX 512
#define JS_INT_DIGITS 16       /* digits of an unbounded integer */
#define JS_NUM_BOUND 1e9       /* largest |bound| of a bounded number */

enum {
    USE_WS = 1u << 0,
    USE_VALUE = 1u << 1,
    USE_OBJECT = 1u << 2,
    USE_ARRAY = 1u << 3,
    USE_STRING = 1u << 4,
    USE_CHAR = 1u << 5,
    USE_NUMBER = 1u << 6,
    USE_INTEGER = 1u << 7,
    USE_DATE = 1u << 8,
    USE_TIME = 1u << 9,
    USE_DATETIME = 1u << 10,
    USE_UUID = 1u << 11,
    USE_EMAIL = 1u << 12,
    USE_HEX = 1u << 13,
};

typedef struct {
    const json_t *target;
    char name[JS_NAME_MAX + 16];
    char path[JS_PATH_MAX];
    bool done;
    int token_depth;   /* tokens consumed on the way in: equal on re-entry means left recursion */
} js_ref;

typedef struct {
    const json_t *root;
    const char *rn;
    sl_gbnf_buf rules;
    unsigned next_id;
    unsigned used;
    js_ref *refs;
    size_t n_refs, cap_refs;
    int depth, token_depth;
    char path[JS_PATH_MAX];
    size_t path_len;
    char path_shown[128];
    sl_status rc;
    char *err;
    size_t err_len;
} js_ctx;

/* Sets the first error (SL_EINVAL, message into the caller's buffer); later
 * ones are dropped. Returns c->rc. */
sl_status sl_js_fail(js_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "invalid keyword 'kw' at PATH: why" */
sl_status sl_js_bad_value(js_ctx *c, const char *kw, const char *why);
/* The current subschema's JSON Pointer for a message ("root" at the top). */
const char *sl_js_path_text(js_ctx *c);
/* Marks shared rules used (with the rules they refer to). */
void sl_js_use(js_ctx *c, unsigned what);
/* Writes a reference to the shared rule <root>-<suffix>, marking it used. */
void sl_js_ref_common(js_ctx *c, sl_gbnf_buf *b, unsigned what, const char *suffix);

/* json_schema_num.c: s (type integer or number) as one GBNF element. */
sl_status sl_js_integer_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b);
sl_status sl_js_number_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b);

/* json_schema_rules.c: appends the shared rules c->used names to c->rules. */
void sl_js_common_rules(js_ctx *c);

#endif
