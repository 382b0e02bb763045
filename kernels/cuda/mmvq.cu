/* kernels/cuda/mmvq.cu: the small-batch matmul on 8-bit activations, for
 * Q4_K, Q5_K, Q6_K and Q8_0 weights (mmvq.cuh): a quantizer that rounds T
 * activation rows to the CPU default's blocks once per matmul input, and
 * one warp per weight row computing integer dot products (__dp4a) on them,
 * up to NT activation rows per pass, with the fused launches mmv.cu has
 * (q/k/v in one launch, gate+up+SwiGLU in one launch) and its warps-per-row
 * split of long rows.
 * Why: mmv.cu's float kernel spends 7-9 issue slots per weight (the byte to
 * float trick, an fma, the Q4_K min term, the scales) and is bound by
 * instruction issue at batch 1, not by memory; a dp4a does four weights in
 * one, and the min term shrinks to one product per 16 activations.
 * Numerics: the activation codes and scales are kernels/cpu/act_quant.c's
 * bit for bit (quantizer below); the integer sums are exact; only the
 * float combination differs from the CPU's vec_dot_q8.c, in its order,
 * which here is fixed by (type, n) (mmvq_dot.cuh), so a token row's result
 * does not depend on T or the other rows (the engine's batch invariance).
 * Steps: launches only, no allocation, no host sync: CUDA-graph safe. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mmvq.cuh"
#include "kernels/cuda/mmvq_dot.cuh"

#include <stdlib.h>
#include <string.h>

/* One warp per 256 elements of a row (a Q8_K super-block, or eight Q8_0
 * blocks), lane l taking elements 8l..8l+7; blockIdx.y is the row. The
 * rules are act_quant.c's: Q8_K v = the first element of largest
 * magnitude, iscale = -127/v, q = nearest-even(iscale * x) clamped to
 * [-128, 127], d = 1/iscale, a zero (or NaN/inf) block all zeros; Q8_0
 * d = amax/127 rounded to fp16, q = nearest-even(x * (127/amax)) clamped
 * to +-127. Every product and quotient is one IEEE rounding (the _rn
 * intrinsics: nvcc must not fuse or approximate them). A NaN element of a
 * Q8_K block gets code 0 (__float2int_rn's NaN), what the CPU's
 * nearest_int gives for a NaN without payload. */
template <bool K>
static __global__ void __launch_bounds__(WARPS * SL_WARP)
q8_quantize_rows(const float *__restrict__ x, int64_t ldx, int n, uint8_t *__restrict__ xq, int64_t ldq)
{
    int lane = threadIdx.x % SL_WARP, warp = threadIdx.x / SL_WARP;
    int c = blockIdx.x * WARPS + warp;
    if (c * 256 >= n)
        return;   /* the whole warp: the shuffles below see every lane */
    int e0 = c * 256 + 8 * lane;
    bool in = e0 < n;   /* Q8_0 rows end on a 32-element block: a lane is all in or all out */
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (in)
        load_x8(x + (int64_t)blockIdx.y * ldx + e0, v);
    uint8_t *row = xq + (int64_t)blockIdx.y * ldq;
    float *dv = (float *)(row + n);
    int q[8];
    if constexpr (K) {
        float amax = 0.0f, vmax = 0.0f;
        int idx = 0x7FFFFFFF;
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (fabsf(v[i]) > amax) {   /* NaN never wins, as on the CPU */
                amax = fabsf(v[i]);
                vmax = v[i];
                idx = e0 + i;
            }
        /* the largest magnitude, the lowest index among equals: the CPU's first maximum */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float a2 = __shfl_xor_sync(0xffffffffu, amax, o), v2 = __shfl_xor_sync(0xffffffffu, vmax, o);
            int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
            if (a2 > amax || (a2 == amax && i2 < idx)) {
                amax = a2;
                vmax = v2;
                idx = i2;
            }
        }
        bool zero = !(amax > 0.0f) || !isfinite(amax);
        float iscale = zero ? 0.0f : __fdiv_rn(-127.0f, vmax);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float p = __fmul_rn(iscale, v[i]);
            /* +-inf (iscale overflows when amax < ~4e-37): nearest_int's bit trick gives -2^22, clamped to -128 */
            int r = zero ? 0 : isinf(p) ? -128 : __float2int_rn(p);
            q[i] = r > 127 ? 127 : r < -128 ? -128 : r;
            s += q[i];
        }
        s += __shfl_xor_sync(0xffffffffu, s, 1);   /* the 16 codes of a lane pair */
        if ((lane & 1) == 0)
            ((int16_t *)(row + n + n / 8))[e0 / 16] = (int16_t)s;
        if (lane == 0)
            dv[c] = zero ? 0.0f : __fdiv_rn(1.0f, iscale);
    } else {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            amax = fmaxf(amax, fabsf(v[i]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));   /* the block's four lanes */
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        float d = __fdiv_rn(amax, 127.0f), id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            q[i] = __float2int_rn(fminf(fmaxf(__fmul_rn(v[i], id), -127.0f), 127.0f));
        if (in && (lane & 3) == 0)
            dv[e0 / 32] = __half2float(__float2half_rn(d));
    }
    if (in) {
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo |= (uint32_t)(q[i] & 0xFF) << (8 * i);
            hi |= (uint32_t)(q[4 + i] & 0xFF) << (8 * i);
        }
        *(uint2 *)(row + e0) = make_uint2(lo, hi);
    }
}

