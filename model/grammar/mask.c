/* model/grammar/mask.c: the allowed-token bitmap of a matcher state, and
 * its per-matcher cache. Runs in the worker before each constrained draw.
 * The walk is depth first over the vocabulary trie, carrying the matcher
 * set reached by the bytes so far (sl_gram_step, whose transitions are
 * remembered, so a walk costs one hash lookup per trie edge once its
 * states are known, and a subtree dies at the first byte no stack takes).
 * Inside strings most of the trie is text the state takes character after
 * character; there the walk allows a whole subtree at once from per-node
 * summaries (ASCII bytes below, characters below, UTF-8 validity) and a
 * per-set summary (uniform_props, uniform_run), so a cold mask inside a
 * JSON string costs the token bits, not a visit per trie node.
 * Near the end of a bounded string the same summaries allow a subtree of
 * ASCII text by token length (the set where the run ends takes none of
 * its bytes).
 * Trade-off: the cache is keyed by the set id, exact by construction
 * (sets are interned by full comparison), and evicts by clock: a state
 * left and met again is a copy, a new one is a walk, except inside a
 * bounded repetition ({m,n}, maxLength): there a new count is its
 * reference's mask (the same state with its counters that have room at
 * full count, matcher.c sl_gram_share) with the tokens longer than the count left cleared, and
 * a walk of only the subtrees holding them. Those derived masks enter
 * the clock with their bit clear, so the references outlive them.
 * Behind this cache, a grammar that shares masks (mask_share.c) offers
 * every state another of its matchers walked: asked on a miss, before
 * any walk, and given every mask a walk completes. */
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar_internal.h"

/* Sharing a reference's mask is tried while at most 1/SHARE_LONG_MAX of
 * the tokens are longer than the bound (shared_mask), and counters are
 * reset only when they leave that many units (share_min, cache_setup). */
#define SHARE_LONG_MAX 4
/* On a vocabulary this small both ways are cheap: share at every bound
 * (which keeps that path covered by small test vocabularies). */
#define SHARE_ALWAYS_BELOW 4096

/* Sizes the cache for v (on the first mask, or when the vocabulary changes). */
static void cache_setup(sl_grammar_matcher *m, const sl_grammar_vocab *v, uint32_t words)
{
    if (m->cache_vocab == v && m->cache_words == words)
        return;
    for (uint32_t i = 0; i < m->cache_n; i++)
        if (m->cache[i].set >= 0)
            m->sets[m->cache[i].set].cache_slot = -1;
    sl_gram_cache_free(m);
    m->cache_vocab = v;
    m->cache_words = words;
    /* The least count worth resetting: most tokens must fit in it, or the
     * clearing and the walk of the longer ones cost a whole walk. */
    uint32_t min = 1;
    if (v->n_sorted >= SHARE_ALWAYS_BELOW)
        while (min < v->depth_max && (v->n_sorted - v->len_lo[min + 1]) * SHARE_LONG_MAX > v->n_sorted)
            min++;
    if (min != m->share_min) {   /* a different vocabulary: references change */
        for (uint32_t i = 0; i < m->n_sets; i++)
            m->sets[i].share_known = 0;
        m->share_min = min;
    }
    uint32_t n = SL_GRAMMAR_MASK_CACHE_BYTES / (words * 4u + (uint32_t)sizeof(sl_gram_cache_entry));
    if (n == 0)
        return;
    m->cache = malloc(n * sizeof *m->cache);
    m->cache_bits = malloc((size_t)n * words * sizeof *m->cache_bits);
    if (m->cache == NULL || m->cache_bits == NULL) {
        sl_gram_cache_free(m);   /* no cache: correct, slower */
        return;
    }
    m->cache_n = n;
    sl_gram_cache_clear(m);
}

/* used: the entry's clock bit to start with. A mask built from a
 * reference's starts clear, so the clock drops it before the references
 * themselves: one counted repetition stores a mask per count, and each
 * reference serves all of them. */
