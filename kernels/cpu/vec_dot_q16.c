/* kernels/cpu/vec_dot_q16.c: the portable (C17) dot products of a quantized
 * weight row with 16-bit activations (Q16_0 / Q16_K rows, act_quant.h).
 * Runs in the CPU backend's threads. The readable reference for
 * vec_dot_q16_avx2.c, and bitwise equal to it: both form the same exact
 * integer sums per block and pass them to the same float tails
 * (vec_dot_int.h) in the same order.
 *   Q8_0 / Q4_0 (and Q5_0, IQ4_NL, MXFP4, Q8_1) weights, Q16_0 activations, per
 *   block b of 32:
 *       sumi = sum(qw * qa), int32: |.| <= 32 * 128 * 32767 < 2^27;
 *       acc[b % 4] += dw * da * sumi (double), then a fixed 4-lane sum;
 *       Q4_1 / Q5_1 add m * da * sum(qa) to the block's term.
 *   Q4_K / Q5_K / Q6_K weights, Q16_K activations, per super-block of 256:
 *       isum = sum_s sc[s] * sum_{i in s}(q * qa), int64 (the per-sub-block
 *       sums fit int32: <= 32 * 63 * 32767; their scaled total need not);
 *       msum = sum_s m[s] * bsums[s] (Q4_K/Q5_K): <= 8 * 63 * 32 * 32767
 *       < 2^30; acc += d*da*isum - dmin*da*msum (double), in block order.
 * A row's result depends on that row alone, so never on m. */
#include <assert.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "kernels/cpu/vec_dot_int.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"

static float row_dot0(uint32_t type, const void *w_row, const sl_block_q16_0 *a, int64_t nb)
{
    bool min1 = sl_vec_dot_block_min(type);
    double acc[4] = {0, 0, 0, 0};
    sl_qblock u;
    int64_t b = 0;
    for (; b < nb; b++) {
        sl_vec_dot_unpack(type, w_row, b, &u);
        int32_t sumi = 0;
        for (int i = 0; i < SL_QK8_0; i++)
            sumi += u.q[i] * a[b].qs[i];
        acc[b % 4] += min1 ? sl_q16_term1(u.d, u.m, a[b].d, sumi, a[b].sum) : sl_q16_term0(u.d, a[b].d, sumi);
    }
    for (; b % 4 != 0; b++)   /* the zero padding of the last group (vec_dot_int.h) */
        acc[b % 4] += 0.0;
    return sl_q16_lanes_sum(acc);
}

static float row_dotk(uint32_t type, const void *w_row, const sl_block_q16_K *a, int64_t nb)
{
    bool k4 = type == SL_GGML_TYPE_Q4_K || type == SL_GGML_TYPE_Q5_K;
    double acc = 0.0;
    sl_qblock u;
    for (int64_t b = 0; b < nb; b++) {
        sl_vec_dot_unpack(type, w_row, b, &u);
        int64_t isum = 0;
        for (int s = 0; s < SL_QK_K / u.sub; s++) {
            int32_t p = 0;
            for (int i = s * u.sub; i < (s + 1) * u.sub; i++)
                p += u.q[i] * a[b].qs[i];
            isum += (int64_t)u.sc[s] * p;
        }
        int32_t msum = 0;
        if (k4)
            for (int s = 0; s < 8; s++)
                msum += u.mn[s] * a[b].bsums[s];
        acc += sl_q16_termk(u.d, k4 ? u.dmin : 0.0f, a[b].d, isum, msum);
    }
    return (float)acc;
}

void sl_vec_dot_q16_multi_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                   float *out, int64_t n)
{
    if (sl_quant_klow_type(type)) {   /* Q2_K, Q3_K, IQ4_XS: vec_dot_klow.c */
        sl_vec_dot_klow_q16_portable(type, w_row, xa, ldxa, m, out, n);
        return;
    }
    int64_t be = sl_ggml_block_elems(type);
    assert(sl_act_format_of_mode(SL_ACT_MODE_Q16, type) == SL_ACT_Q16_0 ||
           sl_act_format_of_mode(SL_ACT_MODE_Q16, type) == SL_ACT_Q16_K);
    assert(n % be == 0);
    for (int j = 0; j < m; j++) {
        const char *row = (const char *)xa + (size_t)j * ldxa;
        out[j] = be == SL_QK_K ? row_dotk(type, w_row, (const sl_block_q16_K *)row, n / be)
                               : row_dot0(type, w_row, (const sl_block_q16_0 *)row, n / be);
    }
}
