/* gpu-worker/prefix_cache.h: automatic prefix caching of full KV blocks.
 * Where:     the worker's scheduler thread, next to the block pool
 *            (kv_blocks.h); the cache lives and dies with the worker process,
 *            so a restarted worker starts with an empty cache.
 * Who:       one thread; no locking.
 * What:      a full KV block (block_size positions) whose tokens are known is
 *            named by a hash over its tokens and its parent's hash, a chain
 *            from the sequence start, so equal hashes mean "same tokens at the
 *            same positions after the same prefix". A hash table maps hash ->
 *            cached physical block. A sequence starting with the same tokens
 *            maps those blocks into its table (shared, read-only) and
 *            prefills only the rest.
 * Contract:
 *   - The cache holds one reference on every cached block (through a table
 *     of its own, `_held`, which sl_kv_blocks_check counts like any other),
 *     so a block whose last sequence let go keeps its contents. Such a block
 *     (refcount 1: only the cache) is evictable; evict gives the least
 *     recently used ones back to the free list when the pool runs short.
 *   - A hit is never trusted on the hash alone: the entry's stored tokens
 *     are compared, and its parent must be the very block (and cache
 *     generation of it) the lookup matched one step earlier, so the whole
 *     prefix is verified by induction. A collision costs a miss, never a
 *     wrong block.
 *   - Only blocks the backend has completely written may be inserted
 *     (positions < the sequence's computed count); the caller never writes a
 *     block it got from match (the table's later positions go to fresh
 *     blocks), which is invariant 5 of kv_blocks.c.
 *   - Every change to a cached block's reference count goes through this
 *     file (match maps, release lets go, evict and clear forget), so the
 *     count of evictable blocks is kept as it changes, never by a scan;
 *     the caller releases a table that may hold cached blocks with
 *     sl_prefix_cache_release, not sl_kv_blocks_release.
 *   - Disabled (`enabled` false at init): match finds nothing, insert keeps
 *     nothing, evict frees nothing; release is plain sl_kv_blocks_release.
 * Ownership: arrays sized once at init from the pool; nothing allocates
 *            after init.
 * Errors:    init returns SL_OK, SL_EINVAL or SL_ENOMEM; the rest cannot fail. */
#ifndef SL_PREFIX_CACHE_H
#define SL_PREFIX_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu-worker/kv_blocks.h"
#include "shared/status.h"

/* A sequence's position in the hash chain: how many of its leading blocks
 * have been looked up or inserted, and the identity of the last one. Zeroed
 * (or set by match) whenever the sequence's table is refilled. */
typedef struct {
    uint32_t n_blocks;     /* leading blocks of the table already in the chain */
    uint64_t hash;         /* hash of block n_blocks - 1 (unused when n_blocks is 0) */
    int32_t parent;        /* cached block id that block n_blocks - 1 resolves to, -1 none */
    uint32_t parent_gen;   /* its cache generation when the chain passed it */
    bool broken;           /* the parent left the cache: insert nothing more */
} sl_prefix_chain;

/* Counters, cumulative since init. */
typedef struct {
    uint32_t n_cached;         /* blocks cached now */
    uint32_t n_evictable;      /* of those, held by the cache alone (refcount 1): kept as counts change */
    uint64_t n_inserted;       /* blocks ever inserted */
    uint64_t n_evicted;        /* blocks given back to the free list */
    uint64_t query_tokens;     /* tokens looked up by match (its n_tokens) */
    uint64_t hit_tokens;       /* tokens match found cached (blocks * block_size) */
} sl_prefix_cache_stats;

/* Fields starting with `_` are private. */
typedef struct {
    bool enabled;
    uint32_t block_size;
    uint32_t n_blocks;
    sl_kv_table _held;         /* the cache's own reference on each cached block, one slot each (a set) */
    uint32_t *_slot;           /* (n_blocks) index in _held.blocks, UINT32_MAX if not cached */
    uint64_t *_hash;           /* (n_blocks) */
    int32_t *_parent;          /* (n_blocks) parent block id, -1 for a sequence's first block */
    uint32_t *_parent_gen;     /* (n_blocks) the parent's generation when this was inserted */
    uint32_t *_gen;            /* (n_blocks) +1 each time the block is inserted */
    int32_t *_tokens;          /* (n_blocks * block_size) each cached block's tokens */
    int32_t *_bucket;          /* (n_buckets) first block of each hash chain, -1 empty */
    int32_t *_next;            /* (n_blocks) next block in the same bucket */
    int32_t *_older, *_newer;  /* (n_blocks) LRU list links */
    int32_t _oldest, _newest;  /* LRU list ends, -1 when empty */
    uint32_t _bucket_mask;
    uint32_t *_seen;           /* (n_blocks) scratch of the checker */
    sl_prefix_cache_stats stats;
} sl_prefix_cache;

