/* kernels/cuda/mmv_moe.cu: the grouped expert matmul of MoE layers
 * (moe.cuh sl_cuda_mmv_experts): mmv.cu's warp-per-row dot products
 * (mmv_dot.cuh) over the rows routed to each expert, the experts read in
 * place from their 3-D tensor (no float16 copies: a 30B-A3B's experts are
 * 18 GB at Q4_K_M and would be 60 GB).
 * Runs in the worker process, launched on the backend stream.
 *
 * Grid: (blocks of moe_rows_per_block weight rows, min(n_expert, T*k) expert
 * slots), fixed by the shapes, so a step holding it replays as a CUDA graph
 * whatever the routing chose. Slot j serves the j-th expert in use (the
 * grouping lists them, moe.cu) and reads its pair range; a slot past the
 * count returns at once, the others run passes of NT pairs: the
 * pass's input and output row indices go to shared memory, then the NT
 * activation rows themselves (dynamic shared memory, NT * n floats), and
 * each warp dots its MOE_RPW weight rows with them; lane 0 stores each
 * result at its pair's row of y.
 * Why staged: every warp used to read its NT rows of x from global memory
 * through the list. A dense mmv's blocks all read the same few rows (they
 * stay in L1); here each block serves another expert's tokens, 16 blocks an
 * SM each touching NT * n * 4 bytes (32-64 KiB), so x came from L2 once per
 * warp, ~28x the weight bytes. An H200 profile (2026-12-02,
 * SLUICE_CUDA_PROFILE=1 enginebench, a 4-layer cut of the 30B-A3B shape at
 * Q4_K_M) had each of the two expert launches at 0.72 ms a layer at decode
 * batch 64 (their ~226 MB of gate+up weights: 0.05 ms of bandwidth) and
 * 5.6 ms at a 512-row prefill. Staged, a block copies the rows once and 32
 * weight rows read them (8 warps, MOE_RPW = 4 rows each). Where NT rows of
 * n do not fit the device's opt-in shared memory the launch takes fewer
 * rows per pass, or for n past ~58,000 the global path. Which path runs is
 * chosen by the step's token rows T: staged for T >= 8
 * (SL_CUDA_MOE_STAGE_MIN_T), global below (likely because a staged
 * block's 32 weight rows leave a quarter of the blocks, 192 for one
 * decode row's gate/up, too few to fill the GPU; not profiled): the H200's
 * self-test (2026-12-02) timed the two expert launches of the 30B-A3B
 * shape at T = 1 0.036 ms staged against 0.032 ms global, at T = 64 1.19
 * against 1.375, at T = 512 6.76 against 7.86. SLUICE_CUDA_MOE_STAGE=1 or
 * =0 (read once) forces one path, sl_cuda_mmv_experts_stage too, for the
 * self-test's and the A/B runs; since both paths give the same bits the
 * rule cannot break batch invariance.
 * Reduction order: row_dot's, which depends on the type and the row length
 * only (mmv.cu's header), never on the pass a pair falls in or its
 * neighbours, so a (row, slot)'s output is the same bits whatever else is
 * batched; staging changes where x is read from, not the arithmetic or its
 * order, so both paths give the same bits (moe-emulate, the selftest).
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

#include <stdlib.h>

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

/* Weight rows each warp (or WPR warps) runs per pass when the activation
 * rows are staged: a staged row then serves RPW * WARPS / WPR weight rows
 * of the block (64 KiB of x for 32 rows at n 2,048), not 8. */
#define MOE_RPW 4

/* Weight rows one block covers. */
static constexpr __host__ __device__ int moe_rows_per_block(int wpr, bool stage)
{
    return (stage ? MOE_RPW : 1) * (WARPS / wpr);
}

/* STAGE: the pass's nt activation rows are copied to dynamic shared memory
 * (nt * n floats, row t at t * n) once per block and every row_dot reads
 * them there; without it each warp reads them from global memory through
 * the list (steps of fewer than 8 rows).
 * Either way a (row, pair) sees the same values in the same order. */
