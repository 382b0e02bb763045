/* kernels/cuda/mmvq_dot.cuh: the per-type integer dot products of the
 * small-batch matmul on 8-bit activations (mmvq.cu): one warp per weight
 * row as mmv_dot.cuh, with the same lane layout and the same wide loads of
 * the weights (its raw_* loaders are reused), but the arithmetic in int8
 * dot products (__dp4a: four multiply-adds an instruction) on activations
 * quantized once per matmul input, as the CPU backend's default does.
 * Where: included by mmvq.cu only (static device code).
 * Activation rows (q8_rows): row t at base + t * ld bytes, holding
 *   int8 q[n] | float d[n / 32] | int16 bsums[n / 16]
 * Q8_K rows (Q4_K, Q5_K, Q6_K weights) use d[0 .. n/256) and bsums (the
 * sum of each 16 codes); Q8_0 rows (Q8_0 weights) d[0 .. n/32), the
 * fp16-rounded block scale as a float; the codes are those of
 * kernels/cpu/act_quant.c.
 * Sums: each lane's integer sum per step is exact; the float part of a step
 * is one or two fmaf per activation row, in the lane's step order, then the
 * warp's butterfly, so the order is fixed by (type, n) alone. */
#ifndef SL_CUDA_MMVQ_DOT_CUH
#define SL_CUDA_MMVQ_DOT_CUH

#include "kernels/cuda/mmv_dot.cuh"   /* raw_* loads, scale_min_k4, STEP, AHEAD, row_steps, warps_per_row */

/* quantized activation row t of a pass (t >= nt repeats row nt - 1) */
struct q8_rows {
    const uint8_t *base;
    int64_t ld;     /* bytes between rows */
    int n;          /* elements a row */
    __device__ __forceinline__ const uint8_t *row(int t, int nt) const
    {
        return base + (int64_t)(t < nt ? t : nt - 1) * ld;
    }
    __device__ __forceinline__ const float *d(const uint8_t *r) const { return (const float *)(r + n); }
    __device__ __forceinline__ const int16_t *bsums(const uint8_t *r) const
    {
        return (const int16_t *)(r + n + n / 8);
    }
};

/* Q4_K / Q5_K: lane k of 16 holds 8 codes of sub-block 2g and 8 of 2g+1
 * (mmv_dot.cuh's layout). The min term comes from the activation's bsums:
 * lane j (0-3) of the group takes bsums[4g + j], which lies in sub-block
 * 2g + j/2, so the four lanes cover the group's two sub-blocks once. */
template <bool Q5, int NT>
static __device__ __forceinline__ void useq_q45k(const raw_q45k &rw, int sb, int lane, const q8_rows &xr, int nt,
                                                 float (&acc)[NT])
{
    int k = lane & 15, g = k >> 2, j = k & 3, j0 = 8 * j;
    int sca, ma, scb, mb;
    scale_min_k4(rw.s0, rw.s1, rw.s2, 2 * g, sca, ma);
    scale_min_k4(rw.s0, rw.s1, rw.s2, 2 * g + 1, scb, mb);
    int mj = j < 2 ? ma : mb;
    float d = sl_dev_fp16((uint16_t)(rw.dm & 0xFFFF)), dmin = sl_dev_fp16((uint16_t)(rw.dm >> 16));
    uint32_t lo0 = rw.w.x & 0x0F0F0F0Fu, lo1 = rw.w.y & 0x0F0F0F0Fu;
    uint32_t hi0 = (rw.w.x >> 4) & 0x0F0F0F0Fu, hi1 = (rw.w.y >> 4) & 0x0F0F0F0Fu;
    if constexpr (Q5) {
        lo0 |= ((rw.h.x >> (2 * g)) & 0x01010101u) << 4;
        lo1 |= ((rw.h.y >> (2 * g)) & 0x01010101u) << 4;
        hi0 |= ((rw.h.x >> (2 * g + 1)) & 0x01010101u) << 4;
        hi1 |= ((rw.h.y >> (2 * g + 1)) & 0x01010101u) << 4;
    }
    int off = sb * 256 + 64 * g + j0;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const uint8_t *xq = xr.row(t, nt);
        uint2 a = *(const uint2 *)(xq + off), b = *(const uint2 *)(xq + off + 32);
        float da = xr.d(xq)[sb];
        int bs = xr.bsums(xq)[16 * sb + 4 * g + j];
        int sa = __dp4a((int)lo1, (int)a.y, __dp4a((int)lo0, (int)a.x, 0));
        int sbb = __dp4a((int)hi1, (int)b.y, __dp4a((int)hi0, (int)b.x, 0));
        int si = sca * sa + scb * sbb, sm = mj * bs;   /* |si| < 2^21: exact as a float */
        float r = fmaf(d * da, (float)si, acc[t]);
        acc[t] = fmaf(-(dmin * da), (float)sm, r);
    }
}

