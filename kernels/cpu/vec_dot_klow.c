/* kernels/cpu/vec_dot_klow.c: the portable (C17) dot products of Q2_K, Q3_K,
 * IQ4_XS, the grid formats (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S) and the ternary TQ1_0, TQ2_0 with float32, Q8_K and Q16_K
 * activation rows.
 * Runs in the CPU backend's threads; the readable reference that
 * vec_dot_klow_avx2.c is tested against.
 *   float32: each block dequantized exactly as model/quant_klow.c does,
 *     then dotted in four fixed chains.
 *   Q8_K / Q16_K, per super-block of 256 (exact integers, then one float
 *   expression shared with the AVX2 path):
 *     isum = sum_s sc[s] * sum_{i in s}(q * qa),  msum = sum_s m[s] * sum_{i in s} qa
 *     Q8_K:  d*da*isum - dmin*da*msum (float, as llama.cpp; msum from bsums)
 *     Q16_K: sl_q16_termk (double), msum from the codes (bsums there are
 *            sums of 32, Q2_K's mins cover 16).
 *   Bounds: |sc*q| <= 32*127 = 4064 (IQ4_XS; Q3_K 128, IQ1 15*9 = 135,
 *   Q2_K 45, ternary 1; a ternary "sub-block" is the whole 256). A
 *   sub-block's sum p <= 32*127*32767 < 2^27 fits int32 and isum is int64;
 *   with 8-bit codes the whole isum <= 256*4064*127 < 2^27.
 * Trade-off: one unpack per block per group of rows; clarity over speed. */
#include <assert.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot_int.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant_klow.h"

enum { GROUP = 32 };

