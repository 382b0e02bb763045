/* model/quant_klow.h: the low-bit 256-element GGUF formats Q2_K, Q3_K,
 * IQ4_XS, the grid formats (IQ1_*, IQ2_*, IQ3_*) and the ternary TQ1_0 and
 * TQ2_0: block layouts, reference dequantizers and sluice's quantizers.
 * Where:     model/quant.c dispatches to these; kernels/cpu/vec_dot_klow*.c
 *            read the layouts.
 * Who:       any thread; pure functions, no state, no allocation.
 * Layouts:   byte for byte those of GGUF/ggml, so llama.cpp and the `gguf`
 *            Python package read what we write. */
#ifndef SL_QUANT_KLOW_H
#define SL_QUANT_KLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "model/quant.h"

/* Q2_K: 16 sub-blocks of 16; sub-block s has a 4-bit scale (low nibble of
 * scales[s]) and a 4-bit min (high nibble): x = d*sc*q - dmin*m, q 2 bits.
 * Element 128h + 32j + l is bits 2j..2j+1 of qs[32h + l]. */
typedef struct {
    uint8_t  scales[SL_QK_K / 16];
    uint8_t  qs[SL_QK_K / 4];
    uint16_t d;                 /* fp16 scale of the scales */
    uint16_t dmin;              /* fp16 scale of the mins */
} sl_block_q2_K;

/* Q3_K: 16 sub-blocks of 16 with 6-bit scales stored biased by 32
 * (sc = code - 32); x = d*sc*q, q = low - 4*(1 - hbit) in -4..3. The low
 * 2 bits sit as in Q2_K; hbit of element k is bit k/32 of hmask[k % 32].
 * Scale code s: low nibble from byte s (s < 8) or the high nibble of byte
 * s - 8; bits 4-5 are bits 2(s/4)..2(s/4)+1 of byte 8 + s%4. */
typedef struct {
    uint8_t  hmask[SL_QK_K / 8];
    uint8_t  qs[SL_QK_K / 4];
    uint8_t  scales[12];
    uint16_t d;                 /* fp16 super-block scale */
} sl_block_q3_K;

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales biased by 32; x = d*sc*v,
 * v = sl_quant_iq4_values[nibble]. Element 32s + 16t + l is nibble t (low,
 * high) of qs[16s + l]; scale code s: nibble s%2 of scales_l[s/2] plus bits
 * 2s..2s+1 of scales_h as bits 4-5. */
typedef struct {
    uint16_t d;                 /* fp16 super-block scale */
    uint16_t scales_h;
    uint8_t  scales_l[SL_QK_K / 64];
    uint8_t  qs[SL_QK_K / 2];
} sl_block_iq4_xs;

/* The grid formats (no quantizer here: llama.cpp writes them from an
 * importance matrix). Each picks the magnitudes of 8 (IQ2) or 4 (IQ3)
 * consecutive elements by one grid index, with one sign bit per element;
 * IQ1 picks 8 signed values -1..1 and adds a delta of +-1/8 per group.
 * Sub-block scales are 4-bit (IQ1: 3-bit) s, applied as (2s+1) times a
 * power of two (sl_quant_iq_unpack). */

/* IQ2_XXS: sub-block ib of 32 is two uint32 (qs[4ib..4ib+3] as 16-bit
 * halves): the first's 4 bytes are grid indices of its 4 groups of 8; the
 * second holds 4 sign indices of 7 bits (into sl_quant_iq_ksigns) and the
 * scale in its top 4 bits. x = d*(s+0.5)/4 * grid * sign. */
typedef struct {
    uint16_t d;
    uint16_t qs[SL_QK_K / 8];
} sl_block_iq2_xxs;

/* IQ2_XS: qs[g] for group g of 8: grid index (9 bits) | sign index << 9;
 * scales: a nibble per 16 elements; x = d*(s+0.5)/4 * grid * sign. */