/* Sets up an empty cache over the pool `kv` (its block count and size).
 * Returns SL_OK; SL_EINVAL for an empty pool; SL_ENOMEM (with *pc zeroed:
 * fini is a no-op). A disabled cache allocates nothing. */
sl_status sl_prefix_cache_init(sl_prefix_cache *pc, const sl_kv_blocks *kv, bool enabled);

/* Gives every cached block back to the pool and frees the arrays. */
void sl_prefix_cache_fini(sl_prefix_cache *pc, sl_kv_blocks *kv);

/* Forgets every cached block (each goes back to the free list unless a
 * sequence still holds it, in which case that sequence's release frees it). */
void sl_prefix_cache_clear(sl_prefix_cache *pc, sl_kv_blocks *kv);

/* Looks up the longest cached prefix of tokens[0, n_tokens) in whole blocks,
 * at most max_blocks of them, and maps those blocks into the empty table `t`
 * (refcount +1 each; they count as recently used). Sets *chain to continue
 * after them. Returns the blocks mapped (0 when disabled or `t` is not
 * empty). Counts n_tokens queried and the hit in the stats. */
uint32_t sl_prefix_cache_match(sl_prefix_cache *pc, sl_kv_blocks *kv, const int32_t *tokens, uint32_t n_tokens,
                               uint32_t max_blocks, sl_kv_table *t, sl_prefix_chain *chain);

/* Inserts the table's full blocks past chain->n_blocks whose positions are
 * all below n_computed (their KV is written): block i holds tokens[i *
 * block_size, (i + 1) * block_size). A block equal to one already cached is
 * not inserted (the sequence keeps its private copy; the chain continues
 * through the cached one). Advances the chain. */
void sl_prefix_cache_insert(sl_prefix_cache *pc, sl_kv_blocks *kv, const sl_kv_table *t, const int32_t *tokens,
                            uint32_t n_computed, sl_prefix_chain *chain);

/* Evicts up to `want` evictable blocks, least recently used first, back to
 * the free list. Returns how many it freed (0: none evictable). */
uint32_t sl_prefix_cache_evict(sl_prefix_cache *pc, sl_kv_blocks *kv, uint32_t want);

/* Releases a sequence's table (sl_kv_blocks_release), first marking its
 * cached blocks used now, its first block the most recent: a prefix outlives
 * its tails under eviction. Cached blocks only the cache holds afterwards
 * become evictable. */
void sl_prefix_cache_release(sl_prefix_cache *pc, sl_kv_blocks *kv, sl_kv_table *t);

/* Blocks the pool could hand out now: free plus evictable. O(1). */
uint32_t sl_prefix_cache_available(const sl_prefix_cache *pc, const sl_kv_blocks *kv);

/* The current counters. O(1). */
void sl_prefix_cache_stats_get(const sl_prefix_cache *pc, const sl_kv_blocks *kv, sl_prefix_cache_stats *out);

/* The table through which the cache holds its blocks, for sl_kv_blocks_check
 * (NULL when disabled). */
const sl_kv_table *sl_prefix_cache_held(const sl_prefix_cache *pc);

/* The checker, for `assert(sl_prefix_cache_check(...))` and tests. Returns 1 if:
 *   1. _held names each cached block once and _slot[b] is its index there;
 *      blocks not cached have _slot UINT32_MAX;
 *   2. every cached block is in exactly the bucket of its hash, once, and
 *      buckets hold nothing else;
 *   3. the LRU list links exactly the cached blocks, consistently both ways;
 *   4. every cached block has refcount >= 1 in the pool;
 *   5. a cached block whose parent is still cached under the recorded
 *      generation has the hash of (parent's hash, its tokens); a first block
 *      the hash of its tokens alone;
 *   6. stats.n_evictable is the number of cached blocks of refcount 1.
 * Returns 0 otherwise. O(cached blocks + buckets). */
int sl_prefix_cache_check(const sl_prefix_cache *pc, const sl_kv_blocks *kv);

#endif
