/* model/jinja/jinja_filters.c: the Jinja filters chat templates use, with
 * jinja2's semantics (and transformers' tojson); runs in the front end
 * during a render.
 * map/select/reject/selectattr/rejectattr return "generators" (jj_list.gen):
 * always truthy, refused by length/tojson/printing until |list, as in jinja2,
 * because real templates depend on both behaviours.
 * Trade-off: sort/unique/dictsort compare case-insensitively in ASCII only
 * (see jinja_text.c). */
#include "model/jinja/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENAME(s) (int)((s).n > 40 ? 40 : (s).n), (s).p

int jj_to_list(jj_ctx *c, jj_val v, jj_list **out)
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
            if (jj_list_push(c, l, jj_strv(jj_str_sub(v.s, i, i + k))) < 0)
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
jj_val jj_attr_path(jj_val v, jj_str path)
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
    return jj_text_case(c, v.s, JJ_CASE_LOWER, &r) < 0 ? v : r;
}

static int sort_list(jj_ctx *c, jj_list *src, bool reverse, bool case_sensitive, const jj_str *attr,
                     jj_list **out)
{
    jj_list *l = jj_list_new(c, src->n);
    jj_val *keys = jj_alloc(c->ar, (src->n + 1) * sizeof(jj_val));
    if (!l || !keys)
        return jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
    for (size_t i = 0; i < src->n; i++) {
        jj_val k = attr ? jj_attr_path(src->v[i], *attr) : src->v[i];
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

/* select/reject/selectattr/rejectattr */
static int select_items(jj_ctx *c, jj_val v, const jj_args *a, bool by_attr, bool keep_if,
                        jj_val *out)
{
    jj_list *src, *l = jj_list_new(c, 0);
    if (!l || jj_to_list(c, jj_truthy(v) ? v : jj_undef(), &src) < 0) /* jinja2: `if value:` */
        return -1;
    l->gen = true;
    size_t first = 0;
    jj_str attr = {0};
    if (by_attr) {
        const jj_val *at = jj_arg(a, 0, NULL);
        if (!at || at->k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "selectattr/rejectattr need an attribute name");
        attr = at->s;
        first = 1;
    }
    const jj_val *tn = jj_arg(a, first, NULL);
    if (tn && tn->k != JJ_STR)
        return jj_fail(c, SL_EINVAL, "test name must be a string");
    jj_args rest = {a->pos ? a->pos + (a->n_pos > first + 1 ? first + 1 : a->n_pos) : NULL,
                    a->n_pos > first + 1 ? a->n_pos - first - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < src->n; i++) {
        jj_val item = by_attr ? jj_attr_path(src->v[i], attr) : src->v[i];
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
    *out = jj_list_val(l);
    return 0;
}


/* ------------------------------------------------------------------------ */
/* filters on any value                                                      */
/* ------------------------------------------------------------------------ */

static int f_default(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    const jj_val *def = jj_arg(a, 0, "default_value");
    bool boolean = jj_arg_bool(a, 1, "boolean", false);
    bool use_def = v.k == JJ_UNDEF || (boolean && !jj_truthy(v));
    (void)c;
    *out = use_def ? (def ? *def : jj_strv(jj_lit(""))) : v;
    return 0;
}

static int f_tojson(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    const jj_val *ind = jj_arg(a, 1, "indent");
    const jj_val *seps = jj_arg(a, 2, "separators");
    if (jj_arg_bool(a, 0, "ensure_ascii", false))
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
    if (jj_tojson(c, &b, v, indent, item_sep, key_sep, jj_arg_bool(a, 3, "sort_keys", false), 0) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}


static int f_safe(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s;
    (void)a;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    s.safe = true;
    *out = jj_strv(s);
    return 0;
}

static int f_length(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
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


static int f_string(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s;
    (void)a;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    *out = jj_strv(s);
    return 0;
}

static int to_number(jj_ctx *c, jj_val v, bool want_int, const jj_args *a, jj_val *out)
{
    const jj_val *def = jj_arg(a, 0, "default");
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


static int f_int(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return to_number(c, v, true, a, out);
}

static int f_float(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return to_number(c, v, false, a, out);
}

static int f_list(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *l;
    (void)a;
    if (jj_to_list(c, v, &l) < 0)
        return -1;
    if (l->gen) {
        jj_list *copy = jj_list_new(c, l->n);
        if (!copy)
            return -1;
        if (l->n)
            memcpy(copy->v, l->v, l->n * sizeof(jj_val));
        copy->n = l->n;
        l = copy;
    }
    *out = jj_list_val(l);
    return 0;
}

/* items and dictsort: a mapping's (key, value) pairs; dictsort sorts them
 * by key. name is the filter's, for the error. */
static int dict_pairs(jj_ctx *c, jj_val v, const jj_args *a, const char *name, bool sorted,
                      jj_val *out)
{
    if (v.k == JJ_UNDEF) {
        jj_list *l = jj_list_new(c, 0);
        if (!l)
            return -1;
        *out = jj_list_val(l);
        return 0;
    }
    if (v.k != JJ_DICT)
        return jj_fail(c, SL_EINVAL, "%s expects a mapping", name);
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
        pair->tuple = true;
        l->v[l->n++] = jj_list_val(pair);
    }
    if (sorted) {
        jj_str zero = jj_lit("0");
        if (sort_list(c, l, jj_arg_bool(a, 2, "reverse", false),
                      jj_arg_bool(a, 0, "case_sensitive", false), &zero, &l) < 0)
            return -1;
    }
    *out = jj_list_val(l);
    return 0;
}

static int f_items(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return dict_pairs(c, v, a, "items", false, out);
}

static int f_dictsort(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return dict_pairs(c, v, a, "dictsort", true, out);
}

static int f_map(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *src, *l = jj_list_new(c, 0);
    if (!l || jj_to_list(c, jj_truthy(v) ? v : jj_undef(), &src) < 0) /* jinja2: `if value:` */
        return -1;
    l->gen = true;
    const jj_val *attr = jj_arg(a, 99, "attribute");
    const jj_val *def = jj_arg(a, 99, "default");
    const jj_val *fname = jj_arg(a, 0, NULL);
    if (!attr && (!fname || fname->k != JJ_STR))
        return jj_fail(c, SL_EINVAL, "map needs attribute= or a filter name");
    if (attr && attr->k != JJ_STR)
        return jj_fail(c, SL_EINVAL, "map: attribute must be a string");
    jj_args rest = {a->n_pos > 1 ? a->pos + 1 : NULL, a->n_pos > 1 ? a->n_pos - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < src->n; i++) {
        jj_val r;
        if (attr) {
            r = jj_attr_path(src->v[i], attr->s);
            if (r.k == JJ_UNDEF && def)
                r = *def;
        } else if (jj_filter(c, fname->s, src->v[i], &rest, &r) < 0) {
            return -1;
        }
        if (jj_list_push(c, l, r) < 0)
            return -1;
    }
    *out = jj_list_val(l);
    return 0;
}


static int f_select(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return select_items(c, v, a, false, true, out);
}

static int f_reject(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return select_items(c, v, a, false, false, out);
}

static int f_selectattr(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return select_items(c, v, a, true, true, out);
}

static int f_rejectattr(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    return select_items(c, v, a, true, false, out);
}

/* first and last item; undefined when there is none */
static int end_item(jj_ctx *c, jj_val v, bool first, jj_val *out)
{
    jj_list *l;
    if (jj_to_list(c, v, &l) < 0)
        return -1;
    *out = l->n ? l->v[first ? 0 : l->n - 1] : jj_undef();
    return 0;
}

static int f_first(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return end_item(c, v, true, out);
}

static int f_last(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return end_item(c, v, false, out);
}

static int f_join(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *l;
    jj_str sep;
    bool have;
    if (jj_to_list(c, v, &l) < 0 || jj_arg_str(c, a, 0, "d", &sep, &have) < 0)
        return -1;
    if (!have)
        sep = jj_lit("");
    const jj_val *at = jj_arg(a, 1, "attribute");
    return jj_text_join(c, l, sep, at && at->k == JJ_STR ? &at->s : NULL, out);
}

static int f_unique(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *src, *l = jj_list_new(c, 0), *keys = jj_list_new(c, 0);
    bool cs = jj_arg_bool(a, 0, "case_sensitive", false);
    const jj_val *at = jj_arg(a, 1, "attribute");
    if (!l || !keys || jj_to_list(c, v, &src) < 0)
        return -1;
    for (size_t i = 0; i < src->n; i++) {
        jj_val k = at && at->k == JJ_STR ? jj_attr_path(src->v[i], at->s) : src->v[i];
        if (!cs)
            k = lower_key(c, k);
        bool seen = false;
        for (size_t j = 0; j < keys->n && !seen; j++)
            seen = jj_equal(keys->v[j], k);
        if (!seen && (jj_list_push(c, keys, k) < 0 || jj_list_push(c, l, src->v[i]) < 0))
            return -1;
    }
    *out = jj_list_val(l);
    return 0;
}

static int f_reverse(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *src;
    (void)a;
    if (v.k == JJ_STR) {
        jj_list *chars;
        jj_buf b = {0};
        if (jj_to_list(c, v, &chars) < 0)
            return -1;
        for (size_t i = chars->n; i > 0; i--)
            if (jj_buf_puts(c, &b, chars->v[i - 1].s) < 0)
                return -1;
        *out = jj_strv(jj_buf_str(&b));
        return 0;
    }
    if (jj_to_list(c, v, &src) < 0)
        return -1;
    jj_list *l = jj_list_new(c, src->n);
    if (!l)
        return -1;
    for (size_t i = src->n; i > 0; i--)
        l->v[l->n++] = src->v[i - 1];
    *out = jj_list_val(l);
    return 0;
}

static int f_sort(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *src, *l;
    const jj_val *at = jj_arg(a, 2, "attribute");
    if (jj_to_list(c, v, &src) < 0 ||
        sort_list(c, src, jj_arg_bool(a, 0, "reverse", false), jj_arg_bool(a, 1, "case_sensitive", false),
                  at && at->k == JJ_STR ? &at->s : NULL, &l) < 0)
        return -1;
    *out = jj_list_val(l);
    return 0;
}

static int f_abs(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    if (v.k == JJ_INT) *out = jj_int(v.i < 0 && v.i != INT64_MIN ? -v.i : v.i);
    else if (v.k == JJ_FLOAT) *out = jj_float(fabs(v.f));
    else if (v.k == JJ_BOOL) *out = jj_int(v.b);
    else return jj_fail(c, SL_EINVAL, "abs needs a number");
    return 0;
}

static int f_round(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    const jj_val *pr = jj_arg(a, 0, "precision");
    const jj_val *me = jj_arg(a, 1, "method");
    int64_t p = pr && pr->k == JJ_INT ? pr->i : 0;
    if (p > 15) p = 15;
    if (p < -15) p = -15;
    double x = v.k == JJ_FLOAT ? v.f : v.k == JJ_INT ? (double)v.i : v.k == JJ_BOOL ? v.b : NAN;
    if (isnan(x) && v.k != JJ_FLOAT)
        return jj_fail(c, SL_EINVAL, "round needs a number");
    double m = pow(10.0, (double)p), y = x * m;
    bool common = !me || (me->k == JJ_STR && jj_str_eqc(me->s, "common"));
    if (common && v.k != JJ_FLOAT && p >= 0) { /* Python: round(int, n) is the int */
        *out = jj_int(v.k == JJ_INT ? v.i : v.b);
        return 0;
    }
    if (me && me->k == JJ_STR && jj_str_eqc(me->s, "floor")) y = floor(y);
    else if (me && me->k == JJ_STR && jj_str_eqc(me->s, "ceil")) y = ceil(y);
    else if (common) y = nearbyint(y); /* Python's round: half to even */
    else return jj_fail(c, SL_EINVAL, "round: method must be common, ceil or floor");
    *out = jj_float(y / m);
    return 0;
}

static int f_sum(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_list *l;
    jj_val acc = jj_int(0);
    const jj_val *at = jj_arg(a, 0, "attribute");
    if (jj_to_list(c, v, &l) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        jj_val x = at && at->k == JJ_STR ? jj_attr_path(l->v[i], at->s) : l->v[i];
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

/* min and max: the first smallest (largest) item; undefined if empty */
static int extreme(jj_ctx *c, jj_val v, bool want_min, jj_val *out)
{
    jj_list *l;
    if (jj_to_list(c, v, &l) < 0)
        return -1;
    *out = jj_undef();
    for (size_t i = 0; i < l->n; i++) {
        int r = 0;
        if (i && jj_compare(c, l->v[i], *out, &r) < 0)
            return -1;
        if (i == 0 || (want_min ? r < 0 : r > 0))
            *out = l->v[i];
    }
    return 0;
}

static int f_min(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return extreme(c, v, true, out);
}

static int f_max(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return extreme(c, v, false, out);
}

/* ------------------------------------------------------------------------ */
/* filters on strings: each coerces its value with str() first, as jinja2's */
/* ------------------------------------------------------------------------ */

static int f_trim(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s, chars;
    bool have;
    if (jj_stringify(c, v, &s) < 0 || jj_arg_str(c, a, 0, "chars", &chars, &have) < 0)
        return -1;
    *out = jj_strv(jj_text_strip(s, have ? &chars : NULL, true, true));
    return 0;
}

/* upper, lower and title: str.upper(), str.lower(), jinja2's title */
static int change_case(jj_ctx *c, jj_val v, int mode, jj_val *out)
{
    jj_str s;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    return jj_text_case(c, s, mode, out);
}

static int f_upper(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return change_case(c, v, JJ_CASE_UPPER, out);
}

static int f_lower(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return change_case(c, v, JJ_CASE_LOWER, out);
}

static int f_title(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    (void)a;
    return change_case(c, v, JJ_CASE_TITLE_WORDS, out);
}

static int f_capitalize(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s;
    jj_val lo;
    (void)a;
    if (jj_stringify(c, v, &s) < 0 || jj_text_case(c, s, JJ_CASE_LOWER, &lo) < 0)
        return -1;
    return jj_text_case(c, lo.s, JJ_CASE_CAPITALIZE_FIRST, out);
}

static int f_replace(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s, old, neu;
    bool h1, h2;
    if (jj_stringify(c, v, &s) < 0 || jj_arg_str(c, a, 0, "old", &old, &h1) < 0 ||
        jj_arg_str(c, a, 1, "new", &neu, &h2) < 0)
        return -1;
    if (!h1 || !h2)
        return jj_fail(c, SL_EINVAL, "replace needs two strings");
    const jj_val *cnt = jj_arg(a, 2, "count");
    return jj_text_replace(c, s, old, neu, cnt && cnt->k == JJ_INT ? cnt->i : -1, out);
}

static int indent_lines(jj_ctx *c, jj_str s, const jj_args *a, jj_val *out)
{
    const jj_val *w = jj_arg(a, 0, "width");
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
    bool first = jj_arg_bool(a, 1, "first", false), blank = jj_arg_bool(a, 2, "blank", false);
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
        if (jj_buf_puts(c, &b, jj_str_sub(s, i, e)) < 0)
            return -1;
        i = next;
        line_no++;
    }
    if (s.n == 0 && first && jj_buf_puts(c, &b, ind) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&b));
    return 0;
}


static int f_indent(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    if (v.k != JJ_STR) /* jinja2 appends "\n" to its input: non-strings fail */
        return jj_fail(c, SL_EINVAL, "indent needs a string, got %s", jj_kind_name(v.k));
    return indent_lines(c, s, a, out);
}

/* e, escape and forceescape; a may be NULL (Markup + str in jinja_eval.c) */
static int f_escape(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s;
    (void)a;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    return jj_text_escape(c, s, out);
}

static int f_wordcount(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out)
{
    jj_str s;
    (void)a;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
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

/* ------------------------------------------------------------------------ */
/* the filter table                                                         */
/* ------------------------------------------------------------------------ */

typedef int (*filter_fn)(jj_ctx *c, jj_val v, const jj_args *a, jj_val *out);

/* Every filter there is: jj_filter() dispatches through this table and
 * jj_filter_known() (the parser's load-time check, as jinja2 fails at
 * compile time) reads it, so the two cannot disagree. Aliases are rows of
 * their own. */
static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs},
    {"capitalize", f_capitalize},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

static filter_fn filter_find(jj_str name)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (jj_str_eqc(name, filters[i].name))
            return filters[i].fn;
    return NULL;
}

bool jj_filter_known(jj_str name)
{
    return filter_find(name) != NULL;
}

int jj_filter(jj_ctx *c, jj_str name, jj_val v, const jj_args *a, jj_val *out)
{
    filter_fn fn = filter_find(name);
    if (fn)
        return fn(c, v, a, out);
    /* Only map("name") gets here with an unknown name (check_names() in
     * jinja_parser.c refuses the others at load). Wart: the value is coerced
     * with str() before the name is refused, so a value that cannot print
     * (a generator) reports that instead; refusing first would remove it. */
    jj_str s;
    if (jj_stringify(c, v, &s) < 0)
        return -1;
    return jj_fail(c, SL_EUNSUPPORTED, "unknown filter '%.*s'", ENAME(name));
}
