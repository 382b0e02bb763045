/* model/grammar/matcher.c: the incremental GBNF matcher, a pushdown walk
 * over the byte-level rules of grammar.c, run by the worker once per
 * constrained sequence (and by front ends only to compile). The trade-off:
 * every stack, every set of stacks and every transition between sets is
 * interned and kept, which costs memory (bounded, then compacted) and buys
 * two things: a state met again is a small integer, so the mask cache and
 * "state unchanged after a rejected byte" are free, and the mask walk of
 * mask.c is a lazily built DFA (one hash lookup per trie edge once a
 * transition is known) rather than a re-expansion of stacks per edge.
 *
 * The algorithm
 * -------------
 * A position is an index into g->elems: the element a parse will read
 * next. A stack is a chain of nodes; node = (pos, parent): the top node's
 * pos is a byte class (SL_GRAM_TERM) to match, each parent's pos is where
 * to continue once the rule below it ends (a return address). Parent -1
 * is "the root rule itself": reaching its end makes the state accepting.
 * A state (a "set") is the sorted array of the top nodes of all live
 * stacks plus that accepting bit: the parse is ambiguous up to
 * SL_GRAMMAR_STACKS_MAX stacks, which is how GBNF's unbounded lookahead is
 * handled without backtracking.
 *
 * One byte b from set S (sl_gram_step): every stack whose top class holds b
 * moves to (pos + 1, parent), and that node is "closed": an END pops to the
 * parent (or sets accepting at the root), a REF pushes a return node
 * (pos + 1, parent) and continues at the start of each alternative of the
 * referenced rule, a TERM is a new top. The closure is a work list, not
 * recursion, so nesting depth costs heap, not C stack.
 *
 * Invariants
 * ----------
 * 1. Nodes are hash-consed: equal (pos, parent) pairs are one id, so equal
 *    stacks are equal ids and a set is canonical once sorted; sets are
 *    interned by full comparison of their ids (not by hash alone), so set
 *    id equality is state equality.
 * 2. Closure ends: grammar.c rejected left recursion, so a chain of REF
 *    expansions without reading a byte never repeats a rule; and each node
 *    is closed at most once per step (node_stamp), which also bounds the work
 *    on ambiguous grammars whose paths re-converge. The work of one step is
 *    also capped (WORK_MAX); reaching it, or more than
 *    SL_GRAMMAR_STACKS_MAX tops, is SL_GRAM_OVERFLOW.
 * 3. Tail calls do not grow stacks: a REF that is the last element of its
 *    alternative pushes no return node (its parent is the return), so the
 *    right recursion that repetitions compile to (R ::= x R | empty) runs in
 *    constant stack depth.
 * 4. A top node's class is never empty (such stacks are dropped when
 *    closing), so a set can continue iff it has a stack.
 * 5. Nothing is freed while the matcher lives except by compaction
 *    (sl_gram_maybe_compact), which runs only at the start of an accept or
 *    mask call: it keeps the current set's stacks, renumbers, and drops every
 *    other set, transition and cached mask.
 *
 * Counted repetitions
 * --------------------
 * x{m,n} is m copies of x, then a chain O_j ::= x O_{j-1} | empty for
 * j = n - m down to 1: every count is its own rule, so every position
 * inside a maxLength string is a different set, met once, and a mask
 * cache keyed by set never hits there. The chain is kept (it is what the
 * stack walk above needs, and what limits and compaction already bound)
 * and the sets of one chain share their masks instead: grammar.c marks
 * each chain element with the count it leaves (rep_left) and its twin in
 * the largest rule (rep_top); sl_gram_share maps a set to its reference,
 * the same stacks with every counter that has room back at full count,
 * and gives the byte length up to which both allow the same tokens (the
 * proof is at sl_gram_share). mask.c then takes the reference's cached mask for the
 * short tokens and walks only the trie subtrees that hold longer ones.
 *
 * State: created (the closure of root's alternatives) -> accept_bytes ->
 * ... ; a rejected byte leaves `cur` as it was (the sets reached on the way
 * stay interned, harmless). */
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar_internal.h"

#define WORK_MAX (64u * SL_GRAMMAR_STACKS_MAX)   /* node closings per step */
/* Past these the matcher compacts at its next call (about 40 MiB in all,
 * per sequence: a JSON generation stays in the thousands). */
