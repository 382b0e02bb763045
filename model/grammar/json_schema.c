/* model/grammar/json_schema.c: JSON Schema (the subset in json_schema.h) ->
 * GBNF, walked once, depth first. Each subschema becomes one rule named
 * <root>-<n>; each local $ref target becomes one rule too, memoised by the
 * target node, which is how recursive schemas (trees, linked lists) become
 * recursive rules. Shared pieces (whitespace, strings, numbers, any value,
 * the formats) are fixed-named rules <root>-ws, <root>-string... written
 * once at the end, only when used.
 *
 * Trade-off: the grammar produces a subset of the valid documents where the
 * exact set is costly, never a superset:
 *  - whitespace is bounded (one space, or a newline and up to 20 blanks);
 *  - an object with `properties` gets no other keys when
 *    additionalProperties is absent or true; when it is a schema, extra keys
 *    follow the declared ones, spelled with [-0-9A-Za-z_] and never equal to
 *    a declared name (key_rule); an object without `properties` is any
 *    object (absent or true), no key (false), or any keys whose values
 *    follow the schema;
 *  - numbers have at most 16 integer and 16 fraction digits and a two-digit
 *    exponent; a number with bounds is written without exponent, its bounds
 *    must have at most 5 decimals and lie within +-1e9 (else refused), and
 *    it has at most 5 fraction digits so it never rounds onto an exclusive
 *    bound;
 *  - an integer bound beyond +-1e16 counts as no bound (longer integers are
 *    never produced);
 *  - strings are written with raw UTF-8 and the short escapes; \u escapes
 *    are allowed, except \u0000 and lone surrogates (jansson refuses them);
 *  - formats are strict subsets: date years 1000-9999 and February up to the
 *    28th, no leap second, a simple dotted email.
 * Recursion that cannot end is refused: a $ref cycle that consumes no token
 * (left recursion) while walking, and a rule that derives no finite string
 * after (sl_gbnf_unproductive).
 * Numbers and integer ranges are in json_schema_num.c, the shared rules in
 * json_schema_rules.c, errors and paths in json_schema_ctx.c
 * (json_schema_internal.h joins them). */
#include "model/grammar/json_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/gbnf_text.h"
#include "model/grammar/json_schema_internal.h"
#include "model/grammar/grammar.h"
#include "model/grammar/regex.h"
#include "shared/alloc.h"

static const char *const k_annotations[] = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "discriminator",
                                            "$defs", "definitions"};
static const char *const k_supported[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "prefixItems",
    "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

/* ---- errors and paths ---------------------------------------------------------------- */

/* Appends "/seg" (JSON Pointer escaped); returns the length to restore. */
static size_t path_push(js_ctx *c, const char *seg)
{
    size_t old = c->path_len;
    char tmp[JS_PATH_MAX];
    size_t n = 0;
    tmp[n++] = '/';
    for (const char *s = seg; *s && n + 3 < sizeof tmp; s++) {
        if (*s == '~' || *s == '/') {
            tmp[n++] = '~';
            tmp[n++] = *s == '~' ? '0' : '1';
        } else {
            tmp[n++] = *s;
        }
    }
    if (c->path_len + n + 1 < sizeof c->path) {
        memcpy(c->path + c->path_len, tmp, n);
        c->path_len += n;
        c->path[c->path_len] = 0;
    }
    return old;
}

static size_t path_push_index(js_ctx *c, const char *kw, size_t i)
{
    size_t old = path_push(c, kw);
    char idx[24];
    snprintf(idx, sizeof idx, "%zu", i);
    path_push(c, idx);
    return old;
}

static void path_pop(js_ctx *c, size_t old)
{
    c->path_len = old;
    c->path[old] = 0;
}

/* ---- output helpers ------------------------------------------------------------------ */

static void ws(js_ctx *c, sl_gbnf_buf *b) { sl_js_ref_common(c, b, USE_WS, "ws"); }

static void new_name(js_ctx *c, char *name)
{
    snprintf(name, JS_NAME_MAX + 16, "%s-%u", c->rn, ++c->next_id);
}

static void add_rule(js_ctx *c, const char *name, sl_gbnf_buf *body)
{
    sl_gbnf_printf(&c->rules, "%s ::= ", name);
    sl_gbnf_putn(&c->rules, body->p ? body->p : "\"\"", body->p ? body->len : 2);
    sl_gbnf_puts(&c->rules, "\n");
    c->rules.oom |= body->oom;
}

/* The JSON text of v (compact) as a GBNF literal. */
static void json_literal(js_ctx *c, sl_gbnf_buf *b, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s == NULL) {
        b->oom = true;
        return;
    }
    sl_gbnf_literal(b, s, strlen(s));
    free(s);
    (void)c;
}

/* {a,b} after an element; b < 0 is unbounded. */
static void repeat(sl_gbnf_buf *b, long a, long hi)
{
    if (hi < 0)
        sl_gbnf_printf(b, a == 0 ? "*" : a == 1 ? "+" : "{%ld,}", a);
    else if (a == 0 && hi == 1)
        sl_gbnf_puts(b, "?");
    else if (a == hi)
        sl_gbnf_printf(b, "{%ld}", a);
    else
        sl_gbnf_printf(b, "{%ld,%ld}", a, hi);
}

