/* model/grammar/regex.c: a regular expression (the subset in regex.h) ->
 * GBNF rules, for JSON Schema's `pattern` and the front ends' regex field.
 * A recursive-descent parser writes GBNF while it reads: a group becomes a
 * parenthesised GBNF group, a quantifier the same GBNF repetition, and every
 * character or class a set of code point ranges written out positively
 * (negation is done here, over all scalar values, so surrogates never
 * appear). Escapes follow ECMA-262, as JSON Schema's regexes do: \d is
 * [0-9], \w [A-Za-z0-9_], `.` anything but a line terminator.
 * Trade-off: in json_string mode each character is written in exactly one
 * spelling (raw where JSON allows it, else its short escape or \u00XX), so
 * the grammar produces a subset of the JSON spellings of a matching string,
 * never a non-matching one. */
#include "model/grammar/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/gbnf_text.h"
#include "shared/alloc.h"

#define RE_DEPTH_MAX 64     /* nested groups */
#define RE_REPEAT_MAX 1000  /* largest {m,n} bound; the grammar expands repetitions */

typedef struct {
    const char *s;
    size_t n, i;
    bool json;
    sl_status rc;
    char *err;
    size_t err_len;
} re_parser;

typedef struct {
    sl_gbnf_range *r;
    size_t n, cap;
    bool oom;
} cset;

static sl_status fail(re_parser *p, size_t at, const char *what)
{
    if (p->rc == SL_OK) {
        p->rc = SL_EINVAL;
        if (p->err && p->err_len)
            snprintf(p->err, p->err_len, "regex: %s at offset %zu", what, at);
    }
    return p->rc;
}

/* ---- character sets -------------------------------------------------------------- */

static void cset_add(cset *c, uint32_t lo, uint32_t hi)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        sl_gbnf_range *r = sl_realloc(c->r, cap * sizeof *r);
        if (r == NULL) {
            c->oom = true;
            return;
        }
        c->r = r;
        c->cap = cap;
    }
    c->r[c->n++] = (sl_gbnf_range){lo, hi};
}

static int cmp_range(const void *a, const void *b)
{
    const sl_gbnf_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges, and drops surrogates (not scalar values: no UTF-8). */
static void cset_norm(cset *c)
{
    if (c->n == 0)
        return;
    qsort(c->r, c->n, sizeof *c->r, cmp_range);
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (k > 0 && c->r[i].lo <= c->r[k - 1].hi + 1) {
            if (c->r[i].hi > c->r[k - 1].hi)
                c->r[k - 1].hi = c->r[i].hi;
        } else {
            c->r[k++] = c->r[i];
        }
    }
    c->n = k;
    size_t n = c->n;
    for (size_t i = 0; i < n; i++) {
        sl_gbnf_range x = c->r[i];
        if (x.hi < 0xD800 || x.lo > 0xDFFF)
            continue;
        if (x.lo < 0xD800 && x.hi > 0xDFFF) {
            c->r[i].hi = 0xD7FF;
            cset_add(c, 0xE000, x.hi);
        } else if (x.lo < 0xD800) {
            c->r[i].hi = 0xD7FF;
        } else if (x.hi > 0xDFFF) {
            c->r[i].lo = 0xE000;
        } else {
            c->r[i].lo = 1, c->r[i].hi = 0;   /* emptied; removed below */
        }
    }
    k = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->r[i].lo <= c->r[i].hi)
            c->r[k++] = c->r[i];
    c->n = k;
    qsort(c->r, c->n, sizeof *c->r, cmp_range);
}

static void cset_negate(cset *c)
{
    cset_norm(c);
    cset out = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->r[i].lo > next)
            cset_add(&out, next, c->r[i].lo - 1);
        next = c->r[i].hi + 1;
    }
    if (next <= 0x10FFFF)
        cset_add(&out, next, 0x10FFFF);
    out.oom |= c->oom;
    free(c->r);
    *c = out;
    cset_norm(c);
}

