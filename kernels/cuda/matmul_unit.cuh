/* kernels/cuda/matmul_unit.cuh: the inner step of sl_cuda_matmul: decode
 * a 32-element unit of a weight row (a block of a 32-element format, MXFP4's included, a
 * 32-element run of a K-quant or IQ4_XS super-block, 32 floats) into
 * registers, and its dot product with activations in a fixed order.
 * Where: matmul.cu (device) and decode_test.cu (host, against model/quant.c). */
#ifndef SL_CUDA_MATMUL_UNIT_CUH
#define SL_CUDA_MATMUL_UNIT_CUH

#include "kernels/cuda/common.cuh"

#define UNIT 32   /* elements a lane decodes at a time */

/* A decoded unit: element i = (i < 16 ? sa : sb) * q[i] - (i < 16 ? dm :
 * dmb) (unit_elem). For the float types q holds the weights and sa = sb = 1,
 * dm = dmb = 0; dmb differs from dm only for Q2_K, whose 16-element halves
 * have mins of their own. A format with an added min m (Q4_1, Q5_1) has
 * dm = -m: d q - (-m) is d q + m exactly. */
struct unit {
    float q[UNIT];
    float sa, sb, dm, dmb;
};

/* Element k of a decoded unit, rounded as the host dequantizer rounds:
 * the product, then the min (not fused into one fmaf on the device). */
static SL_HD float unit_elem(const unit &d, int k)
{
    return sl_dev_add(sl_dev_mul(k < 16 ? d.sa : d.sb, d.q[k]), -(k < 16 ? d.dm : d.dmb));
}

/* Block bytes of the formats decoded here, as model/ggml_types.c and the
 * GGUF layouts give them (decode_test.cu checks them against the table). */
#define SL_BB_Q4_1 20     /* d, m, qs[16] */
#define SL_BB_Q5_0 22     /* d, qh[4], qs[16] */
#define SL_BB_Q5_1 24     /* d, m, qh[4], qs[16] */
#define SL_BB_IQ4_NL 18   /* d, qs[16] */
#define SL_BB_Q8_1 36     /* d, s, qs[32] (s, the block's sum, is not needed to dequantize) */
#define SL_BB_Q2_K 84     /* scales[16], qs[64], d, dmin */
#define SL_BB_Q3_K 110    /* hmask[32], qs[64], scales[12], d */
#define SL_BB_IQ4_XS 136  /* d, scales_h, scales_l[4], qs[128] */
#define SL_BB_MXFP4 17    /* e (E8M0), qs[16]: blocks 1-byte aligned */
static_assert(SL_BB_Q4_1 == 2 + 2 + 16 && SL_BB_Q5_0 == 2 + 4 + 16 && SL_BB_Q5_1 == 2 + 2 + 4 + 16 &&
                  SL_BB_IQ4_NL == 2 + 16 && SL_BB_Q8_1 == 2 + 2 + 32 && SL_BB_MXFP4 == 1 + 16,
              "32-element block layouts");
static_assert(SL_BB_Q2_K == 256 / 16 + 256 / 4 + 2 + 2 && SL_BB_Q3_K == 256 / 8 + 256 / 4 + 12 + 2 &&
                  SL_BB_IQ4_XS == 2 + 2 + 256 / 64 + 256 / 2,
              "256-element block layouts");