static void cache_store(sl_grammar_matcher *m, int32_t s, const uint32_t *allow, uint32_t used)
{
    if (m->cache_n == 0)
        return;
    for (;;) {
        sl_gram_cache_entry *e = &m->cache[m->cache_hand];
        if (e->set < 0 || !e->used)
            break;
        e->used = 0;
        m->cache_hand = (m->cache_hand + 1) % m->cache_n;
    }
    uint32_t slot = m->cache_hand;
    sl_gram_cache_entry *e = &m->cache[slot];
    if (e->set >= 0)
        m->sets[e->set].cache_slot = -1;
    *e = (sl_gram_cache_entry){s, used};
    m->sets[s].cache_slot = (int32_t)slot;
    memcpy(m->cache_bits + (size_t)slot * m->cache_words, allow, m->cache_words * sizeof *allow);
    m->cache_hand = (slot + 1) % m->cache_n;
}

static bool walk_scratch(sl_grammar_matcher *m, uint32_t depth)
{
    if (m->walk_cap >= depth)
        return true;
    int32_t *s = malloc(depth * sizeof *s);
    uint32_t *c = malloc(depth * 3 * sizeof *c);
    if (s == NULL || c == NULL) {
        free(s);
        free(c);
        return false;
    }
    free(m->walk_set);
    free(m->walk_child);
    m->walk_set = s;
    m->walk_child = c;
    m->walk_cap = depth;
    return true;
}

#define CLOSED_PAIRS_MAX 64   /* (set, decoder state) pairs explored */

/* Whether every valid multi-byte character leads from set s to set `to`
 * through live sets: a walk over (set, UTF-8 decoder state) pairs. */
static sl_status utf8_closed(sl_grammar_matcher *m, int32_t s, int32_t to, bool *closed)
{
    int32_t pset[CLOSED_PAIRS_MAX];
    uint8_t pst[CLOSED_PAIRS_MAX];
    int n = 1;
    pset[0] = s;
    pst[0] = SL_GRAM_UTF8_BOUNDARY;
    *closed = false;
    for (int i = 0; i < n; i++) {
        for (unsigned b = 0x80; b < 0x100; b++) {
            uint8_t u = sl_gram_utf8_next(pst[i], b);
            if (u == SL_GRAM_UTF8_INVALID)
                continue;
            int32_t t = sl_gram_step(m, pset[i], b);
            if (t == SL_GRAM_NOMEM)
                return SL_ENOMEM;
            if (t < 0)
                return SL_OK;
            if (u == SL_GRAM_UTF8_BOUNDARY) {
                if (t != to)
                    return SL_OK;
                continue;
            }
            int j = 0;
            while (j < n && !(pset[j] == t && pst[j] == u))
                j++;
            if (j == n) {
                if (n == CLOSED_PAIRS_MAX)
                    return SL_OK;
                pset[n] = t;
                pst[n++] = u;
            }
        }
    }
    *closed = true;
    return SL_OK;
}

/* Fills set s's umask, usucc and (for a loop) utf8_closed, once per set. */
static sl_status uniform_props(sl_grammar_matcher *m, int32_t s)
{
    int32_t succ[128];
    for (unsigned b = 0; b < 128; b++)
        if ((succ[b] = sl_gram_step(m, s, b)) == SL_GRAM_NOMEM)
            return SL_ENOMEM;
    /* the successor most ASCII bytes share */
    int32_t best = -1;
    int best_n = 0;
    for (unsigned b = 0; b < 128; b++) {
        if (succ[b] < 0 || succ[b] == best)
            continue;
        int n = 0;
        for (unsigned c = b; c < 128; c++)
            n += succ[c] == succ[b];
        if (n > best_n)
            best = succ[b], best_n = n;
        if (best_n >= 64)
            break;   /* a majority: no other can beat it */
    }
    uint64_t mask[2] = {0, 0};
    for (unsigned b = 0; b < 128; b++)
        if (best >= 0 && succ[b] == best)
            mask[b >> 6] |= 1ull << (b & 63);
    bool closed = false;
    if (best == s && utf8_closed(m, s, s, &closed) != SL_OK)
        return SL_ENOMEM;
    sl_gram_set *S = &m->sets[s];
    S->umask[0] = mask[0];
    S->umask[1] = mask[1];
    S->usucc = best;
    S->utf8_closed = closed;
    S->props_known = 1;
    return SL_OK;
}

#define RUN_CHAIN_MAX 4096

static bool same_umask(const sl_gram_set *a, const sl_gram_set *b)
{
    return a->umask[0] == b->umask[0] && a->umask[1] == b->umask[1];
}

