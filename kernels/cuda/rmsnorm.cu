/* kernels/cuda/rmsnorm.cu: one 256-thread block per row
 * ("rmsnorm_row_per_block"). The sum of squares runs in double, as on the
 * CPU, with a fixed strided-then-tree order, so a row's result depends on
 * n alone. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm.cuh"

#define THREADS 256

#define PER 16   /* elements a thread holds in registers: rows up to PER * THREADS = 4,096 in one pass */

/* The fixed tree over the block of the threads' sums of squares, then the
 * row's scale. The barrier also orders every read of the row's inputs
 * before any write of y. */
static __device__ __forceinline__ float row_scale(double ss, int64_t n, float eps)
{
    __shared__ double part[THREADS / SL_WARP];
    ss = sl_warp_sum_double(ss);
    if (threadIdx.x % SL_WARP == 0)
        part[threadIdx.x / SL_WARP] = ss;
    __syncthreads();
    double tot = 0.0;
#pragma unroll
    for (int k = 0; k < THREADS / SL_WARP; k++)
        tot += part[k];
    return (float)(1.0 / sqrt(tot / (double)n + (double)eps));
}

/* One row: v = x (+ delta, written back to x when ADD), ss = sum of v^2 in
 * the thread's element order j = tid, tid + THREADS, ..., then y = v *
 * scale * w. A row of up to PER * THREADS elements is read once: x, delta
 * and w all in one batch of loads ahead of any store (the compiler cannot
 * move a load of x past a store to y it does not know to be elsewhere, so
 * a load-store loop waits out one memory latency per element: 5-7 us per
 * 2,048-element row on an H200). Longer rows loop over passes of PER and
 * read x (as written) and w again for y. Same arithmetic in the same order either way,
 * so a row's result depends on n alone. */
template <bool ADD>
static __device__ __forceinline__ void norm_row(const float *xr, float *xw, const float *dr, float *yr,
                                                const float *__restrict__ w, int64_t n, float eps)
{
    bool one = n <= PER * THREADS;
    float v[PER], wv[PER];
    double ss = 0.0;
    for (int64_t base = threadIdx.x; base < n; base += PER * THREADS) {
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = base + k * THREADS;
            v[k] = j < n ? (ADD ? __fadd_rn(xr[j], dr[j]) : xr[j]) : 0.0f;
            wv[k] = j < n && one ? w[j] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = base + k * THREADS;
            if (j < n) {
                if (ADD)
                    xw[j] = v[k];
                ss += (double)v[k] * v[k];
            }
        }
    }
    float scale = row_scale(ss, n, eps);
    if (one) {
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = threadIdx.x + k * THREADS;
            if (j < n)
                yr[j] = __fmul_rn(__fmul_rn(v[k], scale), wv[k]);
        }
        return;
    }
    for (int64_t base = threadIdx.x; base < n; base += PER * THREADS) {
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = base + k * THREADS;
            v[k] = j < n ? __fmul_rn(__fmul_rn(xr[j], scale), w[j]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = base + k * THREADS;
            if (j < n)
                yr[j] = v[k];
        }
    }
}

static __global__ void __launch_bounds__(THREADS)
rmsnorm_row_per_block(float *y, const float *x, const int32_t *rows_idx, const float *__restrict__ w,
                      int64_t n, float eps)
{
    int64_t i = blockIdx.x, src = rows_idx ? rows_idx[i] : i;
    norm_row<false>(x + src * n, NULL, NULL, y + i * n, w, n, eps);
}

/* y may be delta: row_scale's barrier comes after every read of delta */
static __global__ void __launch_bounds__(THREADS)
add_rmsnorm_row_per_block(float *x, const float *delta, float *y, const float *__restrict__ w, int64_t n, float eps)
{
    int64_t i = blockIdx.x;
    norm_row<true>(x + i * n, x + i * n, delta + i * n, y + i * n, w, n, eps);
}

sl_status sl_cuda_add_rmsnorm(float *x, const float *delta, float *y, const float *w, int64_t rows, int64_t n,
                              float eps, cudaStream_t stream)
{
    if (rows < 1)
        return SL_OK;
    add_rmsnorm_row_per_block<<<(unsigned)rows, THREADS, 0, stream>>>(x, delta, y, w, n, eps);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_rmsnorm(float *y, const float *x, const int32_t *rows_idx, const float *w, int64_t rows,
                          int64_t n, float eps, cudaStream_t stream)
{
    if (rows < 1)
        return SL_OK;
    rmsnorm_row_per_block<<<(unsigned)rows, THREADS, 0, stream>>>(y, x, rows_idx, w, n, eps);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
