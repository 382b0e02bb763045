/* gpu-worker/kv_blocks.c: block pool, free list and block tables of the paged
 * KV cache (bookkeeping only; the backend owns the memory).
 * Runs on the worker's scheduler thread.
 * Trade-off: a plain LIFO stack of free ids rather than an LRU of cached
 * blocks. It is O(1), deterministic and recently freed (cache-warm) blocks go
 * out first. Blocks that keep valid contents after their sequences ended are
 * not this file's business: the prefix cache holds them with a reference of
 * its own and gives them back here when it evicts them.
 *
 * Invariants (checked in full by sl_kv_blocks_check, in part after every
 * call in debug builds by assert_pool):
 *   1. _free[0.._n_free) are distinct ids in [0, n_blocks), each with _ref 0.
 *   2. _ref[b] is the number of table slots, over all live tables, naming b.
 *   3. A block is on the free list iff _ref[b] == 0; hence
 *      _n_free + #{b : _ref[b] > 0} == n_blocks.
 *   4. A table's slots [0, n_used) name blocks with _ref >= 1; n_used <=
 *      capacity; slots past n_used are garbage.
 *   5. A block with _ref > 1 is full and read-only (the caller's promise to
 *      sl_kv_blocks_share): only the last block of a table is ever written.
 *
 * A block's life:
 *   free --reserve--> held (ref 1) --share--> shared (ref n > 1)
 *   shared --release--> ref n-1 ... held --release--> free
 * The prefix cache (prefix_cache.c) holds each cached block through a table
 * of its own, so a block whose last sequence let go stays held (ref 1) with
 * its contents until the cache evicts it; nothing here knows about that. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "gpu-worker/kv_blocks.h"

/* Invariants 1 and 3, which need no tables. O(n_blocks): debug builds only. */
static void assert_pool(const sl_kv_blocks *kv)
{
#ifndef NDEBUG
    assert(kv->_n_free <= kv->n_blocks);
    uint32_t held = 0;
    for (uint32_t b = 0; b < kv->n_blocks; b++) held += kv->_ref[b] > 0;
    assert(kv->_n_free + held == kv->n_blocks);
    for (uint32_t i = 0; i < kv->_n_free; i++) {
        int32_t b = kv->_free[i];
        assert(b >= 0 && (uint32_t)b < kv->n_blocks && kv->_ref[b] == 0);
    }
#else
    (void)kv;
#endif
}

sl_status sl_kv_blocks_init(sl_kv_blocks *kv, uint32_t n_blocks, uint32_t block_size)
{
    memset(kv, 0, sizeof *kv);
    if (n_blocks == 0 || block_size == 0 || n_blocks > INT32_MAX) return SL_EINVAL;
    kv->_free = sl_malloc((size_t)n_blocks * sizeof *kv->_free);
    kv->_ref = sl_calloc(n_blocks, sizeof *kv->_ref);
    kv->_seen = sl_calloc(n_blocks, sizeof *kv->_seen);
    if (!kv->_free || !kv->_ref || !kv->_seen) {
        sl_kv_blocks_fini(kv);
        return SL_ENOMEM;
    }
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    /* Stack top is the end: pushed high to low, so ids come out 0, 1, 2, ... */
    for (uint32_t i = 0; i < n_blocks; i++) kv->_free[i] = (int32_t)(n_blocks - 1 - i);
    kv->_n_free = kv->_n_free_low = n_blocks;
    assert_pool(kv);
    return SL_OK;
}

void sl_kv_blocks_fini(sl_kv_blocks *kv)
{
    assert(kv->_n_free == kv->n_blocks);   /* a leaked table means a scheduler bug */
    free(kv->_free);
    free(kv->_ref);
    free(kv->_seen);
    memset(kv, 0, sizeof *kv);
}

uint32_t sl_kv_blocks_free_count(const sl_kv_blocks *kv)
{
    return kv->_n_free;
}

uint32_t sl_kv_blocks_touched(const sl_kv_blocks *kv)
{
    return kv->n_blocks - kv->_n_free_low;
}

uint32_t sl_kv_blocks_refcount(const sl_kv_blocks *kv, int32_t id)
{
    if (id < 0 || (uint32_t)id >= kv->n_blocks) return 0;
    return kv->_ref[id];
}

sl_status sl_kv_blocks_table_init(const sl_kv_blocks *kv, sl_kv_table *t, uint32_t n_ctx)
{
    memset(t, 0, sizeof *t);
    if (n_ctx == 0 || kv->block_size == 0) return SL_EINVAL;
    uint32_t cap = n_ctx / kv->block_size + (n_ctx % kv->block_size != 0);
    t->blocks = sl_malloc((size_t)cap * sizeof *t->blocks);
    if (!t->blocks) return SL_ENOMEM;
    t->capacity = cap;
    return SL_OK;
}

void sl_kv_blocks_table_fini(sl_kv_table *t)
{
    assert(t->n_used == 0);   /* still holding blocks: release first */
    free(t->blocks);
    memset(t, 0, sizeof *t);
}

