/* kernels/cuda/attention_fa.cuh: flash attention on tensor cores for the
 * rows of prefill steps, over the f16 paged KV cache.
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream for
 *        the prompt rows of steps that take the tensor-core matmul path and
 *        carry a prompt chunk (decode rows, decode-only steps and other cache
 *        types keep attention.cuh).
 * Tiles: a block takes one "query group" (up to sl_cuda_fa_group_positions(G)
 *        consecutive positions of one sequence) times the G query heads that
 *        share one kv head: 64 query rows, position-major, (position, head).
 *        It walks the sequence's K/V in tiles of SL_CUDA_FA_TILE positions
 *        aligned to absolute positions (0, 64, 128, ...), from the tile
 *        holding the group's first visible position to the one holding its
 *        last row: S = Q K^T and O += P V on tensor cores (q and P rounded to
 *        f16, f32 accumulation), online softmax in f32.
 * Guarantee: a row's output depends only on its q, its position and its
 *        sequence's cache: every row's arithmetic is its own (the tensor
 *        cores compute each output element from its own row and column),
 *        and a tile that a row does not see leaves its state bitwise
 *        unchanged, so the row gives the same bits in any chunking, group
 *        or step (checked by sl_cuda_selftest_fa).
 * Errors: SL_EINVAL for a shape or cache the kernel does not take
 *        (sl_cuda_fa_supported), SL_EBACKEND for a failed launch (logged). */
#ifndef SL_CUDA_ATTENTION_FA_CUH
#define SL_CUDA_ATTENTION_FA_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/paged.cuh"
#include "shared/status.h"

#define SL_CUDA_FA_ROWS 64   /* query rows (position, head) per block: 4 warps x 16 */
#define SL_CUDA_FA_TILE 64   /* K/V positions per tile, tiles aligned to multiples of it */
#define SL_CUDA_FA_WARPS 4   /* warps per block, 16 query rows each */

/* Positions per query group for a GQA group of G query heads per kv head:
 * floor(ROWS / G) (64 at G 1, 16 at G 4, 8 at G 8); 0 for G outside
 * 1..ROWS (the kernel refuses). */
static __host__ __device__ __forceinline__ int sl_cuda_fa_group_positions(int G)
{
    return G >= 1 && G <= SL_CUDA_FA_ROWS ? SL_CUDA_FA_ROWS / G : 0;
}

/* Whether the kernel takes this cache and head count: f16 K/V, head_dim
 * 64, 128 or 256, n_head a multiple of n_head_kv with G = n_head /
 * n_head_kv in 1..SL_CUDA_FA_ROWS. */
static inline bool sl_cuda_fa_supported(const sl_cuda_kv *kv, int n_head)
{
    int hd = kv->head_dim;
    return kv->type == SL_KV_TYPE_F16 && (hd == 64 || hd == 128 || hd == 256) && kv->n_head_kv >= 1 &&
           n_head % kv->n_head_kv == 0 && sl_cuda_fa_group_positions(n_head / kv->n_head_kv) > 0;
}

/* Cuts a step's T token rows into query groups: a new group starts at row
 * t when t is the first row, when its sequence (tok_table) differs from row
 * t-1's, when its position is not row t-1's + 1, or when its position is a
 * multiple of qp (sl_cuda_fa_group_positions). So a group is at most qp
 * consecutive positions of one sequence inside one aligned window of qp,
 * and whether a row starts a group depends only on it and the row before;
 * a sequence's rows are cut the same whether they are passed alone or with
 * other sequences' (forward.cu passes some sequences only).
 * groups (OUT): 2 * n_groups entries, group i being rows [groups[2i],
 * groups[2i+1]) (consecutive groups here, but the kernel takes any list of
 * such pairs); it needs room for 2 T. Returns n_groups (0 for T < 1).
 * Host code. */
static inline int64_t sl_cuda_fa_groups(const int32_t *tok_pos, const int32_t *tok_table, int64_t T, int qp,
                                        int32_t *groups)
{
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++) {
        if (t == 0 || tok_table[t] != tok_table[t - 1] || tok_pos[t] != tok_pos[t - 1] + 1 || tok_pos[t] % qp == 0)
            groups[2 * n++] = (int32_t)t;
        groups[2 * n - 1] = (int32_t)(t + 1);
    }
    return n;
}

/* Dynamic shared memory of a block at head_dim hd, in bytes: the Q tile,
 * two K and two V tiles (f16, rows padded by 8 halves) and each warp's
 * 16 x (TILE + 8) float score tile; 0 for a head_dim the kernel lacks.
 * 64,512 at 64, 105,472 at 128 (two blocks per H200 SM), 187,392 at 256. */
static inline int64_t sl_cuda_fa_smem_bytes(int hd)
{
    if (hd != 64 && hd != 128 && hd != 256)
        return 0;
    int64_t ldh = hd + 8;
    return (int64_t)SL_CUDA_FA_ROWS * ldh * 2 + 4 * (int64_t)SL_CUDA_FA_TILE * ldh * 2 +
           (int64_t)SL_CUDA_FA_WARPS * 16 * (SL_CUDA_FA_TILE + 8) * 4;
}

/* Lets the kernels use the shared memory they need (above 48 KiB); call
 * once before any launch can be captured (backend creation).
 * sl_cuda_attention_fa calls it too. SL_OK or SL_EBACKEND. */
sl_status sl_cuda_attention_fa_prepare(void);

/* out (T, n_head*head_dim) = softmax(softcap(scale * q k^T), masked) v per
 * row and head, for layer `layer` of the cache; q (T, n_head*head_dim) f32.
 * A row at position p sees [window_start(p, window), p] of its sequence
 * (sl_cuda_attention_window_start). groups: device, n_groups (start, end)
 * pairs from sl_cuda_fa_groups(batch's tok_pos, tok_table, T,
 * sl_cuda_fa_group_positions(n_head / n_head_kv), ...), or from it over
 * some sequences' rows, offset; rows in no group
 * are not written. A group's rows must have consecutive positions (what
 * sl_cuda_fa_groups gives). Async; SL_OK (nothing to do for n_groups 0),
 * SL_EINVAL (unsupported shape, n_groups > T, negative window or cap),
 * SL_EBACKEND. */
sl_status sl_cuda_attention_fa(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                               const sl_cuda_batch *batch, const int32_t *groups, int64_t n_groups, int layer,
                               const sl_cuda_attn_opts *opts, cudaStream_t stream);

#endif
