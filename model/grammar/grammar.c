/* model/grammar/grammar.c: checks the parsed rules and flattens them into
 * the immutable sl_grammar the matchers share. Runs once per grammar (front
 * end to refuse a bad one, worker to use it). The checks are what keep the
 * matcher total: an undefined rule would be a dangling reference, a rule
 * matching nothing a state that can never finish, and left recursion
 * (direct, indirect, or behind a nullable prefix) an expansion that never
 * reaches a byte. With them gone, expanding references until a byte class
 * is on top always ends (matcher.c, invariant 2). */
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar_internal.h"

/* The user rule a helper was made for (its name up to '~'), for messages. */
static void user_name(const sl_gram_brule *r, char *out, size_t cap)
{
    size_t n = strcspn(r->name, "~");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, r->name, n);
    out[n] = 0;
}

/* One least fixpoint over the alternatives, in linear time: an
 * alternative holds when each of its elements does (a TERM by `term_ok`, a
 * REF when its rule holds); a rule holds when one alternative does. Each
 * alternative counts its references still unmet; a rule that comes to hold
 * decrements the alternatives that reference it (a worklist), so a chain of
 * thousands of rules costs no more than its size. */
static bool fixpoint(const sl_gram_build *b, bool nullable_pass, bool *holds)
{
    uint32_t n_alts = 0, n_refs = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
            for (uint32_t i = 0; i < b->rules[r].alts[a].n; i++)
                n_refs += b->rules[r].alts[a].v[i].kind == SL_GRAM_REF;
    }
    uint32_t *alt_rule = malloc((n_alts + 1) * sizeof *alt_rule), *unmet = malloc((n_alts + 1) * sizeof *unmet);
    uint32_t *ref_lo = calloc(b->n_rules + 1, sizeof *ref_lo), *ref_alt = malloc((n_refs + 1) * sizeof *ref_alt);
    uint32_t *todo = malloc((b->n_rules + 1) * sizeof *todo);
    bool ok = alt_rule && unmet && ref_lo && ref_alt && todo;
    uint32_t n_todo = 0;
    if (ok) {
        /* CSR of "rule r is referenced by alternative a" (once per reference) */
        for (uint32_t r = 0; r < b->n_rules; r++)
            for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
                for (uint32_t i = 0; i < b->rules[r].alts[a].n; i++)
                    if (b->rules[r].alts[a].v[i].kind == SL_GRAM_REF)
                        ref_lo[b->rules[r].alts[a].v[i].arg + 1]++;
        for (uint32_t r = 0; r < b->n_rules; r++)
            ref_lo[r + 1] += ref_lo[r];
        uint32_t ai = 0;
        for (uint32_t r = 0; r < b->n_rules; r++) {
            for (uint32_t a = 0; a < b->rules[r].n_alts; a++, ai++) {
                alt_rule[ai] = r;
                unmet[ai] = 0;
                for (uint32_t i = 0; i < b->rules[r].alts[a].n; i++) {
                    sl_gram_elem e = b->rules[r].alts[a].v[i];
                    if (e.kind == SL_GRAM_REF) {
                        unmet[ai]++;
                        ref_alt[--ref_lo[e.arg + 1]] = ai;
                        continue;
                    }
                    const sl_gram_class *c = &b->classes[e.arg];
                    if (nullable_pass || !(c->w[0] | c->w[1] | c->w[2] | c->w[3]))
                        unmet[ai] = UINT32_MAX / 2;   /* never holds */
                }
                if (unmet[ai] == 0 && !holds[r]) {
                    holds[r] = true;
                    todo[n_todo++] = r;
                }
            }
        }
        /* ref_lo[r + 1] was decremented to the start of r's run */
        while (n_todo > 0) {
            uint32_t r = todo[--n_todo];
            uint32_t hi = r + 2 <= b->n_rules ? ref_lo[r + 2] : n_refs;
            for (uint32_t k = ref_lo[r + 1]; k < hi; k++) {
                uint32_t a = ref_alt[k];
                if (--unmet[a] == 0 && !holds[alt_rule[a]]) {
                    holds[alt_rule[a]] = true;
                    todo[n_todo++] = alt_rule[a];
                }
            }
        }
    }
    free(alt_rule);
    free(unmet);
    free(ref_lo);
    free(ref_alt);
    free(todo);
    return ok;
}

