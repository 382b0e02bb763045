/* kernels/cuda/rmsnorm.cu: one 256-thread block per row
 * ("rmsnorm_row_per_block"). The sum of squares runs in double, as on the
 * CPU, with a fixed strided-then-tree order, so a row's result depends on
 * n alone. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm.cuh"

#define THREADS 256

/* The block's part after each thread summed its squares into ss: the fixed
 * tree over the block, then y = x * scale * w for the row. The barrier also
 * orders every read of the row's inputs before any write of y. */
static __device__ __forceinline__ void finish_row(double ss, const float *xr, float *yr, const float *__restrict__ w,
                                                  int64_t n, float eps)
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
    float scale = (float)(1.0 / sqrt(tot / (double)n + (double)eps));
    for (int64_t j = threadIdx.x; j < n; j += THREADS)
        yr[j] = __fmul_rn(__fmul_rn(xr[j], scale), w[j]);
}

static __global__ void __launch_bounds__(THREADS)
rmsnorm_row_per_block(float *y, const float *x, const int32_t *rows_idx, const float *__restrict__ w,
                      int64_t n, float eps)
{
    int64_t i = blockIdx.x, src = rows_idx ? rows_idx[i] : i;
    const float *xr = x + src * n;
    double ss = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += THREADS)
        ss += (double)xr[j] * xr[j];
    finish_row(ss, xr, y + i * n, w, n, eps);
}

/* y may be delta: finish_row's barrier comes after every read of delta */
static __global__ void __launch_bounds__(THREADS)
add_rmsnorm_row_per_block(float *x, const float *delta, float *y, const float *__restrict__ w, int64_t n, float eps)
{
    int64_t i = blockIdx.x;
    float *xr = x + i * n;
    const float *dr = delta + i * n;
    double ss = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += THREADS) {
        float v = __fadd_rn(xr[j], dr[j]);
        xr[j] = v;
        ss += (double)v * v;
    }
    finish_row(ss, xr, y + i * n, w, n, eps);
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