/* ceil(n_tokens / block_size) without overflow near UINT32_MAX. */
static uint32_t blocks_for(const sl_kv_blocks *kv, uint32_t n_tokens)
{
    return n_tokens / kv->block_size + (n_tokens % kv->block_size != 0);
}

uint32_t sl_kv_blocks_needed(const sl_kv_blocks *kv, const sl_kv_table *t, uint32_t n_tokens)
{
    uint32_t want = blocks_for(kv, n_tokens), have = t ? t->n_used : 0;
    return want > have ? want - have : 0;
}

sl_status sl_kv_blocks_reserve(sl_kv_blocks *kv, sl_kv_table *t, uint32_t n_tokens)
{
    uint32_t want = blocks_for(kv, n_tokens);
    if (want <= t->n_used) return SL_OK;
    if (want > t->capacity) return SL_ERANGE;
    uint32_t extra = want - t->n_used;
    if (extra > kv->_n_free) return SL_AGAIN;   /* checked before taking any: all or nothing */
    for (uint32_t i = 0; i < extra; i++) {
        int32_t b = kv->_free[--kv->_n_free];
        assert(kv->_ref[b] == 0);
        kv->_ref[b] = 1;
        t->blocks[t->n_used++] = b;
    }
    if (kv->_n_free < kv->_n_free_low)
        kv->_n_free_low = kv->_n_free;
    assert_pool(kv);
    return SL_OK;
}

void sl_kv_blocks_release(sl_kv_blocks *kv, sl_kv_table *t)
{
    /* Last block first, so a table reserved again at once gets its old ids
     * back in the same order (LIFO stack). */
    for (uint32_t i = t->n_used; i-- > 0;) {
        int32_t b = t->blocks[i];
        if (b < 0 || (uint32_t)b >= kv->n_blocks || kv->_ref[b] == 0) {
            assert(!"kv table names a free or foreign block");
            continue;   /* release builds: never push a block twice */
        }
        if (--kv->_ref[b] == 0) kv->_free[kv->_n_free++] = b;
    }
    t->n_used = 0;
    assert_pool(kv);
}

sl_status sl_kv_blocks_share(sl_kv_blocks *kv, sl_kv_table *dst, const sl_kv_table *src,
                             uint32_t n_blocks)
{
    if (dst->n_used != 0) return SL_ESTATE;
    if (n_blocks > src->n_used || n_blocks > dst->capacity) return SL_ERANGE;
    for (uint32_t i = 0; i < n_blocks; i++) {
        int32_t b = src->blocks[i];
        assert(kv->_ref[b] > 0);
        kv->_ref[b]++;
        dst->blocks[i] = b;
    }
    dst->n_used = n_blocks;
    assert_pool(kv);
    return SL_OK;
}

sl_status sl_kv_blocks_append(sl_kv_blocks *kv, sl_kv_table *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= kv->n_blocks || kv->_ref[id] == 0) return SL_ESTATE;
    if (t->n_used >= t->capacity) return SL_ERANGE;
    kv->_ref[id]++;
    t->blocks[t->n_used++] = id;
    return SL_OK;
}

int32_t sl_kv_blocks_remove_slot(sl_kv_blocks *kv, sl_kv_table *t, uint32_t i)
{
    if (i >= t->n_used) return -1;
    int32_t b = t->blocks[i];
    assert(b >= 0 && (uint32_t)b < kv->n_blocks && kv->_ref[b] > 0);
    if (--kv->_ref[b] == 0) kv->_free[kv->_n_free++] = b;
    int32_t moved = --t->n_used == i ? -1 : t->blocks[t->n_used];
    if (moved >= 0) t->blocks[i] = moved;
    return moved;
}

int sl_kv_blocks_check(const sl_kv_blocks *kv, const sl_kv_table *const *tables,
                       uint32_t n_tables)
{
    uint32_t *seen = kv->_seen;
    if (kv->_n_free > kv->n_blocks) return 0;
    memset(seen, 0, (size_t)kv->n_blocks * sizeof *seen);
    for (uint32_t i = 0; i < kv->_n_free; i++) {               /* 1 */
        int32_t b = kv->_free[i];
        if (b < 0 || (uint32_t)b >= kv->n_blocks || kv->_ref[b] != 0 || seen[b]) return 0;
        seen[b] = 1;
    }
    memset(seen, 0, (size_t)kv->n_blocks * sizeof *seen);
    for (uint32_t k = 0; k < n_tables; k++) {                   /* 4 */
        const sl_kv_table *t = tables[k];
        if (t->n_used > t->capacity) return 0;
        for (uint32_t i = 0; i < t->n_used; i++) {
            int32_t b = t->blocks[i];
            if (b < 0 || (uint32_t)b >= kv->n_blocks) return 0;
            seen[b]++;
        }
    }
    uint32_t held = 0;
    for (uint32_t b = 0; b < kv->n_blocks; b++) {               /* 2, 3 */
        if (seen[b] != kv->_ref[b]) return 0;
        held += kv->_ref[b] > 0;
    }
    return kv->_n_free + held == kv->n_blocks;
}