template <int TYPE, int NT, bool PAIR, int WPR, bool STAGE>
static __global__ void __launch_bounds__(WARPS * SL_WARP) mmv_experts_warp_per_row(moe_mm a)
{
    constexpr int NR = PAIR ? 2 : 1, RPW = STAGE ? MOE_RPW : 1;
    __shared__ float red[RPW][WPR > 1 ? WARPS : 1][NR][NT];
    __shared__ int32_t in_rows[NT], out_rows[NT];
    extern __shared__ float4 moe_x4[];
    if ((int)blockIdx.y >= a.used[0])
        return;   /* the whole block: fewer experts in use than slots */
    int e = a.used[1 + blockIdx.y];
    int p0 = a.off[e], p1 = a.off[e + 1];
    int lane = threadIdx.x % SL_WARP, warp = threadIdx.x / SL_WARP, part = warp % WPR;
    int steps = row_steps(a.n), per = (steps + WPR - 1) / WPR;
    int k0 = part * per, k1 = k0 + per < steps ? k0 + per : steps;
    mmv_rows_listed xr = {in_rows, a.ldx};
    mmv_rows_strided xs = {a.n};
    const float *sx = (const float *)moe_x4;
    for (int pb = p0; pb < p1; pb += NT) {
        int nt = p1 - pb < NT ? p1 - pb : NT;
        __syncthreads();   /* the previous pass is done with the lists, red and the staged rows */
        if (threadIdx.x < nt) {
            int q = a.pairs[pb + threadIdx.x];
            out_rows[threadIdx.x] = q;
            in_rows[threadIdx.x] = q / a.in_div;
        }
        __syncthreads();
        if constexpr (STAGE) {
            /* float4 copies: n is a multiple of 32 and x's rows 16-byte aligned (sl_cuda_mmv_supports) */
            int n4 = a.n / 4;
            for (int i = threadIdx.x; i < nt * n4; i += WARPS * SL_WARP) {
                int t = i / n4;
                moe_x4[i] = ((const float4 *)(a.x + (int64_t)in_rows[t] * a.ldx))[i - t * n4];
            }
            __syncthreads();
        }
        for (int j = 0; j < RPW; j++) {   /* the same count in every warp: the barriers below stay uniform */
            int r = blockIdx.x * moe_rows_per_block(WPR, STAGE) + j * (WARPS / WPR) + warp / WPR;
            bool live = r < a.rows;
            size_t at = (size_t)e * a.expert_bytes + (size_t)(live ? r : 0) * a.row_bytes;
            const uint8_t *W0 = a.W[0] + at, *W1 = PAIR ? a.W[1] + at : NULL;
            float acc[NR][NT];
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int t = 0; t < NT; t++)
                    acc[q][t] = 0.0f;
            if (live) {
                if constexpr (STAGE) {
                    row_dot<TYPE, NT>(W0, a.n, k0, k1, lane, sx, xs, nt, acc[0]);
                    if constexpr (PAIR)
                        row_dot<TYPE, NT>(W1, a.n, k0, k1, lane, sx, xs, nt, acc[NR - 1]);
                } else {
                    row_dot<TYPE, NT>(W0, a.n, k0, k1, lane, a.x, xr, nt, acc[0]);
                    if constexpr (PAIR)
                        row_dot<TYPE, NT>(W1, a.n, k0, k1, lane, a.x, xr, nt, acc[NR - 1]);
                }
            }
            float v[NR][NT];
#pragma unroll
            for (int q = 0; q < NR; q++)
#pragma unroll
                for (int t = 0; t < NT; t++)
                    v[q][t] = sl_warp_sum(acc[q][t]);
            if constexpr (WPR > 1) {
                /* red[j]: row j's partial sums, so no barrier is needed before row j + 1 writes its own */
                if (lane == 0)
#pragma unroll
                    for (int q = 0; q < NR; q++)
#pragma unroll
                        for (int t = 0; t < NT; t++)
                            red[j][warp][q][t] = v[q][t];
                __syncthreads();
                if (part == 0 && live)
#pragma unroll
                    for (int q = 0; q < NR; q++)
#pragma unroll
                        for (int t = 0; t < NT; t++)
#pragma unroll
                            for (int p = 1; p < WPR; p++)
                                v[q][t] = __fadd_rn(v[q][t], red[j][warp + p][q][t]);
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
                        o = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(1.702f, -g)))),
                                      __fadd_rn(c, 1.0f));
                    } else {   /* mmv.cu's fused SwiGLU, the same arithmetic */
                        o = __fmul_rn(__fdiv_rn(o, __fadd_rn(1.0f, expf(-o))), u);
                    }
                }
                if (t < nt)
                    a.y[(int64_t)out_rows[t] * a.ldy + r] = o;
            }
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

