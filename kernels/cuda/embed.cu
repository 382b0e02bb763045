/* kernels/cuda/embed.cu: one block per token row, one element per thread
 * step ("embed_row_per_block"). Element-wise decoding is slow per byte but
 * this reads T rows, not a matrix. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embed.cuh"

#define THREADS 256

static __global__ void __launch_bounds__(THREADS)
embed_row_per_block(float *__restrict__ x, const uint8_t *__restrict__ W, uint32_t type, size_t row_bytes,
                    int64_t n, const int32_t *__restrict__ tokens)
{
    int64_t t = blockIdx.x;
    const uint8_t *row = W + (int64_t)tokens[t] * row_bytes;
    for (int64_t j = threadIdx.x; j < n; j += THREADS)
        x[t * n + j] = sl_dev_dequant_elem(type, row, j);
}

sl_status sl_cuda_embed(float *x, const sl_cuda_weight *emb, const int32_t *tokens, int64_t T,
                        cudaStream_t stream)
{
    if (T < 1)
        return SL_OK;
    embed_row_per_block<<<(unsigned)T, THREADS, 0, stream>>>(x, emb->data, emb->type, emb->row_bytes, emb->ne0,
                                                            tokens);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