/* run of set s (see sl_gram_set): follows usucc while umask stays. */
static sl_status uniform_run(sl_grammar_matcher *m, int32_t s)
{
    int32_t chain[RUN_CHAIN_MAX];
    int n = 0;
    uint32_t tail;   /* run of the set after the chain's last */
    int32_t x = s, last = -1;   /* the set after the whole run */
    for (;;) {
        if (!m->sets[x].props_known && uniform_props(m, x) != SL_OK)
            return SL_ENOMEM;
        chain[n++] = x;
        int32_t y = m->sets[x].usucc;
        if (y < 0) {
            tail = 0;
            break;
        }
        if (!m->sets[y].props_known && uniform_props(m, y) != SL_OK)
            return SL_ENOMEM;
        if (!same_umask(&m->sets[x], &m->sets[y])) {
            tail = 0;
            last = y;
            break;
        }
        if (m->sets[y].run != 0) {
            tail = m->sets[y].run;
            last = m->sets[y].run_end;
            break;
        }
        bool seen = false;   /* a loop: chains are short, so a scan will do */
        for (int i = 0; i < n && !seen; i++)
            seen = chain[i] == y;
        if (seen) {
            tail = UINT32_MAX;
            break;
        }
        if (n == RUN_CHAIN_MAX) {
            tail = 0;   /* conservative: shorter than it is */
            last = y;
            break;
        }
        x = y;
    }
    for (int i = n - 1; i >= 0; i--) {
        if (tail != UINT32_MAX)
            tail++;
        m->sets[chain[i]].run = tail;
        m->sets[chain[i]].run_end = tail == UINT32_MAX ? -1 : last;
    }
    return SL_OK;
}

#define TAIL_RUN_MAX 8   /* longest run whose sets tail_utf8 explores */

/* Fills s's tail_utf8 (see sl_gram_set): the end of a bounded string,
 * where the run is short, so exploring its few sets' multi-byte
 * characters costs less than the walks it saves. Each set of the run is
 * explored once: its own answer, and the rest of the run's, is cached. */
static sl_status tail_utf8(sl_grammar_matcher *m, int32_t s)
{
    const sl_gram_set *S = &m->sets[s];   /* stepping may move sets: not used past here */
    int32_t y = S->usucc;
    uint32_t run = S->run;
    if (run == 0 || run > TAIL_RUN_MAX || S->run_end < 0 || !S->props_known || y < 0) {
        m->sets[s].tail_utf8 = 1;
        return SL_OK;
    }
    if (run > 1 && m->sets[y].tail_utf8 == 0 && tail_utf8(m, y) != SL_OK)   /* depth <= TAIL_RUN_MAX */
        return SL_ENOMEM;
    if (run > 1 && m->sets[y].tail_utf8 != 2) {
        m->sets[s].tail_utf8 = 1;
        return SL_OK;
    }
    bool closed = false;
    if (utf8_closed(m, s, y, &closed) != SL_OK)
        return SL_ENOMEM;
    m->sets[s].tail_utf8 = closed ? 2 : 1;
    return SL_OK;
}

/* Depth-first walk from set s0, setting the bits of allowed tokens longer
 * than `skip` bytes (0: all); subtrees holding none are not entered. The
 * caller zeroed allow or filled it for the shorter tokens. Frame d (the
 * node at depth d): the children still to visit are nodes [next, end),
 * each child's subtree ending at its .end; set[d] is the set after the
 * node's bytes. */