typedef struct {
    uint16_t d;
    uint16_t qs[SL_QK_K / 8];
    uint8_t  scales[SL_QK_K / 32];
} sl_block_iq2_xs;

/* IQ2_S: group g of 8: grid index qs[g] | (2 bits g%4 of qh[g/4]) << 8,
 * signs[g] one bit per element; scales as IQ2_XS. */
typedef struct {
    uint16_t d;
    uint8_t  qs[SL_QK_K / 8];
    uint8_t  signs[SL_QK_K / 8];
    uint8_t  qh[SL_QK_K / 32];
    uint8_t  scales[SL_QK_K / 32];
} sl_block_iq2_s;

/* IQ3_XXS: qs[i] the grid index of elements 4i..4i+3; sub-block ib of 32
 * has the uint32 at scales_signs[4ib]: 4 sign indices of 7 bits (one per
 * 8 elements) and the scale in its top 4 bits; x = d*(s+0.5)/2 * grid * sign. */
typedef struct {
    uint16_t d;
    uint8_t  qs[SL_QK_K / 4];
    uint8_t  scales_signs[SL_QK_K / 8];
} sl_block_iq3_xxs;

/* IQ3_S: grid index of elements 4i..4i+3 is qs[i] | (bit i%8 of qh[i/8])
 * << 8; signs[k] one bit per element of 8k..8k+7; a nibble scale per 32
 * elements; x = d*(2s+1) * grid * sign. */
typedef struct {
    uint16_t d;
    uint8_t  qs[SL_QK_K / 4];
    uint8_t  qh[SL_QK_K / 32];
    uint8_t  signs[SL_QK_K / 8];
    uint8_t  scales[SL_QK_K / 64];
} sl_block_iq3_s;

/* IQ1_S: sub-block ib of 32 is qs[4ib..4ib+3] (low 8 bits of the grid
 * indices of its 4 groups of 8) and qh[ib]: bits 3l..3l+2 the high 3 bits
 * of group l's index, bits 12-14 the scale s, bit 15 the sign of the
 * sub-block's delta. x = d*(2s+1) * (grid +- 1/8), grid in {-1, 0, 1}. */
typedef struct {
    uint16_t d;
    uint8_t  qs[SL_QK_K / 8];
    uint16_t qh[SL_QK_K / 32];
} sl_block_iq1_s;

/* IQ1_M: group g of 8 has index qs[g] | (bits 0-2 of nibble g%2 of
 * qh[g/2]) << 8 and its own delta sign (bit 3 of that nibble); 16 scales
 * of 3 bits, one per 16 elements, at bits 3j..3j+2 of scales[k/4] (j =
 * k%4); the fp16 d is the top nibbles of scales[0..3] (scales[0] the low
 * one). x = d*(2s+1) * (grid +- 1/8). No separate d field. */
typedef struct {
    uint8_t  qs[SL_QK_K / 8];
    uint8_t  qh[SL_QK_K / 16];
    uint16_t scales[4];
} sl_block_iq1_m;

extern const uint8_t sl_quant_iq2xxs_grid[256][8];
extern const uint8_t sl_quant_iq2xs_grid[512][8];
extern const uint8_t sl_quant_iq2s_grid[1024][8];
extern const uint8_t sl_quant_iq3xxs_grid[256][4];
extern const uint8_t sl_quant_iq3s_grid[512][4];
extern const uint8_t sl_quant_iq_ksigns[128];
extern const int8_t sl_quant_iq1s_grid[2048][8];   /* IQ1_S and IQ1_M: -1, 0, 1 */

/* True for the seven grid formats above. */
bool sl_quant_iq_grid_type(uint32_t type);

/* Block b of a grid-format row as integers: x[k] = d * sc[k / sub] * q[k]
 * with q = +-grid value (IQ1: 8*grid +- 1) and sc = 2s+1 (odd, 1..31); *d
 * is the fp16 scale times the format's power of two (IQ1: 1/8, exact),
 * *sub 16 or 32. Every product is exact in float32, so this is also the
 * reference dequantization. */
