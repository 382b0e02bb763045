/* model/jinja/jinja_parse_expr.c: Jinja expressions -> AST, by recursive
 * descent with jinja2's precedence (parser.py): conditional, or, and, not,
 * comparisons, + -, ~, * / // %, **, unary, then postfix (. [] ()) with
 * filters (|) and tests (is) binding tighter than binary operators (but
 * `-x|abs` is `(-x)|abs`). Runs once per template at load.
 * Trade-off: recursion depth is capped (JJ_MAX_PARSE_DEPTH) so hostile
 * nesting is an error, not a stack overflow. */
#include "model/jinja/jinja_parse.h"

static jj_node *expr(jj_parser *p);
static jj_node *primary(jj_parser *p);

/* (args, kw=args) after '(' has been seen; fills kids and names/name_vals */
static int call_args(jj_parser *p, jj_node *n)
{
    nlist pos = {0}, kwv = {0};
    slist kwn = {0};
    if (expect_op(p, "(") < 0)
        return -1;
    while (!is_op(cur(p), ")")) {
        if (pos.n + kwv.n && expect_op(p, ",") < 0)
            return -1;
        if (is_op(cur(p), ")"))
            break;
        if (cur(p)->t == JJ_T_NAME && is_op(peek(p, 1), "=")) {
            if (sl_push(p, &kwn, cur(p)->s) < 0)
                return -1;
            adv(p);
            adv(p);
            jj_node *v = expr(p);
            if (!v || nl_push(p, &kwv, v) < 0)
                return -1;
        } else {
            if (kwv.n)
                return perr(p, "keyword argument after keyword arguments");
            jj_node *v = expr(p);
            if (!v || nl_push(p, &pos, v) < 0)
                return -1;
        }
    }
    adv(p);
    n->kids = pos.v;
    n->n_kids = pos.n;
    n->names = kwn.v;
    n->name_vals = kwv.v;
    n->n_names = kwn.n;
    return 0;
}

static jj_node *filter_or_test(jj_parser *p, jj_node *x)
{
    for (;;) {
        if (is_op(cur(p), "|")) {
            adv(p);
            if (cur(p)->t != JJ_T_NAME)
                return perr(p, "a filter name"), NULL;
            jj_node *f = node(p, JJ_N_FILTER);
            if (!f)
                return NULL;
            f->a = x;
            f->name = cur(p)->s;
            adv(p);
            while (is_op(cur(p), ".") && peek(p, 1)->t == JJ_T_NAME) { /* dotted filter names */
                adv(p);
                adv(p);
            }
            if (is_op(cur(p), "(") && call_args(p, f) < 0)
                return NULL;
            x = f;
        } else if (is_name(cur(p), "is")) {
            adv(p);
            jj_node *t = node(p, JJ_N_TEST);
            if (!t)
                return NULL;
            if (is_name(cur(p), "not")) {
                t->op = 1;
                adv(p);
            }
            if (cur(p)->t != JJ_T_NAME)
                return perr(p, "a test name"), NULL;
            t->a = x;
            t->name = cur(p)->s;
            adv(p);
            const jj_tok *k = cur(p);
            if (is_op(k, "(")) {
                if (call_args(p, t) < 0)
                    return NULL;
            } else if ((k->t == JJ_T_NAME || k->t == JJ_T_STR || k->t == JJ_T_INT ||
                        k->t == JJ_T_FLOAT || is_op(k, "[") || is_op(k, "{")) &&
                       !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and") &&
                       !is_name(k, "is") && !is_name(k, "if") && !is_name(k, "in") &&
                       !is_name(k, "not")) {
                /* one bare argument: `x is divisibleby 3`, `x is sameas false` */
                jj_node *arg = primary(p);
                if (!arg)
                    return NULL;
                t->kids = jj_alloc(p->c->ar, sizeof(jj_node *));
                if (!t->kids)
                    return jj_fail(p->c, SL_ENOMEM, "template too large"), NULL;
                t->kids[0] = arg;
                t->n_kids = 1;
            }
            x = t;
        } else if (is_op(cur(p), "(")) {
            jj_node *call = node(p, JJ_N_CALL);
            if (!call)
                return NULL;
            call->a = x;
            if (call_args(p, call) < 0)
                return NULL;
            x = call;
        } else {
            return x;
        }
    }
}

