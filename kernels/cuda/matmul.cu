/* kernels/cuda/matmul.cu: quantized matrix x small-batch kernel, one warp
 * per weight row ("matmul_warp_per_row").
 *
 * Each warp owns one output row r and a tile of up to TOKEN_TILE activation
 * rows (grid.y walks the tiles). The row is cut into 32-element units (a
 * block of a 32-element format, a Q4_K/Q5_K/IQ4_XS sub-block, two 16-element
 * Q2_K/Q3_K sub-blocks, a quarter of a Q6_K half, 32 floats); lane l decodes units l, l+32, ... into registers once and dots
 * each with every activation row of the tile, then the warp sums its lanes
 * by a fixed butterfly. A weight byte is read once per tile, so for decode
 * batches up to TOKEN_TILE it is read once per call.
 *
 * Trade-off: correctness and batch invariance first. The per-token order of
 * operations is fixed by (type, ne0) alone: unit order per lane, explicit
 * fmaf chains, then the butterfly (matmul_unit.cuh; decode_test.cu checks
 * the decoding on the host). This is the general kernel: mmv.cu takes the
 * small-batch calls it supports, and large steps go to tensor cores
 * (gemm.cu) when the float16 copies exist. Known costs of this kernel where
 * it still runs: 2-byte loads for the formats whose blocks are only 2-byte
 * aligned (Q8_0, Q4_0, Q6_K), ceil(T/8) passes over the weights for many
 * rows, one row per warp however short the row, and the weights decoded
 * again for every tile of 8 tokens. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_unit.cuh"
#include "kernels/cuda/mmv.cuh"

#include <stdlib.h>
#include <string.h>

#define TOKEN_TILE 8     /* activation rows per warp: 8 accumulators stay in registers */
#define ROWS_PER_BLOCK 4 /* warps (weight rows) per 128-thread block */

template <int TYPE>
static __global__ void __launch_bounds__(ROWS_PER_BLOCK * SL_WARP)
matmul_warp_per_row(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n, int64_t rows,
                    const float *__restrict__ x, int64_t ldx, int64_t T, float *__restrict__ y, int64_t ldy,
                    bool vec)
{
    int lane = threadIdx.x % SL_WARP;
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / SL_WARP;
    if (r >= rows)
        return;
    int64_t t0 = (int64_t)blockIdx.y * TOKEN_TILE;
    int nt = (int)(T - t0 < TOKEN_TILE ? T - t0 : TOKEN_TILE);
    const uint8_t *row = W + r * row_bytes;
    const float *xt = x + t0 * ldx;
    float acc[TOKEN_TILE];
#pragma unroll
    for (int t = 0; t < TOKEN_TILE; t++)
        acc[t] = 0.0f;
    int64_t units = (n + UNIT - 1) / UNIT;
    unit d;
    for (int64_t u = lane; u < units; u += SL_WARP) {
        decode_unit<TYPE>(row, u, n, d);
#pragma unroll
        for (int t = 0; t < TOKEN_TILE; t++)
            if (t < nt)
                acc[t] += unit_dot<TYPE>(d, xt + t * ldx, u * UNIT, n, vec);
    }
#pragma unroll
    for (int t = 0; t < TOKEN_TILE; t++) {
        float v = sl_warp_sum(acc[t]);
        if (lane == 0 && t < nt)
            y[(t0 + t) * ldy + r] = v;
    }
}

bool sl_cuda_matmul_supports(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_F32: case SL_GGML_TYPE_F16: case SL_GGML_TYPE_BF16: case SL_GGML_TYPE_Q8_0:
    case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K: case SL_GGML_TYPE_Q6_K:
    case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_IQ4_NL:
    case SL_GGML_TYPE_Q8_1: case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

sl_status sl_cuda_matmul(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y,
                         int64_t ldy, cudaStream_t stream)
{
    if (T < 1 || ldx < w->ne0 || ldy < w->ne1 || (T + TOKEN_TILE - 1) / TOKEN_TILE > 65535 ||
        w->ne0 % sl_ggml_block_elems(w->type) != 0)
        return SL_EINVAL;
    /* Q4_K/Q5_K quants are read 16 bytes at a time: rows must start 16-byte aligned */
    if ((w->type == SL_GGML_TYPE_Q4_K || w->type == SL_GGML_TYPE_Q5_K) &&
        (((uintptr_t)w->data | w->row_bytes) & 15) != 0)
        return SL_EINVAL;
    /* the fast kernel where it applies; SLUICE_CUDA_MMV=0 keeps the general one (A/B timing) */
    static int use_mmv = -1;
    if (use_mmv < 0) {
        const char *e = getenv("SLUICE_CUDA_MMV");
        use_mmv = !(e && !strcmp(e, "0"));
    }
    if (use_mmv && sl_cuda_mmv_supports(w, ldx, x))
        return sl_cuda_mmv(w, x, ldx, T, y, ldy, stream);
    bool vec = ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
    dim3 grid((unsigned)((w->ne1 + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK),
              (unsigned)((T + TOKEN_TILE - 1) / TOKEN_TILE));
    dim3 block(ROWS_PER_BLOCK * SL_WARP);
#define LAUNCH(TY)                                                                                          \
    matmul_warp_per_row<TY><<<grid, block, 0, stream>>>(w->data, w->row_bytes, w->ne0, w->ne1, x, ldx, T, y, \
                                                        ldy, vec)
    switch (w->type) {
    case SL_GGML_TYPE_F32: LAUNCH(SL_GGML_TYPE_F32); break;
    case SL_GGML_TYPE_F16: LAUNCH(SL_GGML_TYPE_F16); break;
    case SL_GGML_TYPE_BF16: LAUNCH(SL_GGML_TYPE_BF16); break;
    case SL_GGML_TYPE_Q8_0: LAUNCH(SL_GGML_TYPE_Q8_0); break;
    case SL_GGML_TYPE_Q4_0: LAUNCH(SL_GGML_TYPE_Q4_0); break;
    case SL_GGML_TYPE_Q4_K: LAUNCH(SL_GGML_TYPE_Q4_K); break;
    case SL_GGML_TYPE_Q5_K: LAUNCH(SL_GGML_TYPE_Q5_K); break;
    case SL_GGML_TYPE_Q6_K: LAUNCH(SL_GGML_TYPE_Q6_K); break;
    case SL_GGML_TYPE_Q4_1: LAUNCH(SL_GGML_TYPE_Q4_1); break;
    case SL_GGML_TYPE_Q5_0: LAUNCH(SL_GGML_TYPE_Q5_0); break;
    case SL_GGML_TYPE_Q5_1: LAUNCH(SL_GGML_TYPE_Q5_1); break;
    case SL_GGML_TYPE_IQ4_NL: LAUNCH(SL_GGML_TYPE_IQ4_NL); break;
    case SL_GGML_TYPE_Q8_1: LAUNCH(SL_GGML_TYPE_Q8_1); break;
    case SL_GGML_TYPE_Q2_K: LAUNCH(SL_GGML_TYPE_Q2_K); break;
    case SL_GGML_TYPE_Q3_K: LAUNCH(SL_GGML_TYPE_Q3_K); break;
    case SL_GGML_TYPE_IQ4_XS: LAUNCH(SL_GGML_TYPE_IQ4_XS); break;
    case SL_GGML_TYPE_MXFP4: LAUNCH(SL_GGML_TYPE_MXFP4); break;
    default: return SL_EINVAL;
    }
#undef LAUNCH
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
