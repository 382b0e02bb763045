/* model/quant.c: scalar half/bfloat16 conversions, the reference
 * dequantizers of GGUF's block formats and sluice's own quantizers.
 * Runs in mkmodel (quantize), the GGUF loader and tests (dequantize).
 * Trade-off: the K-quant quantizers spend a grid search per sub-block
 * (21 candidate scales, each refit by least squares) to land near
 * llama.cpp's error; that is ~50x slower than rounding from the min/max,
 * which is fine for a model writer and irrelevant to inference, which never
 * quantizes weights. */
#include "model/quant.h"

#include <math.h>
#include <string.h>

#include "model/ggml_types.h"

_Static_assert(sizeof(sl_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(sl_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(sl_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(sl_block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(sl_block_q6_K) == 210, "Q6_K block is 210 bytes");

/* sl_ggml_block_bytes() is a function, so these use literals; the unit test
 * checks the same sizes against the table. */

/* ======================================================================
 * Scalars
 * ====================================================================== */

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float sl_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in float32 */
        float v = (float)mant * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t sl_fp32_to_fp16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u)             /* NaN: keep the top payload, force quiet */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u)            /* >= 65520 rounds (ties to even) to inf */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) {           /* below 2^-14: a half subnormal or zero */
        uint32_t e = a >> 23;
        if (e < 102)                 /* below 2^-25: rounds to zero */
            return sign;
        uint32_t m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;    /* value = m * 2^(e-150) = (m >> shift) * 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;                     /* may carry into the smallest normal: correct */
        return (uint16_t)(sign | r);
    }
    uint32_t h = (a >> 13) - (112u << 10);
    uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;                         /* a carry into the exponent is still right */
    return (uint16_t)(sign | h);
}

float sl_bf16_to_fp32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t sl_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);  /* quiet NaN, as ggml does */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

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
    }
    return SL_OK;
}

/* ======================================================================
 * Quantization
 * ====================================================================== */

/* round(v) clamped to [lo, hi]; NaN gives lo. Clamping before the
 * conversion keeps out-of-range floats away from an undefined cast. */
static inline int round_clamp(float v, int lo, int hi)
{
    if (!(v >= (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)lrintf(v);
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

/* Fits x ~ a*q - b on one sub-block, q in 0..nmax, a >= 0, b >= 0 (the
 * K-quant min is subtracted and stored unsigned). Tries 21 candidate inverse
 * scales around nmax/(max - min); for each, rounds q and solves the 2x2
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
    for (int step = 0; step < 21 + 2; step++) {
        float ia;
        float off;
        if (step < 21) {
            ia = ((float)nmax - 1.0f + 0.1f * (float)step) / (xmax - xmin);
            off = -xmin;
        } else {                     /* refinement rounds around the winner */
            if (best_a <= 0.0f)
                break;
            ia = 1.0f / best_a;
            off = best_b;
        }
        float s1 = 0, s2 = 0, sqx = 0;
        uint8_t q[32];
        for (int i = 0; i < n; i++) {
            q[i] = (uint8_t)round_clamp((x[i] + off) * ia, 0, nmax);
            s1 += q[i];
            s2 += (float)q[i] * q[i];
            sqx += q[i] * x[i];
        }
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
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            float e = a * q[i] + c - x[i];
            err += e * e;
        }
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
        float s2 = 0, sqx = 0;
        int8_t q[16];
        for (int i = 0; i < n; i++) {
            q[i] = (int8_t)round_clamp(x[i] * ia, -32, 31);
            s2 += (float)q[i] * q[i];
            sqx += q[i] * x[i];
        }
        if (s2 <= 0.0f)
            continue;
        float a = sqx / s2, err = 0.0f;
        for (int i = 0; i < n; i++) {
            float e = a * q[i] - x[i];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            *a_out = a;
        }
    }
}

/* Quantizes the 8 sub-block scales a[] and mins m[] of a Q4_K/Q5_K
 * super-block to 6 bits under fp16 super-scales; writes d, dmin and the
 * packed scales, and returns the effective scale/min per sub-block. */
static void pack_scales_k4(const float a[8], const float m[8], uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t scales[SL_K_SCALE_SIZE], float ea[8], float em[8])
{
    float amax = 0.0f, mmax = 0.0f;
    for (int s = 0; s < 8; s++) {
        amax = fmaxf(amax, a[s]);
        mmax = fmaxf(mmax, m[s]);
    }
    *d_out = sl_fp32_to_fp16(amax / 63.0f);
    *dmin_out = sl_fp32_to_fp16(mmax / 63.0f);
    float d = sl_fp16_to_fp32(*d_out), dmin = sl_fp16_to_fp32(*dmin_out);
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; s++) {
        sc[s] = (uint8_t)(d > 0.0f ? round_clamp(a[s] / d, 0, 63) : 0);
        mn[s] = (uint8_t)(dmin > 0.0f ? round_clamp(m[s] / dmin, 0, 63) : 0);
        ea[s] = d * (float)sc[s];
        em[s] = dmin * (float)mn[s];
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits each sub-block, packs the
 * scales, then re-rounds every value against the scales actually stored so
 * the 6-bit scale error is absorbed where it can be. q[] gets 256 codes. */
static void quant_k4_superblock(const float *x, int nmax, uint16_t *d, uint16_t *dmin,
                                uint8_t scales[SL_K_SCALE_SIZE], uint8_t q[SL_QK_K])
{
    float a[8], m[8], ea[8], em[8];
    for (int s = 0; s < 8; s++)
        fit_scale_min(x + 32 * s, 32, nmax, &a[s], &m[s]);
    pack_scales_k4(a, m, d, dmin, scales, ea, em);
    for (int s = 0; s < 8; s++) {
        float ia = ea[s] > 0.0f ? 1.0f / ea[s] : 0.0f;
        for (int l = 0; l < 32; l++)
            q[32 * s + l] = (uint8_t)round_clamp((x[32 * s + l] + em[s]) * ia, 0, nmax);
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

static void quant_q6_K(const float *x, sl_block_q6_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        float a[16], amax = 0.0f, max = 0.0f;
        for (int s = 0; s < 16; s++) {
            fit_scale_sym(x + 16 * s, 16, &a[s]);
            if (fabsf(a[s]) > amax) {
                amax = fabsf(a[s]);
                max = a[s];
            }
        }
        /* the largest scale maps to -128, using the int8 range's long side */
        b[i].d = sl_fp32_to_fp16(max / -128.0f);
        float d = sl_fp16_to_fp32(b[i].d);
        uint8_t q[SL_QK_K];
        for (int s = 0; s < 16; s++) {
            int sc = d != 0.0f ? round_clamp(a[s] / d, -128, 127) : 0;
            b[i].scales[s] = (int8_t)sc;
            float e = d * (float)sc;
            float ie = e != 0.0f ? 1.0f / e : 0.0f;
            for (int l = 0; l < 16; l++)
                q[16 * s + l] = (uint8_t)(round_clamp(x[16 * s + l] * ie, -32, 31) + 32);
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
    }
    return SL_OK;
}