typedef struct {
    const sl_gram_build *b;
    const bool *nullable;
    uint8_t *color;     /* 0 new, 1 on the path, 2 done */
    int32_t found;      /* a rule on a cycle */
    int32_t via;        /* the rule it reaches the cycle through */
} lr_walk;

/* Depth-first over "A may start with B" edges; a back edge is a cycle. */
static void lr_visit(lr_walk *w, uint32_t r)
{
    w->color[r] = 1;
    const sl_gram_brule *ru = &w->b->rules[r];
    for (uint32_t a = 0; a < ru->n_alts && w->found < 0; a++) {
        for (uint32_t i = 0; i < ru->alts[a].n && w->found < 0; i++) {
            sl_gram_elem e = ru->alts[a].v[i];
            if (e.kind == SL_GRAM_TERM)
                break;
            if (w->color[e.arg] == 1) {
                w->found = (int32_t)e.arg;
                w->via = (int32_t)r;
            } else if (w->color[e.arg] == 0) {
                lr_visit(w, e.arg);
            }
            if (!w->nullable[e.arg])
                break;
        }
    }
    w->color[r] = 2;
}

static sl_status check(const sl_gram_build *b, uint32_t *root, char *err, size_t err_len)
{
    char name[80], via[80];
    int32_t root_id = -1;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        if (!b->rules[r].defined) {
            sl_gram_errf(err, err_len, "undefined rule '%s' at byte %u", b->rules[r].name, b->rules[r].offset);
            return SL_EINVAL;
        }
        if (!b->rules[r].helper && strcmp(b->rules[r].name, "root") == 0)
            root_id = (int32_t)r;
    }
    if (root_id < 0) {
        sl_gram_errf(err, err_len, "no rule 'root' at byte 0");
        return SL_EINVAL;
    }
    *root = (uint32_t)root_id;
    bool *nullable = calloc(b->n_rules, 1), *productive = calloc(b->n_rules, 1), *used = calloc(b->n_rules, 1);
    uint8_t *color = calloc(b->n_rules, 1);
    sl_status rc = SL_OK;
    if (!nullable || !productive || !used || !color) {
        sl_gram_errf(err, err_len, "out of memory compiling the grammar");
        rc = SL_ENOMEM;
        goto out;
    }
    if (!fixpoint(b, true, nullable) || !fixpoint(b, false, productive)) {
        sl_gram_errf(err, err_len, "out of memory compiling the grammar");
        rc = SL_ENOMEM;
        goto out;
    }
    /* A helper that nothing references (the spare of an ASCII-only class)
     * is not part of the language. */
    used[root_id] = true;
    for (uint32_t r = 0; r < b->n_rules; r++)
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
            for (uint32_t i = 0; i < b->rules[r].alts[a].n; i++)
                if (b->rules[r].alts[a].v[i].kind == SL_GRAM_REF)
                    used[b->rules[r].alts[a].v[i].arg] = true;
    /* Name the cause, not its users: prefer a rule whose only unproductive
     * references are to itself. */
    int32_t bad = -1;
    for (uint32_t r = 0; r < b->n_rules && bad < 0; r++) {
        if (productive[r] || (b->rules[r].helper && !used[r]))
            continue;
        bool cause = true;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
            for (uint32_t i = 0; i < b->rules[r].alts[a].n; i++) {
                sl_gram_elem e = b->rules[r].alts[a].v[i];
                if (e.kind == SL_GRAM_REF && e.arg != r && !productive[e.arg])
                    cause = false;
            }
        if (cause)
            bad = (int32_t)r;
    }
    for (uint32_t r = 0; r < b->n_rules && bad < 0; r++)
        if (!productive[r] && !(b->rules[r].helper && !used[r]))
            bad = (int32_t)r;
    if (bad >= 0) {
        uint32_t r = (uint32_t)bad;
        user_name(&b->rules[r], name, sizeof name);
        if (b->rules[r].helper)
            sl_gram_errf(err, err_len, "a part of rule '%s' matches nothing at byte %u", name, b->rules[r].offset);
        else
            sl_gram_errf(err, err_len, "rule '%s' matches nothing at byte %u", name, b->rules[r].offset);
        rc = SL_EINVAL;
        goto out;
    }
    lr_walk w = {.b = b, .nullable = nullable, .color = color, .found = -1, .via = -1};
    for (uint32_t r = 0; r < b->n_rules && w.found < 0; r++)
        if (color[r] == 0)
            lr_visit(&w, r);
    if (w.found >= 0) {
        user_name(&b->rules[w.found], name, sizeof name);
        user_name(&b->rules[w.via], via, sizeof via);
        sl_gram_errf(err, err_len, "rule '%s' is left-recursive (through '%s') at byte %u", name, via,
                     b->rules[w.found].offset);
        rc = SL_EINVAL;
    }
