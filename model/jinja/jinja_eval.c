/* model/jinja/jinja_eval.c: evaluates Jinja expressions (names, literals,
 * item/attribute/slice access, operators, calls, filters and tests) for the
 * statement walker in jinja_interp.c; runs in the front end per request.
 * Semantics are Python's as jinja2 exposes them: `and`/`or` return an
 * operand, `/` is true division, `//` and `%` floor, str/list `+` and `*`,
 * indices and slices count code points, a missing key or attribute is
 * Undefined (an attribute of Undefined is an error, as in jinja2).
 * Trade-off: strings are indexed by decoding UTF-8 on demand rather than
 * storing code point offsets; chat templates slice rarely and short. */
#include "model/jinja/jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool jj_enter(jj_ctx *c, const jj_node *n)
{
    if (n->line)
        c->line = n->line;
    if (++c->depth > JJ_MAX_DEPTH) {
        jj_fail(c, SL_ERANGE, "template recursion deeper than %d", JJ_MAX_DEPTH);
        return false;
    }
    /* Counting iterations and bytes is not enough: one step may cost a scan of
     * an 8 MiB string (`big | length`), so a million of them took hours (found
     * by fuzz_jinja). Every step passes here, so the clock bounds the render
     * to the budget plus the 16 steps between two looks. */
    if ((++c->ticks & 15) == 0 && c->deadline_ns != 0 && monotonic_ns() > c->deadline_ns) {
        jj_fail(c, SL_ERANGE, "template render took longer than %llu ms",
                (unsigned long long)(JJ_MAX_RENDER_NS / 1000000));
        return false;
    }
    return true;
}

jj_val *jj_scope_lookup(jj_scope *s, jj_str name)
{
    for (; s; s = s->parent) {
        jj_val *v = jj_dict_get(&s->vars, jj_strv(name));
        if (v)
            return v;
    }
    return NULL;
}

/* ======================================================================== */
/* strings                                                                  */
/* ======================================================================== */

static int concat(jj_ctx *c, jj_str a, jj_str b, jj_val *out)
{
    jj_buf buf = {0};
    if (jj_buf_puts(c, &buf, a) < 0 || jj_buf_puts(c, &buf, b) < 0)
        return -1;
    *out = jj_strv(jj_buf_str(&buf));
    return 0;
}

/* byte offsets of code points; NULL result means "ASCII: index = offset" */
static int cp_offsets(jj_ctx *c, jj_str s, size_t **offs, size_t *n_cp)
{
    size_t n = jj_utf8_len(s.p, s.n);
    *n_cp = n;
    *offs = NULL;
    if (n == s.n)
        return 0;
    size_t *o = jj_alloc(c->ar, (n + 1) * sizeof(size_t));
    if (!o)
        return jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
    size_t k = 0;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        o[k++] = i;
        i += jj_utf8_decode(s.p + i, s.n - i, &cp);
    }
    o[n] = s.n;
    *offs = o;
    return 0;
}

/* ======================================================================== */
/* item, attribute, slice                                                   */
/* ======================================================================== */

static int get_item(jj_ctx *c, jj_val obj, jj_val key, jj_val *out)
{
    *out = jj_undef();
    switch (obj.k) {
    case JJ_DICT: {
        jj_val *v = jj_dict_get(obj.d, key);
        if (v)
            *out = *v;
        return 0;
    }
    case JJ_LIST:
        if (obj.l->gen) /* generators are not subscriptable: jinja2 yields Undefined */
            return 0;
        if (key.k == JJ_INT || key.k == JJ_BOOL) {
            int64_t i = key.k == JJ_INT ? key.i : key.b;
            if (i < 0)
                i += (int64_t)obj.l->n;
            if (i >= 0 && (uint64_t)i < obj.l->n)
                *out = obj.l->v[i];
        }
        return 0;
    case JJ_STR:
        if (key.k == JJ_INT) {
            size_t *offs, n;
            if (cp_offsets(c, obj.s, &offs, &n) < 0)
                return -1;
            int64_t i = key.i < 0 ? key.i + (int64_t)n : key.i;
            if (i >= 0 && (uint64_t)i < n)
                *out = jj_strv(offs ? jj_str_sub(obj.s, offs[i], offs[i + 1])
                                    : jj_str_sub(obj.s, (size_t)i, (size_t)i + 1));
        }
        return 0;
    case JJ_NS:
        if (key.k == JJ_STR) {
            jj_val *v = jj_dict_get(obj.d, key);
            if (v)
                *out = *v;
        }
        return 0;
    case JJ_UNDEF:
        return jj_fail(c, SL_EINVAL, "cannot index an undefined value");
    default:
        return 0;
    }
}