#define NODES_SOFT_MAX (1u << 20)
#define SETS_SOFT_MAX (1u << 17)
#define POOL_SOFT_MAX (1u << 21)
#define TRANS_SOFT_MAX (1u << 20)
#define DENSE_AFTER 16      /* transitions before a set gets a dense row */
#define DENSE_MAX 4096      /* dense rows (4 MiB) */

static inline uint32_t mix32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* ---- nodes -------------------------------------------------------------------- */

static bool node_rehash(sl_grammar_matcher *m, uint32_t cap)
{
    int32_t *h = malloc(cap * sizeof *h);
    if (h == NULL)
        return false;
    memset(h, 0xff, cap * sizeof *h);
    for (uint32_t i = 0; i < m->n_nodes; i++) {
        uint32_t k = mix32((uint64_t)(uint32_t)m->node_pos[i] << 32 | (uint32_t)m->node_parent[i]) & (cap - 1);
        while (h[k] >= 0)
            k = (k + 1) & (cap - 1);
        h[k] = (int32_t)i;
    }
    free(m->node_hash);
    m->node_hash = h;
    m->node_hash_cap = cap;
    return true;
}

/* The id of (pos, parent), made when new; -1 when out of memory. */
static int32_t node_intern(sl_grammar_matcher *m, int32_t pos, int32_t parent)
{
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    uint32_t mask = m->node_hash_cap - 1, k = mix32(key) & mask;
    for (;; k = (k + 1) & mask) {
        int32_t id = m->node_hash[k];
        if (id < 0)
            break;
        if (m->node_pos[id] == pos && m->node_parent[id] == parent)
            return id;
    }
    if (m->n_nodes == m->cap_nodes) {
        uint32_t cap = m->cap_nodes * 2;
        int32_t *p = realloc(m->node_pos, cap * sizeof *p);
        if (p == NULL)
            return -1;
        m->node_pos = p;
        int32_t *q = realloc(m->node_parent, cap * sizeof *q);
        if (q == NULL)
            return -1;
        m->node_parent = q;
        uint32_t *s = realloc(m->node_stamp, cap * sizeof *s);
        if (s == NULL)
            return -1;
        m->node_stamp = s;
        m->cap_nodes = cap;
    }
    int32_t id = (int32_t)m->n_nodes++;
    m->node_pos[id] = pos;
    m->node_parent[id] = parent;
    m->node_stamp[id] = 0;
    if (m->n_nodes * 2 > m->node_hash_cap) {
        if (!node_rehash(m, m->node_hash_cap * 2)) {
            m->n_nodes--;
            return -1;
        }
    } else {
        m->node_hash[k] = id;
    }
    return id;
}

/* ---- sets ---------------------------------------------------------------------- */

static uint32_t set_hash_of(const int32_t *ids, uint32_t n, uint32_t accepting)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ accepting;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 0x100000001b3ull;
    return mix32(h ^ n);
}

static bool set_rehash(sl_grammar_matcher *m, uint32_t cap)
{
    int32_t *h = malloc(cap * sizeof *h);
    if (h == NULL)
        return false;
    memset(h, 0xff, cap * sizeof *h);
    for (uint32_t i = 0; i < m->n_sets; i++) {
        uint32_t k = m->sets[i].hash & (cap - 1);
        while (h[k] >= 0)
            k = (k + 1) & (cap - 1);
        h[k] = (int32_t)i;
    }
    free(m->set_hash);
    m->set_hash = h;
    m->set_hash_cap = cap;
    return true;
}

