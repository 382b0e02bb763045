/* kernels/cuda/mmvq.cuh: Y = X W^T for small T on 8-bit activations, for
 * Q4_K, Q5_K, Q6_K and Q8_0 weights: X is first rounded to the CPU
 * default's blocks (Q8_K for the K-quants, Q8_0 for Q8_0: the codes and
 * scales of kernels/cpu/act_quant.c, bit for bit), then each weight row is
 * dotted in integers (__dp4a). The integer twin of mmv.cuh, opt-in:
 * forward.cu takes it when SLUICE_CUDA_MMVQ=1.
 * Where:     libsluice_cuda.so; launches only (async on the stream, no
 *            allocation, no host sync: safe inside a captured CUDA graph).
 * Guarantee: Y[t, r] depends on W's row r and X's row t only, in an order
 *            fixed by (type, ne0): batch invariance holds as for mmv.cuh.
 *            Accuracy: the activations' rounding (about 2^-8 of each
 *            block's largest element), the same as the CPU backend's default.
 * Ownership: the caller owns the quantized rows (sl_cuda_q8_row_bytes(ne0)
 *            bytes a row, 16-byte aligned) and reuses them for every matrix
 *            that reads the same input.
 * Errors:    SL_OK; SL_EINVAL for an unsupported type, shape or alignment
 *            (nothing launched: the caller takes the float kernels);
 *            SL_EBACKEND when a launch failed (logged). */
#ifndef SL_CUDA_MMVQ_CUH
#define SL_CUDA_MMVQ_CUH

#include "kernels/cuda/matmul.cuh"

enum {
    SL_CUDA_Q8_NONE = 0,   /* the type has no integer path */
    SL_CUDA_Q8_K = 1,      /* 256-element blocks: float d, 16 block sums (Q4_K, Q5_K, Q6_K) */
    SL_CUDA_Q8_0 = 2,      /* 32-element blocks: d rounded to fp16 (Q8_0) */
};

/* The activation format a weight type is dotted with, SL_CUDA_Q8_NONE when
 * it has no integer path. */
int sl_cuda_q8_format(uint32_t type);

/* Bytes of one quantized row of n elements: int8 q[n], float d[n/32],
 * int16 bsums[n/16], rounded up to 16. */
size_t sl_cuda_q8_row_bytes(int64_t n);

/* True when sl_cuda_mmvq computes w (a supported type, whole blocks, rows
 * aligned for the loads). */
bool sl_cuda_mmvq_supports(const sl_cuda_weight *w);

/* Rounds the T rows x[t * ldx .. + n) to `format`'s blocks into xq (row t
 * at t * sl_cuda_q8_row_bytes(n)). x: device float32, 16-byte aligned,
 * ldx % 4 == 0; n a multiple of the block (256 or 32); T <= 65535. */
sl_status sl_cuda_q8_quantize(int format, const float *x, int64_t ldx, int64_t n, int64_t T, uint8_t *xq,
                              cudaStream_t stream);

/* y[t * ldy + r] = dot(W row r, X row t) from the quantized rows xq, which
 * must have been made with sl_cuda_q8_format(w->type) and n = w->ne0. */
sl_status sl_cuda_mmvq(const sl_cuda_weight *w, const uint8_t *xq, int64_t T, float *y, int64_t ldy,
                       cudaStream_t stream);

/* Up to three matrices of one type and row length on the same xq in one
 * launch (q, k, v), the bits of separate sl_cuda_mmvq calls. SL_EINVAL
 * when they do not match (call them one by one). */
sl_status sl_cuda_mmvq_multi(const sl_cuda_weight *const *w, float *const *y, const int64_t *ldy, int n_seg,
                             const uint8_t *xq, int64_t T, cudaStream_t stream);

/* y = silu(xq gate^T) * (xq up^T) in one launch, the bits of two
 * sl_cuda_mmvq calls and sl_cuda_swiglu. gate and up must match in type
 * and shape (else SL_EINVAL). */
sl_status sl_cuda_mmvq_swiglu(const sl_cuda_weight *gate, const sl_cuda_weight *up, const uint8_t *xq, int64_t T,
                              float *y, int64_t ldy, cudaStream_t stream);

/* SLUICE_CUDA_MMVQ=1 (read once): the forward pass takes this path for the
 * types it supports. Off by default until timed on a GPU. */
bool sl_cuda_mmvq_enabled(void);

#endif