static int get_attr(jj_ctx *c, jj_val obj, jj_str name, jj_val *out)
{
    if (obj.k == JJ_UNDEF)
        return jj_fail(c, SL_EINVAL, "undefined value has no attribute '%.*s'",
                       (int)(name.n > 40 ? 40 : name.n), name.p);
    if (obj.k == JJ_DICT || obj.k == JJ_NS)
        return get_item(c, obj, jj_strv(name), out);
    *out = jj_undef();
    return 0;
}

/* Python slice indices for a sequence of length n */
static void slice_range(int64_t n, jj_val *bv, jj_val *ev, int64_t step, int64_t *start, int64_t *stop)
{
    bool has_b = bv && bv->k == JJ_INT, has_e = ev && ev->k == JJ_INT;
    int64_t b = has_b ? bv->i : 0, e = has_e ? ev->i : 0;
    if (step > 0) {
        b = !has_b ? 0 : b < 0 ? (b + n < 0 ? 0 : b + n) : (b > n ? n : b);
        e = !has_e ? n : e < 0 ? (e + n < 0 ? 0 : e + n) : (e > n ? n : e);
    } else {
        b = !has_b ? n - 1 : b < 0 ? (b + n < 0 ? -1 : b + n) : (b >= n ? n - 1 : b);
        e = !has_e ? -1 : e < 0 ? (e + n < 0 ? -1 : e + n) : (e >= n ? n - 1 : e);
    }
    *start = b;
    *stop = e;
}

static int do_slice(jj_ctx *c, jj_val obj, jj_val *bv, jj_val *ev, jj_val *sv, jj_val *out)
{
    int64_t step = 1;
    if (sv && sv->k == JJ_INT)
        step = sv->i;
    if (step == 0)
        return jj_fail(c, SL_EINVAL, "slice step cannot be zero");
    for (jj_val *x = bv; x; x = x == bv ? ev : x == ev ? sv : NULL)
        if (x->k != JJ_INT && x->k != JJ_NONE && x->k != JJ_UNDEF)
            return jj_fail(c, SL_EINVAL, "slice indices must be integers");
    int64_t b, e;
    if (obj.k == JJ_LIST && obj.l->gen)
        return jj_fail(c, SL_EINVAL, "cannot slice a generator");
    if (obj.k == JJ_LIST) {
        slice_range((int64_t)obj.l->n, bv, ev, step, &b, &e);
        jj_list *l = jj_list_new(c, 0);
        if (!l)
            return -1;
        l->tuple = obj.l->tuple;
        for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
            if (jj_list_push(c, l, obj.l->v[i]) < 0)
                return -1;
        *out = (jj_val){.k = JJ_LIST, .l = l};
        return 0;
    }
    if (obj.k == JJ_STR) {
        size_t *offs, n;
        if (cp_offsets(c, obj.s, &offs, &n) < 0)
            return -1;
        slice_range((int64_t)n, bv, ev, step, &b, &e);
        if (step == 1) {
            size_t from = b < e ? (size_t)b : 0, to = b < e ? (size_t)e : 0;
            *out = jj_strv(offs ? jj_str_sub(obj.s, offs[from], offs[to]) : jj_str_sub(obj.s, from, to));
            return 0;
        }
        jj_buf buf = {0};
        for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
            jj_str ch = offs ? jj_str_sub(obj.s, offs[i], offs[i + 1]) : jj_str_sub(obj.s, (size_t)i, (size_t)i + 1);
            if (jj_buf_puts(c, &buf, ch) < 0)
                return -1;
        }
        *out = jj_strv(jj_buf_str(&buf));
        return 0;
    }
    if (obj.k == JJ_UNDEF)
        return jj_fail(c, SL_EINVAL, "cannot slice an undefined value");
    *out = jj_undef(); /* jinja2: a failed subscript is Undefined */
    return 0;
}