/* Q6_K: lane k of 16 holds the four runs of 4 codes l0 + 32i of half h
 * (mmv_dot.cuh's layout), each with its sub-block's int8 scale. */
template <int NT>
static __device__ __forceinline__ void useq_q6k(const raw_q6k &rw, int sb, int lane, const q8_rows &xr, int nt,
                                                float (&acc)[NT])
{
    int k = lane & 15, h = k >> 3, l0 = 4 * (k & 7);
    float d = sl_dev_fp16(rw.d);
    int s[4];
    uint32_t v[4];
    v[0] = (rw.qlA & 0x0F0F0F0Fu) | ((rw.qh & 0x03030303u) << 4);
    v[1] = (rw.qlB & 0x0F0F0F0Fu) | (((rw.qh >> 2) & 0x03030303u) << 4);
    v[2] = ((rw.qlA >> 4) & 0x0F0F0F0Fu) | (((rw.qh >> 4) & 0x03030303u) << 4);
    v[3] = ((rw.qlB >> 4) & 0x0F0F0F0Fu) | (((rw.qh >> 6) & 0x03030303u) << 4);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s[i] = (int)(int8_t)((rw.sc >> (8 * i)) & 0xFF);
        v[i] = __vsub4(v[i], 0x20202020u);   /* 0..63 -> -32..31 per byte: no carries between bytes */
    }
    int off = sb * 256 + 128 * h + l0;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const uint8_t *xq = xr.row(t, nt);
        int si = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            si += s[i] * __dp4a((int)v[i], *(const int *)(xq + off + 32 * i), 0);
        acc[t] = fmaf(d * xr.d(xq)[sb], (float)si, acc[t]);
    }
}

/* Q8_0: lane hf (0, 1) of a lane pair holds half of block blk. */
template <int NT>
static __device__ __forceinline__ void useq_q8_0(const raw_q8_0 &rw, int blk, int lane, const q8_rows &xr, int nt,
                                                 float (&acc)[NT])
{
    int hf = lane & 1;
    float dw = sl_dev_fp16(rw.d);
    int off = blk * 32 + 16 * hf;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const uint8_t *xq = xr.row(t, nt);
        int4 a = *(const int4 *)(xq + off);
        int si = __dp4a((int)rw.w[3], a.w, __dp4a((int)rw.w[2], a.z, __dp4a((int)rw.w[1], a.y,
                                                                            __dp4a((int)rw.w[0], a.x, 0))));
        acc[t] = fmaf(dw * xr.d(xq)[blk], (float)si, acc[t]);
    }
}

/* True for the weight types this file computes. */
template <int TYPE>
constexpr bool mmvq_type = TYPE == SL_GGML_TYPE_Q4_K || TYPE == SL_GGML_TYPE_Q5_K || TYPE == SL_GGML_TYPE_Q6_K ||
                           TYPE == SL_GGML_TYPE_Q8_0;

/* acc[t] += row . x[t] for the lane's share of steps [k0, k1) of a row of
 * n elements, as mmv_dot.cuh's row_dot (the same steps, the same AHEAD
 * loads in flight, the steps used in increasing order). */
template <int TYPE, int NT>
static __device__ __forceinline__ void row_dotq(const uint8_t *row, int n, int k0, int k1, int lane,
                                                const q8_rows &xr, int nt, float (&acc)[NT])
{
    static_assert(mmvq_type<TYPE>, "mmvq: unsupported weight type");
    constexpr bool Q8 = TYPE == SL_GGML_TYPE_Q8_0, Q6 = TYPE == SL_GGML_TYPE_Q6_K, Q5 = TYPE == SL_GGML_TYPE_Q5_K;
    const int count = Q8 ? n / 32 : n / 256, stride = Q8 ? 16 : 2, first = Q8 ? lane >> 1 : lane >> 4;
    using raw = typename std::conditional<Q8, raw_q8_0,
                                          typename std::conditional<Q6, raw_q6k, raw_q45k>::type>::type;
    for (int k = k0; k < k1; k += AHEAD) {
        raw r[AHEAD];
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            int i = first + (k + u) * stride;
            if (k + u < k1 && i < count) {
                if constexpr (Q8)
                    r[u] = load_q8<34, 2>(row, i, lane);
                else if constexpr (Q6)
                    r[u] = load_q6k(row, i, lane);
                else
                    r[u] = load_q45k<Q5>(row, i, lane);
            }
        }
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            int i = first + (k + u) * stride;
            if (k + u < k1 && i < count) {
                if constexpr (Q8)
                    useq_q8_0<NT>(r[u], i, lane, xr, nt, acc);
                else if constexpr (Q6)
                    useq_q6k<NT>(r[u], i, lane, xr, nt, acc);
                else
                    useq_q45k<Q5, NT>(r[u], i, lane, xr, nt, acc);
            }
        }
    }
}

#endif
