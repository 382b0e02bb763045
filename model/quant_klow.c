/* model/quant_klow.c: reference dequantizers and quantizers of the low-bit
 * K-formats Q2_K, Q3_K and IQ4_XS, and the dequantizers of the grid formats
 * IQ1_*, IQ2_*, IQ3_* (layouts in quant_klow.h; the ternary TQ1_0/TQ2_0
 * in quant_ternary.c).
 * Runs in mkmodel and tools/quantdump (quantize), the GGUF loader's checks
 * and tests (dequantize); model/quant.c dispatches here.
 * Trade-off: as in quant.c's K-quant quantizers, each sub-block's scale
 * (and min) is searched over ~20 candidates with a least-squares refit, and
 * the 4/6-bit scale codes are then searched against the values (7 super-scale
 * factors, +-1 per code). That is ~10x slower than rounding from the
 * min/max, and buys the lower error a 2-3 bit format needs most. */
#include "model/quant_klow.h"

#include <math.h>
#include <string.h>

#include "model/ggml_types.h"

_Static_assert(sizeof(sl_block_q2_K) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(sl_block_q3_K) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(sl_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

const int8_t sl_quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

_Static_assert(sizeof(sl_block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");
_Static_assert(sizeof(sl_block_iq2_xs) == 74, "IQ2_XS block is 74 bytes");
_Static_assert(sizeof(sl_block_iq2_s) == 82, "IQ2_S block is 82 bytes");
_Static_assert(sizeof(sl_block_iq3_xxs) == 98, "IQ3_XXS block is 98 bytes");
_Static_assert(sizeof(sl_block_iq3_s) == 110, "IQ3_S block is 110 bytes");
_Static_assert(sizeof(sl_block_iq1_s) == 50, "IQ1_S block is 50 bytes");
_Static_assert(sizeof(sl_block_iq1_m) == 56, "IQ1_M block is 56 bytes");

bool sl_quant_iq_grid_type(uint32_t type)
{
    return type == SL_GGML_TYPE_IQ2_XXS || type == SL_GGML_TYPE_IQ2_XS || type == SL_GGML_TYPE_IQ2_S
        || type == SL_GGML_TYPE_IQ3_XXS || type == SL_GGML_TYPE_IQ3_S || type == SL_GGML_TYPE_IQ1_S
        || type == SL_GGML_TYPE_IQ1_M;
}

bool sl_quant_klow_type(uint32_t type)
{
    return type == SL_GGML_TYPE_Q2_K || type == SL_GGML_TYPE_Q3_K || type == SL_GGML_TYPE_IQ4_XS
        || sl_quant_iq_grid_type(type) || sl_quant_tq_type(type);
}

/* ======================================================================
 * Dequantization (the gguf package's operation order)
 * ====================================================================== */

/* The 2 low bits of element k of a Q2_K/Q3_K qs array. */
static inline int low2(const uint8_t *qs, int k)
{
    return (qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
}

static void dequant_q2_K(const sl_block_q2_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d = sl_fp16_to_fp32(b[i].d), dmin = sl_fp16_to_fp32(b[i].dmin);
        for (int s = 0; s < 16; s++) {
            float dl = d * (float)(b[i].scales[s] & 0xF), ml = dmin * (float)(b[i].scales[s] >> 4);
            for (int l = 0; l < 16; l++)
                y[16 * s + l] = dl * (float)low2(b[i].qs, 16 * s + l) - ml;
        }
    }
}

static void dequant_q3_K(const sl_block_q3_K *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int s = 0; s < 16; s++) {
            float dl = d * (float)sl_quant_q3_K_scale(b[i].scales, s);
            for (int l = 0; l < 16; l++) {
                int k = 16 * s + l;
                int q = low2(b[i].qs, k) - (((b[i].hmask[k % 32] >> (k / 32)) & 1) ? 0 : 4);
                y[k] = dl * (float)q;
            }
        }
    }
}

static void dequant_iq4_xs(const sl_block_iq4_xs *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d = sl_fp16_to_fp32(b[i].d);
        for (int s = 0; s < 8; s++) {
            float dl = d * (float)sl_quant_iq4_xs_scale(&b[i], s);
            for (int l = 0; l < 16; l++) {
                uint8_t q = b[i].qs[16 * s + l];
                y[32 * s + l] = dl * (float)sl_quant_iq4_values[q & 0xF];
                y[32 * s + 16 + l] = dl * (float)sl_quant_iq4_values[q >> 4];
            }
        }
    }
}

/* ---- the grid formats ------------------------------------------------- */

static inline uint32_t le32(const uint16_t *p)   /* two uint16 halves, little-endian */
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 16);
}