static_assert(sizeof(sl_block_q8_0) == 34 && sizeof(sl_block_q4_0) == 18, "legacy block layouts");

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
    d.dm = d.dmb = 0.0f;
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
    } else if constexpr (TYPE == SL_GGML_TYPE_Q4_1 || TYPE == SL_GGML_TYPE_Q5_0 || TYPE == SL_GGML_TYPE_Q5_1 ||
                         TYPE == SL_GGML_TYPE_IQ4_NL) {
        /* d, [m], [qh], qs[16]: element k < 16 is the low nibble of qs[k],
         * k >= 16 the high nibble of qs[k - 16]; bit k of qh is bit 4 of q_k */
        constexpr bool has_m = TYPE == SL_GGML_TYPE_Q4_1 || TYPE == SL_GGML_TYPE_Q5_1;
        constexpr bool has_h = TYPE == SL_GGML_TYPE_Q5_0 || TYPE == SL_GGML_TYPE_Q5_1;
        constexpr int bb = TYPE == SL_GGML_TYPE_Q4_1   ? SL_BB_Q4_1
                           : TYPE == SL_GGML_TYPE_Q5_0 ? SL_BB_Q5_0
                           : TYPE == SL_GGML_TYPE_Q5_1 ? SL_BB_Q5_1
                                                       : SL_BB_IQ4_NL;
        const uint8_t *b = row + u * bb;
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b));
        if constexpr (has_m)
            d.dm = d.dmb = -sl_dev_fp16(sl_dev_u16(b + 2));
        uint32_t qh = 0;
        if constexpr (has_h) {
            const uint8_t *p = b + (has_m ? 4 : 2);
            qh = (uint32_t)sl_dev_u16(p) | ((uint32_t)sl_dev_u16(p + 2) << 16);
        }
        uint32_t w[4];
        load_words<4, false>(b + bb - 16, w);   /* blocks are 2-byte aligned */
SL_UNROLL
        for (int i = 0; i < 16; i++) {
            int v = byte_at(w, i), lo = v & 0xF, hi = v >> 4;
            if constexpr (has_h) {
                lo |= ((qh >> i) & 1) << 4;
                hi |= ((qh >> (i + 16)) & 1) << 4;
            }
            if constexpr (TYPE == SL_GGML_TYPE_IQ4_NL) {
                d.q[i] = (float)sl_dev_iq4nl(lo);
                d.q[i + 16] = (float)sl_dev_iq4nl(hi);
            } else if constexpr (TYPE == SL_GGML_TYPE_Q5_0) {
                d.q[i] = (float)(lo - 16);
                d.q[i + 16] = (float)(hi - 16);
            } else {
                d.q[i] = (float)lo;
                d.q[i + 16] = (float)hi;
            }
        }
    } else if constexpr (TYPE == SL_GGML_TYPE_MXFP4) {
        /* d the halved E8M0 scale, q the doubled E2M1 values (model/quant.h);
         * blocks are 17 bytes, so the quants are read a byte at a time */
        const uint8_t *b = row + u * SL_BB_MXFP4;
        d.sa = d.sb = sl_dev_e8m0_half(b[0]);
SL_UNROLL
        for (int i = 0; i < 16; i++) {
            int v = b[1 + i];
            d.q[i] = (float)sl_dev_mxfp4(v & 0xF);
            d.q[i + 16] = (float)sl_dev_mxfp4(v >> 4);
        }
    } else if constexpr (TYPE == SL_GGML_TYPE_Q8_1) {
        const uint8_t *b = row + u * SL_BB_Q8_1;
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b));
        uint32_t w[8];
        load_words<8, false>(b + 4, w);
