/* model/grammar/gbnf_parse.c: GBNF text -> rules of byte-level elements.
 * Runs wherever a grammar is compiled (front ends, worker). Everything is
 * lowered while parsing: a literal becomes one byte class per byte, a
 * character class over code points becomes a helper rule whose alternatives
 * are UTF-8 byte-range sequences, a group a helper rule, a repetition helper
 * rules (x* is R ::= x R | empty). The trade-off: no AST, so an error is
 * found at the byte that causes it, and the compiler (grammar.c) sees only
 * three element kinds. Rule boundaries are found by lookahead (`name ::=`),
 * so a rule body may span lines anywhere, a superset of llama.cpp's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar_internal.h"

#define NAME_HASH_CAP 8192   /* > 2 * SL_GRAMMAR_RULES_MAX: probing ends */
#define NEST_MAX 200         /* groups inside groups */

typedef struct {
    const char *s;
    size_t n, p;
    sl_gram_build *b;
    char *err;
    size_t err_len;
    uint32_t rule;           /* the rule being defined, for messages */
    bool in_rule;
    int32_t names[NAME_HASH_CAP];
    uint32_t helpers;        /* helper rules made for the current rule */
    int depth;
    sl_status rc;
} parser;

typedef struct {
    uint32_t lo, hi;
} cp_range;

