/* kernels/cuda/paged.cuh: the device paged KV cache and the per-step batch
 * description that the attention and K/V-writing kernels share.
 * Layout (the CPU backend's, float32): per layer, all K blocks then all V
 * blocks; a block is [n_head_kv][block_size][head_dim], so one head's keys
 * for consecutive positions are contiguous.
 *   kv: (n_layer, 2, n_blocks, n_head_kv, block_size, head_dim) */
#ifndef SL_CUDA_PAGED_CUH
#define SL_CUDA_PAGED_CUH

#include <stdint.h>

typedef struct {
    float *kv;               /* device, layout above */
    int64_t n_blocks;        /* blocks per layer and K/V */
    int64_t block_floats;    /* n_head_kv * block_size * head_dim */
    int32_t block_size;      /* positions per block */
    int32_t n_head_kv, head_dim;
} sl_cuda_kv;

/* One forward step's token rows (T of them), device arrays. */
typedef struct {
    const int32_t *tok_pos;    /* (T) position of each token row */
    const int32_t *tok_table;  /* (T) offset in `blocks` of the row's sequence block table */
    const int32_t *blocks;     /* the sequences' block tables, concatenated */
} sl_cuda_batch;

/* Address of (layer, K or V, position p, kv head h) for a row whose block
 * table starts at blocks[table]. */
static __device__ __forceinline__ float *sl_kv_slot(const sl_cuda_kv &c, const sl_cuda_batch &b, int layer,
                                                    int is_v, int32_t table, int32_t p, int h)
{
    int64_t blk = b.blocks[table + p / c.block_size];
    int64_t off = ((int64_t)layer * 2 + is_v) * c.n_blocks * c.block_floats + blk * c.block_floats +
                  ((int64_t)h * c.block_size + p % c.block_size) * c.head_dim;
    return c.kv + off;
}

#endif
