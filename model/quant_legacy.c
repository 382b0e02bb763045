/* model/quant_legacy.c: dequantizers and quantizers of the 32-element block
 * formats other than Q8_0/Q4_0: Q5_0, Q4_1, Q5_1 (what llama.cpp's
 * quantizer writes for rows that are not a multiple of 256), IQ4_NL, Q8_1,
 * MXFP4.
 * Runs in the GGUF loader (embedding rows), mkmodel and tests; reached
 * through model/quant.c's dispatch (quant_legacy.h).
 * Dequantization follows the gguf package's numpy code operation for
 * operation (d*q, then + m: two roundings), so results match it bit for bit
 * (MXFP4, which the gguf package in use may predate: ggml's
 * dequantize_row_mxfp4, the same single product).
 * Quantization:
 *   Q5_0, Q4_1, Q5_1: the gguf package's reference quantizers byte for byte
 *     (which are ggml's quantize_row_*_ref, what llama.cpp's quantizer runs
 *     when it has no importance matrix), rounding quirks included: Q5_0
 *     forms x*id + 16.5 in double, rounds it to float and truncates.
 *   IQ4_NL: llama.cpp's quantizer searches; this one is sluice's own: 22
 *     candidate block scales (the largest-magnitude value on or near either
 *     end of the grid), each element to its nearest level, the scale refit
 *     by least squares; the best fit is rounded to fp16 and every element
 *     re-assigned to its nearest level under that final scale.
 *   Q8_1: no reference writes Q8_1 weights; the codes are our Q8_0 ones
 *     (d = amax/127, nearest even) and s = fp16(d * sum(qs)) as ggml
 *     defines it.
 *   MXFP4: ggml's quantize_row_mxfp4_ref byte for byte (what llama.cpp's
 *     converter writes for gpt-oss's experts): e = floor(log2(amax)) - 2
 *     + 127, so amax lands in [4, 8) times the halved scale, i.e. within
 *     the doubled table's top values 8 and 12; then each element takes the
 *     first code of least |value*d - x| (code 0, +0, before code 8, -0). */
#include <math.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_legacy.h"

_Static_assert(sizeof(sl_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(sl_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(sl_block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(sl_block_q8_1) == 36, "Q8_1 block is 36 bytes");
_Static_assert(sizeof(sl_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(sl_block_mxfp4) == 17, "MXFP4 block is 17 bytes");

const int8_t sl_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t sl_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

enum { QK = SL_QK_LEGACY };

/* ======================================================================
 * Packing shared by the nibble formats
 * ====================================================================== */

/* The low 4 bits of code l (0..31). */
static inline int nibble(const uint8_t qs[QK / 2], int l)
{
    return l < QK / 2 ? qs[l] & 0xF : qs[l - QK / 2] >> 4;
}

/* Bit 4 of code l, from the little-endian uint32 qh. */
static inline int high_bit(const uint8_t qh[4], int l)
{
    return (qh[l / 8] >> (l % 8)) & 1;
}

/* codes q[0..31] (0..31) -> nibbles in qs, bit 4 of each in qh (qh may be NULL). */
static void pack(const uint8_t q[QK], uint8_t qs[QK / 2], uint8_t *qh)
{
    for (int l = 0; l < QK / 2; l++)
        qs[l] = (uint8_t)((q[l] & 0xF) | ((q[l + QK / 2] & 0xF) << 4));
    if (qh) {
        memset(qh, 0, 4);
        for (int l = 0; l < QK; l++)
            qh[l / 8] |= (uint8_t)(((q[l] >> 4) & 1) << (l % 8));
    }
}

/* trunc(f) clamped to [0, hi]; NaN gives 0. The clamp comes first, so no
 * out-of-range float reaches the cast (numpy casts, then clips: the same
 * for every value these quantizers produce from finite input). */
static inline uint8_t trunc_clamp(float f, int hi)
{
    if (!(f >= 0.0f))
        return 0;
    if (f >= (float)hi)
        return (uint8_t)hi;
    return (uint8_t)(int)f;
}

/* ======================================================================
 * Dequantization
 * ====================================================================== */

static void dequant_q5_0(const sl_block_q5_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int l = 0; l < QK; l++)
            y[l] = d * (float)((nibble(b[i].qs, l) | (high_bit(b[i].qh, l) << 4)) - 16);
    }
}

/* Q4_1 (qh NULL) and Q5_1: (d * q) + m, as two float operations (separate
 * statements: a compiler that contracts within an expression must not fuse
 * them into one FMA). */
static void dequant_min(uint16_t hd, uint16_t hm, const uint8_t *qs, const uint8_t *qh, float *y)
{
    float d = sl_fp16_to_fp32(hd), m = sl_fp16_to_fp32(hm);
    for (int l = 0; l < QK; l++) {
        int q = nibble(qs, l) | (qh ? high_bit(qh, l) << 4 : 0);
        float t = d * (float)q;
        y[l] = t + m;
    }
}

static void dequant_q8_1(const sl_block_q8_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int l = 0; l < QK; l++)
            y[l] = (float)b[i].qs[l] * d;
    }
}

