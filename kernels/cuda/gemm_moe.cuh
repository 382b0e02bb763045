/* kernels/cuda/gemm_moe.cuh: the grouped expert matmul of MoE layers on
 * tensor cores, for the steps whose dense matmuls take the tensor-core
 * path (prefill chunks, large decode batches: forward.cu's use_gemm).
 * The same contract as moe.cuh's sl_cuda_mmv_experts_biased (the grouping
 * of sl_cuda_moe_group, in_div, the fused SwiGLU or gpt-oss's clamped one,
 * the biases), with float16 inputs and float32 sums instead of the
 * small-batch kernel's float32 dot products.
 * How:  a block takes one tile of up to GM_BM routed pairs of one expert and
 *       GM_BN of the expert's weight rows; per GM_BK columns it decodes its
 *       weight rows from their GGUF blocks into shared memory as float16
 *       (matmul_unit.cuh's decoder, so every type the small-batch kernel
 *       reads), gathers its pairs' activation rows as float16, and runs
 *       wmma 16x16x16 products with float accumulators. The tiles come from
 *       a small kernel over the grouping (sl_cuda_moe_gemm_tiles), so the
 *       grid is fixed by (R, n_expert) and a step holding it replays as a
 *       CUDA graph.
 * Why:  the small-batch kernel re-reads an expert's rows once per pass of
 *       8 pairs and does every product in float32 on the CUDA cores: 6.8
 *       ms a layer of the 30B-A3B shape for a 512-row prefill chunk (H200,
 *       docs/PERF.md), where the weights take ~0.1 ms to read.
 * Range: as gemm.cuh, an activation row whose largest magnitude passes
 *       2^14 is divided by a power of two before the conversion and its
 *       outputs multiplied back (sl_cuda_moe_gemm_scales).
 * Guarantee: a pair's outputs depend on its own row, its expert's weights
 *       and the shapes only (the K order is fixed, no split over K, each
 *       output element its own accumulator), so within this path a row's
 *       results are the same bits whatever else is batched. Against the
 *       small-batch path they differ by float16 rounding (~1e-3), as the
 *       dense tensor-core path does (gemm.cuh).
 * Errors: SL_OK; SL_EINVAL for a type the decoder lacks or bad sizes;
 *       SL_EBACKEND when a launch failed (logged). Launches only. */
#ifndef SL_CUDA_GEMM_MOE_CUH
#define SL_CUDA_GEMM_MOE_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/matmul.cuh"
#include "shared/status.h"

#define SL_CUDA_MOE_GEMM_BM 32   /* routed pairs per tile */

/* Tiles of R routed pairs over n_expert experts can number at most this:
 * ceil(R / BM) full tiles plus one partial tile per expert in use. The
 * tile table sl_cuda_moe_gemm_tiles writes holds 1 + 2 * this int32. */
static inline int64_t sl_cuda_moe_gemm_max_tiles(int64_t R, int n_expert)
{
    int64_t used = R < n_expert ? R : n_expert;
    return (R + SL_CUDA_MOE_GEMM_BM - 1) / SL_CUDA_MOE_GEMM_BM + used;
}

/* True when sl_cuda_moe_gemm takes experts of this type. */
bool sl_cuda_moe_gemm_supports(uint32_t type);

/* Whether forward.cu sends a use_gemm step's experts here: yes unless
 * SLUICE_CUDA_MOE_GEMM=0 (read once; for A/B runs against the small-batch
 * kernel, which every other step takes). */
bool sl_cuda_moe_gemm_enabled(void);

/* OUT tiles: tiles[0] = the count, then (expert, first pair) per tile, the
 * experts in used[] order and each one's pairs in tiles of BM; off and used
 * as sl_cuda_moe_group wrote them. One thread: a few microseconds. */
sl_status sl_cuda_moe_gemm_tiles(const int32_t *off, const int32_t *used, int32_t *tiles, cudaStream_t stream);

/* OUT scale (rows): each row of x (rows x n, leading dimension ldx)'s power
 * of two divisor, 1 unless its largest magnitude passes 2^14. */
sl_status sl_cuda_moe_gemm_scales(const float *x, int64_t ldx, int64_t n, int64_t rows, float *scale,
                                  cudaStream_t stream);

/* For every tile of `tiles` (expert e, pairs from `first`): for each pair
 * q = pairs[i] of it and each weight row r < w->ne1,
 * y[q * ldy + r] = dot(row r of expert e, x[(q / in_div) * ldx ..]) on
 * tensor cores, the input row divided by scale[q / in_div] first and the sum
 * multiplied by it; with up, bias, up_bias and swiglu_oai as
 * sl_cuda_mmv_experts_biased. R = the pairs (sizes the grid with n_expert). */
sl_status sl_cuda_moe_gemm(const sl_cuda_weight *w, const sl_cuda_weight *up, const float *bias,
                           const float *up_bias, bool swiglu_oai, int n_expert, const int32_t *off,
                           const int32_t *pairs, const int32_t *tiles, int64_t R, int in_div, const float *x,
                           int64_t ldx, const float *scale, float *y, int64_t ldy, cudaStream_t stream);

#endif