static jj_node *postfix(jj_parser *p, jj_node *x)
{
    for (;;) {
        if (is_op(cur(p), ".")) {
            adv(p);
            jj_node *a = node(p, JJ_N_ATTR);
            if (!a)
                return NULL;
            a->a = x;
            if (cur(p)->t == JJ_T_NAME) {
                a->name = cur(p)->s;
            } else if (cur(p)->t == JJ_T_INT) { /* x.0 is x[0] */
                a->t = JJ_N_ITEM;
                a->b = node(p, JJ_N_LIT);
                if (!a->b)
                    return NULL;
                a->b->lit = jj_int(cur(p)->i);
            } else {
                return perr(p, "an attribute name"), NULL;
            }
            adv(p);
            x = a;
        } else if (is_op(cur(p), "[")) {
            adv(p);
            jj_node *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            bool slice = false;
            for (;;) {
                if (!is_op(cur(p), ":") && !is_op(cur(p), "]")) {
                    parts[k] = expr(p);
                    if (!parts[k])
                        return NULL;
                }
                if (is_op(cur(p), ":") && k < 2) {
                    slice = true;
                    k++;
                    adv(p);
                    continue;
                }
                break;
            }
            if (expect_op(p, "]") < 0)
                return NULL;
            jj_node *it = node(p, slice ? JJ_N_SLICE : JJ_N_ITEM);
            if (!it)
                return NULL;
            it->a = x;
            it->b = parts[0];
            it->c = parts[1];
            it->d = parts[2];
            if (!slice && !it->b)
                return perr(p, "an index"), NULL;
            x = it;
        } else if (is_op(cur(p), "(")) {
            jj_node *call = node(p, JJ_N_CALL);
            if (!call)
                return NULL;
            call->a = x;
            if (call_args(p, call) < 0)
                return NULL;
            x = call;
        } else {
            return x;
        }
    }
}

