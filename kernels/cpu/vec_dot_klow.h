/* kernels/cpu/vec_dot_klow.h: private to the CPU dot kernels: the dot
 * products of Q2_K, Q3_K, IQ4_XS, grid-format (IQ1_*, IQ2_*, IQ3_*) and
 * ternary (TQ1_0, TQ2_0) weight rows (model/quant_klow.h) on
 * each activation path, portable and AVX2. The dispatchers (vec_dot.c,
 * vec_dot_q8*.c, vec_dot_q16*.c, vec_dot_avx2.c) hand these types here.
 * Contracts: those of the matching sl_vec_dot_*multi* in vec_dot.h (same
 * determinism; 16-bit: portable and AVX2 bitwise equal; 8-bit: equal too,
 * both evaluate the same float expression per block in block order; float:
 * within float rounding of each other).
 * Who:       CPU backend threads; pure functions. */
#ifndef SL_VEC_DOT_KLOW_H
#define SL_VEC_DOT_KLOW_H

#include <stddef.h>
#include <stdint.h>

/* One weight block unpacked for the portable kernels: codes q (Q2_K 0..3,
 * Q3_K -4..3, IQ4_XS the IQ4 levels, grids +-grid value, IQ1 8*grid+-1,
 * ternary -1..1), nsub sub-blocks of `sub` elements with
 * integer scales sc and (Q2_K) mins mn; x = d*sc*q - dmin*mn. */
typedef struct {
    int sub, nsub;
    int has_min;
    float d, dmin;
    int sc[16], mn[16];
    int q[256];
} sl_klow_block;

/* Unpacks block b of row w (OUT u). */
void sl_vec_dot_klow_unpack(uint32_t type, const void *w, int64_t b, sl_klow_block *u /* OUT */);

/* float32 activations (sl_vec_dot_multi's contract). */
void sl_vec_dot_klow_f32_portable(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                                  float *out /* OUT */, int64_t n);
void sl_vec_dot_klow_f32_avx2(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                              float *out /* OUT */, int64_t n);

/* Q8_K activation rows (sl_vec_dot_q8_multi_*'s contract). */
void sl_vec_dot_klow_q8_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                 float *out /* OUT */, int64_t n);
void sl_vec_dot_klow_q8_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                             float *out /* OUT */, int64_t n);

/* Q16_K activation rows (sl_vec_dot_q16_multi_*'s contract). */
void sl_vec_dot_klow_q16_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                  float *out /* OUT */, int64_t n);
void sl_vec_dot_klow_q16_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                              float *out /* OUT */, int64_t n);

#endif
