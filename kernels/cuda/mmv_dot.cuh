/* kernels/cuda/mmv_dot.cuh: the per-type dot products of the small-batch
 * matmul (mmv.cu): one warp per weight row, up to NT activation rows per
 * pass, each lane's share of a row decoded once and used for every
 * activation row of the pass. Shared by mmv.cu (dense matrices, activation
 * rows at a fixed stride) and mmv_moe.cu (the experts of a MoE layer,
 * activation rows gathered through a list of row indices).
 * Where: included by those two files only (static device code).
 * Rows: a use_* step reads activation row t (t < nt; t >= nt repeats row
 * nt - 1) at x + xr.off(t, nt): mmv_rows_strided gives t * ldx, the code
 * mmv.cu always ran, mmv_rows_listed rows[t] * ldx. Which rows are read
 * never changes the arithmetic of one (weight row, activation row) dot. */
#ifndef SL_CUDA_MMV_DOT_CUH
#define SL_CUDA_MMV_DOT_CUH

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_unit.cuh"   /* the block sizes */
#include "kernels/cuda/mmv_nib.cuh"
#include "kernels/cuda/mmv_q23k.cuh"

#include <type_traits>

/* activation row t of a pass: at a fixed stride (dense matmuls) */
struct mmv_rows_strided {
    int64_t ldx;
    __device__ __forceinline__ int64_t off(int t, int nt) const
    {
        return (int64_t)(t < nt ? t : nt - 1) * ldx;
    }
};

/* ... or listed (row indices in shared memory: a MoE expert's tokens) */
struct mmv_rows_listed {
    const int32_t *rows;
    int64_t ldx;
    __device__ __forceinline__ int64_t off(int t, int nt) const
    {
        return (int64_t)rows[t < nt ? t : nt - 1] * ldx;
    }
};

#define WARPS 8          /* rows per 256-thread block */
#define STEP 512         /* row elements one warp step covers */

/* q as a float, for 0 <= q < 256 held in byte `sel` of w (sel 0-3). */
static __device__ __forceinline__ float byte_float(uint32_t w, int sel)
{
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7650 | sel)) - 8388608.0f;
}

