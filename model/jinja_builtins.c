/* model/jinja_builtins.c: the filters, tests, methods and global
 * functions that chat templates call, with jinja2/Python semantics and
 * provenance kept per byte. Runs in the front end during a render.
 * Trade-off: case mapping (upper, lower, title, capitalize) and the
 * case-insensitive compares of sort/unique/dictsort handle ASCII only;
 * other letters pass through unchanged (Python maps them). Templates apply
 * these to roles and tool types, which are ASCII; removing the wart needs a
 * Unicode case table. */
#include "model/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENAME(s) (int)((s).n > 40 ? 40 : (s).n), (s).p

/* ======================================================================== */
/* argument helpers                                                         */
/* ======================================================================== */

/* Argument i, or the keyword `kw`, or NULL. */
static const jj_val *arg(const jj_args *a, size_t i, const char *kw)
{
    if (!a)
        return NULL;
    if (kw)
        for (size_t k = 0; k < a->n_kw; k++)
            if (jj_str_eqc(a->kw_names[k], kw))
                return &a->kw[k];
    return i < a->n_pos ? &a->pos[i] : NULL;
}

static bool arg_bool(const jj_args *a, size_t i, const char *kw, bool def)
{
    const jj_val *v = arg(a, i, kw);
    return v ? jj_truthy(*v) : def;
}

static int arg_str(jj_ctx *c, const jj_args *a, size_t i, const char *kw, jj_str *out, bool *have)
{
    const jj_val *v = arg(a, i, kw);
    *have = v && v->k != JJ_NONE && v->k != JJ_UNDEF;
    if (!*have)
        return 0;
    if (v->k != JJ_STR)
        return jj_fail(c, SL_EINVAL, "argument '%s' must be a string", kw ? kw : "?");
    *out = v->s;
    return 0;
}

static jj_val list_val(jj_list *l) { return (jj_val){.k = JJ_LIST, .l = l}; }

static jj_str sub(jj_str s, size_t from, size_t to)
{
    jj_str r = {.p = s.p + from, .t = s.t ? s.t + from : NULL, .n = to - from};
    return r;
}

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

static jj_str strip(jj_str s, const jj_str *chars, bool left, bool right)
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
    return sub(s, b, e);
}

/* per-byte ASCII case map that keeps the provenance mask */
static int case_map(jj_ctx *c, jj_str s, int mode, jj_val *out)
{
    jj_buf b = {0};
    if (jj_buf_puts(c, &b, s) < 0)
        return -1;
    bool word_start = true;
    for (size_t i = 0; i < b.n; i++) {
        char ch = b.p[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool up;
        if (mode == 0) up = true;                           /* upper */
        else if (mode == 1) up = false;                     /* lower */
        else if (mode == 2) up = i == 0;                    /* capitalize */
        else up = word_start;                               /* title */
        if (alpha)
            b.p[i] = up ? (char)(ch & ~0x20) : (char)(ch | 0x20);
        word_start = !alpha && !((unsigned char)ch >= 0x80) && !(ch >= '0' && ch <= '9');
        if (mode == 3 && (unsigned char)ch >= 0x80)
            word_start = false;
    }
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

static int replace(jj_ctx *c, jj_str s, jj_str old, jj_str neu, int64_t count, jj_val *out)
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
            if (jj_buf_puts(c, &b, sub(s, i, i + k)) < 0)
                return -1;
            i += k;
        }
    } else {
        while (i < s.n && (count < 0 || done < count)) {
            const char *hit = memmem(s.p + i, s.n - i, old.p, old.n);
            if (!hit)
                break;
            size_t at = (size_t)(hit - s.p);
            if (jj_buf_puts(c, &b, sub(s, i, at)) < 0 || jj_buf_puts(c, &b, neu) < 0)
                return -1;
            i = at + old.n;
            done++;
        }
    }
    if (jj_buf_puts(c, &b, sub(s, i, s.n)) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

static int split(jj_ctx *c, jj_str s, const jj_str *sep, int64_t maxsplit, jj_val *out)
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
            if (jj_list_push(c, l, jj_strv(sub(s, i, at))) < 0)
                return -1;
            i = at + sep->n;
            done++;
        }
        if (jj_list_push(c, l, jj_strv(sub(s, i, s.n))) < 0)
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
                jj_str rest = strip(sub(s, b, s.n), NULL, false, true);
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
            if (jj_list_push(c, l, jj_strv(sub(s, b, i))) < 0)
                return -1;
            done++;
        }
    }
    *out = list_val(l);
    return 0;
}

static int join(jj_ctx *c, jj_list *l, jj_str sep, const jj_str *attr, jj_val *out)
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

static int to_list(jj_ctx *c, jj_val v, jj_list **out)
{
    jj_list *l;
    switch (v.k) {
    case JJ_LIST: *out = v.l; return 0;
    case JJ_UNDEF: *out = jj_list_new(c, 0); return *out ? 0 : -1;
    case JJ_DICT:
        l = jj_list_new(c, v.d->n);
        if (!l)
            return -1;
        for (size_t i = 0; i < v.d->n; i++)
            l->v[l->n++] = v.d->keys[i];
        *out = l;
        return 0;
    case JJ_STR:
        l = jj_list_new(c, 0);
        if (!l)
            return -1;
        for (size_t i = 0; i < v.s.n;) {
            uint32_t cp;
            size_t k = jj_utf8_decode(v.s.p + i, v.s.n - i, &cp);
            if (jj_list_push(c, l, jj_strv(sub(v.s, i, i + k))) < 0)
                return -1;
            i += k;
        }
        *out = l;
        return 0;
    default:
        return jj_fail(c, SL_EINVAL, "'%s' object is not iterable", jj_kind_name(v.k));
    }
}

