/* tests/seeded_blocks.h: seeded random rows of the GGUF grid formats
 * (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), which sluice reads but has no
 * quantizer for. Every bit pattern of their indices, signs and scales is a
 * valid block, so a row is random bytes with each block's fp16 d (its
 * first two bytes in all five formats) set to a random, moderate scale.
 * Where: unit tests and tools/quantdump. Header-only. */
#ifndef SL_TEST_SEEDED_BLOCKS_H
#define SL_TEST_SEEDED_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant.h"
#include "tests/seeded.h"

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
        uint16_t h = sl_fp32_to_fp16(d);
        memcpy(p + at, &h, 2);
    }
}

#endif
