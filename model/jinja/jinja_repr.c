/* model/jinja/jinja_repr.c: Python's spellings of engine values: str(), repr()
 * and json.dumps() as transformers' tojson calls it, for the Jinja engine;
 * runs in the front end during a render.
 * Trade-off: every spelling copies the provenance mask byte by byte, and an
 * escape sequence inherits the mask of the byte it stands for, so a user's
 * text stays untrusted however it is quoted. */
#include "model/jinja/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (jj_buf_putc(c, b, v.l->tuple ? "(" : "[") < 0)
            return -1;
        for (size_t i = 0; i < v.l->n; i++)
            if ((i && jj_buf_putc(c, b, ", ") < 0) || jj_repr(c, b, v.l->v[i], depth + 1) < 0)
                return -1;
        if (v.l->tuple && v.l->n == 1 && jj_buf_putc(c, b, ",") < 0)
            return -1;
        return jj_buf_putc(c, b, v.l->tuple ? ")" : "]");
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