/* ---- keyword checks ------------------------------------------------------------------ */

static bool in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0)
            return true;
    return false;
}

static bool is_annotation(const char *k) { return in_list(k, k_annotations, sizeof k_annotations / sizeof k_annotations[0]); }

/* The first keyword of s, other than annotations and `allowed`, or NULL. */
static const char *other_keyword(const json_t *s, const char *const *allowed, size_t n)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !in_list(k, allowed, n))
            return k;
    }
    return NULL;
}

/* A non-negative integer keyword: *out = -1 when absent. */
static bool count_kw(js_ctx *c, const json_t *s, const char *kw, long *out)
{
    *out = -1;
    const json_t *v = json_object_get(s, kw);
    if (v == NULL)
        return true;
    double d = json_number_value(v);
    if (!json_is_number(v) || d < 0 || d != floor(d)) {
        sl_js_bad_value(c, kw, "must be a non-negative integer");
        return false;
    }
    if (d > JS_REPEAT_MAX) {
        sl_js_bad_value(c, kw, "over 1000 is not supported");
        return false;
    }
    *out = (long)d;
    return true;
}

/* ---- subschemas ---------------------------------------------------------------------- */

static sl_status schema_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b);

/* A rule for s; its name into name. */
static sl_status schema_rule(js_ctx *c, const json_t *s, char *name)
{
    sl_gbnf_buf body = {0};
    new_name(c, name);
    sl_status rc = schema_expr(c, s, &body);
    if (rc == SL_OK)
        add_rule(c, name, &body);
    sl_gbnf_buf_fini(&body);
    return rc;
}

static sl_status schema_rule_at(js_ctx *c, const json_t *s, const char *kw, const char *key, char *name)
{
    size_t old = path_push(c, kw);
    if (key)
        path_push(c, key);
    sl_status rc = schema_rule(c, s, name);
    path_pop(c, old);
    return rc;
}

/* ---- $ref ---------------------------------------------------------------------------- */

static const json_t *resolve_pointer(const json_t *root, const char *ptr)
{
    const json_t *cur = root;
    const char *p = ptr;
    while (*p) {
        if (*p != '/')
            return NULL;
        p++;
        char seg[JS_PATH_MAX];
        size_t n = 0;
        while (*p && *p != '/') {
            if (n + 1 >= sizeof seg)
                return NULL;
            if (*p == '~') {
                if (p[1] != '0' && p[1] != '1')
                    return NULL;
                seg[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                seg[n++] = *p++;
            }
        }
        seg[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            if (n == 0 || *end || (seg[0] == '0' && n > 1))
                return NULL;
            cur = json_array_get(cur, i);
        } else {
            return NULL;
        }
        if (cur == NULL)
            return NULL;
    }
    return cur;
}

static js_ref *ref_find(js_ctx *c, const json_t *target)
{
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == target)
            return &c->refs[i];
    return NULL;
}

static js_ref *ref_add(js_ctx *c, const json_t *target)
{
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 8;
        js_ref *r = sl_realloc(c->refs, cap * sizeof *r);
        if (r == NULL)
            return NULL;
        c->refs = r;
        c->cap_refs = cap;
    }
    js_ref *r = &c->refs[c->n_refs++];
    *r = (js_ref){.target = target, .token_depth = c->token_depth};
    return r;
}

/* Compiles target into the rule of its entry (the path becomes the target's
 * pointer, so errors inside name where the schema text is). */
static sl_status ref_compile(js_ctx *c, size_t idx, const char *pointer)
{
    char saved[JS_PATH_MAX];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, c->path_len + 1);
    snprintf(c->path, sizeof c->path, "%s", pointer);
    c->path_len = strlen(c->path);
    snprintf(c->refs[idx].path, sizeof c->refs[idx].path, "%s", sl_js_path_text(c));
    sl_gbnf_buf body = {0};
    sl_status rc = schema_expr(c, c->refs[idx].target, &body);
    if (rc == SL_OK)
        add_rule(c, c->refs[idx].name, &body);
    sl_gbnf_buf_fini(&body);
    c->refs[idx].done = true;
    memcpy(c->path, saved, saved_len + 1);
    c->path_len = saved_len;
    return rc;
}

static sl_status ref_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    const json_t *v = json_object_get(s, "$ref");
    const char *ref = json_string_value(v);
    if (ref == NULL)
        return sl_js_bad_value(c, "$ref", "must be a string");
    static const char *const allowed[] = {"$ref"};
    const char *other = other_keyword(s, allowed, 1);
    if (other)
        return sl_js_fail(c, "keyword '%s' beside '$ref' at %s is not supported", other, sl_js_path_text(c));
    if (ref[0] != '#')
        return sl_js_fail(c, "unsupported keyword '$ref' at %s: remote reference '%s'", sl_js_path_text(c), ref);
    const json_t *target = resolve_pointer(c->root, ref + 1);
    if (target == NULL)
        return sl_js_fail(c, "invalid keyword '$ref' at %s: unknown target '%s'", sl_js_path_text(c), ref);
    js_ref *r = ref_find(c, target);
    if (r) {
        if (!r->done && r->token_depth == c->token_depth)
            return sl_js_fail(c, "invalid keyword '$ref' at %s: '%s' refers back to itself without any token between",
                        sl_js_path_text(c), ref);
        sl_gbnf_puts(b, r->name);
        return SL_OK;
    }
    r = ref_add(c, target);
    if (r == NULL)
        return c->rc = SL_ENOMEM;
    new_name(c, r->name);
    size_t idx = (size_t)(r - c->refs);
    sl_gbnf_puts(b, r->name);
    return ref_compile(c, idx, ref + 1);
}