static jj_node *primary(jj_parser *p)
{
    if (!enter(p))
        return NULL;
    const jj_tok *t = cur(p);
    jj_node *x = NULL;
    if (t->t == JJ_T_NAME) {
        static const struct { const char *nm; int kind; int b; } consts[] = {
            {"true", JJ_BOOL, 1}, {"True", JJ_BOOL, 1}, {"false", JJ_BOOL, 0},
            {"False", JJ_BOOL, 0}, {"none", JJ_NONE, 0}, {"None", JJ_NONE, 0}};
        x = node(p, JJ_N_NAME);
        if (!x)
            return NULL;
        x->name = t->s;
        for (size_t k = 0; k < sizeof(consts) / sizeof(consts[0]); k++)
            if (jj_str_eqc(t->s, consts[k].nm)) {
                x->t = JJ_N_LIT;
                x->lit = consts[k].kind == JJ_BOOL ? jj_bool(consts[k].b) : jj_none();
            }
        adv(p);
    } else if (t->t == JJ_T_STR) {
        /* adjacent literals concatenate */
        size_t total = 0, k = p->i;
        for (; p->t[k].t == JJ_T_STR; k++)
            total += p->t[k].s.n;
        char *buf = jj_alloc(p->c->ar, total + 1);
        x = node(p, JJ_N_LIT);
        if (!buf || !x)
            return jj_fail(p->c, SL_ENOMEM, "template too large"), NULL;
        size_t o = 0;
        for (; cur(p)->t == JJ_T_STR; adv(p)) {
            memcpy(buf + o, cur(p)->s.p, cur(p)->s.n);
            o += cur(p)->s.n;
        }
        x->lit = jj_strv((jj_str){.p = buf, .n = o});
    } else if (t->t == JJ_T_INT || t->t == JJ_T_FLOAT) {
        x = node(p, JJ_N_LIT);
        if (!x)
            return NULL;
        x->lit = t->t == JJ_T_INT ? jj_int(t->i) : jj_float(t->f);
        adv(p);
    } else if (is_op(t, "(")) {
        adv(p);
        if (is_op(cur(p), ")")) {
            adv(p);
            x = node(p, JJ_N_TUPLE);
        } else {
            x = expr(p);
            if (!x)
                return NULL;
            if (is_op(cur(p), ",")) {
                nlist items = {0};
                if (nl_push(p, &items, x) < 0)
                    return NULL;
                while (is_op(cur(p), ",")) {
                    adv(p);
                    if (is_op(cur(p), ")"))
                        break;
                    jj_node *y = expr(p);
                    if (!y || nl_push(p, &items, y) < 0)
                        return NULL;
                }
                x = node(p, JJ_N_TUPLE);
                if (!x)
                    return NULL;
                x->kids = items.v;
                x->n_kids = items.n;
            }
            if (expect_op(p, ")") < 0)
                return NULL;
        }
    } else if (is_op(t, "[") || is_op(t, "{")) {
        bool is_dict = is_op(t, "{");
        const char *close = is_dict ? "}" : "]";
        adv(p);
        nlist items = {0};
        while (!is_op(cur(p), close)) {
            if (items.n && expect_op(p, ",") < 0)
                return NULL;
            if (is_op(cur(p), close))
                break;
            jj_node *y = expr(p);
            if (!y || nl_push(p, &items, y) < 0)
                return NULL;
            if (is_dict) {
                if (expect_op(p, ":") < 0)
                    return NULL;
                y = expr(p);
                if (!y || nl_push(p, &items, y) < 0)
                    return NULL;
            }
        }
        adv(p);
        x = node(p, is_dict ? JJ_N_DICT : JJ_N_LIST);
        if (!x)
            return NULL;
        x->kids = items.v;
        x->n_kids = items.n;
    } else {
        return perr(p, "an expression"), NULL;
    }
    if (!x)
        return NULL;
    x = postfix(p, x);
    p->depth--;
    return x;
}

static jj_node *unary(jj_parser *p, bool with_filter)
{
    if (!enter(p))
        return NULL;
    jj_node *x;
    if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
        x = node(p, is_op(cur(p), "-") ? JJ_N_NEG : JJ_N_POS);
        if (!x)
            return NULL;
        adv(p);
        x->a = unary(p, false);
        if (!x->a)
            return NULL;
    } else {
        x = primary(p);
    }
    if (x && with_filter) /* -x|abs is (-x)|abs, as in jinja2 */
        x = filter_or_test(p, x);
    p->depth--;
    return x;
}

static jj_node *bin(jj_parser *p, int op, jj_node *a, jj_node *b, jj_ntype t)
{
    if (!a || !b)
        return NULL;
    jj_node *x = node(p, t);
    if (!x)
        return NULL;
    x->op = op;
    x->a = a;
    x->b = b;
    return x;
}

static jj_node *pow_expr(jj_parser *p)
{
    jj_node *x = unary(p, true);
    while (x && is_op(cur(p), "**")) {
        adv(p);
        x = bin(p, JJ_OP_POW, x, unary(p, true), JJ_N_BIN);
    }
    return x;
}

static jj_node *math2(jj_parser *p)
{
    jj_node *x = pow_expr(p);
    for (;;) {
        int op = is_op(cur(p), "*") ? JJ_OP_MUL : is_op(cur(p), "/") ? JJ_OP_DIV
               : is_op(cur(p), "//") ? JJ_OP_FLOORDIV : is_op(cur(p), "%") ? JJ_OP_MOD : 0;
        if (!x || !op)
            return x;
        adv(p);
        x = bin(p, op, x, pow_expr(p), JJ_N_BIN);
    }
}

