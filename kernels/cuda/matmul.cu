/* kernels/cuda/matmul.cu: quantized matrix x small-batch kernel, one warp
 * per weight row ("matmul_warp_per_row").
 *
 * Each warp owns one output row r and a tile of up to TOKEN_TILE activation
 * rows (grid.y walks the tiles). The row is cut into 32-element units (a
 * Q8_0/Q4_0 block, a Q4_K/Q5_K sub-block, a quarter of a Q6_K half, 32
 * floats); lane l decodes units l, l+32, ... into registers once and dots
 * each with every activation row of the tile, then the warp sums its lanes
 * by a fixed butterfly. A weight byte is read once per tile, so for decode
 * batches up to TOKEN_TILE it is read once per call.
 *
 * Trade-off: correctness and batch invariance first. The per-token order of
 * operations is fixed by (type, ne0) alone: unit order per lane, explicit
 * fmaf chains, then the butterfly. Known costs left for the speed round:
 * byte-wise weight loads (no 16-byte vectors), ceil(T/8) passes over the
 * weights for prefill (cuBLAS on dequantized tiles belongs there), and only
 * ne0/32 busy lanes-units per row for small ne0. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul.cuh"

#define TOKEN_TILE 8     /* activation rows per warp: 8 accumulators stay in registers */
#define ROWS_PER_BLOCK 4 /* warps (weight rows) per 128-thread block */
#define UNIT 32          /* elements a lane decodes at a time */

/* A decoded unit: element i = (i < 16 ? sa : sb) * q[i] - dm. For the float
 * types q holds the weights and sa = sb = 1, dm = 0. */
struct unit {
    float q[UNIT];
    float sa, sb, dm;
};

template <int TYPE>
static __device__ __forceinline__ void decode_unit(const uint8_t *row, int64_t u, int64_t n, unit &d)
{
    d.sa = d.sb = 1.0f;
    d.dm = 0.0f;
    if constexpr (TYPE == SL_GGML_TYPE_F32 || TYPE == SL_GGML_TYPE_F16 || TYPE == SL_GGML_TYPE_BF16) {
        int64_t base = u * UNIT;
#pragma unroll
        for (int i = 0; i < UNIT; i++) {
            int64_t e = base + i;
            float v = 0.0f;
            if (e < n) {
                if constexpr (TYPE == SL_GGML_TYPE_F32)
                    v = ((const float *)row)[e];
                else if constexpr (TYPE == SL_GGML_TYPE_F16)
                    v = sl_dev_fp16(((const uint16_t *)row)[e]);
                else
                    v = sl_dev_bf16(((const uint16_t *)row)[e]);
            }
            d.q[i] = v;
        }
    } else if constexpr (TYPE == SL_GGML_TYPE_Q8_0) {
        const uint8_t *b = row + u * sizeof(sl_block_q8_0);
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b));
        const int8_t *qs = (const int8_t *)(b + 2);
#pragma unroll
        for (int i = 0; i < UNIT; i++)
            d.q[i] = (float)qs[i];
    } else if constexpr (TYPE == SL_GGML_TYPE_Q4_0) {
        const uint8_t *b = row + u * sizeof(sl_block_q4_0);
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b));
#pragma unroll
        for (int i = 0; i < 16; i++) {
            int v = b[2 + i];
            d.q[i] = (float)((v & 0xF) - 8);
            d.q[i + 16] = (float)((v >> 4) - 8);
        }
    } else if constexpr (TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K) {
        constexpr bool q5 = TYPE == SL_GGML_TYPE_Q5_K;
        constexpr size_t bb = q5 ? sizeof(sl_block_q5_K) : sizeof(sl_block_q4_K);
        const uint8_t *b = row + (u / 8) * bb;
        int s = (int)(u % 8), sc, m;
        sl_dev_scale_min_k4(s, b + 4, &sc, &m);
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b)) * (float)sc;
        d.dm = sl_dev_fp16(sl_dev_u16(b + 2)) * (float)m;
        const uint8_t *qh = b + 4 + SL_K_SCALE_SIZE;
        const uint8_t *qs = qh + (q5 ? SL_QK_K / 8 : 0) + 32 * (s / 2);
        int shift = 4 * (s & 1);