/* ---- combinators, enum, const -------------------------------------------------------- */

static sl_status any_of_expr(js_ctx *c, const json_t *s, const char *kw, sl_gbnf_buf *b)
{
    const json_t *list = json_object_get(s, kw);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return sl_js_bad_value(c, kw, "must be a non-empty array of schemas");
    if (strcmp(kw, "allOf") == 0 && json_array_size(list) != 1)
        return sl_js_bad_value(c, kw, "only one schema is supported");
    const char *allowed[] = {kw};
    const char *other = other_keyword(s, allowed, 1);
    if (other)
        return sl_js_fail(c, "keyword '%s' beside '%s' at %s is not supported", other, kw, sl_js_path_text(c));
    sl_gbnf_puts(b, "(");
    for (size_t i = 0; i < json_array_size(list); i++) {
        char name[JS_NAME_MAX + 16];
        size_t old = path_push_index(c, kw, i);
        sl_status rc = schema_rule(c, json_array_get(list, i), name);
        path_pop(c, old);
        if (rc != SL_OK)
            return rc;
        sl_gbnf_printf(b, "%s%s", i ? " | " : "", name);
    }
    sl_gbnf_puts(b, ")");
    return SL_OK;
}

static bool type_matches(const json_t *v, const char *t)
{
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    return false;
}

static bool type_allows(const json_t *type, const json_t *v)
{
    if (type == NULL)
        return true;
    if (json_is_string(type))
        return type_matches(v, json_string_value(type));
    for (size_t i = 0; i < json_array_size(type); i++)
        if (type_matches(v, json_string_value(json_array_get(type, i))))
            return true;
    return false;
}

static sl_status enum_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    static const char *const allowed[] = {"enum", "const", "type"};
    const char *other = other_keyword(s, allowed, 3);
    const char *kw = json_object_get(s, "const") ? "const" : "enum";
    if (other)
        return sl_js_fail(c, "keyword '%s' beside '%s' at %s is not supported", other, kw, sl_js_path_text(c));
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const"), *type = json_object_get(s, "type");
    if (e && (!json_is_array(e) || json_array_size(e) == 0))
        return sl_js_bad_value(c, "enum", "must be a non-empty array");
    size_t n = 0;
    sl_gbnf_puts(b, "(");
    if (k) {
        bool in_enum = e == NULL;
        for (size_t i = 0; e && i < json_array_size(e); i++)
            in_enum |= json_equal(json_array_get(e, i), (json_t *)k);
        if (in_enum && type_allows(type, k)) {
            json_literal(c, b, k);
            n++;
        }
    } else {
        for (size_t i = 0; i < json_array_size(e); i++) {
            const json_t *v = json_array_get(e, i);
            if (!type_allows(type, v))
                continue;
            if (n++)
                sl_gbnf_puts(b, " | ");
            json_literal(c, b, v);
        }
    }
    sl_gbnf_puts(b, ")");
    if (n == 0)
        return sl_js_bad_value(c, kw, "no value fits the schema's type (and enum)");
    return SL_OK;
}

/* ---- strings ------------------------------------------------------------------------- */

