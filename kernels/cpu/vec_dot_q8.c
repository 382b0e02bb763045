/* kernels/cpu/vec_dot_q8.c: the portable (C17) dot products of a quantized
 * weight row with 8-bit activations (Q8_0 or Q8_K rows from act_quant.h).
 * Runs in the CPU backend's threads. This is the readable reference for
 * vec_dot_q8_avx2.c: both compute the same integer sums per block (exact),
 * then scale them in float; only the order of the float additions differs.
 *   Q8_0 / Q4_0 weights, Q8_0 activations, per block of 32:
 *       dw * da * sum(qw * qa)
 *   Q4_K / Q5_K weights, Q8_K activations, per super-block of 256:
 *       dw * da * sum_s sc[s] * sum(q * qa)  -  dminw * da * sum_s m[s] * bsum_s
 *     (the min term needs only the activation's block sums: that is what
 *      Q8_K's bsums are for)
 *   Q6_K weights, Q8_K activations, per super-block:
 *       dw * da * sum_s sc[s] * sum((q - 32) * qa)
 *   Q5_0 / IQ4_NL / MXFP4 / Q8_1 weights, Q8_0 activations: as Q4_0 (IQ4_NL's code
 *       is its non-linear level); Q4_1 / Q5_1 weights, Q8_1 activations:
 *       dw * da * sum(q * qa) + m * s (s: the activation block's fp16 sum)
 * Trade-off: each weight block is unpacked to int8 codes once per group of
 * up to 32 activation rows (prefill), and each row's sum is computed by the
 * same code whatever the group, so a row's result never depends on m. */
#include <assert.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "kernels/cpu/vec_dot_int.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"

enum { GROUP = 32 };

