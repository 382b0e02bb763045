/* gpu-worker/prefix_cache.c: the prefix cache of full KV blocks (hash chain,
 * hash table, LRU of evictable blocks). Worker process, scheduler thread.
 * The contract is prefix_cache.h.
 *
 * Trade-off: the hash only picks a bucket; a hit compares the block's stored
 * tokens and the identity of its parent (block id and the generation it was
 * cached under), so a 64-bit hash is plenty and a collision can only cost a
 * miss. Storing the tokens takes n_blocks * block_size * 4 bytes of host
 * memory (a few bytes per KV position, against hundreds per position of KV).
 * The LRU list holds every cached block, in use or not; evict walks it from
 * the oldest end past blocks some sequence still holds. That walk is
 * O(blocks in use) at worst, paid only when the pool is short, and keeps
 * insert, match and release O(1) per block with no list moves when a block
 * becomes used or unused. The number of evictable blocks is counted as
 * match, release and forget change reference counts, so the per-step stats
 * cost nothing.
 *
 * A block whose parent was evicted stays cached but unreachable (a lookup
 * walks from the first block); as nobody can map it, its refcount falls to 1
 * and it ages out of the LRU like any other. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/prefix_cache.h"
#include "shared/alloc.h"

#define NOT_CACHED UINT32_MAX
#define HASH_SEED 0x9e3779b97f4a7c15ull

/* splitmix64's finalizer: every input bit reaches every output bit. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* The hash of a block: its parent's hash (HASH_SEED for a first block) and
 * its tokens in order. */
static uint64_t block_hash(uint64_t parent_hash, const int32_t *tokens, uint32_t n)
{
    uint64_t h = mix(parent_hash);
    for (uint32_t i = 0; i < n; i++)
        h = mix(h ^ ((uint64_t)(uint32_t)tokens[i] + HASH_SEED));
    return h;
}

sl_status sl_prefix_cache_init(sl_prefix_cache *pc, const sl_kv_blocks *kv, bool enabled)
{
    memset(pc, 0, sizeof *pc);
    pc->_oldest = pc->_newest = -1;
    if (kv->n_blocks == 0 || kv->block_size == 0)
        return SL_EINVAL;
    pc->block_size = kv->block_size;
    pc->n_blocks = kv->n_blocks;
    if (!enabled)
        return SL_OK;
    uint32_t n_buckets = 1;
    while (n_buckets < kv->n_blocks && n_buckets < (1u << 30))
        n_buckets <<= 1;
    size_t n = kv->n_blocks;
    pc->_slot = sl_malloc(n * sizeof *pc->_slot);
    pc->_hash = sl_malloc(n * sizeof *pc->_hash);
    pc->_parent = sl_malloc(n * sizeof *pc->_parent);
    pc->_parent_gen = sl_malloc(n * sizeof *pc->_parent_gen);
    pc->_gen = sl_calloc(n, sizeof *pc->_gen);
    pc->_tokens = sl_malloc(n * kv->block_size * sizeof *pc->_tokens);
    pc->_bucket = sl_malloc((size_t)n_buckets * sizeof *pc->_bucket);
    pc->_next = sl_malloc(n * sizeof *pc->_next);
    pc->_older = sl_malloc(n * sizeof *pc->_older);
    pc->_newer = sl_malloc(n * sizeof *pc->_newer);
    pc->_seen = sl_malloc(n * sizeof *pc->_seen);
    sl_status rc = SL_ENOMEM;
    if (pc->_slot && pc->_hash && pc->_parent && pc->_parent_gen && pc->_gen && pc->_tokens && pc->_bucket &&
        pc->_next && pc->_older && pc->_newer && pc->_seen)
        rc = (pc->_held.blocks = sl_malloc(n * sizeof *pc->_held.blocks)) ? SL_OK : SL_ENOMEM;
    pc->_held.capacity = kv->n_blocks;   /* a set of blocks, not a sequence: one slot per block */
    if (rc < 0) {
        sl_prefix_cache_fini(pc, NULL);
        return SL_ENOMEM;
    }
    for (size_t b = 0; b < n; b++)
        pc->_slot[b] = NOT_CACHED;
    for (uint32_t i = 0; i < n_buckets; i++)
        pc->_bucket[i] = -1;
    pc->_bucket_mask = n_buckets - 1;
    pc->enabled = true;
    return SL_OK;
}

