/* model/jinja/jinja_text.c: string transformations with provenance for the
 * Jinja engine (Python's strip, split, replace, join, case mapping, and
 * HTML escaping); runs in the front end during a render.
 * Every function copies the untrusted mask with the bytes it keeps; bytes it
 * writes itself (an escape, a separator) take the mask of the byte they
 * replace, or of the separator string.
 * Trade-off: case mapping handles ASCII only; other letters pass through
 * unchanged where Python would map them. Templates apply it to roles and
 * tool types, which are ASCII; removing the wart needs a Unicode case table. */
#include "model/jinja/jinja.h"

#include <string.h>

/* Python str.isspace() for one code point. */
static bool py_space(uint32_t cp)
{
    return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static bool in_chars(uint32_t cp, const jj_str *chars)
{
    if (!chars)
        return py_space(cp);
    for (size_t i = 0; i < chars->n;) {
        uint32_t x;
        i += jj_utf8_decode(chars->p + i, chars->n - i, &x);
        if (x == cp)
            return true;
    }
    return false;
}

/* length in bytes of the code point ending at s[n-1] */
static size_t last_cp(const char *s, size_t n, uint32_t *cp)
{
    size_t k = 1;
    while (k < n && k < 4 && ((unsigned char)s[n - k] & 0xc0) == 0x80)
        k++;
    if (jj_utf8_decode(s + n - k, k, cp) != k) {
        *cp = (unsigned char)s[n - 1];
        return 1;
    }
    return k;
}

jj_str jj_text_strip(jj_str s, const jj_str *chars, bool left, bool right)
{
    size_t b = 0, e = s.n;
    while (left && b < e) {
        uint32_t cp;
        size_t k = jj_utf8_decode(s.p + b, e - b, &cp);
        if (!in_chars(cp, chars))
            break;
        b += k;
    }
    while (right && e > b) {
        uint32_t cp;
        size_t k = last_cp(s.p + b, e - b, &cp);
        if (!in_chars(cp, chars))
            break;
        e -= k;
    }
    return jj_str_sub(s, b, e);
}

/* per-byte ASCII case map that keeps the provenance mask */
int jj_text_case(jj_ctx *c, jj_str s, int mode, jj_val *out)
{
    jj_buf b = {0};
    if (jj_buf_puts(c, &b, s) < 0)
        return -1;
    bool word_start = true;
    for (size_t i = 0; i < b.n; i++) {
        char ch = b.p[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool up;
        if (mode == JJ_CASE_UPPER) up = true;
        else if (mode == JJ_CASE_LOWER) up = false;
        else if (mode == JJ_CASE_CAPITALIZE_FIRST) up = i == 0; /* rest stays as is */
        else up = word_start;
        if (alpha)
            b.p[i] = up ? (char)(ch & ~0x20) : (char)(ch | 0x20);
        if (mode == JJ_CASE_TITLE) /* str.title(): after any uncased char; non-ASCII counts as cased */
            word_start = !alpha && (unsigned char)ch < 0x80;
        else if (mode == JJ_CASE_TITLE_WORDS) /* jinja2 |title: words start after [-\s({[<] */
            word_start = ch == '-' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' ||
                         ch == '\v' || ch == '\f' || ch == '(' || ch == '{' || ch == '[' || ch == '<';
    }
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

int jj_text_replace(jj_ctx *c, jj_str s, jj_str old, jj_str neu, int64_t count, jj_val *out)
{
    jj_buf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python inserts `neu` between every character */
        for (;;) {
            if (count >= 0 && done >= count)
                break;
            if (jj_buf_puts(c, &b, neu) < 0)
                return -1;
            done++;
            if (i >= s.n)
                break;
            uint32_t cp;
            size_t k = jj_utf8_decode(s.p + i, s.n - i, &cp);
            if (jj_buf_puts(c, &b, jj_str_sub(s, i, i + k)) < 0)
                return -1;
            i += k;
        }
    } else {
        while (i < s.n && (count < 0 || done < count)) {
            const char *hit = memmem(s.p + i, s.n - i, old.p, old.n);
            if (!hit)
                break;
            size_t at = (size_t)(hit - s.p);
            if (jj_buf_puts(c, &b, jj_str_sub(s, i, at)) < 0 || jj_buf_puts(c, &b, neu) < 0)
                return -1;
            i = at + old.n;
            done++;
        }
    }
    if (jj_buf_puts(c, &b, jj_str_sub(s, i, s.n)) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

int jj_text_split(jj_ctx *c, jj_str s, const jj_str *sep, int64_t maxsplit, jj_val *out)
{
    jj_list *l = jj_list_new(c, 0);
    if (!l)
        return -1;
    size_t i = 0;
    int64_t done = 0;
    if (sep) {
        if (sep->n == 0)
            return jj_fail(c, SL_EINVAL, "empty separator");
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(s.p + i, s.n - i, sep->p, sep->n) : NULL;
            if (!hit)
                break;
            size_t at = (size_t)(hit - s.p);
            if (jj_list_push(c, l, jj_strv(jj_str_sub(s, i, at))) < 0)
                return -1;
            i = at + sep->n;
            done++;
        }
        if (jj_list_push(c, l, jj_strv(jj_str_sub(s, i, s.n))) < 0)
            return -1;
    } else { /* runs of whitespace, no empty strings */
        for (;;) {
            while (i < s.n) {
                uint32_t cp;
                size_t k = jj_utf8_decode(s.p + i, s.n - i, &cp);
                if (!py_space(cp))
                    break;
                i += k;
            }
            if (i >= s.n)
                break;
            size_t b = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                jj_str rest = jj_text_strip(jj_str_sub(s, b, s.n), NULL, false, true);
                if (jj_list_push(c, l, jj_strv(rest)) < 0)
                    return -1;
                break;
            }
            while (i < s.n) {
                uint32_t cp;
                size_t k = jj_utf8_decode(s.p + i, s.n - i, &cp);
                if (py_space(cp))
                    break;
                i += k;
            }
            if (jj_list_push(c, l, jj_strv(jj_str_sub(s, b, i))) < 0)
                return -1;
            done++;
        }
    }
    *out = jj_list_val(l);
    return 0;
}

int jj_text_join(jj_ctx *c, jj_list *l, jj_str sep, const jj_str *attr, jj_val *out)
{
    jj_buf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        jj_val v = l->v[i];
        if (attr) {
            jj_val *x = (v.k == JJ_DICT) ? jj_dict_get(v.d, jj_strv(*attr)) : NULL;
            v = x ? *x : jj_undef();
        }
        if ((i && jj_buf_puts(c, &b, sep) < 0) || jj_to_str(c, &b, v) < 0)
            return -1;
    }
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

int jj_text_escape(jj_ctx *c, jj_str s, jj_val *out)
{
    if (s.safe) {
        *out = jj_strv(s);
        return 0;
    }
    jj_buf b = {0};
    for (size_t i = 0; i < s.n; i++) {
        const char *e = NULL;
        switch (s.p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        }
        bool u = s.t && s.t[i];
        if (e ? jj_buf_put(c, &b, e, strlen(e), u) : jj_buf_put(c, &b, s.p + i, 1, u))
            return -1;
    }
    *out = jj_strv(jj_buf_str(&b));
    out->s.safe = true;
    return 0;
}