static sl_status string_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    long mn, mx;
    if (!count_kw(c, s, "minLength", &mn) || !count_kw(c, s, "maxLength", &mx))
        return c->rc;
    if (mn >= 0 && mx >= 0 && mn > mx)
        return sl_js_bad_value(c, "minLength", "greater than maxLength");
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat))
        return sl_js_bad_value(c, "pattern", "must be a string");
    if (fmt && !json_is_string(fmt))
        return sl_js_bad_value(c, "format", "must be a string");
    const char *with = pat ? "pattern" : fmt ? "format" : NULL;
    if (with && (mn >= 0 || mx >= 0))
        return sl_js_fail(c, "keyword '%s' beside '%s' at %s is not supported", mn >= 0 ? "minLength" : "maxLength", with,
                    sl_js_path_text(c));
    if (pat && fmt)
        return sl_js_fail(c, "keyword 'format' beside 'pattern' at %s is not supported", sl_js_path_text(c));
    if (pat) {
        char name[JS_NAME_MAX + 16], rerr[SL_ERR_LEN];
        new_name(c, name);
        char *rules = NULL;
        sl_status rc = sl_regex_to_gbnf(json_string_value(pat), json_string_length(pat), name, true, &rules, rerr,
                                        sizeof rerr);
        if (rc == SL_ENOMEM)
            return c->rc = rc;
        if (rc != SL_OK)
            return sl_js_bad_value(c, "pattern", rerr);
        sl_gbnf_puts(&c->rules, rules);
        free(rules);
        sl_gbnf_printf(b, "\"\\\"\" %s \"\\\"\"", name);
        return SL_OK;
    }
    if (fmt) {
        static const struct {
            const char *name, *rule;
            unsigned use;
        } formats[] = {{"date", "date", USE_DATE},         {"time", "time", USE_TIME},
                       {"date-time", "date-time", USE_DATETIME}, {"uuid", "uuid", USE_UUID},
                       {"email", "email", USE_EMAIL}};
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (strcmp(json_string_value(fmt), formats[i].name) == 0) {
                sl_gbnf_puts(b, "\"\\\"\" ");
                sl_js_ref_common(c, b, formats[i].use, formats[i].rule);
                sl_gbnf_puts(b, " \"\\\"\"");
                return SL_OK;
            }
        return sl_js_fail(c, "unsupported keyword 'format' at %s: format '%s'", sl_js_path_text(c), json_string_value(fmt));
    }
    if (mn < 0 && mx < 0) {
        sl_js_ref_common(c, b, USE_STRING, "string");
        return SL_OK;
    }
    sl_gbnf_puts(b, "\"\\\"\" ");
    sl_js_ref_common(c, b, USE_CHAR, "char");
    repeat(b, mn < 0 ? 0 : mn, mx);
    sl_gbnf_puts(b, " \"\\\"\"");
    return SL_OK;
}

/* ---- objects ------------------------------------------------------------------------- */

typedef struct {
    const char *key;
    char rule[JS_NAME_MAX + 16];
    bool required;
} js_prop;

/* `"key" ws ":" ws value` */
static void member(js_ctx *c, sl_gbnf_buf *b, const js_prop *p)
{
    json_t *k = json_string(p->key);
    json_literal(c, b, k);
    json_decref(k);
    sl_gbnf_puts(b, " ");
    ws(c, b);
    sl_gbnf_puts(b, " \":\" ");
    ws(c, b);
    sl_gbnf_printf(b, " %s ", p->rule);
    ws(c, b);
}

/* Extra keys beside declared properties (additionalProperties a schema):
 * spelled with [-0-9A-Za-z_] only, so the spelling is the decoded key, and
 * never equal to a declared name: a trie of the names, where each node's
 * rule may end (unless the prefix is a name), take a child's character, or
 * take any other character and then anything. Names with other characters
 * cannot collide and are left out. Writes the rules; the key rule's name
 * into name. */
static bool key_char(unsigned char ch)
{
    return ch == '-' || ch == '_' || (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}

typedef struct {
    int first_child, next_sibling;
    unsigned char ch;
    bool terminal;
    char name[JS_NAME_MAX + 16];
} js_trie_node;

static sl_status key_rule(js_ctx *c, const js_prop *p, size_t n, char *name)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += strlen(p[i].key);
    js_trie_node *t = sl_calloc(cap, sizeof *t);
    if (t == NULL)
        return c->rc = SL_ENOMEM;
    size_t used = 1;
    t[0].first_child = t[0].next_sibling = -1;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *k = (const unsigned char *)p[i].key;
        bool plain = k[0] != 0;
        for (const unsigned char *q = k; *q && plain; q++)
            plain = key_char(*q);
        if (!plain)
            continue;
        int v = 0;
        for (const unsigned char *q = k; *q; q++) {
            int ch = t[v].first_child;
            while (ch >= 0 && t[ch].ch != *q)
                ch = t[ch].next_sibling;
            if (ch < 0) {
                ch = (int)used++;
                t[ch] = (js_trie_node){.first_child = -1, .next_sibling = t[v].first_child, .ch = *q};
                t[v].first_child = ch;
            }
            v = ch;
        }
        t[v].terminal = true;
    }
    for (size_t v = 0; v < used; v++)
        new_name(c, t[v].name);
    for (size_t v = used; v-- > 0;) {
        sl_gbnf_buf r = {0};
        bool taken[128] = {false}, first = true;
        if (v != 0 && !t[v].terminal) {
            sl_gbnf_puts(&r, "\"\"");
            first = false;
        }
        for (int ch = t[v].first_child; ch >= 0; ch = t[ch].next_sibling) {
            taken[t[ch].ch] = true;
            sl_gbnf_printf(&r, "%s\"%c\" %s", first ? "" : " | ", t[ch].ch, t[ch].name);
            first = false;
        }
        sl_gbnf_range other[128];
        size_t n_other = 0;
        for (unsigned ch = 0; ch < 128; ch++)
            if (key_char((unsigned char)ch) && !taken[ch]) {
                if (n_other && other[n_other - 1].hi + 1 == ch)
                    other[n_other - 1].hi = ch;
                else
                    other[n_other++] = (sl_gbnf_range){ch, ch};
            }
        if (n_other) {
            if (!first)
                sl_gbnf_puts(&r, " | ");
            sl_gbnf_class(&r, other, n_other);
            sl_gbnf_puts(&r, " [-0-9A-Za-z_]*");
        }
        add_rule(c, t[v].name, &r);
        sl_gbnf_buf_fini(&r);
    }
    snprintf(name, JS_NAME_MAX + 16, "%s", t[0].name);
    free(t);
    return SL_OK;
}