/* A 32-bit word from a 2-byte aligned address (Q8_0 and Q6_K blocks). */
static __device__ __forceinline__ uint32_t load_u32_a2(const uint8_t *p)
{
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

static __device__ __forceinline__ void load_x8(const float *x, float (&v)[8])
{
    float4 a = ((const float4 *)x)[0], b = ((const float4 *)x)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

/* Byte i (0-11) of a Q4_K/Q5_K `scales` array held in three words, without
 * an indexed local array (which would live in slow local memory). */
static __device__ __forceinline__ int scale_byte(uint32_t s0, uint32_t s1, uint32_t s2, int i)
{
    uint32_t w = i < 4 ? s0 : i < 8 ? s1 : s2;
    return (int)((w >> (8 * (i & 3))) & 0xFF);
}

/* sl_dev_scale_min_k4 on the three words */
static __device__ __forceinline__ void scale_min_k4(uint32_t s0, uint32_t s1, uint32_t s2, int j, int &sc, int &m)
{
    if (j < 4) {
        sc = scale_byte(s0, s1, s2, j) & 63;
        m = scale_byte(s0, s1, s2, j + 4) & 63;
    } else {
        int a = scale_byte(s0, s1, s2, j + 4), lo = scale_byte(s0, s1, s2, j - 4), hi = scale_byte(s0, s1, s2, j);
        sc = (a & 0xF) | ((lo >> 6) << 4);
        m = (a >> 4) | ((hi >> 6) << 4);
    }
}

/* sum_i q[i] * x[i] over n values, one fmaf chain */
template <int N>
static __device__ __forceinline__ float dot_chain(const float *q, const float *x)
{
    float p = 0.0f;
#pragma unroll
    for (int i = 0; i < N; i++)
        p = fmaf(q[i], x[i], p);
    return p;
}

template <int N>
static __device__ __forceinline__ float sum_chain(const float *x)
{
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N; i++)
        s = __fadd_rn(s, x[i]);
    return s;
}

/* A step is split in two, the loads (raw_*) and the arithmetic (use_*), so
 * row_dot can issue the loads of several steps before it waits on the
 * first: a warp then keeps more bytes in flight, which is what a matrix-
 * vector product is bound by. */

/* Q4_K / Q5_K: lane `lane`'s bytes of super-block sb */
struct raw_q45k {
    uint32_t dm, s0, s1, s2;
    uint2 w, h;
};

template <bool Q5>
static __device__ __forceinline__ raw_q45k load_q45k(const uint8_t *row, int sb, int lane)
{
    constexpr int BB = Q5 ? 176 : 144;
    const uint8_t *b = row + (size_t)sb * BB;
    int k = lane & 15, g = k >> 2, j0 = 8 * (k & 3);
    raw_q45k r;
    r.dm = *(const uint32_t *)b;
    r.s0 = *(const uint32_t *)(b + 4);
    r.s1 = *(const uint32_t *)(b + 8);
    r.s2 = *(const uint32_t *)(b + 12);
    r.w = *(const uint2 *)(b + (Q5 ? 48 : 16) + 32 * g + j0);
    r.h = Q5 ? *(const uint2 *)(b + 16 + j0) : make_uint2(0, 0);
    return r;
}

template <bool Q5, int NT, class XR>
static __device__ __forceinline__ void use_q45k(const raw_q45k &rw, int sb, int lane, const float *x, const XR &xr,
                                                int nt, float (&acc)[NT])
{
    int k = lane & 15, g = k >> 2, j0 = 8 * (k & 3);
    int sca, ma, scb, mb;
    scale_min_k4(rw.s0, rw.s1, rw.s2, 2 * g, sca, ma);
    scale_min_k4(rw.s0, rw.s1, rw.s2, 2 * g + 1, scb, mb);
    float d = sl_dev_fp16((uint16_t)(rw.dm & 0xFFFF)), dmin = sl_dev_fp16((uint16_t)(rw.dm >> 16));
    float fa = d * (float)sca, fb = d * (float)scb, na = dmin * (float)ma, nb = dmin * (float)mb;

    uint32_t lo0 = rw.w.x & 0x0F0F0F0Fu, lo1 = rw.w.y & 0x0F0F0F0Fu;
    uint32_t hi0 = (rw.w.x >> 4) & 0x0F0F0F0Fu, hi1 = (rw.w.y >> 4) & 0x0F0F0F0Fu;
    if constexpr (Q5) {
        /* bit 2g of qh[j] -> bit 4 of the low quant j, bit 2g+1 -> of the high one */
        lo0 |= ((rw.h.x >> (2 * g)) & 0x01010101u) << 4;
        lo1 |= ((rw.h.y >> (2 * g)) & 0x01010101u) << 4;
        hi0 |= ((rw.h.x >> (2 * g + 1)) & 0x01010101u) << 4;
        hi1 |= ((rw.h.y >> (2 * g + 1)) & 0x01010101u) << 4;
    }
    float qa[8], qb[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        qa[i] = byte_float(lo0, i);
        qa[4 + i] = byte_float(lo1, i);
        qb[i] = byte_float(hi0, i);
        qb[4 + i] = byte_float(hi1, i);
    }
    const float *xs = x + (size_t)sb * 256 + 64 * g + j0;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float *xt = xs + xr.off(t, nt);
        float xa[8], xb[8];
        load_x8(xt, xa);
        load_x8(xt + 32, xb);
        float r = acc[t];
        r = fmaf(fa, dot_chain<8>(qa, xa), r);
        r = fmaf(-na, sum_chain<8>(xa), r);
        r = fmaf(fb, dot_chain<8>(qb, xb), r);
        r = fmaf(-nb, sum_chain<8>(xb), r);
        acc[t] = r;
    }
}

/* Q6_K: lane `lane`'s bytes of super-block sb */
struct raw_q6k {
    uint32_t qlA, qlB, qh;
    uint32_t sc;        /* the four int8 scales of the lane's runs */
    uint16_t d;
};

static __device__ __forceinline__ raw_q6k load_q6k(const uint8_t *row, int sb, int lane)
{
    const uint8_t *b = row + (size_t)sb * 210;
    int k = lane & 15, h = k >> 3, l0 = 4 * (k & 7);
    int sub = 8 * h + (l0 >> 4);
    raw_q6k r;
    r.qlA = load_u32_a2(b + 64 * h + l0);
    r.qlB = load_u32_a2(b + 64 * h + 32 + l0);
    r.qh = load_u32_a2(b + 128 + 32 * h + l0);
    const uint8_t *sc = b + 192 + sub;
    r.sc = (uint32_t)sc[0] | ((uint32_t)sc[2] << 8) | ((uint32_t)sc[4] << 16) | ((uint32_t)sc[6] << 24);
    r.d = sl_dev_u16(b + 208);
    return r;
}