/* dotted attribute path ("function.name") of an item; undefined if absent */
static jj_val attr_path(jj_val v, jj_str path)
{
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.p[e] != '.')
            e++;
        jj_str key = {.p = path.p + i, .n = e - i};
        jj_val *x = NULL;
        if (v.k == JJ_DICT || v.k == JJ_NS)
            x = jj_dict_get(v.d, jj_strv(key));
        else if (v.k == JJ_LIST) {
            char *endp;
            char tmp[24];
            snprintf(tmp, sizeof(tmp), "%.*s", (int)(key.n > 20 ? 20 : key.n), key.p);
            long idx = strtol(tmp, &endp, 10);
            if (*tmp && !*endp && idx >= 0 && (size_t)idx < v.l->n)
                x = &v.l->v[idx];
        }
        if (!x)
            return jj_undef();
        v = *x;
        i = e + 1;
    }
    return v;
}

static jj_val lower_key(jj_ctx *c, jj_val v)
{
    if (v.k != JJ_STR)
        return v;
    jj_val r;
    return case_map(c, v.s, 1, &r) < 0 ? v : r;
}

static int sort_list(jj_ctx *c, jj_list *src, bool reverse, bool case_sensitive, const jj_str *attr,
                     jj_list **out)
{
    jj_list *l = jj_list_new(c, src->n);
    jj_val *keys = jj_alloc(c->ar, (src->n + 1) * sizeof(jj_val));
    if (!l || !keys)
        return jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
    for (size_t i = 0; i < src->n; i++) {
        jj_val k = attr ? attr_path(src->v[i], *attr) : src->v[i];
        keys[i] = case_sensitive ? k : lower_key(c, k);
        l->v[l->n++] = src->v[i];
    }
    /* stable insertion sort, like Python's sort is stable */
    for (size_t i = 1; i < l->n; i++)
        for (size_t j = i; j > 0; j--) {
            int r;
            if (jj_compare(c, keys[j - 1], keys[j], &r) < 0)
                return -1;
            if (reverse ? r >= 0 : r <= 0)
                break;
            jj_val t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
            t = l->v[j]; l->v[j] = l->v[j - 1]; l->v[j - 1] = t;
        }
    *out = l;
    return 0;
}

/* ======================================================================== */
/* tests                                                                    */
/* ======================================================================== */

int jj_test(jj_ctx *c, jj_str name, jj_val v, const jj_args *a, bool *out)
{
    const jj_val *x = arg(a, 0, NULL);
    if (jj_str_eqc(name, "defined")) *out = v.k != JJ_UNDEF;
    else if (jj_str_eqc(name, "undefined")) *out = v.k == JJ_UNDEF;
    else if (jj_str_eqc(name, "none")) *out = v.k == JJ_NONE;
    else if (jj_str_eqc(name, "string")) *out = v.k == JJ_STR;
    else if (jj_str_eqc(name, "number")) *out = v.k == JJ_INT || v.k == JJ_FLOAT || v.k == JJ_BOOL;
    else if (jj_str_eqc(name, "integer")) *out = v.k == JJ_INT;
    else if (jj_str_eqc(name, "float")) *out = v.k == JJ_FLOAT;
    else if (jj_str_eqc(name, "boolean")) *out = v.k == JJ_BOOL;
    else if (jj_str_eqc(name, "true")) *out = v.k == JJ_BOOL && v.b;
    else if (jj_str_eqc(name, "false")) *out = v.k == JJ_BOOL && !v.b;
    else if (jj_str_eqc(name, "mapping")) *out = v.k == JJ_DICT;
    else if (jj_str_eqc(name, "iterable")) *out = v.k == JJ_STR || v.k == JJ_LIST || v.k == JJ_DICT || v.k == JJ_UNDEF;
    else if (jj_str_eqc(name, "sequence")) *out = v.k == JJ_STR || v.k == JJ_LIST || v.k == JJ_DICT || v.k == JJ_UNDEF;
    else if (jj_str_eqc(name, "callable")) *out = v.k == JJ_MACRO || v.k == JJ_FUNC;
    else if (jj_str_eqc(name, "lower") || jj_str_eqc(name, "upper")) {
        jj_val m;
        if (v.k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "test '%.*s' needs a string", ENAME(name));
        if (case_map(c, v.s, jj_str_eqc(name, "lower") ? 1 : 0, &m) < 0)
            return -1;
        *out = jj_str_eq(m.s, v.s);
    } else if (jj_str_eqc(name, "odd") || jj_str_eqc(name, "even")) {
        if (v.k != JJ_INT && v.k != JJ_BOOL)
            return jj_fail(c, SL_EINVAL, "test '%.*s' needs an integer", ENAME(name));
        int64_t i = v.k == JJ_INT ? v.i : v.b;
        *out = (i % 2 != 0) == jj_str_eqc(name, "odd");
    } else if (jj_str_eqc(name, "divisibleby")) {
        if (!x || x->k != JJ_INT || x->i == 0 || v.k != JJ_INT)
            return jj_fail(c, SL_EINVAL, "divisibleby needs non-zero integers");
        *out = v.i % x->i == 0;
    } else if (x && (jj_str_eqc(name, "equalto") || jj_str_eqc(name, "eq") || jj_str_eqc(name, "==") ||
                     jj_str_eqc(name, "sameas"))) {
        *out = jj_str_eqc(name, "sameas") ? (v.k == x->k && jj_equal(v, *x)) : jj_equal(v, *x);
    } else if (x && (jj_str_eqc(name, "ne") || jj_str_eqc(name, "!="))) {
        *out = !jj_equal(v, *x);
    } else if (x && (jj_str_eqc(name, "lt") || jj_str_eqc(name, "le") || jj_str_eqc(name, "gt") ||
                     jj_str_eqc(name, "ge") || jj_str_eqc(name, "lessthan") ||
                     jj_str_eqc(name, "greaterthan"))) {
        int r;
        if (jj_compare(c, v, *x, &r) < 0)
            return -1;
        char k0 = name.p[0], k1 = name.n > 1 ? name.p[1] : 0;
        *out = k0 == 'l' ? (k1 == 'e' && name.n == 2 ? r <= 0 : r < 0) : (k1 == 'e' ? r >= 0 : r > 0);
        if (jj_str_eqc(name, "greaterthan")) *out = r > 0;
    } else if (x && jj_str_eqc(name, "in")) {
        *out = false;
        if (x->k == JJ_STR && v.k == JJ_STR)
            *out = v.s.n == 0 || memmem(x->s.p, x->s.n, v.s.p, v.s.n) != NULL;
        else if (x->k == JJ_LIST)
            for (size_t i = 0; i < x->l->n; i++)
                *out |= jj_equal(v, x->l->v[i]);
        else if (x->k == JJ_DICT)
            *out = jj_dict_get(x->d, v) != NULL;
    } else {
        return jj_fail(c, SL_EUNSUPPORTED, "unknown test '%.*s'", ENAME(name));
    }
    return 0;
}