static sl_status object_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return sl_js_bad_value(c, "properties", "must be an object");
    if (req && !json_is_array(req))
        return sl_js_bad_value(c, "required", "must be an array of strings");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_is_string(json_array_get(req, i)))
            return sl_js_bad_value(c, "required", "must be an array of strings");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return sl_js_bad_value(c, "additionalProperties", "must be a boolean or a schema");
    size_t n_max = json_object_size(props) + json_array_size(req);
    js_prop *p = sl_calloc(n_max ? n_max : 1, sizeof *p);
    if (p == NULL)
        return c->rc = SL_ENOMEM;
    sl_status rc = SL_OK;
    size_t n = 0;
    c->token_depth++;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        bool required = false;
        for (size_t i = 0; i < json_array_size(req); i++)
            required |= strcmp(json_string_value(json_array_get(req, i)), key) == 0;
        if (json_is_false(v)) {
            if (required) {
                rc = sl_js_fail(c, "invalid keyword 'required' at %s: property '%s' has schema false", sl_js_path_text(c), key);
                break;
            }
            continue;
        }
        p[n].key = key;
        p[n].required = required;
        if ((rc = schema_rule_at(c, v, "properties", key, p[n].rule)) != SL_OK)
            break;
        n++;
    }
    /* required names without a schema: present, any value */
    for (size_t i = 0; rc == SL_OK && i < json_array_size(req); i++) {
        const char *name = json_string_value(json_array_get(req, i));
        bool seen = json_object_get(props, name) != NULL;
        for (size_t j = 0; j < n && !seen; j++)
            seen = strcmp(p[j].key, name) == 0;
        if (seen)
            continue;
        const json_t *value_schema = json_is_object(addl) ? addl : json_true();
        if (json_is_false(addl)) {
            rc = sl_js_fail(c, "invalid keyword 'required' at %s: '%s' is not in properties and additionalProperties is "
                         "false", sl_js_path_text(c), name);
            break;
        }
        p[n].key = name;
        p[n].required = true;
        rc = json_is_object(addl) ? schema_rule_at(c, value_schema, "additionalProperties", NULL, p[n].rule)
                                  : (new_name(c, p[n].rule), SL_OK);
        if (rc == SL_OK && !json_is_object(addl)) {
            sl_gbnf_buf any = {0};
            sl_js_ref_common(c, &any, USE_VALUE, "value");
            add_rule(c, p[n].rule, &any);
            sl_gbnf_buf_fini(&any);
        }
        n++;
    }
    char extra[JS_NAME_MAX + 16] = "";
    if (rc == SL_OK && json_is_object(addl))
        rc = schema_rule_at(c, addl, "additionalProperties", NULL, extra);
    c->token_depth--;
    if (rc != SL_OK) {
        free(p);
        return rc;
    }
    if (n == 0) {
        if (json_is_object(addl)) {   /* any keys, values per the schema */
            sl_gbnf_puts(b, "\"{\" ");
            ws(c, b);
            sl_gbnf_puts(b, " (");
            sl_js_ref_common(c, b, USE_STRING, "string");
            sl_gbnf_puts(b, " ");
            ws(c, b);
            sl_gbnf_puts(b, " \":\" ");
            ws(c, b);
            sl_gbnf_printf(b, " %s ", extra);
            ws(c, b);
            sl_gbnf_puts(b, " (\",\" ");
            ws(c, b);
            sl_gbnf_puts(b, " ");
            sl_js_ref_common(c, b, USE_STRING, "string");
            sl_gbnf_puts(b, " ");
            ws(c, b);
            sl_gbnf_puts(b, " \":\" ");
            ws(c, b);
            sl_gbnf_printf(b, " %s ", extra);
            ws(c, b);
            sl_gbnf_puts(b, ")*)? \"}\"");
        } else if (json_is_false(addl) || props) {
            sl_gbnf_puts(b, "\"{\" ");
            ws(c, b);
            sl_gbnf_puts(b, " \"}\"");
        } else {
            sl_js_ref_common(c, b, USE_OBJECT, "object");
        }
        free(p);
        return SL_OK;
    }
    /* extras (additionalProperties a schema): after the declared members,
     * `end ::= "," ws extra-member end | ""` */
    char xmember[JS_NAME_MAX + 16] = "", end[JS_NAME_MAX + 16] = "";
    if (json_is_object(addl)) {
        char key[JS_NAME_MAX + 16];
        if ((rc = key_rule(c, p, n, key)) != SL_OK) {
            free(p);
            return rc;
        }
        sl_gbnf_buf t = {0};
        sl_gbnf_printf(&t, "\"\\\"\" %s \"\\\"\" ", key);
        ws(c, &t);
        sl_gbnf_puts(&t, " \":\" ");
        ws(c, &t);
        sl_gbnf_printf(&t, " %s ", extra);
        ws(c, &t);
        new_name(c, xmember);
        add_rule(c, xmember, &t);
        sl_gbnf_buf_fini(&t);
        new_name(c, end);
        sl_gbnf_puts(&t, "\",\" ");
        ws(c, &t);
        sl_gbnf_printf(&t, " %s %s | \"\"", xmember, end);
        add_rule(c, end, &t);
        sl_gbnf_buf_fini(&t);
    }
    /* tails[i]: the members after i, each preceded by a comma, optional ones
     * optional; members keep the schema's order */
    char (*tails)[JS_NAME_MAX + 16] = sl_calloc(n + 1, sizeof *tails);
    if (tails == NULL) {
        free(p);
        return c->rc = SL_ENOMEM;
    }
    snprintf(tails[n], sizeof tails[n], "%s", end);   /* what follows the last member */
    for (size_t i = n; i-- > 1;) {
        /* `"," member next | next` rather than `("," member)? next`: the
         * grammar engine turns each group and each ? into a rule of its own */
        sl_gbnf_buf t = {0};
        sl_gbnf_puts(&t, "\",\" ");
        ws(c, &t);
        sl_gbnf_puts(&t, " ");
        member(c, &t, &p[i]);
        if (tails[i + 1][0])
            sl_gbnf_printf(&t, " %s", tails[i + 1]);
        if (!p[i].required)
            sl_gbnf_printf(&t, " | %s", tails[i + 1][0] ? tails[i + 1] : "\"\"");
        new_name(c, tails[i]);
        add_rule(c, tails[i], &t);
        sl_gbnf_buf_fini(&t);
    }
    size_t first_req = n;
    for (size_t i = 0; i < n && first_req == n; i++)
        if (p[i].required)
            first_req = i;
    sl_gbnf_puts(b, "\"{\" ");
    ws(c, b);
    sl_gbnf_puts(b, " (");
    for (size_t j = 0; j <= first_req && j < n; j++) {
        if (j)
            sl_gbnf_puts(b, " | ");
        member(c, b, &p[j]);
        if (tails[j + 1][0])
            sl_gbnf_printf(b, " %s", tails[j + 1]);
    }
    if (first_req == n && xmember[0])
        sl_gbnf_printf(b, " | %s %s", xmember, end);
    sl_gbnf_puts(b, first_req == n ? ")? \"}\"" : ") \"}\"");
    free(tails);
    free(p);
    return SL_OK;
}

