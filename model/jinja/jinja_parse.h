/* model/jinja/jinja_parse.h: the parser state and token helpers shared by
 * jinja_parser.c (statements) and jinja_parse_expr.c (expressions).
 * Where: those two files only. */
#ifndef SL_JINJA_PARSE_H
#define SL_JINJA_PARSE_H

#include <stdio.h>
#include <string.h>

#include "model/jinja/jinja.h"

typedef struct {
    jj_ctx *c;
    const jj_tok *t;
    size_t n, i;
    int depth;
} jj_parser;

static inline const jj_tok *cur(jj_parser *p) { return &p->t[p->i]; }
static inline const jj_tok *peek(jj_parser *p, size_t k) { return &p->t[p->i + k < p->n ? p->i + k : p->n - 1]; }
static inline void adv(jj_parser *p) { if (p->i + 1 < p->n) p->i++; }

static inline bool is_op(const jj_tok *t, const char *op) { return t->t == JJ_T_OP && jj_str_eqc(t->s, op); }
static inline bool is_name(const jj_tok *t, const char *nm) { return t->t == JJ_T_NAME && jj_str_eqc(t->s, nm); }

static inline int perr(jj_parser *p, const char *what)
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

static inline int expect_op(jj_parser *p, const char *op)
{
    if (!is_op(cur(p), op)) {
        char what[16];
        snprintf(what, sizeof(what), "'%s'", op);
        return perr(p, what);
    }
    adv(p);
    return 0;
}

static inline jj_node *node(jj_parser *p, jj_ntype t)
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
static inline int nl_push(jj_parser *p, nlist *l, jj_node *x)
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
static inline int sl_push(jj_parser *p, slist *l, jj_str x)
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

static inline bool enter(jj_parser *p)
{
    if (++p->depth > JJ_MAX_PARSE_DEPTH) {
        jj_fail(p->c, SL_EFORMAT, "template line %d: nested too deeply", cur(p)->line);
        return false;
    }
    return true;
}

/* jinja_parse_expr.c: entry points the statement parser uses. */
jj_node *jj_parse_expr(jj_parser *p);          /* full expression, conditional included */
jj_node *jj_parse_or(jj_parser *p);            /* no conditional: for-loop iterables stop before `if` */
jj_node *jj_parse_filters(jj_parser *p, jj_node *x); /* `|f(...)` and `is t` suffixes applied to x */
int jj_parse_call_args(jj_parser *p, jj_node *n);    /* `(args, kw=v)` into n->kids / n->names */

#endif
