/* kernels/cuda/mmv_nib.cuh: one lane's share of a block of a 32-element
 * nibble format (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: d, [m], [qh], qs[16];
 * MXFP4: an E8M0 byte, qs[16], its doubled E2M1 values as a grid; and
 * the 32-element sub-blocks of IQ4_XS, whose scale is d times the
 * sub-block's 6-bit scale) in the small-batch kernel (mmv.cu): lane hf
 * (0, 1) of the block's lane pair
 * loads bytes 8hf..8hf+7 of qs, i.e. elements 8hf..8hf+7 (low nibbles) and
 * 16+8hf..16+8hf+7 (high nibbles), and turns them into 16 exact floats.
 * Where: mmv.cu (device) and decode_test.cu (host: the lane values times d,
 * plus m, against decode_unit bit for bit).
 * Trade-off: whole 32-bit words and byte permutes instead of a loop over
 * nibbles; on the host, __byte_perm and the float trick are emulated. */
#ifndef SL_CUDA_MMV_NIB_CUH
#define SL_CUDA_MMV_NIB_CUH

#include "kernels/cuda/common.cuh"

template <int TYPE>
struct nib_fmt {
    static constexpr bool M = TYPE == SL_GGML_TYPE_Q4_1 || TYPE == SL_GGML_TYPE_Q5_1;   /* + m */
    static constexpr bool H = TYPE == SL_GGML_TYPE_Q5_0 || TYPE == SL_GGML_TYPE_Q5_1;   /* 5-bit: qh */
    static constexpr bool MX = TYPE == SL_GGML_TYPE_MXFP4;   /* a 1-byte E8M0 scale, not an fp16 d */
    static constexpr int BB = (MX ? 1 : 2) + (M ? 2 : 0) + (H ? 4 : 0) + 16, QS = BB - 16;
    static constexpr bool A4 = BB % 4 == 0;   /* Q4_1, Q5_1: every field 4-byte aligned */
    static constexpr int BIAS = TYPE == SL_GGML_TYPE_Q4_0 ? 8 : TYPE == SL_GGML_TYPE_Q5_0 ? 16 : 0;
};
static_assert(nib_fmt<SL_GGML_TYPE_Q4_0>::BB == 18 && nib_fmt<SL_GGML_TYPE_Q4_1>::BB == 20 &&
                  nib_fmt<SL_GGML_TYPE_Q5_0>::BB == 22 && nib_fmt<SL_GGML_TYPE_Q5_1>::BB == 24 &&
                  nib_fmt<SL_GGML_TYPE_IQ4_NL>::BB == 18 && nib_fmt<SL_GGML_TYPE_MXFP4>::BB == 17,
              "nibble block layouts");

template <int TYPE>
static constexpr bool is_nib = TYPE == SL_GGML_TYPE_Q4_0 || TYPE == SL_GGML_TYPE_Q4_1 || TYPE == SL_GGML_TYPE_Q5_0 ||
                               TYPE == SL_GGML_TYPE_Q5_1 || TYPE == SL_GGML_TYPE_IQ4_NL || TYPE == SL_GGML_TYPE_IQ4_XS ||
                               TYPE == SL_GGML_TYPE_MXFP4;

/* A lane's raw bytes of one block: the loads, issued ahead of the use
 * (IQ4_XS: m holds the sub-block's scale, -32..31; MXFP4: d its E8M0 byte) */
struct raw_nib {
    uint32_t w0, w1, qh;
    uint16_t d, m;
};

template <bool A4>
static SL_HD uint32_t nib_load_u32(const uint8_t *p)
{
    if constexpr (A4) {
        return *(const uint32_t *)p;
    } else {
        const uint16_t *h = (const uint16_t *)p;   /* 2-byte aligned */
        return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
    }
}

template <int TYPE>
static SL_HD raw_nib load_nib(const uint8_t *row, int blk, int lane)
{
    if constexpr (TYPE == SL_GGML_TYPE_IQ4_XS) {
        /* blk: sub-block blk % 8 of super-block blk / 8 (136 bytes: every qs run 8-byte aligned) */
        const uint8_t *b = row + (size_t)(blk >> 3) * 136, *q = b + 8 + 16 * (blk & 7) + 8 * (lane & 1);
        raw_nib r;
        r.d = sl_dev_u16(b);
        r.m = (uint16_t)(int16_t)sl_dev_scale_iq4_xs(b, blk & 7);
        r.w0 = nib_load_u32<true>(q);
        r.w1 = nib_load_u32<true>(q + 4);
        r.qh = 0;
        return r;
    } else if constexpr (TYPE == SL_GGML_TYPE_MXFP4) {
        /* 17-byte blocks: every field 1-byte aligned, so byte loads */
        const uint8_t *b = row + (size_t)blk * nib_fmt<TYPE>::BB, *q = b + 1 + 8 * (lane & 1);
        raw_nib r;
        r.d = b[0];
        r.m = 0;
        r.w0 = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        r.w1 = (uint32_t)q[4] | (uint32_t)q[5] << 8 | (uint32_t)q[6] << 16 | (uint32_t)q[7] << 24;
        r.qh = 0;
        return r;
    } else {
        using F = nib_fmt<TYPE>;
        const uint8_t *b = row + (size_t)blk * F::BB, *q = b + F::QS + 8 * (lane & 1);
        raw_nib r;
        r.d = sl_dev_u16(b);
        r.m = F::M ? sl_dev_u16(b + 2) : 0;
        r.w0 = nib_load_u32<F::A4>(q);
        r.w1 = nib_load_u32<F::A4>(q + 4);
        r.qh = F::H ? nib_load_u32<F::A4>(b + (F::M ? 4 : 2)) : 0;
        return r;
    }
}