/* 8 elements of grid row g (n values per row: 8, or 4 twice) with sign bits. */
static inline void put_signed(int16_t *q, const uint8_t *g, uint8_t signs, int n)
{
    for (int j = 0; j < n; j++)
        q[j] = (int16_t)((signs >> j) & 1 ? -g[j] : g[j]);
}

/* 8 IQ1 grid values of row g as 8*v + delta (delta +-1: the format's +-1/8
 * under d/8). */
static inline void put_iq1(int16_t *q, const int8_t *g, int delta)
{
    for (int j = 0; j < 8; j++)
        q[j] = (int16_t)(8 * g[j] + delta);
}

void sl_quant_iq_unpack(uint32_t type, const void *row, int64_t b, float *d, int *sub, int sc[16], int16_t q[256])
{
    switch (type) {
    case SL_GGML_TYPE_IQ1_S: {
        const sl_block_iq1_s *x = (const sl_block_iq1_s *)row + b;
        *d = sl_fp16_to_fp32(x->d) * 0.125f;
        *sub = 32;
        for (int ib = 0; ib < 8; ib++) {
            unsigned qh = x->qh[ib];
            sc[ib] = 2 * (int)((qh >> 12) & 7) + 1;
            int delta = qh & 0x8000 ? -1 : 1;
            for (int l = 0; l < 4; l++)
                put_iq1(q + 32 * ib + 8 * l, sl_quant_iq1s_grid[x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)],
                        delta);
        }
        break;
    }
    case SL_GGML_TYPE_IQ1_M: {
        const sl_block_iq1_m *x = (const sl_block_iq1_m *)row + b;
        uint16_t hd = (uint16_t)((x->scales[0] >> 12) | ((x->scales[1] >> 8) & 0x00F0)
                                 | ((x->scales[2] >> 4) & 0x0F00) | (x->scales[3] & 0xF000));
        *d = sl_fp16_to_fp32(hd) * 0.125f;
        *sub = 16;
        for (int k = 0; k < 16; k++)
            sc[k] = 2 * ((x->scales[k / 4] >> (3 * (k % 4))) & 7) + 1;
        for (int g = 0; g < 32; g++) {
            unsigned nib = (x->qh[g / 2] >> (4 * (g % 2))) & 0xF;
            put_iq1(q + 8 * g, sl_quant_iq1s_grid[x->qs[g] | ((nib & 7) << 8)], nib & 8 ? -1 : 1);
        }
        break;
    }
    case SL_GGML_TYPE_IQ2_XXS: {
        const sl_block_iq2_xxs *x = (const sl_block_iq2_xxs *)row + b;
        *d = sl_fp16_to_fp32(x->d) * 0.125f;
        *sub = 32;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t idx = le32(x->qs + 4 * ib), aux = le32(x->qs + 4 * ib + 2);
            sc[ib] = 2 * (int)(aux >> 28) + 1;
            for (int l = 0; l < 4; l++)
                put_signed(q + 32 * ib + 8 * l, sl_quant_iq2xxs_grid[(idx >> (8 * l)) & 0xFF],
                           sl_quant_iq_ksigns[(aux >> (7 * l)) & 127], 8);
        }
        break;
    }
    case SL_GGML_TYPE_IQ2_XS: {
        const sl_block_iq2_xs *x = (const sl_block_iq2_xs *)row + b;
        *d = sl_fp16_to_fp32(x->d) * 0.125f;
        *sub = 16;
        for (int k = 0; k < 16; k++)
            sc[k] = 2 * ((x->scales[k / 2] >> (4 * (k % 2))) & 0xF) + 1;
        for (int g = 0; g < 32; g++)
            put_signed(q + 8 * g, sl_quant_iq2xs_grid[x->qs[g] & 511], sl_quant_iq_ksigns[x->qs[g] >> 9], 8);
        break;
    }
    case SL_GGML_TYPE_IQ2_S: {
        const sl_block_iq2_s *x = (const sl_block_iq2_s *)row + b;
        *d = sl_fp16_to_fp32(x->d) * 0.125f;
        *sub = 16;
        for (int k = 0; k < 16; k++)
            sc[k] = 2 * ((x->scales[k / 2] >> (4 * (k % 2))) & 0xF) + 1;
        for (int g = 0; g < 32; g++) {
            int idx = x->qs[g] | (((x->qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
            put_signed(q + 8 * g, sl_quant_iq2s_grid[idx], x->signs[g], 8);
        }
        break;
    }
    case SL_GGML_TYPE_IQ3_XXS: {
        const sl_block_iq3_xxs *x = (const sl_block_iq3_xxs *)row + b;
        *d = sl_fp16_to_fp32(x->d) * 0.25f;
        *sub = 32;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *a = x->scales_signs + 4 * ib;
            uint32_t aux = (uint32_t)a[0] | ((uint32_t)a[1] << 8) | ((uint32_t)a[2] << 16) | ((uint32_t)a[3] << 24);
            sc[ib] = 2 * (int)(aux >> 28) + 1;
            for (int l = 0; l < 4; l++) {
                uint8_t signs = sl_quant_iq_ksigns[(aux >> (7 * l)) & 127];
                put_signed(q + 32 * ib + 8 * l, sl_quant_iq3xxs_grid[x->qs[8 * ib + 2 * l]], signs, 4);
                put_signed(q + 32 * ib + 8 * l + 4, sl_quant_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]],
                           (uint8_t)(signs >> 4), 4);
            }
        }
        break;
    }
    default: {   /* SL_GGML_TYPE_IQ3_S */
        const sl_block_iq3_s *x = (const sl_block_iq3_s *)row + b;
        *d = sl_fp16_to_fp32(x->d);
        *sub = 32;
        for (int ib = 0; ib < 8; ib++)
            sc[ib] = 2 * ((x->scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
        for (int i = 0; i < 64; i++) {
            int idx = x->qs[i] | (((x->qh[i / 8] >> (i % 8)) & 1) << 8);
            put_signed(q + 4 * i, sl_quant_iq3s_grid[idx], (uint8_t)(x->signs[i / 2] >> (4 * (i % 2))), 4);
        }
        break;
    }
    }
}