void sl_prefix_cache_fini(sl_prefix_cache *pc, sl_kv_blocks *kv)
{
    if (kv && pc->enabled)
        sl_prefix_cache_clear(pc, kv);
    if (pc->_held.blocks)
        sl_kv_blocks_table_fini(&pc->_held);
    free(pc->_slot);
    free(pc->_hash);
    free(pc->_parent);
    free(pc->_parent_gen);
    free(pc->_gen);
    free(pc->_tokens);
    free(pc->_bucket);
    free(pc->_next);
    free(pc->_older);
    free(pc->_newer);
    free(pc->_seen);
    memset(pc, 0, sizeof *pc);
    pc->_oldest = pc->_newest = -1;
}

/* ------------------------------------------------------------------------ */
/* the LRU list: oldest ... newest                                           */

static void lru_unlink(sl_prefix_cache *pc, int32_t b)
{
    if (pc->_older[b] >= 0)
        pc->_newer[pc->_older[b]] = pc->_newer[b];
    else
        pc->_oldest = pc->_newer[b];
    if (pc->_newer[b] >= 0)
        pc->_older[pc->_newer[b]] = pc->_older[b];
    else
        pc->_newest = pc->_older[b];
}

static void lru_push_newest(sl_prefix_cache *pc, int32_t b)
{
    pc->_older[b] = pc->_newest;
    pc->_newer[b] = -1;
    if (pc->_newest >= 0)
        pc->_newer[pc->_newest] = b;
    else
        pc->_oldest = b;
    pc->_newest = b;
}

static void touch(sl_prefix_cache *pc, int32_t b)
{
    if (pc->_newest == b)
        return;
    lru_unlink(pc, b);
    lru_push_newest(pc, b);
}

/* ------------------------------------------------------------------------ */
/* the hash table                                                            */

static bool cached(const sl_prefix_cache *pc, int32_t b)
{
    return b >= 0 && (uint32_t)b < pc->n_blocks && pc->_slot[b] != NOT_CACHED;
}

/* The cached block with this hash, parent identity and tokens, or -1. */
static int32_t find(const sl_prefix_cache *pc, uint64_t h, int32_t parent, uint32_t parent_gen,
                    const int32_t *tokens)
{
    size_t bytes = (size_t)pc->block_size * sizeof *tokens;
    for (int32_t b = pc->_bucket[h & pc->_bucket_mask]; b >= 0; b = pc->_next[b])
        if (pc->_hash[b] == h && pc->_parent[b] == parent && (parent < 0 || pc->_parent_gen[b] == parent_gen) &&
            !memcmp(pc->_tokens + (size_t)b * pc->block_size, tokens, bytes))
            return b;
    return -1;
}

/* Drops block b from the table, the LRU list and _held (its reference goes). */
static void forget(sl_prefix_cache *pc, sl_kv_blocks *kv, int32_t b)
{
    if (sl_kv_blocks_refcount(kv, b) == 1)
        pc->stats.n_evictable--;
    int32_t *p = &pc->_bucket[pc->_hash[b] & pc->_bucket_mask];
    while (*p != b) {
        assert(*p >= 0);
        p = &pc->_next[*p];
    }
    *p = pc->_next[b];
    lru_unlink(pc, b);
    uint32_t slot = pc->_slot[b];
    pc->_slot[b] = NOT_CACHED;
    int32_t moved = sl_kv_blocks_remove_slot(kv, &pc->_held, slot);
    if (moved >= 0)
        pc->_slot[moved] = slot;
}

void sl_prefix_cache_clear(sl_prefix_cache *pc, sl_kv_blocks *kv)
{
    if (!pc->enabled)
        return;
    while (pc->_oldest >= 0)
        forget(pc, kv, pc->_oldest);
    pc->stats.n_cached = 0;
    assert(pc->stats.n_evictable == 0);
}

/* ------------------------------------------------------------------------ */
/* the contract's calls                                                      */

