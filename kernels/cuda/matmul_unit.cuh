/* kernels/cuda/matmul_unit.cuh: the inner step of sl_cuda_matmul: decode
 * a 32-element unit of a weight row (a Q8_0/Q4_0 block, a Q4_K/Q5_K
 * sub-block, a quarter of a Q6_K half, 32 floats) into registers, and its
 * dot product with activations in a fixed order.
 * Where: matmul.cu (device) and decode_test.cu (host, against model/quant.c). */
#ifndef SL_CUDA_MATMUL_UNIT_CUH
#define SL_CUDA_MATMUL_UNIT_CUH

#include "kernels/cuda/common.cuh"

#define UNIT 32   /* elements a lane decodes at a time */

/* A decoded unit: element i = (i < 16 ? sa : sb) * q[i] - dm. For the float
 * types q holds the weights and sa = sb = 1, dm = 0. */
struct unit {
    float q[UNIT];
    float sa, sb, dm;
};

template <int TYPE>
static SL_HD void decode_unit(const uint8_t *row, int64_t u, int64_t n, unit &d)
{
    d.sa = d.sb = 1.0f;
    d.dm = 0.0f;
    if constexpr (TYPE == SL_GGML_TYPE_F32 || TYPE == SL_GGML_TYPE_F16 || TYPE == SL_GGML_TYPE_BF16) {
        int64_t base = u * UNIT;
SL_UNROLL
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
SL_UNROLL
        for (int i = 0; i < UNIT; i++)
            d.q[i] = (float)qs[i];
    } else if constexpr (TYPE == SL_GGML_TYPE_Q4_0) {
        const uint8_t *b = row + u * sizeof(sl_block_q4_0);
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b));
SL_UNROLL
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
SL_UNROLL
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
SL_UNROLL
        for (int l = 0; l < UNIT; l++)
            d.q[l] = (float)((((ql[l] >> shift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32);
    }
}

/* The unit's contribution to one dot product: explicit fmaf chains so the
 * compiler cannot reorder or contract differently between call sites. */
template <int TYPE>
static SL_HD float unit_dot(const unit &d, const float *x, int64_t base, int64_t n)
{
    float p0 = 0.0f, p1 = 0.0f, sx = 0.0f;
    constexpr bool has_min = TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K;
    constexpr bool plain = TYPE == SL_GGML_TYPE_F32 || TYPE == SL_GGML_TYPE_F16 || TYPE == SL_GGML_TYPE_BF16;
    /* float rows may end inside a unit: q is 0 there and x must not be read.
     * The guards are per element (not a shorter loop) so d.q stays in registers. */
SL_UNROLL
    for (int i = 0; i < 16; i++) {
        if (!plain || base + i < n) {
            float xi = x[base + i];
            p0 = fmaf(d.q[i], xi, p0);
            if (has_min)
                sx += xi;
        }
    }
SL_UNROLL
    for (int i = 16; i < UNIT; i++) {
        if (!plain || base + i < n) {
            float xi = x[base + i];
            p1 = fmaf(d.q[i], xi, p1);
            if (has_min)
                sx += xi;
        }
    }
#ifdef __CUDA_ARCH__
    float r = __fmul_rn(d.sa, p0);   /* not contracted into the fmaf below */
#else
    float r = d.sa * p0;
#endif
    r = fmaf(d.sb, p1, r);
    if (has_min)
        r = fmaf(-d.dm, sx, r);
    return r;
}

#endif