/* All products exact (fp16 d times 2s+1 <= 31 times a grid value <= 62 and
 * a power of two: <= 22 significant bits; IQ1: 2s+1 <= 15 times 8g+-1 <= 9;
 * ternary: d times -1..1), so this equals the gguf package's
 * d*(s+1/2)*c * grid * sign (IQ1: d*(2s+1) * (grid + delta); ternary:
 * d * t) whatever the order, zeros' signs included. */
static void dequant_iq_grid(uint32_t type, const void *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SL_QK_K) {
        float d;
        int sub, sc[16];
        int16_t q[SL_QK_K];
        if (sl_quant_tq_type(type))
            sl_quant_tq_unpack(type, src, i, &d, &sub, sc, q);
        else
            sl_quant_iq_unpack(type, src, i, &d, &sub, sc, q);
        for (int k = 0; k < SL_QK_K; k++)
            y[k] = (d * (float)sc[k / sub]) * (float)q[k];
    }
}

void sl_quant_klow_dequantize(uint32_t type, const void *src, float *dst, int64_t nb)
{
    switch (type) {
    case SL_GGML_TYPE_Q2_K: dequant_q2_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q3_K: dequant_q3_K(src, dst, nb); break;
    case SL_GGML_TYPE_IQ4_XS: dequant_iq4_xs(src, dst, nb); break;
    default: dequant_iq_grid(type, src, dst, nb); break;
    }
}

/* ======================================================================
 * Quantization
 * ====================================================================== */

