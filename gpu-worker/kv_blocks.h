/* gpu-worker/kv_blocks.h: the paged KV cache's host-side bookkeeping.
 * Where:     the worker's scheduler thread; the backend owns the KV memory
 *            and addresses it by the block ids handed out here (block b holds
 *            positions [b * block_size, (b + 1) * block_size) of its pool).
 * Who:       one thread (the scheduler); no locking.
 * What:      a pool of n_blocks blocks of block_size token positions, a free
 *            list, and per-sequence block tables (logical block i of a
 *            sequence -> physical block id). Blocks are reference counted so
 *            a prefix cache can map one full block into several tables.
 * Ownership: the pool owns its arrays (sized once by _init); each table owns
 *            its id array (sized once from the max context by table_init);
 *            neither allocates after init.
 * Determinism: the same sequence of calls hands out the same block ids
 *            (a LIFO free list, initially 0, 1, 2, ... in that order).
 * Errors:    SL_OK; SL_AGAIN when the pool is short of free blocks (not an
 *            error: the scheduler preempts and retries); SL_EINVAL,
 *            SL_ENOMEM, SL_ERANGE, SL_ESTATE otherwise. */
#ifndef SL_KV_BLOCKS_H
#define SL_KV_BLOCKS_H

#include <stdint.h>

#include "shared/status.h"

/* The block pool. Fields starting with `_` are private. */
typedef struct {
    uint32_t n_blocks;     /* blocks in the pool */
    uint32_t block_size;   /* token positions per block */
    uint32_t _n_free;      /* entries used in _free */
    uint32_t _n_free_low;  /* the fewest _n_free has been: ids below it were never handed out */
    int32_t *_free;        /* (n_blocks) stack of free ids; top is _free[_n_free - 1] */
    uint32_t *_ref;        /* (n_blocks) tables holding each block; 0 iff free */
    uint32_t *_seen;       /* (n_blocks) scratch of sl_kv_blocks_check */
} sl_kv_blocks;

/* One sequence's block table. */
typedef struct {
    int32_t *blocks;       /* (capacity) physical ids of logical blocks 0..n_used-1 */
    uint32_t n_used;       /* blocks mapped: positions [0, n_used * block_size) */
    uint32_t capacity;     /* ceil(n_ctx / block_size), fixed at table_init */
} sl_kv_table;

/* Sets up a pool of `n_blocks` blocks of `block_size` positions, all free.
 * Returns SL_OK; SL_EINVAL if either is 0 or n_blocks > INT32_MAX; SL_ENOMEM.
 * On failure *kv is zeroed (sl_kv_blocks_fini on it is a no-op). */
sl_status sl_kv_blocks_init(sl_kv_blocks *kv, uint32_t n_blocks, uint32_t block_size);

/* Frees the pool's arrays. Tables still holding blocks become meaningless;
 * release them first (debug builds assert every block is free). */
void sl_kv_blocks_fini(sl_kv_blocks *kv);

/* Blocks on the free list now. */
uint32_t sl_kv_blocks_free_count(const sl_kv_blocks *kv);

/* Distinct blocks handed out since init (the pool's memory a backend has
 * written, so far: the rest may not be resident yet). Grows as the prefix
 * cache keeps freed blocks and fresh ones are taken; never above n_blocks. */
uint32_t sl_kv_blocks_touched(const sl_kv_blocks *kv);

/* Reference count of block `id` (0 = free); 0 for ids outside the pool. */
uint32_t sl_kv_blocks_refcount(const sl_kv_blocks *kv, int32_t id);

/* Sets up an empty table for a sequence of at most `n_ctx` positions:
 * capacity ceil(n_ctx / block_size). Returns SL_OK; SL_EINVAL if n_ctx is 0;
 * SL_ENOMEM. On failure *t is zeroed. */
sl_status sl_kv_blocks_table_init(const sl_kv_blocks *kv, sl_kv_table *t, uint32_t n_ctx);

/* Frees the table's id array; the table must hold no blocks (release first;
 * debug builds assert it). */
void sl_kv_blocks_table_fini(sl_kv_table *t);

/* Blocks that must be taken from the free list for `t` to cover positions
 * [0, n_tokens); `t` may be NULL for a sequence not yet holding any. For
 * admission checks; says nothing about capacity (reserve checks that). */
uint32_t sl_kv_blocks_needed(const sl_kv_blocks *kv, const sl_kv_table *t, uint32_t n_tokens);

/* Makes `t` cover positions [0, n_tokens), appending fresh blocks (ref 1).
 * All or nothing: SL_OK (also when already covered: tables never shrink
 * here); SL_AGAIN if the free list is short, with nothing taken; SL_ERANGE if
 * n_tokens exceeds the table's capacity, with nothing taken. */
sl_status sl_kv_blocks_reserve(sl_kv_blocks *kv, sl_kv_table *t, uint32_t n_tokens);

/* Drops the table's reference on each of its blocks (a block whose count
 * reaches 0 returns to the free list) and empties the table. Safe on an
 * empty table. Used when a sequence finishes, fails or is preempted. */
void sl_kv_blocks_release(sl_kv_blocks *kv, sl_kv_table *t);

/* Maps the first `n_blocks` blocks of `src` into the empty table `dst` as
 * its first blocks, incrementing their reference counts: the prefix-cache
 * primitive. Only full blocks may be shared: a block is written once, by the
 * sequence that filled it, and is read-only while shared (no copy-on-write).
 * Returns SL_OK; SL_ESTATE if dst already holds blocks; SL_ERANGE if
 * n_blocks exceeds src->n_used or dst->capacity. Nothing changes on failure. */
sl_status sl_kv_blocks_share(sl_kv_blocks *kv, sl_kv_table *dst, const sl_kv_table *src,
                             uint32_t n_blocks);

/* Appends block `id`, already held by some table, to `t` as its next slot,
 * incrementing its reference count: how a prefix cache maps a cached block
 * into a sequence's table, and how the cache itself holds its blocks (a
 * table used as a set). Same promise as share: the block is full and read-
 * only while shared. Returns SL_OK; SL_ERANGE if `t` is at capacity;
 * SL_ESTATE if `id` is free or outside the pool. Nothing changes on failure. */
sl_status sl_kv_blocks_append(sl_kv_blocks *kv, sl_kv_table *t, int32_t id);

/* Removes slot `i` of `t` by moving its last slot into it (the table's order
 * is lost: for a table used as a set) and drops that reference; a block
 * whose count reaches 0 returns to the free list. Returns the id of the block
 * that moved into slot i, or -1 if i was the last slot (or out of range). */
int32_t sl_kv_blocks_remove_slot(sl_kv_blocks *kv, sl_kv_table *t, uint32_t i);

/* The accounting checker, for `assert(sl_kv_blocks_check(...))` in debug
 * builds and for tests. Given every live table, returns 1 if:
 *   1. the free list holds _n_free distinct ids in [0, n_blocks), each ref 0;
 *   2. every block's ref equals the number of table slots naming it;
 *   3. _n_free + (blocks with ref > 0) == n_blocks;
 *   4. every table slot names an id in range and n_used <= capacity.
 * Returns 0 otherwise. O(n_blocks + slots); uses the pool's own scratch. */
int sl_kv_blocks_check(const sl_kv_blocks *kv, const sl_kv_table *const *tables,
                       uint32_t n_tables);

#endif