void sl_gram_errf(char *err, size_t err_len, const char *fmt, ...)
{
    if (err == NULL || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* Records the first failure; later ones are consequences. Returns false. */
static bool fail(parser *ps, sl_status rc, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool fail(parser *ps, sl_status rc, size_t at, const char *fmt, ...)
{
    if (ps->rc != SL_OK)
        return false;
    ps->rc = rc;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (rc == SL_ENOMEM)
        sl_gram_errf(ps->err, ps->err_len, "out of memory compiling the grammar");
    else if (ps->in_rule)
        sl_gram_errf(ps->err, ps->err_len, "%s at byte %zu (rule '%s')", what, at, ps->b->rules[ps->rule].name);
    else
        sl_gram_errf(ps->err, ps->err_len, "%s at byte %zu", what, at);
    return false;
}

static bool nomem(parser *ps) { return fail(ps, SL_ENOMEM, ps->p, "out of memory"); }

/* ---- build storage --------------------------------------------------------- */

void sl_gram_build_fini(sl_gram_build *b)
{
    for (uint32_t i = 0; i < b->n_rules; i++) {
        free(b->rules[i].name);
        for (uint32_t a = 0; a < b->rules[i].n_alts; a++)
            free(b->rules[i].alts[a].v);
        free(b->rules[i].alts);
    }
    free(b->rules);
    free(b->classes);
    memset(b, 0, sizeof *b);
}

static int32_t new_rule(parser *ps, const char *name, size_t name_len, uint32_t offset, bool helper)
{
    sl_gram_build *b = ps->b;
    if (b->n_rules >= SL_GRAMMAR_RULES_MAX) {
        fail(ps, SL_EINVAL, offset, "more than %u rules (repetitions expand into rules)", SL_GRAMMAR_RULES_MAX);
        return -1;
    }
    if (b->n_rules == b->cap_rules) {
        uint32_t cap = b->cap_rules ? b->cap_rules * 2 : 32;
        sl_gram_brule *r = realloc(b->rules, cap * sizeof *r);
        if (r == NULL)
            return nomem(ps), -1;
        b->rules = r;
        b->cap_rules = cap;
    }
    sl_gram_brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(name_len + 1);
    if (r->name == NULL)
        return nomem(ps), -1;
    memcpy(r->name, name, name_len);
    r->name[name_len] = 0;
    r->offset = offset;
    r->helper = helper;
    r->defined = helper;
    return (int32_t)b->n_rules++;
}

static int32_t helper_rule(parser *ps, size_t at)
{
    const char *base = ps->in_rule ? ps->b->rules[ps->rule].name : "root";
    char name[96];
    int n = snprintf(name, sizeof name, "%.60s~%u", base, ++ps->helpers);
    return new_rule(ps, name, (size_t)n, (uint32_t)at, true);
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The rule named s[0..n), created (undefined, offset = this reference) when new. */
static int32_t named_rule(parser *ps, const char *s, size_t n, size_t at)
{
    uint32_t h = name_hash(s, n) & (NAME_HASH_CAP - 1);
    for (;; h = (h + 1) & (NAME_HASH_CAP - 1)) {
        int32_t id = ps->names[h];
        if (id < 0)
            break;
        const char *nm = ps->b->rules[id].name;
        if (strlen(nm) == n && memcmp(nm, s, n) == 0)
            return id;
    }
    int32_t id = new_rule(ps, s, n, (uint32_t)at, false);
    if (id >= 0)
        ps->names[h] = id;
    return id;
}

static int32_t add_alt(parser *ps, uint32_t rule)
{
    sl_gram_brule *r = &ps->b->rules[rule];
    if (r->n_alts == r->cap_alts) {
        uint32_t cap = r->cap_alts ? r->cap_alts * 2 : 2;
        sl_gram_seq *a = realloc(r->alts, cap * sizeof *a);
        if (a == NULL)
            return nomem(ps), -1;
        r->alts = a;
        r->cap_alts = cap;
    }
    memset(&r->alts[r->n_alts], 0, sizeof r->alts[0]);
    return (int32_t)r->n_alts++;
}

static bool push(parser *ps, uint32_t rule, uint32_t alt, uint32_t kind, uint32_t arg)
{
    if (++ps->b->n_elems > SL_GRAMMAR_ELEMS_MAX)
        return fail(ps, SL_EINVAL, ps->p, "more than %u elements after expanding repetitions", SL_GRAMMAR_ELEMS_MAX);
    sl_gram_seq *q = &ps->b->rules[rule].alts[alt];
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 8;
        sl_gram_elem *v = realloc(q->v, cap * sizeof *v);
        if (v == NULL)
            return nomem(ps);
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = (sl_gram_elem){kind, arg};
    return true;
}

static int32_t add_class(parser *ps, const sl_gram_class *c)
{
    sl_gram_build *b = ps->b;
    if (b->n_classes >= SL_GRAMMAR_CLASSES_MAX) {
        fail(ps, SL_EINVAL, ps->p, "more than %u character classes", SL_GRAMMAR_CLASSES_MAX);
        return -1;
    }
    if (b->n_classes == b->cap_classes) {
        uint32_t cap = b->cap_classes ? b->cap_classes * 2 : 64;
        sl_gram_class *v = realloc(b->classes, cap * sizeof *v);
        if (v == NULL)
            return nomem(ps), -1;
        b->classes = v;
        b->cap_classes = cap;
    }
    b->classes[b->n_classes] = *c;
    return (int32_t)b->n_classes++;
}

static int32_t range_class(parser *ps, unsigned lo, unsigned hi)
{
    if (lo == hi && ps->b->single[lo] >= 0)
        return ps->b->single[lo];
    sl_gram_class c = {{0}};
    for (unsigned x = lo; x <= hi; x++)
        c.w[x >> 6] |= 1ull << (x & 63);
    int32_t id = add_class(ps, &c);
    if (lo == hi && id >= 0)
        ps->b->single[lo] = id;
    return id;
}

/* ---- lexing ------------------------------------------------------------------ */

static bool at_end(const parser *ps) { return ps->p >= ps->n; }
static int peek(const parser *ps) { return at_end(ps) ? -1 : (uint8_t)ps->s[ps->p]; }

static void skip_space(parser *ps)
{
    while (!at_end(ps)) {
        int c = peek(ps);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            ps->p++;
        else if (c == '#')
            while (!at_end(ps) && ps->s[ps->p] != '\n')
                ps->p++;
        else
            break;
    }
}

static bool name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static size_t name_len_at(const parser *ps, size_t p)
{
    size_t q = p;
    while (q < ps->n && name_char((uint8_t)ps->s[q]))
        q++;
    return q - p;
}

/* True when a rule definition `name ::=` starts at p. */
static bool rule_start_at(parser *ps, size_t p)
{
    size_t n = name_len_at(ps, p);
    if (n == 0)
        return false;
    size_t save = ps->p;
    ps->p = p + n;
    skip_space(ps);
    bool yes = ps->n - ps->p >= 3 && memcmp(ps->s + ps->p, "::=", 3) == 0;
    ps->p = save;
    return yes;
}

/* One UTF-8 code point at ps->p (validated: no overlong forms, surrogates
 * or values past U+10FFFF). */
static bool decode_utf8(parser *ps, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)ps->s + ps->p;
    size_t left = ps->n - ps->p;
    uint32_t c = s[0], need, min;
    if (c < 0x80) {
        *cp = c;
        ps->p++;
        return true;
    }
    if (c >= 0xC2 && c <= 0xDF)
        need = 1, min = 0x80, c &= 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, min = 0x800, c &= 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, min = 0x10000, c &= 0x07;
    else
        return fail(ps, SL_EINVAL, ps->p, "invalid UTF-8");
    if (left < need + 1)
        return fail(ps, SL_EINVAL, ps->p, "invalid UTF-8");
    for (uint32_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return fail(ps, SL_EINVAL, ps->p, "invalid UTF-8");
        c = c << 6 | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return fail(ps, SL_EINVAL, ps->p, "invalid UTF-8");
    *cp = c;
    ps->p += need + 1;
    return true;
}

static bool hex_digits(parser *ps, size_t at, int count, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < count; i++) {
        int c = peek(ps);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail(ps, SL_EINVAL, at, "bad escape: \\%c needs %d hex digits", ps->s[at + 1], count);
        v = v << 4 | (uint32_t)d;
        ps->p++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail(ps, SL_EINVAL, at, "bad escape: U+%X is not a Unicode scalar value", v);
    *cp = v;
    return true;
}

/* One character of a literal or class: an escape or a UTF-8 code point. */
static bool parse_char(parser *ps, uint32_t *cp)
{
    size_t at = ps->p;
    if (ps->s[ps->p] != '\\')
        return decode_utf8(ps, cp);
    ps->p++;
    if (at_end(ps))
        return fail(ps, SL_EINVAL, at, "bad escape at the end of the text");
    int c = peek(ps);
    ps->p++;
    switch (c) {
    case 'n': *cp = '\n'; return true;
    case 't': *cp = '\t'; return true;
    case 'r': *cp = '\r'; return true;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/':
        *cp = (uint32_t)c;
        return true;
    case 'x': return hex_digits(ps, at, 2, cp);
    case 'u': return hex_digits(ps, at, 4, cp);
    case 'U': return hex_digits(ps, at, 8, cp);
    default:
        if (c >= 0x20 && c < 0x7F)
            return fail(ps, SL_EINVAL, at, "bad escape \\%c", c);
        return fail(ps, SL_EINVAL, at, "bad escape (byte 0x%02X)", (unsigned)c);
    }
}

static int utf8_encode(uint32_t c, uint8_t out[4])
{
    if (c < 0x80)
        return out[0] = (uint8_t)c, 1;
    if (c < 0x800)
        return out[0] = (uint8_t)(0xC0 | c >> 6), out[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | c >> 12);
        out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | c >> 18);
    out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* ---- code-point classes -> UTF-8 byte sequences ------------------------------- */

typedef struct {
    cp_range *v;
    size_t n, cap;
} ranges;

static bool ranges_add(parser *ps, ranges *r, uint32_t lo, uint32_t hi)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        cp_range *v = realloc(r->v, cap * sizeof *v);
        if (v == NULL)
            return nomem(ps);
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (cp_range){lo, hi};
    return true;
}

static int cmp_range(const void *a, const void *b)
{
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges; with negate, the complement over the scalar values. */
static bool ranges_normalize(parser *ps, ranges *r, bool negate)
{
    if (r->n > 1)
        qsort(r->v, r->n, sizeof r->v[0], cmp_range);
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (k > 0 && r->v[i].lo <= r->v[k - 1].hi + 1) {
            if (r->v[i].hi > r->v[k - 1].hi)
                r->v[k - 1].hi = r->v[i].hi;
        } else {
            r->v[k++] = r->v[i];
        }
    }
    r->n = k;
    if (negate) {
        ranges c = {0};
        uint32_t next = 0;
        for (size_t i = 0; i < r->n; i++) {
            if (r->v[i].lo > next && !ranges_add(ps, &c, next, r->v[i].lo - 1))
                return free(c.v), false;
            next = r->v[i].hi + 1;
        }
        if (next <= 0x10FFFF && !ranges_add(ps, &c, next, 0x10FFFF))
            return free(c.v), false;
        free(r->v);
        *r = c;
    }
    /* Surrogates are not characters: no valid UTF-8 text holds them. */
    ranges o = {0};
    for (size_t i = 0; i < r->n; i++) {
        uint32_t lo = r->v[i].lo, hi = r->v[i].hi;
        if (hi < 0xD800 || lo > 0xDFFF) {
            if (!ranges_add(ps, &o, lo, hi))
                return free(o.v), false;
            continue;
        }
        if (lo < 0xD800 && !ranges_add(ps, &o, lo, 0xD7FF))
            return free(o.v), false;
        if (hi > 0xDFFF && !ranges_add(ps, &o, 0xE000, hi))
            return free(o.v), false;
    }
    free(r->v);
    *r = o;
    return true;
}

typedef struct {
    parser *ps;
    uint32_t rule;          /* helper rule receiving the multi-byte alternatives */
    sl_gram_class ascii;    /* the one-byte part, merged into one alternative */
    bool any_multi;
} utf8_sink;

/* Emits [lo, hi] as one alternative of byte ranges; the caller split it so
 * that lo and hi encode to the same length and every position is a range. */
static bool emit_seq(utf8_sink *k, uint32_t lo, uint32_t hi)
{
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, b);
    if (n == 1) {
        for (uint32_t x = lo; x <= hi; x++)
            k->ascii.w[x >> 6] |= 1ull << (x & 63);
        return true;
    }
    int32_t alt = add_alt(k->ps, k->rule);
    if (alt < 0)
        return false;
    for (int i = 0; i < n; i++) {
        int32_t cls = range_class(k->ps, a[i], b[i]);
        if (cls < 0 || !push(k->ps, k->rule, (uint32_t)alt, SL_GRAM_TERM, (uint32_t)cls))
            return false;
    }
    k->any_multi = true;
    return true;
}

static bool split_range(utf8_sink *k, uint32_t lo, uint32_t hi)
{
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i])
            return split_range(k, lo, len_max[i]) && split_range(k, len_max[i] + 1, hi);
    if (hi < 0x80)
        return emit_seq(k, lo, hi);
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return split_range(k, lo, lo | m) && split_range(k, (lo | m) + 1, hi);
            if ((hi & m) != m)
                return split_range(k, lo, (hi & ~m) - 1) && split_range(k, hi & ~m, hi);
        }
    }
    return emit_seq(k, lo, hi);
}

