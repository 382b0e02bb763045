/* model/quant.c: the reference dequantizers of GGUF's block formats and
 * sluice's own quantizers: F32/F16/BF16, Q8_0, Q4_0 and the K-quants here,
 * the other 32-element formats in quant_legacy.c (dispatched from here),
 * the half/bfloat16 scalars in half.c.
 * Runs in mkmodel (quantize), the GGUF loader and tests (dequantize).
 * Trade-off: the K-quant quantizers spend a search per sub-block (11-21
 * candidate scales, each refit by least squares, then a search over the
 * 6/8-bit scale codes) to land near llama.cpp's error; that costs ~6-9 M
 * weights/s per thread (Q4_K..Q6_K), ~30x slower than rounding from the
 * min/max: fine for a model writer, and inference never quantizes weights. */
#include "model/quant.h"

#include <math.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant_legacy.h"
#include "model/quant_klow.h"

_Static_assert(sizeof(sl_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(sl_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(sl_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(sl_block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(sl_block_q6_K) == 210, "Q6_K block is 210 bytes");

/* sl_ggml_block_bytes() is a function, so these use literals; the unit test
 * checks the same sizes against the table. */

/* ======================================================================
 * Dequantization (operation order follows the gguf package's numpy code)
 * ====================================================================== */

static void dequant_q4_0(const sl_block_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK4_0) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int l = 0; l < 16; l++) {
            y[l] = d * (float)((b[i].qs[l] & 0xF) - 8);
            y[l + 16] = d * (float)((b[i].qs[l] >> 4) - 8);
        }
    }
}

static void dequant_q8_0(const sl_block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK8_0) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int l = 0; l < SL_QK8_0; l++)
            y[l] = (float)b[i].qs[l] * d;
    }
}

static void dequant_q4_K(const sl_block_q4_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d = sl_fp16_to_fp32(b[i].d), dmin = sl_fp16_to_fp32(b[i].dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            sl_quant_get_scale_min_k4(s, b[i].scales, &sc, &m);
            float ds = d * (float)sc, dm = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++)
                y[32 * s + l] = ds * (float)((q[l] >> shift) & 0xF) - dm;
        }
    }
}

static void dequant_q5_K(const sl_block_q5_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d = sl_fp16_to_fp32(b[i].d), dmin = sl_fp16_to_fp32(b[i].dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            sl_quant_get_scale_min_k4(s, b[i].scales, &sc, &m);
            float ds = d * (float)sc, dm = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0xF) | (((b[i].qh[l] >> s) & 1) << 4);
                y[32 * s + l] = ds * (float)v - dm;
            }
        }
    }
}

/* The 6-bit value of element k (0..255) of a Q6_K block, minus 32. */
static inline int q6_K_value(const sl_block_q6_K *b, int k)
{
    int h = k / 128, r = k % 128, quarter = r / 32, l = r % 32;
    uint8_t ql = b->ql[64 * h + l + 32 * (quarter & 1)];
    int lo = (quarter < 2) ? (ql & 0xF) : (ql >> 4);
    int hi = (b->qh[32 * h + l] >> (2 * quarter)) & 3;
    return (lo | (hi << 4)) - 32;
}

static void dequant_q6_K(const sl_block_q6_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int k = 0; k < SL_QK_K; k++)
            y[k] = (d * (float)b[i].scales[k / 16]) * (float)q6_K_value(&b[i], k);
    }
}

/* Validates (type, n) for both directions; *nb gets the block count. */
static sl_status check_row(uint32_t type, int64_t n, int64_t *nb)
{
    if (!sl_ggml_type_supported(type))
        return SL_EUNSUPPORTED;
    int64_t be = sl_ggml_block_elems(type);
    if (n < 0 || n % be != 0)
        return SL_EINVAL;
    *nb = n / be;
    return SL_OK;
}

sl_status sl_quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    int64_t nb = 0;
    sl_status rc = check_row(type, n, &nb);
    if (rc < 0)
        return rc;
    switch (type) {
    case SL_GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SL_GGML_TYPE_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = sl_fp16_to_fp32(h[i]);
        break;
    }
    case SL_GGML_TYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = sl_bf16_to_fp32(h[i]);
        break;
    }
    case SL_GGML_TYPE_Q4_0: dequant_q4_0(src, dst, nb); break;
    case SL_GGML_TYPE_Q8_0: dequant_q8_0(src, dst, nb); break;
    case SL_GGML_TYPE_Q4_K: dequant_q4_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q5_K: dequant_q5_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q6_K: dequant_q6_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4: sl_quant_legacy_dequantize(type, src, dst, nb); break;
    case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_IQ2_XXS: case SL_GGML_TYPE_IQ2_XS: case SL_GGML_TYPE_IQ2_S:
    case SL_GGML_TYPE_IQ3_XXS: case SL_GGML_TYPE_IQ3_S: case SL_GGML_TYPE_IQ1_S: case SL_GGML_TYPE_IQ1_M:
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0:
        sl_quant_klow_dequantize(type, src, dst, nb); break;
    }
    return SL_OK;
}