/* ---- arrays -------------------------------------------------------------------------- */

static sl_status array_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    long mn, mx;
    if (!count_kw(c, s, "minItems", &mn) || !count_kw(c, s, "maxItems", &mx))
        return c->rc;
    if (mn >= 0 && mx >= 0 && mn > mx)
        return sl_js_bad_value(c, "minItems", "greater than maxItems");
    if (json_is_array(items))
        return sl_js_bad_value(c, "items", "an array of schemas is not supported (use prefixItems)");
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return sl_js_bad_value(c, "items", "must be a schema");
    if (prefix && !json_is_array(prefix))
        return sl_js_bad_value(c, "prefixItems", "must be an array of schemas");
    size_t np = json_array_size(prefix);
    if (np > JS_PREFIX_MAX)
        return sl_js_bad_value(c, "prefixItems", "more than 64 entries are not supported");
    if (mn < 0)
        mn = 0;
    if (json_is_false(items) && (mx < 0 || mx > (long)np))
        mx = (long)np;
    if (mx >= 0 && mn > mx)
        return sl_js_bad_value(c, "minItems", "more items than prefixItems allows with items false");
    /* on the heap: this frame is on the walk's recursion, once per nesting level */
    char (*pre)[JS_NAME_MAX + 16] = sl_calloc(np ? np : 1, sizeof *pre), item[JS_NAME_MAX + 16] = "";
    if (pre == NULL)
        return c->rc = SL_ENOMEM;
    c->token_depth++;
    sl_status rc = SL_OK;
    for (size_t k = 0; k < np && rc == SL_OK; k++) {
        size_t old = path_push_index(c, "prefixItems", k);
        rc = schema_rule(c, json_array_get(prefix, k), pre[k]);
        path_pop(c, old);
    }
    if (rc == SL_OK && items && !json_is_false(items) && (mx < 0 || mx > (long)np))
        rc = schema_rule_at(c, items, "items", NULL, item);
    c->token_depth--;
    if (rc != SL_OK) {
        free(pre);
        return rc;
    }
    sl_gbnf_buf any = {0};
    if (item[0] == 0) {
        sl_js_ref_common(c, &any, USE_VALUE, "value");
        snprintf(item, sizeof item, "%s", any.p ? any.p : "");
        sl_gbnf_buf_fini(&any);
    }
    sl_gbnf_puts(b, "\"[\" ");
    ws(c, b);
    size_t open = 0;
    long k = 0;
    for (; k < (long)np && (mx < 0 || k < mx); k++) {
        sl_gbnf_puts(b, k >= mn ? " (" : " ");
        if (k)
            sl_gbnf_puts(b, "\",\" "), ws(c, b), sl_gbnf_puts(b, " ");
        sl_gbnf_printf(b, "%s ", pre[k]);
        ws(c, b);
        open += k >= mn;
    }
    if (mx < 0 || k < mx) {   /* items beyond the prefix */
        long lo = mn > k ? mn - k : 0, hi = mx < 0 ? -1 : mx - k;
        if (k == 0) {
            sl_gbnf_printf(b, lo >= 1 ? " %s " : " (%s ", item);
            ws(c, b);
            if (hi != 1) {
                sl_gbnf_puts(b, " (\",\" ");
                ws(c, b);
                sl_gbnf_printf(b, " %s ", item);
                ws(c, b);
                sl_gbnf_puts(b, ")");
                repeat(b, lo >= 1 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
            }
            if (lo < 1)
                sl_gbnf_puts(b, ")?");
        } else {
            sl_gbnf_puts(b, " (\",\" ");
            ws(c, b);
            sl_gbnf_printf(b, " %s ", item);
            ws(c, b);
            sl_gbnf_puts(b, ")");
            repeat(b, lo, hi);
        }
    }
    for (size_t i = 0; i < open; i++)
        sl_gbnf_puts(b, ")?");
    sl_gbnf_puts(b, " \"]\"");
    free(pre);
    return SL_OK;
}