void sl_vec_dot_unpack(uint32_t type, const void *w, int64_t b, sl_qblock *u)
{
    switch (type) {
    case SL_GGML_TYPE_Q8_0: {
        const sl_block_q8_0 *blk = (const sl_block_q8_0 *)w + b;
        u->n = u->sub = SL_QK8_0;
        u->d = sl_fp16_to_fp32(blk->d);
        u->sc[0] = 1;
        for (int i = 0; i < SL_QK8_0; i++)
            u->q[i] = blk->qs[i];
        break;
    }
    case SL_GGML_TYPE_Q4_0: {
        const sl_block_q4_0 *blk = (const sl_block_q4_0 *)w + b;
        u->n = u->sub = SL_QK4_0;
        u->d = sl_fp16_to_fp32(blk->d);
        u->sc[0] = 1;
        for (int i = 0; i < 16; i++) {
            u->q[i] = (blk->qs[i] & 0xF) - 8;
            u->q[i + 16] = (blk->qs[i] >> 4) - 8;
        }
        break;
    }
    case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K: {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t hd, hdmin;
        if (type == SL_GGML_TYPE_Q4_K) {
            const sl_block_q4_K *blk = (const sl_block_q4_K *)w + b;
            scales = blk->scales; qs = blk->qs; hd = blk->d; hdmin = blk->dmin;
        } else {
            const sl_block_q5_K *blk = (const sl_block_q5_K *)w + b;
            scales = blk->scales; qs = blk->qs; qh = blk->qh; hd = blk->d; hdmin = blk->dmin;
        }
        u->n = SL_QK_K;
        u->sub = 32;
        u->d = sl_fp16_to_fp32(hd);
        u->dmin = sl_fp16_to_fp32(hdmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            sl_quant_get_scale_min_k4(s, scales, &sc, &m);
            u->sc[s] = sc;
            u->mn[s] = m;
            const uint8_t *q = qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++)
                u->q[32 * s + l] = ((q[l] >> shift) & 0xF) | (qh ? ((qh[l] >> s) & 1) << 4 : 0);
        }
        break;
    }
    case SL_GGML_TYPE_Q6_K: {
        const sl_block_q6_K *blk = (const sl_block_q6_K *)w + b;
        u->n = SL_QK_K;
        u->sub = 16;
        u->d = sl_fp16_to_fp32(blk->d);
        for (int s = 0; s < 16; s++)
            u->sc[s] = blk->scales[s];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = blk->ql + 64 * h, *qh = blk->qh + 32 * h;
            int *y = u->q + 128 * h;
            for (int l = 0; l < 32; l++) {
                y[l]      = ((ql[l] & 0xF)      | (((qh[l] >> 0) & 3) << 4)) - 32;
                y[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                y[l + 64] = ((ql[l] >> 4)       | (((qh[l] >> 4) & 3) << 4)) - 32;
                y[l + 96] = ((ql[l + 32] >> 4)  | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        }
        break;
    }
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4:
        sl_vec_dot_unpack_legacy(type, w, b, u);
        break;
    default:
        assert(!"vec_dot_q8: unsupported type");
    }
}

/* The block's contribution to one dot product; `a` is the activation's
 * Q8_0 block (n = 32), Q8_1 block (min1: Q4_1/Q5_1 weights) or Q8_K block
 * (n = 256) for the same elements. Q8_1: dw*da*sum(q*qa) + m*s, ggml's
 * terms (s, the activation's fp16 sum, carries its rounding). */
static float block_dot(const sl_qblock *u, bool k4, bool min1, const void *a)
{
    if (min1) {
        const sl_block_q8_1 *x = a;
        int sumi = 0;
        for (int i = 0; i < SL_QK_LEGACY; i++)
            sumi += u->q[i] * x->qs[i];
        float t = u->d * sl_fp16_to_fp32(x->d) * (float)sumi;
        return t + u->m * sl_fp16_to_fp32(x->s);
    }
    if (u->n == SL_QK8_0) {
        const sl_block_q8_0 *x = a;
        int sumi = 0;
        for (int i = 0; i < SL_QK8_0; i++)
            sumi += u->q[i] * x->qs[i];
        return u->d * sl_fp16_to_fp32(x->d) * (float)sumi;
    }
    const sl_block_q8_K *x = a;
    int sumi = 0;
    for (int s = 0; s < SL_QK_K / u->sub; s++) {
        int p = 0;
        for (int i = s * u->sub; i < (s + 1) * u->sub; i++)
            p += u->q[i] * x->qs[i];
        sumi += u->sc[s] * p;
    }
    float r = u->d * x->d * (float)sumi;
    if (k4) {
        int summ = 0;
        for (int s = 0; s < 8; s++)
            summ += u->mn[s] * (x->bsums[2 * s] + x->bsums[2 * s + 1]);
        r -= u->dmin * x->d * (float)summ;
    }
    return r;
}

void sl_vec_dot_q8_multi_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa,
                                  int m, float *out, int64_t n)
{
    assert(sl_act_format_of_type(type) == SL_ACT_Q8_0 || sl_act_format_of_type(type) == SL_ACT_Q8_1 ||
           sl_act_format_of_type(type) == SL_ACT_Q8_K);
    if (sl_quant_klow_type(type)) {   /* Q2_K, Q3_K, IQ4_XS and the grid formats: vec_dot_klow.c */
        sl_vec_dot_klow_q8_portable(type, w_row, xa, ldxa, m, out, n);
        return;
    }
    int64_t be = sl_ggml_block_elems(type), nb = n / be;
    assert(n % be == 0);
    enum sl_act_format f = sl_act_format_of_type(type);
    size_t abytes = f == SL_ACT_Q8_0 ? sizeof(sl_block_q8_0) : f == SL_ACT_Q8_1 ? sizeof(sl_block_q8_1)
                                                                                : sizeof(sl_block_q8_K);
    bool k4 = type == SL_GGML_TYPE_Q4_K || type == SL_GGML_TYPE_Q5_K, min1 = sl_vec_dot_block_min(type);
    sl_qblock u;
    for (int j0 = 0; j0 < m; j0 += GROUP) {
        int mt = m - j0 < GROUP ? m - j0 : GROUP;
        float acc[GROUP] = {0};
        for (int64_t b = 0; b < nb; b++) {
            sl_vec_dot_unpack(type, w_row, b, &u);
            for (int j = 0; j < mt; j++)
                acc[j] += block_dot(&u, k4, min1, (const char *)xa + (size_t)(j0 + j) * ldxa + (size_t)b * abytes);
        }
        for (int j = 0; j < mt; j++)
            out[j0 + j] = acc[j];
    }
}
