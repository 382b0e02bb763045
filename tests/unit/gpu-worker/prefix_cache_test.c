/* tests/unit/gpu-worker/prefix_cache_test.c: gpu-worker/prefix_cache.c over a
 * real block pool: the hash chain (a hit needs the same tokens after the same
 * prefix), reference counts (cached blocks outlive their sequences and are
 * shared read-only), LRU eviction, and a randomized run that checks every
 * invariant and every hit's contents after each call. A shadow array plays
 * the backend: the token written at each physical position. */
#include <criterion/criterion.h>
#include <string.h>

#include "gpu-worker/prefix_cache.h"
#include "tests/seeded.h"

#define BS 4

typedef struct {
    sl_kv_blocks kv;
    sl_prefix_cache pc;
    int32_t *mem;   /* (n_blocks * BS) the "KV": token at each physical position, -1 unwritten */
} rig;

static void rig_open(rig *r, uint32_t n_blocks, bool enabled)
{
    cr_assert_eq(sl_kv_blocks_init(&r->kv, n_blocks, BS), SL_OK);
    cr_assert_eq(sl_prefix_cache_init(&r->pc, &r->kv, enabled), SL_OK);
    r->mem = malloc((size_t)n_blocks * BS * sizeof *r->mem);
    cr_assert_not_null(r->mem);
    memset(r->mem, 0xff, (size_t)n_blocks * BS * sizeof *r->mem);
}

static void rig_close(rig *r)
{
    sl_prefix_cache_fini(&r->pc, &r->kv);
    cr_assert_eq(sl_kv_blocks_free_count(&r->kv), r->kv.n_blocks, "fini gave every cached block back");
    sl_kv_blocks_fini(&r->kv);
    free(r->mem);
}

/* Pool and cache invariants, given the live sequence tables. */
static void rig_check(rig *r, sl_kv_table **t, int n)
{
    const sl_kv_table *all[64];
    int k = 0;
    for (int i = 0; i < n; i++)
        all[k++] = t[i];
    if (sl_prefix_cache_held(&r->pc))
        all[k++] = sl_prefix_cache_held(&r->pc);
    cr_assert(sl_kv_blocks_check(&r->kv, all, (uint32_t)k), "pool accounting");
    cr_assert(sl_prefix_cache_check(&r->pc, &r->kv), "cache invariants");
}

/* A sequence "prefills" tokens[0, n): looks up the cache, takes fresh blocks
 * for the rest, writes only positions past the hit (what the backend would),
 * then inserts what is complete. Returns the hit in blocks; checks that every
 * position of the table reads back the sequence's own token. */
static uint32_t prefill(rig *r, sl_kv_table *t, const int32_t *tokens, uint32_t n, sl_prefix_chain *ch)
{
    uint32_t hit = sl_prefix_cache_match(&r->pc, &r->kv, tokens, n, (n - 1) / BS, t, ch);
    sl_status rc = sl_kv_blocks_reserve(&r->kv, t, n);
    if (rc == SL_AGAIN) {
        uint32_t need = sl_kv_blocks_needed(&r->kv, t, n) - sl_kv_blocks_free_count(&r->kv);
        sl_prefix_cache_evict(&r->pc, &r->kv, need);
        rc = sl_kv_blocks_reserve(&r->kv, t, n);
    }
    if (rc != SL_OK) {
        sl_prefix_cache_release(&r->pc, &r->kv, t);
        return UINT32_MAX;
    }
    for (uint32_t p = hit * BS; p < n; p++) {
        int32_t b = t->blocks[p / BS];
        cr_assert_eq(sl_kv_blocks_refcount(&r->kv, b), 1, "a written block is the sequence's own");
        r->mem[(size_t)b * BS + p % BS] = tokens[p];
    }
    for (uint32_t p = 0; p < n; p++)
        cr_assert_eq(r->mem[(size_t)t->blocks[p / BS] * BS + p % BS], tokens[p], "position %u reads back", p);
    sl_prefix_cache_insert(&r->pc, &r->kv, t, tokens, n, ch);
    return hit;
}

Test(prefix_cache, same_tokens_after_same_prefix_hit_others_miss)
{
    rig r;
    rig_open(&r, 32, true);
    sl_kv_table a, b;
    sl_prefix_chain ca, cb;
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &a, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &b, 64), SL_OK);
    int32_t p[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    cr_assert_eq(prefill(&r, &a, p, 13, &ca), 0, "cold");
    cr_assert_eq(r.pc.stats.n_cached, 3, "three full blocks of 13 tokens");
    sl_kv_table *live[2] = {&a, &b};
    rig_check(&r, live, 1);

    /* the same prompt: every full block but the one holding the last token */
    cr_assert_eq(prefill(&r, &b, p, 13, &cb), 3);
    cr_assert_eq(b.blocks[0], a.blocks[0]);
    cr_assert_eq(sl_kv_blocks_refcount(&r.kv, a.blocks[0]), 3, "a, b and the cache");
    rig_check(&r, live, 2);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);

    /* 12 tokens: the last full block is recomputed (its last token starts decoding) */
    cr_assert_eq(prefill(&r, &b, p, 12, &cb), 2);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);

    /* a different second block: only the first hits */
    int32_t q[13];
    memcpy(q, p, sizeof q);
    q[5] = 99;
    cr_assert_eq(prefill(&r, &b, q, 13, &cb), 1);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);

    /* the second block's tokens at the start: a block is named by its prefix too */
    cr_assert_eq(prefill(&r, &b, p + 4, 9, &cb), 0);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);
    rig_check(&r, live, 1);

    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    cr_assert_eq(sl_prefix_cache_available(&r.pc, &r.kv), 32, "nothing held but by the cache: all available");
    cr_assert_gt(r.pc.stats.n_cached, 0, "contents survive their sequences");
    rig_check(&r, live, 0);
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    rig_close(&r);
}

