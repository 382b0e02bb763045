/* kernels/cuda/qkv_post.cuh: what follows the q/k/v projections for each
 * token row, in the CPU's order: qwen2 biases, qwen3 per-head q/k RMS norms,
 * rope on q and k (adjacent or NEOX pairs, llama3 or longrope frequency
 * divisors and linear scaling folded into inv_freq/freq_scale, cos and sin
 * times mscale), then k and v into the
 * paged KV cache at the row's position.
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream. */
#ifndef SL_CUDA_QKV_POST_CUH
#define SL_CUDA_QKV_POST_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/paged.cuh"
#include "shared/status.h"

typedef struct {
    const float *bq, *bk, *bv;      /* device (q_dim), (kv_dim) x2, or NULL: no biases */
    const float *q_norm, *k_norm;   /* device (head_dim) each, or NULL: no per-head norms */
    const double *inv_freq;         /* device (n_rot/2): base^(-2i/n_rot) / rope_freqs[i] */
    double freq_scale;              /* linear rope scaling (1/factor), else 1 */
    double mscale;                  /* rope.scaling.attn_factor on cos and sin, else 1 */
    int32_t n_head, n_rot;          /* kv heads and head_dim come from the cache */
    int32_t neox;                   /* 1: rotate (x[i], x[i+n_rot/2]); 0: (x[2i], x[2i+1]) */
    float eps;                      /* norm epsilon */
} sl_cuda_qkv_params;

/* For each of T rows: q (T, n_head*head_dim) and k, v (T, n_head_kv*head_dim)
 * are finished in place, then k and v are written to layer `layer` of the
 * cache at tok_pos[t], converted to the cache's type (paged.cuh).
 * Preconditions: head_dim <= 1024. Async; SL_OK, SL_EINVAL (also a type
 * the cache does not store, or q8_0 with head_dim not a multiple of 32), or
 * SL_EBACKEND (launch failed, logged). */
sl_status sl_cuda_qkv_post(float *q, float *k, float *v, int64_t T, const sl_cuda_qkv_params *p,
                           const sl_cuda_kv *kv, const sl_cuda_batch *batch, int layer, cudaStream_t stream);

#endif
