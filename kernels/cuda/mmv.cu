/* kernels/cuda/mmv.cu: the small-batch matmul for the formats quantized
 * models are made of (Q4_K, Q5_K, Q6_K, Q8_0, Q2_K, Q3_K, IQ4_XS and the
 * 32-element formats Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_1): one warp per
 * weight row
 * ("mmv_warp_per_row"), up to NT activation rows per pass.
 *
 * Why a second kernel beside matmul.cu: that one decodes 32-element units
 * into a float array and converts every quant with an int-to-float
 * instruction (a quarter-rate op); profiled at batch 1 on an H200 it moved
 * weights at 0.3-0.6 TB/s, bound by instruction issue, not memory. Here a
 * lane takes 16 elements of a row per step from one or two wide loads,
 * turns a quant into a float with one byte permute and one add (the
 * 0x4B000000 trick: the float 2^23 + q, minus 2^23, is exactly q), and
 * reuses the decoded values for every activation row of the pass.
 *
 * Layout of a step (512 elements of the row, 32 lanes x 16):
 *   Q4_K/Q5_K: two super-blocks; lane k of 16 takes bytes 8(k%4).. of the
 *              32-byte group k/4: 8 low nibbles (sub-block 2g) and 8 high
 *              nibbles (sub-block 2g+1); Q5_K adds the bits of qh.
 *   Q6_K:      two super-blocks; lane k of 16 takes l = 4(k%8)..+3 of half
 *              k/8: the four runs of 4 elements l+32i that share those bytes.
 *   Q8_0/Q8_1: sixteen blocks; a lane takes half a block.
 *   Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL: sixteen blocks; lane hf (0, 1) of a block
 *              takes bytes 8hf..8hf+7 of its 16 nibble bytes: elements
 *              8hf.. (low nibbles) and 16+8hf.. (high nibbles), with the
 *              qh bits of those elements (Q5_0/Q5_1).
 *   IQ4_XS:    two super-blocks; a lane pair per 32-element sub-block, as
 *              IQ4_NL's blocks (mmv_nib.cuh).
 *   Q2_K/Q3_K: two super-blocks; a lane pair per 32-element run, lane hf
 *              taking its 16-element sub-block hf (mmv_q23k.cuh).
 * Reduction order: a lane adds its steps in order, partial sums per scale
 * group as fmaf chains, then the warp's fixed butterfly; a row of 4,096 or
 * more elements is shared by 2 or 4 warps (warps_per_row), each over a
 * contiguous run of steps, and their sums are added in run order. It all
 * depends on the type and the row length only, so a token row's result is
 * the same whatever T is or the other rows hold (the engine's batch
 * invariance).
 * Tokens past T in the last pass repeat the last row and are not stored. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/matmul_unit.cuh"   /* the block sizes */
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/mmv_nib.cuh"
#include "kernels/cuda/mmv_q23k.cuh"

#include <type_traits>

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

