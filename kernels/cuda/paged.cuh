/* kernels/cuda/paged.cuh: the device paged KV cache and the per-step batch
 * description that the attention and K/V-writing kernels share.
 * Layout (the CPU backend's, in rows): per layer, all K blocks then all V
 * blocks; a block is [n_head_kv][block_size] rows, a row being one
 * (position, kv head)'s head_dim values, so one head's keys for consecutive
 * positions are contiguous.
 *   kv: (n_layer, 2, n_blocks, n_head_kv, block_size) rows
 * A row is stored as the cache's type (sl_kv_row_bytes):
 *   F32   head_dim floats                        4 bytes per value
 *   F16   head_dim IEEE halves (rounded to nearest even)   2 bytes per value
 *   Q8_0  head_dim / 32 blocks of ggml's block_q8_0, in order: a half
 *         scale d = amax / 127 and 32 int8 q = round(x / d) (ties to even,
 *         like model/quant.c), x ~ d * q; 34 bytes per 32 values. Rows and
 *         blocks are only 2-byte aligned (34 * odd), so readers load halves
 *         and bytes, never wider words.
 * These are sl_backend_kv_block_bytes()'s figures: a block of the cache is
 * 2 * n_layer * n_head_kv * block_size * row_bytes. */
#ifndef SL_CUDA_PAGED_CUH
#define SL_CUDA_PAGED_CUH

#include <stdint.h>

#include "kernels/backend.h"

#define SL_KV_Q8_0_GROUP 32   /* values per q8_0 block (one scale) */
#define SL_KV_Q8_0_BYTES 34   /* its half scale and 32 int8 */

typedef struct {
    uint8_t *kv;             /* device, layout above */
    int64_t n_blocks;        /* blocks per layer and K/V */
    int32_t block_size;      /* positions per block */
    int32_t n_head_kv, head_dim;
    sl_kv_type type;         /* F32, F16 or Q8_0 (never AUTO: the kernels refuse it) */
} sl_cuda_kv;

/* One forward step's token rows (T of them), device arrays. */
typedef struct {
    const int32_t *tok_pos;    /* (T) position of each token row */
    const int32_t *tok_table;  /* (T) offset in `blocks` of the row's sequence block table */
    const int32_t *blocks;     /* the sequences' block tables, concatenated */
} sl_cuda_batch;

/* Bytes of one stored row of head_dim values; 0 for a type the cache does
 * not store or a head_dim q8_0 cannot take (not a multiple of 32). */
static __host__ __device__ __forceinline__ int64_t sl_kv_row_bytes(sl_kv_type type, int head_dim)
{
    switch (type) {
    case SL_KV_TYPE_F32: return (int64_t)head_dim * 4;
    case SL_KV_TYPE_F16: return (int64_t)head_dim * 2;
    case SL_KV_TYPE_Q8_0:
        return head_dim % SL_KV_Q8_0_GROUP ? 0 : (int64_t)head_dim / SL_KV_Q8_0_GROUP * SL_KV_Q8_0_BYTES;
    default: return 0;
    }
}

/* Bytes from a K row to the V row of the same (block, head, position),
 * rows of row_bytes (sl_kv_row_bytes). */
static __host__ __device__ __forceinline__ int64_t sl_kv_v_offset(const sl_cuda_kv &c, int64_t row_bytes)
{
    return c.n_blocks * c.n_head_kv * c.block_size * row_bytes;
}

/* Address of the row (layer, K or V, position p, kv head h) for a row whose
 * block table starts at blocks[table]; rows of row_bytes (sl_kv_row_bytes of
 * the cache's type, which a kernel templated on the type knows at compile
 * time). */
static __host__ __device__ __forceinline__ uint8_t *sl_kv_slot(const sl_cuda_kv &c, const sl_cuda_batch &b, int layer,
                                                      int is_v, int32_t table, int32_t p, int h, int64_t row_bytes)
{
    int64_t blk = b.blocks[table + p / c.block_size];
    int64_t rows_per_block = (int64_t)c.n_head_kv * c.block_size;
    int64_t row = ((int64_t)layer * 2 + is_v) * c.n_blocks * rows_per_block + blk * rows_per_block +
                  (int64_t)h * c.block_size + p % c.block_size;
    return c.kv + row * row_bytes;
}

#endif
