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

/* NW little-endian 32-bit words from p: 16-byte loads when p is 16-byte
 * aligned (Q4_K/Q5_K quants), else 2-byte loads (Q8_0, Q4_0 and Q6_K blocks
 * are only 2-byte aligned). Byte l is then byte_at(w, l). */
template <int NW, bool A16>
static SL_HD void load_words(const uint8_t *p, uint32_t (&w)[NW])
{
    if constexpr (A16) {
        const uint4 *v = (const uint4 *)p;
SL_UNROLL
        for (int k = 0; k < NW / 4; k++) {
            uint4 a = v[k];
            w[4 * k] = a.x;
            w[4 * k + 1] = a.y;
            w[4 * k + 2] = a.z;
            w[4 * k + 3] = a.w;
        }
    } else {
        const uint16_t *h = (const uint16_t *)p;
SL_UNROLL
        for (int k = 0; k < NW; k++)
            w[k] = (uint32_t)h[2 * k] | ((uint32_t)h[2 * k + 1] << 16);
    }
}

#define byte_at(w, l) ((int)(((w)[(l) >> 2] >> (8 * ((l) & 3))) & 0xFF))

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
        uint32_t w[8];
        load_words<8, false>(b + 2, w);
SL_UNROLL
        for (int i = 0; i < UNIT; i++)
            d.q[i] = (float)(int8_t)byte_at(w, i);
    } else if constexpr (TYPE == SL_GGML_TYPE_Q4_0) {
        const uint8_t *b = row + u * sizeof(sl_block_q4_0);
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b));
        uint32_t w[4];
        load_words<4, false>(b + 2, w);
SL_UNROLL
        for (int i = 0; i < 16; i++) {
            int v = byte_at(w, i);
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
        uint32_t wq[8], wh[8];
        load_words<8, true>(qs, wq);   /* rows and blocks are 16-byte multiples: see sl_cuda_matmul */
        if constexpr (q5)
            load_words<8, true>(qh, wh);
SL_UNROLL
        for (int l = 0; l < UNIT; l++) {
            int v = (byte_at(wq, l) >> shift) & 0xF;
            if constexpr (q5)
                v |= ((byte_at(wh, l) >> s) & 1) << 4;
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
        uint32_t wl[8], wh[8];
        load_words<8, false>(ql, wl);
        load_words<8, false>(qh, wh);
SL_UNROLL
        for (int l = 0; l < UNIT; l++)
            d.q[l] = (float)((((byte_at(wl, l) >> shift) & 0xF) | (((byte_at(wh, l) >> hshift) & 3) << 4)) - 32);
    }
}

/* The unit's contribution to one dot product: explicit fmaf chains so the
 * compiler cannot reorder or contract differently between call sites.
 * vec: x + base may be read as float4 (16-byte aligned); either way the
 * same values enter the same arithmetic, so the result does not depend on it. */
template <int TYPE>
static SL_HD float unit_dot(const unit &d, const float *x, int64_t base, int64_t n, bool vec)
{
    float p0 = 0.0f, p1 = 0.0f, sx = 0.0f;
    constexpr bool has_min = TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K;
    constexpr bool plain = TYPE == SL_GGML_TYPE_F32 || TYPE == SL_GGML_TYPE_F16 || TYPE == SL_GGML_TYPE_BF16;
    const float *xp = x + base;
    float xv[UNIT];
    if (vec && (!plain || base + UNIT <= n)) {
        const float4 *x4 = (const float4 *)xp;
SL_UNROLL
        for (int k = 0; k < UNIT / 4; k++) {
            float4 f = x4[k];
            xv[4 * k] = f.x;
            xv[4 * k + 1] = f.y;
            xv[4 * k + 2] = f.z;
            xv[4 * k + 3] = f.w;
        }
    } else {
        /* float rows may end inside a unit: x must not be read past n */
SL_UNROLL
        for (int i = 0; i < UNIT; i++)
            xv[i] = !plain || base + i < n ? xp[i] : 0.0f;
    }
    /* per-element guards (not a shorter loop) keep d.q and xv in registers */
SL_UNROLL
    for (int i = 0; i < 16; i++) {
        if (!plain || base + i < n) {
            p0 = fmaf(d.q[i], xv[i], p0);
            if (has_min)
                sx += xv[i];
        }
    }
SL_UNROLL
    for (int i = 16; i < UNIT; i++) {
        if (!plain || base + i < n) {
            p1 = fmaf(d.q[i], xv[i], p1);
            if (has_min)
                sx += xv[i];
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
