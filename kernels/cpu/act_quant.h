/* kernels/cpu/act_quant.h: activation rows prepared in the format a weight
 * of a given GGUF type is dotted with, before the CPU matmul dots them.
 * Where:     CPU backend threads (kernels/cpu/forward.c); tests; tools.
 * Who:       any thread; every function is pure except sl_act_mode(), which
 *            reads env SLUICE_CPU_ACT once (pthread_once).
 * Modes:     SLUICE_CPU_ACT picks one for the whole process:
 *   q8 (default; also unset or unknown) llama.cpp's rounding:
 *                 Q4_0/Q8_0/Q5_0/IQ4_NL/MXFP4/Q8_1 -> Q8_0 blocks, Q4_1/Q5_1 ->
 *                 Q8_1 blocks (Q8_0's codes plus ggml's fp16 sum s),
 *                 K-quants -> Q8_K blocks,
 *                 F16 / BF16 -> float32 rows holding fp16 / bf16 rounded
 *                 values, F32 -> the row itself.
 *   q16           weight Q4_0, Q8_0 and the
 *                 other 32-element types  -> Q16_0 blocks of 32 (float scale
 *                                            amax/32767, int16 codes, their
 *                                            sum for Q4_1/Q5_1's min);
 *                 weight Q2_K..Q6_K, IQ4_XS -> Q16_K blocks of 256 (same, plus
 *                                            8 int32 sums of 32 codes, for
 *                                            the K-quants' min terms);
 *                 weight F32, F16, BF16   -> the float32 row itself.
 *   f32           every type -> the float32 row (~5e-7 from float64).
 * Why q8:    an integer dot is much cheaper than float FMAs on decoded
 *            weights, and bytes times bytes (vpmaddubsw) is the cheapest
 *            integer dot AVX2 has: the 8-bit path runs at llama.cpp's speed
 *            with llama.cpp's numerics (a Q8_0 model gives its logits bit
 *            for bit). The price is a coarse step: an activation within
 *            float32 noise of a rounding boundary moves one code by
 *            amax/127 and the logits by up to ~2e-2, and the rounding noise
 *            itself puts the logits ~1e-2 from float64 on the tiny test
 *            models, as far as llama.cpp's own (tests/reference/
 *            test_forward.py; docs/CPU-ACTIVATIONS.md has the numbers).
 * Why q16:   the float64-closer option: step amax/32767, logits within
 *            4e-5 to 1.2e-4 relative L2 of float64 on those models (bound
 *            1e-3), at a cost in speed (each code widened to int16 for
 *            vpmaddwd; docs/PERF.md "CPU engine" has the figures).
 * Determinism: a row's codes depend on that row only, never on the batch.
 * Memory:    no allocation; the caller sizes dst with sl_act_row_bytes(). */
#ifndef SL_ACT_QUANT_H
#define SL_ACT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/quant.h"

/* Q8_K: x[i] ~= d * qs[i]; bsums[k] = sum of qs[16k .. 16k+15]. Layout of
 * ggml's block_q8_K (an activation-only type, never stored in files). */
typedef struct {
    float   d;
    int8_t  qs[SL_QK_K];
    int16_t bsums[SL_QK_K / 16];
} sl_block_q8_K;
_Static_assert(sizeof(sl_block_q8_K) == 292, "sl_block_q8_K is ggml's block_q8_K");

/* Q16_0 (for the 32-element weight types): x[i] ~= d * qs[i],
 * |qs[i]| <= 32767; sum = the sum of qs (the Q4_1/Q5_1 min term). The
 * codes come first and the block is 96 bytes, so in a 32-byte aligned row
 * every 16-code load is aligned (68 bytes would split half of them). */
typedef struct {
    int16_t qs[SL_QK8_0];
    float   d;
    int32_t sum;
    int32_t _pad[6];
} sl_block_q16_0;
_Static_assert(sizeof(sl_block_q16_0) == 96, "sl_block_q16_0 keeps 32-byte alignment");

/* Q16_K (for Q4_K/Q5_K/Q6_K weights): x[i] ~= d * qs[i]; bsums[k] = sum of
 * qs[32k .. 32k+31] (|.| <= 32*32767: int16 would overflow). 576 bytes. */
