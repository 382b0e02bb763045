/* model/half.c: the half (IEEE binary16) and bfloat16 scalar conversions
 * declared in model/quant.h. Runs wherever weights are read or written.
 * A file of its own so that every block-format file (quant.c,
 * quant_legacy.c) can use them without the two calling each other. */
#include <stdint.h>
#include <string.h>

#include "model/quant.h"

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float sl_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in float32 */
        float v = (float)mant * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t sl_fp32_to_fp16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u)             /* NaN: keep the top payload, force quiet */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u)            /* >= 65520 rounds (ties to even) to inf */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) {           /* below 2^-14: a half subnormal or zero */
        uint32_t e = a >> 23;
        if (e < 102)                 /* below 2^-25: rounds to zero */
            return sign;
        uint32_t m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;    /* value = m * 2^(e-150) = (m >> shift) * 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;                     /* may carry into the smallest normal: correct */
        return (uint16_t)(sign | r);
    }
    uint32_t h = (a >> 13) - (112u << 10);
    uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;                         /* a carry into the exponent is still right */
    return (uint16_t)(sign | h);
}

float sl_bf16_to_fp32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t sl_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);  /* quiet NaN, as ggml does */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
