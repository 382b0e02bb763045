/* kernels/cuda/attention.cuh: causal attention over the paged KV cache for
 * every (token row, query head) of a step: decode rows and prefill chunks
 * alike (a row at position p sees positions [0, p] of its sequence, or
 * (p - window, p] on a sliding-window layer: sl_cuda_attention_layer).
 * Where: libsluice_cuda.so, launched by forward.cu on the backend stream.
 * Guarantee: a row's output depends only on its q and its sequence's cache,
 * in a fixed order (batch invariance), split or not.
 *
 * Split-K ("flash-decoding"): a row whose context is long is cut into
 * n_split position ranges, each walked by its own block; the ranges'
 * partial softmax states are merged in range order. The count depends only
 * on the row's own context (sl_cuda_attention_splits), never on the batch,
 * so a sequence's output is bitwise the same alone or in any batch. A row
 * with one split is computed by exactly the unsplit code path.
 *
 * Scratch: a split launch keeps (m, l, o[head_dim]) per (row, head, split)
 * in a buffer the caller allocates once, sized by
 * sl_cuda_attention_scratch_floats(max_batch_tokens, n_head, head_dim,
 * max_ctx): rows x n_head x launch_splits(max_ctx) x (head_dim + 2)
 * floats. At max_batch_tokens 1024 and max_ctx >= 16K (16 splits):
 *   1B-class (n_head 32, head_dim 64):  1024*32*16*66  floats = 132 MiB
 *   8B-class (n_head 32, head_dim 128): 1024*32*16*130 floats = 260 MiB
 * and a quarter of that at max_ctx 4096 (4 splits); none at max_ctx <= 1024. */
#ifndef SL_CUDA_ATTENTION_CUH
#define SL_CUDA_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/paged.cuh"
#include "shared/status.h"

/* Largest head_dim the kernel takes (8 floats per lane); head_dim must
 * also be a multiple of 4 (K/V rows are copied 16 bytes at a time). */
#define SL_CUDA_ATTN_MAX_HEAD_DIM 256

/* Positions per tile (one per lane when scoring); split ranges are whole
 * tiles. */
#define SL_CUDA_ATTN_TILE 32
/* A split range covers at least this many positions (32 tiles), so
 * contexts up to 1,024 are never split; every split count seen gets its
 * own decode graph. Measured on an H200 at 64 for short decode rows: no
 * faster, the merge's launch ate what the extra blocks saved. */
#define SL_CUDA_ATTN_SPLIT_CHUNK_MIN 1024
/* Most splits of one row: 16 x 8 kv heads = 128 blocks for a lone decode
 * row of a Llama-3 shape, about one per SM of an H200 (132 SMs); more only
 * adds merge work and scratch. */
#define SL_CUDA_ATTN_SPLIT_MAX 16

/* Positions per split range of a row whose context is n_ctx positions:
 * n_ctx / SPLIT_MAX rounded up to whole tiles, at least CHUNK_MIN. */
static __host__ __device__ __forceinline__ int64_t sl_cuda_attention_chunk(int64_t n_ctx)
{
    int64_t c = (n_ctx + SL_CUDA_ATTN_SPLIT_MAX - 1) / SL_CUDA_ATTN_SPLIT_MAX;
    c = (c + SL_CUDA_ATTN_TILE - 1) / SL_CUDA_ATTN_TILE * SL_CUDA_ATTN_TILE;
    return c < SL_CUDA_ATTN_SPLIT_CHUNK_MIN ? SL_CUDA_ATTN_SPLIT_CHUNK_MIN : c;
}

/* Splits of a row whose context is n_ctx positions (its position + 1):
 * ceil(n_ctx / chunk(n_ctx)), 1 to SPLIT_MAX. The one rule the kernels and
 * the host share; it depends on the row alone. */
static __host__ __device__ __forceinline__ int sl_cuda_attention_splits(int64_t n_ctx)
{
    int64_t c = sl_cuda_attention_chunk(n_ctx), n = (n_ctx + c - 1) / c;
    return n < 1 ? 1 : (int)n;
}

/* Splits a launch provides for rows whose contexts are at most max_ctx:
 * min(SPLIT_MAX, ceil(max_ctx / CHUNK_MIN)). splits() itself need not be
 * monotone (with a chunk of 64, 1024 positions would give 16 ranges and
 * 1025 give 11 of 96), this bound is, and no row of context <= max_ctx
 * needs more. */
static __host__ __device__ __forceinline__ int sl_cuda_attention_launch_splits(int64_t max_ctx)
{
    int64_t n = (max_ctx + SL_CUDA_ATTN_SPLIT_CHUNK_MIN - 1) / SL_CUDA_ATTN_SPLIT_CHUNK_MIN;
    return n < 1 ? 1 : n > SL_CUDA_ATTN_SPLIT_MAX ? SL_CUDA_ATTN_SPLIT_MAX : (int)n;
}

/* Positions [*p0, *p1) of split s of n = splits(ctx) for a row of context
 * ctx: ranges of ceil(ctx / n) rounded up to whole tiles, the last one
 * shorter. Non-empty for every s < n: n = ceil(ctx / c) with c = chunk(ctx)
 * a multiple of the tile, so ceil(ctx / n) <= c, the rounded range is <= c
 * too, and (n - 1) * range <= (n - 1) * c < ctx (checked for every ctx to
 * 70,000 by split_rule_test.cu). */
