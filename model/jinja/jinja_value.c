/* model/jinja/jinja_value.c: arenas, values, the string builder, truth,
 * equality and order, UTF-8 decoding for the Jinja engine; runs in the
 * front end.
 * Trade-off: values are never freed one by one; a render's arena dies with
 * the render. This keeps provenance copies cheap to write and impossible to
 * leak, at the price of a byte budget per render (JJ_RENDER_ARENA). */
#include "shared/alloc.h"
#include "model/jinja/jinja.h"

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
        c = sl_malloc(sizeof(jj_chunk) + cap);
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
        if (a.l->n != b.l->n || a.l->tuple != b.l->tuple || a.l->gen || b.l->gen)
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
