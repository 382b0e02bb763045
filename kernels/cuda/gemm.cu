/* kernels/cuda/gemm.cu: see gemm.cuh. */
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/matmul_unit.cuh"

#define THREADS 256
#define WORKSPACE (32u << 20)   /* cuBLAS workspace: fixed, so captures never allocate */

struct sl_cuda_gemm {
    cublasHandle_t handle;
    void *workspace;
    __half *xh;                 /* (max_x) activations in float16 */
    float *scale;               /* (max_rows) each row's power-of-two divisor (to_f16_rows) */
    __half *wh;                 /* (scratch) a streamed matrix's rows in float16, or NULL */
    int64_t max_x, max_rows, scratch;
};

void sl_cuda_gemm_destroy(sl_cuda_gemm *g)
{
    if (!g)
        return;
    if (g->handle)
        cublasDestroy(g->handle);
    cudaFree(g->workspace);
    cudaFree(g->xh);
    cudaFree(g->scale);
    cudaFree(g->wh);
    free(g);
}

sl_status sl_cuda_gemm_create(cudaStream_t stream, int64_t max_x, int64_t max_rows, int64_t scratch,
                              sl_cuda_gemm **out, char *err, size_t err_len)
{
    *out = NULL;
    sl_cuda_gemm *g = (sl_cuda_gemm *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_len, "cuda gemm: out of host memory");
        return SL_ENOMEM;
    }
    g->max_x = max_x;
    g->max_rows = max_rows;
    g->scratch = scratch;
    cublasStatus_t cs = cublasCreate(&g->handle);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        g->handle = NULL;
        snprintf(err, err_len, "cuda gemm: cublasCreate failed (status %d)", (int)cs);
        sl_cuda_gemm_destroy(g);
        return SL_EBACKEND;
    }
    if (cudaMalloc(&g->workspace, WORKSPACE) != cudaSuccess ||
        cudaMalloc((void **)&g->xh, (size_t)max_x * sizeof(__half)) != cudaSuccess ||
        cudaMalloc((void **)&g->scale, (size_t)max_rows * sizeof(float)) != cudaSuccess ||
        (scratch > 0 && cudaMalloc((void **)&g->wh, (size_t)scratch * sizeof(__half)) != cudaSuccess)) {
        cudaGetLastError();
        snprintf(err, err_len, "cuda gemm: workspace, %lld float16 activations and %lld float16 weights do not fit",
                 (long long)max_x, (long long)scratch);
        sl_cuda_gemm_destroy(g);
        return SL_ENOMEM;
    }
    if (cublasSetStream(g->handle, stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(g->handle, g->workspace, WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuda gemm: binding the cuBLAS stream and workspace failed");
        sl_cuda_gemm_destroy(g);
        return SL_EBACKEND;
    }
    *out = g;
    return SL_OK;
}

size_t sl_cuda_gemm_bytes(const sl_cuda_weight *w)
{
    return (size_t)w->ne0 * (size_t)w->ne1 * sizeof(__half);
}

/* One thread per 32-element unit: the small-batch kernel's decoder. A
 * whole unit of a row whose float16 start is 16-byte aligned (n % 8 == 0)
 * goes out in four 16-byte stores: this kernel also runs per step for the
 * streamed matrices, where its store traffic is most of its time. */
template <int TYPE>
static __global__ void __launch_bounds__(THREADS)
dequant_f16(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n, int64_t rows, __half *__restrict__ dst)
{
    int64_t units = (n + UNIT - 1) / UNIT;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < units * rows; i += (int64_t)gridDim.x * THREADS) {
        int64_t r = i / units, u = i % units;
        unit d;
        decode_unit<TYPE>(W + r * row_bytes, u, n, d);
        __half *o = dst + r * n + u * UNIT;
        if (n % 8 == 0 && (u + 1) * UNIT <= n) {
#pragma unroll
            for (int k = 0; k < UNIT; k += 8) {
                union { uint4 v; __half2 h[4]; } pk;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    pk.h[j] = __halves2half2(__float2half_rn(unit_elem(d, k + 2 * j)),
                                             __float2half_rn(unit_elem(d, k + 2 * j + 1)));
                *(uint4 *)(o + k) = pk.v;
            }
            continue;
        }
        for (int k = 0; k < UNIT && u * UNIT + k < n; k++)
            o[k] = __float2half_rn(unit_elem(d, k));   /* the host dequantizer's float, then rounded */
    }
}