uint32_t sl_prefix_cache_match(sl_prefix_cache *pc, sl_kv_blocks *kv, const int32_t *tokens, uint32_t n_tokens,
                               uint32_t max_blocks, sl_kv_table *t, sl_prefix_chain *chain)
{
    memset(chain, 0, sizeof *chain);
    chain->parent = -1;
    if (!pc->enabled || t->n_used != 0)
        return 0;
    pc->stats.query_tokens += n_tokens;
    uint32_t bs = pc->block_size, n = 0;
    uint64_t h = HASH_SEED;
    int32_t parent = -1;
    uint32_t parent_gen = 0;
    while (n < max_blocks && (uint64_t)(n + 1) * bs <= n_tokens && n < t->capacity) {
        const int32_t *tok = tokens + (size_t)n * bs;
        uint64_t hn = block_hash(h, tok, bs);
        int32_t b = find(pc, hn, parent, parent_gen, tok);
        if (b < 0)
            break;
        if (sl_kv_blocks_refcount(kv, b) == 1)
            pc->stats.n_evictable--;   /* a sequence holds it again */
        sl_status rc = sl_kv_blocks_append(kv, t, b);
        assert(rc == SL_OK);
        (void)rc;
        touch(pc, b);
        h = hn;
        parent = b;
        parent_gen = pc->_gen[b];
        n++;
    }
    chain->n_blocks = n;
    chain->hash = h;
    chain->parent = parent;
    chain->parent_gen = parent_gen;
    pc->stats.hit_tokens += (uint64_t)n * bs;
    return n;
}

void sl_prefix_cache_insert(sl_prefix_cache *pc, sl_kv_blocks *kv, const sl_kv_table *t, const int32_t *tokens,
                            uint32_t n_computed, sl_prefix_chain *chain)
{
    if (!pc->enabled || chain->broken)
        return;
    uint32_t bs = pc->block_size;
    uint64_t h = chain->n_blocks ? chain->hash : HASH_SEED;
    while (chain->n_blocks < t->n_used && (uint64_t)(chain->n_blocks + 1) * bs <= n_computed) {
        /* the chain's parent must still be the block it was: else its
         * children could never be found again, so caching them is waste */
        if (chain->parent >= 0 && (!cached(pc, chain->parent) || pc->_gen[chain->parent] != chain->parent_gen)) {
            chain->broken = true;
            return;
        }
        uint32_t i = chain->n_blocks;
        const int32_t *tok = tokens + (size_t)i * bs;
        uint64_t hn = block_hash(h, tok, bs);
        int32_t b = find(pc, hn, chain->parent, chain->parent_gen, tok);
        if (b < 0) {
            b = t->blocks[i];
            if (cached(pc, b)) {   /* a block the chain did not reach this way: leave it */
                chain->broken = true;
                return;
            }
            sl_status rc = sl_kv_blocks_append(kv, &pc->_held, b);
            assert(rc == SL_OK);
            (void)rc;
            pc->_slot[b] = pc->_held.n_used - 1;
            pc->_hash[b] = hn;
            pc->_parent[b] = chain->parent;
            pc->_parent_gen[b] = chain->parent < 0 ? 0 : chain->parent_gen;
            pc->_gen[b]++;
            memcpy(pc->_tokens + (size_t)b * bs, tok, (size_t)bs * sizeof *tok);
            uint32_t k = (uint32_t)(hn & pc->_bucket_mask);
            pc->_next[b] = pc->_bucket[k];
            pc->_bucket[k] = b;
            lru_push_newest(pc, b);
            pc->stats.n_inserted++;
            pc->stats.n_cached++;
        }
        h = hn;
        chain->hash = hn;
        chain->parent = b;
        chain->parent_gen = pc->_gen[b];
        chain->n_blocks++;
    }
}

uint32_t sl_prefix_cache_evict(sl_prefix_cache *pc, sl_kv_blocks *kv, uint32_t want)
{
    if (!pc->enabled)
        return 0;
    uint32_t freed = 0;
    for (int32_t b = pc->_oldest; b >= 0 && freed < want;) {
        int32_t next = pc->_newer[b];
        if (sl_kv_blocks_refcount(kv, b) == 1) {
            forget(pc, kv, b);
            freed++;
            pc->stats.n_evicted++;
            pc->stats.n_cached--;
        }
        b = next;
    }
    return freed;
}

