/* kernels/cpu/act_quant.h: activation rows prepared the way llama.cpp feeds
 * them to a weight of a given GGUF type, before the CPU matmul dots them.
 * Where:     CPU backend threads (kernels/cpu/forward.c); tests; tools.
 * Who:       any thread; every function is pure except sl_act_quant_on(),
 *            which reads env SLUICE_CPU_ACT once (pthread_once).
 * Formats:   weight Q4_0, Q8_0       -> Q8_0 blocks of 32 (fp16 scale);
 *            weight Q4_K, Q5_K, Q6_K -> Q8_K blocks of 256 (float scale and
 *                                       16 sums of 16 codes, for the mins);
 *            weight F16 / BF16       -> float32 rows holding fp16 / bf16
 *                                       rounded values;
 *            weight F32              -> the float32 row itself.
 *            SLUICE_CPU_ACT=f32 maps every type to F32 (the float path the
 *            engine used before: ~5e-7 from float64, further from llama.cpp).
 * Why:       the integer dot (kernels/cpu/vec_dot_q8*.c) is about twice as
 *            fast as float FMAs on decoded weights, and rounding exactly as
 *            llama.cpp does keeps our logits within its noise, not ours.
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

enum sl_act_format {
    SL_ACT_F32,   /* float32, unchanged */
    SL_ACT_F16,   /* float32 storage, each value rounded to fp16 (nearest even) */
    SL_ACT_BF16,  /* float32 storage, each value rounded to bf16 (nearest even) */
    SL_ACT_Q8_0,  /* sl_block_q8_0[n/32] */
    SL_ACT_Q8_K,  /* sl_block_q8_K[n/256] */
};

/* False when env SLUICE_CPU_ACT is "f32" (read once per process). */
bool sl_act_quant_on(void);

/* The format that activations take for a weight of GGUF `type`
 * (sl_ggml_type_supported types), honouring sl_act_quant_on(). */
enum sl_act_format sl_act_format_of(uint32_t type);

/* Same mapping, ignoring the environment (tests, benchmarks). */
enum sl_act_format sl_act_format_of_type(uint32_t type);

/* Bytes of one row of n elements in format f. n must be a multiple of 32
 * (Q8_0) or 256 (Q8_K); any n for the float formats. */
size_t sl_act_row_bytes(enum sl_act_format f, int64_t n);

/* Writes row x (n floats) into dst in format f. Rounding follows ggml:
 *   Q8_0: d = amax/127 kept as fp16, q = nearest-even(x * (127/amax)) (the
 *         rule of ggml's x86 quantizer, which llama.cpp runs on this CPU;
 *         its reference C one rounds x/d half away from zero);
 *   Q8_K: v = the element of largest magnitude, iscale = -127/v,
 *         q = min(127, nearest-even(iscale * x)), d = 1/iscale;
 *   an all-zero block gets d = 0 and zero codes. Non-finite inputs give
 *   unspecified but in-range codes. */
void sl_act_quantize_row(enum sl_act_format f, const float *x, void *dst /* OUT */, int64_t n);

#endif