/* Nearest integer (ties to even) clamped to [lo, hi]; NaN gives lo. */
static inline int rclamp(float v, int lo, int hi)
{
    if (!(v > (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)lrintf(v);
}

static const float factor[7] = {1.0f, 0.97f, 0.985f, 1.015f, 1.03f, 0.95f, 1.05f};

/* ---- Q2_K: x ~ a*q - b per 16 elements, q in 0..3 ----------------------- */

/* Squared error of x coded as ea*q - em, q re-rounded; codes to q if set. */
static float q2_sub_error(const float *x, float ea, float em, uint8_t *q)
{
    float ia = ea > 0.0f ? 1.0f / ea : 0.0f, err = 0.0f;
    for (int l = 0; l < 16; l++) {
        int c = rclamp((x[l] + em) * ia, 0, 3);
        float e = ea * (float)c - em - x[l];
        err += e * e;
        if (q)
            q[l] = (uint8_t)c;
    }
    return err;
}

/* Fits x ~ a*q - b (a, b >= 0) on 16 elements: 15 candidate inverse scales
 * around 3/(max - min), each rounded and solved by 2x2 least squares, the
 * winner refined twice. */
static void fit_q2_sub(const float *x, float *a_out, float *b_out)
{
    float xmin = 0.0f, xmax = -INFINITY, sx = 0.0f;
    for (int i = 0; i < 16; i++) {
        xmin = fminf(xmin, x[i]);
        xmax = fmaxf(xmax, x[i]);
        sx += x[i];
    }
    float best_a = 0.0f, best_b = isfinite(xmin) ? -xmin : 0.0f, best_err = INFINITY;
    if (!(xmax > xmin) || !isfinite(xmax - xmin)) {
        *a_out = 0.0f;
        *b_out = best_b;
        return;
    }
    for (int step = 0; step < 15 + 2; step++) {
        float ia, off;
        if (step < 15) {
            ia = (2.3f + 0.1f * (float)step) / (xmax - xmin);
            off = -xmin;
        } else {
            if (best_a <= 0.0f)
                break;
            ia = 1.0f / best_a;
            off = best_b;
        }
        int s1 = 0, s2 = 0;
        float sqx = 0.0f;
        uint8_t q[16];
        for (int i = 0; i < 16; i++) {
            int c = rclamp((x[i] + off) * ia, 0, 3);
            q[i] = (uint8_t)c;
            s1 += c;
            s2 += c * c;
            sqx += (float)c * x[i];
        }
        float det = 16.0f * (float)s2 - (float)s1 * (float)s1, a, c;
        if (det > 0.0f) {
            a = (16.0f * sqx - (float)s1 * sx) / det;
            c = (sx - a * (float)s1) / 16.0f;
        } else {                     /* all codes equal: fit the slope alone */
            a = 0.0f;
            c = 1.0f;
        }
        if (c > 0.0f) {              /* a positive min needs b < 0: pin b = 0 */
            c = 0.0f;
            a = s2 > 0 ? sqx / (float)s2 : 0.0f;
        }
        if (a < 0.0f)
            continue;
        float err = 0.0f;
        for (int i = 0; i < 16; i++) {
            float e = a * (float)q[i] + c - x[i];
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
}

static void quant_q2_K(const float *x, sl_block_q2_K *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        float a[16], m[16], amax = 0.0f, mmax = 0.0f;
        for (int s = 0; s < 16; s++) {
            fit_q2_sub(x + 16 * s, &a[s], &m[s]);
            amax = fmaxf(amax, a[s]);
            mmax = fmaxf(mmax, m[s]);
        }
        uint16_t best_d = 0, best_dmin = 0;
        for (int pass = 0; pass < 2; pass++) {   /* pass 0 picks d, pass 1 dmin */
            float best_err = INFINITY;
            for (int k = 0; k < 7; k++) {
                uint16_t hd = pass == 0 ? sl_fp32_to_fp16(amax / 15.0f * factor[k]) : best_d;
                uint16_t hm = pass == 1 ? sl_fp32_to_fp16(mmax / 15.0f * factor[k])
                                        : sl_fp32_to_fp16(mmax / 15.0f);
                float d = sl_fp16_to_fp32(hd), dmin = sl_fp16_to_fp32(hm), err = 0.0f;
                for (int s = 0; s < 16; s++) {
                    int sc = d > 0.0f ? rclamp(a[s] / d, 0, 15) : 0;
                    int mn = dmin > 0.0f ? rclamp(m[s] / dmin, 0, 15) : 0;
                    err += q2_sub_error(x + 16 * s, d * (float)sc, dmin * (float)mn, NULL);
                }
                if (err < best_err) {
                    best_err = err;
                    best_d = hd;
                    best_dmin = hm;
                }
            }
        }
        b[i].d = best_d;
        b[i].dmin = best_dmin;
        float d = sl_fp16_to_fp32(best_d), dmin = sl_fp16_to_fp32(best_dmin);
        uint8_t q[SL_QK_K];
        for (int s = 0; s < 16; s++) {
            int sc0 = d > 0.0f ? rclamp(a[s] / d, 0, 15) : 0;
            int mn0 = dmin > 0.0f ? rclamp(m[s] / dmin, 0, 15) : 0;
            int bs = sc0, bm = mn0;
            float be = INFINITY;
            for (int di = -1; di <= 1; di++)
                for (int dj = -1; dj <= 1; dj++) {
                    int c = sc0 + di, n = mn0 + dj;
                    if (c < 0 || c > 15 || n < 0 || n > 15)
                        continue;
                    float err = q2_sub_error(x + 16 * s, d * (float)c, dmin * (float)n, NULL);
                    if (err < be) {
                        be = err;
                        bs = c;
                        bm = n;
                    }
                }
            b[i].scales[s] = (uint8_t)(bs | (bm << 4));
            q2_sub_error(x + 16 * s, d * (float)bs, dmin * (float)bm, q + 16 * s);
        }
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int k = 0; k < SL_QK_K; k++)
            b[i].qs[32 * (k / 128) + k % 32] |= (uint8_t)(q[k] << (2 * ((k % 128) / 32)));
    }
}

/* ---- Q3_K and IQ4_XS: x ~ a*v(q), a signed --------------------------------
 * Q3_K's levels are the integers -4..3, IQ4_XS's the 16 of
 * sl_quant_iq4_values; `nearest` maps x/a to a level index. */

struct levels {
    int n;                 /* number of levels */
    float v[16];           /* ascending */
    float mid[15];         /* midpoints between neighbours */
};

static struct levels levels_make(const int *v, int n)
{
    struct levels L = {.n = n};
    for (int i = 0; i < n; i++)
        L.v[i] = (float)v[i];
    for (int i = 0; i + 1 < n; i++)
        L.mid[i] = 0.5f * (L.v[i] + L.v[i + 1]);
    return L;
}

static inline int nearest(const struct levels *L, float t)
{
    int k = 0;
    for (int i = 0; i + 1 < L->n; i++)
        k += t > L->mid[i];
    return k;
}

/* Squared error of n elements coded with scale e; level indices to q if set. */
static float sym_sub_error(const struct levels *L, const float *x, int n, float e, uint8_t *q)
{
    float ie = e != 0.0f ? 1.0f / e : 0.0f, err = 0.0f;
    for (int l = 0; l < n; l++) {
        int k = nearest(L, x[l] * ie);
        float d = e * L->v[k] - x[l];
        err += d * d;
        if (q)
            q[l] = (uint8_t)k;
    }
    return err;
}

/* Fits x ~ a*v(q) on n elements: candidate scales put the extreme on the
 * lowest level (or the highest) with 11 steps each, each refit by least
 * squares, the winner refined twice. */
static float fit_sym_sub(const struct levels *L, const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (!(amax > 0.0f) || !isfinite(amax))
        return 0.0f;
    float lo = L->v[0], hi = L->v[L->n - 1], span = hi - lo;
    float best_a = 0.0f, best_err = INFINITY;
    for (int step = 0; step < 22 + 2; step++) {
        float ia;
        if (step < 11)
            ia = (lo + span * 0.02f * (float)(step - 3)) / max;
        else if (step < 22)
            ia = (hi - span * 0.02f * (float)(step - 14)) / max;
        else if (best_a != 0.0f)
            ia = 1.0f / best_a;
        else
            break;
        float sqx = 0.0f, sqq = 0.0f;
        uint8_t q[32];
        for (int i = 0; i < n; i++) {
            q[i] = (uint8_t)nearest(L, x[i] * ia);
            sqx += L->v[q[i]] * x[i];
            sqq += L->v[q[i]] * L->v[q[i]];
        }
        if (!(sqq > 0.0f))
            continue;
        float a = sqx / sqq, err = 0.0f;
        for (int i = 0; i < n; i++) {
            float d = a * L->v[q[i]] - x[i];
            err += d * d;
        }
        if (err < best_err) {
            best_err = err;
            best_a = a;
        }
    }
    return best_a;
}

/* Codes nsub fitted scales a[] as integers -32..31 under an fp16 d (the
 * largest maps to -32, the long side; 7 factors tried), each code trying
 * round(a/d) +-1 against the values. Writes d, the codes sc[] and the level
 * indices q[nsub*sub]. */
static void sym_superblock(const struct levels *L, const float *x, int nsub, int sub, uint16_t *d_out,
                           int *sc, uint8_t *q)
{
    float a[16], amax = 0.0f, max = 0.0f;
    for (int s = 0; s < nsub; s++) {
        a[s] = fit_sym_sub(L, x + sub * s, sub);
        if (fabsf(a[s]) > amax) {
            amax = fabsf(a[s]);
            max = a[s];
        }
    }
    uint16_t best_d = 0;
    float best_err = INFINITY;
    for (int k = 0; k < 7; k++) {
        uint16_t hd = sl_fp32_to_fp16(max / -32.0f * factor[k]);
        float d = sl_fp16_to_fp32(hd), err = 0.0f;
        for (int s = 0; s < nsub; s++) {
            int c = d != 0.0f ? rclamp(a[s] / d, -32, 31) : 0;
            err += sym_sub_error(L, x + sub * s, sub, d * (float)c, NULL);
        }
        if (err < best_err) {
            best_err = err;
            best_d = hd;
        }
    }
    *d_out = best_d;
    float d = sl_fp16_to_fp32(best_d);
    for (int s = 0; s < nsub; s++) {
        int c0 = d != 0.0f ? rclamp(a[s] / d, -32, 31) : 0, bc = c0;
        float be = INFINITY;
        for (int k = -1; k <= 1; k++) {
            int c = c0 + k;
            if (c < -32 || c > 31)
                continue;
            float err = sym_sub_error(L, x + sub * s, sub, d * (float)c, NULL);
            if (err < be) {
                be = err;
                bc = c;
            }
        }
        sc[s] = bc;
        sym_sub_error(L, x + sub * s, sub, d * (float)bc, q + sub * s);
    }
}

static void quant_q3_K(const float *x, sl_block_q3_K *b, int64_t nb)
{
    static const int v[8] = {-4, -3, -2, -1, 0, 1, 2, 3};
    struct levels L = levels_make(v, 8);
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        int sc[16];
        uint8_t q[SL_QK_K];            /* level index = q + 4, 0..7 */
        sym_superblock(&L, x, 16, 16, &b[i].d, sc, q);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int s = 0; s < 16; s++) {
            int c = sc[s] + 32;
            b[i].scales[s % 8] |= (uint8_t)((c & 0xF) << (4 * (s / 8)));
            b[i].scales[8 + s % 4] |= (uint8_t)((c >> 4) << (2 * (s / 4)));
        }
        memset(b[i].qs, 0, sizeof b[i].qs);
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        for (int k = 0; k < SL_QK_K; k++) {
            b[i].qs[32 * (k / 128) + k % 32] |= (uint8_t)((q[k] & 3) << (2 * ((k % 128) / 32)));
            b[i].hmask[k % 32] |= (uint8_t)((q[k] >> 2) << (k / 32));
        }
    }
}

