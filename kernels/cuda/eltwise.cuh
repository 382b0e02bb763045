/* kernels/cuda/eltwise.cuh: element-wise ops of the forward pass: the
 * residual add, a bias row over T rows, SwiGLU, GELU-tanh gating, scaling and soft-capping (the
 * CPU's sl_cpu_add, sl_cpu_swiglu, sl_cpu_geglu_tanh, sl_cpu_softcap).
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream.
 * All pointers are device float32; launches are async; each returns SL_OK or
 * SL_EBACKEND (launch failed, logged). */
#ifndef SL_CUDA_ELTWISE_CUH
#define SL_CUDA_ELTWISE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "shared/status.h"

/* y[i] += x[i] for i < n. */
sl_status sl_cuda_add(float *y, const float *x, int64_t n, cudaStream_t stream);

/* y[t * ldy + i] += b[i] for t < T, i < n: a bias row added to T rows
 * (gpt-oss's attn_output and router biases). SL_EINVAL for ldy < n. */
sl_status sl_cuda_add_rows(float *y, int64_t ldy, const float *b, int64_t T, int64_t n, cudaStream_t stream);

/* gate[i] = silu(gate[i]) * up[i] for i < n (in place). */
sl_status sl_cuda_swiglu(float *gate, const float *up, int64_t n, cudaStream_t stream);

/* gate[i] = gelu_tanh(gate[i]) * up[i] for i < n (in place). */
sl_status sl_cuda_geglu_tanh(float *gate, const float *up, int64_t n, cudaStream_t stream);

/* x[i] *= s for i < n. */
sl_status sl_cuda_scale(float *x, float s, int64_t n, cudaStream_t stream);

/* x[i] = cap * tanh(x[i] / cap) for i < n (cap > 0). */
sl_status sl_cuda_softcap(float *x, float cap, int64_t n, cudaStream_t stream);

#endif