/* Shared memory the staged kernels may take beyond their static arrays
 * (red and the lists: at most 2,112 bytes): the device's opt-in limit less
 * 4 KiB, 0 before it is known. */
static size_t stage_limit;

/* Whether to stage: SLUICE_CUDA_MOE_STAGE=1 always, =0 never (read once),
 * else by the step's rows, T >= SL_CUDA_MOE_STAGE_MIN_T (the H200's
 * self-test timed the staged kernel slower at T = 1, 0.036 against 0.032
 * ms, and faster at 64 and 512); sl_cuda_mmv_experts_stage overrides it.
 * -2: not read yet. */
static int stage_mode = -2;

static int stage_mode_now(void)
{
    if (stage_mode == -2) {
        const char *e = getenv("SLUICE_CUDA_MOE_STAGE");
        stage_mode = e && !strcmp(e, "1") ? 1 : e && !strcmp(e, "0") ? 0 : -1;
    }
    return stage_mode;
}

static bool stage_wanted(int64_t T)
{
    int m = stage_mode_now();
    return m < 0 ? T >= SL_CUDA_MOE_STAGE_MIN_T : m != 0;
}

int sl_cuda_mmv_experts_stage(int mode)
{
    int was = stage_mode_now();
    stage_mode = mode < 0 ? -1 : mode != 0;
    return was;
}

/* The first staged launch of a kernel may come inside a decode graph's
 * capture (a batch of 8 decoding before any prompt step staged): the
 * queries and the opt-in below are not stream work, but a thread-local
 * capture would be invalidated by a call it deems unsafe, and the graphs
 * turned off. So they run with the thread's capture mode relaxed, then
 * restored. */
static cudaStreamCaptureMode relax_capture(void)
{
    cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&m);
    return m;
}

static void restore_capture(cudaStreamCaptureMode m)
{
    cudaThreadExchangeStreamCaptureMode(&m);
}

/* The opt-in limit, once (the worker drives one device). Any error: 0, the
 * global path. */
static size_t stage_bytes_max(void)
{
    static bool asked;
    if (!asked) {
        cudaStreamCaptureMode m = relax_capture();
        int dev = 0, optin = 0;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
            optin > 4096)
            stage_limit = (size_t)optin - 4096;
        cudaGetLastError();   /* a failed query must not look like a failed launch */
        restore_capture(m);
        asked = true;
    }
    return stage_limit;
}

template <int TYPE, int NT, bool PAIR, int WPR, bool STAGE>
static void launch_one(const moe_mm &a, int slots, size_t smem, cudaStream_t st)
{
    if constexpr (STAGE) {
        /* above 48 KiB a kernel must opt in: once per kernel, to the most any launch asks */
        static bool allowed;
        if (!allowed) {
            int lim = (int)stage_bytes_max();
            cudaStreamCaptureMode m = relax_capture();
            cudaError_t e = cudaFuncSetAttribute(mmv_experts_warp_per_row<TYPE, NT, PAIR, WPR, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, lim);
            if (e != cudaSuccess)
                cudaGetLastError();   /* refused: this launch takes the global path, the next asks again */
            restore_capture(m);
            if (e != cudaSuccess) {
                launch_one<TYPE, NT, PAIR, WPR, false>(a, slots, 0, st);
                return;
            }
            allowed = true;
        }
    }
    constexpr int RPB = moe_rows_per_block(WPR, STAGE);
    dim3 grid((unsigned)((a.rows + RPB - 1) / RPB), (unsigned)slots);
    mmv_experts_warp_per_row<TYPE, NT, PAIR, WPR, STAGE><<<grid, dim3(WARPS * SL_WARP), smem, st>>>(a);
}