/* select/reject/selectattr/rejectattr */
static int select_items(jj_ctx *c, jj_val v, const jj_args *a, bool by_attr, bool keep_if,
                        jj_val *out)
{
    jj_list *src, *l = jj_list_new(c, 0);
    if (!l || to_list(c, jj_truthy(v) ? v : jj_undef(), &src) < 0) /* jinja2: `if value:` */
        return -1;
    l->gen = true;
    size_t first = 0;
    jj_str attr = {0};
    if (by_attr) {
        const jj_val *at = arg(a, 0, NULL);
        if (!at || at->k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "selectattr/rejectattr need an attribute name");
        attr = at->s;
        first = 1;
    }
    const jj_val *tn = arg(a, first, NULL);
    if (tn && tn->k != JJ_STR)
        return jj_fail(c, SL_EINVAL, "test name must be a string");
    jj_args rest = {a->pos ? a->pos + (a->n_pos > first + 1 ? first + 1 : a->n_pos) : NULL,
                    a->n_pos > first + 1 ? a->n_pos - first - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < src->n; i++) {
        jj_val item = by_attr ? attr_path(src->v[i], attr) : src->v[i];
        bool r;
        if (tn) {
            if (jj_test(c, tn->s, item, &rest, &r) < 0)
                return -1;
        } else {
            r = jj_truthy(item);
        }
        if (r == keep_if && jj_list_push(c, l, src->v[i]) < 0)
            return -1;
    }
    *out = list_val(l);
    return 0;
}

/* ======================================================================== */
/* filters                                                                  */
/* ======================================================================== */