out:
    free(nullable);
    free(productive);
    free(used);
    free(color);
    return rc;
}

void sl_grammar_destroy(sl_grammar *g)
{
    if (g == NULL)
        return;
    for (uint32_t r = 0; r < g->n_rules; r++)
        free(g->rules[r].name);
    free(g->rules);
    free(g->alt_start);
    free(g->elems);
    free(g->classes);
    free(g->rep_left);
    free(g->rep_top);
    sl_gram_share_free(g->share);
    free(g);
}

/* ---- left factoring ---------------------------------------------------------- */

#define FACTOR_MIN_ALTS 8            /* rules with fewer alternatives stay */
#define FACTOR_WORK_MAX (1u << 22)   /* elements moved, in all */

/* Left-factors every rule with many alternatives: alternatives that start
 * with the same element become one, `first H`, with H ::= their suffixes
 * (and so on down, H being factored in its turn). The language is the
 * same; what changes is the matcher's stack count: an enum of 2000 strings
 * would start 2000 stacks (past SL_GRAMMAR_STACKS_MAX), factored it starts
 * one per distinct first byte. Runs after the checks, which it cannot
 * invalidate (a new helper is only reached after the element it follows,
 * so no rule gains a new left edge). Stops quietly at the rule limit or
 * the work budget: the result is then only less factored. */