/* ======================================================================== */
/* operators                                                                */
/* ======================================================================== */

static bool numeric(jj_val v) { return v.k == JJ_INT || v.k == JJ_FLOAT || v.k == JJ_BOOL; }
static double as_f(jj_val v) { return v.k == JJ_FLOAT ? v.f : v.k == JJ_INT ? (double)v.i : (double)v.b; }
static int64_t as_i(jj_val v) { return v.k == JJ_INT ? v.i : (int64_t)v.b; }

static int repeat(jj_ctx *c, jj_val seq, int64_t times, jj_val *out)
{
    if (times < 0)
        times = 0;
    if (seq.k == JJ_STR) {
        if (seq.s.n && (uint64_t)times > JJ_MAX_OUTPUT / seq.s.n)
            return jj_fail(c, SL_ERANGE, "string repetition too large");
        jj_buf b = {0};
        for (int64_t i = 0; i < times; i++)
            if (jj_buf_puts(c, &b, seq.s) < 0)
                return -1;
        *out = jj_strv(jj_buf_str(&b));
        return 0;
    }
    if (seq.l->n && (uint64_t)times > JJ_MAX_ITERATIONS / seq.l->n)
        return jj_fail(c, SL_ERANGE, "list repetition too large");
    jj_list *l = jj_list_new(c, 0);
    if (!l)
        return -1;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.l->n; k++)
            if (jj_list_push(c, l, seq.l->v[k]) < 0)
                return -1;
    *out = (jj_val){.k = JJ_LIST, .l = l};
    return 0;
}

static int binop(jj_ctx *c, int op, jj_val a, jj_val b, jj_val *out)
{
    if (op == JJ_OP_CONCAT) {
        jj_str sa, sb;
        if (jj_stringify(c, a, &sa) < 0 || jj_stringify(c, b, &sb) < 0)
            return -1;
        return concat(c, sa, sb, out);
    }
    if (op == JJ_OP_ADD && a.k == JJ_STR && b.k == JJ_STR) {
        if (a.s.safe != b.s.safe) { /* Markup + str escapes the str, either order */
            jj_val e;
            if (jj_filter(c, jj_lit("escape"), a.s.safe ? b : a, NULL, &e) < 0)
                return -1;
            if (a.s.safe)
                b = e;
            else
                a = e;
        }
        if (concat(c, a.s, b.s, out) < 0)
            return -1;
        out->s.safe = a.s.safe || b.s.safe;
        return 0;
    }
    if (op == JJ_OP_ADD && a.k == JJ_LIST && b.k == JJ_LIST && !a.l->gen && !b.l->gen) {
        jj_list *l = jj_list_new(c, a.l->n + b.l->n);
        if (!l)
            return -1;
        for (size_t i = 0; i < a.l->n; i++)
            l->v[l->n++] = a.l->v[i];
        for (size_t i = 0; i < b.l->n; i++)
            l->v[l->n++] = b.l->v[i];
        *out = (jj_val){.k = JJ_LIST, .l = l};
        return 0;
    }
    if (op == JJ_OP_MUL && (a.k == JJ_STR || a.k == JJ_LIST) && (b.k == JJ_INT || b.k == JJ_BOOL))
        return repeat(c, a, as_i(b), out);
    if (op == JJ_OP_MUL && (b.k == JJ_STR || b.k == JJ_LIST) && (a.k == JJ_INT || a.k == JJ_BOOL))
        return repeat(c, b, as_i(a), out);
    if (!numeric(a) || !numeric(b))
        return jj_fail(c, SL_EINVAL, "unsupported operand types %s and %s", jj_kind_name(a.k),
                       jj_kind_name(b.k));
    bool fl = a.k == JJ_FLOAT || b.k == JJ_FLOAT;
    if (op == JJ_OP_DIV) {
        if (as_f(b) == 0.0)
            return jj_fail(c, SL_EINVAL, "division by zero");
        *out = jj_float(as_f(a) / as_f(b));
        return 0;
    }
    if (fl) {
        double x = as_f(a), y = as_f(b), r;
        switch (op) {
        case JJ_OP_ADD: r = x + y; break;
        case JJ_OP_SUB: r = x - y; break;
        case JJ_OP_MUL: r = x * y; break;
        case JJ_OP_POW: r = pow(x, y); break;
        case JJ_OP_FLOORDIV:
        case JJ_OP_MOD:
            if (y == 0.0)
                return jj_fail(c, SL_EINVAL, "division by zero");
            r = op == JJ_OP_FLOORDIV ? floor(x / y) : x - floor(x / y) * y;
            break;
        default: return jj_fail(c, SL_EINVAL, "bad operator");
        }
        *out = jj_float(r);
        return 0;
    }
    int64_t x = as_i(a), y = as_i(b), r = 0;
    bool ovf = false;
    switch (op) {
    case JJ_OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case JJ_OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case JJ_OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case JJ_OP_FLOORDIV:
    case JJ_OP_MOD:
        if (y == 0)
            return jj_fail(c, SL_EINVAL, "division by zero");
        if (x == INT64_MIN && y == -1) {
            ovf = true;
            break;
        }
        r = op == JJ_OP_FLOORDIV ? x / y : x % y;
        if (op == JJ_OP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0)))
            r -= 1;
        if (op == JJ_OP_MOD && r != 0 && ((r < 0) != (y < 0)))
            r += y;
        break;
    case JJ_OP_POW:
        if (y < 0) {
            *out = jj_float(pow((double)x, (double)y));
            return 0;
        }
        r = 1;
        for (int64_t k = 0; k < y && !ovf; k++)
            ovf = __builtin_mul_overflow(r, x, &r);
        break;
    default: return jj_fail(c, SL_EINVAL, "bad operator");
    }
    if (ovf)
        return jj_fail(c, SL_ERANGE, "integer overflow");
    *out = jj_int(r);
    return 0;
}