/* Appends to (rule, alt) the element for the code points in r: one TERM
 * when they are all one-byte, else a reference to a helper rule. */
static bool emit_class(parser *ps, uint32_t rule, uint32_t alt, ranges *r, size_t at)
{
    int32_t h = helper_rule(ps, at);
    if (h < 0)
        return false;
    utf8_sink k = {.ps = ps, .rule = (uint32_t)h};
    for (size_t i = 0; i < r->n; i++)
        if (!split_range(&k, r->v[i].lo, r->v[i].hi))
            return false;
    int32_t cls = add_class(ps, &k.ascii);
    if (cls < 0)
        return false;
    if (!k.any_multi) {
        /* The helper stays, empty and unreferenced: grammar.c skips helpers
         * that nothing references. */
        return push(ps, rule, alt, SL_GRAM_TERM, (uint32_t)cls);
    }
    bool has_ascii = k.ascii.w[0] | k.ascii.w[1];
    if (has_ascii) {
        int32_t a = add_alt(ps, (uint32_t)h);
        if (a < 0 || !push(ps, (uint32_t)h, (uint32_t)a, SL_GRAM_TERM, (uint32_t)cls))
            return false;
    }
    return push(ps, rule, alt, SL_GRAM_REF, (uint32_t)h);
}

/* ---- grammar ------------------------------------------------------------------- */

