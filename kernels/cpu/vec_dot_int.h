/* kernels/cpu/vec_dot_int.h: private to the CPU dot kernels: a weight
 * block unpacked to int codes for the portable references (vec_dot_q8.c,
 * vec_dot_q16.c, and vec_dot.c, which turns them into floats), and the float
 * tails of the 16-bit dots (vec_dot_q16*.c), which the portable and AVX2
 * kernels must share to stay bitwise equal.
 * Who:       CPU backend threads; pure functions.
 * Float tails: the integer part of a block's dot is exact on both paths;
 *            what follows is written once here, in double, one operation per
 *            statement. The build is ISO C17 (GCC: no FP contraction) and
 *            clang contracts only inside one expression, so no FMA can
 *            appear in one path and not the other. */
#ifndef SL_VEC_DOT_INT_H
#define SL_VEC_DOT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/ggml_types.h"
#include "model/quant.h"

/* One weight block unpacked: codes q (signed for Q8_0/Q4_0/Q6_K after the
 * -32 shift, unsigned for Q4_K/Q5_K), integer sub-block scales and mins.
 * The other 32-element types: q signed (Q5_0: nibble + 16*bit - 16;
 * IQ4_NL: the level itself; MXFP4: the doubled E2M1 value, d the halved
 * E8M0 scale; Q8_1: qs) with sc[0] = 1, or unsigned with a
 * float block min m (Q4_1/Q5_1: x = d*q + m). */
typedef struct {
    int n;                    /* 32 or 256 elements */
    int sub;                  /* elements per scale: 32 (Q8_0, Q4_0, Q4_K, Q5_K) or 16 (Q6_K) */
    float d, dmin;
    float m;                  /* Q4_1/Q5_1 block min; 0 for the other types */
    int sc[SL_QK_K / 16];
    int mn[SL_QK_K / 32];
    int q[SL_QK_K];
} sl_qblock;

/* Unpacks block b of weight row w (any quantized type the engine computes)
 * into u (OUT). Defined in vec_dot_q8.c; the 32-element types other than
 * Q8_0/Q4_0 go to sl_vec_dot_unpack_legacy (vec_dot_legacy.c). */
void sl_vec_dot_unpack(uint32_t type, const void *w, int64_t b, sl_qblock *u /* OUT */);
void sl_vec_dot_unpack_legacy(uint32_t type, const void *w, int64_t b, sl_qblock *u /* OUT */);

/* The AVX2 dots of those types (vec_dot_legacy_avx2.c), for mt (1..32)
 * activation rows at xa, stride ldxa: 16-bit Q16_0 rows, or 8-bit rows
 * (Q8_1 for Q4_1/Q5_1, Q8_0 for the others). Called by the dispatch
 * switches of vec_dot_q16_avx2.c and vec_dot_q8_avx2.c only. */
void sl_vec_dot_legacy_q16_avx2(uint32_t type, const void *w_row, const char *xa, size_t ldxa, int mt,
                                float *out /* OUT */, int64_t n);
void sl_vec_dot_legacy_q8_avx2(uint32_t type, const void *w_row, const char *xa, size_t ldxa, int mt,
                               float *out /* OUT */, int64_t n);

/* True for the types whose blocks add a float min (x = d*q + m): Q4_1, Q5_1. */
static inline bool sl_vec_dot_block_min(uint32_t type)
{
    return type == SL_GGML_TYPE_Q4_1 || type == SL_GGML_TYPE_Q5_1;
}

/* Q16_0 dots (Q8_0/Q4_0 weights): block b's term, dw * da * sumi. dw*da is
 * exact in double (11 + 24 significant bits), so one rounding per block.
 * Blocks go to four double lanes, lane b % 4, and a row's lanes are summed
 * by sl_q16_lanes_sum; the row's last group of four is padded with zero
 * terms (+0.0 added to the lanes it does not reach). */
static inline double sl_q16_term0(float dw, float da, int32_t sumi)
{
    double s = (double)dw * (double)da;
    double t = s * (double)sumi;
    return t;
}

static inline float sl_q16_lanes_sum(const double acc[4])
{
    double lo = acc[0] + acc[1];
    double hi = acc[2] + acc[3];
    double s = lo + hi;
    return (float)s;
}

/* Q16_0 dots of Q4_1/Q5_1 weights: dw * da * sumi + m * da * asum (asum
 * the activation block's code sum); both products of scales are exact in
 * double, so three roundings per block; lanes as sl_q16_term0. */
static inline double sl_q16_term1(float dw, float m, float da, int32_t sumi, int32_t asum)
{
    double s = (double)dw * (double)da;
    double t = s * (double)sumi;
    double u = (double)m * (double)da;
    double v = u * (double)asum;
    double r = t + v;
    return r;
}

/* Q16_K dots: super-block term d*da*isum - dmin*da*msum (msum 0 for Q6_K),
 * added to the row's double accumulator in block order. */
static inline double sl_q16_termk(float d, float dmin, float da, int64_t isum, int32_t msum)
{
    double s = (double)d * (double)da;
    double t = s * (double)isum;
    double u = (double)dmin * (double)da;
    double v = u * (double)msum;
    double r = t - v;
    return r;
}

#endif
