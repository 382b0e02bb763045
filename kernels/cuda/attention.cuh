/* kernels/cuda/attention.cuh: causal attention over the paged KV cache for
 * every (token row, query head) of a step: decode rows and prefill chunks
 * alike (a row at position p sees positions [0, p] of its sequence).
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream.
 * Guarantee: a row's output depends only on its q and its sequence's cache,
 * in a fixed order (batch invariance). */
#ifndef SL_CUDA_ATTENTION_CUH
#define SL_CUDA_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/paged.cuh"
#include "shared/status.h"

/* Largest head_dim the kernel takes (8 floats per lane). */
#define SL_CUDA_ATTN_MAX_HEAD_DIM 256

/* out (T, n_head*head_dim) = softmax(q k^T / sqrt(head_dim)) v per row and
 * head, reading layer `layer` of the cache; q (T, n_head*head_dim). GQA:
 * query head h reads kv head h / (n_head / n_head_kv). Preconditions:
 * head_dim <= SL_CUDA_ATTN_MAX_HEAD_DIM, n_head a multiple of n_head_kv.
 * Async; SL_OK, SL_EINVAL, or SL_EBACKEND (launch failed, logged). */
sl_status sl_cuda_attention(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                            const sl_cuda_batch *batch, int layer, cudaStream_t stream);

#endif