static bool parse_alternates(parser *ps, uint32_t rule, bool nested);

static bool parse_literal(parser *ps, uint32_t rule, uint32_t alt)
{
    size_t at = ps->p++;
    for (;;) {
        if (at_end(ps))
            return fail(ps, SL_EINVAL, at, "unterminated literal");
        if (ps->s[ps->p] == '"') {
            ps->p++;
            return true;
        }
        uint32_t cp;
        if (!parse_char(ps, &cp))
            return false;
        uint8_t u[4];
        int n = utf8_encode(cp, u);
        for (int i = 0; i < n; i++) {
            int32_t cls = range_class(ps, u[i], u[i]);
            if (cls < 0 || !push(ps, rule, alt, SL_GRAM_TERM, (uint32_t)cls))
                return false;
        }
    }
}

static bool parse_class(parser *ps, uint32_t rule, uint32_t alt)
{
    size_t at = ps->p++;
    bool negate = false;
    if (peek(ps) == '^')
        negate = true, ps->p++;
    ranges r = {0};
    for (;;) {
        if (at_end(ps))
            return free(r.v), fail(ps, SL_EINVAL, at, "unterminated character class");
        if (ps->s[ps->p] == ']') {
            ps->p++;
            break;
        }
        size_t item = ps->p;
        uint32_t lo, hi;
        if (!parse_char(ps, &lo))
            return free(r.v), false;
        hi = lo;
        if (ps->n - ps->p >= 2 && ps->s[ps->p] == '-' && ps->s[ps->p + 1] != ']') {
            ps->p++;
            if (!parse_char(ps, &hi))
                return free(r.v), false;
            if (hi < lo)
                return free(r.v), fail(ps, SL_EINVAL, item, "character range out of order");
        }
        if (!ranges_add(ps, &r, lo, hi))
            return free(r.v), false;
    }
    bool ok = ranges_normalize(ps, &r, negate) && emit_class(ps, rule, alt, &r, at);
    free(r.v);
    return ok;
}