/* Up to three matrices of one type and row length sharing the input. */
struct mmvq_segs {
    const uint8_t *W[3];
    float *y[3];
    int64_t ldy[3];
    int rows[3];
    int n_seg;
};

/* mmv.cu's mmv_warp_per_row on quantized activations: PAIR writes
 * silu(gate) * up into y[0] with eltwise.cu's arithmetic; WPR warps share
 * a row, their run sums added in run order by the row's first warp. */
template <int TYPE, int NT, bool PAIR, int WPR>
static __global__ void __launch_bounds__(WARPS * SL_WARP)
mmvq_warp_per_row(mmvq_segs sg, size_t row_bytes, int n, const uint8_t *__restrict__ xq, int64_t ldq, int T)
{
    constexpr int NR = PAIR ? 2 : 1;
    __shared__ float red[WPR > 1 ? WARPS : 1][NR][NT];
    int lane = threadIdx.x % SL_WARP, warp = threadIdx.x / SL_WARP, part = warp % WPR;
    int r = blockIdx.x * (WARPS / WPR) + warp / WPR;
    int s = 0;   /* by compare-and-select: a variable index would put sg in local memory */
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
    q8_rows xr = {xq + (int64_t)t0 * ldq, ldq, n};
    float acc[NR][NT];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[q][t] = 0.0f;
    if (live) {
        int steps = row_steps(n), per = (steps + WPR - 1) / WPR;
        int k0 = part * per, k1 = k0 + per < steps ? k0 + per : steps;
        row_dotq<TYPE, NT>(W + (size_t)r * row_bytes, n, k0, k1, lane, xr, nt, acc[0]);
        if constexpr (PAIR)
            row_dotq<TYPE, NT>(sg.W[1] + (size_t)r * row_bytes, n, k0, k1, lane, xr, nt, acc[NR - 1]);
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

int sl_cuda_q8_format(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_Q4_K:
    case SL_GGML_TYPE_Q5_K:
    case SL_GGML_TYPE_Q6_K: return SL_CUDA_Q8_K;
    case SL_GGML_TYPE_Q8_0: return SL_CUDA_Q8_0;
    default: return SL_CUDA_Q8_NONE;
    }
}

size_t sl_cuda_q8_row_bytes(int64_t n)
{
    return ((size_t)n + (size_t)n / 8 + (size_t)n / 8 + 15) / 16 * 16;
}

bool sl_cuda_mmvq_supports(const sl_cuda_weight *w)
{
    int be = w->type == SL_GGML_TYPE_Q8_0 ? 32 : 256;
    if (sl_cuda_q8_format(w->type) == SL_CUDA_Q8_NONE || w->ne0 < be || w->ne0 % be != 0 || w->ne0 >= (1 << 28) ||
        w->ne1 < 1 || w->ne1 >= (1 << 30) || w->row_bytes != (size_t)(w->ne0 / be) * sl_ggml_block_bytes(w->type))
        return false;
    /* the loads of mmv_dot.cuh: 16 bytes for Q4_K/Q5_K, 2 for Q6_K/Q8_0 */
    uintptr_t a = w->type == SL_GGML_TYPE_Q4_K || w->type == SL_GGML_TYPE_Q5_K ? 15 : 1;
    return (((uintptr_t)w->data | w->row_bytes) & a) == 0;
}

sl_status sl_cuda_q8_quantize(int format, const float *x, int64_t ldx, int64_t n, int64_t T, uint8_t *xq,
                              cudaStream_t stream)
{
    int be = format == SL_CUDA_Q8_K ? 256 : 32;
    if ((format != SL_CUDA_Q8_K && format != SL_CUDA_Q8_0) || n < be || n % be != 0 || n >= (1 << 28) || T < 1 ||
        T > 65535 || ldx < n || ldx % 4 != 0 || ((uintptr_t)x & 15) != 0 || ((uintptr_t)xq & 15) != 0)
        return SL_EINVAL;
    int64_t chunks = (n + 255) / 256;
    dim3 grid((unsigned)((chunks + WARPS - 1) / WARPS), (unsigned)T), block(WARPS * SL_WARP);
    int64_t ldq = (int64_t)sl_cuda_q8_row_bytes(n);
    if (format == SL_CUDA_Q8_K)
        q8_quantize_rows<true><<<grid, block, 0, stream>>>(x, ldx, (int)n, xq, ldq);
    else
        q8_quantize_rows<false><<<grid, block, 0, stream>>>(x, ldx, (int)n, xq, ldq);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

template <int TYPE, bool PAIR, int WPR>
static void launch_nt(const mmvq_segs &sg, size_t row_bytes, int n, const uint8_t *xq, int64_t ldq, int64_t T,
                      int64_t rows, cudaStream_t stream)
{
    int nt = T >= 8 ? 8 : T >= 4 ? 4 : T >= 2 ? 2 : 1;
    constexpr int RPB = WARPS / WPR;
    dim3 grid((unsigned)((rows + RPB - 1) / RPB), (unsigned)((T + nt - 1) / nt));
    dim3 block(WARPS * SL_WARP);
    int t = (int)T;
    switch (nt) {
    case 1: mmvq_warp_per_row<TYPE, 1, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, xq, ldq, t); break;
    case 2: mmvq_warp_per_row<TYPE, 2, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, xq, ldq, t); break;
    case 4: mmvq_warp_per_row<TYPE, 4, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, xq, ldq, t); break;
    default: mmvq_warp_per_row<TYPE, 8, PAIR, WPR><<<grid, block, 0, stream>>>(sg, row_bytes, n, xq, ldq, t); break;
    }
}