template <bool Q5, int NT>
static __device__ __forceinline__ void use_q45k(const raw_q45k &rw, int sb, int lane, const float *x, int64_t ldx,
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
        const float *xt = xs + (int64_t)(t < nt ? t : nt - 1) * ldx;
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

template <int NT>
static __device__ __forceinline__ void use_q6k(const raw_q6k &rw, int sb, int lane, const float *x, int64_t ldx,
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
        const float *xt = xs + (int64_t)(t < nt ? t : nt - 1) * ldx;
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

template <int NT>
static __device__ __forceinline__ void use_q8_0(const raw_q8_0 &rw, int blk, int lane, const float *x, int64_t ldx,
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
        const float *xt = xs + (int64_t)(t < nt ? t : nt - 1) * ldx;
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

template <int TYPE, int NT>
static __device__ __forceinline__ void use_nib(const raw_nib &rw, int blk, int lane, const float *x, int64_t ldx,
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
        const float *xt = xs + (int64_t)(t < nt ? t : nt - 1) * ldx;
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

template <int TYPE, int NT>
static __device__ __forceinline__ void use_q23k(const raw_q23k &rw, int run, int lane, const float *x, int64_t ldx,
                                                int nt, float (&acc)[NT])
{
    float q[16];
    q23k_values<TYPE>(rw, run, q);
    float dl = q23k_scale<TYPE>(rw), ml = q23k_min<TYPE>(rw);
    const float *xs = x + (size_t)run * 32 + 16 * (lane & 1);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float *xt = xs + (int64_t)(t < nt ? t : nt - 1) * ldx;
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
template <int TYPE, int NT>
static __device__ __forceinline__ void row_dot(const uint8_t *row, int n, int k0, int k1, int lane, const float *xt,
                                               int64_t ldx, int nt, float (&acc)[NT])
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
                    use_q8_0<NT>(r[u], i, lane, xt, ldx, nt, acc);
                else if constexpr (NB)
                    use_nib<TYPE, NT>(r[u], i, lane, xt, ldx, nt, acc);
                else if constexpr (Q23)
                    use_q23k<TYPE, NT>(r[u], i, lane, xt, ldx, nt, acc);
                else if constexpr (Q6)
                    use_q6k<NT>(r[u], i, lane, xt, ldx, nt, acc);
                else
                    use_q45k<Q5, NT>(r[u], i, lane, xt, ldx, nt, acc);
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

/* Up to three matrices of one type and row length sharing the input x,
 * computed by one launch (q, k and v; gate and up). */
struct mmv_segs {
    const uint8_t *W[3];
    float *y[3];
    int64_t ldy[3];
    int rows[3];
    int n_seg;
};

/* PAIR: segments 0 and 1 have the same rows; each warp computes row r of
 * both and writes silu(a) * b into y[0] (the SwiGLU of the FFN, with the
 * arithmetic of eltwise.cu's swiglu_inplace, so the result is the same bits
 * as the unfused kernels'). Otherwise the warps walk the rows of the
 * segments one after another. WPR warps share a row (warps_per_row(n)):
 * warp p of them takes the p-th run of steps; run sums are added in run
 * order by the row's first warp. */
template <int TYPE, int NT, bool PAIR, int WPR>
static __global__ void __launch_bounds__(WARPS * SL_WARP)
mmv_warp_per_row(mmv_segs sg, size_t row_bytes, int n, const float *__restrict__ x, int64_t ldx, int T)
{
    constexpr int NR = PAIR ? 2 : 1;
    __shared__ float red[WPR > 1 ? WARPS : 1][NR][NT];
    int lane = threadIdx.x % SL_WARP, warp = threadIdx.x / SL_WARP, part = warp % WPR;
    int r = blockIdx.x * (WARPS / WPR) + warp / WPR;
    /* the segment by compare-and-select: indexing sg by a variable would put it in local memory */
    int s = 0;
    if (!PAIR) {
        if (sg.n_seg > 1 && r >= sg.rows[0]) {
            r -= sg.rows[0];
            s = 1;
            if (sg.n_seg > 2 && r >= sg.rows[1]) {
                r -= sg.rows[1];
                s = 2;
            }
        }
    }
    const uint8_t *W = s == 0 ? sg.W[0] : s == 1 ? sg.W[1] : sg.W[2];
    float *y = s == 0 ? sg.y[0] : s == 1 ? sg.y[1] : sg.y[2];
    int64_t ldy = s == 0 ? sg.ldy[0] : s == 1 ? sg.ldy[1] : sg.ldy[2];
    int rows = s == 0 ? sg.rows[0] : s == 1 ? sg.rows[1] : sg.rows[2];
    bool live = r < rows;
    if (WPR == 1 && !live)
        return;   /* no barrier below when WPR is 1 */
    int t0 = blockIdx.y * NT, nt = T - t0 < NT ? T - t0 : NT;
    const float *xt = x + (int64_t)t0 * ldx;
    float acc[NR][NT];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[q][t] = 0.0f;
    if (live) {
        int steps = row_steps(n), per = (steps + WPR - 1) / WPR;
        int k0 = part * per, k1 = k0 + per < steps ? k0 + per : steps;
        row_dot<TYPE, NT>(W + (size_t)r * row_bytes, n, k0, k1, lane, xt, ldx, nt, acc[0]);
        if constexpr (PAIR)
            row_dot<TYPE, NT>(sg.W[1] + (size_t)r * row_bytes, n, k0, k1, lane, xt, ldx, nt, acc[NR - 1]);
    }
    float v[NR][NT];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            v[q][t] = sl_warp_sum(acc[q][t]);
    if constexpr (WPR > 1) {
        if (lane == 0)
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int t = 0; t < NT; t++)
                    red[warp][q][t] = v[q][t];
        __syncthreads();
        if (part != 0 || !live)
            return;
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int p = 1; p < WPR; p++)
                    v[q][t] = __fadd_rn(v[q][t], red[warp + p][q][t]);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float o = v[0][t];
        if constexpr (PAIR) {
            float u = v[NR - 1][t];
            o = __fmul_rn(__fdiv_rn(o, __fadd_rn(1.0f, expf(-o))), u);
        }
        if (lane == 0 && t < nt)
            y[(int64_t)(t0 + t) * ldy + r] = o;
    }
}

bool sl_cuda_mmv_supports(const sl_cuda_weight *w, int64_t ldx, const float *x)
{
    bool aligned = ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 && w->ne0 < (1 << 30) && w->ne1 < (1 << 30);
    switch (w->type) {
    case SL_GGML_TYPE_Q4_K:
    case SL_GGML_TYPE_Q5_K:
        return aligned && ((w->row_bytes | (uintptr_t)w->data) & 15) == 0;
    case SL_GGML_TYPE_Q6_K:
    case SL_GGML_TYPE_Q8_0:
    case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_Q4_0:
    case SL_GGML_TYPE_Q5_0:
    case SL_GGML_TYPE_IQ4_NL:
    case SL_GGML_TYPE_Q3_K:
        return aligned && ((w->row_bytes | (uintptr_t)w->data) & 1) == 0;
    case SL_GGML_TYPE_Q4_1:
    case SL_GGML_TYPE_Q5_1:
    case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_Q2_K:
        return aligned && ((w->row_bytes | (uintptr_t)w->data) & 3) == 0;
    default:
        return false;
    }
}

template <int TYPE, bool PAIR, int WPR>
static void launch_nt(const mmv_segs &sg, size_t row_bytes, int n, const float *x, int64_t ldx, int64_t T,
                      int64_t rows, cudaStream_t stream)
{
    int nt = T >= 8 ? 8 : T >= 4 ? 4 : T >= 2 ? 2 : 1;
    constexpr int RPB = WARPS / WPR;
    dim3 grid((unsigned)((rows + RPB - 1) / RPB), (unsigned)((T + nt - 1) / nt));
    dim3 block(WARPS * SL_WARP);
    int t = (int)T;
    switch (nt) {
    case 1: mmv_warp_per_row<TYPE, 1, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, x, ldx, t); break;
    case 2: mmv_warp_per_row<TYPE, 2, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, x, ldx, t); break;
    case 4: mmv_warp_per_row<TYPE, 4, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, x, ldx, t); break;
    default: mmv_warp_per_row<TYPE, 8, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, x, ldx, t); break;
    }
}