static bool parse_uint(parser *ps, uint32_t *v)
{
    size_t at = ps->p;
    uint64_t x = 0;
    if (peek(ps) < '0' || peek(ps) > '9')
        return fail(ps, SL_EINVAL, at, "bad repetition: expected a number");
    while (peek(ps) >= '0' && peek(ps) <= '9') {
        x = x * 10 + (uint64_t)(peek(ps) - '0');
        if (x > SL_GRAMMAR_REPEAT_MAX)
            return fail(ps, SL_EINVAL, at, "bad repetition: bound over %u", SL_GRAMMAR_REPEAT_MAX);
        ps->p++;
    }
    *v = (uint32_t)x;
    return true;
}

/* Wraps unit (rule, alt)[start, n) into a helper when it is not one element;
 * returns the element, which is removed from the sequence. */
static bool take_unit(parser *ps, uint32_t rule, uint32_t alt, uint32_t start, size_t at, sl_gram_elem *e)
{
    sl_gram_seq *q = &ps->b->rules[rule].alts[alt];
    if (q->n - start == 1) {
        *e = q->v[--q->n];
        ps->b->n_elems--;
        return true;
    }
    int32_t h = helper_rule(ps, at);
    int32_t a = h < 0 ? -1 : add_alt(ps, (uint32_t)h);
    if (a < 0)
        return false;
    q = &ps->b->rules[rule].alts[alt];
    for (uint32_t i = start; i < q->n; i++) {
        sl_gram_elem x = ps->b->rules[rule].alts[alt].v[i];
        if (!push(ps, (uint32_t)h, (uint32_t)a, x.kind, x.arg))
            return false;
    }
    q = &ps->b->rules[rule].alts[alt];
    ps->b->n_elems -= q->n - start;
    q->n = start;
    *e = (sl_gram_elem){SL_GRAM_REF, (uint32_t)h};
    return true;
}

/* R ::= u R | empty (star) or R ::= u | empty (optional). */
static int32_t loop_rule(parser *ps, sl_gram_elem u, bool star, int32_t inner, size_t at)
{
    int32_t h = helper_rule(ps, at);
    int32_t a = h < 0 ? -1 : add_alt(ps, (uint32_t)h);
    if (a < 0 || !push(ps, (uint32_t)h, (uint32_t)a, u.kind, u.arg))
        return -1;
    if (star && !push(ps, (uint32_t)h, (uint32_t)a, SL_GRAM_REF, (uint32_t)h))
        return -1;
    if (inner >= 0 && !push(ps, (uint32_t)h, (uint32_t)a, SL_GRAM_REF, (uint32_t)inner))
        return -1;
    if (add_alt(ps, (uint32_t)h) < 0)
        return -1;
    return h;
}