template <int NT, class XR>
static __device__ __forceinline__ void use_q6k(const raw_q6k &rw, int sb, int lane, const float *x, const XR &xr,
                                               int nt, float (&acc)[NT])
{
    int k = lane & 15, h = k >> 3, l0 = 4 * (k & 7);
    float d = sl_dev_fp16(rw.d);
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        f[i] = d * (float)(int8_t)((rw.sc >> (8 * i)) & 0xFF);
    /* run i (elements 128h + 32i + l0 ..+3): low/high nibble of qlA/qlB, qh bits 2i..2i+1 */
    uint32_t q6[4];
    q6[0] = (rw.qlA & 0x0F0F0F0Fu) | ((rw.qh & 0x03030303u) << 4);
    q6[1] = (rw.qlB & 0x0F0F0F0Fu) | (((rw.qh >> 2) & 0x03030303u) << 4);
    q6[2] = ((rw.qlA >> 4) & 0x0F0F0F0Fu) | (((rw.qh >> 4) & 0x03030303u) << 4);
    q6[3] = ((rw.qlB >> 4) & 0x0F0F0F0Fu) | (((rw.qh >> 6) & 0x03030303u) << 4);
    float q[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            q[i][j] = byte_float(q6[i], j) - 32.0f;   /* exact: small integers */
    const float *xs = x + (size_t)sb * 256 + 128 * h + l0;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float *xt = xs + xr.off(t, nt);
        float r = acc[t];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 v = *(const float4 *)(xt + 32 * i);
            float xv[4] = {v.x, v.y, v.z, v.w};
            r = fmaf(f[i], dot_chain<4>(q[i], xv), r);
        }
        acc[t] = r;
    }
}

/* Q8_0 / Q8_1: lane `lane`'s half of block blk (BB bytes a block, the
 * quants at OFF: Q8_1's second fp16, the block's sum, is not read) */
struct raw_q8_0 {
    uint32_t w[4];
    uint16_t d;
};

template <int BB, int OFF>
static __device__ __forceinline__ raw_q8_0 load_q8(const uint8_t *row, int blk, int lane)
{
    const uint8_t *b = row + (size_t)blk * BB;
    int hf = lane & 1;
    raw_q8_0 r;
    r.d = sl_dev_u16(b);
#pragma unroll
    for (int w4 = 0; w4 < 4; w4++)
        r.w[w4] = load_u32_a2(b + OFF + 16 * hf + 4 * w4);
    return r;
}

template <int NT, class XR>
static __device__ __forceinline__ void use_q8_0(const raw_q8_0 &rw, int blk, int lane, const float *x, const XR &xr,
                                                int nt, float (&acc)[NT])
{
    int hf = lane & 1;
    float d = sl_dev_fp16(rw.d);
    float q[16];
#pragma unroll
    for (int w4 = 0; w4 < 4; w4++) {
        uint32_t w = rw.w[w4] ^ 0x80808080u;   /* int8 -> q + 128 */
#pragma unroll
        for (int j = 0; j < 4; j++)
            q[4 * w4 + j] = byte_float(w, j) - 128.0f;
    }
    const float *xs = x + (size_t)blk * 32 + 16 * hf;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float *xt = xs + xr.off(t, nt);
        float xa[8], xb[8];
        load_x8(xt, xa);
        load_x8(xt + 8, xb);
        float p = dot_chain<8>(q, xa);
#pragma unroll
        for (int i = 0; i < 8; i++)
            p = fmaf(q[8 + i], xb[i], p);
        acc[t] = fmaf(d, p, acc[t]);
    }
}

template <int TYPE, int NT, class XR>
static __device__ __forceinline__ void use_nib(const raw_nib &rw, int blk, int lane, const float *x, const XR &xr,
                                               int nt, float (&acc)[NT])
{
    using F = nib_fmt<TYPE>;
    int hf = lane & 1;
    float q[16];
    nib_values<TYPE>(rw, hf, q);
    float d = nib_scale<TYPE>(rw);
    const float *xs = x + (size_t)blk * 32 + 8 * hf;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float *xt = xs + xr.off(t, nt);
        float xa[8], xb[8];
        load_x8(xt, xa);
        load_x8(xt + 16, xb);
        float p = dot_chain<8>(q, xa);
#pragma unroll
        for (int i = 0; i < 8; i++)
            p = fmaf(q[8 + i], xb[i], p);
        float r = fmaf(d, p, acc[t]);
        if constexpr (F::M)
            r = fmaf(sl_dev_fp16(rw.m), __fadd_rn(sum_chain<8>(xa), sum_chain<8>(xb)), r);
        acc[t] = r;
    }
}