static sl_status left_factor(sl_gram_build *b)
{
    uint64_t work = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        uint32_t n = b->rules[r].n_alts;
        if (n < FACTOR_MIN_ALTS)
            continue;
        uint32_t *group = malloc(n * sizeof *group);   /* alternative -> its group leader */
        if (group == NULL)
            return SL_ENOMEM;
        /* leaders by first element: a quadratic scan over few alternatives
         * would do, but enums are large: sort-free hashing by (kind, arg) */
        uint32_t cap = 1;
        while (cap < 2 * n)
            cap <<= 1;
        int64_t *slot = malloc(cap * sizeof *slot);
        if (slot == NULL) {
            free(group);
            return SL_ENOMEM;
        }
        for (uint32_t k = 0; k < cap; k++)
            slot[k] = -1;
        bool any = false;
        for (uint32_t a = 0; a < n; a++) {
            const sl_gram_seq *q = &b->rules[r].alts[a];
            group[a] = a;
            if (q->n == 0)
                continue;
            uint64_t key = (uint64_t)q->v[0].kind << 32 | q->v[0].arg;
            uint32_t h = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & (cap - 1);
            for (;; h = (h + 1) & (cap - 1)) {
                if (slot[h] < 0) {
                    slot[h] = a;
                    break;
                }
                const sl_gram_seq *l = &b->rules[r].alts[slot[h]];
                if (l->v[0].kind == q->v[0].kind && l->v[0].arg == q->v[0].arg) {
                    group[a] = (uint32_t)slot[h];
                    any = true;
                    break;
                }
            }
        }
        free(slot);
        if (!any) {
            free(group);
            continue;
        }
        /* leader -> helper rule receiving the suffixes (-2: no room) */
        int32_t *helper = malloc(n * sizeof *helper);
        uint32_t *count = calloc(n, sizeof *count);
        sl_gram_seq *old = b->rules[r].alts, *fresh = malloc(n * sizeof *fresh);
        if (helper == NULL || count == NULL || fresh == NULL) {
            free(group);
            free(helper);
            free(count);
            free(fresh);
            return SL_ENOMEM;
        }
        for (uint32_t a = 0; a < n; a++) {
            helper[a] = -1;
            count[group[a]]++;
        }
        uint32_t w = 0;
        sl_status rc = SL_OK;
        for (uint32_t a = 0; a < n; a++) {
            uint32_t lead = group[a];
            if (rc != SL_OK || count[lead] < 2 || helper[lead] == -2) {
                fresh[w++] = old[a];
                continue;
            }
            if (helper[lead] == -1) {
                sl_gram_elem first = old[a].v[0];
                sl_gram_elem *pair = malloc(2 * sizeof *pair);
                char *name = NULL;
                if (b->n_rules >= SL_GRAMMAR_RULES_MAX || work > FACTOR_WORK_MAX || pair == NULL) {
                    free(pair);
                    if (pair == NULL)
                        rc = SL_ENOMEM;
                    helper[lead] = -2;   /* out of room: this group stays unfactored */
                    fresh[w++] = old[a];
                    continue;
                }
                if (b->n_rules == b->cap_rules) {
                    sl_gram_brule *nr = realloc(b->rules, b->cap_rules * 2 * sizeof *nr);
                    if (nr == NULL) {
                        free(pair);
                        rc = SL_ENOMEM;
                        fresh[w++] = old[a];
                        continue;
                    }
                    b->rules = nr;
                    b->cap_rules *= 2;
                }
                size_t nl = strcspn(b->rules[r].name, "~");
                if ((name = malloc(nl + 3)) == NULL) {
                    free(pair);
                    rc = SL_ENOMEM;
                    fresh[w++] = old[a];
                    continue;
                }
                memcpy(name, b->rules[r].name, nl);
                memcpy(name + nl, "~f", 3);
                uint32_t h = b->n_rules++;
                b->rules[h] = (sl_gram_brule){.name = name, .offset = b->rules[r].offset, .defined = true,
                                              .helper = true};
                helper[lead] = (int32_t)h;
                pair[0] = first;
                pair[1] = (sl_gram_elem){SL_GRAM_REF, h};
                fresh[w++] = (sl_gram_seq){pair, 2, 2};
            }
            /* a's suffix goes to the helper */
            sl_gram_brule *hr = &b->rules[helper[lead]];
            if (hr->n_alts == hr->cap_alts) {
                uint32_t c2 = hr->cap_alts ? hr->cap_alts * 2 : 4;
                sl_gram_seq *na = realloc(hr->alts, c2 * sizeof *na);
                if (na == NULL) {
                    rc = SL_ENOMEM;
                    free(old[a].v);   /* its first element lives on in the pair */
                    continue;
                }
                hr->alts = na;
                hr->cap_alts = c2;
            }
            sl_gram_seq q = old[a];
            memmove(q.v, q.v + 1, (q.n - 1) * sizeof *q.v);
            q.n--;
            work += q.n;
            hr->alts[hr->n_alts++] = q;
        }
        free(old);
        b->rules[r].alts = fresh;
        b->rules[r].n_alts = w;
        b->rules[r].cap_alts = n;
        free(group);
        free(helper);
        free(count);
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

/* ---- counted repetitions ------------------------------------------------------ */

/* The one non-empty alternative of a rule `x | empty` (either order), or -1. */
static int32_t chain_alt(const sl_gram_brule *r)
{
    if (r->n_alts != 2 || (r->alts[0].n == 0) == (r->alts[1].n == 0))
        return -1;
    return r->alts[0].n ? 0 : 1;
}

static bool same_elem(sl_gram_elem a, sl_gram_elem b) { return a.kind == b.kind && a.arg == b.arg; }

/* Fills g->rep_left / rep_top from the parser's marks, keeping a chain
 * rule only when its shape is what the marks promise: O_1 ::= u | empty,
 * O_j ::= u O_{j-1} | empty with the same u, O_{j-1} itself kept (rules of
 * a chain are numbered by count, so it was checked first). What fails the
 * check just does not share masks. */
static sl_status mark_chains(const sl_gram_build *b, sl_grammar *g)
{
    g->rep_left = calloc(g->n_elems ? g->n_elems : 1, sizeof *g->rep_left);
    g->rep_top = malloc((g->n_elems ? g->n_elems : 1) * sizeof *g->rep_top);
    bool *ok = calloc(b->n_rules ? b->n_rules : 1, sizeof *ok);
    if (g->rep_left == NULL || g->rep_top == NULL || ok == NULL) {
        free(ok);
        return SL_ENOMEM;
    }
    for (uint32_t e = 0; e < g->n_elems; e++)
        g->rep_top[e] = e;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        const sl_gram_brule *br = &b->rules[r];
        uint32_t j = br->rep_left, t = br->rep_top;
        if (j == 0 || t >= b->n_rules || b->rules[t].rep_top != t || b->rules[t].rep_left < 2)
            continue;
        int32_t a = chain_alt(br), at = chain_alt(&b->rules[t]);
        if (a < 0 || at < 0)
            continue;
        const sl_gram_seq *q = &br->alts[a], *qt = &b->rules[t].alts[at];
        if (!same_elem(q->v[0], qt->v[0]))
            continue;
        if (j == 1 ? q->n != 1
                   : q->n != 2 || q->v[1].kind != SL_GRAM_REF || q->v[1].arg >= b->n_rules || !ok[q->v[1].arg] ||
                         b->rules[q->v[1].arg].rep_left != j - 1 || b->rules[q->v[1].arg].rep_top != t)
            continue;
        ok[r] = true;
        uint32_t e0 = g->alt_start[g->rules[r].alt_lo + (uint32_t)a];
        uint32_t et = g->alt_start[g->rules[t].alt_lo + (uint32_t)at];
        for (uint32_t k = 0; k < q->n; k++) {
            g->rep_left[e0 + k] = j;
            g->rep_top[e0 + k] = et + k;
        }
    }
    free(ok);
    return SL_OK;
}