static void dequant_iq4_nl(const sl_block_iq4_nl *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int l = 0; l < QK; l++)
            y[l] = d * (float)sl_iq4nl_values[nibble(b[i].qs, l)];
    }
}

static void dequant_mxfp4(const sl_block_mxfp4 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = sl_e8m0_half(b[i].e);
        for (int l = 0; l < QK; l++)
            y[l] = (float)sl_mxfp4_values[nibble(b[i].qs, l)] * d;
    }
}

void sl_quant_legacy_dequantize(uint32_t type, const void *src, float *dst, int64_t nb)
{
    switch (type) {
    case SL_GGML_TYPE_Q5_0: dequant_q5_0(src, dst, nb); break;
    case SL_GGML_TYPE_Q4_1:
        for (int64_t i = 0; i < nb; i++) {
            const sl_block_q4_1 *b = (const sl_block_q4_1 *)src + i;
            dequant_min(b->d, b->m, b->qs, NULL, dst + QK * i);
        }
        break;
    case SL_GGML_TYPE_Q5_1:
        for (int64_t i = 0; i < nb; i++) {
            const sl_block_q5_1 *b = (const sl_block_q5_1 *)src + i;
            dequant_min(b->d, b->m, b->qs, b->qh, dst + QK * i);
        }
        break;
    case SL_GGML_TYPE_Q8_1: dequant_q8_1(src, dst, nb); break;
    case SL_GGML_TYPE_IQ4_NL: dequant_iq4_nl(src, dst, nb); break;
    case SL_GGML_TYPE_MXFP4: dequant_mxfp4(src, dst, nb); break;
    }
}

/* ======================================================================
 * Quantization
 * ====================================================================== */

/* Q5_0 as the gguf package (ggml's reference): the value of largest
 * magnitude maps to -16, d = max / -16, q = trunc(x * (1/d) + 16.5) with
 * the sum formed in double and rounded to float before the truncation (its
 * emulation of the FMA the C reference compiles to). */
static void quant_q5_0(const float *x, sl_block_q5_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int l = 0; l < QK; l++)
            if (fabsf(x[l]) > amax) {
                amax = fabsf(x[l]);
                max = x[l];
            }
        float d = max / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[QK];
        for (int l = 0; l < QK; l++) {
            double p = (double)x[l] * (double)id;   /* exact: 24 + 24 bits */
            double s = p + 16.5;
            q[l] = trunc_clamp((float)s, 31);
        }
        b[i].d = sl_fp32_to_fp16(d);
        pack(q, b[i].qs, b[i].qh);
    }
}

/* Q4_1 / Q5_1 as the gguf package: d = (max - min) / nmax, m = min,
 * q = trunc((x - min) * (1/d) + 0.5), all in float. */
static void quant_min(const float *x, int nmax, uint16_t *hd, uint16_t *hm, uint8_t q[QK])
{
    float mn = x[0], mx = x[0];
    for (int l = 1; l < QK; l++) {
        mn = x[l] < mn ? x[l] : mn;
        mx = x[l] > mx ? x[l] : mx;
    }
    float d = (mx - mn) / (float)nmax;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < QK; l++) {
        float t = (x[l] - mn) * id;
        float u = t + 0.5f;
        q[l] = trunc_clamp(u, nmax);
    }
    *hd = sl_fp32_to_fp16(d);
    *hm = sl_fp32_to_fp16(mn);
}

/* round(v) clamped to [-127, 127], ties to even (the 1.5*2^23 trick: exact
 * for |v| < 2^22, which the clamp guarantees); NaN gives -127. */
static inline int round127(float v)
{
    if (!(v >= -127.0f))
        return -127;
    if (v >= 127.0f)
        return 127;
    return (int)((v + 12582912.0f) - 12582912.0f);
}

static void quant_q8_1(const float *x, sl_block_q8_1 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f;
        for (int l = 0; l < QK; l++)
            amax = fmaxf(amax, fabsf(x[l]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int l = 0; l < QK; l++) {
            b[i].qs[l] = (int8_t)round127(x[l] * id);
            sum += b[i].qs[l];
        }
        b[i].d = sl_fp32_to_fp16(d);
        b[i].s = sl_fp32_to_fp16(d * (float)sum);
    }
}

/* The IQ4_NL level nearest v (in level units): a branchless binary search
 * over the 15 midpoints (exact in float); NaN gives level 0. */
static inline int iq4nl_nearest(float v)
{
    static const float mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
    int i = v > mid[7] ? 8 : 0;
    i += v > mid[i + 3] ? 4 : 0;
    i += v > mid[i + 1] ? 2 : 0;
    i += v > mid[i] ? 1 : 0;
    return i;
}

/* Codes of x under scale d (nearest level of x/d; all level 8, value 1*d,
 * when d is 0), and the least-squares scale for those codes (0 if none). */
static float iq4nl_assign(const float *x, float d, uint8_t q[QK])
{
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    double sqx = 0.0, sq2 = 0.0;
    for (int l = 0; l < QK; l++) {
        q[l] = (uint8_t)(d != 0.0f ? iq4nl_nearest(x[l] * id) : 8);
        double k = sl_iq4nl_values[q[l]];
        sqx += k * x[l];
        sq2 += k * k;
    }
    return sq2 > 0.0 ? (float)(sqx / sq2) : 0.0f;
}