template <int TYPE, int NT, class XR>
static __device__ __forceinline__ void use_q23k(const raw_q23k &rw, int run, int lane, const float *x, const XR &xr,
                                                int nt, float (&acc)[NT])
{
    float q[16];
    q23k_values<TYPE>(rw, run, q);
    float dl = q23k_scale<TYPE>(rw), ml = q23k_min<TYPE>(rw);
    const float *xs = x + (size_t)run * 32 + 16 * (lane & 1);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float *xt = xs + xr.off(t, nt);
        float xa[8], xb[8];
        load_x8(xt, xa);
        load_x8(xt + 8, xb);
        float p = dot_chain<8>(q, xa);
#pragma unroll
        for (int i = 0; i < 8; i++)
            p = fmaf(q[8 + i], xb[i], p);
        float r = fmaf(dl, p, acc[t]);
        if constexpr (TYPE == SL_GGML_TYPE_Q2_K)
            r = fmaf(-ml, __fadd_rn(sum_chain<8>(xa), sum_chain<8>(xb)), r);
        acc[t] = r;
    }
}

#define AHEAD 4   /* steps whose loads are issued before the first is used */

/* acc[t] += row . x[t] for the lane's share of steps [k0, k1) of a row of
 * n elements. The lane's steps are used in increasing order whatever
 * AHEAD is. (Issuing the up row's loads with the gate row's, for the fused
 * SwiGLU, was measured slower on an H200: 21.3 against 19.9 us for a 1B
 * layer, the extra registers halving the blocks per SM.) */
template <int TYPE, int NT, class XR>
static __device__ __forceinline__ void row_dot(const uint8_t *row, int n, int k0, int k1, int lane, const float *xt,
                                               const XR &xr, int nt, float (&acc)[NT])
{
    constexpr bool Q8 = TYPE == SL_GGML_TYPE_Q8_0 || TYPE == SL_GGML_TYPE_Q8_1, Q6 = TYPE == SL_GGML_TYPE_Q6_K,
                   Q5 = TYPE == SL_GGML_TYPE_Q5_K, NB = is_nib<TYPE>,
                   Q23 = TYPE == SL_GGML_TYPE_Q2_K || TYPE == SL_GGML_TYPE_Q3_K, B32 = Q8 || NB || Q23;
    /* 32-element blocks: 16 per warp step, a lane pair per block; K-quants: 2 super-blocks, 16 lanes each */
    const int count = B32 ? n / 32 : n / 256, stride = B32 ? 16 : 2, first = B32 ? lane >> 1 : lane >> 4;
    using raw = typename std::conditional<
        Q8, raw_q8_0,
        typename std::conditional<
            NB, raw_nib,
            typename std::conditional<
                Q23, raw_q23k, typename std::conditional<Q6, raw_q6k, raw_q45k>::type>::type>::type>::type;
    for (int k = k0; k < k1; k += AHEAD) {
        raw r[AHEAD];
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            int i = first + (k + u) * stride;
            if (k + u < k1 && i < count) {
                if constexpr (TYPE == SL_GGML_TYPE_Q8_0)
                    r[u] = load_q8<34, 2>(row, i, lane);
                else if constexpr (TYPE == SL_GGML_TYPE_Q8_1)
                    r[u] = load_q8<SL_BB_Q8_1, 4>(row, i, lane);
                else if constexpr (NB)
                    r[u] = load_nib<TYPE>(row, i, lane);
                else if constexpr (Q23)
                    r[u] = load_q23k<TYPE>(row, i, lane);
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
                    use_q8_0<NT>(r[u], i, lane, xt, xr, nt, acc);
                else if constexpr (NB)
                    use_nib<TYPE, NT>(r[u], i, lane, xt, xr, nt, acc);
                else if constexpr (Q23)
                    use_q23k<TYPE, NT>(r[u], i, lane, xt, xr, nt, acc);
                else if constexpr (Q6)
                    use_q6k<NT>(r[u], i, lane, xt, xr, nt, acc);
                else
                    use_q45k<Q5, NT>(r[u], i, lane, xt, xr, nt, acc);
            }
        }
    }
}

/* Warp steps of a row of n elements (a step: STEP elements). */
static __host__ __device__ __forceinline__ int row_steps(int n)
{
    return (n + STEP - 1) / STEP;
}

/* Warps that share one row: a long row split in WPR contiguous runs of
 * steps keeps each warp to about one round of AHEAD loads (rows of 4,096
 * and more elements took 2-7 rounds, one memory latency each, on too few
 * warps to hide it). Depends on n only, so a row's sum order is fixed by
 * (type, n) as before. */
static __host__ __device__ __forceinline__ int warps_per_row(int n)
{
    int w = row_steps(n) / AHEAD;
    return w >= 4 ? 4 : w >= 2 ? 2 : 1;
}

#endif