/* Applies the repetition at ps->p to unit (rule, alt)[start, n). */
static bool parse_repetition(parser *ps, uint32_t rule, uint32_t alt, uint32_t start)
{
    size_t at = ps->p;
    int c = peek(ps);
    uint32_t lo, hi;   /* hi == UINT32_MAX: unbounded */
    ps->p++;
    if (c == '*')
        lo = 0, hi = UINT32_MAX;
    else if (c == '+')
        lo = 1, hi = UINT32_MAX;
    else if (c == '?')
        lo = 0, hi = 1;
    else {
        skip_space(ps);
        if (!parse_uint(ps, &lo))
            return false;
        skip_space(ps);
        hi = lo;
        if (peek(ps) == ',') {
            ps->p++;
            skip_space(ps);
            hi = UINT32_MAX;
            if (peek(ps) != '}' && !parse_uint(ps, &hi))
                return false;
            skip_space(ps);
        }
        if (peek(ps) != '}')
            return fail(ps, SL_EINVAL, at, "bad repetition: expected '}'");
        ps->p++;
        if (hi < lo)
            return fail(ps, SL_EINVAL, at, "bad repetition: {%u,%u} has max < min", lo, hi);
    }
    if (ps->b->rules[rule].alts[alt].n == start)
        return true;   /* an empty unit repeated is still empty */
    sl_gram_elem u;
    if (!take_unit(ps, rule, alt, start, at, &u))
        return false;
    for (uint32_t i = 0; i < lo; i++)
        if (!push(ps, rule, alt, u.kind, u.arg))
            return false;
    if (hi == UINT32_MAX) {
        int32_t r = loop_rule(ps, u, true, -1, at);
        return r >= 0 && push(ps, rule, alt, SL_GRAM_REF, (uint32_t)r);
    }
    int32_t inner = -1;   /* O_k ::= u O_{k-1} | empty */
    uint32_t first = ps->b->n_rules;
    for (uint32_t i = lo; i < hi; i++)
        if ((inner = loop_rule(ps, u, false, inner, at)) < 0)
            return false;
    /* Mark the chain (one new rule per count, in order) for the mask
     * cache; grammar.c checks the shape again before relying on it. */
    if (inner >= 0 && (uint32_t)inner - first + 1 == hi - lo)
        for (uint32_t r = first; r <= (uint32_t)inner; r++) {
            ps->b->rules[r].rep_left = r - first + 1;
            ps->b->rules[r].rep_top = (uint32_t)inner;
        }
    return inner < 0 || push(ps, rule, alt, SL_GRAM_REF, (uint32_t)inner);
}