#pragma unroll
        for (int l = 0; l < UNIT; l++) {
            int v = (qs[l] >> shift) & 0xF;
            if constexpr (q5)
                v |= ((qh[l] >> s) & 1) << 4;
            d.q[l] = (float)v;
        }
    } else if constexpr (TYPE == SL_GGML_TYPE_Q6_K) {
        /* unit j of a super-block: half h = j/4, quarter qq = j%4 (see quant.h) */
        const uint8_t *b = row + (u / 8) * sizeof(sl_block_q6_K);
        int j = (int)(u % 8), h = j / 4, qq = j % 4;
        const uint8_t *ql = b + 64 * h + 32 * (qq & 1), *qh = b + SL_QK_K / 2 + 32 * h;
        const int8_t *scales = (const int8_t *)(b + SL_QK_K / 2 + SL_QK_K / 4);
        float dd = sl_dev_fp16(sl_dev_u16(b + SL_QK_K / 2 + SL_QK_K / 4 + SL_QK_K / 16));
        d.sa = dd * (float)scales[2 * j];
        d.sb = dd * (float)scales[2 * j + 1];
        int shift = 4 * (qq >> 1), hshift = 2 * qq;
#pragma unroll
        for (int l = 0; l < UNIT; l++)
            d.q[l] = (float)((((ql[l] >> shift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32);
    }
}

/* The unit's contribution to one dot product: explicit fmaf chains so the
 * compiler cannot reorder or contract differently between call sites. */
template <int TYPE>
static __device__ __forceinline__ float unit_dot(const unit &d, const float *x, int64_t base, int64_t n)
{
    float p0 = 0.0f, p1 = 0.0f, sx = 0.0f;
    constexpr bool has_min = TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K;
    constexpr bool plain = TYPE == SL_GGML_TYPE_F32 || TYPE == SL_GGML_TYPE_F16 || TYPE == SL_GGML_TYPE_BF16;
    /* float rows may end inside a unit: q is 0 there and x must not be read.
     * The guards are per element (not a shorter loop) so d.q stays in registers. */
#pragma unroll
    for (int i = 0; i < 16; i++) {
        if (!plain || base + i < n) {
            float xi = x[base + i];
            p0 = fmaf(d.q[i], xi, p0);
            if (has_min)
                sx += xi;
        }
    }
#pragma unroll
    for (int i = 16; i < UNIT; i++) {
        if (!plain || base + i < n) {
            float xi = x[base + i];
            p1 = fmaf(d.q[i], xi, p1);
            if (has_min)
                sx += xi;
        }
    }
    float r = __fmul_rn(d.sa, p0);
    r = fmaf(d.sb, p1, r);
    if (has_min)
        r = fmaf(-d.dm, sx, r);
    return r;
}

template <int TYPE>
static __global__ void __launch_bounds__(ROWS_PER_BLOCK * SL_WARP)
matmul_warp_per_row(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n, int64_t rows,
                    const float *__restrict__ x, int64_t ldx, int64_t T, float *__restrict__ y, int64_t ldy)
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
                acc[t] += unit_dot<TYPE>(d, xt + t * ldx, u * UNIT, n);
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
    dim3 grid((unsigned)((w->ne1 + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK),
              (unsigned)((T + TOKEN_TILE - 1) / TOKEN_TILE));
    dim3 block(ROWS_PER_BLOCK * SL_WARP);
#define LAUNCH(TY)                                                                                          \
    matmul_warp_per_row<TY><<<grid, block, 0, stream>>>(w->data, w->row_bytes, w->ne0, w->ne1, x, ldx, T, y, \
                                                        ldy)
    switch (w->type) {
    case SL_GGML_TYPE_F32: LAUNCH(SL_GGML_TYPE_F32); break;
    case SL_GGML_TYPE_F16: LAUNCH(SL_GGML_TYPE_F16); break;
    case SL_GGML_TYPE_BF16: LAUNCH(SL_GGML_TYPE_BF16); break;
    case SL_GGML_TYPE_Q8_0: LAUNCH(SL_GGML_TYPE_Q8_0); break;
    case SL_GGML_TYPE_Q4_0: LAUNCH(SL_GGML_TYPE_Q4_0); break;
    case SL_GGML_TYPE_Q4_K: LAUNCH(SL_GGML_TYPE_Q4_K); break;
    case SL_GGML_TYPE_Q5_K: LAUNCH(SL_GGML_TYPE_Q5_K); break;
    case SL_GGML_TYPE_Q6_K: LAUNCH(SL_GGML_TYPE_Q6_K); break;
    default: return SL_EINVAL;
    }
#undef LAUNCH
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