/* The id of the set {ids (sorted, distinct), accepting}; -1 out of memory. */
static int32_t set_intern(sl_grammar_matcher *m, const int32_t *ids, uint32_t n, bool accepting)
{
    uint32_t hash = set_hash_of(ids, n, accepting), mask = m->set_hash_cap - 1, k = hash & mask;
    for (;; k = (k + 1) & mask) {
        int32_t id = m->set_hash[k];
        if (id < 0)
            break;
        const sl_gram_set *s = &m->sets[id];
        if (s->hash == hash && s->n == n && s->accepting == accepting &&
            memcmp(m->set_pool + s->off, ids, n * sizeof *ids) == 0)
            return id;
    }
    if (m->pool_n + n > m->pool_cap) {
        uint32_t cap = m->pool_cap;
        while (m->pool_n + n > cap)
            cap *= 2;
        int32_t *p = realloc(m->set_pool, cap * sizeof *p);
        if (p == NULL)
            return -1;
        m->set_pool = p;
        m->pool_cap = cap;
    }
    if (m->n_sets == m->cap_sets) {
        uint32_t cap = m->cap_sets * 2;
        sl_gram_set *p = realloc(m->sets, cap * sizeof *p);
        if (p == NULL)
            return -1;
        m->sets = p;
        m->cap_sets = cap;
    }
    int32_t id = (int32_t)m->n_sets;
    sl_gram_set *s = &m->sets[id];
    memset(s, 0, sizeof *s);
    s->off = m->pool_n;
    s->n = n;
    s->hash = hash;
    s->accepting = accepting;
    s->cache_slot = -1;
    s->dense = -1;
    for (uint32_t i = 0; i < n; i++) {
        const sl_gram_class *c = &m->g->classes[m->g->elems[m->node_pos[ids[i]]].arg];
        for (int w = 0; w < 4; w++)
            s->any.w[w] |= c->w[w];
    }
    if (n)
        memcpy(m->set_pool + m->pool_n, ids, n * sizeof *ids);
    m->pool_n += n;
    m->n_sets++;
    if (m->n_sets * 2 > m->set_hash_cap) {
        if (!set_rehash(m, m->set_hash_cap * 2)) {
            m->n_sets--;
            m->pool_n -= n;
            return -1;
        }
    } else {
        m->set_hash[k] = id;
    }
    return id;
}

/* ---- closure --------------------------------------------------------------------- */

static void todo_push(sl_grammar_matcher *m, int32_t id)
{
    if (id < 0) {
        m->step_nomem = true;
        return;
    }
    if (m->todo_n == m->todo_cap) {
        uint32_t cap = m->todo_cap * 2;
        int32_t *t = realloc(m->todo, cap * sizeof *t);
        if (t == NULL) {
            m->step_nomem = true;
            return;
        }
        m->todo = t;
        m->todo_cap = cap;
    }
    m->todo[m->todo_n++] = id;
}

static void out_push(sl_grammar_matcher *m, int32_t id)
{
    if (m->out_n == m->out_cap) {
        uint32_t cap = m->out_cap * 2;
        int32_t *t = realloc(m->out, cap * sizeof *t);
        if (t == NULL) {
            m->step_nomem = true;
            return;
        }
        m->out = t;
        m->out_cap = cap;
    }
    m->out[m->out_n++] = id;
    if (m->out_n > SL_GRAMMAR_STACKS_MAX)
        m->step_overflow = true;
}

static void step_begin(sl_grammar_matcher *m)
{
    if (++m->stamp == 0) {   /* wrapped: old marks could collide */
        memset(m->node_stamp, 0, m->n_nodes * sizeof *m->node_stamp);
        m->stamp = 1;
    }
    m->work_total += m->work;
    m->out_n = m->todo_n = m->work = 0;
    m->step_accepting = m->step_overflow = m->step_nomem = false;
}

