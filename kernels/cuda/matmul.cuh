/* kernels/cuda/matmul.cuh: Y = X W^T with W kept in its GGUF type on the
 * device (the CUDA twin of the CPU backend's matmul over vec_dot_multi).
 * Where:     libsluice_cuda.so, called by kernels/cuda/forward.cu on the
 *            backend's stream.
 * Guarantee: Y[t, r] is computed by the same instructions in the same order
 *            whatever T is and whatever the other rows of X hold, so the
 *            engine's batch invariance holds on the GPU too.
 * Types:     F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, and Q4_1, Q5_0,
 *            Q5_1, IQ4_NL, Q8_1, Q2_K, Q3_K, IQ4_XS. */
#ifndef SL_CUDA_MATMUL_CUH
#define SL_CUDA_MATMUL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "shared/status.h"

/* A weight matrix resident on the device: ne1 rows of ne0 elements. */
typedef struct {
    uint32_t type;            /* enum sl_ggml_type */
    int64_t ne0, ne1;         /* (in, out) */
    size_t row_bytes;
    const uint8_t *data;      /* device pointer */
    bool gemm;                /* takes the tensor-core path for many rows (gemm.cuh) */
    const void *f16;          /* its resident float16 copy there, or NULL: dequantized per call */
} sl_cuda_weight;

/* True when sl_cuda_matmul computes `type`. */
bool sl_cuda_matmul_supports(uint32_t type);

/* y[t*ldy + r] = dot(W row r, x[t*ldx .. t*ldx + ne0)) for t < T, r < ne1.
 * x, y: device float32; ldx >= ne0, ldy >= ne1. Launches only (async on
 * `stream`). Returns SL_OK, SL_EINVAL (unsupported type, bad shape) or
 * SL_EBACKEND (launch failed; logged). */
sl_status sl_cuda_matmul(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y,
                         int64_t ldy, cudaStream_t stream);

#endif
