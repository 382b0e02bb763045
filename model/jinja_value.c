/* model/jinja_value.c: arenas, values and their Python spellings (str,
 * repr, json.dumps) for the Jinja engine; runs in the front end.
 * Trade-off: values are never freed one by one; a render's arena dies with
 * the render. This keeps provenance copies cheap to write and impossible to
 * leak, at the price of a byte budget per render (JJ_RENDER_ARENA). */
#include "model/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* arena                                                                    */
/* ======================================================================== */

struct jj_chunk {
    jj_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void jj_arena_init(jj_arena *a, size_t limit)
{
    a->head = NULL;
    a->used_total = 0;
    a->limit = limit;
}

void jj_arena_fini(jj_arena *a)
{
    jj_chunk *c = a->head;
    while (c) {
        jj_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

void *jj_alloc(jj_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (a->limit && (n > a->limit || a->used_total > a->limit - n))
        return NULL;
    jj_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof(jj_chunk) + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    a->used_total += n;
    memset(p, 0, n);
    return p;
}

int jj_fail(jj_ctx *c, sl_status rc, const char *fmt, ...)
{
    if (c->rc < 0)
        return -1; /* keep the first, innermost message */
    c->rc = rc;
    int off = 0;
    if (c->line > 0)
        off = snprintf(c->err, SL_ERR_LEN, "template line %d: ", c->line);
    if (off < 0 || off >= SL_ERR_LEN)
        off = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + off, SL_ERR_LEN - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}

static void *alloc_or_fail(jj_ctx *c, size_t n)
{
    void *p = jj_alloc(c->ar, n);
    if (!p)
        jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
    return p;
}

/* ======================================================================== */
/* constructors, lists, dicts                                               */
/* ======================================================================== */

jj_val jj_undef(void) { jj_val v = {.k = JJ_UNDEF}; return v; }
jj_val jj_none(void) { jj_val v = {.k = JJ_NONE}; return v; }
jj_val jj_bool(bool b) { jj_val v = {.k = JJ_BOOL, .b = b}; return v; }
jj_val jj_int(int64_t i) { jj_val v = {.k = JJ_INT, .i = i}; return v; }
jj_val jj_float(double f) { jj_val v = {.k = JJ_FLOAT, .f = f}; return v; }
jj_val jj_strv(jj_str s) { jj_val v = {.k = JJ_STR, .s = s}; return v; }

jj_str jj_lit(const char *cstr)
{
    jj_str s = {.p = cstr, .n = strlen(cstr)};
    return s;
}

int jj_str_make(jj_ctx *c, const char *p, size_t n, bool untrusted, jj_str *out)
{
    char *q = alloc_or_fail(c, n + 1);
    if (!q)
        return -1;
    if (n)
        memcpy(q, p, n);
    *out = (jj_str){.p = q, .n = n};
    if (untrusted && n) {
        uint8_t *t = alloc_or_fail(c, n);
        if (!t)
            return -1;
        memset(t, 1, n);
        out->t = t;
    }
    return 0;
}

bool jj_str_eq(jj_str a, jj_str b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }
bool jj_str_eqc(jj_str a, const char *cstr) { return jj_str_eq(a, jj_lit(cstr)); }

bool jj_str_untrusted(jj_str s)
{
    if (!s.t)
        return false;
    for (size_t i = 0; i < s.n; i++)
        if (s.t[i])
            return true;
    return false;
}

jj_list *jj_list_new(jj_ctx *c, size_t cap)
{
    jj_list *l = alloc_or_fail(c, sizeof(*l));
    if (!l)
        return NULL;
    if (cap) {
        l->v = alloc_or_fail(c, cap * sizeof(jj_val));
        if (!l->v)
            return NULL;
        l->cap = cap;
    }
    return l;
}

int jj_list_push(jj_ctx *c, jj_list *l, jj_val v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_val *nv = alloc_or_fail(c, cap * sizeof(jj_val));
        if (!nv)
            return -1;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(jj_val));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

jj_dict *jj_dict_new(jj_ctx *c, size_t cap)
{
    jj_dict *d = alloc_or_fail(c, sizeof(*d));
    if (!d)
        return NULL;
    if (cap) {
        d->keys = alloc_or_fail(c, cap * sizeof(jj_val));
        d->vals = alloc_or_fail(c, cap * sizeof(jj_val));
        if (!d->keys || !d->vals)
            return NULL;
        d->cap = cap;
    }
    return d;
}

/* Linear search: chat dicts hold a handful of keys. */
jj_val *jj_dict_get(const jj_dict *d, jj_val k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jj_equal(d->keys[i], k))
            return &d->vals[i];
    return NULL;
}

jj_val *jj_dict_getc(const jj_dict *d, const char *key)
{
    return jj_dict_get(d, jj_strv(jj_lit(key)));
}

int jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v)
{
    jj_val *have = jj_dict_get(d, k);
    if (have) {
        *have = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jj_val *nk = alloc_or_fail(c, cap * sizeof(jj_val));
        jj_val *nv = alloc_or_fail(c, cap * sizeof(jj_val));
        if (!nk || !nv)
            return -1;
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof(jj_val));
            memcpy(nv, d->vals, d->n * sizeof(jj_val));
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = k;
    d->vals[d->n] = v;
    d->n++;
    return 0;
}

/* ======================================================================== */
/* string builder                                                           */
/* ======================================================================== */

int jj_buf_put(jj_ctx *c, jj_buf *b, const char *p, size_t n, bool untrusted)
{
    if (n > JJ_MAX_OUTPUT || b->n > JJ_MAX_OUTPUT - n)
        return jj_fail(c, SL_ERANGE, "template output exceeds %u bytes", JJ_MAX_OUTPUT);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        char *np = alloc_or_fail(c, cap);
        uint8_t *nt = alloc_or_fail(c, cap);
        if (!np || !nt)
            return -1;
        if (b->n) {
            memcpy(np, b->p, b->n);
            memcpy(nt, b->t, b->n);
        }
        b->p = np;
        b->t = nt;
        b->cap = cap;
    }
    if (n) {
        memcpy(b->p + b->n, p, n);
        memset(b->t + b->n, untrusted ? 1 : 0, n);
    }
    b->n += n;
    return 0;
}