/* Closes every node on the work list (invariants 2-4). */
static void close_all(sl_grammar_matcher *m)
{
    const sl_grammar *g = m->g;
    while (m->todo_n > 0 && !m->step_overflow && !m->step_nomem) {
        int32_t id = m->todo[--m->todo_n];
        for (;;) {
            if (m->node_stamp[id] == m->stamp)
                break;
            m->node_stamp[id] = m->stamp;
            if (++m->work > WORK_MAX) {
                m->step_overflow = true;
                break;
            }
            int32_t pos = m->node_pos[id], parent = m->node_parent[id];
            sl_gram_elem e = g->elems[pos];
            if (e.kind == SL_GRAM_TERM) {
                const sl_gram_class *c = &g->classes[e.arg];
                if (c->w[0] | c->w[1] | c->w[2] | c->w[3])
                    out_push(m, id);
                break;
            }
            if (e.kind == SL_GRAM_END) {
                if (parent < 0) {
                    m->step_accepting = true;
                    break;
                }
                id = parent;
                continue;
            }
            int32_t ret = parent;
            if (g->elems[pos + 1].kind != SL_GRAM_END && (ret = node_intern(m, pos + 1, parent)) < 0) {
                m->step_nomem = true;
                break;
            }
            const sl_gram_rule *r = &g->rules[e.arg];
            for (uint32_t a = r->n_alts; a-- > 0;)
                todo_push(m, node_intern(m, (int32_t)g->alt_start[r->alt_lo + a], ret));
            break;
        }
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void sort_ids(int32_t *v, uint32_t n)
{
    if (n > 16) {
        qsort(v, n, sizeof *v, cmp_i32);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        int32_t x = v[i];
        uint32_t j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* The set of the closed step, or a SL_GRAM_* code. */
static int32_t step_end(sl_grammar_matcher *m)
{
    close_all(m);
    if (m->step_nomem)
        return SL_GRAM_NOMEM;
    if (m->step_overflow)
        return SL_GRAM_OVERFLOW;
    if (m->out_n == 0 && !m->step_accepting)
        return SL_GRAM_DEAD;
    sort_ids(m->out, m->out_n);
    int32_t s = set_intern(m, m->out, m->out_n, m->step_accepting);
    return s < 0 ? SL_GRAM_NOMEM : s;
}

/* ---- transitions ------------------------------------------------------------------ */

static bool tr_rehash(sl_grammar_matcher *m, uint32_t cap)
{
    uint64_t *k2 = calloc(cap, sizeof *k2);
    int32_t *v2 = malloc(cap * sizeof *v2);
    if (k2 == NULL || v2 == NULL) {
        free(k2);
        free(v2);
        return false;
    }
    for (uint32_t i = 0; i < m->tr_cap; i++) {
        if (m->tr_key[i] == 0)
            continue;
        uint32_t k = mix32(m->tr_key[i]) & (cap - 1);
        while (k2[k] != 0)
            k = (k + 1) & (cap - 1);
        k2[k] = m->tr_key[i];
        v2[k] = m->tr_val[i];
    }
    free(m->tr_key);
    free(m->tr_val);
    m->tr_key = k2;
    m->tr_val = v2;
    m->tr_cap = cap;
    return true;
}

/* Gives set s a dense row when it is hot; failure only means it stays on
 * the hash table. */
static void dense_row(sl_grammar_matcher *m, int32_t s)
{
    if (m->n_dense >= DENSE_MAX)
        return;
    if (m->n_dense == m->cap_dense) {
        uint32_t cap = m->cap_dense ? m->cap_dense * 2 : 16;
        int32_t *d = realloc(m->dense, (size_t)cap * 256 * sizeof *d);
        if (d == NULL)
            return;
        m->dense = d;
        m->cap_dense = cap;
    }
    int32_t *row = m->dense + (size_t)m->n_dense * 256;
    for (int i = 0; i < 256; i++)
        row[i] = SL_GRAM_UNKNOWN;
    m->sets[s].dense = (int32_t)m->n_dense++;
}

int32_t sl_gram_step(sl_grammar_matcher *m, int32_t s, unsigned b)
{
    if (!sl_gram_class_has(&m->sets[s].any, b))
        return SL_GRAM_DEAD;
    if (m->sets[s].dense >= 0) {
        int32_t t = m->dense[(size_t)m->sets[s].dense * 256 + b];
        if (t != SL_GRAM_UNKNOWN)
            return t;
    }
    uint64_t key = ((uint64_t)(uint32_t)s << 8 | b) + 1;
    uint32_t mask = m->tr_cap - 1, k = mix32(key) & mask;
    for (; m->tr_key[k] != 0; k = (k + 1) & mask)
        if (m->tr_key[k] == key)
            return m->tr_val[k];
    step_begin(m);
    const sl_grammar *g = m->g;
    uint32_t off = m->sets[s].off, n = m->sets[s].n;
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = m->set_pool[off + i];
        int32_t pos = m->node_pos[id];
        if (sl_gram_class_has(&g->classes[g->elems[pos].arg], b))
            todo_push(m, node_intern(m, pos + 1, m->node_parent[id]));
    }
    int32_t t = step_end(m);
    if (t == SL_GRAM_NOMEM)
        return t;   /* not remembered: it may work next time */
    if (m->sets[s].dense >= 0) {
        m->dense[(size_t)m->sets[s].dense * 256 + b] = t;
        return t;
    }
    if (++m->sets[s].n_tr == DENSE_AFTER)
        dense_row(m, s);
    if (m->sets[s].dense >= 0) {
        m->dense[(size_t)m->sets[s].dense * 256 + b] = t;
        return t;
    }
    if ((m->tr_n + 1) * 2 > m->tr_cap) {
        if (!tr_rehash(m, m->tr_cap * 2))
            return t;   /* correct, just not remembered */
        mask = m->tr_cap - 1;
        for (k = mix32(key) & mask; m->tr_key[k] != 0; k = (k + 1) & mask) {
        }
    }
    m->tr_key[k] = key;
    m->tr_val[k] = t;
    m->tr_n++;
    return t;
}

/* ---- counted repetitions ---------------------------------------------------------- */

/* Why a set at count k may borrow the mask of the set at full count: a
 * stack inside O_j (x{0,n}'s chain, grammar.c mark_chains) may still start
 * j - 1 units after the one in progress; the same stack at O_top may start
 * more. Languages only grow with the count, and a token of L bytes starts
 * at most L non-empty units of any repetition (empty ones can be dropped
 * from a parse), so while every counter that differs between the two sets
 * leaves at least L units the token is allowed from one set exactly when
 * it is from the other. Only counters leaving m->share_min units or more
 * are reset (the others stay as they are and bound nothing: a string near
 * the end of a short array still shares with the same item at full
 * length); share_bound is the least (j - 1) over the reset ones. */
sl_status sl_gram_share(sl_grammar_matcher *m, int32_t s, int32_t *ref, uint32_t *bound)
{
    if (m->sets[s].share_known) {
        *ref = m->sets[s].share_ref;
        *bound = m->sets[s].share_bound;
        return SL_OK;
    }
    *ref = -1;
    *bound = 0;
    const sl_grammar *g = m->g;
    uint32_t n = m->sets[s].n, least = UINT32_MAX;
    bool moved = false;
    for (uint32_t i = 0; i < n; i++)
        for (int32_t id = m->set_pool[m->sets[s].off + i]; id >= 0; id = m->node_parent[id]) {
            uint32_t pos = (uint32_t)m->node_pos[id];
            if (g->rep_left[pos] == 0 || g->rep_top[pos] == pos || g->rep_left[pos] - 1 < m->share_min)
                continue;
            if (g->rep_left[pos] - 1 < least)
                least = g->rep_left[pos] - 1;
            moved = true;
        }
    if (moved && least > 0) {
        /* rebuild each stack bottom up with its positions moved to the top rule */
        int32_t *ids = malloc(n * sizeof *ids);
        if (ids == NULL)
            return SL_ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t depth = 0;
            for (int32_t id = m->set_pool[m->sets[s].off + i]; id >= 0; id = m->node_parent[id]) {
                if (depth == m->todo_cap) {
                    int32_t *t = realloc(m->todo, m->todo_cap * 2 * sizeof *t);
                    if (t == NULL) {
                        free(ids);
                        return SL_ENOMEM;
                    }
                    m->todo = t;
                    m->todo_cap *= 2;
                }
                m->todo[depth++] = m->node_pos[id];
            }
            int32_t top = -1;
            while (depth-- > 0) {
                uint32_t pos = (uint32_t)m->todo[depth];
                if (g->rep_left[pos] != 0 && g->rep_left[pos] - 1 >= m->share_min)
                    pos = g->rep_top[pos];
                if ((top = node_intern(m, (int32_t)pos, top)) < 0) {
                    free(ids);
                    return SL_ENOMEM;
                }
            }
            ids[i] = top;
        }
        sort_ids(ids, n);
        uint32_t w = 0;   /* two stacks may have become one */
        for (uint32_t i = 0; i < n; i++)
            if (w == 0 || ids[w - 1] != ids[i])
                ids[w++] = ids[i];
        int32_t r = set_intern(m, ids, w, m->sets[s].accepting != 0);
        free(ids);
        if (r < 0)
            return SL_ENOMEM;
        if (r != s) {
            *ref = r;
            *bound = least;
        }
    }
    sl_gram_set *S = &m->sets[s];   /* set_intern may have moved sets */
    S->share_ref = *ref;
    S->share_bound = *bound;
    S->share_known = 1;
    return SL_OK;
}

/* ---- lifecycle -------------------------------------------------------------------- */

static void tables_free(sl_grammar_matcher *m)
{
    free(m->node_pos);
    free(m->node_parent);
    free(m->node_stamp);
    free(m->node_hash);
    free(m->sets);
    free(m->set_pool);
    free(m->set_hash);
    free(m->tr_key);
    free(m->tr_val);
    free(m->dense);
    m->dense = NULL;
    m->n_dense = m->cap_dense = 0;
    m->node_pos = m->node_parent = m->node_hash = m->set_pool = m->set_hash = m->tr_val = NULL;
    m->node_stamp = NULL;
    m->sets = NULL;
    m->tr_key = NULL;
}

static bool tables_alloc(sl_grammar_matcher *m)
{
    m->cap_nodes = 1024;
    m->node_hash_cap = 4096;
    m->cap_sets = 256;
    m->set_hash_cap = 1024;
    m->pool_cap = 4096;
    m->tr_cap = 4096;
    m->n_nodes = m->n_sets = m->pool_n = m->tr_n = 0;
    m->node_pos = malloc(m->cap_nodes * sizeof *m->node_pos);
    m->node_parent = malloc(m->cap_nodes * sizeof *m->node_parent);
    m->node_stamp = malloc(m->cap_nodes * sizeof *m->node_stamp);
    m->node_hash = malloc(m->node_hash_cap * sizeof *m->node_hash);
    m->sets = malloc(m->cap_sets * sizeof *m->sets);
    m->set_pool = malloc(m->pool_cap * sizeof *m->set_pool);
    m->set_hash = malloc(m->set_hash_cap * sizeof *m->set_hash);
    m->tr_key = calloc(m->tr_cap, sizeof *m->tr_key);
    m->tr_val = malloc(m->tr_cap * sizeof *m->tr_val);
    if (!m->node_pos || !m->node_parent || !m->node_stamp || !m->node_hash || !m->sets || !m->set_pool ||
        !m->set_hash || !m->tr_key || !m->tr_val)
        return false;
    memset(m->node_hash, 0xff, m->node_hash_cap * sizeof *m->node_hash);
    memset(m->set_hash, 0xff, m->set_hash_cap * sizeof *m->set_hash);
    m->stamp = 0;
    return true;
}

/* The mask cache's storage is freed and emptied here (mask.c fills it), so
 * that calls go one way: mask.c -> matcher.c. */
void sl_gram_cache_clear(sl_grammar_matcher *m)
{
    for (uint32_t i = 0; i < m->cache_n; i++)
        m->cache[i] = (sl_gram_cache_entry){-1, 0};
    m->cache_hand = 0;
}

void sl_gram_cache_free(sl_grammar_matcher *m)
{
    free(m->cache);
    free(m->cache_bits);
    m->cache = NULL;
    m->cache_bits = NULL;
    m->cache_n = 0;
}

void sl_grammar_matcher_destroy(sl_grammar_matcher *m)
{
    if (m == NULL)
        return;
    tables_free(m);
    free(m->out);
    free(m->todo);
    free(m->walk_set);
    free(m->walk_child);
    free(m->key_buf);
    sl_gram_cache_free(m);
    free(m);
}

sl_status sl_grammar_matcher_create(const sl_grammar *g, sl_grammar_matcher **out)
{
    *out = NULL;
    if (g == NULL)
        return SL_EINVAL;
    sl_grammar_matcher *m = calloc(1, sizeof *m);
    if (m == NULL)
        return SL_ENOMEM;
    m->g = g;
    m->out_cap = m->todo_cap = 64;
    m->out = malloc(m->out_cap * sizeof *m->out);
    m->todo = malloc(m->todo_cap * sizeof *m->todo);
    if (!m->out || !m->todo || !tables_alloc(m)) {
        sl_grammar_matcher_destroy(m);
        return SL_ENOMEM;
    }
    step_begin(m);
    const sl_gram_rule *r = &g->rules[g->root];
    for (uint32_t a = r->n_alts; a-- > 0;)
        todo_push(m, node_intern(m, (int32_t)g->alt_start[r->alt_lo + a], -1));
    int32_t s = step_end(m);
    if (s < 0) {
        sl_grammar_matcher_destroy(m);
        return s == SL_GRAM_NOMEM ? SL_ENOMEM : SL_ERANGE;   /* DEAD cannot be: root is productive */
    }
    m->cur = s;
    *out = m;
    return SL_OK;
}

sl_status sl_gram_maybe_compact(sl_grammar_matcher *m)
{
    if (m->n_nodes < NODES_SOFT_MAX && m->n_sets < SETS_SOFT_MAX && m->pool_n < POOL_SOFT_MAX &&
        m->tr_n < TRANS_SOFT_MAX)
        return SL_OK;
    /* Save the current stacks as position paths, bottom first. */
    const sl_gram_set *cs = &m->sets[m->cur];
    uint32_t n = cs->n, total = 0;
    bool accepting = cs->accepting;
    for (uint32_t i = 0; i < n; i++)
        for (int32_t id = m->set_pool[cs->off + i]; id >= 0; id = m->node_parent[id])
            total++;
    int32_t *paths = malloc((total + n + 1) * sizeof *paths);
    if (paths == NULL)
        return SL_ENOMEM;
    uint32_t w = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = 0;
        for (int32_t id = m->set_pool[cs->off + i]; id >= 0; id = m->node_parent[id])
            len++;
        paths[w++] = (int32_t)len;
        uint32_t j = w + len;
        for (int32_t id = m->set_pool[cs->off + i]; id >= 0; id = m->node_parent[id])
            paths[--j] = m->node_pos[id];
        w += len;
    }
    tables_free(m);
    sl_gram_cache_clear(m);
    sl_status rc = tables_alloc(m) ? SL_OK : SL_ENOMEM;
    m->out_n = 0;
    for (uint32_t i = 0, r = 0; i < n && rc == SL_OK; i++) {
        uint32_t len = (uint32_t)paths[r++];
        int32_t top = -1;
        for (uint32_t j = 0; j < len && rc == SL_OK; j++)
            if ((top = node_intern(m, paths[r + j], top)) < 0)
                rc = SL_ENOMEM;
        r += len;
        if (rc == SL_OK)
            out_push(m, top);
    }
    /* node ids were renumbered in path order: sort again */
    if (rc == SL_OK) {
        sort_ids(m->out, m->out_n);
        int32_t s = set_intern(m, m->out, m->out_n, accepting);
        if (s < 0)
            rc = SL_ENOMEM;
        else
            m->cur = s;
    }
    m->out_n = 0;
    free(paths);
    /* Out of memory leaves the matcher unusable; the caller fails the
     * sequence, as it would for any SL_ENOMEM. */
    return rc;
}

/* ---- API ----------------------------------------------------------------------------- */

static sl_status code_of(int32_t t)
{
    return t == SL_GRAM_DEAD ? SL_EINVAL : t == SL_GRAM_OVERFLOW ? SL_ERANGE : SL_ENOMEM;
}

sl_status sl_grammar_matcher_accept_bytes(sl_grammar_matcher *m, const char *s, size_t n)
{
    sl_status rc = sl_gram_maybe_compact(m);
    if (rc != SL_OK)
        return rc;
    int32_t t = m->cur;
    for (size_t i = 0; i < n; i++) {
        t = sl_gram_step(m, t, (uint8_t)s[i]);
        if (t < 0)
            return code_of(t);
    }
    m->cur = t;
    return SL_OK;
}

sl_status sl_grammar_matcher_accept_token(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t t)
{
    if (t < 0 || t >= v->n_vocab || v->tok_len[t] <= 0)
        return SL_EINVAL;
    return sl_grammar_matcher_accept_bytes(m, v->bytes + v->tok_off[t], (size_t)v->tok_len[t]);
}

bool sl_grammar_matcher_accepting(const sl_grammar_matcher *m) { return m->sets[m->cur].accepting != 0; }

bool sl_grammar_matcher_can_continue(const sl_grammar_matcher *m) { return m->sets[m->cur].n > 0; }