/* Rows [r0, r0 + nr) of w in float16 at dst (nr x ne0, row-major). */
static sl_status dequant_rows(const sl_cuda_weight *w, int64_t r0, int64_t nr, __half *dst, cudaStream_t stream)
{
    int64_t units = (w->ne0 + UNIT - 1) / UNIT * nr;
    unsigned grid = (unsigned)((units + THREADS - 1) / THREADS < 65536 ? (units + THREADS - 1) / THREADS : 65536);
    const uint8_t *src = w->data + (size_t)r0 * w->row_bytes;
#define DQ(TY) dequant_f16<TY><<<grid, THREADS, 0, stream>>>(src, w->row_bytes, w->ne0, nr, dst)
    switch (w->type) {
    case SL_GGML_TYPE_F32: DQ(SL_GGML_TYPE_F32); break;
    case SL_GGML_TYPE_F16: DQ(SL_GGML_TYPE_F16); break;
    case SL_GGML_TYPE_BF16: DQ(SL_GGML_TYPE_BF16); break;
    case SL_GGML_TYPE_Q8_0: DQ(SL_GGML_TYPE_Q8_0); break;
    case SL_GGML_TYPE_Q4_0: DQ(SL_GGML_TYPE_Q4_0); break;
    case SL_GGML_TYPE_Q4_K: DQ(SL_GGML_TYPE_Q4_K); break;
    case SL_GGML_TYPE_Q5_K: DQ(SL_GGML_TYPE_Q5_K); break;
    case SL_GGML_TYPE_Q6_K: DQ(SL_GGML_TYPE_Q6_K); break;
    case SL_GGML_TYPE_Q4_1: DQ(SL_GGML_TYPE_Q4_1); break;
    case SL_GGML_TYPE_Q5_0: DQ(SL_GGML_TYPE_Q5_0); break;
    case SL_GGML_TYPE_Q5_1: DQ(SL_GGML_TYPE_Q5_1); break;
    case SL_GGML_TYPE_IQ4_NL: DQ(SL_GGML_TYPE_IQ4_NL); break;
    case SL_GGML_TYPE_Q8_1: DQ(SL_GGML_TYPE_Q8_1); break;
    case SL_GGML_TYPE_Q2_K: DQ(SL_GGML_TYPE_Q2_K); break;
    case SL_GGML_TYPE_Q3_K: DQ(SL_GGML_TYPE_Q3_K); break;
    case SL_GGML_TYPE_IQ4_XS: DQ(SL_GGML_TYPE_IQ4_XS); break;
    case SL_GGML_TYPE_MXFP4: DQ(SL_GGML_TYPE_MXFP4); break;
    default: return SL_EINVAL;
    }
#undef DQ
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_gemm_dequant(const sl_cuda_weight *w, __half *dst, cudaStream_t stream)
{
    return dequant_rows(w, 0, w->ne1, dst, stream);
}

int64_t sl_cuda_gemm_stream_rows(const sl_cuda_gemm *g, const sl_cuda_weight *w)
{
    int64_t r = g->scratch / w->ne0;
    return r < w->ne1 ? r : w->ne1;
}

/* The activations in float16, one block per row. float16 ends at 65504, and
 * real models have rare activations in the thousands: a row whose largest
 * magnitude passes 2^14 is divided by a power of two first (exact) and its
 * outputs multiplied back by scale_rows; every other row has scale 1, so
 * its bits do not depend on the others. Padding rows T .. Tp are zeros. */
static __global__ void __launch_bounds__(THREADS)
to_f16_rows(__half *__restrict__ dst, float *__restrict__ scale, const float *__restrict__ x, int64_t ldx, int64_t n,
            int64_t T)
{
    __shared__ float part[THREADS / SL_WARP];
    int64_t t = blockIdx.x;
    __half *d = dst + t * n;
    if (t >= T) {
        for (int64_t i = threadIdx.x; i < n; i += THREADS)
            d[i] = __float2half_rn(0.0f);
        if (threadIdx.x == 0)
            scale[t] = 1.0f;
        return;
    }
    const float *xr = x + t * ldx;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += THREADS)
        m = fmaxf(m, fabsf(xr[i]));
    m = sl_warp_max(m);
    if (threadIdx.x % SL_WARP == 0)
        part[threadIdx.x / SL_WARP] = m;
    __syncthreads();
    float amax = part[0];
#pragma unroll
    for (int k = 1; k < THREADS / SL_WARP; k++)
        amax = fmaxf(amax, part[k]);
    /* s = 2^e with amax / s <= 2^14 (NaN and inf rows keep s = 1 and stay what they are) */
    float s = 1.0f;
    if (amax > 16384.0f && amax <= 3.0e38f)
        s = exp2f(ceilf(log2f(amax / 16384.0f)));
    float inv = 1.0f / s;   /* exact: a power of two */
    for (int64_t i = threadIdx.x; i < n; i += THREADS)
        d[i] = __float2half_rn(xr[i] * inv);
    if (threadIdx.x == 0)
        scale[t] = s;
}