/* ---- the dispatcher ------------------------------------------------------------------ */

static const char *const k_types[] = {"null", "boolean", "object", "array", "number", "integer", "string"};

static sl_status typed_expr(js_ctx *c, const json_t *s, const char *t, sl_gbnf_buf *b)
{
    if (strcmp(t, "null") == 0)
        return sl_gbnf_puts(b, "\"null\""), SL_OK;
    if (strcmp(t, "boolean") == 0)
        return sl_gbnf_puts(b, "(\"true\" | \"false\")"), SL_OK;
    if (strcmp(t, "string") == 0)
        return string_expr(c, s, b);
    if (strcmp(t, "integer") == 0)
        return sl_js_integer_expr(c, s, b);
    if (strcmp(t, "number") == 0)
        return sl_js_number_expr(c, s, b);
    if (strcmp(t, "object") == 0)
        return object_expr(c, s, b);
    return array_expr(c, s, b);
}

static bool has_any(const json_t *s, const char *const *kws, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (json_object_get(s, kws[i]))
            return true;
    return false;
}

static sl_status schema_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    if (json_is_true(s)) {
        sl_js_ref_common(c, b, USE_VALUE, "value");
        return SL_OK;
    }
    if (json_is_false(s))
        return sl_js_fail(c, "invalid schema at %s: false matches nothing", sl_js_path_text(c));
    if (!json_is_object(s))
        return sl_js_fail(c, "invalid schema at %s: not an object or a boolean", sl_js_path_text(c));
    if (c->depth >= JS_DEPTH_MAX)
        return sl_js_fail(c, "invalid schema at %s: nested more than 64 deep", sl_js_path_text(c));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !in_list(k, k_supported, sizeof k_supported / sizeof k_supported[0]))
            return sl_js_fail(c, "unsupported keyword '%s' at %s", k, sl_js_path_text(c));
    }
    const char *defs_kw[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++)
        if (json_object_get(s, defs_kw[i]) && !json_is_object(json_object_get(s, defs_kw[i])))
            return sl_js_bad_value(c, defs_kw[i], "must be an object");
    const json_t *type = json_object_get(s, "type");
    if (type) {
        bool ok = json_is_string(type) || (json_is_array(type) && json_array_size(type) > 0);
        for (size_t i = 0; ok && i < (json_is_array(type) ? json_array_size(type) : 1); i++) {
            const json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
            ok = json_is_string(t) && in_list(json_string_value(t), k_types, 7);
            for (size_t j = 0; ok && j < i; j++)
                ok = !json_equal((json_t *)t, json_array_get(type, j));
        }
        if (!ok)
            return sl_js_bad_value(c, "type", "must be a type name or a non-empty array of distinct type names");
    }
    c->depth++;
    sl_status rc;
    if (json_object_get(s, "$ref"))
        rc = ref_expr(c, s, b);
    else if (json_object_get(s, "anyOf"))
        rc = any_of_expr(c, s, "anyOf", b);
    else if (json_object_get(s, "oneOf"))
        rc = any_of_expr(c, s, "oneOf", b);
    else if (json_object_get(s, "allOf"))
        rc = any_of_expr(c, s, "allOf", b);
    else if (json_object_get(s, "enum") || json_object_get(s, "const"))
        rc = enum_expr(c, s, b);
    else {
        const char *types[7];
        size_t n = 0;
        if (json_is_string(type)) {
            types[n++] = json_string_value(type);
        } else if (type) {
            for (size_t i = 0; i < json_array_size(type); i++)
                types[n++] = json_string_value(json_array_get(type, i));
        } else {   /* no type: the types the keywords constrain, or any value */
            static const char *const obj[] = {"properties", "required", "additionalProperties"},
                                     *arr[] = {"items", "prefixItems", "minItems", "maxItems"},
                                     *str[] = {"minLength", "maxLength", "pattern", "format"},
                                     *num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
            if (has_any(s, obj, 3))
                types[n++] = "object";
            if (has_any(s, arr, 4))
                types[n++] = "array";
            if (has_any(s, str, 4))
                types[n++] = "string";
            if (has_any(s, num, 4))
                types[n++] = "number";
        }
        if (n == 0) {
            sl_js_ref_common(c, b, USE_VALUE, "value");
            rc = SL_OK;
        } else {
            rc = SL_OK;
            if (n > 1)
                sl_gbnf_puts(b, "(");
            for (size_t i = 0; i < n && rc == SL_OK; i++) {
                if (i)
                    sl_gbnf_puts(b, " | ");
                rc = typed_expr(c, s, types[i], b);
            }
            if (n > 1)
                sl_gbnf_puts(b, ")");
        }
    }
    c->depth--;
    return rc;
}

