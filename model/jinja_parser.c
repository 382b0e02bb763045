/* model/jinja_parser.c: tokens -> AST, by recursive descent following
 * jinja2's grammar and operator precedence (parser.py): conditional, or,
 * and, not, comparisons, + -, ~, * / // %, **, unary, then postfix
 * (. [] ()) with filters (|) and tests (is) binding tighter than unary
 * minus. Runs once per template at load.
 * Trade-off: recursion depth is capped (JJ_MAX_PARSE_DEPTH) so hostile
 * nesting is an error, not a stack overflow.
 *
 * Node fields by type (see jj_node):
 *   LIT lit | NAME name | LIST/TUPLE kids | DICT kids = k0,v0,k1,v1...
 *   ATTR a.name | ITEM a[b] | SLICE a[b:c:d] (NULL parts allowed)
 *   CALL a(kids, names=name_vals) | FILTER a|name(kids, kw); a NULL inside a
 *   filter block | TEST a is [not: op=1] name(kids)
 *   NEG/POS/NOT a | BIN/CMP a op b | AND/OR a b | COND a if b else c
 *   BODY kids | TEXT name | OUTPUT a | IF a: kids else b (BODY or IF)
 *   FOR names in a [if b]: kids else c | SET names = a | SETATTR names[0].name = a
 *   SETBLOCK names[0] = kids [| filter a] | MACRO name(names=name_vals): kids
 *   FILTERBLOCK a: kids | BREAK | CONTINUE */
#include "model/jinja.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    jj_ctx *c;
    const jj_tok *t;
    size_t n, i;
    int depth;
} P;

static const jj_tok *cur(P *p) { return &p->t[p->i]; }
static const jj_tok *peek(P *p, size_t k) { return &p->t[p->i + k < p->n ? p->i + k : p->n - 1]; }
static void adv(P *p) { if (p->i + 1 < p->n) p->i++; }

static bool is_op(const jj_tok *t, const char *op) { return t->t == JJ_T_OP && jj_str_eqc(t->s, op); }
static bool is_name(const jj_tok *t, const char *nm) { return t->t == JJ_T_NAME && jj_str_eqc(t->s, nm); }

static int perr(P *p, const char *what)
{
    const jj_tok *t = cur(p);
    char got[40];
    if (t->t == JJ_T_EOF)
        strcpy(got, "end of template");
    else if (t->t == JJ_T_BEND || t->t == JJ_T_VEND)
        strcpy(got, "end of tag");
    else if (t->s.n)
        snprintf(got, sizeof(got), "'%.*s'", (int)(t->s.n > 30 ? 30 : t->s.n), t->s.p);
    else
        strcpy(got, "a literal");
    return jj_fail(p->c, SL_EFORMAT, "template line %d: expected %s, got %s", t->line, what, got);
}

static int expect_op(P *p, const char *op)
{
    if (!is_op(cur(p), op)) {
        char what[16];
        snprintf(what, sizeof(what), "'%s'", op);
        return perr(p, what);
    }
    adv(p);
    return 0;
}

static jj_node *node(P *p, jj_ntype t)
{
    jj_node *n = jj_alloc(p->c->ar, sizeof(*n));
    if (!n) {
        jj_fail(p->c, SL_ENOMEM, "template too large");
        return NULL;
    }
    n->t = t;
    n->line = cur(p)->line;
    return n;
}