static void cset_class_escape(cset *c, char e)
{
    static const uint32_t space[][2] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                        {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                        {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    cset t = {0};
    switch (e | 0x20) {
    case 'd':
        cset_add(&t, '0', '9');
        break;
    case 'w':
        cset_add(&t, '0', '9');
        cset_add(&t, 'A', 'Z');
        cset_add(&t, 'a', 'z');
        cset_add(&t, '_', '_');
        break;
    default:
        for (size_t i = 0; i < sizeof space / sizeof space[0]; i++)
            cset_add(&t, space[i][0], space[i][1]);
        break;
    }
    if (e >= 'A' && e <= 'Z')
        cset_negate(&t);
    for (size_t i = 0; i < t.n; i++)
        cset_add(c, t.r[i].lo, t.r[i].hi);
    c->oom |= t.oom;
    free(t.r);
}

/* The set as one GBNF element (a literal, a class or a group of them).
 * False when nothing is left to write: in JSON string mode U+0000 is
 * dropped, because jansson refuses the \u0000 that would spell it. */
static bool cset_emit(re_parser *p, sl_gbnf_buf *b, cset *c)
{
    cset_norm(c);
    if (!p->json) {
        if (c->n == 1 && c->r[0].lo == c->r[0].hi) {
            char u[8];
            sl_gbnf_buf t = {0};
            sl_gbnf_utf8(&t, c->r[0].lo);
            size_t n = t.len < sizeof u ? t.len : 0;
            memcpy(u, t.p ? t.p : "", n);
            sl_gbnf_buf_fini(&t);
            sl_gbnf_literal(b, u, n);
        } else {
            sl_gbnf_class(b, c->r, c->n);
        }
        return true;
    }
    /* JSON string content: raw where allowed, one escape per other character. */
    static const sl_gbnf_range raw_ok[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
    cset raw = {0};
    char esc[40][8];
    size_t n_esc = 0;
    for (size_t i = 0; i < c->n; i++) {
        for (size_t k = 0; k < 3; k++) {
            uint32_t lo = c->r[i].lo > raw_ok[k].lo ? c->r[i].lo : raw_ok[k].lo;
            uint32_t hi = c->r[i].hi < raw_ok[k].hi ? c->r[i].hi : raw_ok[k].hi;
            if (lo <= hi)
                cset_add(&raw, lo, hi);
        }
        for (uint32_t ch = c->r[i].lo; ch <= c->r[i].hi && ch <= 0x5C; ch++) {
            if ((ch >= 0x20 && ch != '"' && ch != '\\') || ch == 0)
                continue;
            const char *s = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f"
                          : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
            if (s)
                snprintf(esc[n_esc++], sizeof esc[0], "%s", s);
            else
                snprintf(esc[n_esc++], sizeof esc[0], "\\u%04x", (unsigned)ch);
        }
    }
    c->oom |= raw.oom;
    size_t alts = (raw.n > 0) + n_esc;
    if (alts == 0) {
        free(raw.r);
        return false;
    }
    if (alts > 1)
        sl_gbnf_puts(b, "(");
    bool first = true;
    if (raw.n > 0) {
        if (raw.n == 1 && raw.r[0].lo == raw.r[0].hi) {
            sl_gbnf_buf t = {0};
            sl_gbnf_utf8(&t, raw.r[0].lo);
            sl_gbnf_literal(b, t.p ? t.p : "", t.len);
            b->oom |= t.oom;
            sl_gbnf_buf_fini(&t);
        } else {
            sl_gbnf_class(b, raw.r, raw.n);
        }
        first = false;
    }
    for (size_t i = 0; i < n_esc; i++) {
        if (!first)
            sl_gbnf_puts(b, " | ");
        sl_gbnf_literal(b, esc[i], strlen(esc[i]));
        first = false;
    }
    if (alts > 1)
        sl_gbnf_puts(b, ")");
    free(raw.r);
    return true;
}

/* ---- escapes and classes ----------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
        return (c | 0x20) - 'a' + 10;
    return -1;
}

static bool read_hex(re_parser *p, size_t digits, uint32_t *cp)
{
    uint32_t v = 0;
    for (size_t k = 0; k < digits; k++) {
        if (p->i + k >= p->n || hexval(p->s[p->i + k]) < 0)
            return false;
        v = v * 16 + (uint32_t)hexval(p->s[p->i + k]);
    }
    p->i += digits;
    *cp = v;
    return true;
}

/* Reads one code point (a literal byte sequence) at p->i. */
static bool read_literal_cp(re_parser *p, uint32_t *cp)
{
    size_t len = sl_gbnf_utf8_decode(p->s + p->i, p->n - p->i, cp);
    if (len == 0) {
        fail(p, p->i, "invalid UTF-8");
        return false;
    }
    p->i += len;
    return true;
}

/* After a backslash (p->i at the escape letter): one code point into *cp
 * (returns 1), a class escape added to c (returns 2), or an error (0). */
static int read_escape(re_parser *p, cset *c, bool in_class, uint32_t *cp)
{
    size_t at = p->i - 1;
    if (p->i >= p->n) {
        fail(p, at, "trailing backslash");
        return 0;
    }
    char e = p->s[p->i++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        cset_class_escape(c, e);
        return 2;
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0':
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            fail(p, at, "octal escape is not supported");
            return 0;
        }
        *cp = 0;
        return 1;
    case 'x':
        if (!read_hex(p, 2, cp)) {
            fail(p, at, "\\x needs two hex digits");
            return 0;
        }
        return 1;
    case 'u':
        if (!read_hex(p, 4, cp)) {
            fail(p, at, "\\u needs four hex digits");
            return 0;
        }
        if (*cp >= 0xD800 && *cp <= 0xDFFF) {
            fail(p, at, "\\u surrogate is not supported");
            return 0;
        }
        return 1;
    case 'b': case 'B':
        fail(p, at, in_class ? "\\b in a class is not supported" : "word boundary \\b/\\B is not supported");
        return 0;
    case 'k':
        fail(p, at, "named backreference is not supported");
        return 0;
    case 'p': case 'P':
        fail(p, at, "unicode property escape is not supported");
        return 0;
    default:
        break;
    }
    if (e >= '1' && e <= '9') {
        fail(p, at, "backreference is not supported");
        return 0;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
        char msg[48];
        snprintf(msg, sizeof msg, "unknown escape \\%c", e);
        fail(p, at, msg);
        return 0;
    }
    p->i--;
    return read_literal_cp(p, cp) ? 1 : 0;
}

/* p->i just past '['. */
static bool parse_class(re_parser *p, cset *c)
{
    size_t at = p->i - 1;
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    if (p->i < p->n && p->s[p->i] == ']') {
        fail(p, p->i, "']' at the start of a class (escape it)");
        return false;
    }
    for (;;) {
        if (p->i >= p->n) {
            fail(p, at, "unterminated class");
            return false;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        size_t item_at = p->i;
        uint32_t lo;
        int kind;
        if (p->s[p->i] == '\\') {
            p->i++;
            kind = read_escape(p, c, true, &lo);
        } else {
            kind = read_literal_cp(p, &lo) ? 1 : 0;
        }
        if (kind == 0)
            return false;
        bool range = p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']';
        if (!range) {
            if (kind == 1)
                cset_add(c, lo, lo);
            continue;
        }
        if (kind == 2) {
            fail(p, item_at, "class escape as a range bound");
            return false;
        }
        p->i++;
        uint32_t hi;
        size_t hi_at = p->i;
        if (p->s[p->i] == '\\') {
            p->i++;
            cset dummy = {0};
            kind = read_escape(p, &dummy, true, &hi);
            free(dummy.r);
            if (kind == 2) {
                fail(p, hi_at, "class escape as a range bound");
                return false;
            }
        } else {
            kind = read_literal_cp(p, &hi) ? 1 : 0;
        }
        if (kind == 0)
            return false;
        if (hi < lo) {
            fail(p, item_at, "range out of order in class");
            return false;
        }
        cset_add(c, lo, hi);
    }
    if (neg)
        cset_negate(c);
    cset_norm(c);
    if (c->n == 0) {
        fail(p, at, "class matches no character");
        return false;
    }
    return true;
}

/* ---- the expression ------------------------------------------------------------------ */

static bool parse_alt(re_parser *p, sl_gbnf_buf *b, int depth);

static bool parse_atom(re_parser *p, sl_gbnf_buf *b, int depth)
{
    size_t at = p->i;
    char ch = p->s[p->i];
    cset c = {0};
    bool ok = true;
    switch (ch) {
    case '(':
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            const char *q = p->s + p->i;
            size_t left = p->n - p->i;
            if (left >= 2 && q[1] == ':') {
                p->i += 2;
            } else if (left >= 2 && (q[1] == '=' || q[1] == '!')) {
                return fail(p, at, "lookahead is not supported"), false;
            } else if (left >= 3 && q[1] == '<' && (q[2] == '=' || q[2] == '!')) {
                return fail(p, at, "lookbehind is not supported"), false;
            } else if (left >= 2 && (q[1] == '<' || q[1] == 'P')) {
                return fail(p, at, "named group is not supported"), false;
            } else {
                return fail(p, at, "inline flags or group extension (? is not supported"), false;
            }
        }
        if (depth >= RE_DEPTH_MAX)
            return fail(p, at, "groups nested too deeply"), false;
        sl_gbnf_puts(b, "(");
        if (!parse_alt(p, b, depth + 1))
            return false;
        if (p->i >= p->n || p->s[p->i] != ')')
            return fail(p, at, "unterminated group"), false;
        p->i++;
        sl_gbnf_puts(b, ")");
        return true;
    case ')':
        return fail(p, at, "unmatched ')'"), false;
    case '*': case '+': case '?':
        return fail(p, at, "quantifier with nothing to repeat"), false;
    case '{':
        return fail(p, at, "'{' that is not a quantifier (escape it)"), false;
    case '^':
        return fail(p, at, "'^' is only supported at the start"), false;
    case '$':
        return fail(p, at, "'$' is only supported at the end"), false;
    case '[':
        p->i++;
        ok = parse_class(p, &c);
        break;
    case '.':
        p->i++;
        cset_add(&c, '\n', '\n');
        cset_add(&c, '\r', '\r');
        cset_add(&c, 0x2028, 0x2029);
        cset_negate(&c);
        break;
    case '\\': {
        p->i++;
        uint32_t cp;
        int kind = read_escape(p, &c, false, &cp);
        if (kind == 1)
            cset_add(&c, cp, cp);
        ok = kind != 0;
        break;
    }
    default: {
        uint32_t cp;
        ok = read_literal_cp(p, &cp);
        if (ok)
            cset_add(&c, cp, cp);
        break;
    }
    }
    if (ok && c.oom) {
        p->rc = SL_ENOMEM;
        ok = false;
    }
    if (ok && !cset_emit(p, b, &c))
        ok = fail(p, at, "U+0000 cannot be written in a JSON string") == SL_OK;
    free(c.r);
    return ok;
}

static bool read_count(re_parser *p, unsigned *v)
{
    size_t start = p->i;
    unsigned x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && p->i - start < 6)
        x = x * 10 + (unsigned)(p->s[p->i++] - '0');
    *v = x;
    return p->i > start;
}

/* A quantifier at p->i, if any, written after the atom. */
static bool parse_quant(re_parser *p, sl_gbnf_buf *b)
{
    if (p->i >= p->n)
        return true;
    size_t at = p->i;
    char q = p->s[p->i];
    if (q == '*' || q == '+' || q == '?') {
        p->i++;
        char s[2] = {q, 0};
        sl_gbnf_puts(b, s);
    } else if (q == '{') {
        p->i++;
        unsigned m, n;
        bool bounded = true;
        if (!read_count(p, &m))
            return fail(p, at, "'{' that is not a quantifier (escape it)"), false;
        n = m;
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            if (!read_count(p, &n))
                bounded = false;
        }
        if (p->i >= p->n || p->s[p->i] != '}')
            return fail(p, at, "'{' that is not a quantifier (escape it)"), false;
        p->i++;
        if (m > RE_REPEAT_MAX || (bounded && n > RE_REPEAT_MAX))
            return fail(p, at, "repetition bound over 1000"), false;
        if (bounded && n < m)
            return fail(p, at, "repetition {m,n} with n < m"), false;
        if (!bounded)
            sl_gbnf_printf(b, "{%u,}", m);
        else if (m == n)
            sl_gbnf_printf(b, "{%u}", m);
        else
            sl_gbnf_printf(b, "{%u,%u}", m, n);
    } else {
        return true;
    }
    if (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '?')
            return fail(p, p->i, "lazy quantifier is not supported"), false;
        if (c == '+')
            return fail(p, p->i, "possessive quantifier is not supported"), false;
        if (c == '*' || c == '{')
            return fail(p, p->i, "quantifier after a quantifier"), false;
    }
    return true;
}