static __host__ __device__ __forceinline__ void sl_cuda_attention_range(int32_t ctx, int n, int s, int32_t *p0,
                                                                        int32_t *p1)
{
    int32_t chunk = (ctx + n - 1) / n;
    chunk = (chunk + SL_CUDA_ATTN_TILE - 1) / SL_CUDA_ATTN_TILE * SL_CUDA_ATTN_TILE;
    *p0 = s * chunk;
    *p1 = ctx - *p0 < chunk ? ctx : *p0 + chunk;
}

/* First position a row at `pos` sees: pos - window + 1 on a sliding-window
 * layer (window > 0) once that is past 0, else 0. The row walks [start, pos]. */
static __host__ __device__ __forceinline__ int32_t sl_cuda_attention_window_start(int32_t pos, int32_t window)
{
    return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

/* Floats of split scratch for steps of up to `rows` token rows whose
 * contexts are at most max_ctx positions. 0 when no row can split. */
static inline int64_t sl_cuda_attention_scratch_floats(int64_t rows, int n_head, int head_dim, int64_t max_ctx)
{
    int s = sl_cuda_attention_launch_splits(max_ctx);
    return s > 1 ? rows * n_head * s * ((int64_t)head_dim + 2) : 0;
}

/* out (T, n_head*head_dim) = softmax(q k^T / sqrt(head_dim)) v per row and
 * head, reading layer `layer` of the cache; q (T, n_head*head_dim). GQA:
 * query head h reads kv head h / (n_head / n_head_kv).
 * n_ctx: the step's longest context, max over rows of (position + 1). When
 * it gives one split, this launches the plain kernel alone (one block per
 * row and head, no scratch read, no second launch); otherwise the split
 * kernel over launch_splits(n_ctx) slots per row and head (a row uses
 * splits() of its own context), then the merge.
 * scratch, scratch_floats: the split scratch (device); may be NULL / 0 when
 * n_ctx never splits.
 * Preconditions: head_dim <= SL_CUDA_ATTN_MAX_HEAD_DIM, n_head a multiple
 * of n_head_kv, every row's position < n_ctx (a row past it is still
 * computed correctly, with fewer splits, but then loses batch invariance).
 * Async; SL_OK, SL_EINVAL (bad shape, or scratch smaller than
 * T*n_head*launch_splits(n_ctx)*(head_dim+2) floats), or SL_EBACKEND (launch
 * failed, logged). */
/* What a layer's attention does beyond the plain causal softmax. */
typedef struct {
    float scale;      /* score multiplier (1/sqrt(head_dim) unless the model says otherwise) */
    float softcap;    /* > 0: scores become softcap * tanh(score / softcap); 0: none */
    int32_t window;   /* > 0: a row at position p sees (p - window, p] only; 0: all of [0, p] */
    const float *sinks;   /* gpt-oss (device, n_head): head h's learned logit joins its softmax's
                           * denominator (no value); NULL: none */
} sl_cuda_attn_opts;

/* Lets the kernels use the shared memory the largest head_dim needs; call
 * once before any launch can be captured into a graph (backend creation).
 * sl_cuda_attention calls it too. SL_OK or SL_EBACKEND. */
sl_status sl_cuda_attention_prepare(void);

sl_status sl_cuda_attention(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                            const sl_cuda_batch *batch, int layer, int64_t n_ctx, float *scratch,
                            int64_t scratch_floats, cudaStream_t stream);

/* The same with a layer's options: its score scale, soft cap and sliding
 * window (sl_cuda_attention is this with 1/sqrt(head_dim), no cap, no
 * window). A windowed launch splits by the span a row walks, at most
 * min(n_ctx, window) positions, so its scratch need is never larger than
 * the unwindowed launch's. SL_EINVAL also for a negative window or cap. */
sl_status sl_cuda_attention_layer(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                                  const sl_cuda_batch *batch, int layer, int64_t n_ctx, const sl_cuda_attn_opts *opts,
                                  float *scratch, int64_t scratch_floats, cudaStream_t stream);

/* The same over some of the step's T rows: rows (device, n_rows entries,
 * each in [0, T), distinct) names them; the others' outputs are not
 * written. A row's output is bitwise what the full launch gives it (its
 * splits and their order depend on the row alone), so a step may send some
 * rows here and the rest to another kernel (forward.cu: the decode rows of
 * a flash-attention step). rows NULL with n_rows == T is
 * sl_cuda_attention_layer. Scratch as for T rows. SL_EINVAL also for
 * n_rows > T, or rows NULL with n_rows != T. */
sl_status sl_cuda_attention_layer_rows(float *out, const float *q, int64_t T, const int32_t *rows, int64_t n_rows,
                                       int n_head, const sl_cuda_kv *kv, const sl_cuda_batch *batch, int layer,
                                       int64_t n_ctx, const sl_cuda_attn_opts *opts, float *scratch,
                                       int64_t scratch_floats, cudaStream_t stream);

#endif