static int contains(jj_ctx *c, jj_val needle, jj_val hay, bool *out)
{
    *out = false;
    switch (hay.k) {
    case JJ_STR:
        if (needle.k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "'in <string>' requires string as left operand");
        *out = needle.s.n == 0 || memmem(hay.s.p, hay.s.n, needle.s.p, needle.s.n) != NULL;
        return 0;
    case JJ_LIST:
        for (size_t i = 0; i < hay.l->n; i++)
            if (jj_equal(needle, hay.l->v[i])) {
                *out = true;
                break;
            }
        return 0;
    case JJ_DICT: case JJ_NS:
        *out = jj_dict_get(hay.d, needle) != NULL;
        return 0;
    case JJ_UNDEF:
        return 0; /* iterating Undefined yields nothing */
    default:
        return jj_fail(c, SL_EINVAL, "argument of type %s is not iterable", jj_kind_name(hay.k));
    }
}

/* ======================================================================== */
/* calls                                                                    */
/* ======================================================================== */

static int eval_args(jj_ctx *c, jj_scope *s, const jj_node *n, jj_args *a)
{
    a->n_pos = n->n_kids;
    a->n_kw = n->n_names;
    a->kw_names = n->names;
    a->pos = a->kw = NULL;
    if (n->n_kids) {
        a->pos = jj_alloc(c->ar, n->n_kids * sizeof(jj_val));
        if (!a->pos)
            return jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
    }
    if (n->n_names) {
        a->kw = jj_alloc(c->ar, n->n_names * sizeof(jj_val));
        if (!a->kw)
            return jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
    }
    for (size_t i = 0; i < n->n_kids; i++)
        if (jj_eval(c, s, n->kids[i], &a->pos[i]) < 0)
            return -1;
    for (size_t i = 0; i < n->n_names; i++)
        if (jj_eval(c, s, n->name_vals[i], &a->kw[i]) < 0)
            return -1;
    return 0;
}