static sl_status walk(sl_grammar_matcher *m, const sl_grammar_vocab *v, uint32_t *allow, int32_t s0, uint32_t skip,
                      uint64_t budget)
{
    if (!walk_scratch(m, v->depth_max + 1))
        return SL_ENOMEM;
    int32_t *set = m->walk_set;
    uint32_t *next = m->walk_child, *end = m->walk_child + m->walk_cap, *nch = m->walk_child + 2 * m->walk_cap;
    const sl_gram_tnode *nodes = v->nodes;
    const int32_t *sorted = v->sorted;
    int d = 0;
    set[0] = s0;
    next[0] = 1;
    end[0] = nodes[0].end;
    nch[0] = 0;
    while (d >= 0) {
        if (next[d] >= end[d]) {
            d--;
            continue;
        }
        uint32_t ci = next[d];
        const sl_gram_tnode *c = &nodes[ci];
        next[d] = c->end;
        if (v->deep[ci] <= skip)
            continue;
        uint32_t nchc = nch[d] + (c->byte < 0x80 || c->byte >= 0xC0);   /* characters to c */
        int32_t s = set[d];
        const sl_gram_set *S = &m->sets[s];
        if (!sl_gram_class_has(&S->any, c->byte))
            continue;
        int32_t t = S->dense >= 0 ? m->dense[(size_t)S->dense * 256 + c->byte] : SL_GRAM_UNKNOWN;
        if (t == SL_GRAM_UNKNOWN) {
            t = sl_gram_step(m, s, c->byte);
            if (m->work_total > budget)
                return SL_ERANGE;
        }
        if (t < 0) {
            if (t == SL_GRAM_DEAD)
                continue;
            return t == SL_GRAM_OVERFLOW ? SL_ERANGE : SL_ENOMEM;
        }
        if (c->end > ci + 1 && c->utf8 == SL_GRAM_UTF8_BOUNDARY && !c->bad_below && m->sets[t].dense >= 0) {
            /* Inside a string: when every ASCII byte below c is in t's
             * umask, and the chain of sets it leads through keeps that
             * umask for as many characters as the subtree holds (for
             * multi-byte characters: t loops on itself, utf8_closed), every
             * token below c is allowed; they are one run of sorted[],
             * preorder being sorted order. Checked only for hot sets (with
             * a dense row), whose summary pays off. */
            if (m->sets[t].run == 0 && uniform_run(m, t) != SL_OK)
                return SL_ENOMEM;
            const sl_gram_set *T = &m->sets[t];
            const uint64_t *b = v->below[ci];
            if ((b[0] & ~T->umask[0]) == 0 && (b[1] & ~T->umask[1]) == 0 && v->chars[ci] <= T->run &&
                (!c->high || T->utf8_closed)) {
                uint32_t hi = c->end < v->n_nodes ? nodes[c->end].tok_lo : v->n_sorted;
                for (uint32_t i = c->tok_lo; i < hi; i++) {
                    uint32_t tok = (uint32_t)sorted[i];
                    allow[tok >> 5] |= 1u << (tok & 31);
                }
                continue;
            }
            /* The end of a bounded string: text below c longer than the
             * run. Its first run characters advance along the run (ASCII
             * over the umask; multi-byte ones when the run is tail_utf8, or
             * when bytes >= 0x80 come only past the run), and then it
             * reaches run_end, where every byte that could start the next
             * character (ASCII below c, or a byte >= 0x80) is in no
             * stack's class, so dies: exactly the tokens of up to run
             * characters after c are allowed. One look at each token's
             * length instead of a visit per node. */
            if ((b[0] & ~T->umask[0]) == 0 && (b[1] & ~T->umask[1]) == 0 && T->run_end >= 0) {
                bool text = !c->high || v->hi_depth[ci] > (uint64_t)d + 1 + T->run;
                if (!text && T->run <= TAIL_RUN_MAX) {
                    if (T->tail_utf8 == 0 && tail_utf8(m, t) != SL_OK)
                        return SL_ENOMEM;
                    T = &m->sets[t];   /* tail_utf8 may have moved sets */
                    text = T->tail_utf8 == 2;
                }
                const sl_gram_set *E = &m->sets[T->run_end];
                if (text && (b[0] & E->any.w[0]) == 0 && (b[1] & E->any.w[1]) == 0 &&
                    (!c->high || (E->any.w[2] | E->any.w[3]) == 0)) {
                    uint32_t hi = c->end < v->n_nodes ? nodes[c->end].tok_lo : v->n_sorted;
                    uint64_t lim = (uint64_t)nchc + T->run;
                    for (uint32_t i = c->tok_lo; i < hi; i++) {
                        uint32_t tok = (uint32_t)sorted[i];
                        if ((uint64_t)v->tok_chars[tok] <= lim)
                            allow[tok >> 5] |= 1u << (tok & 31);
                    }
                    continue;
                }
            }
        }
        for (uint32_t i = 0; i < c->n_tok && (uint32_t)d + 1 > skip; i++) {
            uint32_t tok = (uint32_t)sorted[c->tok_lo + i];
            allow[tok >> 5] |= 1u << (tok & 31);
        }
        if (c->end > ci + 1) {
            d++;
            set[d] = t;
            next[d] = ci + 1;
            end[d] = c->end;
            nch[d] = nchc;
        }
    }
    return SL_OK;
}

