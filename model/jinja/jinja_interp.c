/* model/jinja/jinja_interp.c: walks the AST of a compiled template and writes
 * the output with its untrusted-byte mask; runs in the front end once per
 * request.
 * Scoping follows jinja2 where chat templates can tell the difference: a
 * for-loop body gets its own scope (a `set` inside it does not leak out,
 * which is why templates use namespace()), `if` does not, and a macro runs
 * in a fresh scope whose parent is the template's top level.
 * Trade-off: a single depth counter (c->depth) bounds every recursion
 * (expressions, statements, macro calls) instead of per-kind limits; one
 * number is easy to reason about for stack size. */
#include "model/jinja/jinja.h"

#include <stdio.h>
#include <string.h>

enum { FLOW_NORMAL = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };
static jj_scope *scope_new(jj_ctx *c, jj_scope *parent)
{
    jj_scope *s = jj_alloc(c->ar, sizeof(*s));
    if (!s) {
        jj_fail(c, SL_ENOMEM, "template used more than its memory budget");
        return NULL;
    }
    s->parent = parent;
    return s;
}

static int assign(jj_ctx *c, jj_scope *s, jj_str name, jj_val v)
{
    return jj_dict_set(c, &s->vars, jj_strv(name), v);
}

/* ======================================================================== */
/* statements                                                               */
/* ======================================================================== */

static int exec_body(jj_ctx *c, jj_scope *s, jj_node *const *kids, size_t n, jj_buf *out);

static int bind_targets(jj_ctx *c, jj_scope *s, const jj_str *names, size_t n, jj_val v)
{
    if (n == 1)
        return assign(c, s, names[0], v);
    jj_list *l;
    if (v.k == JJ_STR || v.k == JJ_UNDEF || jj_to_list(c, v, &l) < 0 || l->n != n)
        return c->rc < 0 ? -1 : jj_fail(c, SL_EINVAL, "cannot unpack into %zu names", n);
    for (size_t i = 0; i < n; i++)
        if (assign(c, s, names[i], l->v[i]) < 0)
            return -1;
    return 0;
}

/* Updates the `loop` object in place: one allocation per loop, not per
 * iteration, so a long loop costs no memory. */
static int set_loop(jj_ctx *c, jj_scope *ls, jj_dict *d, jj_list *items, size_t i)
{
    size_t n = items->n;
    /* previtem/nextitem: an undefined value reads exactly like a missing key */
    struct { const char *k; jj_val v; } f[] = {
        {"index", jj_int((int64_t)i + 1)}, {"index0", jj_int((int64_t)i)},
        {"revindex", jj_int((int64_t)(n - i))}, {"revindex0", jj_int((int64_t)(n - i - 1))},
        {"first", jj_bool(i == 0)}, {"last", jj_bool(i + 1 == n)},
        {"length", jj_int((int64_t)n)}, {"depth", jj_int(1)}, {"depth0", jj_int(0)},
        {"previtem", i > 0 ? items->v[i - 1] : jj_undef()},
        {"nextitem", i + 1 < n ? items->v[i + 1] : jj_undef()},
    };
    size_t nf = sizeof(f) / sizeof(f[0]);
    if (i > 0 && d->n == nf) { /* same keys, same order: dicts are immutable to templates */
        for (size_t k = 0; k < nf; k++)
            d->vals[k] = f[k].v;
        return 0;
    }
    for (size_t k = 0; k < nf; k++)
        if (jj_dict_set(c, d, jj_strv(jj_lit(f[k].k)), f[k].v) < 0)
            return -1;
    return assign(c, ls, jj_lit("loop"), (jj_val){.k = JJ_DICT, .d = d});
}

static int exec_for(jj_ctx *c, jj_scope *s, const jj_node *n, jj_buf *out)
{
    jj_val it;
    jj_list *src;
    if (jj_eval(c, s, n->a, &it) < 0 || jj_to_list(c, it, &src) < 0)
        return -1;
    jj_scope *ls = scope_new(c, s);
    if (!ls)
        return -1;
    jj_list *items = src;
    jj_dict *loop = jj_dict_new(c, 12);
    if (!loop)
        return -1;
    if (n->b) { /* `for x in xs if cond`: loop.* counts the kept items */
        items = jj_list_new(c, 0);
        if (!items)
            return -1;
        for (size_t i = 0; i < src->n; i++) {
            jj_val keep;
            if (++c->iterations > JJ_MAX_ITERATIONS)
                return jj_fail(c, SL_ERANGE, "template ran more than %u loop iterations",
                               JJ_MAX_ITERATIONS);
            if (bind_targets(c, ls, n->names, n->n_names, src->v[i]) < 0 ||
                jj_eval(c, ls, n->b, &keep) < 0)
                return -1;
            if (jj_truthy(keep) && jj_list_push(c, items, src->v[i]) < 0)
                return -1;
        }
    }
    for (size_t i = 0; i < items->n; i++) {
        if (++c->iterations > JJ_MAX_ITERATIONS)
            return jj_fail(c, SL_ERANGE, "template ran more than %u loop iterations",
                           JJ_MAX_ITERATIONS);
        if (bind_targets(c, ls, n->names, n->n_names, items->v[i]) < 0 ||
            set_loop(c, ls, loop, items, i) < 0)
            return -1;
        int flow = exec_body(c, ls, n->kids, n->n_kids, out);
        if (flow < 0)
            return -1;
        if (flow == FLOW_BREAK)
            break;
    }
    if (items->n == 0 && n->c)
        return exec_body(c, s, n->c->kids, n->c->n_kids, out);
    return FLOW_NORMAL;
}