static void quant_iq4_xs(const float *x, sl_block_iq4_xs *b, int64_t nb)
{
    int v[16];
    for (int k = 0; k < 16; k++)
        v[k] = sl_quant_iq4_values[k];
    struct levels L = levels_make(v, 16);
    for (int64_t i = 0; i < nb; i++, x += SL_QK_K) {
        int sc[8];
        uint8_t q[SL_QK_K];
        sym_superblock(&L, x, 8, 32, &b[i].d, sc, q);
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int s = 0; s < 8; s++) {
            int c = sc[s] + 32;
            b[i].scales_l[s / 2] |= (uint8_t)((c & 0xF) << (4 * (s % 2)));
            b[i].scales_h |= (uint16_t)((c >> 4) << (2 * s));
            for (int l = 0; l < 16; l++)
                b[i].qs[16 * s + l] = (uint8_t)(q[32 * s + l] | (q[32 * s + 16 + l] << 4));
        }
    }
}

void sl_quant_klow_quantize(uint32_t type, const float *src, void *dst, int64_t nb)
{
    switch (type) {
    case SL_GGML_TYPE_Q2_K: quant_q2_K(src, dst, nb); break;
    case SL_GGML_TYPE_Q3_K: quant_q3_K(src, dst, nb); break;
    case SL_GGML_TYPE_IQ4_XS: quant_iq4_xs(src, dst, nb); break;
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0: sl_quant_tq_quantize(type, src, dst, nb); break;
    }
}