static bool parse_concat(re_parser *p, sl_gbnf_buf *b, int depth)
{
    bool any = false;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        if (p->s[p->i] == '$' && p->i + 1 == p->n && depth == 0) {
            p->i++;   /* the end anchor: matching is anchored anyway */
            break;
        }
        if (any)
            sl_gbnf_puts(b, " ");
        sl_gbnf_buf atom = {0};
        bool ok = parse_atom(p, &atom, depth);
        if (ok) {
            bool group = atom.p && atom.p[0] == '(';
            bool quant = p->i < p->n && strchr("*+?{", p->s[p->i]) != NULL;
            if (quant && !group)
                sl_gbnf_puts(b, "(");
            sl_gbnf_putn(b, atom.p ? atom.p : "", atom.len);
            if (quant && !group)
                sl_gbnf_puts(b, ")");
            b->oom |= atom.oom;
            ok = parse_quant(p, b);
        }
        sl_gbnf_buf_fini(&atom);
        if (!ok)
            return false;
        any = true;
    }
    if (!any)
        sl_gbnf_puts(b, "\"\"");
    return true;
}

static bool parse_alt(re_parser *p, sl_gbnf_buf *b, int depth)
{
    if (!parse_concat(p, b, depth))
        return false;
    while (p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        sl_gbnf_puts(b, " | ");
        if (!parse_concat(p, b, depth))
            return false;
    }
    return true;
}

