/* kernels/cuda/mmv.cuh: Y = X W^T for small T on the quantized formats
 * models are mostly made of (Q4_K, Q5_K, Q6_K, Q8_0, Q8_1, Q2_K, Q3_K,
 * IQ4_XS, and the nibble formats Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): the fast
 * path of
 * sl_cuda_matmul (matmul.cu keeps the general kernel for every type).
 * Guarantee: Y[t, r] depends on W's row r and X's row t only, computed in
 * an order fixed by (type, ne0): batch invariance holds as for matmul.cu. */
#ifndef SL_CUDA_MMV_CUH
#define SL_CUDA_MMV_CUH

#include "kernels/cuda/matmul.cuh"

/* True when sl_cuda_mmv computes this weight with activations x, ldx
 * (float4-aligned activations, rows aligned as the format's loads need). */
bool sl_cuda_mmv_supports(const sl_cuda_weight *w, int64_t ldx, const float *x);

/* As sl_cuda_matmul; SL_EINVAL when !sl_cuda_mmv_supports. */
sl_status sl_cuda_mmv(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                      cudaStream_t stream);

/* One launch for up to three matrices of the same type and row length that
 * read the same x (q, k, v): y[i] = x w[i]^T with row stride ldy[i]. The
 * bits are those of separate sl_cuda_mmv calls. SL_EINVAL when the
 * matrices do not match or one is unsupported (call them one by one). */
sl_status sl_cuda_mmv_multi(const sl_cuda_weight *const *w, float *const *y, const int64_t *ldy, int n_seg,
                            const float *x, int64_t ldx, int64_t T, cudaStream_t stream);

/* y = silu(x gate^T) * (x up^T), the FFN's first half in one launch, with
 * the bits of two sl_cuda_mmv calls and sl_cuda_swiglu. gate and up must
 * match in type and shape (else SL_EINVAL). */
sl_status sl_cuda_mmv_swiglu(const sl_cuda_weight *gate, const sl_cuda_weight *up, const float *x, int64_t ldx,
                             int64_t T, float *y, int64_t ldy, cudaStream_t stream);

#endif