int jj_buf_puts(jj_ctx *c, jj_buf *b, jj_str s)
{
    size_t at = b->n;
    if (jj_buf_put(c, b, s.p, s.n, false) < 0)
        return -1;
    if (s.t && s.n)
        memcpy(b->t + at, s.t, s.n);
    return 0;
}

int jj_buf_putc(jj_ctx *c, jj_buf *b, const char *cstr)
{
    return jj_buf_put(c, b, cstr, strlen(cstr), false);
}

jj_str jj_buf_str(const jj_buf *b)
{
    jj_str s = {.p = b->p ? b->p : "", .n = b->n};
    for (size_t i = 0; i < b->n; i++)
        if (b->t[i]) {
            s.t = b->t;
            break;
        }
    return s;
}

/* ======================================================================== */
/* truth, equality, order                                                   */
/* ======================================================================== */

const char *jj_kind_name(jj_kind k)
{
    static const char *names[] = {"undefined", "none", "bool", "int", "float", "str",
                                  "list", "dict", "namespace", "macro", "function"};
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

bool jj_truthy(jj_val v)
{
    switch (v.k) {
    case JJ_UNDEF: case JJ_NONE: return false;
    case JJ_BOOL: return v.b;
    case JJ_INT: return v.i != 0;
    case JJ_FLOAT: return v.f != 0.0;
    case JJ_STR: return v.s.n != 0;
    case JJ_LIST: return v.l->gen || v.l->n != 0;
    case JJ_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_num(jj_val v) { return v.k == JJ_INT || v.k == JJ_FLOAT || v.k == JJ_BOOL; }
static double num_f(jj_val v) { return v.k == JJ_FLOAT ? v.f : v.k == JJ_INT ? (double)v.i : (double)v.b; }
static int64_t num_i(jj_val v) { return v.k == JJ_INT ? v.i : (int64_t)v.b; }

/* Python ==, with True == 1 and 1 == 1.0; depth-limited for nested data. */
static bool equal_d(jj_val a, jj_val b, int depth)
{
    if (depth > 256)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a.k == JJ_FLOAT || b.k == JJ_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.k != b.k)
        return false;
    switch (a.k) {
    case JJ_UNDEF: case JJ_NONE: return true;
    case JJ_STR: return jj_str_eq(a.s, b.s);
    case JJ_LIST:
        if (a.l->n != b.l->n)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!equal_d(a.l->v[i], b.l->v[i], depth + 1))
                return false;
        return true;
    case JJ_DICT:
        if (a.d->n != b.d->n)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jj_val *o = jj_dict_get(b.d, a.d->keys[i]);
            if (!o || !equal_d(a.d->vals[i], *o, depth + 1))
                return false;
        }
        return true;
    case JJ_NS: return a.d == b.d;
    case JJ_MACRO: return a.macro == b.macro;
    case JJ_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

bool jj_equal(jj_val a, jj_val b) { return equal_d(a, b, 0); }

int jj_compare(jj_ctx *c, jj_val a, jj_val b, int *out)
{
    if (is_num(a) && is_num(b)) {
        if (a.k == JJ_FLOAT || b.k == JJ_FLOAT) {
            double x = num_f(a), y = num_f(b);
            *out = x < y ? -1 : x > y ? 1 : 0;
        } else {
            int64_t x = num_i(a), y = num_i(b);
            *out = x < y ? -1 : x > y ? 1 : 0;
        }
        return 0;
    }
    if (a.k == JJ_STR && b.k == JJ_STR) {
        /* bytewise order of UTF-8 equals code point order */
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        int r = n ? memcmp(a.s.p, b.s.p, n) : 0;
        *out = r ? (r < 0 ? -1 : 1) : (a.s.n < b.s.n ? -1 : a.s.n > b.s.n ? 1 : 0);
        return 0;
    }
    if (a.k == JJ_LIST && b.k == JJ_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (jj_equal(a.l->v[i], b.l->v[i]))
                continue;
            return jj_compare(c, a.l->v[i], b.l->v[i], out);
        }
        *out = a.l->n < b.l->n ? -1 : a.l->n > b.l->n ? 1 : 0;
        return 0;
    }
    return jj_fail(c, SL_EINVAL, "cannot order %s and %s", jj_kind_name(a.k), jj_kind_name(b.k));
}

/* ======================================================================== */
/* UTF-8                                                                    */
/* ======================================================================== */

/* Decodes one code point; invalid bytes decode as themselves, length 1, so
 * hostile template bytes never stall a loop. */
size_t jj_utf8_decode(const char *p, size_t n, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p;
    if (n == 0) {
        *cp = 0;
        return 0;
    }
    unsigned c0 = s[0];
    size_t len = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    if (len <= 1 || len > n) {
        *cp = c0;
        return 1;
    }
    uint32_t v = c0 & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = c0;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3f);
    }
    *cp = v;
    return len;
}