static sl_status flatten(sl_gram_build *b, uint32_t root, sl_grammar **out)
{
    uint32_t n_alts = 0, n_elems = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
            n_elems += b->rules[r].alts[a].n + 1;
    }
    sl_grammar *g = calloc(1, sizeof *g);
    if (g == NULL)
        return SL_ENOMEM;
    g->n_rules = b->n_rules;
    g->root = root;
    g->rules = calloc(b->n_rules, sizeof *g->rules);
    g->alt_start = malloc((n_alts ? n_alts : 1) * sizeof *g->alt_start);
    g->elems = malloc(n_elems * sizeof *g->elems);
    g->n_classes = b->n_classes;
    g->classes = malloc((b->n_classes ? b->n_classes : 1) * sizeof *g->classes);
    if (!g->rules || !g->alt_start || !g->elems || !g->classes) {
        sl_grammar_destroy(g);
        return SL_ENOMEM;
    }
    if (b->n_classes)
        memcpy(g->classes, b->classes, b->n_classes * sizeof *g->classes);
    uint32_t ai = 0, ei = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        sl_gram_brule *br = &b->rules[r];
        g->rules[r] = (sl_gram_rule){.name = br->name, .offset = br->offset, .alt_lo = ai, .n_alts = br->n_alts};
        br->name = NULL;   /* moved */
        for (uint32_t a = 0; a < br->n_alts; a++) {
            g->alt_start[ai++] = ei;
            if (br->alts[a].n)
                memcpy(g->elems + ei, br->alts[a].v, br->alts[a].n * sizeof *g->elems);
            ei += br->alts[a].n;
            g->elems[ei++] = (sl_gram_elem){SL_GRAM_END, 0};
        }
    }
    g->n_elems = ei;
    if (mark_chains(b, g) != SL_OK) {
        sl_grammar_destroy(g);
        return SL_ENOMEM;
    }
    *out = g;
    return SL_OK;
}

sl_status sl_grammar_create(const char *text, size_t len, sl_grammar **out, char *err, size_t err_len)
{
    *out = NULL;
    if (err && err_len)
        err[0] = 0;
    if (text == NULL && len > 0) {
        sl_gram_errf(err, err_len, "no grammar text");
        return SL_EINVAL;
    }
    sl_gram_build b;
    memset(&b, 0, sizeof b);
    sl_status rc = sl_gbnf_parse(text ? text : "", len, &b, err, err_len);
    uint32_t root = 0;
    if (rc == SL_OK)
        rc = check(&b, &root, err, err_len);
    if (rc == SL_OK && (rc = left_factor(&b)) == SL_ENOMEM)
        sl_gram_errf(err, err_len, "out of memory compiling the grammar");
    if (rc == SL_OK) {
        rc = flatten(&b, root, out);
        if (rc == SL_ENOMEM)
            sl_gram_errf(err, err_len, "out of memory compiling the grammar");
    }
    sl_gram_build_fini(&b);
    return rc;
}