/* growable node-pointer list in the arena */
typedef struct { jj_node **v; size_t n, cap; } nlist;
static int nl_push(P *p, nlist *l, jj_node *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_node **nv = jj_alloc(p->c->ar, cap * sizeof(*nv));
        if (!nv)
            return jj_fail(p->c, SL_ENOMEM, "template too large");
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}
typedef struct { jj_str *v; size_t n, cap; } slist;
static int sl_push(P *p, slist *l, jj_str x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_str *nv = jj_alloc(p->c->ar, cap * sizeof(*nv));
        if (!nv)
            return jj_fail(p->c, SL_ENOMEM, "template too large");
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static jj_node *expr(P *p);
static jj_node *expr_noternary(P *p);
static jj_node *or_expr(P *p);
static jj_node *unary(P *p, bool with_filter);
static jj_node *primary(P *p);

static bool enter(P *p)
{
    if (++p->depth > JJ_MAX_PARSE_DEPTH) {
        jj_fail(p->c, SL_EFORMAT, "template line %d: nested too deeply", cur(p)->line);
        return false;
    }
    return true;
}

/* ======================================================================== */
/* expressions                                                              */
/* ======================================================================== */

/* (args, kw=args) after '(' has been seen; fills kids and names/name_vals */
static int call_args(P *p, jj_node *n)
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

static jj_node *filter_or_test(P *p, jj_node *x)
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

static jj_node *postfix(P *p, jj_node *x)
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

static jj_node *primary(P *p)
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

static jj_node *unary(P *p, bool with_filter)
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

static jj_node *bin(P *p, int op, jj_node *a, jj_node *b, jj_ntype t)
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

static jj_node *pow_expr(P *p)
{
    jj_node *x = unary(p, true);
    while (x && is_op(cur(p), "**")) {
        adv(p);
        x = bin(p, JJ_OP_POW, x, unary(p, true), JJ_N_BIN);
    }
    return x;
}

static jj_node *math2(P *p)
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

static jj_node *concat(P *p)
{
    jj_node *x = math2(p);
    while (x && is_op(cur(p), "~")) {
        adv(p);
        x = bin(p, JJ_OP_CONCAT, x, math2(p), JJ_N_BIN);
    }
    return x;
}

static jj_node *math1(P *p)
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

static jj_node *compare(P *p)
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

static jj_node *not_expr(P *p)
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

static jj_node *and_expr(P *p)
{
    jj_node *x = not_expr(p);
    while (x && is_name(cur(p), "and")) {
        adv(p);
        x = bin(p, 0, x, not_expr(p), JJ_N_AND);
    }
    return x;
}

static jj_node *or_expr(P *p)
{
    jj_node *x = and_expr(p);
    while (x && is_name(cur(p), "or")) {
        adv(p);
        x = bin(p, 0, x, and_expr(p), JJ_N_OR);
    }
    return x;
}

static jj_node *expr(P *p)
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

/* for-loop iterables stop before `if` (the loop filter) */
static jj_node *expr_noternary(P *p) { return or_expr(p); }

/* ======================================================================== */
/* statements                                                               */
/* ======================================================================== */

static int body(P *p, nlist *out, const char *const *ends, int *which);

static int end_tag(P *p)
{
    if (cur(p)->t != JJ_T_BEND)
        return perr(p, "'%}'");
    adv(p);
    return 0;
}

/* `{% if %}` with elif/else chains; on entry cur is after `if` */
static jj_node *stmt_if(P *p)
{
    jj_node *n = node(p, JJ_N_IF);
    if (!n)
        return NULL;
    n->a = expr(p);
    if (!n->a || end_tag(p) < 0)
        return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    nlist kids = {0};
    int which;
    if (body(p, &kids, ends, &which) < 0)
        return NULL;
    n->kids = kids.v;
    n->n_kids = kids.n;
    if (which == 0) {
        n->b = stmt_if(p);
        return n->b ? n : NULL;
    }
    if (which == 1) {
        if (end_tag(p) < 0)
            return NULL;
        static const char *const ends2[] = {"endif", NULL};
        nlist els = {0};
        if (body(p, &els, ends2, &which) < 0)
            return NULL;
        n->b = node(p, JJ_N_BODY);
        if (!n->b)
            return NULL;
        n->b->kids = els.v;
        n->b->n_kids = els.n;
    }
    return end_tag(p) < 0 ? NULL : n;
}

static int targets(P *p, slist *names)
{
    bool paren = is_op(cur(p), "(");
    if (paren)
        adv(p);
    for (;;) {
        if (cur(p)->t != JJ_T_NAME)
            return perr(p, "a variable name");
        if (sl_push(p, names, cur(p)->s) < 0)
            return -1;
        adv(p);
        if (!is_op(cur(p), ","))
            break;
        adv(p);
    }
    return paren ? expect_op(p, ")") : 0;
}

static jj_node *stmt_for(P *p)
{
    jj_node *n = node(p, JJ_N_FOR);
    slist names = {0};
    if (!n || targets(p, &names) < 0)
        return NULL;
    n->names = names.v;
    n->n_names = names.n;
    if (!is_name(cur(p), "in"))
        return perr(p, "'in'"), NULL;
    adv(p);
    n->a = expr_noternary(p);
    if (!n->a)
        return NULL;
    if (is_name(cur(p), "if")) {
        adv(p);
        n->b = expr(p);
        if (!n->b)
            return NULL;
    }
    if (is_name(cur(p), "recursive"))
        return jj_fail(p->c, SL_EUNSUPPORTED, "template line %d: recursive loops are not supported",
                       cur(p)->line), NULL;
    if (end_tag(p) < 0)
        return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    nlist kids = {0};
    int which;
    if (body(p, &kids, ends, &which) < 0)
        return NULL;
    n->kids = kids.v;
    n->n_kids = kids.n;
    if (which == 0) {
        if (end_tag(p) < 0)
            return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        nlist els = {0};
        if (body(p, &els, ends2, &which) < 0)
            return NULL;
        n->c = node(p, JJ_N_BODY);
        if (!n->c)
            return NULL;
        n->c->kids = els.v;
        n->c->n_kids = els.n;
    }
    return end_tag(p) < 0 ? NULL : n;
}

static jj_node *stmt_set(P *p)
{
    jj_node *n = node(p, JJ_N_SET);
    slist names = {0};
    if (!n)
        return NULL;
    if (cur(p)->t == JJ_T_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->t == JJ_T_NAME) {
        n->t = JJ_N_SETATTR;
        if (sl_push(p, &names, cur(p)->s) < 0)
            return NULL;
        n->name = peek(p, 2)->s;
        adv(p);
        adv(p);
        adv(p);
    } else if (targets(p, &names) < 0) {
        return NULL;
    }
    n->names = names.v;
    n->n_names = names.n;
    if (is_op(cur(p), "=")) {
        adv(p);
        n->a = expr(p);
        if (!n->a)
            return NULL;
        if (is_op(cur(p), ",")) { /* set a = 1, 2 builds a tuple */
            jj_node *tup = node(p, JJ_N_TUPLE);
            nlist items = {0};
            if (!tup || nl_push(p, &items, n->a) < 0)
                return NULL;
            while (is_op(cur(p), ",")) {
                adv(p);
                jj_node *y = expr(p);
                if (!y || nl_push(p, &items, y) < 0)
                    return NULL;
            }
            tup->kids = items.v;
            tup->n_kids = items.n;
            n->a = tup;
        }
        return end_tag(p) < 0 ? NULL : n;
    }
    if (n->t != JJ_N_SET || names.n != 1)
        return perr(p, "'='"), NULL;
    /* block set: {% set x %}...{% endset %}, optionally {% set x | filter %} */
    n->t = JJ_N_SETBLOCK;
    if (is_op(cur(p), "|")) {
        n->a = filter_or_test(p, NULL);
        if (!n->a)
            return NULL;
    }
    if (end_tag(p) < 0)
        return NULL;
    static const char *const ends[] = {"endset", NULL};
    nlist kids = {0};
    int which;
    if (body(p, &kids, ends, &which) < 0)
        return NULL;
    n->kids = kids.v;
    n->n_kids = kids.n;
    return end_tag(p) < 0 ? NULL : n;
}

static jj_node *stmt_macro(P *p)
{
    jj_node *n = node(p, JJ_N_MACRO);
    if (!n)
        return NULL;
    if (cur(p)->t != JJ_T_NAME)
        return perr(p, "a macro name"), NULL;
    n->name = cur(p)->s;
    adv(p);
    slist names = {0};
    nlist defs = {0};
    if (expect_op(p, "(") < 0)
        return NULL;
    while (!is_op(cur(p), ")")) {
        if (names.n && expect_op(p, ",") < 0)
            return NULL;
        if (cur(p)->t != JJ_T_NAME)
            return perr(p, "a parameter name"), NULL;
        if (sl_push(p, &names, cur(p)->s) < 0)
            return NULL;
        adv(p);
        jj_node *d = NULL;
        if (is_op(cur(p), "=")) {
            adv(p);
            d = expr(p);
            if (!d)
                return NULL;
        }
        if (nl_push(p, &defs, d) < 0)
            return NULL;
    }
    adv(p);
    if (end_tag(p) < 0)
        return NULL;
    n->names = names.v;
    n->name_vals = defs.v;
    n->n_names = names.n;
    static const char *const ends[] = {"endmacro", NULL};
    nlist kids = {0};
    int which;
    if (body(p, &kids, ends, &which) < 0)
        return NULL;
    n->kids = kids.v;
    n->n_kids = kids.n;
    return end_tag(p) < 0 ? NULL : n;
}

static jj_node *stmt_filter(P *p)
{
    jj_node *n = node(p, JJ_N_FILTERBLOCK);
    if (!n)
        return NULL;
    /* parse `name(args) | name2` as a filter chain applied to NULL */
    if (cur(p)->t != JJ_T_NAME)
        return perr(p, "a filter name"), NULL;
    jj_node *f = node(p, JJ_N_FILTER);
    if (!f)
        return NULL;
    f->name = cur(p)->s;
    adv(p);
    if (is_op(cur(p), "(") && call_args(p, f) < 0)
        return NULL;
    n->a = filter_or_test(p, f);
    if (!n->a || end_tag(p) < 0)
        return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    nlist kids = {0};
    int which;
    if (body(p, &kids, ends, &which) < 0)
        return NULL;
    n->kids = kids.v;
    n->n_kids = kids.n;
    return end_tag(p) < 0 ? NULL : n;
}

static jj_node *statement(P *p)
{
    const jj_tok *t = cur(p);
    if (t->t != JJ_T_NAME)
        return perr(p, "a statement"), NULL;
    adv(p);
    if (jj_str_eqc(t->s, "if")) return stmt_if(p);
    if (jj_str_eqc(t->s, "for")) return stmt_for(p);
    if (jj_str_eqc(t->s, "set")) return stmt_set(p);
    if (jj_str_eqc(t->s, "macro")) return stmt_macro(p);
    if (jj_str_eqc(t->s, "filter")) return stmt_filter(p);
    if (jj_str_eqc(t->s, "break") || jj_str_eqc(t->s, "continue")) {
        jj_node *n = node(p, jj_str_eqc(t->s, "break") ? JJ_N_BREAK : JJ_N_CONTINUE);
        return !n || end_tag(p) < 0 ? NULL : n;
    }
    if (jj_str_eqc(t->s, "generation")) { /* transformers' marker: renders its body */
        if (end_tag(p) < 0)
            return NULL;
        jj_node *n = node(p, JJ_N_BODY);
        static const char *const ends[] = {"endgeneration", NULL};
        nlist kids = {0};
        int which;
        if (!n || body(p, &kids, ends, &which) < 0 || end_tag(p) < 0)
            return NULL;
        n->kids = kids.v;
        n->n_kids = kids.n;
        return n;
    }
    p->i--;
    return jj_fail(p->c, SL_EUNSUPPORTED, "template line %d: unsupported statement '%.*s'",
                   t->line, (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p), NULL;
}

/* Parses nodes until `{% <one of ends> ...` (cur left after the end name,
 * *which its index) or, with ends == NULL, until EOF. */
static int body(P *p, nlist *out, const char *const *ends, int *which)
{
    if (!enter(p))
        return -1;
    for (;;) {
        const jj_tok *t = cur(p);
        if (t->t == JJ_T_EOF) {
            if (ends)
                return jj_fail(p->c, SL_EFORMAT, "template line %d: missing {%% %s %%}", t->line,
                               ends[0]);
            break;
        }
        jj_node *n = NULL;
        if (t->t == JJ_T_TEXT) {
            n = node(p, JJ_N_TEXT);
            if (!n)
                return -1;
            n->name = t->s;
            adv(p);
        } else if (t->t == JJ_T_VBEGIN) {
            adv(p);
            n = node(p, JJ_N_OUTPUT);
            if (!n)
                return -1;
            n->a = expr(p);
            if (!n->a)
                return -1;
            if (cur(p)->t != JJ_T_VEND)
                return perr(p, "'}}'");
            adv(p);
        } else if (t->t == JJ_T_BBEGIN) {
            const jj_tok *nm = peek(p, 1);
            if (ends && nm->t == JJ_T_NAME)
                for (int k = 0; ends[k]; k++)
                    if (jj_str_eqc(nm->s, ends[k])) {
                        adv(p);
                        adv(p);
                        *which = k;
                        p->depth--;
                        return 0;
                    }
            adv(p);
            n = statement(p);
            if (!n)
                return -1;
        } else {
            return perr(p, "text or a tag");
        }
        if (nl_push(p, out, n) < 0)
            return -1;
    }
    p->depth--;
    return 0;
}

int jj_parse(jj_ctx *c, const jj_tok *toks, size_t n, jj_node **root)
{
    P p = {.c = c, .t = toks, .n = n};
    nlist kids = {0};
    *root = NULL;
    if (body(&p, &kids, NULL, NULL) < 0)
        return -1;
    jj_node *r = node(&p, JJ_N_BODY);
    if (!r)
        return -1;
    r->kids = kids.v;
    r->n_kids = kids.n;
    *root = r;
    return 0;
}