template <int TYPE, bool PAIR>
static void launch(const mmvq_segs &sg, size_t row_bytes, int n, const uint8_t *xq, int64_t T, cudaStream_t stream)
{
    int64_t rows = 0, ldq = (int64_t)sl_cuda_q8_row_bytes(n);
    for (int i = 0; i < (PAIR ? 1 : sg.n_seg); i++)
        rows += sg.rows[i];
    switch (warps_per_row(n)) {
    case 1: launch_nt<TYPE, PAIR, 1>(sg, row_bytes, n, xq, ldq, T, rows, stream); break;
    case 2: launch_nt<TYPE, PAIR, 2>(sg, row_bytes, n, xq, ldq, T, rows, stream); break;
    default: launch_nt<TYPE, PAIR, 4>(sg, row_bytes, n, xq, ldq, T, rows, stream); break;
    }
}

/* Checks the weights against each other and the outputs, then launches. */
static sl_status run(const sl_cuda_weight *const *w, float *const *y, const int64_t *ldy, int n_seg, bool pair,
                     const uint8_t *xq, int64_t T, cudaStream_t stream)
{
    if (T < 1 || T > 65535 * 8 || n_seg < 1 || n_seg > 3 || (pair && n_seg != 2) || ((uintptr_t)xq & 15) != 0)
        return SL_EINVAL;
    mmvq_segs sg = {};
    sg.n_seg = n_seg;
    int64_t total = 0;
    for (int i = 0; i < n_seg; i++) {
        if (!sl_cuda_mmvq_supports(w[i]) || w[i]->type != w[0]->type || w[i]->ne0 != w[0]->ne0 ||
            ldy[i] < w[i]->ne1 || (pair && w[i]->ne1 != w[0]->ne1))
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
#define GO(TY) pair ? launch<TY, true>(sg, rb, n, xq, T, stream) : launch<TY, false>(sg, rb, n, xq, T, stream)
    switch (w[0]->type) {
    case SL_GGML_TYPE_Q4_K: GO(SL_GGML_TYPE_Q4_K); break;
    case SL_GGML_TYPE_Q5_K: GO(SL_GGML_TYPE_Q5_K); break;
    case SL_GGML_TYPE_Q6_K: GO(SL_GGML_TYPE_Q6_K); break;
    case SL_GGML_TYPE_Q8_0: GO(SL_GGML_TYPE_Q8_0); break;
    default: return SL_EINVAL;
    }
#undef GO
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_mmvq(const sl_cuda_weight *w, const uint8_t *xq, int64_t T, float *y, int64_t ldy,
                       cudaStream_t stream)
{
    return run(&w, &y, &ldy, 1, false, xq, T, stream);
}

sl_status sl_cuda_mmvq_multi(const sl_cuda_weight *const *w, float *const *y, const int64_t *ldy, int n_seg,
                             const uint8_t *xq, int64_t T, cudaStream_t stream)
{
    return run(w, y, ldy, n_seg, false, xq, T, stream);
}

sl_status sl_cuda_mmvq_swiglu(const sl_cuda_weight *gate, const sl_cuda_weight *up, const uint8_t *xq, int64_t T,
                              float *y, int64_t ldy, cudaStream_t stream)
{
    const sl_cuda_weight *w[2] = {gate, up};
    float *ys[2] = {y, y};
    int64_t ldys[2] = {ldy, ldy};
    return run(w, ys, ldys, 2, true, xq, T, stream);
}

bool sl_cuda_mmvq_enabled(void)
{
    static int on = -1;   /* read once, as the other SLUICE_CUDA_* switches */
    if (on < 0) {
        const char *e = getenv("SLUICE_CUDA_MMVQ");
        on = e && strcmp(e, "1") == 0;
    }
    return on;
}