Test(prefix_cache, equal_blocks_are_cached_once_and_the_chain_continues)
{
    rig r;
    rig_open(&r, 32, true);
    sl_kv_table a, b, c;
    sl_prefix_chain ca, cb, cc;
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &a, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &b, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &c, 64), SL_OK);
    int32_t p[17];
    for (int i = 0; i < 17; i++)
        p[i] = 40 + i;
    /* two sequences prefill the same prompt side by side: both miss */
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, p, 17, 4, &a, &ca), 0);
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, p, 17, 4, &b, &cb), 0);
    cr_assert_eq(prefill(&r, &a, p, 8, &ca), 0);   /* a's first two blocks go in */
    cr_assert_eq(prefill(&r, &b, p, 17, &cb), 2);  /* b finds them, adds blocks 2 and 3 */
    cr_assert_eq(r.pc.stats.n_cached, 4);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);
    /* a finishes its prompt privately: its equal blocks are not cached again */
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, p, 8, 2, &a, &ca), 2);
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    cr_assert_eq(prefill(&r, &c, p, 17, &cc), 4, "the chain runs through the blocks b added");
    sl_kv_table *live[1] = {&c};
    rig_check(&r, live, 1);
    sl_prefix_cache_release(&r.pc, &r.kv, &c);
    cr_assert_eq(r.pc.stats.n_inserted, 4);
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    sl_kv_blocks_table_fini(&c);
    rig_close(&r);
}

Test(prefix_cache, eviction_takes_least_recent_tails_first_and_never_a_held_block)
{
    rig r;
    rig_open(&r, 8, true);
    sl_kv_table a, b;
    sl_prefix_chain ca, cb;
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &a, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &b, 64), SL_OK);
    int32_t pa[9] = {1, 1, 1, 1, 2, 2, 2, 2, 3}, pb[9] = {5, 5, 5, 5, 6, 6, 6, 6, 7};
    prefill(&r, &a, pa, 9, &ca);
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    prefill(&r, &b, pb, 9, &cb);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);
    cr_assert_eq(r.pc.stats.n_cached, 4);
    /* a used again: b is now the least recent */
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, pa, 9, 2, &a, &ca), 2);
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    cr_assert_eq(sl_prefix_cache_evict(&r.pc, &r.kv, 1), 1);
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, pb, 9, 2, &b, &cb), 1, "b's tail went, its head stayed");
    /* b's head is held by b now: eviction passes it and takes a's blocks */
    cr_assert_eq(sl_prefix_cache_evict(&r.pc, &r.kv, 8), 2);
    cr_assert_eq(r.pc.stats.n_cached, 1);
    cr_assert_eq(sl_kv_blocks_refcount(&r.kv, b.blocks[0]), 2);
    sl_kv_table *live[1] = {&b};
    rig_check(&r, live, 1);
    sl_prefix_cache_release(&r.pc, &r.kv, &b);
    cr_assert_eq(sl_prefix_cache_evict(&r.pc, &r.kv, 8), 1);
    cr_assert_eq(sl_kv_blocks_free_count(&r.kv), 8);
    cr_assert_eq(r.pc.stats.n_evicted, 4);
    rig_check(&r, live, 0);
    sl_kv_blocks_table_fini(&a);
    sl_kv_blocks_table_fini(&b);
    rig_close(&r);
}

/* A block id reused for other contents must not revive the children cached
 * under its old contents: the parent's generation tells them apart. */