size_t jj_utf8_len(const char *p, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += jj_utf8_decode(p + i, n - i, &cp);
        count++;
    }
    return count;
}

/* ======================================================================== */
/* Python spellings                                                         */
/* ======================================================================== */

/* float.__repr__: the shortest digits that read back to the same double,
 * fixed notation for exponents in [-4, 16), scientific otherwise. */
int jj_float_repr(char out[40], double f)
{
    if (isnan(f))
        return snprintf(out, 40, "nan");
    if (isinf(f))
        return snprintf(out, 40, f < 0 ? "-inf" : "inf");
    char tmp[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp = [-]d.ddde[+-]XX */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp >= -5 + 1 && exp < 16) {
        if (exp < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -exp - 1; i++)
                *o++ = '0';
            for (int i = 0; i < nd; i++)
                *o++ = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    *o++ = digits[i];
            else
                *o++ = '0';
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++)
                *o++ = digits[i];
        }
        snprintf(o, 16, "e%c%02d", exp < 0 ? '-' : '+', (exp < 0 ? -exp : exp) % 1000);
    }
    return (int)strlen(out);
}

static int put_num(jj_ctx *c, jj_buf *b, jj_val v)
{
    char tmp[40];
    if (v.k == JJ_INT)
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v.i);
    else
        jj_float_repr(tmp, v.f);
    return jj_buf_putc(c, b, tmp);
}