static double iq4nl_error(const float *x, float d, const uint8_t q[QK])
{
    double e = 0.0;
    for (int l = 0; l < QK; l++) {
        double r = (double)x[l] - (double)d * sl_iq4nl_values[q[l]];
        e += r * r;
    }
    return e;
}

static void quant_iq4_nl(const float *x, sl_block_iq4_nl *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int l = 0; l < QK; l++)
            if (fabsf(x[l]) > amax) {
                amax = fabsf(x[l]);
                max = x[l];
            }
        uint8_t q[QK], best_q[QK];
        memset(best_q, 8, sizeof best_q);
        float best_d = 0.0f;
        if (amax > 0.0f && isfinite(amax)) {
            /* candidates: the extreme at 0.85..1.15 times either end level;
             * each keeps its least-squares scale, and the one that removes
             * the most squared error (largest sqx^2/sq2, i.e. least error
             * at that scale) wins */
            double best_err = INFINITY;
            for (int end = 0; end < 2; end++)
                for (int k = 0; k <= 10; k++) {
                    float level = (float)(end ? sl_iq4nl_values[15] : sl_iq4nl_values[0]);
                    float dc = max / (level * (0.85f + 0.03f * (float)k));
                    float dfit = iq4nl_assign(x, dc, q);
                    double err = iq4nl_error(x, dfit, q);
                    if (err < best_err) {
                        best_err = err;
                        best_d = dfit;
                        memcpy(best_q, q, sizeof q);
                    }
                }
        }
        /* fp16 scale, then the nearest level of every element under it;
         * one more refit-and-round round is kept if it codes x better */
        uint16_t hd = sl_fp32_to_fp16(best_d);
        float d = sl_fp16_to_fp32(hd);
        float refit = iq4nl_assign(x, d, best_q);
        uint16_t hd2 = sl_fp32_to_fp16(refit);
        float d2 = sl_fp16_to_fp32(hd2);
        iq4nl_assign(x, d2, q);
        if (d != 0.0f && d2 != 0.0f && isfinite(d2) && iq4nl_error(x, d2, q) < iq4nl_error(x, d, best_q)) {
            hd = hd2;
            memcpy(best_q, q, sizeof q);
        }
        b[i].d = hd;
        pack(best_q, b[i].qs, NULL);
    }
}

/* The first code whose value under scale d is nearest x (ggml's
 * best_index_mxfp4: strict <, so ties keep the lower code); NaN gives 0. */
static inline int mxfp4_nearest(float x, float d)
{
    int best = 0;
    float best_err = fabsf((float)sl_mxfp4_values[0] * d - x);
    for (int k = 1; k < 16; k++) {
        float err = fabsf((float)sl_mxfp4_values[k] * d - x);
        if (err < best_err) {
            best = k;
            best_err = err;
        }
    }
    return best;
}

static void quant_mxfp4(const float *x, sl_block_mxfp4 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f;
        for (int l = 0; l < QK; l++)
            if (amax < fabsf(x[l]))
                amax = fabsf(x[l]);
        /* ggml casts the float exponent to uint8_t; clamping keeps that
         * cast defined for inf and for |x| beyond 2^128 or below 2^-125,
         * where ggml's own result is undefined (finite weights never are) */
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2.0f + 127.0f : 0.0f;
        uint8_t e = (uint8_t)(ef >= 0.0f ? (ef <= 255.0f ? ef : 255.0f) : 0.0f);
        float d = sl_e8m0_half(e);
        b[i].e = e;
        uint8_t q[QK];
        for (int l = 0; l < QK; l++)
            q[l] = (uint8_t)mxfp4_nearest(x[l], d);
        pack(q, b[i].qs, NULL);
    }
}

void sl_quant_legacy_quantize(uint32_t type, const float *src, void *dst, int64_t nb)
{
    switch (type) {
    case SL_GGML_TYPE_Q5_0: quant_q5_0(src, dst, nb); break;
    case SL_GGML_TYPE_Q4_1:
        for (int64_t i = 0; i < nb; i++) {
            sl_block_q4_1 *b = (sl_block_q4_1 *)dst + i;
            uint8_t q[QK];
            quant_min(src + QK * i, 15, &b->d, &b->m, q);
            pack(q, b->qs, NULL);
        }
        break;
    case SL_GGML_TYPE_Q5_1:
        for (int64_t i = 0; i < nb; i++) {
            sl_block_q5_1 *b = (sl_block_q5_1 *)dst + i;
            uint8_t q[QK];
            quant_min(src + QK * i, 31, &b->d, &b->m, q);
            pack(q, b->qs, b->qh);
        }
        break;
    case SL_GGML_TYPE_Q8_1: quant_q8_1(src, dst, nb); break;
    case SL_GGML_TYPE_IQ4_NL: quant_iq4_nl(src, dst, nb); break;
    case SL_GGML_TYPE_MXFP4: quant_mxfp4(src, dst, nb); break;
    }
}