template <int TYPE, bool PAIR, int WPR, bool STAGE>
static void launch_nt(const moe_mm &a, int nt, int slots, cudaStream_t st)
{
    size_t smem = STAGE ? (size_t)nt * a.n * 4 : 0;
    switch (nt) {
    case 1: launch_one<TYPE, 1, PAIR, WPR, STAGE>(a, slots, smem, st); break;
    case 2: launch_one<TYPE, 2, PAIR, WPR, STAGE>(a, slots, smem, st); break;
    case 4: launch_one<TYPE, 4, PAIR, WPR, STAGE>(a, slots, smem, st); break;
    default: launch_one<TYPE, 8, PAIR, WPR, STAGE>(a, slots, smem, st); break;
    }
}

/* Staged where nt rows of n floats fit the opt-in limit, with fewer rows
 * per pass where only those fit (speed only: the bits do not depend on nt),
 * else, or when staging is off, the global path at the nt asked (as before
 * staging, so an A/B compares with what ran then). */
template <int TYPE, bool PAIR, int WPR>
static void launch_staged(const moe_mm &a, int nt, int slots, bool stage, cudaStream_t st)
{
    size_t lim = stage ? stage_bytes_max() : 0;
    int ns = nt;
    while (ns > 1 && (size_t)ns * a.n * 4 > lim)
        ns /= 2;
    if ((size_t)ns * a.n * 4 <= lim)
        launch_nt<TYPE, PAIR, WPR, true>(a, ns, slots, st);
    else
        launch_nt<TYPE, PAIR, WPR, false>(a, nt, slots, st);
}

template <int TYPE, bool PAIR>
static void launch(const moe_mm &a, int nt, int slots, bool stage, cudaStream_t st)
{
    switch (warps_per_row(a.n)) {
    case 1: launch_staged<TYPE, PAIR, 1>(a, nt, slots, stage, st); break;
    case 2: launch_staged<TYPE, PAIR, 2>(a, nt, slots, stage, st); break;
    default: launch_staged<TYPE, PAIR, 4>(a, nt, slots, stage, st); break;
    }
}

/* An expert's matrix as mmv.cu checks one (alignment of rows and data). */
static bool expert_ok(const sl_cuda_weight *w, int64_t ldx, const float *x)
{
    return sl_cuda_mmv_experts_supports(w->type) && sl_cuda_mmv_supports(w, ldx, x) && ldx >= w->ne0 &&
           w->ne0 % sl_ggml_block_elems(w->type) == 0;
}

sl_status sl_cuda_mmv_experts(const sl_cuda_weight *w, const sl_cuda_weight *up, int n_expert, const int32_t *off,
                              const int32_t *pairs, const int32_t *used, int64_t R, int64_t T, int in_div,
                              const float *x, int64_t ldx, float *y, int64_t ldy, cudaStream_t stream)
{
    return sl_cuda_mmv_experts_biased(w, up, NULL, NULL, false, n_expert, off, pairs, used, R, T, in_div, x, ldx, y,
                                      ldy, stream);
}

sl_status sl_cuda_mmv_experts_biased(const sl_cuda_weight *w, const sl_cuda_weight *up, const float *bias,
                                     const float *up_bias, bool swiglu_oai, int n_expert, const int32_t *off,
                                     const int32_t *pairs, const int32_t *used, int64_t R, int64_t T, int in_div,
                                     const float *x, int64_t ldx, float *y, int64_t ldy, cudaStream_t stream)
{
    if ((up_bias && (!up || !bias)) || (swiglu_oai && !up))
        return SL_EINVAL;
    if (R < 1 || R > (1 << 28) || T < 1 || T > R || n_expert < 1 || n_expert > SL_CUDA_MOE_MAX_EXPERTS || in_div < 1 ||
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
    bool stage = stage_wanted(T);
#define GO(TY) up ? launch<TY, true>(a, nt, slots, stage, stream) : launch<TY, false>(a, nt, slots, stage, stream)
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