static int exec(jj_ctx *c, jj_scope *s, const jj_node *n, jj_buf *out)
{
    jj_val v;
    switch (n->t) {
    case JJ_N_TEXT:
        return jj_buf_put(c, out, n->name.p, n->name.n, false);
    case JJ_N_OUTPUT:
        if (jj_eval(c, s, n->a, &v) < 0)
            return -1;
        return jj_to_str(c, out, v);
    case JJ_N_BODY:
        return exec_body(c, s, n->kids, n->n_kids, out);
    case JJ_N_IF:
        if (jj_eval(c, s, n->a, &v) < 0)
            return -1;
        if (jj_truthy(v))
            return exec_body(c, s, n->kids, n->n_kids, out);
        return n->b ? exec(c, s, n->b, out) : FLOW_NORMAL;
    case JJ_N_FOR:
        return exec_for(c, s, n, out);
    case JJ_N_SET:
        if (jj_eval(c, s, n->a, &v) < 0)
            return -1;
        return bind_targets(c, s, n->names, n->n_names, v);
    case JJ_N_SETATTR: {
        jj_val *ns = jj_scope_lookup(s, n->names[0]);
        if (!ns || ns->k != JJ_NS)
            return jj_fail(c, SL_EINVAL, "cannot assign attribute on a non-namespace object");
        jj_dict *d = ns->d; /* copy out: evaluating may grow the scope and move *ns */
        if (jj_eval(c, s, n->a, &v) < 0)
            return -1;
        return jj_dict_set(c, d, jj_strv(n->name), v);
    }
    case JJ_N_SETBLOCK:
    case JJ_N_FILTERBLOCK: {
        jj_buf tmp = {0};
        int flow = exec_body(c, s, n->kids, n->n_kids, &tmp);
        if (flow < 0)
            return -1;
        v = jj_strv(jj_buf_str(&tmp));
        if (n->a && jj_eval_filter_chain(c, s, n->a, v, &v) < 0)
            return -1;
        if (n->t == JJ_N_SETBLOCK)
            return assign(c, s, n->names[0], v) < 0 ? -1 : flow;
        return jj_to_str(c, out, v) < 0 ? -1 : flow;
    }
    case JJ_N_MACRO:
        return assign(c, s, n->name, (jj_val){.k = JJ_MACRO, .macro = n});
    case JJ_N_BREAK:
        return FLOW_BREAK;
    case JJ_N_CONTINUE:
        return FLOW_CONTINUE;
    default:
        return jj_fail(c, SL_EUNSUPPORTED, "unsupported statement");
    }
}

/* Returns FLOW_* or -1. break/continue stop the body and travel up to the
 * innermost loop (ifs pass them through). */
static int exec_body(jj_ctx *c, jj_scope *s, jj_node *const *kids, size_t n, jj_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        if (!jj_enter(c, kids[i]))
            return -1;
        int flow = exec(c, s, kids[i], out);
        c->depth--;
        if (flow != FLOW_NORMAL)
            return flow;
    }
    return FLOW_NORMAL;
}

/* ======================================================================== */
/* macros and entry                                                         */
/* ======================================================================== */

static jj_scope *root_scope(jj_ctx *c)
{
    return c->globals;
}

int jj_call_macro(jj_ctx *c, jj_val macro, const jj_val *args, size_t n_args,
                  const jj_str *kw_names, const jj_val *kw_vals, size_t n_kw, jj_val *out)
{
    const jj_node *m = macro.macro;
    if (!jj_enter(c, m))
        return -1;
    int rc = -1;
    jj_scope *ms = scope_new(c, root_scope(c));
    if (!ms)
        goto done;
    if (n_args > m->n_names) {
        jj_fail(c, SL_EINVAL, "macro '%.*s' takes %zu arguments, got %zu",
                (int)(m->name.n > 40 ? 40 : m->name.n), m->name.p, m->n_names, n_args);
        goto done;
    }
    for (size_t i = 0; i < m->n_names; i++) {
        jj_val v = jj_undef();
        bool have = false;
        if (i < n_args) {
            v = args[i];
            have = true;
        }
        for (size_t k = 0; k < n_kw; k++)
            if (jj_str_eq(kw_names[k], m->names[i])) {
                v = kw_vals[k];
                have = true;
            }
        if (!have && m->name_vals[i] && jj_eval(c, ms, m->name_vals[i], &v) < 0)
            goto done;
        if (assign(c, ms, m->names[i], v) < 0)
            goto done;
    }
    for (size_t k = 0; k < n_kw; k++) {
        bool known = false;
        for (size_t i = 0; i < m->n_names; i++)
            known |= jj_str_eq(kw_names[k], m->names[i]);
        if (!known) {
            jj_fail(c, SL_EINVAL, "macro got an unexpected keyword argument '%.*s'",
                    (int)(kw_names[k].n > 40 ? 40 : kw_names[k].n), kw_names[k].p);
            goto done;
        }
    }
    jj_buf b = {0};
    if (exec_body(c, ms, m->kids, m->n_kids, &b) < 0)
        goto done;
    *out = jj_strv(jj_buf_str(&b));
    rc = 0;
done:
    c->depth--;
    return rc;
}

int jj_render(jj_ctx *c, const jj_node *root, jj_buf *out)
{
    /* c->globals is the template's top level: its `set`s and macros land there */
    return exec_body(c, c->globals, root->kids, root->n_kids, out) < 0 ? -1 : 0;
}
