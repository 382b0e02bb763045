/* tests/seeded_blocks.h: seeded random rows of the GGUF grid formats
 * (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), which sluice reads
 * but has no quantizer for, and of the ternary TQ1_0/TQ2_0 (every byte
 * pattern, not only the quantizer's). Every bit pattern of their indices,
 * signs and scales is a valid block, so a row is random bytes with each
 * block's fp16 d set to a random, moderate scale; the edge rows add blocks
 * of extreme d (zeros of both signs, subnormals, the largest finite) over
 * all-zero, all-one and alternating bytes.
 * Where: unit tests and tools/quantdump. Header-only. */
#ifndef SL_TEST_SEEDED_BLOCKS_H
#define SL_TEST_SEEDED_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant.h"
#include "tests/seeded.h"

/* Writes the fp16 scale h into a block of `type`: the first two bytes in
 * most formats, the last two in TQ1_0/TQ2_0, and IQ1_M's four top nibbles
 * of its scales (bytes 48-55). */
static inline void sl_seeded_block_set_d(uint32_t type, uint8_t *block, uint16_t h)
{
    size_t bb = sl_ggml_block_bytes(type);
    if (type == SL_GGML_TYPE_IQ1_M) {
        for (int k = 0; k < 4; k++) {
            uint8_t *hi = block + 48 + 2 * k + 1;   /* bits 12-15 of little-endian uint16 k */
            *hi = (uint8_t)((*hi & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
        }
    } else if (type == SL_GGML_TYPE_TQ1_0 || type == SL_GGML_TYPE_TQ2_0) {
        memcpy(block + bb - 2, &h, 2);
    } else {
        memcpy(block, &h, 2);
    }
}

/* Fills dst with the n elements (a multiple of 256) of a `type` row. */
static inline void sl_seeded_grid_row(uint32_t type, void *dst, int64_t n, uint64_t seed)
{
    size_t bytes = sl_ggml_row_bytes(type, (uint64_t)n), bb = sl_ggml_block_bytes(type);
    uint8_t *p = dst;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)(sl_seeded_next(&seed) >> 56);
    for (size_t at = 0; at < bytes; at += bb) {
        /* 2^-10 .. 2^-6 with a random sign: weights of order 0.01-1 */
        float d = ldexpf(1.0f + 0.5f * sl_seeded_uniform_pm1(&seed), -8 + (int)(sl_seeded_next(&seed) % 5) - 2);
        if (sl_seeded_next(&seed) & 1)
            d = -d;
        sl_seeded_block_set_d(type, p + at, sl_fp32_to_fp16(d));
    }
}

/* The edge blocks: SL_SEEDED_EDGE_D scales times SL_SEEDED_EDGE_BYTES
 * byte patterns (the last pattern random). */
enum { SL_SEEDED_EDGE_D = 9, SL_SEEDED_EDGE_BYTES = 5 };

/* Fills dst with n elements (a multiple of 256, at least 45 blocks for all
 * edge blocks) of a `type` row: the edge blocks first, then seeded random
 * blocks as sl_seeded_grid_row writes them. */
static inline void sl_seeded_edge_row(uint32_t type, void *dst, int64_t n, uint64_t seed)
{
    static const uint16_t d[SL_SEEDED_EDGE_D] = {
        0x0000, 0x8000,   /* +0, -0: products of zero keep d's sign */
        0x0001, 0x03FF,   /* the smallest and largest subnormal */
        0x0400, 0x7BFF, 0xFBFF,   /* the smallest normal, +-the largest finite */
        0x3C00, 0xBC00,   /* +-1 */
    };
    static const int fill[SL_SEEDED_EDGE_BYTES - 1] = {0x00, 0xFF, 0xAA, 0x55};
    size_t bb = sl_ggml_block_bytes(type);
    int64_t nb = n / 256;
    uint8_t *p = dst;
    sl_seeded_grid_row(type, dst, n, seed);
    for (int64_t b = 0; b < nb && b < SL_SEEDED_EDGE_D * SL_SEEDED_EDGE_BYTES; b++) {
        int pattern = (int)(b % SL_SEEDED_EDGE_BYTES);
        if (pattern < SL_SEEDED_EDGE_BYTES - 1)
            memset(p + b * bb, fill[pattern], bb);
        sl_seeded_block_set_d(type, p + b * bb, d[b / SL_SEEDED_EDGE_BYTES]);
    }
}

#endif