/* repr(str): single quotes unless the text has ' and no ". */
static int repr_str(jj_ctx *c, jj_buf *b, jj_str s)
{
    bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (jj_buf_put(c, b, &q, 1, false) < 0)
        return -1;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        bool u = s.t && s.t[i];
        char esc[8];
        const char *e = NULL;
        if (ch == '\\') e = "\\\\";
        else if (ch == (unsigned char)q) e = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n') e = "\\n";
        else if (ch == '\r') e = "\\r";
        else if (ch == '\t') e = "\\t";
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", ch);
            e = esc;
        }
        if (e ? jj_buf_put(c, b, e, strlen(e), u) : jj_buf_put(c, b, (const char *)&ch, 1, u))
            return -1;
    }
    return jj_buf_put(c, b, &q, 1, false);
}

int jj_repr(jj_ctx *c, jj_buf *b, jj_val v, int depth)
{
    if (depth > 256)
        return jj_fail(c, SL_ERANGE, "value nested too deeply");
    switch (v.k) {
    case JJ_STR: return repr_str(c, b, v.s);
    case JJ_LIST:
        if (jj_buf_putc(c, b, "[") < 0)
            return -1;
        for (size_t i = 0; i < v.l->n; i++)
            if ((i && jj_buf_putc(c, b, ", ") < 0) || jj_repr(c, b, v.l->v[i], depth + 1) < 0)
                return -1;
        return jj_buf_putc(c, b, "]");
    case JJ_DICT:
        if (jj_buf_putc(c, b, "{") < 0)
            return -1;
        for (size_t i = 0; i < v.d->n; i++)
            if ((i && jj_buf_putc(c, b, ", ") < 0) || jj_repr(c, b, v.d->keys[i], depth + 1) < 0 ||
                jj_buf_putc(c, b, ": ") < 0 || jj_repr(c, b, v.d->vals[i], depth + 1) < 0)
                return -1;
        return jj_buf_putc(c, b, "}");
    default: return jj_to_str(c, b, v);
    }
}

int jj_to_str(jj_ctx *c, jj_buf *b, jj_val v)
{
    switch (v.k) {
    case JJ_UNDEF: return 0;
    case JJ_NONE: return jj_buf_putc(c, b, "None");
    case JJ_BOOL: return jj_buf_putc(c, b, v.b ? "True" : "False");
    case JJ_INT: case JJ_FLOAT: return put_num(c, b, v);
    case JJ_STR: return jj_buf_puts(c, b, v.s);
    case JJ_LIST:
        if (v.l->gen) /* Python prints an address here; nothing to match */
            return jj_fail(c, SL_EUNSUPPORTED, "cannot print a generator (add |list)");
        return jj_repr(c, b, v, 0);
    case JJ_DICT: return jj_repr(c, b, v, 0);
    case JJ_NS: return jj_buf_putc(c, b, "<Namespace>");
    case JJ_MACRO: return jj_buf_putc(c, b, "<Macro>");
    case JJ_FUNC: return jj_buf_putc(c, b, "<function>");
    }
    return 0;
}

int jj_stringify(jj_ctx *c, jj_val v, jj_str *out)
{
    if (v.k == JJ_STR) {
        *out = v.s;
        return 0;
    }
    jj_buf b = {0};
    if (jj_to_str(c, &b, v) < 0)
        return -1;
    *out = jj_buf_str(&b);
    return 0;
}

/* json.dumps string with ensure_ascii=False. */
static int json_str(jj_ctx *c, jj_buf *b, jj_str s)
{
    if (jj_buf_putc(c, b, "\"") < 0)
        return -1;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        bool u = s.t && s.t[i];
        char esc[8];
        const char *e = NULL;
        switch (ch) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", ch);
                e = esc;
            }
        }
        if (e ? jj_buf_put(c, b, e, strlen(e), u) : jj_buf_put(c, b, (const char *)&ch, 1, u))
            return -1;
    }
    return jj_buf_putc(c, b, "\"");
}