static int call_value(jj_ctx *c, jj_val f, const jj_args *a, const char *what, jj_val *out)
{
    if (f.k == JJ_MACRO)
        return jj_call_macro(c, f, a->pos, a->n_pos, a->kw_names, a->kw, a->n_kw, out);
    if (f.k == JJ_FUNC)
        return jj_func_call(c, f.fn, a, out);
    if (f.k == JJ_UNDEF)
        return jj_fail(c, SL_EINVAL, "'%s' is undefined", what);
    return jj_fail(c, SL_EINVAL, "'%s' (%s) is not callable", what, jj_kind_name(f.k));
}

static int eval_call(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val *out)
{
    jj_args a;
    const jj_node *callee = n->a;
    char what[48];
    if (callee->t == JJ_N_ATTR) {
        jj_val obj;
        if (jj_eval(c, s, callee->a, &obj) < 0 || eval_args(c, s, n, &a) < 0)
            return -1;
        bool found = false;
        if (obj.k != JJ_NS && obj.k != JJ_UNDEF) {
            if (jj_method(c, obj, callee->name, &a, out, &found) < 0)
                return -1;
            if (found)
                return 0;
        }
        jj_val f;
        if (get_attr(c, obj, callee->name, &f) < 0)
            return -1;
        snprintf(what, sizeof(what), "%.*s", (int)(callee->name.n > 40 ? 40 : callee->name.n),
                 callee->name.p);
        return call_value(c, f, &a, what, out);
    }
    jj_val f;
    if (jj_eval(c, s, callee, &f) < 0 || eval_args(c, s, n, &a) < 0)
        return -1;
    if (callee->t == JJ_N_NAME)
        snprintf(what, sizeof(what), "%.*s", (int)(callee->name.n > 40 ? 40 : callee->name.n),
                 callee->name.p);
    else
        strcpy(what, "expression");
    return call_value(c, f, &a, what, out);
}

/* ======================================================================== */
/* expressions                                                              */
/* ======================================================================== */

