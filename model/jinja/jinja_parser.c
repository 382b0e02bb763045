/* model/jinja/jinja_parser.c: tokens -> AST for Jinja statements (if, for, set,
 * macro, filter blocks, break/continue) and template bodies; expressions are
 * in jinja_parse_expr.c. Runs once per template at load.
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
#include "model/jinja/jinja_parse.h"

/* ======================================================================== */
/* statements                                                               */
/* ======================================================================== */

static int body(jj_parser *p, nlist *out, const char *const *ends, int *which);

static int end_tag(jj_parser *p)
{
    if (cur(p)->t != JJ_T_BEND)
        return perr(p, "'%}'");
    adv(p);
    return 0;
}

/* The statements up to `{% END %}` become n's kids, then the end tag's `%}`;
 * n, or NULL after an error. */
static jj_node *block_until(jj_parser *p, jj_node *n, const char *end)
{
    const char *const ends[] = {end, NULL};
    nlist kids = {0};
    int which;
    if (body(p, &kids, ends, &which) < 0)
        return NULL;
    n->kids = kids.v;
    n->n_kids = kids.n;
    return end_tag(p) < 0 ? NULL : n;
}

/* After `{% else %}`: its `%}`, then the statements up to `{% END %}` as a
 * BODY node (the caller reads the end tag's `%}`); NULL after an error. */
static jj_node *else_body(jj_parser *p, const char *end)
{
    if (end_tag(p) < 0)
        return NULL;
    const char *const ends[] = {end, NULL};
    nlist els = {0};
    int which;
    if (body(p, &els, ends, &which) < 0)
        return NULL;
    jj_node *b = node(p, JJ_N_BODY);
    if (!b)
        return NULL;
    b->kids = els.v;
    b->n_kids = els.n;
    return b;
}

/* `{% if %}` with elif/else chains; on entry cur is after `if` */
static jj_node *stmt_if(jj_parser *p)
{
    jj_node *n = node(p, JJ_N_IF);
    if (!n)
        return NULL;
    n->a = jj_parse_expr(p);
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
        n->b = else_body(p, "endif");
        if (!n->b)
            return NULL;
    }
    return end_tag(p) < 0 ? NULL : n;
}

static int targets(jj_parser *p, slist *names)
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

static jj_node *stmt_for(jj_parser *p)
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
    n->a = jj_parse_or(p);
    if (!n->a)
        return NULL;
    if (is_name(cur(p), "if")) {
        adv(p);
        n->b = jj_parse_expr(p);
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
        n->c = else_body(p, "endfor");
        if (!n->c)
            return NULL;
    }
    return end_tag(p) < 0 ? NULL : n;
}

static jj_node *stmt_set(jj_parser *p)
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
        n->a = jj_parse_expr(p);
        if (!n->a)
            return NULL;
        if (is_op(cur(p), ",")) { /* set a = 1, 2 builds a tuple */
            jj_node *tup = node(p, JJ_N_TUPLE);
            nlist items = {0};
            if (!tup || nl_push(p, &items, n->a) < 0)
                return NULL;
            while (is_op(cur(p), ",")) {
                adv(p);
                jj_node *y = jj_parse_expr(p);
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
        n->a = jj_parse_filters(p, NULL);
        if (!n->a)
            return NULL;
    }
    if (end_tag(p) < 0)
        return NULL;
    return block_until(p, n, "endset");
}

static jj_node *stmt_macro(jj_parser *p)
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
            d = jj_parse_expr(p);
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
    return block_until(p, n, "endmacro");
}

static jj_node *stmt_filter(jj_parser *p)
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
    if (is_op(cur(p), "(") && jj_parse_call_args(p, f) < 0)
        return NULL;
    n->a = jj_parse_filters(p, f);
    if (!n->a || end_tag(p) < 0)
        return NULL;
    return block_until(p, n, "endfilter");
}

static jj_node *statement(jj_parser *p)
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
    if (t->s.n > 3 && memcmp(t->s.p, "end", 3) == 0)
        return jj_fail(p->c, SL_EFORMAT, "template line %d: unexpected {%% %.*s %%}", t->line,
                       (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p), NULL;
    return jj_fail(p->c, SL_EUNSUPPORTED, "template line %d: unsupported statement '%.*s'",
                   t->line, (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p), NULL;
}

/* Parses nodes until `{% <one of ends> ...` (cur left after the end name,
 * *which its index) or, with ends == NULL, until EOF. */
static int body(jj_parser *p, nlist *out, const char *const *ends, int *which)
{
    if (!enter(p))
        return -1;
    for (;;) {
        const jj_tok *t = cur(p);
        if (t->t == JJ_T_EOF) {
            if (ends) {
                int last = 0;
                while (ends[last + 1])
                    last++;
                return jj_fail(p->c, SL_EFORMAT, "template line %d: missing {%% %s %%}", t->line,
                               ends[last]);
            }
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
            n->a = jj_parse_expr(p);
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

/* Unknown filter and test names are load-time errors in jinja2; check them
 * here, not at the first request. Depth is bounded by the parser's limit. */
static int check_names(jj_ctx *c, const jj_node *n)
{
    if (!n)
        return 0;
    if (n->t == JJ_N_FILTER && !jj_filter_known(n->name))
        return jj_fail(c, SL_EUNSUPPORTED, "template line %d: no filter named '%.*s'", n->line,
                       (int)(n->name.n > 40 ? 40 : n->name.n), n->name.p);
    if (n->t == JJ_N_TEST && !jj_test_known(n->name))
        return jj_fail(c, SL_EUNSUPPORTED, "template line %d: no test named '%.*s'", n->line,
                       (int)(n->name.n > 40 ? 40 : n->name.n), n->name.p);
    const jj_node *sub[4] = {n->a, n->b, n->c, n->d};
    for (int i = 0; i < 4; i++)
        if (check_names(c, sub[i]) < 0)
            return -1;
    for (size_t i = 0; i < n->n_kids; i++)
        if (check_names(c, n->kids[i]) < 0)
            return -1;
    for (size_t i = 0; n->name_vals && i < n->n_names; i++)
        if (check_names(c, n->name_vals[i]) < 0)
            return -1;
    return 0;
}

int jj_parse(jj_ctx *c, const jj_tok *toks, size_t n, jj_node **root)
{
    jj_parser p = {.c = c, .t = toks, .n = n};
    nlist kids = {0};
    *root = NULL;
    if (body(&p, &kids, NULL, NULL) < 0)
        return -1;
    jj_node *r = node(&p, JJ_N_BODY);
    if (!r)
        return -1;
    r->kids = kids.v;
    r->n_kids = kids.n;
    if (check_names(c, r) < 0)
        return -1;
    *root = r;
    return 0;
}