/* __byte_perm with selector nibbles 0-7 (bytes 0-3 from x, 4-7 from y) */
static SL_HD uint32_t nib_byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
#endif
}

/* byte `sel` of w (0-255) as a float: on the device the float 2^23 + q,
 * minus 2^23 (one permute and one add, exact) */
static SL_HD float nib_byte_float(uint32_t w, int sel)
{
#ifdef __CUDA_ARCH__
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7650 | sel)) - 8388608.0f;
#else
    return (float)((w >> (8 * sel)) & 0xFF);
#endif
}

/* bits 0-3 of v to bit 0 of bytes 0-3 */
static SL_HD uint32_t spread4(uint32_t v)
{
    return (v & 1u) | ((v & 2u) << 7) | ((v & 4u) << 14) | ((v & 8u) << 21);
}

/* Four grid values (as int8 bytes) for the four indices 0-15 held in the
 * bytes of idx: a byte permute over each half of the packed grid, then a
 * per-byte select on bit 3 of the index. LO, HI: the IQ4_NL grid, or
 * MXFP4's doubled E2M1 values. */
template <uint64_t LO, uint64_t HI>
static SL_HD uint32_t grid_bytes(uint32_t idx)
{
    uint32_t sel = (idx & 7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) | ((idx >> 12) & 0x7000u);
    uint32_t lo = nib_byte_perm((uint32_t)LO, (uint32_t)(LO >> 32), sel);
    uint32_t hi = nib_byte_perm((uint32_t)HI, (uint32_t)(HI >> 32), sel);
    uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (lo & ~m) | (hi & m);
}

static SL_HD uint32_t iq4nl_bytes(uint32_t idx)
{
    return grid_bytes<SL_IQ4NL_LO, SL_IQ4NL_HI>(idx);
}

/* q[0..7] = the codes of elements 8hf..8hf+7, q[8..15] of 16+8hf..16+8hf+7
 * (the signed value d multiplies: nibble - 8 for Q4_0, 5-bit code - 16 for
 * Q5_0, the grid value for IQ4_NL, the code for Q4_1/Q5_1). */
template <int TYPE>
static SL_HD void nib_values(const raw_nib &rw, int hf, float (&q)[16])
{
    using F = nib_fmt<TYPE>;
    uint32_t v[4] = {rw.w0 & 0x0F0F0F0Fu, rw.w1 & 0x0F0F0F0Fu, (rw.w0 >> 4) & 0x0F0F0F0Fu,
                     (rw.w1 >> 4) & 0x0F0F0F0Fu};
    if constexpr (F::H) {
        /* bit k of qh is bit 4 of element k */
        uint32_t hl = rw.qh >> (8 * hf), hh = rw.qh >> (16 + 8 * hf);
        v[0] |= spread4(hl) << 4;
        v[1] |= spread4(hl >> 4) << 4;
        v[2] |= spread4(hh) << 4;
        v[3] |= spread4(hh >> 4) << 4;
    }
SL_UNROLL
    for (int w4 = 0; w4 < 4; w4++) {
        if constexpr (TYPE == SL_GGML_TYPE_IQ4_NL || TYPE == SL_GGML_TYPE_IQ4_XS || TYPE == SL_GGML_TYPE_MXFP4) {
            uint32_t g = (TYPE == SL_GGML_TYPE_MXFP4 ? grid_bytes<SL_MXFP4_LO, SL_MXFP4_HI>(v[w4])
                                                     : iq4nl_bytes(v[w4])) ^ 0x80808080u;   /* int8 -> value + 128 */
SL_UNROLL
            for (int j = 0; j < 4; j++)
                q[4 * w4 + j] = nib_byte_float(g, j) - 128.0f;
        } else {
SL_UNROLL
            for (int j = 0; j < 4; j++)
                q[4 * w4 + j] = nib_byte_float(v[w4], j) - (float)F::BIAS;   /* exact: small integers */
        }
    }
}

/* The float d multiplies the codes by: the fp16 d, times the sub-block's
 * scale for IQ4_XS (rounded as the host dequantizer rounds it) */
template <int TYPE>
static SL_HD float nib_scale(const raw_nib &rw)
{
    if constexpr (TYPE == SL_GGML_TYPE_IQ4_XS)
        return sl_dev_mul(sl_dev_fp16(rw.d), (float)(int16_t)rw.m);
    else if constexpr (TYPE == SL_GGML_TYPE_MXFP4)
        return sl_dev_e8m0_half((uint8_t)rw.d);
    else
        return sl_dev_fp16(rw.d);
}

#endif