Test(prefix_cache, an_evicted_parent_orphans_its_children)
{
    rig r;
    rig_open(&r, 4, true);
    sl_kv_table a, hold;
    sl_prefix_chain ca;
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &a, 64), SL_OK);
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &hold, 64), SL_OK);
    int32_t p[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, q[9] = {9, 9, 9, 9, 5, 6, 7, 8, 9};
    prefill(&r, &a, p, 9, &ca);   /* ids 0, 1 cached; 2 private */
    int32_t parent = a.blocks[0], child = a.blocks[1];
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    /* pin the child alone, behind the cache's back (serving never does: a
     * table holding a child holds its parent), then put the evictable count
     * the pin changed right */
    cr_assert_eq(sl_kv_blocks_append(&r.kv, &hold, child), SL_OK);
    r.pc.stats.n_evictable--;
    cr_assert_eq(sl_prefix_cache_evict(&r.pc, &r.kv, 1), 1);
    cr_assert_eq(sl_kv_blocks_refcount(&r.kv, parent), 0, "the parent went, the pinned child stayed");
    /* q's first block lands on the parent's old id; its second block has the
     * child's tokens after the same block id, but not the same contents */
    cr_assert_eq(prefill(&r, &a, q, 9, &ca), 0);
    cr_assert_eq(a.blocks[0], parent, "the id was reused (LIFO free list)");
    cr_assert_neq(a.blocks[1], child, "the orphan is not q's second block");
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, q, 9, 2, &a, &ca), 2, "q's own blocks are found");
    cr_assert_neq(a.blocks[1], child);
    sl_prefix_cache_release(&r.pc, &r.kv, &a);
    cr_assert_eq(sl_prefix_cache_match(&r.pc, &r.kv, p, 9, 2, &a, &ca), 0, "p's prefix is gone");
    sl_prefix_cache_release(&r.pc, &r.kv, &hold);   /* the orphan is evictable again */
    sl_kv_table *live[1] = {&a};
    rig_check(&r, live, 0);
    sl_kv_blocks_table_fini(&hold);
    sl_kv_blocks_table_fini(&a);
    rig_close(&r);
}

Test(prefix_cache, disabled_cache_finds_and_keeps_nothing)
{
    rig r;
    rig_open(&r, 8, false);
    sl_kv_table a;
    sl_prefix_chain ca;
    cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &a, 64), SL_OK);
    int32_t p[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(prefill(&r, &a, p, 9, &ca), 0);
        sl_prefix_cache_release(&r.pc, &r.kv, &a);
    }
    cr_assert_eq(sl_kv_blocks_free_count(&r.kv), 8);
    cr_assert_null(sl_prefix_cache_held(&r.pc));
    cr_assert_eq(sl_prefix_cache_evict(&r.pc, &r.kv, 8), 0);
    cr_assert_eq(r.pc.stats.query_tokens, 0);
    sl_kv_table *live[1] = {&a};
    rig_check(&r, live, 0);
    sl_kv_blocks_table_fini(&a);
    rig_close(&r);
}

/* Random prompts over a few shared stems, a pool too small for all of them:
 * sequences start (lookup, fresh blocks, writes past the hit, insert), live
 * and end in random order, eviction makes room. After every call the
 * invariants hold, and every table reads back exactly its own tokens. */
Test(prefix_cache, randomized_sequences_keep_invariants_and_contents)
{
    enum { N_SEQ = 6, N_BLOCKS = 40, MAXLEN = 40, STEPS = 3000 };
    rig r;
    rig_open(&r, N_BLOCKS, true);
    sl_kv_table t[N_SEQ];
    sl_prefix_chain ch[N_SEQ];
    int32_t tok[N_SEQ][MAXLEN];
    bool live[N_SEQ] = {0};
    for (int i = 0; i < N_SEQ; i++)
        cr_assert_eq(sl_kv_blocks_table_init(&r.kv, &t[i], MAXLEN), SL_OK);
    int32_t stems[3][MAXLEN];
    uint64_t rng = 12345;
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < MAXLEN; j++)
            stems[s][j] = (int32_t)(sl_seeded_next(&rng) % 5);
    uint64_t hits = 0;
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(sl_seeded_next(&rng) % N_SEQ);
        if (live[i]) {
            sl_prefix_cache_release(&r.pc, &r.kv, &t[i]);
            live[i] = false;
        } else {
            uint32_t n = 1 + (uint32_t)(sl_seeded_next(&rng) % MAXLEN);
            uint32_t keep = (uint32_t)(sl_seeded_next(&rng) % (n + 1));
            const int32_t *stem = stems[sl_seeded_next(&rng) % 3];
            for (uint32_t j = 0; j < n; j++)
                tok[i][j] = j < keep ? stem[j] : (int32_t)(sl_seeded_next(&rng) % 5);
            uint32_t h = prefill(&r, &t[i], tok[i], n, &ch[i]);
            live[i] = h != UINT32_MAX;
            hits += live[i] ? h : 0;
        }
        sl_kv_table *lt[N_SEQ];
        int k = 0;
        for (int j = 0; j < N_SEQ; j++)
            if (live[j])
                lt[k++] = &t[j];
        rig_check(&r, lt, k);
        if (step % 7 == 0)
            sl_prefix_cache_evict(&r.pc, &r.kv, 1 + (uint32_t)(sl_seeded_next(&rng) % 3));
    }
    cr_assert_gt(hits, 100, "the stems share prefixes: many hits");
    cr_assert_gt(r.pc.stats.n_evicted, 0, "the pool is small: evictions happened");
    for (int i = 0; i < N_SEQ; i++) {
        if (live[i])
            sl_prefix_cache_release(&r.pc, &r.kv, &t[i]);
        sl_kv_blocks_table_fini(&t[i]);
    }
    rig_close(&r);
}