static int json_newline(jj_ctx *c, jj_buf *b, int indent, int level)
{
    if (jj_buf_putc(c, b, "\n") < 0)
        return -1;
    for (int i = 0; i < indent * level; i++)
        if (jj_buf_putc(c, b, " ") < 0)
            return -1;
    return 0;
}

/* json.dumps keys: str as is; int/float/bool/None spelled as JSON. */
static int json_key(jj_ctx *c, jj_buf *b, jj_val k)
{
    if (k.k == JJ_STR)
        return json_str(c, b, k.s);
    jj_buf t = {0};
    if (k.k == JJ_BOOL)
        jj_buf_putc(c, &t, k.b ? "true" : "false");
    else if (k.k == JJ_NONE)
        jj_buf_putc(c, &t, "null");
    else if (k.k == JJ_INT || k.k == JJ_FLOAT)
        put_num(c, &t, k);
    else
        return jj_fail(c, SL_EINVAL, "tojson: keys must be str, int, float, bool or None");
    if (c->rc < 0)
        return -1;
    return json_str(c, b, jj_buf_str(&t));
}

int jj_tojson(jj_ctx *c, jj_buf *b, jj_val v, int indent, jj_str item_sep, jj_str key_sep,
              bool sort_keys, int depth)
{
    if (depth > 256)
        return jj_fail(c, SL_ERANGE, "tojson: value nested too deeply");
    switch (v.k) {
    case JJ_NONE: return jj_buf_putc(c, b, "null");
    case JJ_BOOL: return jj_buf_putc(c, b, v.b ? "true" : "false");
    case JJ_INT: return put_num(c, b, v);
    case JJ_FLOAT:
        if (isnan(v.f))
            return jj_buf_putc(c, b, "NaN");
        if (isinf(v.f))
            return jj_buf_putc(c, b, v.f < 0 ? "-Infinity" : "Infinity");
        return put_num(c, b, v);
    case JJ_STR: return json_str(c, b, v.s);
    case JJ_LIST:
        if (v.l->gen)
            return jj_fail(c, SL_EINVAL, "tojson: object of type generator is not JSON serializable");
        if (v.l->n == 0)
            return jj_buf_putc(c, b, "[]");
        if (jj_buf_putc(c, b, "[") < 0)
            return -1;
        for (size_t i = 0; i < v.l->n; i++) {
            if (i && jj_buf_puts(c, b, item_sep) < 0)
                return -1;
            if (indent >= 0 && json_newline(c, b, indent, depth + 1) < 0)
                return -1;
            if (jj_tojson(c, b, v.l->v[i], indent, item_sep, key_sep, sort_keys, depth + 1) < 0)
                return -1;
        }
        if (indent >= 0 && json_newline(c, b, indent, depth) < 0)
            return -1;
        return jj_buf_putc(c, b, "]");
    case JJ_DICT: {
        if (v.d->n == 0)
            return jj_buf_putc(c, b, "{}");
        size_t n = v.d->n;
        size_t *order = jj_alloc(c->ar, n * sizeof(size_t));
        if (!order)
            return jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (sort_keys) /* insertion sort: dicts here are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                    int r;
                    if (jj_compare(c, v.d->keys[order[j - 1]], v.d->keys[order[j]], &r) < 0)
                        return -1;
                    if (r <= 0)
                        break;
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        if (jj_buf_putc(c, b, "{") < 0)
            return -1;
        for (size_t i = 0; i < n; i++) {
            if (i && jj_buf_puts(c, b, item_sep) < 0)
                return -1;
            if (indent >= 0 && json_newline(c, b, indent, depth + 1) < 0)
                return -1;
            if (json_key(c, b, v.d->keys[order[i]]) < 0 || jj_buf_puts(c, b, key_sep) < 0 ||
                jj_tojson(c, b, v.d->vals[order[i]], indent, item_sep, key_sep, sort_keys,
                          depth + 1) < 0)
                return -1;
        }
        if (indent >= 0 && json_newline(c, b, indent, depth) < 0)
            return -1;
        return jj_buf_putc(c, b, "}");
    }
    default:
        return jj_fail(c, SL_EINVAL, "tojson: object of type %s is not JSON serializable",
                       jj_kind_name(v.k));
    }
}