static int eval_inner(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val *out)
{
    jj_val a, b;
    switch (n->t) {
    case JJ_N_LIT:
        *out = n->lit;
        return 0;
    case JJ_N_NAME: {
        jj_val *v = jj_scope_lookup(s, n->name);
        if (v) {
            *out = *v;
            return 0;
        }
        int fn = jj_func_lookup(n->name);
        *out = fn >= 0 ? (jj_val){.k = JJ_FUNC, .fn = fn} : jj_undef();
        return 0;
    }
    case JJ_N_LIST:
    case JJ_N_TUPLE: {
        jj_list *l = jj_list_new(c, n->n_kids);
        if (!l)
            return -1;
        for (size_t i = 0; i < n->n_kids; i++)
            if (jj_eval(c, s, n->kids[i], &l->v[l->n++]) < 0)
                return -1;
        l->tuple = n->t == JJ_N_TUPLE;
        *out = (jj_val){.k = JJ_LIST, .l = l};
        return 0;
    }
    case JJ_N_DICT: {
        jj_dict *d = jj_dict_new(c, n->n_kids / 2);
        if (!d)
            return -1;
        for (size_t i = 0; i + 1 < n->n_kids; i += 2)
            if (jj_eval(c, s, n->kids[i], &a) < 0 || jj_eval(c, s, n->kids[i + 1], &b) < 0 ||
                jj_dict_set(c, d, a, b) < 0)
                return -1;
        *out = (jj_val){.k = JJ_DICT, .d = d};
        return 0;
    }
    case JJ_N_ATTR:
        if (jj_eval(c, s, n->a, &a) < 0)
            return -1;
        return get_attr(c, a, n->name, out);
    case JJ_N_ITEM:
        if (jj_eval(c, s, n->a, &a) < 0 || jj_eval(c, s, n->b, &b) < 0)
            return -1;
        return get_item(c, a, b, out);
    case JJ_N_SLICE: {
        jj_val parts[3];
        const jj_node *pn[3] = {n->b, n->c, n->d};
        if (jj_eval(c, s, n->a, &a) < 0)
            return -1;
        for (int k = 0; k < 3; k++) {
            parts[k] = jj_none();
            if (pn[k] && jj_eval(c, s, pn[k], &parts[k]) < 0)
                return -1;
        }
        return do_slice(c, a, &parts[0], &parts[1], &parts[2], out);
    }
    case JJ_N_CALL:
        return eval_call(c, s, n, out);
    case JJ_N_FILTER: {
        jj_args args;
        if (!n->a)
            return jj_fail(c, SL_EINVAL, "filter without input");
        if (jj_eval(c, s, n->a, &a) < 0 || eval_args(c, s, n, &args) < 0)
            return -1;
        return jj_filter(c, n->name, a, &args, out);
    }
    case JJ_N_TEST: {
        jj_args args;
        bool r;
        if (jj_eval(c, s, n->a, &a) < 0 || eval_args(c, s, n, &args) < 0 ||
            jj_test(c, n->name, a, &args, &r) < 0)
            return -1;
        *out = jj_bool(n->op ? !r : r);
        return 0;
    }
    case JJ_N_NEG:
    case JJ_N_POS:
        if (jj_eval(c, s, n->a, &a) < 0)
            return -1;
        if (n->t == JJ_N_POS && numeric(a)) {
            *out = a.k == JJ_BOOL ? jj_int(a.b) : a;
            return 0;
        }
        return binop(c, JJ_OP_SUB, jj_int(0), a, out);
    case JJ_N_NOT:
        if (jj_eval(c, s, n->a, &a) < 0)
            return -1;
        *out = jj_bool(!jj_truthy(a));
        return 0;
    case JJ_N_AND:
    case JJ_N_OR:
        /* Python semantics: the result is an operand, not a bool */
        if (jj_eval(c, s, n->a, &a) < 0)
            return -1;
        if (jj_truthy(a) == (n->t == JJ_N_OR)) {
            *out = a;
            return 0;
        }
        return jj_eval(c, s, n->b, out);
    case JJ_N_BIN:
        if (jj_eval(c, s, n->a, &a) < 0 || jj_eval(c, s, n->b, &b) < 0)
            return -1;
        return binop(c, n->op, a, b, out);
    case JJ_N_CMP: {
        if (jj_eval(c, s, n->a, &a) < 0 || jj_eval(c, s, n->b, &b) < 0)
            return -1;
        bool r;
        int ord;
        switch (n->op) {
        case JJ_OP_EQ: r = jj_equal(a, b); break;
        case JJ_OP_NE: r = !jj_equal(a, b); break;
        case JJ_OP_IN:
        case JJ_OP_NOTIN:
            if (contains(c, a, b, &r) < 0)
                return -1;
            if (n->op == JJ_OP_NOTIN)
                r = !r;
            break;
        default:
            if (jj_compare(c, a, b, &ord) < 0)
                return -1;
            r = n->op == JJ_OP_LT ? ord < 0 : n->op == JJ_OP_LE ? ord <= 0
              : n->op == JJ_OP_GT ? ord > 0 : ord >= 0;
        }
        *out = jj_bool(r);
        return 0;
    }
    case JJ_N_COND:
        if (jj_eval(c, s, n->b, &a) < 0)
            return -1;
        if (jj_truthy(a))
            return jj_eval(c, s, n->a, out);
        if (n->c)
            return jj_eval(c, s, n->c, out);
        *out = jj_undef();
        return 0;
    default:
        return jj_fail(c, SL_EINVAL, "statement used as an expression");
    }
}

int jj_eval(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val *out)
{
    if (!jj_enter(c, n))
        return -1;
    int rc = eval_inner(c, s, n, out);
    c->depth--;
    return rc;
}

/* Filter chain of a filter block / block set: the innermost filter has a == NULL. */
int jj_eval_filter_chain(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val input, jj_val *out)
{
    if (!jj_enter(c, n))
        return -1;
    jj_val v = input;
    int rc = 0;
    if (n->a)
        rc = jj_eval_filter_chain(c, s, n->a, input, &v);
    jj_args args;
    if (rc == 0) {
        if (n->t != JJ_N_FILTER)
            rc = jj_fail(c, SL_EUNSUPPORTED, "only filters may follow a block");
        else if (eval_args(c, s, n, &args) < 0 || jj_filter(c, n->name, v, &args, out) < 0)
            rc = -1;
    }
    c->depth--;
    return rc;
}