void sl_prefix_cache_release(sl_prefix_cache *pc, sl_kv_blocks *kv, sl_kv_table *t)
{
    if (pc->enabled)
        for (uint32_t i = t->n_used; i-- > 0;)
            if (cached(pc, t->blocks[i])) {
                touch(pc, t->blocks[i]);
                pc->stats.n_evictable += sl_kv_blocks_refcount(kv, t->blocks[i]) == 2;   /* this table and the cache */
            }
    sl_kv_blocks_release(kv, t);
}

uint32_t sl_prefix_cache_available(const sl_prefix_cache *pc, const sl_kv_blocks *kv)
{
    return sl_kv_blocks_free_count(kv) + pc->stats.n_evictable;
}

void sl_prefix_cache_stats_get(const sl_prefix_cache *pc, const sl_kv_blocks *kv, sl_prefix_cache_stats *out)
{
    (void)kv;
    *out = pc->stats;
}

const sl_kv_table *sl_prefix_cache_held(const sl_prefix_cache *pc)
{
    return pc->enabled ? &pc->_held : NULL;
}

int sl_prefix_cache_check(const sl_prefix_cache *pc, const sl_kv_blocks *kv)
{
    if (!pc->enabled)
        return pc->_held.n_used == 0;
    uint32_t n = pc->n_blocks, n_cached = 0, n_evictable = 0;
    if (n != kv->n_blocks || pc->block_size != kv->block_size || pc->_held.n_used != pc->stats.n_cached)
        return 0;
    for (uint32_t b = 0; b < n; b++) {                                          /* 1 */
        uint32_t s = pc->_slot[b];
        if (s == NOT_CACHED)
            continue;
        if (s >= pc->_held.n_used || pc->_held.blocks[s] != (int32_t)b)
            return 0;
        if (sl_kv_blocks_refcount(kv, (int32_t)b) < 1)                           /* 4 */
            return 0;
        n_cached++;
        n_evictable += sl_kv_blocks_refcount(kv, (int32_t)b) == 1;
    }
    if (n_cached != pc->_held.n_used || n_evictable != pc->stats.n_evictable)   /* 6 */
        return 0;
    uint32_t *seen = pc->_seen;
    memset(seen, 0, (size_t)n * sizeof *seen);
    uint32_t in_buckets = 0;
    for (uint32_t k = 0; k <= pc->_bucket_mask; k++)                             /* 2 */
        for (int32_t b = pc->_bucket[k]; b >= 0; b = pc->_next[b]) {
            if ((uint32_t)b >= n || !cached(pc, b) || (pc->_hash[b] & pc->_bucket_mask) != k || seen[b]++ ||
                ++in_buckets > n_cached)
                return 0;
        }
    if (in_buckets != n_cached)
        return 0;
    uint32_t in_lru = 0;
    for (int32_t b = pc->_oldest, prev = -1; b >= 0; prev = b, b = pc->_newer[b]) {   /* 3 */
        if ((uint32_t)b >= n || !cached(pc, b) || pc->_older[b] != prev || ++in_lru > n_cached)
            return 0;
        if (pc->_newer[b] < 0 && pc->_newest != b)
            return 0;
    }
    if (in_lru != n_cached || (n_cached == 0) != (pc->_newest < 0))
        return 0;
    for (uint32_t i = 0; i < pc->_held.n_used; i++) {                            /* 5 */
        int32_t b = pc->_held.blocks[i], p = pc->_parent[b];
        uint64_t ph = HASH_SEED;
        if (p >= 0) {
            if (!cached(pc, p) || pc->_gen[p] != pc->_parent_gen[b])
                continue;   /* orphan: unreachable, its hash unverifiable */
            ph = pc->_hash[p];
        }
        if (block_hash(ph, pc->_tokens + (size_t)b * pc->block_size, pc->block_size) != pc->_hash[b])
            return 0;
    }
    return 1;
}
