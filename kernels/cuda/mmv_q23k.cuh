/* kernels/cuda/mmv_q23k.cuh: one lane's share of a 32-element run of a
 * Q2_K or Q3_K super-block in the small-batch kernel (mmv.cu): lane hf
 * (0, 1) of the run's lane pair takes its elements 16hf..16hf+15, the
 * 16-element sub-block with one scale (and, for Q2_K, one min), and turns
 * their 2-bit codes (Q3_K: with the hmask bit) into 16 exact floats.
 * Run j of a super-block: elements 32j..32j+31; its codes are bits
 * 2(j%4)..2(j%4)+1 of bytes 32(j/4) + l of qs, Q3_K's high bits bit j of
 * hmask[l] (see matmul_unit.cuh).
 * Where: mmv.cu (device) and decode_test.cu (host: the lane values times
 * the scale, minus the min, against decode_unit bit for bit). */
#ifndef SL_CUDA_MMV_Q23K_CUH
#define SL_CUDA_MMV_Q23K_CUH

#include "kernels/cuda/matmul_unit.cuh"
#include "kernels/cuda/mmv_nib.cuh"

/* A lane's raw bytes of one run: 16 code bytes, Q3_K's 16 hmask bytes,
 * the fp16 d (and Q2_K's dmin) and the sub-block's scale byte */
struct raw_q23k {
    uint32_t q[4], h[4];
    uint16_t d, dmin;
    int sc;   /* Q2_K: scale | min << 4; Q3_K: the signed 6-bit scale */
};

template <int TYPE>
static SL_HD raw_q23k load_q23k(const uint8_t *row, int run, int lane)
{
    constexpr bool Q3 = TYPE == SL_GGML_TYPE_Q3_K;
    constexpr int BB = Q3 ? SL_BB_Q3_K : SL_BB_Q2_K;
    int j = run & 7, hf = lane & 1;
    const uint8_t *b = row + (size_t)(run >> 3) * BB;
    const uint8_t *qs = b + (Q3 ? 32 : 16) + 32 * (j / 4) + 16 * hf;
    raw_q23k r;
SL_UNROLL
    for (int k = 0; k < 4; k++) {
        /* Q2_K blocks (84 bytes) keep 4-byte alignment, Q3_K blocks (110) only 2 */
        r.q[k] = nib_load_u32<!Q3>(qs + 4 * k);
        r.h[k] = Q3 ? nib_load_u32<false>(b + 16 * hf + 4 * k) : 0;
    }
    if constexpr (Q3) {
        r.d = sl_dev_u16(b + 108);
        r.dmin = 0;
        r.sc = sl_dev_scale_q3_k(b + 96, 2 * j + hf);
    } else {
        r.d = sl_dev_u16(b + 80);
        r.dmin = sl_dev_u16(b + 82);
        r.sc = b[2 * j + hf];
    }
    return r;
}

/* q[0..15] = the codes of elements 16hf..16hf+15 of run `run` (Q2_K 0..3,
 * Q3_K -4..3) */
template <int TYPE>
static SL_HD void q23k_values(const raw_q23k &rw, int run, float (&q)[16])
{
    int j = run & 7, shift = 2 * (j % 4);
SL_UNROLL
    for (int k = 0; k < 4; k++) {
        uint32_t v = (rw.q[k] >> shift) & 0x03030303u;
        if constexpr (TYPE == SL_GGML_TYPE_Q3_K)
            v |= ((rw.h[k] >> j) & 0x01010101u) << 2;   /* code + 4: high bit set adds 4 */
SL_UNROLL
        for (int i = 0; i < 4; i++)
            q[4 * k + i] = nib_byte_float(v, i) - (TYPE == SL_GGML_TYPE_Q3_K ? 4.0f : 0.0f);   /* exact */
    }
}

/* The sub-block's scale d*sc and (Q2_K) min dmin*m, rounded as the host
 * dequantizer rounds them */
template <int TYPE>
static SL_HD float q23k_scale(const raw_q23k &rw)
{
    if constexpr (TYPE == SL_GGML_TYPE_Q3_K)
        return sl_dev_mul(sl_dev_fp16(rw.d), (float)rw.sc);
    else
        return sl_dev_mul(sl_dev_fp16(rw.d), (float)(rw.sc & 0xF));
}

template <int TYPE>
static SL_HD float q23k_min(const raw_q23k &rw)
{
    return TYPE == SL_GGML_TYPE_Q2_K ? sl_dev_mul(sl_dev_fp16(rw.dmin), (float)(rw.sc >> 4)) : 0.0f;
}

#endif
