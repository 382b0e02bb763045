/* kernels/cuda/mmv_moe.cu: the grouped expert matmul of MoE layers
 * (moe.cuh sl_cuda_mmv_experts): mmv.cu's warp-per-row dot products
 * (mmv_dot.cuh) over the rows routed to each expert, the experts read in
 * place from their 3-D tensor (no float16 copies: a 30B-A3B's experts are
 * 18 GB at Q4_K_M and would be 60 GB).
 * Runs in the worker process, launched on the backend stream.
 *
 * Grid: (blocks of WARPS/WPR weight rows, min(n_expert, T*k) expert
 * slots), fixed by the shapes, so a step holding it replays as a CUDA graph
 * whatever the routing chose. Slot j serves the j-th expert in use (the
 * grouping lists them, moe.cu) and reads its pair range; a slot past the
 * count returns at once, the others run passes of NT pairs: the
 * pass's input and output row indices go to shared memory, each warp dots
 * its weight row with those NT activation rows, and lane 0 stores each
 * result at its pair's row of y.
 * Reduction order: row_dot's, which depends on the type and the row length
 * only (mmv.cu's header), never on the pass a pair falls in or its
 * neighbours, so a (row, slot)'s output is the same bits whatever else is
 * batched.
 * gpt-oss: each output gets its expert's bias (row e of a bias tensor)
 * before the activation, and the fused activation is its clamped SwiGLU
 * (sl_cuda_mmv_experts_biased); the other models pass neither and run the
 * same arithmetic as before.
 * Trade-off: a prefill step re-reads an expert's rows once per pass of NT
 * <= 8 pairs (from L2 mostly) instead of a tensor-core matmul over its
 * rows; correct and graph-safe first, slower than a grouped GEMM would be
 * for long prompts (docs/CUDA.md). */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mmv_dot.cuh"
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/moe.cuh"

struct moe_mm {
    const uint8_t *W[2];     /* expert 0 of w, of up (PAIR) */
    size_t expert_bytes;     /* ne1 * row_bytes */
    size_t row_bytes;
    int n, rows;             /* ne0, ne1 of one expert */
    const int32_t *off, *pairs;
    const int32_t *used;     /* count, then the experts with pairs */
    int in_div;
    const float *B[2];       /* gpt-oss: bias rows of w, of up (expert e's at e * rows), or NULL */
    bool oai;                /* PAIR: gpt-oss's clamped SwiGLU instead of SiLU */
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
};

template <int TYPE, int NT, bool PAIR, int WPR>
static __global__ void __launch_bounds__(WARPS * SL_WARP) mmv_experts_warp_per_row(moe_mm a)
{
    constexpr int NR = PAIR ? 2 : 1;
    __shared__ float red[WPR > 1 ? WARPS : 1][NR][NT];
    __shared__ int32_t in_rows[NT], out_rows[NT];
    if ((int)blockIdx.y >= a.used[0])
        return;   /* the whole block: fewer experts in use than slots */
    int e = a.used[1 + blockIdx.y];
    int p0 = a.off[e], p1 = a.off[e + 1];
    int lane = threadIdx.x % SL_WARP, warp = threadIdx.x / SL_WARP, part = warp % WPR;
    int r = blockIdx.x * (WARPS / WPR) + warp / WPR;
    bool live = r < a.rows;
    size_t at = (size_t)e * a.expert_bytes + (size_t)(live ? r : 0) * a.row_bytes;
    const uint8_t *W0 = a.W[0] + at, *W1 = PAIR ? a.W[1] + at : NULL;
    int steps = row_steps(a.n), per = (steps + WPR - 1) / WPR;
    int k0 = part * per, k1 = k0 + per < steps ? k0 + per : steps;
    mmv_rows_listed xr = {in_rows, a.ldx};
    for (int pb = p0; pb < p1; pb += NT) {
        int nt = p1 - pb < NT ? p1 - pb : NT;
        __syncthreads();   /* the previous pass is done with the lists and red */
        if (threadIdx.x < nt) {
            int q = a.pairs[pb + threadIdx.x];
            out_rows[threadIdx.x] = q;
            in_rows[threadIdx.x] = q / a.in_div;
        }
        __syncthreads();
        float acc[NR][NT];
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                acc[q][t] = 0.0f;
        if (live) {
            row_dot<TYPE, NT>(W0, a.n, k0, k1, lane, a.x, xr, nt, acc[0]);
            if constexpr (PAIR)
                row_dot<TYPE, NT>(W1, a.n, k0, k1, lane, a.x, xr, nt, acc[NR - 1]);
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
            if (part == 0 && live)
#pragma unroll
                for (int q = 0; q < NR; q++)
#pragma unroll
                    for (int t = 0; t < NT; t++)
#pragma unroll
                        for (int p = 1; p < WPR; p++)
                            v[q][t] = __fadd_rn(v[q][t], red[warp + p][q][t]);
        }
        if (part != 0 || !live || lane != 0)
            continue;
        /* gpt-oss: the expert's bias on each output before the activation */
        float bw = a.B[0] ? a.B[0][(size_t)e * a.rows + r] : 0.0f;
        float bu = PAIR && a.B[1] ? a.B[1][(size_t)e * a.rows + r] : 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float o = v[0][t];
            if (a.B[0])
                o = __fadd_rn(o, bw);
            if constexpr (PAIR) {
                float u = v[NR - 1][t];
                if (a.B[1])
                    u = __fadd_rn(u, bu);
                if (a.oai) {
                    /* sl_cpu_swiglu_oai: alpha 1.702, limit 7, in its order */
                    float g = o < 7.0f ? o : 7.0f, c = u < -7.0f ? -7.0f : u > 7.0f ? 7.0f : u;
                    o = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(1.702f, -g)))), __fadd_rn(c, 1.0f));
                } else {   /* mmv.cu's fused SwiGLU, the same arithmetic */
                    o = __fmul_rn(__fdiv_rn(o, __fadd_rn(1.0f, expf(-o))), u);
                }
            }
            if (t < nt)
                a.y[(int64_t)out_rows[t] * a.ldy + r] = o;
        }
    }
}

