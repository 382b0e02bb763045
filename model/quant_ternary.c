/* model/quant_ternary.c: the ternary GGUF formats TQ2_0 and TQ1_0
 * (layouts in quant_klow.h): unpacking a block to its integers, and the
 * quantizer.
 * Runs in mkmodel and tools/quantdump (quantize), the GGUF loader's checks,
 * tests and the CPU dot kernels (unpack); quant_klow.c dispatches here.
 * Trade-off: the quantizer is the format's own rule (scale = max |x|, every
 * weight to the nearest of -d, 0, d), byte for byte what the gguf package
 * writes, not a search for a lower-error scale: these formats exist for
 * models trained ternary, whose weights already sit on the three levels;
 * on Gaussian weights the error is large whatever the scale. */
#include <math.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant_klow.h"

_Static_assert(sizeof(sl_block_tq1_0) == 54, "TQ1_0 block is 54 bytes");
_Static_assert(sizeof(sl_block_tq2_0) == 66, "TQ2_0 block is 66 bytes");

bool sl_quant_tq_type(uint32_t type)
{
    return type == SL_GGML_TYPE_TQ1_0 || type == SL_GGML_TYPE_TQ2_0;
}

/* ---- TQ1_0's base-3 bytes ------------------------------------------------
 * A byte holds n trits (5 in qs, 4 in qh) as v = sum t_j 3^(n-1-j), stored
 * as ceil(v * 256 / 243): the trits become the leading base-3 digits of a
 * fraction of 256, so multiplying by 3^j (mod 256) shifts trit j to the
 * top, and * 3 >> 8 reads it. */

static const uint8_t pow3[5] = {1, 3, 9, 27, 81};

static inline int trit(uint8_t byte, int j)
{
    return ((unsigned)(uint8_t)(byte * pow3[j]) * 3u) >> 8;
}

/* The byte of n trits t[0], t[stride], ... (t[0] the most significant). */
static inline uint8_t pack_trits(const uint8_t *t, int stride, int n)
{
    unsigned v = 0;
    for (int j = 0; j < n; j++)
        v += t[j * stride] * (unsigned)pow3[4 - j];   /* 81, 27, ...: qh's 4 trits leave 3^0 empty */
    return (uint8_t)((v * 256u + 242u) / 243u);
}

void sl_quant_tq_unpack(uint32_t type, const void *row, int64_t b, float *d, int *sub, int sc[16], int16_t q[256])
{
    *sub = SL_QK_K;
    sc[0] = 1;
    if (type == SL_GGML_TYPE_TQ2_0) {
        const sl_block_tq2_0 *x = (const sl_block_tq2_0 *)row + b;
        *d = sl_fp16_to_fp32(x->d);
        for (int k = 0; k < SL_QK_K; k++)
            q[k] = (int16_t)(((x->qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3) - 1);
        return;
    }
    const sl_block_tq1_0 *x = (const sl_block_tq1_0 *)row + b;
    *d = sl_fp16_to_fp32(x->d);
    for (int j = 0; j < 5; j++)
        for (int m = 0; m < 32; m++)
            q[32 * j + m] = (int16_t)(trit(x->qs[m], j) - 1);
    for (int j = 0; j < 5; j++)
        for (int m = 0; m < 16; m++)
            q[160 + 16 * j + m] = (int16_t)(trit(x->qs[32 + m], j) - 1);
    for (int j = 0; j < 4; j++)
        for (int m = 0; m < 4; m++)
            q[240 + 4 * j + m] = (int16_t)(trit(x->qh[m], j) - 1);
}

/* t = 1 + round-half-away(v), for |v| <= ~1 (v = x / max|x|); NaN gives 1. */
static inline uint8_t ternary(float v)
{
    if (v >= 0.5f)
        return 2;
    if (v <= -0.5f)
        return 0;
    return 1;
}

void sl_quant_tq_quantize(uint32_t type, const float *src, void *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, src += SL_QK_K) {
        float amax = 0.0f;
        for (int k = 0; k < SL_QK_K; k++)
            amax = fmaxf(amax, fabsf(src[k]));
        float id = amax != 0.0f ? 1.0f / amax : 0.0f;
        uint8_t t[SL_QK_K];
        for (int k = 0; k < SL_QK_K; k++)
            t[k] = ternary(src[k] * id);
        uint16_t hd = sl_fp32_to_fp16(amax);
        if (type == SL_GGML_TYPE_TQ2_0) {
            sl_block_tq2_0 *y = (sl_block_tq2_0 *)dst + i;
            memset(y->qs, 0, sizeof y->qs);
            for (int k = 0; k < SL_QK_K; k++)
                y->qs[32 * (k / 128) + k % 32] |= (uint8_t)(t[k] << (2 * ((k % 128) / 32)));
            y->d = hd;
        } else {
            sl_block_tq1_0 *y = (sl_block_tq1_0 *)dst + i;
            for (int m = 0; m < 32; m++)
                y->qs[m] = pack_trits(t + m, 32, 5);
            for (int m = 0; m < 16; m++)
                y->qs[32 + m] = pack_trits(t + 160 + m, 16, 5);
            for (int m = 0; m < 4; m++)
                y->qh[m] = pack_trits(t + 240 + m, 4, 4);
            y->d = hd;
        }
    }
}