void sl_vec_dot_klow_unpack(uint32_t type, const void *w, int64_t b, sl_klow_block *u)
{
    switch (type) {
    case SL_GGML_TYPE_Q2_K: {
        const sl_block_q2_K *blk = (const sl_block_q2_K *)w + b;
        u->sub = 16;
        u->nsub = 16;
        u->has_min = 1;
        u->d = sl_fp16_to_fp32(blk->d);
        u->dmin = sl_fp16_to_fp32(blk->dmin);
        for (int s = 0; s < 16; s++) {
            u->sc[s] = blk->scales[s] & 0xF;
            u->mn[s] = blk->scales[s] >> 4;
        }
        for (int k = 0; k < SL_QK_K; k++)
            u->q[k] = (blk->qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
        break;
    }
    case SL_GGML_TYPE_Q3_K: {
        const sl_block_q3_K *blk = (const sl_block_q3_K *)w + b;
        u->sub = 16;
        u->nsub = 16;
        u->has_min = 0;
        u->d = sl_fp16_to_fp32(blk->d);
        u->dmin = 0.0f;
        for (int s = 0; s < 16; s++) {
            u->sc[s] = sl_quant_q3_K_scale(blk->scales, s);
            u->mn[s] = 0;
        }
        for (int k = 0; k < SL_QK_K; k++) {
            int lo = (blk->qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
            u->q[k] = lo - (((blk->hmask[k % 32] >> (k / 32)) & 1) ? 0 : 4);
        }
        break;
    }
    case SL_GGML_TYPE_IQ4_XS: {
        const sl_block_iq4_xs *blk = (const sl_block_iq4_xs *)w + b;
        u->sub = 32;
        u->nsub = 8;
        u->has_min = 0;
        u->d = sl_fp16_to_fp32(blk->d);
        u->dmin = 0.0f;
        for (int s = 0; s < 8; s++) {
            u->sc[s] = sl_quant_iq4_xs_scale(blk, s);
            u->mn[s] = 0;
            for (int l = 0; l < 16; l++) {
                u->q[32 * s + l] = sl_quant_iq4_values[blk->qs[16 * s + l] & 0xF];
                u->q[32 * s + 16 + l] = sl_quant_iq4_values[blk->qs[16 * s + l] >> 4];
            }
        }
        break;
    }
    default: {   /* the grid and ternary formats: x = d*sc*q, no mins */
        int16_t q[SL_QK_K];
        if (sl_quant_tq_type(type)) {
            sl_quant_tq_unpack(type, w, b, &u->d, &u->sub, u->sc, q);
        } else {
            assert(sl_quant_iq_grid_type(type));
            sl_quant_iq_unpack(type, w, b, &u->d, &u->sub, u->sc, q);
        }
        u->nsub = SL_QK_K / u->sub;
        u->has_min = 0;
        u->dmin = 0.0f;
        for (int s = 0; s < u->nsub; s++)
            u->mn[s] = 0;
        for (int k = 0; k < SL_QK_K; k++)
            u->q[k] = q[k];
        break;
    }
    }
}

static size_t block_bytes(uint32_t type)
{
    return sl_ggml_block_bytes(type);
}

void sl_vec_dot_klow_f32_portable(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                                  float *out, int64_t n)
{
    assert(sl_quant_klow_type(type) && n % SL_QK_K == 0);
    int64_t nb = n / SL_QK_K;
    float w[SL_QK_K];
    for (int j0 = 0; j0 < m; j0 += GROUP) {
        int mt = m - j0 < GROUP ? m - j0 : GROUP;
        float acc[GROUP] = {0};
        for (int64_t b = 0; b < nb; b++) {
            sl_quant_klow_dequantize(type, (const char *)w_row + (size_t)b * block_bytes(type), w, 1);
            for (int j = 0; j < mt; j++) {
                const float *xs = x + (int64_t)(j0 + j) * ldx + b * SL_QK_K;
                float p[4] = {0, 0, 0, 0};
                for (int i = 0; i < SL_QK_K; i += 4)
                    for (int k = 0; k < 4; k++)
                        p[k] += w[i + k] * xs[i + k];
                acc[j] += (p[0] + p[1]) + (p[2] + p[3]);
            }
        }
        for (int j = 0; j < mt; j++)
            out[j0 + j] = acc[j];
    }
}

/* isum and msum of one block against 256 activation codes qa. */
static void block_sums(const sl_klow_block *u, const int *qa, int64_t *isum, int32_t *msum)
{
    int64_t is = 0;
    int32_t ms = 0;
    for (int s = 0; s < u->nsub; s++) {
        int32_t p = 0, sa = 0;
        for (int i = s * u->sub; i < (s + 1) * u->sub; i++) {
            p += u->q[i] * qa[i];
            sa += qa[i];
        }
        is += (int64_t)u->sc[s] * p;
        ms += u->mn[s] * sa;
    }
    *isum = is;
    *msum = ms;
}

void sl_vec_dot_klow_q8_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                 float *out, int64_t n)
{
    assert(sl_quant_klow_type(type) && n % SL_QK_K == 0);
    int64_t nb = n / SL_QK_K;
    sl_klow_block u;
    int qa[SL_QK_K];
    for (int j0 = 0; j0 < m; j0 += GROUP) {
        int mt = m - j0 < GROUP ? m - j0 : GROUP;
        float acc[GROUP] = {0};
        for (int64_t b = 0; b < nb; b++) {
            sl_vec_dot_klow_unpack(type, w_row, b, &u);
            for (int j = 0; j < mt; j++) {
                const sl_block_q8_K *a = (const sl_block_q8_K *)((const char *)xa + (size_t)(j0 + j) * ldxa) + b;
                for (int i = 0; i < SL_QK_K; i++)
                    qa[i] = a->qs[i];
                int64_t isum;
                int32_t msum;
                block_sums(&u, qa, &isum, &msum);
                float r = u.d * a->d * (float)(int32_t)isum;   /* |isum| <= 256*4064*127 < 2^31 */
                if (u.has_min)
                    r -= u.dmin * a->d * (float)msum;
                acc[j] += r;
            }
        }
        for (int j = 0; j < mt; j++)
            out[j0 + j] = acc[j];
    }
}

void sl_vec_dot_klow_q16_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                  float *out, int64_t n)
{
    assert(sl_quant_klow_type(type) && n % SL_QK_K == 0);
    int64_t nb = n / SL_QK_K;
    sl_klow_block u;
    int qa[SL_QK_K];
    for (int j = 0; j < m; j++) {
        const sl_block_q16_K *a = (const sl_block_q16_K *)((const char *)xa + (size_t)j * ldxa);
        double acc = 0.0;
        for (int64_t b = 0; b < nb; b++) {
            sl_vec_dot_klow_unpack(type, w_row, b, &u);
            for (int i = 0; i < SL_QK_K; i++)
                qa[i] = a[b].qs[i];
            int64_t isum;
            int32_t msum;
            block_sums(&u, qa, &isum, &msum);
            acc += sl_q16_termk(u.d, u.dmin, a[b].d, isum, msum);
        }
        out[j] = (float)acc;
    }
}