/* y row t *= scale[t] where the row was scaled down (one block per row). */
static __global__ void __launch_bounds__(THREADS)
scale_rows(float *__restrict__ y, int64_t ldy, int64_t rows, const float *__restrict__ scale)
{
    int64_t t = blockIdx.x;
    float s = scale[t];
    if (s == 1.0f)
        return;
    for (int64_t i = threadIdx.x; i < rows; i += THREADS)
        y[t * ldy + i] *= s;
}

int sl_cuda_gemm_cols(void)
{
    static int cols;   /* fixed for the process: batch invariance needs one shape */
    if (!cols) {
        const char *e = getenv("SLUICE_CUDA_GEMM_COLS");
        int v = e ? atoi(e) : SL_GEMM_COLS_DEFAULT;
        cols = v == 64 || v == 128 || v == 256 ? v : SL_GEMM_COLS_DEFAULT;
    }
    return cols;
}

sl_status sl_cuda_gemm_matmul_multi(sl_cuda_gemm *g, const sl_cuda_weight *const *w, int n_w, const float *x,
                                    int64_t ldx, int64_t T, float *const *y, const int64_t *ldy)
{
    int64_t cols = sl_cuda_gemm_cols();
    int64_t n = w[0]->ne0, Tp = (T + cols - 1) / cols * cols;
    if (T < 1 || Tp * n > g->max_x || Tp > g->max_rows || ldx < n || n > 0x7fffffff)
        return SL_EINVAL;
    for (int i = 0; i < n_w; i++)
        if ((!w[i]->f16 && sl_cuda_gemm_stream_rows(g, w[i]) < 1) || w[i]->ne0 != n || ldy[i] < w[i]->ne1 ||
            w[i]->ne1 > 0x7fffffff || ldy[i] > 0x7fffffff)
            return SL_EINVAL;
    cudaStream_t st;
    if (cublasGetStream(g->handle, &st) != CUBLAS_STATUS_SUCCESS)
        return SL_EBACKEND;
    to_f16_rows<<<(unsigned)Tp, THREADS, 0, st>>>(g->xh, g->scale, x, ldx, n, T);
    SL_CUDA_CHECK_LAUNCH();
    /* Column-major, as cuBLAS sees it: C (m x cols, ld ldy) = op(A) B with
     * A = m row-major rows of n float16 weights read as column-major n x m
     * (lda n), op = transpose; B = the row-major cols x n activations read
     * as column-major n x cols (ldb n). One call per `cols` rows and per
     * slab of weight rows: a resident copy is one slab of all ne1 rows; a
     * streamed matrix is dequantized into the scratch slab by slab, each
     * slab's rows fixed by the matrix's shape, so a row's result still
     * does not depend on T. */
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < n_w; i++) {
        int64_t slab = w[i]->f16 ? w[i]->ne1 : sl_cuda_gemm_stream_rows(g, w[i]);
        for (int64_t r0 = 0; r0 < w[i]->ne1; r0 += slab) {
            int64_t m = w[i]->ne1 - r0 < slab ? w[i]->ne1 - r0 : slab;
            const __half *a = (const __half *)w[i]->f16;
            if (!a) {
                sl_status rc = dequant_rows(w[i], r0, m, g->wh, st);
                if (rc != SL_OK)
                    return rc;
                a = g->wh;
            }
            for (int64_t c = 0; c < Tp; c += cols) {
                cublasStatus_t cs = cublasGemmEx(g->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)cols, (int)n,
                                                 &one, a, CUDA_R_16F, (int)n, g->xh + c * n, CUDA_R_16F, (int)n,
                                                 &zero, y[i] + c * ldy[i] + r0, CUDA_R_32F, (int)ldy[i],
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                if (cs != CUBLAS_STATUS_SUCCESS) {
                    fprintf(stderr, "cuda: cublasGemmEx (%lld x %lld x %lld) failed: status %d\n", (long long)m,
                            (long long)cols, (long long)n, (int)cs);
                    return SL_EBACKEND;
                }
            }
        }
        scale_rows<<<(unsigned)T, THREADS, 0, st>>>(y[i], ldy[i], w[i]->ne1, g->scale);
        SL_CUDA_CHECK_LAUNCH();
    }
    return SL_OK;
}

sl_status sl_cuda_gemm_matmul(sl_cuda_gemm *g, const sl_cuda_weight *w, const __half *wh, const float *x,
                              int64_t ldx, int64_t T, float *y, int64_t ldy)
{
    sl_cuda_weight v = *w;
    v.f16 = wh;
    const sl_cuda_weight *ws[1] = {&v};
    float *ys[1] = {y};
    return sl_cuda_gemm_matmul_multi(g, ws, 1, x, ldx, T, ys, &ldy);
}
