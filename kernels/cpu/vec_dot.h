/* kernels/cpu/vec_dot.h: dot products of one weight row, kept in its GGUF
 * type, with activation rows (the CPU matmul inner loop): float32 rows
 * (sl_vec_dot*), or rows prepared by act_quant.h (sl_vec_dot_act_multi):
 * 8-bit blocks for quantized weights as llama.cpp does (the engine's
 * default), or 16-bit ones (SLUICE_CPU_ACT=q16).
 * Where:     CPU backend threads; tools/quantdump (benchmark); tests.
 * Who:       any thread, concurrently; the ISA is chosen once, on first use
 *            (pthread_once), and never changes afterwards.
 * ISA:       AVX2+FMA+F16C when the CPU has them (vec_dot_avx2.c), else the
 *            portable C reference (vec_dot.c); with AVX-512 (F, BW, VL,
 *            VNNI) as well, the 8-bit one-row dots of the main types run
 *            vec_dot_q8_avx512.c, bitwise the AVX2 results. Env
 *            SLUICE_CPU_ISA=portable forces the portable path,
 *            SLUICE_CPU_ISA=avx2 the AVX2 one on an AVX-512 machine.
 * Determinism: a dot product's reduction order depends only on (type, n),
 *            never on m or on the other vectors of a batch, so
 *            sl_vec_dot_multi(...)[j] == sl_vec_dot(..., x + j*ldx, n) bit
 *            for bit (the engine promises batch-independent logits).
 * Memory:    no allocation; each weight block is decoded into a small stack
 *            buffer (or registers), never a whole row or matrix.
 * Types:     F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q8_1, IQ4_NL, MXFP4,
 *            Q4_K, Q5_K, Q6_K (the 32-element ones other than Q8_0/Q4_0:
 *            vec_dot_legacy*.c), and Q2_K, Q3_K, IQ4_XS, IQ2_XXS, IQ2_XS,
 *            IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0
 *            (vec_dot_klow*.c). Preconditions
 *            (checked by assert only; this is the hot path): the type is one
 *            of these and n is a multiple of its block size.
 * Speed:     activations aligned to 32 bytes (x and ldx*4) run ~30% faster
 *            than misaligned ones (split loads); rows need no alignment. */
#ifndef SL_VEC_DOT_H
#define SL_VEC_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/act_quant.h"

/* sum_i w_row[i] * x[i] over n elements; w_row holds n elements of `type`. */
float sl_vec_dot(uint32_t type, const void *w_row, const float *x, int64_t n);

/* out[j] = sl_vec_dot(type, w_row, x + j*ldx, n) for 0 <= j < m, bitwise,
 * decoding each weight block once per group of up to 32 vectors (prefill).
 * out: m floats (OUT). m <= 0 does nothing. Note n comes last: an earlier
 * signature had no n, and ldx >= n need not equal it. */
void sl_vec_dot_multi(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                      float *out /* OUT */, int64_t n);

/* "avx512", "avx2" or "portable": the path the dots take in this process
 * ("avx512": the AVX2 kernels, and the AVX-512 ones where they exist). */
const char *sl_vec_dot_isa(void);

/* ---- the two implementations, for tests and the benchmark ---------------
 * Same contracts as sl_vec_dot_multi. The avx2 one may be called only when
 * sl_vec_dot_avx2_available() (CPU support, whatever SLUICE_CPU_ISA says). */
void sl_vec_dot_multi_portable(uint32_t type, const void *w_row, const float *x, int64_t ldx,
                               int m, float *out /* OUT */, int64_t n);
void sl_vec_dot_multi_avx2(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                           float *out /* OUT */, int64_t n);
bool sl_vec_dot_avx2_available(void);

/* ---- activations prepared by act_quant.h ---------------------------------
 * out[j] = dot(w_row, activation row j) for 0 <= j < m, where row j starts
 * at byte j*ldxa of xa (xa and ldxa 4-byte aligned: blocks hold floats)
 * and is in format f: either f is F32/F16/BF16 (float rows;
 * sl_vec_dot_multi on them), or the 16-bit format of the type (Q16_0 for
 * the 32-element weight types, Q16_K for the 256-element types), or the 8-bit one,
 * sl_act_format_of_type(type) (Q8_0 / Q8_1 / Q8_K). Same determinism promise as
 * sl_vec_dot_multi: out[j] is bitwise what m = 1 gives for that row.
 * Integer sums are exact. 16-bit: AVX2 and portable are bitwise equal (the
 * float tail is shared code in a fixed order, in double). 8-bit: they
 * differ in the order of the float sums (~1e-7 relative; for Q4_1/Q5_1
 * ~1e-7 of sum |m * s|, as AVX2 sums the min terms apart, as ggml does). */
void sl_vec_dot_act_multi(uint32_t type, enum sl_act_format f, const void *w_row, const void *xa,
                          size_t ldxa, int m, float *out /* OUT */, int64_t n);

/* sl_vec_dot_act_multi for nr weight rows at w, row_bytes apart, against
 * the same m activation rows: out[r*m + j] is bitwise what
 * sl_vec_dot_act_multi gives for row r and activation row j (m = 1 or
 * not), so a matmul may take its rows in any groups. On AVX2, Q8_0,
 * Q4_0, Q4_K, Q5_K and Q6_K rows with 8-bit activations go through
 * register tiles of 4 weight rows x 2 activation rows (prefill); the other
 * cases row by row.
 * out: nr * m floats (OUT). */
void sl_vec_dot_act_rows(uint32_t type, enum sl_act_format f, const void *w, size_t row_bytes, int nr,
                         const void *xa, size_t ldxa, int m, float *out /* OUT */, int64_t n);

/* The 8-bit implementations (f = sl_act_format_of_type(type), a quantized
 * type), for tests and the benchmark; same contract as above. */
void sl_vec_dot_q8_multi_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                  float *out /* OUT */, int64_t n);
void sl_vec_dot_q8_multi_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                              float *out /* OUT */, int64_t n);
/* sl_vec_dot_act_rows's 8-bit AVX2 path (m <= 32 for the tiles). */
void sl_vec_dot_q8_rows_avx2(uint32_t type, const void *w, size_t row_bytes, int nr, const void *xa, size_t ldxa,
                             int m, float *out /* OUT */, int64_t n);
/* The AVX-512 VNNI ones (vec_dot_q8_avx512.c): one activation row (m = 1)
 * of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K; the rest passes to the AVX2 kernels
 * above. Bitwise the AVX2 results. Call only when
 * sl_vec_dot_avx512_available() (CPU and OS support, whatever
 * SLUICE_CPU_ISA says). */
void sl_vec_dot_q8_multi_avx512(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                float *out /* OUT */, int64_t n);
void sl_vec_dot_q8_rows_avx512(uint32_t type, const void *w, size_t row_bytes, int nr, const void *xa, size_t ldxa,
                               int m, float *out /* OUT */, int64_t n);
bool sl_vec_dot_avx512_available(void);

/* The 16-bit implementations (f = Q16_0 or Q16_K, as above), for tests and
 * the benchmark; same contract, and bitwise equal to each other. */
void sl_vec_dot_q16_multi_portable(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                                   float *out /* OUT */, int64_t n);
void sl_vec_dot_q16_multi_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                               float *out /* OUT */, int64_t n);

#endif
