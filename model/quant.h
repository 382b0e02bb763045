/* model/quant.h: GGUF quantized block formats, their reference dequantizers
 * and sluice's own quantizers.
 * Where:     model/ (GGUF reader, mkmodel), kernels/ (block layouts), tools/.
 * Who:       any thread; every function here is pure: no state, no allocation,
 *            so mkmodel may quantize rows on many threads at once.
 * Layouts:   byte for byte those of GGUF/ggml (little-endian hosts only), so
 *            llama.cpp and the `gguf` Python package read what we write; the
 *            `_Static_assert`s below pin each struct to sl_ggml_block_bytes().
 * Errors:    SL_OK; SL_EINVAL when n is negative or not a multiple of the
 *            type's block size; SL_EUNSUPPORTED for a type not listed here. */
#ifndef SL_QUANT_H
#define SL_QUANT_H

#include <stdint.h>

#include "shared/status.h"

/* ---- half and bfloat16 scalars ----------------------------------------- */

/* IEEE binary16 -> float32; exact for every input (subnormals, inf, NaN with
 * its payload). */
float sl_fp16_to_fp32(uint16_t h);

/* float32 -> IEEE binary16, rounding to nearest even; overflow gives inf,
 * tiny values give subnormals or signed zero, NaN stays a (quiet) NaN. */
uint16_t sl_fp32_to_fp16(float f);

/* bfloat16 -> float32; exact. */
float sl_bf16_to_fp32(uint16_t h);

/* float32 -> bfloat16, rounding to nearest even; NaN stays a quiet NaN
 * (ggml's rule, so bytes match the gguf package's). */
uint16_t sl_fp32_to_bf16(float f);

/* ---- block layouts ----------------------------------------------------- */

#define SL_QK4_0 32   /* elements per Q4_0 block */
#define SL_QK8_0 32   /* elements per Q8_0 block */
#define SL_QK_K  256  /* elements per K-quant super-block */
#define SL_K_SCALE_SIZE 12  /* bytes of packed 6-bit scales/mins in Q4_K, Q5_K */

/* Q4_0: x[i] = d * (q[i] - 8); q[i] is the low nibble of qs[i] for i < 16,
 * the high nibble of qs[i-16] otherwise. */
typedef struct {
    uint16_t d;                 /* fp16 scale */
    uint8_t  qs[SL_QK4_0 / 2];  /* nibbles */
} sl_block_q4_0;

/* Q8_0: x[i] = d * qs[i]. */
typedef struct {
    uint16_t d;                 /* fp16 scale */
    int8_t   qs[SL_QK8_0];
} sl_block_q8_0;

/* ---- the other 32-element ("legacy") blocks: model/quant_legacy.c ------
 * All 32 elements per block; fp16 d (and m). Nibble packing as Q4_0: q[i]
 * for i < 16 in the low nibble of qs[i], for i >= 16 in the high nibble of
 * qs[i-16]. Five-bit types keep bit 4 of q[i] in bit i of qh read as a
 * little-endian uint32. */
#define SL_QK_LEGACY 32

/* Q5_0: x[i] = d * (q[i] - 16), q 0..31. */
typedef struct {
    uint16_t d;
    uint8_t  qh[4];
    uint8_t  qs[SL_QK_LEGACY / 2];
} sl_block_q5_0;

/* Q4_1: x[i] = d * q[i] + m, q 0..15. */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t  qs[SL_QK_LEGACY / 2];
} sl_block_q4_1;

/* Q5_1: x[i] = d * q[i] + m, q 0..31. */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t  qh[4];
    uint8_t  qs[SL_QK_LEGACY / 2];
} sl_block_q5_1;

/* Q8_1: x[i] = d * qs[i]; s = d * sum(qs) (fp16), a cached block sum that
 * dequantization ignores. ggml's block_q8_1 (2 halves + 32 bytes; the gguf
 * Python package's size table still says 40, its old float layout). Also
 * the activation format llama.cpp dots Q4_1/Q5_1 weights with. */
typedef struct {
    uint16_t d;
    uint16_t s;
    int8_t   qs[SL_QK_LEGACY];
} sl_block_q8_1;

/* IQ4_NL: x[i] = d * sl_iq4nl_values[q[i]], q a nibble (Q4_0's packing). */
typedef struct {
    uint16_t d;
    uint8_t  qs[SL_QK_LEGACY / 2];
} sl_block_iq4_nl;

/* IQ4_NL's 16 non-linear levels (ggml's kvalues_iq4nl), ascending. */
extern const int8_t sl_iq4nl_values[16];

/* MXFP4 (OCP microscaling FP4): x[i] = sl_e8m0_half(e) * sl_mxfp4_values[q[i]],
 * q a nibble in Q4_0's packing. The codes are E2M1 floats (sign, 2-bit
 * exponent, 1-bit mantissa) and e an E8M0 exponent shared by the block:
 * value = 2^(e-127) * fp4. ggml stores the FP4 values doubled (integers
 * -12..12) and halves the scale instead, so the codes fit int8 dot
 * products; we keep its convention, which is what makes dequantization
 * match its (and the gguf package's) bit for bit. */
