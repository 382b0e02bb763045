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
 *   Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4: sixteen blocks; lane hf (0, 1) of a block
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
 * Tokens past T in the last pass repeat the last row and are not stored.
 * The steps and row_dot live in mmv_dot.cuh, shared with the MoE expert
 * kernel (mmv_moe.cu). */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/mmv_dot.cuh"   /* the per-type steps and row_dot */

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
    mmv_rows_strided xr = {ldx};
    float acc[NR][NT];
#pragma unroll
    for (int q = 0; q < NR; q++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[q][t] = 0.0f;
    if (live) {
        int steps = row_steps(n), per = (steps + WPR - 1) / WPR;
        int k0 = part * per, k1 = k0 + per < steps ? k0 + per : steps;
        row_dot<TYPE, NT>(W + (size_t)r * row_bytes, n, k0, k1, lane, xt, xr, nt, acc[0]);
        if constexpr (PAIR)
            row_dot<TYPE, NT>(sg.W[1] + (size_t)r * row_bytes, n, k0, k1, lane, xt, xr, nt, acc[NR - 1]);
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
    case SL_GGML_TYPE_MXFP4:   /* byte loads: any alignment */
        return aligned;
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
    case SL_GGML_TYPE_MXFP4: GO(SL_GGML_TYPE_MXFP4); break;
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