/* ======================================================================
 * Quantization
 * ====================================================================== */

/* round(v) clamped to [lo, hi], ties to even; NaN gives lo. Clamping first
 * keeps out-of-range floats away from an undefined cast. Adding and taking
 * away 1.5*2^23 rounds exactly (the sum's ulp is 1) in a few inline
 * instructions, where lrintf/roundf may be libm calls; the K-quant search
 * rounds ~300 times per weight. */
static inline int round_clamp(float v, int lo, int hi)
{
    if (!(v >= (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)((v + 12582912.0f) - 12582912.0f);
}

static void quant_q8_0(const float *x, sl_block_q8_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SL_QK8_0) {
        float amax = 0.0f;
        for (int l = 0; l < SL_QK8_0; l++)
            amax = fmaxf(amax, fabsf(x[l]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = sl_fp32_to_fp16(d);
        for (int l = 0; l < SL_QK8_0; l++)
            b[i].qs[l] = (int8_t)round_clamp(x[l] * id, -127, 127);
    }
}

/* Q4_0 as ggml defines it: the value of largest magnitude maps to -8, so the
 * asymmetric code range -8..7 is used fully on that side. */
static void quant_q4_0(const float *x, sl_block_q4_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SL_QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int l = 0; l < SL_QK4_0; l++) {
            if (fabsf(x[l]) > amax) {
                amax = fabsf(x[l]);
                max = x[l];
            }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = sl_fp32_to_fp16(d);
        for (int l = 0; l < 16; l++) {
            int q0 = round_clamp(x[l] * id + 8.0f, 0, 15);
            int q1 = round_clamp(x[l + 16] * id + 8.0f, 0, 15);
            b[i].qs[l] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* sum (a*q[i] + c - x[i])^2 over n (a multiple of 4) elements, in four
 * independent chains so the adds pipeline. */
static inline float sq_err4(const float *x, const uint8_t *q, int n, float a, float c)
{
    float e0 = 0, e1 = 0, e2 = 0, e3 = 0;
    for (int i = 0; i < n; i += 4) {
        float d0 = a * q[i] + c - x[i], d1 = a * q[i + 1] + c - x[i + 1];
        float d2 = a * q[i + 2] + c - x[i + 2], d3 = a * q[i + 3] + c - x[i + 3];
        e0 += d0 * d0;
        e1 += d1 * d1;
        e2 += d2 * d2;
        e3 += d3 * d3;
    }
    return (e0 + e1) + (e2 + e3);
}

static inline float sq_err4_i8(const float *x, const int8_t *q, int n, float a)
{
    float e0 = 0, e1 = 0, e2 = 0, e3 = 0;
    for (int i = 0; i < n; i += 4) {
        float d0 = a * q[i] - x[i], d1 = a * q[i + 1] - x[i + 1];
        float d2 = a * q[i + 2] - x[i + 2], d3 = a * q[i + 3] - x[i + 3];
        e0 += d0 * d0;
        e1 += d1 * d1;
        e2 += d2 * d2;
        e3 += d3 * d3;
    }
    return (e0 + e1) + (e2 + e3);
}

/* Fits x ~ a*q - b on one sub-block, q in 0..nmax, a >= 0, b >= 0 (the
 * K-quant min is subtracted and stored unsigned). Tries 11 candidate inverse
 * scales around nmax/(max - min) (21 gain only 0.05% RMSE); for each, rounds q and solves the 2x2
 * least-squares problem for (a, b) exactly; keeps the best, then refines the
 * winner twice (re-round q to it, refit). Returns the squared error. */
static float fit_scale_min(const float *x, int n, int nmax, float *a_out, float *b_out)
{
    float xmin = 0.0f, xmax = -INFINITY, sx = 0.0f;
    for (int i = 0; i < n; i++) {
        xmin = fminf(xmin, x[i]);
        xmax = fmaxf(xmax, x[i]);
        sx += x[i];
    }
    float best_a = 0.0f, best_b = -xmin, best_err = INFINITY;
    if (!(xmax > xmin)) {            /* constant block (or non-finite data) */
        *a_out = 0.0f;
        *b_out = isfinite(best_b) ? best_b : 0.0f;
        return 0.0f;
    }
    for (int step = 0; step < 11 + 2; step++) {
        float ia;
        float off;
        if (step < 11) {
            ia = ((float)nmax - 1.0f + 0.2f * (float)step) / (xmax - xmin);
            off = -xmin;
        } else {                     /* refinement rounds around the winner */
            if (best_a <= 0.0f)
                break;
            ia = 1.0f / best_a;
            off = best_b;
        }
        /* integer code sums are exact; four partial float sums keep the
         * add chains short (this loop is most of the quantizer's time) */
        int is1 = 0, is2 = 0;
        float p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        uint8_t q[32];
        for (int i = 0; i < n; i += 4) {   /* n is 32 */
            int c0 = round_clamp((x[i] + off) * ia, 0, nmax);
            int c1 = round_clamp((x[i + 1] + off) * ia, 0, nmax);
            int c2 = round_clamp((x[i + 2] + off) * ia, 0, nmax);
            int c3 = round_clamp((x[i + 3] + off) * ia, 0, nmax);
            q[i] = (uint8_t)c0; q[i + 1] = (uint8_t)c1; q[i + 2] = (uint8_t)c2; q[i + 3] = (uint8_t)c3;
            is1 += (c0 + c1) + (c2 + c3);
            is2 += (c0 * c0 + c1 * c1) + (c2 * c2 + c3 * c3);
            p0 += (float)c0 * x[i];
            p1 += (float)c1 * x[i + 1];
            p2 += (float)c2 * x[i + 2];
            p3 += (float)c3 * x[i + 3];
        }
        float s1 = (float)is1, s2 = (float)is2, sqx = (p0 + p1) + (p2 + p3);
        float det = (float)n * s2 - s1 * s1;
        float a, c;                  /* x ~ a*q + c, c = -b */
        if (det > 0.0f) {
            a = ((float)n * sqx - s1 * sx) / det;
            c = (sx - a * s1) / (float)n;
        } else {                     /* all codes equal: no slope to fit */
            a = 0.0f;
            c = 1.0f;
        }
        if (c > 0.0f) {              /* a positive min would need b < 0: pin b = 0 */
            c = 0.0f;
            a = s2 > 0 ? sqx / s2 : 0.0f;
        }
        if (a < 0.0f)
            continue;
        float err = sq_err4(x, q, n, a, c);
        if (err < best_err) {
            best_err = err;
            best_a = a;
            best_b = -c;
        }
    }
    *a_out = best_a;
    *b_out = best_b;
    return best_err;
}

/* Fits x ~ a*q on one Q6_K sub-block, q in -32..31 (a may be negative). */
static void fit_scale_sym(const float *x, int n, float *a_out)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    *a_out = 0.0f;
    if (!(amax > 0.0f) || !isfinite(amax))
        return;
    float best_err = INFINITY;
    for (int step = 0; step < 21 + 2; step++) {
        float ia;
        if (step < 21)               /* the extreme lands on -32 +- 1 */
            ia = -(31.0f + 0.1f * (float)step) / max;
        else if (*a_out != 0.0f)
            ia = 1.0f / *a_out;
        else
            break;
        int is2 = 0;
        float p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        int8_t q[16];
        for (int i = 0; i < n; i += 4) {   /* n is 16 */
            int c0 = round_clamp(x[i] * ia, -32, 31), c1 = round_clamp(x[i + 1] * ia, -32, 31);
            int c2 = round_clamp(x[i + 2] * ia, -32, 31), c3 = round_clamp(x[i + 3] * ia, -32, 31);
            q[i] = (int8_t)c0; q[i + 1] = (int8_t)c1; q[i + 2] = (int8_t)c2; q[i + 3] = (int8_t)c3;
            is2 += (c0 * c0 + c1 * c1) + (c2 * c2 + c3 * c3);
            p0 += (float)c0 * x[i];
            p1 += (float)c1 * x[i + 1];
            p2 += (float)c2 * x[i + 2];
            p3 += (float)c3 * x[i + 3];
        }
        if (is2 <= 0)
            continue;
        float a = ((p0 + p1) + (p2 + p3)) / (float)is2;
        float err = sq_err4_i8(x, q, n, a);
        if (err < best_err) {
            best_err = err;
            *a_out = a;
        }
    }
}

/* Squared error of one sub-block coded with effective scale ea and min em
 * (codes re-rounded to them); the codes go to q when q != NULL. */
static float k4_sub_error(const float *x, int nmax, float ea, float em, uint8_t *q)
{
    float ia = ea > 0.0f ? 1.0f / ea : 0.0f;
    uint8_t codes[32];
    for (int l = 0; l < 32; l++)
        codes[l] = (uint8_t)round_clamp((x[l] + em) * ia, 0, nmax);
    if (q)
        memcpy(q, codes, 32);
    return sq_err4(x, codes, 32, ea, -em);
}

/* Codes the 8 fitted sub-block scales a[] and mins m[] with 6-bit integers
 * under fp16 super-scales d, dmin. Rounding a/d on its own ignores how the
 * values re-round, so: d and dmin each try 7 factors around max/63, and for
 * the chosen pair every sub-block tries the 3x3 integers around round(a/d),
 * round(m/dmin), keeping whichever codes x best. Writes d, dmin, the packed
 * scales and the codes q[256]. */
static void quant_k4_superblock(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                                uint8_t scales[SL_K_SCALE_SIZE], uint8_t q[SL_QK_K])
{
    float a[8], m[8], amax = 0.0f, mmax = 0.0f;
    for (int s = 0; s < 8; s++) {
        fit_scale_min(x + 32 * s, 32, nmax, &a[s], &m[s]);
        amax = fmaxf(amax, a[s]);
        mmax = fmaxf(mmax, m[s]);
    }
    static const float factor[7] = {1.0f, 0.97f, 0.985f, 1.015f, 1.03f, 0.95f, 1.05f};
    uint16_t best_d = 0, best_dmin = 0;
    for (int pass = 0; pass < 2; pass++) {       /* pass 0 picks d, pass 1 dmin */
        float best_err = INFINITY;
        for (int k = 0; k < 7; k++) {
            uint16_t hd = pass == 0 ? sl_fp32_to_fp16(amax / 63.0f * factor[k]) : best_d;
            uint16_t hm = pass == 1 ? sl_fp32_to_fp16(mmax / 63.0f * factor[k])
                                    : sl_fp32_to_fp16(mmax / 63.0f);
            float d = sl_fp16_to_fp32(hd), dmin = sl_fp16_to_fp32(hm), err = 0.0f;
            for (int s = 0; s < 8; s++) {
                int sc = d > 0.0f ? round_clamp(a[s] / d, 0, 63) : 0;
                int mn = dmin > 0.0f ? round_clamp(m[s] / dmin, 0, 63) : 0;
                err += k4_sub_error(x + 32 * s, nmax, d * (float)sc, dmin * (float)mn, NULL);
            }
            if (err < best_err) {
                best_err = err;
                best_d = hd;
                best_dmin = hm;
            }
        }
    }
    *d_out = best_d;
    *dmin_out = best_dmin;
    float d = sl_fp16_to_fp32(best_d), dmin = sl_fp16_to_fp32(best_dmin);
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; s++) {
        int sc0 = d > 0.0f ? round_clamp(a[s] / d, 0, 63) : 0;
        int mn0 = dmin > 0.0f ? round_clamp(m[s] / dmin, 0, 63) : 0;
        float best_err = INFINITY;
        for (int i = -1; i <= 1; i++)
            for (int j = -1; j <= 1; j++) {
                int c = sc0 + i, n = mn0 + j;
                if (c < 0 || c > 63 || n < 0 || n > 63)
                    continue;
                float err = k4_sub_error(x + 32 * s, nmax, d * (float)c, dmin * (float)n, NULL);
                if (err < best_err) {
                    best_err = err;
                    sc[s] = (uint8_t)c;
                    mn[s] = (uint8_t)n;
                }
            }
        k4_sub_error(x + 32 * s, nmax, d * (float)sc[s], dmin * (float)mn[s], q + 32 * s);
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}

static void quant_q4_K(const float *x, sl_block_q4_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        uint8_t q[SL_QK_K];
        quant_k4_superblock(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

static void quant_q5_K(const float *x, sl_block_q5_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        uint8_t q[SL_QK_K];
        quant_k4_superblock(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xF) | ((q[64 * c + 32 + l] & 0xF) << 4));
        for (int s = 0; s < 8; s++)
            for (int l = 0; l < 32; l++)
                b[i].qh[l] |= (uint8_t)((q[32 * s + l] >> 4) << s);
    }
}

/* Squared error of one 16-element Q6_K sub-block at effective scale e; the
 * codes (biased by +32) go to q when q != NULL. */
static float q6_sub_error(const float *x, float e, uint8_t *q)
{
    float ie = e != 0.0f ? 1.0f / e : 0.0f;
    int8_t codes[16];
    for (int l = 0; l < 16; l++)
        codes[l] = (int8_t)round_clamp(x[l] * ie, -32, 31);
    if (q)
        for (int l = 0; l < 16; l++)
            q[l] = (uint8_t)(codes[l] + 32);
    return sq_err4_i8(x, codes, 16, e);
}

/* Q6_K: fit each sub-block's scale, then code the 16 scales as int8 under an
 * fp16 d (the largest maps to -128, the long side of int8; 7 factors around
 * it are tried), each scale trying round(a/d) +-1 against the values. */
static void quant_q6_K(const float *x, sl_block_q6_K *b, int64_t nb)
{
    static const float factor[7] = {1.0f, 0.97f, 0.985f, 1.015f, 1.03f, 0.95f, 1.05f};
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        float a[16], amax = 0.0f, max = 0.0f;
        for (int s = 0; s < 16; s++) {
            fit_scale_sym(x + 16 * s, 16, &a[s]);
            if (fabsf(a[s]) > amax) {
                amax = fabsf(a[s]);
                max = a[s];
            }
        }
        uint16_t best_d = 0;
        float best_err = INFINITY;
        for (int k = 0; k < 7; k++) {
            uint16_t hd = sl_fp32_to_fp16(max / -128.0f * factor[k]);
            float d = sl_fp16_to_fp32(hd), err = 0.0f;
            for (int s = 0; s < 16; s++) {
                int sc = d != 0.0f ? round_clamp(a[s] / d, -128, 127) : 0;
                err += q6_sub_error(x + 16 * s, d * (float)sc, NULL);
            }
            if (err < best_err) {
                best_err = err;
                best_d = hd;
            }
        }
        b[i].d = best_d;
        float d = sl_fp16_to_fp32(best_d);
        uint8_t q[SL_QK_K];
        for (int s = 0; s < 16; s++) {
            int sc0 = d != 0.0f ? round_clamp(a[s] / d, -128, 127) : 0, best_sc = sc0;
            float be = INFINITY;
            for (int k = -1; k <= 1; k++) {
                int sc = sc0 + k;
                if (sc < -128 || sc > 127)
                    continue;
                float err = q6_sub_error(x + 16 * s, d * (float)sc, NULL);
                if (err < be) {
                    be = err;
                    best_sc = sc;
                }
            }
            b[i].scales[s] = (int8_t)best_sc;
            q6_sub_error(x + 16 * s, d * (float)best_sc, q + 16 * s);
        }
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int k = 0; k < SL_QK_K; k++) {
            int h = k / 128, r = k % 128, quarter = r / 32, l = r % 32;
            uint8_t *ql = &b[i].ql[64 * h + l + 32 * (quarter & 1)];
            if (quarter < 2)
                *ql = (uint8_t)((*ql & 0xF0) | (q[k] & 0xF));
            else
                *ql = (uint8_t)((*ql & 0x0F) | ((q[k] & 0xF) << 4));
            b[i].qh[32 * h + l] |= (uint8_t)((q[k] >> 4) << (2 * quarter));
        }
    }
}

sl_status sl_quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    int64_t nb = 0;
    sl_status rc = check_row(type, n, &nb);
    if (rc < 0)
        return rc;
    switch (type) {
    case SL_GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SL_GGML_TYPE_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++)
            h[i] = sl_fp32_to_fp16(src[i]);
        break;
    }
    case SL_GGML_TYPE_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++)
            h[i] = sl_fp32_to_bf16(src[i]);
        break;
    }
    case SL_GGML_TYPE_Q4_0: quant_q4_0(src, dst, nb); break;
    case SL_GGML_TYPE_Q8_0: quant_q8_0(src, dst, nb); break;
    case SL_GGML_TYPE_Q4_K: quant_q4_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q5_K: quant_q5_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q6_K: quant_q6_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4: sl_quant_legacy_quantize(type, src, dst, nb); break;
    case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0:
        sl_quant_klow_quantize(type, src, dst, nb); break;
    case SL_GGML_TYPE_IQ2_XXS: case SL_GGML_TYPE_IQ2_XS: case SL_GGML_TYPE_IQ2_S:
    case SL_GGML_TYPE_IQ3_XXS: case SL_GGML_TYPE_IQ3_S: case SL_GGML_TYPE_IQ1_S: case SL_GGML_TYPE_IQ1_M:
        return SL_EUNSUPPORTED;   /* read-only formats: no quantizer */
    }
    return SL_OK;
}
