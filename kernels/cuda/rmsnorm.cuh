/* kernels/cuda/rmsnorm.cuh: RMSNorm of whole rows (the CPU's sl_cpu_rmsnorm).
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream. */
#ifndef SL_CUDA_RMSNORM_CUH
#define SL_CUDA_RMSNORM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "shared/status.h"

/* y[i*n + j] = x[src(i)*n + j] * rsqrt(mean(x_src^2) + eps) * w[j] for
 * i < rows, where src(i) = rows_idx ? rows_idx[i] : i (rows_idx: device,
 * gathers the rows whose logits are asked). y may equal x only when rows_idx
 * is NULL. Async; SL_OK or SL_EBACKEND (launch failed, logged). */
sl_status sl_cuda_rmsnorm(float *y, const float *x, const int32_t *rows_idx, const float *w, int64_t rows,
                          int64_t n, float eps, cudaStream_t stream);

/* The residual add and the next RMSNorm in one launch: x += delta, then
 * y = rmsnorm(x) * w, row by row (the bits of sl_cuda_add followed by
 * sl_cuda_rmsnorm). y may equal delta: a row's delta is read before any of
 * its y is written. */
sl_status sl_cuda_add_rmsnorm(float *x, const float *delta, float *y, const float *w, int64_t rows, int64_t n,
                              float eps, cudaStream_t stream);

#endif