sl_status sl_regex_to_gbnf(const char *re, size_t len, const char *root_name, bool json_string, char **out,
                           char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = 0;
    if (out == NULL)
        return SL_EINVAL;
    *out = NULL;
    re_parser p = {.s = re, .n = len, .json = json_string, .err = err, .err_len = err_len};
    if (re == NULL && len > 0)
        return fail(&p, 0, "no pattern");
    if (root_name == NULL || root_name[0] == 0 || strspn(root_name, "abcdefghijklmnopqrstuvwxyz"
                                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
                                                           strlen(root_name)) {
        if (err && err_len)
            snprintf(err, err_len, "regex: bad rule name");
        return SL_EINVAL;
    }
    if (p.i < p.n && p.s[0] == '^')
        p.i++;   /* the start anchor: matching is anchored anyway */
    sl_gbnf_buf b = {0};
    sl_gbnf_printf(&b, "%s ::= ", root_name);
    bool ok = parse_alt(&p, &b, 0);
    if (ok && p.i < p.n)
        ok = fail(&p, p.i, "unmatched ')'") == SL_OK;
    if (!ok) {
        sl_gbnf_buf_fini(&b);
        return p.rc != SL_OK ? p.rc : SL_EINVAL;
    }
    sl_gbnf_puts(&b, "\n");
    *out = sl_gbnf_buf_take(&b);
    return *out ? SL_OK : SL_ENOMEM;
}
