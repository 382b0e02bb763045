/* kernels/cuda/random_blocks.cuh: rows of random blocks of a quantized
 * format, for checking the CUDA decoders on formats model/quant.c may not
 * quantize: every quant bit random, every fp16 scale or min a random finite
 * value between 2^-5 and 2^2 in magnitude (random bytes there could be NaN).
 * Where: decode_test.cu (host check) and selftest.cu (the GPU self-test's
 * host side). Header-only, host code.
 * Trade-off: random bits cover every code of every field, which quantizing
 * smooth data does not, but they are not what a quantizer writes (a Q4_1
 * min need not be the block's minimum); the checks compare decoders, so
 * any bits do. */
#ifndef SL_CUDA_RANDOM_BLOCKS_CUH
#define SL_CUDA_RANDOM_BLOCKS_CUH

#include <stdint.h>
#include <string.h>

#include "kernels/cuda/matmul_unit.cuh"

/* splitmix64, as tests/seeded.h (the library, where selftest.cu lives, does
 * not include tests/) */
static inline uint64_t sl_random_blocks_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Byte offsets of the fp16 fields of one block of `type` into off[0..1];
 * returns how many (0 for a type without fp16 fields listed here). */
static inline int sl_random_blocks_fp16_fields(uint32_t type, int off[2])
{
    switch (type) {
    case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q8_0: case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_IQ4_NL:
    case SL_GGML_TYPE_IQ4_XS:
        off[0] = 0;
        return 1;
    case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_Q8_1:
        off[0] = 0;
        off[1] = 2;
        return 2;
    case SL_GGML_TYPE_Q2_K:
        off[0] = 80;
        off[1] = 82;
        return 2;
    case SL_GGML_TYPE_Q3_K:
        off[0] = 108;
        return 1;
    case SL_GGML_TYPE_Q6_K:
        off[0] = 208;
        return 1;
    case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K:
        off[0] = 0;
        off[1] = 2;
        return 2;
    default:
        return 0;
    }
}

/* A random finite fp16: random sign, exponent 2^-5 .. 2^2, random mantissa. */
static inline uint16_t sl_random_blocks_fp16(uint64_t *seed)
{
    uint64_t r = sl_random_blocks_next(seed);
    uint16_t sign = (uint16_t)((r >> 20) & 1), exp = (uint16_t)(10 + (r >> 21) % 8), mant = (uint16_t)(r & 0x3FF);
    return (uint16_t)(sign << 15 | exp << 10 | mant);
}

/* Fills one row of n elements (rb bytes) of `type` with random blocks.
 * Returns false for a type with no fp16 fields listed (float types).
 * MXFP4 has none: its E8M0 byte is drawn from 122..129 instead. */
static inline bool sl_random_blocks_row(uint32_t type, uint8_t *row, size_t rb, int64_t n, uint64_t *seed)
{
    int off[2], nf = sl_random_blocks_fp16_fields(type, off);
    uint32_t be = sl_ggml_block_elems(type), bb = sl_ggml_block_bytes(type);
    bool mx = type == SL_GGML_TYPE_MXFP4;   /* its scale: one E8M0 byte, no fp16 */
    if ((nf == 0 && !mx) || be == 0 || n % be != 0 || rb != (size_t)(n / be) * bb)
        return false;
    for (size_t i = 0; i < rb; i++)
        row[i] = (uint8_t)(sl_random_blocks_next(seed) >> 56);
    for (int64_t b = 0; b < n / be; b++)
        for (int f = 0; f < nf; f++) {
            uint16_t h = sl_random_blocks_fp16(seed);
            memcpy(row + (size_t)b * bb + off[f], &h, sizeof h);
        }
    for (int64_t b = 0; mx && b < n / be; b++)   /* 2^-6 .. 2^1 once halved, as the fp16 fields' range */
        row[(size_t)b * bb] = (uint8_t)(122 + sl_random_blocks_next(seed) % 8);
    return true;
}

#endif