/* ---- entry points -------------------------------------------------------------------- */

static bool name_ok(const char *n)
{
    size_t len = n ? strlen(n) : 0;
    return len > 0 && len <= JS_NAME_MAX &&
           strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == len;
}

static sl_status finish(js_ctx *c, char **out)
{
    sl_js_common_rules(c);
    if (c->rules.oom) {
        sl_gbnf_buf_fini(&c->rules);
        return SL_ENOMEM;
    }
    if (c->rules.len > SL_GRAMMAR_TEXT_MAX) {
        sl_gbnf_buf_fini(&c->rules);
        return sl_js_fail(c, "invalid schema at root: its grammar is over %u bytes", SL_GRAMMAR_TEXT_MAX);
    }
    const char *bad[16];
    size_t bad_len[16];
    size_t n_bad = sl_gbnf_unproductive(c->rules.p, bad, bad_len, 16);
    if (n_bad > 0) {
        const char *where = "root";   /* a $ref target's path when one is among them */
        for (size_t k = 0; k < n_bad && k < 16 && where[0] != '/'; k++)
            for (size_t i = 1; i < c->n_refs; i++)
                if (strlen(c->refs[i].name) == bad_len[k] && memcmp(c->refs[i].name, bad[k], bad_len[k]) == 0)
                    where = c->refs[i].path;
        sl_gbnf_buf_fini(&c->rules);
        return sl_js_fail(c, "invalid schema at %s: its recursion never ends (no finite document)", where);
    }
    /* The engine's limits (rules after expanding repetitions, ambiguity) are
     * its own: compiling once here means a schema we accept always compiles
     * where the grammar is used. */
    sl_grammar *g = NULL;
    char gerr[SL_ERR_LEN] = "";
    sl_status rc;
    if (strcmp(c->rn, "root") == 0) {
        rc = sl_grammar_create(c->rules.p, c->rules.len, &g, gerr, sizeof gerr);
    } else {   /* the engine starts at `root`: point it at ours (helpers never collide: they carry our name) */
        sl_gbnf_buf t = {0};
        sl_gbnf_printf(&t, "root ::= %s\n", c->rn);
        sl_gbnf_putn(&t, c->rules.p, c->rules.len);
        rc = t.oom ? SL_ENOMEM : sl_grammar_create(t.p, t.len, &g, gerr, sizeof gerr);
        sl_gbnf_buf_fini(&t);
    }
    sl_grammar_destroy(g);
    if (rc != SL_OK) {
        sl_gbnf_buf_fini(&c->rules);
        if (rc == SL_ENOMEM)
            return c->rc = rc;
        return sl_js_fail(c, "invalid schema at root: its grammar exceeds the grammar engine's limits (%s)", gerr);
    }
    *out = sl_gbnf_buf_take(&c->rules);
    return *out ? SL_OK : SL_ENOMEM;
}

sl_status sl_json_schema_to_gbnf(const json_t *schema, const char *root_name, char **out, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = 0;
    if (out == NULL)
        return SL_EINVAL;
    *out = NULL;
    js_ctx c = {.root = schema, .rn = root_name, .err = err, .err_len = err_len};
    if (schema == NULL)
        return sl_js_fail(&c, "invalid schema at root: no schema");
    if (!name_ok(root_name))
        return sl_js_fail(&c, "invalid rule name (letters, digits and '-', at most %d)", JS_NAME_MAX);
    /* the root is a $ref target ("#") whose rule is the root rule itself */
    js_ref *r = ref_add(&c, schema);
    if (r == NULL)
        return SL_ENOMEM;
    snprintf(r->name, sizeof r->name, "%s", root_name);
    sl_status rc = ref_compile(&c, 0, "");
    if (rc == SL_OK && c.rc == SL_OK)
        rc = finish(&c, out);
    else if (rc == SL_OK)
        rc = c.rc;
    if (rc != SL_OK)
        sl_gbnf_buf_fini(&c.rules);
    free(c.refs);
    return rc;
}

sl_status sl_json_object_gbnf(const char *root_name, char **out)
{
    if (out == NULL)
        return SL_EINVAL;
    *out = NULL;
    if (!name_ok(root_name))
        return SL_EINVAL;
    js_ctx c = {.rn = root_name};
    sl_gbnf_printf(&c.rules, "%s ::= ", root_name);
    sl_js_ref_common(&c, &c.rules, USE_OBJECT, "object");
    sl_gbnf_puts(&c.rules, "\n");
    return finish(&c, out);
}
