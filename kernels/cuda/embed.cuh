/* kernels/cuda/embed.cuh: token embedding lookup, dequantizing the rows of
 * tok_embd (any supported GGUF type) into float32 activations.
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream. */
#ifndef SL_CUDA_EMBED_CUH
#define SL_CUDA_EMBED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/matmul.cuh"
#include "shared/status.h"

/* x[t*ne0 + j] = element j of row tokens[t] of `emb`, for t < T. tokens:
 * device, each in [0, emb->ne1) (the caller validated them). Async; SL_OK or
 * SL_EBACKEND (launch failed, logged). */
sl_status sl_cuda_embed(float *x, const sl_cuda_weight *emb, const int32_t *tokens, int64_t T,
                        cudaStream_t stream);

#endif