template <int TYPE, bool PAIR>
static void launch(const mmv_segs &sg, size_t row_bytes, int n, const float *x, int64_t ldx, int64_t T,
                   cudaStream_t stream)
{
    int64_t rows = 0;
    for (int i = 0; i < (PAIR ? 1 : sg.n_seg); i++)
        rows += sg.rows[i];
    switch (warps_per_row(n)) {
    case 1: launch_nt<TYPE, PAIR, 1>(sg, row_bytes, n, x, ldx, T, rows, stream); break;
    case 2: launch_nt<TYPE, PAIR, 2>(sg, row_bytes, n, x, ldx, T, rows, stream); break;
    default: launch_nt<TYPE, PAIR, 4>(sg, row_bytes, n, x, ldx, T, rows, stream); break;
    }
}

/* Checks the weights against each other and the outputs, then launches. */
static sl_status run(const sl_cuda_weight *const *w, float *const *y, const int64_t *ldy, int n_seg, bool pair,
                     const float *x, int64_t ldx, int64_t T, cudaStream_t stream)
{
    if (T < 1 || T > (1 << 24) || n_seg < 1 || n_seg > 3 || (pair && n_seg != 2))
        return SL_EINVAL;
    mmv_segs sg = {};
    sg.n_seg = n_seg;
    int64_t total = 0;
    for (int i = 0; i < n_seg; i++) {
        if (!sl_cuda_mmv_supports(w[i], ldx, x) || w[i]->type != w[0]->type || w[i]->ne0 != w[0]->ne0 ||
            w[i]->row_bytes != w[0]->row_bytes || ldx < w[i]->ne0 || ldy[i] < w[i]->ne1 ||
            w[i]->ne0 % sl_ggml_block_elems(w[i]->type) != 0 || (pair && w[i]->ne1 != w[0]->ne1))
            return SL_EINVAL;
        sg.W[i] = w[i]->data;
        sg.y[i] = y[i];
        sg.ldy[i] = ldy[i];
        sg.rows[i] = (int)w[i]->ne1;
        total += w[i]->ne1;
    }
    if (total >= (1 << 30))
        return SL_EINVAL;
    int n = (int)w[0]->ne0;
    size_t rb = w[0]->row_bytes;
#define GO(TY) pair ? launch<TY, true>(sg, rb, n, x, ldx, T, stream) : launch<TY, false>(sg, rb, n, x, ldx, T, stream)
    switch (w[0]->type) {
    case SL_GGML_TYPE_Q4_K: GO(SL_GGML_TYPE_Q4_K); break;
    case SL_GGML_TYPE_Q5_K: GO(SL_GGML_TYPE_Q5_K); break;
    case SL_GGML_TYPE_Q6_K: GO(SL_GGML_TYPE_Q6_K); break;
    case SL_GGML_TYPE_Q8_0: GO(SL_GGML_TYPE_Q8_0); break;
    case SL_GGML_TYPE_Q8_1: GO(SL_GGML_TYPE_Q8_1); break;
    case SL_GGML_TYPE_Q4_0: GO(SL_GGML_TYPE_Q4_0); break;
    case SL_GGML_TYPE_Q4_1: GO(SL_GGML_TYPE_Q4_1); break;
    case SL_GGML_TYPE_Q5_0: GO(SL_GGML_TYPE_Q5_0); break;
    case SL_GGML_TYPE_Q5_1: GO(SL_GGML_TYPE_Q5_1); break;
    case SL_GGML_TYPE_IQ4_NL: GO(SL_GGML_TYPE_IQ4_NL); break;
    case SL_GGML_TYPE_IQ4_XS: GO(SL_GGML_TYPE_IQ4_XS); break;
    case SL_GGML_TYPE_Q2_K: GO(SL_GGML_TYPE_Q2_K); break;
    case SL_GGML_TYPE_Q3_K: GO(SL_GGML_TYPE_Q3_K); break;
    default: return SL_EINVAL;
    }
#undef GO
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_mmv(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                      cudaStream_t stream)
{
    return run(&w, &y, &ldy, 1, false, x, ldx, T, stream);
}

sl_status sl_cuda_mmv_multi(const sl_cuda_weight *const *w, float *const *y, const int64_t *ldy, int n_seg,
                            const float *x, int64_t ldx, int64_t T, cudaStream_t stream)
{
    return run(w, y, ldy, n_seg, false, x, ldx, T, stream);
}

sl_status sl_cuda_mmv_swiglu(const sl_cuda_weight *gate, const sl_cuda_weight *up, const float *x, int64_t ldx,
                             int64_t T, float *y, int64_t ldy, cudaStream_t stream)
{
    const sl_cuda_weight *w[2] = {gate, up};
    float *ys[2] = {y, y};
    int64_t ldys[2] = {ldy, ldy};
    return run(w, ys, ldys, 2, true, x, ldx, T, stream);
}
