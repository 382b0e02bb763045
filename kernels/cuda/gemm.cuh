/* kernels/cuda/gemm.cuh: Y = X W^T on tensor cores (cuBLAS) for batches of
 * many token rows: prefill chunks and large decode batches.
 * How:  cuBLAS reads a weight matrix in float16, from one of two places:
 *       a resident copy, dequantized once at load from its GGUF type (kept
 *       beside the quantized original, which the small-batch kernels
 *       read), or, for a streamed matrix, a scratch slab the call itself
 *       dequantizes the matrix into, a slab of rows at a time. A call
 *       converts the activations to float16 and runs cublasGemmEx with
 *       float32 accumulation and output.
 * Why:  the small-batch kernels decode every weight once per 8 token rows,
 *       so past a few dozen rows they are compute bound; tensor cores do the
 *       same work an order of magnitude faster. A resident copy costs 2
 *       bytes per weight of device memory (sl_cuda_gemm_bytes), taken
 *       before the KV cache is sized; a streamed matrix costs nothing
 *       resident, and per call a dequantization pass (reading the quantized
 *       matrix, writing 2 bytes per weight) before cuBLAS reads it. The
 *       backend chooses per matrix (docs/CUDA.md, "Tensor cores").
 * Range: a row of activations whose largest magnitude passes 2^14 is divided
 *       by a power of two before the conversion and its outputs multiplied
 *       back, so outliers in the thousands do not overflow float16.
 * Accuracy: float16 activations and weights, float32 sums: results differ
 *       from the small-batch path by float16 rounding (~1e-3 relative), so
 *       a sequence's logits are bitwise the same batched or alone only
 *       while both steps take the same path (docs/CUDA.md). */
#ifndef SL_CUDA_GEMM_CUH
#define SL_CUDA_GEMM_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/matmul.cuh"
#include "shared/status.h"

/* Token rows per cuBLAS call: every call of a process has exactly this many
 * columns (the last chunk padded), so cuBLAS picks the same kernel whatever
 * T is and a row's result does not depend on the batch: the tensor-core
 * path keeps batch invariance on its own (across the switch from the
 * small-batch kernels it does not). 64, 128 or 256, fixed at the first call
 * from SLUICE_CUDA_GEMM_COLS (default SL_GEMM_COLS_DEFAULT): wider chunks
 * read each weight matrix fewer times in a large step and compute more
 * padding in a small one (docs/history/PERF-rounds.md has the
 * measurement). Output buffers need round_up(T, SL_GEMM_COLS_MAX) rows. */
#define SL_GEMM_COLS_MAX 256
#define SL_GEMM_COLS_DEFAULT 256
int sl_cuda_gemm_cols(void);

typedef struct sl_cuda_gemm sl_cuda_gemm;

/* A cuBLAS handle bound to `stream` with a fixed workspace (so steps can be
 * captured into CUDA graphs), room to convert max_x float activations in
 * up to max_rows rows (both counting the padding to SL_GEMM_COLS_MAX), and
 * a scratch slab of `scratch` float16 weights for streamed matrices (0:
 * every matrix the calls get must have a resident copy). */
sl_status sl_cuda_gemm_create(cudaStream_t stream, int64_t max_x, int64_t max_rows, int64_t scratch,
                              sl_cuda_gemm **out, char *err, size_t err_len);
void sl_cuda_gemm_destroy(sl_cuda_gemm *g);

/* Device bytes the float16 copy of w takes. */
size_t sl_cuda_gemm_bytes(const sl_cuda_weight *w);

/* Writes the float16 copy of w (ne1 x ne0, row-major) into dst. */
sl_status sl_cuda_gemm_dequant(const sl_cuda_weight *w, __half *dst, cudaStream_t stream);

/* Weight rows per slab when w is streamed through g's scratch (at most
 * w->ne1; 0: a row does not fit, so w needs a resident copy). */
int64_t sl_cuda_gemm_stream_rows(const sl_cuda_gemm *g, const sl_cuda_weight *w);

/* y[t*ldy + r] = dot(wh row r, x row t) for t < T, r < w->ne1, where wh is
 * w's resident float16 copy, or NULL to stream w through the scratch; rows
 * T .. round_up(T, sl_cuda_gemm_cols()) of y are scratch (written with the
 * padding's results). round_up(T) * w->ne0 <= max_x. Launches only. */
sl_status sl_cuda_gemm_matmul(sl_cuda_gemm *g, const sl_cuda_weight *w, const __half *wh, const float *x,
                              int64_t ldx, int64_t T, float *y, int64_t ldy);

/* The same for n matrices that read one input (q/k/v; gate/up), each
 * from its w[i]->f16 or streamed: the activations are converted once.
 * Every w[i]->ne0 must be equal. */
sl_status sl_cuda_gemm_matmul_multi(sl_cuda_gemm *g, const sl_cuda_weight *const *w, int n, const float *x,
                                    int64_t ldx, int64_t T, float *const *y, const int64_t *ldy);

#endif