/* Fills allow for the tokens of set s's share_bound bytes or fewer from
 * its reference's mask (walked and cached first when not cached), or
 * leaves allow zero with share_bound 0 when s has no reference or sharing
 * would not pay: clearing the longer tokens costs one bit each, and the
 * walk of them costs nearly a full walk, so a bound that most tokens
 * exceed gains nothing. */
static sl_status shared_mask(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t s, uint32_t *allow,
                             uint32_t words, uint64_t budget)
{
    int32_t ref;
    uint32_t bound;
    sl_status rc = sl_gram_share(m, s, &ref, &bound);
    if (rc != SL_OK)
        return rc;
    if (ref < 0)
        return SL_OK;
    uint32_t lo = bound + 1 > v->depth_max + 1 ? v->depth_max + 1 : bound + 1;
    if (v->n_sorted >= SHARE_ALWAYS_BELOW && (v->n_sorted - v->len_lo[lo]) * SHARE_LONG_MAX > v->n_sorted) {
        m->sets[s].share_bound = 0;   /* this set walks alone from now on */
        return SL_OK;
    }
    int32_t slot = m->sets[ref].cache_slot;
    if (slot >= 0) {
        memcpy(allow, m->cache_bits + (size_t)slot * words, words * sizeof *allow);
        m->cache[slot].used = 1;
    } else if (sl_gram_share_lookup(m, v, ref, allow)) {
        cache_store(m, ref, allow, 1);
    } else {
        if ((rc = walk(m, v, allow, ref, 0, budget)) != SL_OK)
            return rc;
        cache_store(m, ref, allow, 1);
        sl_gram_share_insert(m, v, ref, allow);
    }
    for (uint32_t i = v->len_lo[lo]; i < v->n_sorted; i++) {
        uint32_t tok = (uint32_t)v->by_len[i];
        allow[tok >> 5] &= ~(1u << (tok & 31));
    }
    m->stat_shared++;
    return SL_OK;
}

sl_status sl_grammar_matcher_mask(sl_grammar_matcher *m, const sl_grammar_vocab *v, uint32_t *allow)
{
    uint32_t words = ((uint32_t)v->n_vocab + 31) / 32;
    memset(allow, 0, words * sizeof *allow);
    sl_status rc = sl_gram_maybe_compact(m);
    if (rc != SL_OK)
        return rc;
    cache_setup(m, v, words);
    int32_t s = m->cur;
    int32_t slot = m->sets[s].cache_slot;
    if (slot >= 0) {
        memcpy(allow, m->cache_bits + (size_t)slot * words, words * sizeof *allow);
        m->cache[slot].used = 1;
        m->stat_hits++;
        return SL_OK;
    }
    m->stat_misses++;
    if (sl_gram_share_lookup(m, v, s, allow)) {   /* another matcher of the grammar met this state */
        m->stat_cross++;
        cache_store(m, s, allow, 1);
        return SL_OK;
    }
    uint64_t budget = m->work_total + SL_GRAM_MASK_WORK_MAX;   /* for both walks together */
    rc = shared_mask(m, v, s, allow, words, budget);
    if (rc == SL_OK)
        rc = walk(m, v, allow, s, m->sets[s].share_bound, budget);
    if (rc != SL_OK) {
        memset(allow, 0, words * sizeof *allow);
        return rc;
    }
    cache_store(m, s, allow, m->sets[s].share_bound == 0);
    sl_gram_share_insert(m, v, s, allow);
    return SL_OK;
}

void sl_grammar_matcher_cache_stats(const sl_grammar_matcher *m, uint64_t *hits, uint64_t *misses)
{
    *hits = m->stat_hits;
    *misses = m->stat_misses;
}

uint64_t sl_grammar_matcher_shared_masks(const sl_grammar_matcher *m) { return m->stat_shared; }

uint64_t sl_grammar_matcher_cross_masks(const sl_grammar_matcher *m) { return m->stat_cross; }
