/* model/grammar/gbnf_text.c: GBNF text building for the compilers (see
 * gbnf_text.h). Trade-off: every code point at or above U+0080 is written as
 * raw UTF-8 and every ASCII control as \xHH, so the text is valid UTF-8 and
 * the grammar parser never needs \u escapes from us. */
#include "model/grammar/gbnf_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"

static bool reserve(sl_gbnf_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;
    }
    char *p = sl_realloc(b->p, cap);
    if (p == NULL) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void sl_gbnf_buf_fini(sl_gbnf_buf *b)
{
    free(b->p);
    *b = (sl_gbnf_buf){0};
}

void sl_gbnf_putn(sl_gbnf_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sl_gbnf_puts(sl_gbnf_buf *b, const char *s) { sl_gbnf_putn(b, s, strlen(s)); }

void sl_gbnf_printf(sl_gbnf_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        sl_gbnf_putn(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *sl_gbnf_buf_take(sl_gbnf_buf *b)
{
    if (b->oom) {
        sl_gbnf_buf_fini(b);
        return NULL;
    }
    char *p = b->p;
    if (p == NULL)
        p = sl_strdup("");
    *b = (sl_gbnf_buf){0};
    return p;
}

void sl_gbnf_utf8(sl_gbnf_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    sl_gbnf_putn(b, u, n);
}

size_t sl_gbnf_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0)
        return 0;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    }
    size_t len;
    uint32_t c, min;
    if ((u[0] & 0xE0) == 0xC0) {
        len = 2, c = u[0] & 0x1F, min = 0x80;
    } else if ((u[0] & 0xF0) == 0xE0) {
        len = 3, c = u[0] & 0x0F, min = 0x800;
    } else if ((u[0] & 0xF8) == 0xF0) {
        len = 4, c = u[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (u[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

void sl_gbnf_literal(sl_gbnf_buf *b, const char *s, size_t n)
{
    sl_gbnf_putn(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sl_gbnf_putn(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            sl_gbnf_printf(b, "\\x%02X", c);
        } else {
            sl_gbnf_putn(b, (const char *)&s[i], 1);
        }
    }
    sl_gbnf_putn(b, "\"", 1);
}

static void class_char(sl_gbnf_buf *b, uint32_t cp)
{
    if (cp < 0x20 || cp == 0x7F)
        sl_gbnf_printf(b, "\\x%02X", (unsigned)cp);
    else if (cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^')
        sl_gbnf_printf(b, "\\%c", (char)cp);
    else
        sl_gbnf_utf8(b, cp);
}

static int cmp_range(const void *a, const void *b)
{
    const sl_gbnf_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void sl_gbnf_class(sl_gbnf_buf *b, const sl_gbnf_range *r, size_t n)
{
    sl_gbnf_range *s = sl_malloc((n ? n : 1) * sizeof *s);
    if (s == NULL) {
        b->oom = true;
        return;
    }
    memcpy(s, r, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_range);
    sl_gbnf_putn(b, "[", 1);
    for (size_t i = 0; i < n;) {
        uint32_t lo = s[i].lo, hi = s[i].hi;
        for (i++; i < n && s[i].lo <= hi + 1; i++)   /* merge touching ranges */
            if (s[i].hi > hi)
                hi = s[i].hi;
        class_char(b, lo);
        if (hi > lo) {
            if (hi > lo + 1)
                sl_gbnf_putn(b, "-", 1);
            class_char(b, hi);
        }
    }
    sl_gbnf_putn(b, "]", 1);
    free(s);
}

/* ---- productivity: a fixpoint over the rules ------------------------------------------ */

typedef struct {
    const char *name;
    size_t name_len;
    const char *body, *end;
    bool productive;
} prod_rule;

typedef struct {
    prod_rule *r;
    prod_rule **by_name;   /* (n) sorted by name, for the lookups */
    size_t n;
    const char *p, *end;
} prod_eval;

static int cmp_name(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int cmp_rule(const void *a, const void *b)
{
    const prod_rule *x = *(prod_rule *const *)a, *y = *(prod_rule *const *)b;
    return cmp_name(x->name, x->name_len, y->name, y->name_len);
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_space(prod_eval *e)
{
    while (e->p < e->end && (*e->p == ' ' || *e->p == '\t'))
        e->p++;
}

static bool eval_alt(prod_eval *e);

/* One element and its repetition; true when it can derive a finite string. */
static bool eval_elem(prod_eval *e, bool *ok)
{
    bool v = true;
    char c = *e->p;
    if (c == '"' || c == '[') {
        char close = c == '"' ? '"' : ']';
        for (e->p++; e->p < e->end && *e->p != close; e->p++)
            if (*e->p == '\\' && e->p + 1 < e->end)
                e->p++;
        e->p++;
    } else if (c == '(') {
        e->p++;
        v = eval_alt(e);
        skip_space(e);
        e->p++;   /* ')' */
    } else if (is_name_char(c)) {
        const char *s = e->p;
        while (e->p < e->end && is_name_char(*e->p))
            e->p++;
        v = false;
        size_t lo = 0, hi = e->n, len = (size_t)(e->p - s);
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int d = cmp_name(s, len, e->by_name[mid]->name, e->by_name[mid]->name_len);
            if (d == 0) {
                v = e->by_name[mid]->productive;
                break;
            }
            if (d < 0)
                hi = mid;
            else
                lo = mid + 1;
        }
    } else {
        *ok = false;
        e->p++;
        return false;
    }
    if (e->p < e->end && (*e->p == '?' || *e->p == '*')) {
        e->p++;
        v = true;
    } else if (e->p < e->end && *e->p == '+') {
        e->p++;
    } else if (e->p < e->end && *e->p == '{') {
        if (e->p + 1 < e->end && e->p[1] == '0' && (e->p + 2 >= e->end || e->p[2] == ',' || e->p[2] == '}'))
            v = true;
        while (e->p < e->end && *e->p != '}')
            e->p++;
        e->p++;
    }
    return v;
}

static bool eval_alt(prod_eval *e)
{
    bool any = false;
    for (;;) {
        bool all = true, ok = true;
        for (;;) {
            skip_space(e);
            if (e->p >= e->end || *e->p == '|' || *e->p == ')')
                break;
            if (!eval_elem(e, &ok))
                all = false;
            if (!ok)
                return any;
        }
        any |= all;
        if (e->p < e->end && *e->p == '|') {
            e->p++;
            continue;
        }
        return any;
    }
}

size_t sl_gbnf_unproductive(const char *text, const char **names, size_t *lens, size_t max)
{
    size_t n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    prod_rule *r = sl_calloc(n + 1, sizeof *r);
    if (r == NULL)
        return 0;   /* cannot check: the grammar compiler checks again */
    size_t k = 0;
    for (const char *p = text; *p && k <= n;) {
        const char *eol = strchr(p, '\n');
        if (eol == NULL)
            eol = p + strlen(p);
        const char *def = strstr(p, " ::= ");
        if (def && def < eol) {
            r[k] = (prod_rule){.name = p, .name_len = (size_t)(def - p), .body = def + 5, .end = eol};
            k++;
        }
        p = *eol ? eol + 1 : eol;
    }
    prod_rule **by_name = sl_malloc((k ? k : 1) * sizeof *by_name);
    if (by_name == NULL) {
        free(r);
        return 0;
    }
    for (size_t i = 0; i < k; i++)
        by_name[i] = &r[i];
    qsort(by_name, k, sizeof *by_name, cmp_rule);
    prod_eval e = {.r = r, .by_name = by_name, .n = k};
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < k; i++) {
            if (r[i].productive)
                continue;
            e.p = r[i].body;
            e.end = r[i].end;
            if (eval_alt(&e)) {
                r[i].productive = true;
                changed = true;
            }
        }
    }
    size_t bad = 0;
    for (size_t i = 0; i < k; i++)
        if (!r[i].productive) {
            if (bad < max) {
                names[bad] = r[i].name;
                lens[bad] = r[i].name_len;
            }
            bad++;
        }
    free(by_name);
    free(r);
    return bad;
}
