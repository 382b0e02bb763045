/* kernels/cpu/vec_dot_legacy.c: the portable unpacking of the 32-element
 * weight blocks other than Q8_0/Q4_0 (Q5_0, Q4_1, Q5_1, Q8_1, IQ4_NL, MXFP4) into
 * sl_qblock (vec_dot_int.h), which the portable float, 8-bit and 16-bit
 * dots (vec_dot.c, vec_dot_q8.c, vec_dot_q16.c) share. Runs in the CPU
 * backend's threads; pure. Block layouts: model/quant.h. */
#include <assert.h>
#include <string.h>

#include "kernels/cpu/vec_dot_int.h"
#include "model/ggml_types.h"
#include "model/quant.h"

enum { QK = SL_QK_LEGACY };

/* The 32 codes of Q4_0-packed nibbles qs, plus 16 * bit l of qh (qh NULL: none). */
static void nibbles(const uint8_t *qs, const uint8_t *qh, int *q)
{
    uint32_t h = 0;
    if (qh)
        memcpy(&h, qh, 4);   /* little-endian hosts only, as model/quant.h says */
    for (int l = 0; l < QK / 2; l++) {
        q[l] = (qs[l] & 0xF) | (int)(((h >> l) & 1) << 4);
        q[l + QK / 2] = (qs[l] >> 4) | (int)(((h >> (l + QK / 2)) & 1) << 4);
    }
}

void sl_vec_dot_unpack_legacy(uint32_t type, const void *w, int64_t b, sl_qblock *u)
{
    u->n = u->sub = QK;
    u->sc[0] = 1;
    u->dmin = 0.0f;
    u->m = 0.0f;
    switch (type) {
    case SL_GGML_TYPE_Q5_0: {
        const sl_block_q5_0 *blk = (const sl_block_q5_0 *)w + b;
        u->d = sl_fp16_to_fp32(blk->d);
        nibbles(blk->qs, blk->qh, u->q);
        for (int l = 0; l < QK; l++)
            u->q[l] -= 16;
        break;
    }
    case SL_GGML_TYPE_Q4_1: {
        const sl_block_q4_1 *blk = (const sl_block_q4_1 *)w + b;
        u->d = sl_fp16_to_fp32(blk->d);
        u->m = sl_fp16_to_fp32(blk->m);
        nibbles(blk->qs, NULL, u->q);
        break;
    }
    case SL_GGML_TYPE_Q5_1: {
        const sl_block_q5_1 *blk = (const sl_block_q5_1 *)w + b;
        u->d = sl_fp16_to_fp32(blk->d);
        u->m = sl_fp16_to_fp32(blk->m);
        nibbles(blk->qs, blk->qh, u->q);
        break;
    }
    case SL_GGML_TYPE_Q8_1: {
        const sl_block_q8_1 *blk = (const sl_block_q8_1 *)w + b;
        u->d = sl_fp16_to_fp32(blk->d);
        for (int l = 0; l < QK; l++)
            u->q[l] = blk->qs[l];
        break;
    }
    case SL_GGML_TYPE_IQ4_NL: {
        const sl_block_iq4_nl *blk = (const sl_block_iq4_nl *)w + b;
        u->d = sl_fp16_to_fp32(blk->d);
        nibbles(blk->qs, NULL, u->q);
        for (int l = 0; l < QK; l++)
            u->q[l] = sl_iq4nl_values[u->q[l]];
        break;
    }
    case SL_GGML_TYPE_MXFP4: {
        const sl_block_mxfp4 *blk = (const sl_block_mxfp4 *)w + b;
        u->d = sl_e8m0_half(blk->e);
        nibbles(blk->qs, NULL, u->q);
        for (int l = 0; l < QK; l++)
            u->q[l] = sl_mxfp4_values[u->q[l]];
        break;
    }
    default:
        assert(!"vec_dot_legacy: not a legacy 32-element type");
    }
}