static bool parse_sequence(parser *ps, uint32_t rule, uint32_t alt, bool nested)
{
    int64_t unit = -1;   /* start of the last element, for a repetition */
    for (;;) {
        skip_space(ps);
        if (at_end(ps))
            return true;
        int c = peek(ps);
        size_t at = ps->p;
        uint32_t before = ps->b->rules[rule].alts[alt].n;
        if (c == '|' || c == ')')
            return true;
        if (name_char(c)) {
            if (!nested && rule_start_at(ps, ps->p))
                return true;
            size_t n = name_len_at(ps, ps->p);
            int32_t r = named_rule(ps, ps->s + ps->p, n, ps->p);
            if (r < 0 || !push(ps, rule, alt, SL_GRAM_REF, (uint32_t)r))
                return false;
            ps->p += n;
        } else if (c == '"') {
            if (!parse_literal(ps, rule, alt))
                return false;
        } else if (c == '[') {
            if (!parse_class(ps, rule, alt))
                return false;
        } else if (c == '.') {
            ps->p++;
            ranges r = {0};
            bool ok = ranges_add(ps, &r, 0, 0x10FFFF) && ranges_normalize(ps, &r, false) &&
                      emit_class(ps, rule, alt, &r, at);
            free(r.v);
            if (!ok)
                return false;
        } else if (c == '(') {
            if (++ps->depth > NEST_MAX)
                return fail(ps, SL_EINVAL, at, "groups nested more than %d deep", NEST_MAX);
            ps->p++;
            int32_t h = helper_rule(ps, at);
            if (h < 0 || !parse_alternates(ps, (uint32_t)h, true))
                return false;
            if (peek(ps) != ')')
                return fail(ps, SL_EINVAL, at, "unterminated group: expected ')'");
            ps->p++;
            ps->depth--;
            if (!push(ps, rule, alt, SL_GRAM_REF, (uint32_t)h))
                return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (unit < 0)
                return fail(ps, SL_EINVAL, at, "repetition '%c' without an element before it", c);
            if (!parse_repetition(ps, rule, alt, (uint32_t)unit))
                return false;
            continue;   /* the unit stays: x*? applies ? to x* */
        } else if (c == ':' && ps->n - ps->p >= 3 && memcmp(ps->s + ps->p, "::=", 3) == 0) {
            return fail(ps, SL_EINVAL, at, "'::=' without a rule name before it");
        } else if (c >= 0x21 && c < 0x7F) {
            return fail(ps, SL_EINVAL, at, "unexpected character '%c'", c);
        } else {
            return fail(ps, SL_EINVAL, at, "unexpected byte 0x%02X", (unsigned)c);
        }
        unit = before;
    }
}

static bool parse_alternates(parser *ps, uint32_t rule, bool nested)
{
    for (;;) {
        int32_t alt = add_alt(ps, rule);
        if (alt < 0 || !parse_sequence(ps, rule, (uint32_t)alt, nested))
            return false;
        if (peek(ps) != '|')
            return true;
        ps->p++;
    }
}

sl_status sl_gbnf_parse(const char *text, size_t len, sl_gram_build *b, char *err, size_t err_len)
{
    parser *ps = calloc(1, sizeof *ps);
    if (ps == NULL) {
        sl_gram_errf(err, err_len, "out of memory compiling the grammar");
        return SL_ENOMEM;
    }
    *ps = (parser){.s = text, .n = len, .b = b, .err = err, .err_len = err_len};
    memset(ps->names, 0xff, sizeof ps->names);
    memset(b->single, 0xff, sizeof b->single);
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (len > SL_GRAMMAR_TEXT_MAX)
        fail(ps, SL_EINVAL, SL_GRAMMAR_TEXT_MAX, "grammar text longer than %u bytes", SL_GRAMMAR_TEXT_MAX);
    else if (nul != NULL)
        fail(ps, SL_EINVAL, (size_t)(nul - text), "NUL byte");
    skip_space(ps);
    while (ps->rc == SL_OK && !at_end(ps)) {
        size_t at = ps->p, n = name_len_at(ps, ps->p);
        if (n == 0) {
            fail(ps, SL_EINVAL, at, "expected a rule name");
            break;
        }
        ps->p += n;
        skip_space(ps);
        if (ps->n - ps->p < 3 || memcmp(ps->s + ps->p, "::=", 3) != 0) {
            fail(ps, SL_EINVAL, ps->p, "expected '::=' after rule name '%.*s'", (int)(n > 60 ? 60 : n), text + at);
            break;
        }
        ps->p += 3;
        int32_t r = named_rule(ps, text + at, n, at);
        if (r < 0)
            break;
        if (b->rules[r].defined) {
            ps->in_rule = false;
            fail(ps, SL_EINVAL, at, "rule '%s' defined twice", b->rules[r].name);
            break;
        }
        b->rules[r].defined = true;
        b->rules[r].offset = (uint32_t)at;
        ps->rule = (uint32_t)r;
        ps->in_rule = true;
        ps->helpers = 0;
        if (!parse_alternates(ps, (uint32_t)r, false))
            break;
        if (!at_end(ps) && peek(ps) == ')') {
            fail(ps, SL_EINVAL, ps->p, "unbalanced ')'");
            break;
        }
        ps->in_rule = false;
    }
    sl_status rc = ps->rc;
    free(ps);
    return rc;
}