static int f_tojson(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    const jj_val *ind = arg(a, 1, "indent");
    const jj_val *seps = arg(a, 2, "separators");
    if (arg_bool(a, 0, "ensure_ascii", false))
        return jj_fail(c, SL_EUNSUPPORTED, "tojson: ensure_ascii=True is not supported");
    int indent = -1;
    if (ind && ind->k == JJ_INT)
        indent = ind->i < 0 ? 0 : ind->i > 64 ? 64 : (int)ind->i;
    else if (ind && ind->k != JJ_NONE)
        return jj_fail(c, SL_EUNSUPPORTED, "tojson: indent must be an integer");
    jj_str item_sep = jj_lit(indent >= 0 ? "," : ", "), key_sep = jj_lit(": ");
    if (seps && seps->k == JJ_LIST && seps->l->n == 2 && seps->l->v[0].k == JJ_STR &&
        seps->l->v[1].k == JJ_STR) {
        item_sep = seps->l->v[0].s;
        key_sep = seps->l->v[1].s;
    }
    jj_buf b = {0};
    if (jj_tojson(c, &b, v, indent, item_sep, key_sep, arg_bool(a, 3, "sort_keys", false), 0) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

static int f_indent(jj_ctx *c, jj_str s, const jj_args *a, jj_val *out)
{
    const jj_val *w = arg(a, 0, "width");
    jj_str ind = jj_lit("    ");
    jj_buf ib = {0};
    if (w && w->k == JJ_STR) {
        ind = w->s;
    } else if (w && w->k == JJ_INT) {
        for (int64_t i = 0; i < w->i && i < 256; i++)
            if (jj_buf_putc(c, &ib, " ") < 0)
                return -1;
        ind = jj_buf_str(&ib);
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    /* jinja2: (s + "\n").splitlines(), first line as is, others indented
     * unless blank (and `blank` is off) */
    jj_buf b = {0};
    size_t i = 0, line_no = 0;
    while (i < s.n) {
        size_t e = i;
        while (e < s.n && s.p[e] != '\n' && s.p[e] != '\r')
            e++;
        size_t next = e < s.n ? e + 1 : e;
        if (e < s.n && s.p[e] == '\r' && e + 1 < s.n && s.p[e + 1] == '\n')
            next++;
        if (line_no > 0 && jj_buf_putc(c, &b, "\n") < 0)
            return -1;
        bool empty = e == i;
        if (((line_no > 0 && (!empty || blank)) || (line_no == 0 && first)) && jj_buf_puts(c, &b, ind) < 0)
            return -1;
        if (jj_buf_puts(c, &b, sub(s, i, e)) < 0)
            return -1;
        i = next;
        line_no++;
    }
    if (s.n == 0 && first && jj_buf_puts(c, &b, ind) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}

static int f_map(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *src, *l = jj_list_new(c, 0);
    if (!l || to_list(c, jj_truthy(v) ? v : jj_undef(), &src) < 0) /* jinja2: `if value:` */
        return -1;
    l->gen = true;
    const jj_val *attr = arg(a, 99, "attribute");
    const jj_val *def = arg(a, 99, "default");
    const jj_val *fname = arg(a, 0, NULL);
    if (!attr && (!fname || fname->k != JJ_STR))
        return jj_fail(c, SL_EINVAL, "map needs attribute= or a filter name");
    if (attr && attr->k != JJ_STR)
        return jj_fail(c, SL_EINVAL, "map: attribute must be a string");
    jj_args rest = {a->n_pos > 1 ? a->pos + 1 : NULL, a->n_pos > 1 ? a->n_pos - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < src->n; i++) {
        jj_val r;
        if (attr) {
            r = attr_path(src->v[i], attr->s);
            if (r.k == JJ_UNDEF && def)
                r = *def;
        } else if (jj_filter(c, fname->s, src->v[i], &rest, &r) < 0) {
            return -1;
        }
        if (jj_list_push(c, l, r) < 0)
            return -1;
    }
    *out = list_val(l);
    return 0;
}

static int f_length(jj_ctx *c, jj_val v, jj_val *out)
{
    switch (v.k) {
    case JJ_STR: *out = jj_int((int64_t)jj_utf8_len(v.s.p, v.s.n)); return 0;
    case JJ_LIST:
        if (v.l->gen)
            return jj_fail(c, SL_EINVAL, "object of type 'generator' has no len()");
        *out = jj_int((int64_t)v.l->n);
        return 0;
    case JJ_DICT: *out = jj_int((int64_t)v.d->n); return 0;
    case JJ_UNDEF: *out = jj_int(0); return 0;
    default: return jj_fail(c, SL_EINVAL, "object of type %s has no length", jj_kind_name(v.k));
    }
}

static int f_escape(jj_ctx *c, jj_str s, jj_val *out)
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

static int f_number(jj_ctx *c, jj_val v, bool want_int, const jj_args *a, jj_val *out)
{
    const jj_val *def = arg(a, 0, "default");
    jj_val d = def ? *def : want_int ? jj_int(0) : jj_float(0.0);
    switch (v.k) {
    case JJ_INT: case JJ_BOOL:
        *out = want_int ? jj_int(v.k == JJ_INT ? v.i : v.b) : jj_float(v.k == JJ_INT ? (double)v.i : v.b);
        return 0;
    case JJ_FLOAT:
        *out = want_int ? (isfinite(v.f) && fabs(v.f) < 9e18 ? jj_int((int64_t)v.f) : d) : v;
        return 0;
    case JJ_STR: {
        char tmp[64];
        if (v.s.n >= sizeof(tmp)) {
            *out = d;
            return 0;
        }
        memcpy(tmp, v.s.p, v.s.n);
        tmp[v.s.n] = 0;
        char *end;
        double f = strtod(tmp, &end);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        if (end == tmp || *end)
            *out = d;
        else if (want_int)
            *out = fabs(f) < 9e18 ? jj_int((int64_t)f) : d;
        else
            *out = jj_float(f);
        return 0;
    }
    default:
        (void)c;
        *out = d;
        return 0;
    }
}

int jj_filter(jj_ctx *c, jj_str name, jj_val v, const jj_args *a, jj_val *out)
{
    bool have;
    jj_str s1, s2;
    if (jj_str_eqc(name, "default") || jj_str_eqc(name, "d")) {
        const jj_val *def = arg(a, 0, "default_value");
        bool boolean = arg_bool(a, 1, "boolean", false);
        bool use_def = v.k == JJ_UNDEF || (boolean && !jj_truthy(v));
        *out = use_def ? (def ? *def : jj_strv(jj_lit(""))) : v;
        return 0;
    }
    if (jj_str_eqc(name, "tojson"))
        return f_tojson(c, v, a, out);
    if (jj_str_eqc(name, "safe")) {
        jj_str s;
        if (jj_stringify(c, v, &s) < 0)
            return -1;
        s.safe = true;
        *out = jj_strv(s);
        return 0;
    }
    if (jj_str_eqc(name, "length") || jj_str_eqc(name, "count"))
        return f_length(c, v, out);
    if (jj_str_eqc(name, "string")) {
        jj_str s;
        if (jj_stringify(c, v, &s) < 0)
            return -1;
        *out = jj_strv(s);
        return 0;
    }
    if (jj_str_eqc(name, "int") || jj_str_eqc(name, "float"))
        return f_number(c, v, jj_str_eqc(name, "int"), a, out);
    if (jj_str_eqc(name, "list")) {
        jj_list *l;
        if (to_list(c, v, &l) < 0)
            return -1;
        if (l->gen) {
            jj_list *copy = jj_list_new(c, l->n);
            if (!copy)
                return -1;
            memcpy(copy->v, l->v, l->n * sizeof(jj_val));
            copy->n = l->n;
            l = copy;
        }
        *out = list_val(l);
        return 0;
    }
    if (jj_str_eqc(name, "items") || jj_str_eqc(name, "dictsort")) {
        if (v.k == JJ_UNDEF) {
            jj_list *l = jj_list_new(c, 0);
            if (!l)
                return -1;
            *out = list_val(l);
            return 0;
        }
        if (v.k != JJ_DICT)
            return jj_fail(c, SL_EINVAL, "%.*s expects a mapping", ENAME(name));
        jj_list *l = jj_list_new(c, v.d->n);
        if (!l)
            return -1;
        for (size_t i = 0; i < v.d->n; i++) {
            jj_list *pair = jj_list_new(c, 2);
            if (!pair)
                return -1;
            pair->v[0] = v.d->keys[i];
            pair->v[1] = v.d->vals[i];
            pair->n = 2;
            l->v[l->n++] = list_val(pair);
        }
        if (jj_str_eqc(name, "dictsort")) {
            jj_str zero = jj_lit("0");
            if (sort_list(c, l, arg_bool(a, 2, "reverse", false),
                          arg_bool(a, 0, "case_sensitive", false), &zero, &l) < 0)
                return -1;
        }
        *out = list_val(l);
        return 0;
    }
    if (jj_str_eqc(name, "map"))
        return f_map(c, v, a, out);
    if (jj_str_eqc(name, "select") || jj_str_eqc(name, "reject"))
        return select_items(c, v, a, false, jj_str_eqc(name, "select"), out);
    if (jj_str_eqc(name, "selectattr") || jj_str_eqc(name, "rejectattr"))
        return select_items(c, v, a, true, jj_str_eqc(name, "selectattr"), out);
    if (jj_str_eqc(name, "first") || jj_str_eqc(name, "last")) {
        jj_list *l;
        if (to_list(c, v, &l) < 0)
            return -1;
        *out = l->n ? l->v[jj_str_eqc(name, "first") ? 0 : l->n - 1] : jj_undef();
        return 0;
    }
    if (jj_str_eqc(name, "join")) {
        jj_list *l;
        if (to_list(c, v, &l) < 0 || arg_str(c, a, 0, "d", &s1, &have) < 0)
            return -1;
        if (!have)
            s1 = jj_lit("");
        const jj_val *at = arg(a, 1, "attribute");
        return join(c, l, s1, at && at->k == JJ_STR ? &at->s : NULL, out);
    }
    if (jj_str_eqc(name, "unique")) {
        jj_list *src, *l = jj_list_new(c, 0), *keys = jj_list_new(c, 0);
        bool cs = arg_bool(a, 0, "case_sensitive", false);
        const jj_val *at = arg(a, 1, "attribute");
        if (!l || !keys || to_list(c, v, &src) < 0)
            return -1;
        for (size_t i = 0; i < src->n; i++) {
            jj_val k = at && at->k == JJ_STR ? attr_path(src->v[i], at->s) : src->v[i];
            if (!cs)
                k = lower_key(c, k);
            bool seen = false;
            for (size_t j = 0; j < keys->n && !seen; j++)
                seen = jj_equal(keys->v[j], k);
            if (!seen && (jj_list_push(c, keys, k) < 0 || jj_list_push(c, l, src->v[i]) < 0))
                return -1;
        }
        *out = list_val(l);
        return 0;
    }
    if (jj_str_eqc(name, "reverse")) {
        jj_list *src;
        if (v.k == JJ_STR) {
            jj_list *chars;
            jj_buf b = {0};
            if (to_list(c, v, &chars) < 0)
                return -1;
            for (size_t i = chars->n; i > 0; i--)
                if (jj_buf_puts(c, &b, chars->v[i - 1].s) < 0)
                    return -1;
            *out = jj_strv(jj_buf_str(&b));
            return 0;
        }
        if (to_list(c, v, &src) < 0)
            return -1;
        jj_list *l = jj_list_new(c, src->n);
        if (!l)
            return -1;
        for (size_t i = src->n; i > 0; i--)
            l->v[l->n++] = src->v[i - 1];
        *out = list_val(l);
        return 0;
    }
    if (jj_str_eqc(name, "sort")) {
        jj_list *src, *l;
        const jj_val *at = arg(a, 2, "attribute");
        if (to_list(c, v, &src) < 0 ||
            sort_list(c, src, arg_bool(a, 0, "reverse", false), arg_bool(a, 1, "case_sensitive", false),
                      at && at->k == JJ_STR ? &at->s : NULL, &l) < 0)
            return -1;
        *out = list_val(l);
        return 0;
    }
    if (jj_str_eqc(name, "abs")) {
        if (v.k == JJ_INT) *out = jj_int(v.i < 0 && v.i != INT64_MIN ? -v.i : v.i);
        else if (v.k == JJ_FLOAT) *out = jj_float(fabs(v.f));
        else if (v.k == JJ_BOOL) *out = jj_int(v.b);
        else return jj_fail(c, SL_EINVAL, "abs needs a number");
        return 0;
    }
    if (jj_str_eqc(name, "round")) {
        const jj_val *pr = arg(a, 0, "precision");
        const jj_val *me = arg(a, 1, "method");
        int64_t p = pr && pr->k == JJ_INT ? pr->i : 0;
        if (p > 15) p = 15;
        if (p < -15) p = -15;
        double x = v.k == JJ_FLOAT ? v.f : v.k == JJ_INT ? (double)v.i : v.k == JJ_BOOL ? v.b : NAN;
        if (isnan(x) && v.k != JJ_FLOAT)
            return jj_fail(c, SL_EINVAL, "round needs a number");
        double m = pow(10.0, (double)p), y = x * m;
        if (me && me->k == JJ_STR && jj_str_eqc(me->s, "floor")) y = floor(y);
        else if (me && me->k == JJ_STR && jj_str_eqc(me->s, "ceil")) y = ceil(y);
        else y = round(y); /* "common": half away from zero */
        *out = jj_float(y / m);
        return 0;
    }
    if (jj_str_eqc(name, "sum")) {
        jj_list *l;
        jj_val acc = jj_int(0);
        const jj_val *at = arg(a, 0, "attribute");
        if (to_list(c, v, &l) < 0)
            return -1;
        for (size_t i = 0; i < l->n; i++) {
            jj_val x = at && at->k == JJ_STR ? attr_path(l->v[i], at->s) : l->v[i];
            bool fl = acc.k == JJ_FLOAT || x.k == JJ_FLOAT;
            if (x.k != JJ_INT && x.k != JJ_FLOAT && x.k != JJ_BOOL)
                return jj_fail(c, SL_EINVAL, "sum needs numbers");
            double xf = x.k == JJ_FLOAT ? x.f : x.k == JJ_INT ? (double)x.i : x.b;
            if (fl)
                acc = jj_float((acc.k == JJ_FLOAT ? acc.f : (double)acc.i) + xf);
            else if (__builtin_add_overflow(acc.i, x.k == JJ_INT ? x.i : x.b, &acc.i))
                return jj_fail(c, SL_ERANGE, "integer overflow");
        }
        *out = acc;
        return 0;
    }
    if (jj_str_eqc(name, "min") || jj_str_eqc(name, "max")) {
        jj_list *l;
        if (to_list(c, v, &l) < 0)
            return -1;
        *out = jj_undef();
        for (size_t i = 0; i < l->n; i++) {
            int r = 0;
            if (i && jj_compare(c, l->v[i], *out, &r) < 0)
                return -1;
            if (i == 0 || (jj_str_eqc(name, "min") ? r < 0 : r > 0))
                *out = l->v[i];
        }
        return 0;
    }
    /* the rest work on strings (jinja2 coerces with str()) */
    jj_str s;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    if (jj_str_eqc(name, "trim")) {
        if (arg_str(c, a, 0, "chars", &s1, &have) < 0)
            return -1;
        *out = jj_strv(strip(s, have ? &s1 : NULL, true, true));
        return 0;
    }
    if (jj_str_eqc(name, "upper")) return case_map(c, s, 0, out);
    if (jj_str_eqc(name, "lower")) return case_map(c, s, 1, out);
    if (jj_str_eqc(name, "capitalize")) {
        jj_val lo;
        if (case_map(c, s, 1, &lo) < 0)
            return -1;
        return case_map(c, lo.s, 2, out);
    }
    if (jj_str_eqc(name, "title")) return case_map(c, s, 3, out);
    if (jj_str_eqc(name, "replace")) {
        bool h2;
        if (arg_str(c, a, 0, "old", &s1, &have) < 0 || arg_str(c, a, 1, "new", &s2, &h2) < 0)
            return -1;
        if (!have || !h2)
            return jj_fail(c, SL_EINVAL, "replace needs two strings");
        const jj_val *cnt = arg(a, 2, "count");
        return replace(c, s, s1, s2, cnt && cnt->k == JJ_INT ? cnt->i : -1, out);
    }
    if (jj_str_eqc(name, "indent"))
        return f_indent(c, s, a, out);
    if (jj_str_eqc(name, "e") || jj_str_eqc(name, "escape") || jj_str_eqc(name, "forceescape"))
        return f_escape(c, s, out);
    if (jj_str_eqc(name, "wordcount")) {
        int64_t words = 0;
        bool in = false;
        for (size_t i = 0; i < s.n; i++) {
            unsigned char ch = (unsigned char)s.p[i];
            bool w = ch >= 0x80 || (ch >= '0' && ch <= '9') || ch == '_' ||
                     (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            if (w && !in)
                words++;
            in = w;
        }
        *out = jj_int(words);
        return 0;
    }
    return jj_fail(c, SL_EUNSUPPORTED, "unknown filter '%.*s'", ENAME(name));
}

/* ======================================================================== */
/* methods                                                                  */
/* ======================================================================== */

static int starts_ends(jj_ctx *c, jj_str s, const jj_args *a, bool ends, jj_val *out)
{
    const jj_val *x = arg(a, 0, NULL);
    if (!x)
        return jj_fail(c, SL_EINVAL, "startswith/endswith need an argument");
    const jj_val *opts = x;
    size_t n_opts = 1;
    if (x->k == JJ_LIST) {
        opts = x->l->v;
        n_opts = x->l->n;
    }
    bool r = false;
    for (size_t i = 0; i < n_opts; i++) {
        if (opts[i].k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "startswith/endswith need strings");
        jj_str p = opts[i].s;
        if (p.n <= s.n && (p.n == 0 || memcmp(ends ? s.p + s.n - p.n : s.p, p.p, p.n) == 0))
            r = true;
    }
    *out = jj_bool(r);
    return 0;
}

static int str_method(jj_ctx *c, jj_str s, jj_str name, const jj_args *a, jj_val *out, bool *found)
{
    bool have;
    jj_str s1, s2;
    *found = true;
    bool l = jj_str_eqc(name, "lstrip"), r = jj_str_eqc(name, "rstrip");
    if (l || r || jj_str_eqc(name, "strip")) {
        if (arg_str(c, a, 0, "chars", &s1, &have) < 0)
            return -1;
        *out = jj_strv(strip(s, have ? &s1 : NULL, !r, !l));
        return 0;
    }
    if (jj_str_eqc(name, "split")) {
        const jj_val *ms = arg(a, 1, "maxsplit");
        if (arg_str(c, a, 0, "sep", &s1, &have) < 0)
            return -1;
        return split(c, s, have ? &s1 : NULL, ms && ms->k == JJ_INT ? ms->i : -1, out);
    }
    if (jj_str_eqc(name, "startswith") || jj_str_eqc(name, "endswith"))
        return starts_ends(c, s, a, jj_str_eqc(name, "endswith"), out);
    if (jj_str_eqc(name, "replace")) {
        bool h2;
        if (arg_str(c, a, 0, NULL, &s1, &have) < 0 || arg_str(c, a, 1, NULL, &s2, &h2) < 0)
            return -1;
        if (!have || !h2)
            return jj_fail(c, SL_EINVAL, "replace needs two strings");
        const jj_val *cnt = arg(a, 2, "count");
        return replace(c, s, s1, s2, cnt && cnt->k == JJ_INT ? cnt->i : -1, out);
    }
    if (jj_str_eqc(name, "upper")) return case_map(c, s, 0, out);
    if (jj_str_eqc(name, "lower")) return case_map(c, s, 1, out);
    if (jj_str_eqc(name, "title")) return case_map(c, s, 3, out);
    if (jj_str_eqc(name, "capitalize")) return jj_filter(c, name, jj_strv(s), a, out);
    if (jj_str_eqc(name, "join")) {
        const jj_val *x = arg(a, 0, NULL);
        jj_list *lst;
        if (!x || to_list(c, *x, &lst) < 0)
            return c->rc < 0 ? -1 : jj_fail(c, SL_EINVAL, "join needs an iterable");
        for (size_t i = 0; i < lst->n; i++)
            if (lst->v[i].k != JJ_STR)
                return jj_fail(c, SL_EINVAL, "join: sequence item %zu is not a string", i);
        return join(c, lst, s, NULL, out);
    }
    if (jj_str_eqc(name, "find") || jj_str_eqc(name, "count")) {
        if (arg_str(c, a, 0, NULL, &s1, &have) < 0 || !have)
            return c->rc < 0 ? -1 : jj_fail(c, SL_EINVAL, "find/count need a string");
        if (jj_str_eqc(name, "find")) {
            const char *hit = s1.n ? memmem(s.p, s.n, s1.p, s1.n) : s.p;
            *out = jj_int(hit ? (int64_t)jj_utf8_len(s.p, (size_t)(hit - s.p)) : -1);
        } else {
            int64_t n = 0;
            for (size_t i = 0; s1.n && i + s1.n <= s.n;) {
                const char *hit = memmem(s.p + i, s.n - i, s1.p, s1.n);
                if (!hit)
                    break;
                n++;
                i = (size_t)(hit - s.p) + s1.n;
            }
            *out = jj_int(s1.n ? n : (int64_t)jj_utf8_len(s.p, s.n) + 1);
        }
        return 0;
    }
    *found = false;
    return 0;
}

int jj_method(jj_ctx *c, jj_val obj, jj_str name, const jj_args *a, jj_val *out, bool *found)
{
    *found = false;
    if (obj.k == JJ_STR)
        return str_method(c, obj.s, name, a, out, found);
    if (obj.k == JJ_DICT) {
        *found = true;
        if (jj_str_eqc(name, "items"))
            return jj_filter(c, name, obj, a, out);
        if (jj_str_eqc(name, "keys") || jj_str_eqc(name, "values")) {
            jj_list *l = jj_list_new(c, obj.d->n);
            if (!l)
                return -1;
            for (size_t i = 0; i < obj.d->n; i++)
                l->v[l->n++] = jj_str_eqc(name, "keys") ? obj.d->keys[i] : obj.d->vals[i];
            *out = list_val(l);
            return 0;
        }
        if (jj_str_eqc(name, "get")) {
            const jj_val *k = arg(a, 0, NULL), *d = arg(a, 1, NULL);
            if (!k)
                return jj_fail(c, SL_EINVAL, "get needs a key");
            jj_val *v = jj_dict_get(obj.d, *k);
            *out = v ? *v : d ? *d : jj_none();
            return 0;
        }
        if (jj_str_eqc(name, "update") || jj_str_eqc(name, "pop") || jj_str_eqc(name, "setdefault") ||
            jj_str_eqc(name, "clear") || jj_str_eqc(name, "popitem"))
            return jj_fail(c, SL_EINVAL, "access to '%.*s' of a dict is unsafe (immutable sandbox)",
                           ENAME(name));
        *found = false;
        return 0;
    }
    if (obj.k == JJ_LIST) {
        if (jj_str_eqc(name, "append") || jj_str_eqc(name, "pop") || jj_str_eqc(name, "extend") ||
            jj_str_eqc(name, "insert") || jj_str_eqc(name, "remove") || jj_str_eqc(name, "sort") ||
            jj_str_eqc(name, "reverse") || jj_str_eqc(name, "clear"))
            return jj_fail(c, SL_EINVAL, "access to '%.*s' of a list is unsafe (immutable sandbox)",
                           ENAME(name));
        if (jj_str_eqc(name, "index") || jj_str_eqc(name, "count")) {
            const jj_val *x = arg(a, 0, NULL);
            if (!x)
                return jj_fail(c, SL_EINVAL, "%.*s needs an argument", ENAME(name));
            int64_t cnt = 0, at = -1;
            for (size_t i = 0; i < obj.l->n; i++)
                if (jj_equal(obj.l->v[i], *x)) {
                    cnt++;
                    if (at < 0)
                        at = (int64_t)i;
                }
            if (jj_str_eqc(name, "index") && at < 0)
                return jj_fail(c, SL_EINVAL, "value is not in list");
            *out = jj_int(jj_str_eqc(name, "index") ? at : cnt);
            *found = true;
        }
        return 0;
    }
    return 0;
}

/* ======================================================================== */
/* global functions                                                         */
/* ======================================================================== */

enum { FN_RANGE, FN_DICT, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_COUNT };
static const char *const fn_names[FN_COUNT] = {"range", "dict", "namespace", "raise_exception",
                                               "strftime_now"};

int jj_func_lookup(jj_str name)
{
    for (int i = 0; i < FN_COUNT; i++)
        if (jj_str_eqc(name, fn_names[i]))
            return i;
    return -1;
}

int jj_func_call(jj_ctx *c, int fn, const jj_args *a, jj_val *out)
{
    switch (fn) {
    case FN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->n_pos < 1 || a->n_pos > 3)
            return jj_fail(c, SL_EINVAL, "range takes 1 to 3 arguments");
        for (size_t i = 0; i < a->n_pos; i++) {
            if (a->pos[i].k != JJ_INT && a->pos[i].k != JJ_BOOL)
                return jj_fail(c, SL_EINVAL, "range needs integers");
            v[a->n_pos == 1 ? 1 : i] = a->pos[i].k == JJ_INT ? a->pos[i].i : a->pos[i].b;
        }
        if (v[2] == 0)
            return jj_fail(c, SL_EINVAL, "range step must not be zero");
        jj_list *l = jj_list_new(c, 0);
        if (!l)
            return -1;
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) {
            if (l->n >= JJ_MAX_ITERATIONS)
                return jj_fail(c, SL_ERANGE, "range too large");
            if (jj_list_push(c, l, jj_int(x)) < 0)
                return -1;
            if ((v[2] > 0 && x > INT64_MAX - v[2]) || (v[2] < 0 && x < INT64_MIN - v[2]))
                break;
        }
        *out = list_val(l);
        return 0;
    }
    case FN_DICT:
    case FN_NAMESPACE: {
        jj_dict *d = jj_dict_new(c, a->n_kw);
        if (!d)
            return -1;
        for (size_t i = 0; i < a->n_pos; i++) { /* dict(mapping) / namespace(mapping) */
            if (a->pos[i].k != JJ_DICT)
                return jj_fail(c, SL_EINVAL, "%s() positional argument must be a mapping",
                               fn_names[fn]);
            for (size_t k = 0; k < a->pos[i].d->n; k++)
                if (jj_dict_set(c, d, a->pos[i].d->keys[k], a->pos[i].d->vals[k]) < 0)
                    return -1;
        }
        for (size_t i = 0; i < a->n_kw; i++)
            if (jj_dict_set(c, d, jj_strv(a->kw_names[i]), a->kw[i]) < 0)
                return -1;
        *out = (jj_val){.k = fn == FN_DICT ? JJ_DICT : JJ_NS, .d = d};
        return 0;
    }
    case FN_RAISE: {
        jj_str msg = jj_lit("raise_exception called");
        if (a->n_pos >= 1 && jj_stringify(c, a->pos[0], &msg) < 0)
            return -1;
        int line = c->line;
        c->line = 0; /* the message is the template author's: pass it as is */
        jj_fail(c, SL_EINVAL, "%.*s", (int)(msg.n > SL_ERR_LEN ? SL_ERR_LEN : msg.n), msg.p);
        c->line = line;
        return -1;
    }
    case FN_STRFTIME: {
        if (a->n_pos < 1 || a->pos[0].k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "strftime_now needs a format string");
        char fmt[128], buf[256];
        jj_str f = a->pos[0].s;
        if (f.n >= sizeof(fmt))
            return jj_fail(c, SL_EINVAL, "strftime_now format too long");
        memcpy(fmt, f.p, f.n);
        fmt[f.n] = 0;
        time_t t = (time_t)c->now;
        struct tm tm;
        if (!localtime_r(&t, &tm))
            return jj_fail(c, SL_EINVAL, "strftime_now: bad time");
        size_t n = strftime(buf, sizeof(buf), fmt, &tm);
        jj_str s;
        if (jj_str_make(c, buf, n, false, &s) < 0)
            return -1;
        *out = jj_strv(s);
        return 0;
    }
    default:
        return jj_fail(c, SL_EINVAL, "bad function");
    }
}