bool sl_cuda_mmv_experts_supports(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K: case SL_GGML_TYPE_Q6_K: case SL_GGML_TYPE_Q8_0:
    case SL_GGML_TYPE_Q8_1: case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_0:
    case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_IQ4_XS: case SL_GGML_TYPE_Q2_K:
    case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

template <int TYPE, bool PAIR, int WPR>
static void launch_nt(const moe_mm &a, int nt, int slots, cudaStream_t st)
{
    constexpr int RPB = WARPS / WPR;
    dim3 grid((unsigned)((a.rows + RPB - 1) / RPB), (unsigned)slots);
    dim3 block(WARPS * SL_WARP);
    switch (nt) {
    case 1: mmv_experts_warp_per_row<TYPE, 1, PAIR, WPR><<<grid, block, 0, st>>>(a); break;
    case 2: mmv_experts_warp_per_row<TYPE, 2, PAIR, WPR><<<grid, block, 0, st>>>(a); break;
    case 4: mmv_experts_warp_per_row<TYPE, 4, PAIR, WPR><<<grid, block, 0, st>>>(a); break;
    default: mmv_experts_warp_per_row<TYPE, 8, PAIR, WPR><<<grid, block, 0, st>>>(a); break;
    }
}

template <int TYPE, bool PAIR>
static void launch(const moe_mm &a, int nt, int slots, cudaStream_t st)
{
    switch (warps_per_row(a.n)) {
    case 1: launch_nt<TYPE, PAIR, 1>(a, nt, slots, st); break;
    case 2: launch_nt<TYPE, PAIR, 2>(a, nt, slots, st); break;
    default: launch_nt<TYPE, PAIR, 4>(a, nt, slots, st); break;
    }
}

/* An expert's matrix as mmv.cu checks one (alignment of rows and data). */
static bool expert_ok(const sl_cuda_weight *w, int64_t ldx, const float *x)
{
    return sl_cuda_mmv_experts_supports(w->type) && sl_cuda_mmv_supports(w, ldx, x) && ldx >= w->ne0 &&
           w->ne0 % sl_ggml_block_elems(w->type) == 0;
}

sl_status sl_cuda_mmv_experts(const sl_cuda_weight *w, const sl_cuda_weight *up, int n_expert, const int32_t *off,
                              const int32_t *pairs, const int32_t *used, int64_t R, int in_div, const float *x,
                              int64_t ldx, float *y, int64_t ldy, cudaStream_t stream)
{
    return sl_cuda_mmv_experts_biased(w, up, NULL, NULL, false, n_expert, off, pairs, used, R, in_div, x, ldx, y, ldy,
                                      stream);
}

sl_status sl_cuda_mmv_experts_biased(const sl_cuda_weight *w, const sl_cuda_weight *up, const float *bias,
                                     const float *up_bias, bool swiglu_oai, int n_expert, const int32_t *off,
                                     const int32_t *pairs, const int32_t *used, int64_t R, int in_div, const float *x,
                                     int64_t ldx, float *y, int64_t ldy, cudaStream_t stream)
{
    if ((up_bias && (!up || !bias)) || (swiglu_oai && !up))
        return SL_EINVAL;
    if (R < 1 || R > (1 << 28) || n_expert < 1 || n_expert > SL_CUDA_MOE_MAX_EXPERTS || in_div < 1 ||
        !expert_ok(w, ldx, x) || ldy < w->ne1 || w->ne1 * (int64_t)n_expert >= (1 << 30))
        return SL_EINVAL;
    if (up && (!expert_ok(up, ldx, x) || up->type != w->type || up->ne0 != w->ne0 || up->ne1 != w->ne1 ||
               up->row_bytes != w->row_bytes))
        return SL_EINVAL;
    moe_mm a = {};
    a.W[0] = w->data;
    a.W[1] = up ? up->data : NULL;
    a.row_bytes = w->row_bytes;
    a.expert_bytes = (size_t)w->ne1 * w->row_bytes;
    a.n = (int)w->ne0;
    a.rows = (int)w->ne1;
    a.off = off;
    a.pairs = pairs;
    a.used = used;
    a.in_div = in_div;
    a.B[0] = bias;
    a.B[1] = up_bias;
    a.oai = swiglu_oai;
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    /* pairs per pass from the mean per expert: T*k / n_expert (a choice of
     * speed only, the bits do not depend on it) */
    int64_t mean = (R + n_expert - 1) / n_expert;
    int nt = mean >= 8 ? 8 : mean >= 4 ? 4 : mean >= 2 ? 2 : 1;
    int slots = R < n_expert ? (int)R : n_expert;   /* at most R experts get pairs */
#define GO(TY) up ? launch<TY, true>(a, nt, slots, stream) : launch<TY, false>(a, nt, slots, stream)
    switch (w->type) {
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