static jj_node *concat(jj_parser *p)
{
    jj_node *x = math2(p);
    while (x && is_op(cur(p), "~")) {
        adv(p);
        x = bin(p, JJ_OP_CONCAT, x, math2(p), JJ_N_BIN);
    }
    return x;
}

static jj_node *math1(jj_parser *p)
{
    jj_node *x = concat(p);
    for (;;) {
        int op = is_op(cur(p), "+") ? JJ_OP_ADD : is_op(cur(p), "-") ? JJ_OP_SUB : 0;
        if (!x || !op)
            return x;
        adv(p);
        x = bin(p, op, x, concat(p), JJ_N_BIN);
    }
}

static jj_node *compare(jj_parser *p)
{
    jj_node *x = math1(p), *prev = x, *result = x;
    bool chained = false;
    for (;;) {
        const jj_tok *t = cur(p);
        int op = is_op(t, "==") ? JJ_OP_EQ : is_op(t, "!=") ? JJ_OP_NE : is_op(t, "<") ? JJ_OP_LT
               : is_op(t, "<=") ? JJ_OP_LE : is_op(t, ">") ? JJ_OP_GT : is_op(t, ">=") ? JJ_OP_GE
               : is_name(t, "in") ? JJ_OP_IN
               : (is_name(t, "not") && is_name(peek(p, 1), "in")) ? JJ_OP_NOTIN : 0;
        if (!prev || !op)
            return prev ? result : NULL;
        adv(p);
        if (op == JJ_OP_NOTIN)
            adv(p);
        jj_node *rhs = math1(p);
        jj_node *cmp = bin(p, op, prev, rhs, JJ_N_CMP);
        if (!cmp)
            return NULL;
        /* a < b < c is (a < b) and (b < c) */
        result = chained ? bin(p, 0, result, cmp, JJ_N_AND) : cmp;
        chained = true;
        prev = rhs;
    }
}

static jj_node *not_expr(jj_parser *p)
{
    if (is_name(cur(p), "not")) {
        if (!enter(p))
            return NULL;
        jj_node *x = node(p, JJ_N_NOT);
        if (!x)
            return NULL;
        adv(p);
        x->a = not_expr(p);
        p->depth--;
        return x->a ? x : NULL;
    }
    return compare(p);
}

static jj_node *and_expr(jj_parser *p)
{
    jj_node *x = not_expr(p);
    while (x && is_name(cur(p), "and")) {
        adv(p);
        x = bin(p, 0, x, not_expr(p), JJ_N_AND);
    }
    return x;
}

static jj_node *or_expr(jj_parser *p)
{
    jj_node *x = and_expr(p);
    while (x && is_name(cur(p), "or")) {
        adv(p);
        x = bin(p, 0, x, and_expr(p), JJ_N_OR);
    }
    return x;
}

static jj_node *expr(jj_parser *p)
{
    if (!enter(p))
        return NULL;
    jj_node *x = or_expr(p);
    while (x && is_name(cur(p), "if")) {
        adv(p);
        jj_node *c = node(p, JJ_N_COND);
        if (!c)
            return NULL;
        c->a = x;
        c->b = or_expr(p);
        if (!c->b)
            return NULL;
        if (is_name(cur(p), "else")) {
            adv(p);
            c->c = expr(p);
            if (!c->c)
                return NULL;
        }
        x = c;
    }
    p->depth--;
    return x;
}

jj_node *jj_parse_expr(jj_parser *p) { return expr(p); }
jj_node *jj_parse_or(jj_parser *p) { return or_expr(p); }
jj_node *jj_parse_filters(jj_parser *p, jj_node *x) { return filter_or_test(p, x); }
int jj_parse_call_args(jj_parser *p, jj_node *n) { return call_args(p, n); }