typedef struct {
    uint8_t e;                      /* E8M0 exponent */
    uint8_t qs[SL_QK_LEGACY / 2];   /* E2M1 nibbles */
} sl_block_mxfp4;

/* The 16 E2M1 values doubled (ggml's kvalues_mxfp4); code 8, E2M1's -0,
 * is a plain 0 (so it decodes to +0, as in ggml). */
extern const int8_t sl_mxfp4_values[16];

/* 2^(e-128) as a float: half of E8M0's 2^(e-127). e = 0 and 1 give the
 * subnormals 2^-128 and 2^-127 (ggml's ggml_e8m0_to_fp32_half); e = 255,
 * NaN in the OCP format, gives 2^127 as ggml does (it ignores NaN). */
static inline float sl_e8m0_half(uint8_t e)
{
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* Q4_K: 8 sub-blocks of 32; sub-block s has a 6-bit scale sc[s] and 6-bit
 * min m[s] (packed in `scales`, see sl_quant_get_scale_min_k4) and
 * x = d*sc[s]*q - dmin*m[s], q a nibble. The 64-element chunk c uses
 * qs[32c..32c+31]: low nibbles are sub-block 2c, high nibbles 2c+1. */
typedef struct {
    uint16_t d;                       /* fp16 super-block scale of the scales */
    uint16_t dmin;                    /* fp16 super-block scale of the mins */
    uint8_t  scales[SL_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each */
    uint8_t  qs[SL_QK_K / 2];         /* low 4 bits of q */
} sl_block_q4_K;

/* Q5_K: Q4_K plus a fifth bit: element 32s + l (sub-block s) takes bit s of
 * qh[l] as bit 4 of q, so q is 0..31. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t  scales[SL_K_SCALE_SIZE];
    uint8_t  qh[SL_QK_K / 8];         /* high bit of q */
    uint8_t  qs[SL_QK_K / 2];         /* low 4 bits of q */
} sl_block_q5_K;

/* Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; x = d*sc[s]*(q - 32),
 * q 6 bits. Each 128-element half h uses ql[64h..64h+63], qh[32h..32h+31]
 * and for l < 32 holds elements (base 128h):
 *   l     : low nibble of ql[l],    qh[l] bits 0-1
 *   l+32  : low nibble of ql[l+32], qh[l] bits 2-3
 *   l+64  : high nibble of ql[l],   qh[l] bits 4-5
 *   l+96  : high nibble of ql[l+32],qh[l] bits 6-7 */
typedef struct {
    uint8_t  ql[SL_QK_K / 2];   /* low 4 bits of q */
    uint8_t  qh[SL_QK_K / 4];   /* high 2 bits of q */
    int8_t   scales[SL_QK_K / 16];
    uint16_t d;                 /* fp16 super-block scale */
} sl_block_q6_K;

/* Unpacks scale and min of sub-block j (0..7) of a Q4_K/Q5_K `scales`
 * array: j < 4 keep them in the low 6 bits of bytes j and j+4; j >= 4 split
 * them into a nibble of byte j+4 and the top two bits of bytes j-4 / j. */
static inline void sl_quant_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc /* OUT */,
                                             uint8_t *m /* OUT */)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* ---- rows -------------------------------------------------------------- */

/* Decodes `n` elements of a row stored in `type` (the sl_ggml_type_supported
 * types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; Q5_0, Q4_1, Q5_1, Q8_1,
 * IQ4_NL, MXFP4 in quant_legacy.c; Q2_K, Q3_K, IQ4_XS and the IQ1/IQ2/IQ3 grid
 * formats in quant_klow.c; TQ1_0, TQ2_0 in quant_ternary.c) from `src` into
 * `dst` (n floats).
 * Returns SL_OK; SL_EINVAL (bad n); SL_EUNSUPPORTED (other type). `dst` is
 * untouched on failure. The arithmetic follows the gguf package's order, so
 * results match its dequantizer bit for bit. */
sl_status sl_quant_dequantize_row(uint32_t type, const void *src, float *dst /* OUT */, int64_t n);

/* Encodes `n` floats of `src` into `dst` (sl_ggml_row_bytes(type, n) bytes)
 * in `type` (the same types but the IQ1/IQ2/IQ3 grid formats, which are
 * read only: SL_EUNSUPPORTED). Q8_0/Q4_0 take the block scale from the
 * absolute maximum as the format defines; Q5_0, Q4_1 and Q5_1 are the gguf
 * package's reference quantizers byte for byte, IQ4_NL searches the block
 * scale, Q8_1 is Q8_0 plus its sum, MXFP4 is ggml's reference quantizer
 * byte for byte (model/quant_legacy.c), TQ1_0 and TQ2_0
 * are the gguf package's quantizers byte for byte; the K-quants search each
 * sub-block's scale (and min) by a grid of candidate scales refined by least
 * squares, then quantize the 6/8-bit scales and re-fit the values to them.
 * Returns SL_OK; SL_EINVAL (bad n); SL_EUNSUPPORTED (other type). `dst` is
 * untouched on failure. Non-finite inputs give unspecified (but in-range)
 * codes. Thread-safe, allocation-free. */
sl_status sl_quant_quantize_row(uint32_t type, const float *src, void *dst /* OUT */, int64_t n);

#endif