void sl_quant_iq_unpack(uint32_t type, const void *row, int64_t b, float *d /* OUT */, int *sub /* OUT */,
                        int sc[16] /* OUT */, int16_t q[256] /* OUT */);

/* The ternary formats (quant_ternary.c): one fp16 d per 256 elements,
 * x = d * (t - 1) with t in 0..2.
 * TQ2_0: element 128h + 32j + m is bits 2j..2j+1 of qs[32h + m].
 * TQ1_0: five trits per byte of qs, four per byte of qh, each byte holding
 * ceil(v * 256 / 243) for v = the trits as a base-3 number (first trit the
 * most significant); trit j of byte b is ((uint8_t)(b * 3^j) * 3) >> 8.
 * Element 32j + m is trit j of qs[m] (m < 32), 160 + 16j + m trit j of
 * qs[32 + m] (m < 16), 240 + 4j + m trit j of qh[m]. */
typedef struct {
    uint8_t  qs[(SL_QK_K - 4 * SL_QK_K / 64) / 5];   /* 48 */
    uint8_t  qh[SL_QK_K / 64];
    uint16_t d;
} sl_block_tq1_0;

typedef struct {
    uint8_t  qs[SL_QK_K / 4];
    uint16_t d;
} sl_block_tq2_0;

/* True for TQ1_0 and TQ2_0. */
bool sl_quant_tq_type(uint32_t type);

/* Block b of a ternary row as sl_quant_iq_unpack gives a grid block:
 * *d the fp16 scale, *sub 256 with sc[0] = 1, q = t - 1 in -1..1. */
void sl_quant_tq_unpack(uint32_t type, const void *row, int64_t b, float *d /* OUT */, int *sub /* OUT */,
                        int sc[16] /* OUT */, int16_t q[256] /* OUT */);

/* Encodes nb*256 floats into nb ternary blocks as the gguf package's
 * quantizer does, byte for byte: d = max |x| (float, stored as fp16),
 * t = 1 + round-half-away(x / d) from the float reciprocal of d. */
void sl_quant_tq_quantize(uint32_t type, const float *src, void *dst /* OUT */, int64_t nb);

/* The 16 non-linear levels of IQ4_NL / IQ4_XS (a fact of the format). */
extern const int8_t sl_quant_iq4_values[16];

/* Signed 6-bit scale of sub-block s (0..15) of a Q3_K block: -32..31. */
static inline int sl_quant_q3_K_scale(const uint8_t scales[12], int s)
{
    int lo = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4;
    int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Signed 6-bit scale of sub-block s (0..7) of an IQ4_XS block: -32..31. */
static inline int sl_quant_iq4_xs_scale(const sl_block_iq4_xs *b, int s)
{
    int lo = (b->scales_l[s / 2] >> (4 * (s % 2))) & 0xF;
    int hi = (b->scales_h >> (2 * s)) & 3;
    return (lo | (hi << 4)) - 32;
}

/* True for the types of this header (Q2_K, Q3_K, IQ4_XS, the grid and
 * the ternary formats). */
bool sl_quant_klow_type(uint32_t type);

/* Decodes nb blocks of `type` (a sl_quant_klow_type) into dst (256*nb
 * floats), in the gguf package's operation order: bit-identical to it. */
void sl_quant_klow_dequantize(uint32_t type, const void *src, float *dst /* OUT */, int64_t nb);

/* Encodes nb*256 floats into nb blocks of `type` (Q2_K, Q3_K, IQ4_XS, and
 * the ternary formats through sl_quant_tq_quantize; the caller refuses the
 * grid formats): per sub-block scale (and min) search
 * with least-squares refits, then the scale codes searched against the
 * values under an fp16 super-scale. */
void sl_quant_klow_quantize(uint32_t type, const float *src, void *dst /* OUT */, int64_t nb);

#endif