SL_UNROLL
        for (int i = 0; i < UNIT; i++)
            d.q[i] = (float)(int8_t)byte_at(w, i);
    } else if constexpr (TYPE == SL_GGML_TYPE_Q2_K) {
        /* run j of a super-block: elements 32j..32j+31, 2-bit quants at
         * shift 2(j%4) of qs[32(j/4) + l]; scales[2j], scales[2j+1] hold
         * (scale | min << 4) of its two halves */
        const uint8_t *b = row + (u / 8) * SL_BB_Q2_K;
        int j = (int)(u % 8);
        float dd = sl_dev_fp16(sl_dev_u16(b + 80)), dmin = sl_dev_fp16(sl_dev_u16(b + 82));
        d.sa = sl_dev_mul(dd, (float)(b[2 * j] & 0xF));
        d.sb = sl_dev_mul(dd, (float)(b[2 * j + 1] & 0xF));
        d.dm = sl_dev_mul(dmin, (float)(b[2 * j] >> 4));
        d.dmb = sl_dev_mul(dmin, (float)(b[2 * j + 1] >> 4));
        int shift = 2 * (j % 4);
        uint32_t w[8];
        load_words<8, false>(b + 16 + 32 * (j / 4), w);
SL_UNROLL
        for (int l = 0; l < UNIT; l++)
            d.q[l] = (float)((byte_at(w, l) >> shift) & 3);
    } else if constexpr (TYPE == SL_GGML_TYPE_Q3_K) {
        /* run j: low 2 bits at shift 2(j%4) of qs[32(j/4) + l], bit j of
         * hmask[l] set: +0, clear: -4; scales 2j and 2j+1 */
        const uint8_t *b = row + (u / 8) * SL_BB_Q3_K;
        int j = (int)(u % 8);
        float dd = sl_dev_fp16(sl_dev_u16(b + 108));
        d.sa = sl_dev_mul(dd, (float)sl_dev_scale_q3_k(b + 96, 2 * j));
        d.sb = sl_dev_mul(dd, (float)sl_dev_scale_q3_k(b + 96, 2 * j + 1));
        int shift = 2 * (j % 4);
        uint32_t wl[8], wh[8];
        load_words<8, false>(b + 32 + 32 * (j / 4), wl);   /* blocks are 2-byte aligned */
        load_words<8, false>(b, wh);
SL_UNROLL
        for (int l = 0; l < UNIT; l++)
            d.q[l] = (float)(((byte_at(wl, l) >> shift) & 3) - (((byte_at(wh, l) >> j) & 1) ? 0 : 4));
    } else if constexpr (TYPE == SL_GGML_TYPE_IQ4_XS) {
        /* sub-block j: 16 bytes of nibbles at qs + 16j, laid out as IQ4_NL's */
        const uint8_t *b = row + (u / 8) * SL_BB_IQ4_XS;
        int j = (int)(u % 8);
        d.sa = d.sb = sl_dev_mul(sl_dev_fp16(sl_dev_u16(b)), (float)sl_dev_scale_iq4_xs(b, j));
        uint32_t w[4];
        load_words<4, false>(b + 8 + 16 * j, w);
SL_UNROLL
        for (int i = 0; i < 16; i++) {
            int v = byte_at(w, i);
            d.q[i] = (float)sl_dev_iq4nl(v & 0xF);
            d.q[i + 16] = (float)sl_dev_iq4nl(v >> 4);
        }
    } else if constexpr (TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K) {
        constexpr bool q5 = TYPE == SL_GGML_TYPE_Q5_K;
        constexpr size_t bb = q5 ? sizeof(sl_block_q5_K) : sizeof(sl_block_q4_K);
        const uint8_t *b = row + (u / 8) * bb;
        int s = (int)(u % 8), sc, m;
        sl_dev_scale_min_k4(s, b + 4, &sc, &m);
        d.sa = d.sb = sl_dev_fp16(sl_dev_u16(b)) * (float)sc;
        d.dm = d.dmb = sl_dev_fp16(sl_dev_u16(b + 2)) * (float)m;   /* one min for the whole unit */
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
    float p0 = 0.0f, p1 = 0.0f, sx = 0.0f, sx1 = 0.0f;
    /* two_min: Q2_K's halves have mins of their own, summed apart */
    constexpr bool two_min = TYPE == SL_GGML_TYPE_Q2_K;
    constexpr bool has_min = TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K || TYPE == SL_GGML_TYPE_Q4_1 ||
                             TYPE == SL_GGML_TYPE_Q5_1 || two_min;
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
            if (two_min)
                sx1 += xv[i];
            else if (has_min)
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
    if (two_min)
        r = fmaf(-d.dmb, sx1, r);
    return r;
}

#endif