typedef struct {
    int16_t qs[SL_QK_K];
    int32_t bsums[SL_QK_K / 32];
    float   d;
    int32_t _pad[7];
} sl_block_q16_K;
_Static_assert(sizeof(sl_block_q16_K) == 576, "sl_block_q16_K keeps 32-byte alignment");

enum sl_act_format {
    SL_ACT_F32,   /* float32, unchanged */
    SL_ACT_F16,   /* float32 storage, each value rounded to fp16 (nearest even) */
    SL_ACT_BF16,  /* float32 storage, each value rounded to bf16 (nearest even) */
    SL_ACT_Q8_0,  /* sl_block_q8_0[n/32], then float[n/32] (sl_act_q8_0_scales) */
    SL_ACT_Q8_K,  /* sl_block_q8_K[n/256] */
    SL_ACT_Q16_0, /* sl_block_q16_0[n/32] */
    SL_ACT_Q16_K, /* sl_block_q16_K[n/256] */
    SL_ACT_Q8_1,  /* sl_block_q8_1[n/32] */
};

enum sl_act_mode {
    SL_ACT_MODE_Q16,  /* SLUICE_CPU_ACT=q16: 16-bit codes, close to float64 */
    SL_ACT_MODE_Q8,   /* SLUICE_CPU_ACT unset, "q8" or unknown: llama.cpp's 8-bit rounding, the default */
    SL_ACT_MODE_F32,  /* SLUICE_CPU_ACT=f32: float32 rows everywhere */
};

/* The process's mode from env SLUICE_CPU_ACT (read once per process). */
enum sl_act_mode sl_act_mode(void);

/* False when the mode is SL_ACT_MODE_F32. */
bool sl_act_quant_on(void);

/* The format that activations take for a weight of GGUF `type`
 * (sl_ggml_type_supported types) in the process's mode, sl_act_mode(). */
enum sl_act_format sl_act_format_of(uint32_t type);

/* The same mapping for an explicit mode (tests, benchmarks). */
enum sl_act_format sl_act_format_of_mode(enum sl_act_mode mode, uint32_t type);

/* The q8 mode's mapping, ignoring the environment (tests, benchmarks). */
enum sl_act_format sl_act_format_of_type(uint32_t type);

/* A Q8_0 row of n elements (a multiple of 32) holds its n/32 ggml blocks,
 * then, from the next multiple of 4 bytes, each block's d as a float (the
 * exact value of its fp16 d): the AVX2 kernels read eight of them with one
 * load and multiply them by eight weight scales at once, where reading the
 * fp16 ones cost two conversions and a broadcast per block for every
 * weight row. row must be 4-byte aligned (the dot contract's). */
static inline const float *sl_act_q8_0_scales(const void *row, int64_t n)
{
    size_t blocks = (size_t)(n / SL_QK8_0) * sizeof(sl_block_q8_0);
    return (const float *)((const char *)row + (blocks + 3) / 4 * 4);
}

/* Bytes of one row of n elements in format f. n must be a multiple of 32
 * (Q8_0, Q8_1, Q16_0) or 256 (Q8_K, Q16_K); any n for the float formats. */
size_t sl_act_row_bytes(enum sl_act_format f, int64_t n);

/* Writes row x (n floats) into dst in format f.
 *   Q16_0, Q16_K: d = amax/32767 (float), q = nearest-even(x / d) (then
 *         |q| <= 32767), sum and bsums exact.
 * The 8-bit formats follow ggml:
 *   Q8_0: d = amax/127 kept as fp16, q = nearest-even(x * (127/amax)) (the
 *         rule of ggml's x86 quantizer, which llama.cpp runs on this CPU;
 *         its reference C one rounds x/d half away from zero), then
 *         each block's d as a float (sl_act_q8_0_scales);
 *   Q8_1: Q8_0's d and codes, s = fp16(d * sum(q)) with d the float
 *         amax/127 (ggml's x86 quantize_row_q8_1);
 *   Q8_K: v = the element of largest magnitude, iscale = -127/v,
 *         q = min(127, nearest-even(iscale * x)), d = 1/iscale;
 *   an all-zero block gets d = 0 and zero codes (so does a Q16 block whose
 *   amax is not finite or so tiny that d underflows). Non-finite inputs give
 *   unspecified but in-range codes. */
void sl_act_quantize_row(enum sl_act_format f, const float *x, void *dst /* OUT */, int64_t n);

#endif
