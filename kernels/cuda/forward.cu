/* kernels/cuda/forward.cu: the CUDA backend: weight upload, the device
 * buffers, and the forward pass for the llama, qwen2 and qwen3 architectures
 * over a batch of sequences with paged KV caches.
 * Runs in the worker process on the scheduler thread; every launch goes to
 * one stream and a step ends with one synchronisation, after the logits
 * (forward) or the drawn tokens (forward_sample, sample.cuh) are on the
 * host.
 *
 * The pass mirrors kernels/cpu/forward.c op for op (that file is the
 * reference the checks compare against): the batch is flattened into T token
 * rows, each matmul reads the weights in their GGUF type for all rows, and
 * nothing a row computes depends on the other rows, so a sequence's logits
 * are bitwise identical alone or in any batch (each kernel's header says how
 * it keeps its reduction order fixed).
 *
 * Memory is sized once at creation (STYLE §6): one allocation for all
 * weights, one for the KV cache, one per scratch tensor sized for
 * max_batch_tokens rows; a step allocates nothing, except that the staging
 * area for block tables grows if a step's tables outgrow it (a wart: a fixed
 * bound from the scheduler's table limits would remove it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/eltwise.cuh"
#include "kernels/cuda/embed.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/profile.cuh"
#include "kernels/cuda/qkv_post.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/sample.cuh"

#define MAX_LOGIT_ROWS 256         /* logits rows computed and copied back per chunk, at most */
#define ALIGN 256                  /* device sub-allocation alignment (bytes) */
#define RESERVE_MIN (512ull << 20) /* free memory left when sizing the KV cache ... */
#define RESERVE_DIV 32             /* ... or 1/32 of the card, whichever is larger */

typedef struct {
    const float *attn_norm, *ffn_norm;    /* (n_embd) */
    sl_cuda_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    const float *bq, *bk, *bv;            /* qwen2 biases or NULL */
    const float *q_norm, *k_norm;         /* qwen3 (head_dim) or NULL */
} cuda_layer;

typedef struct {
    sl_backend base;
    cudaStream_t stream;
    bool stream_ok;

    uint8_t *weights;            /* one allocation holding every tensor below */
    cuda_layer *layers;          /* (n_layer), host array of device pointers */
    sl_cuda_weight tok_embd, output;
    const float *output_norm;
    double *inv_freq;            /* (n_rot/2), inside `weights` */
    sl_cuda_qkv_params qkv;      /* per-layer fields filled at each layer */

    sl_cuda_kv kv;               /* kv.kv: (n_layer, 2, n_kv_blocks, n_head_kv, block_size, head_dim) */

    /* scratch for T = max_batch_tokens rows */
    float *x;                    /* (T, n_embd) residual stream */
    float *xn;                   /* (T, max(n_embd, q_dim)) normed input / projection output */
    float *q, *k, *v;            /* (T, q_dim), (T, kv_dim) x2 */
    float *att;                  /* (T, q_dim) attention output */
    float *att_split;            /* split-K partials, att_split_floats (attention.cuh); NULL: max_ctx never splits */
    int64_t att_split_floats;
    float *gate, *up;            /* (T, n_ff) */
    float *logits;               /* (logit_rows, n_vocab) */

    /* per-step integers: host pinned staging, mirrored on the device:
     * [tokens T | tok_pos T | tok_table T | out_rows T | blocks cap] */
    int32_t *meta_h, *meta_d;
    int64_t meta_cap;            /* int32 entries both hold */

    int64_t logit_rows;          /* rows cb->logits holds: min(max_batch_tokens, MAX_LOGIT_ROWS) */

    /* decode-step graphs, captured on first use, by (draws tokens or copies
     * logits, row count T in 1..graph_max, attention splits S): see
     * graph_slot. NULL: graphs off (SLUICE_CUDA_GRAPHS=0, profiling) */
    cudaGraphExec_t *graphs;
    int64_t graph_cap;
    int64_t graph_max;           /* graph_cap, or 0 after a failed capture */
    uint64_t sampler_gen;        /* the sampler staging the sampling graphs point into */

    /* tensor-core path for steps of >= gemm_min token rows (gemm.cuh); NULL: off */
    sl_cuda_gemm *gemm;
    __half *f16;                 /* one allocation holding every matrix's float16 copy */
    int64_t gemm_min;
    bool use_gemm;               /* this step's choice (forward_steps) */
    int64_t step_ctx;            /* this step's longest context, max(pos) + 1 (forward_steps) */

    /* the caller's logits array, page-locked in place so copies to it run at
     * full speed (a pageable target halves them); grown as steps ask for more */
    float *pinned_ptr;
    size_t pinned_bytes;
    bool pin_failed;

    sl_cuda_sampler *sampler;    /* draws tokens on the device (forward_sample) */

    sl_cuda_profile *prof;       /* SLUICE_CUDA_PROFILE=1: per-op timing, else NULL */
} cuda_backend;

/* ------------------------------------------------------------------------ */
/* allocation, with fault injection                                         */

/* STYLE §8: with SLUICE_CUDA_FAIL_ALLOC=N in the environment, the Nth device
 * or pinned allocation of a backend creation fails as out of memory, so a
 * test (cudacheck --faults) can sweep N and check that each failure is a
 * clean error that leaks nothing. Only creation counts; steps never do. */
static int alloc_countdown;   /* 0: off; creation runs on one thread */

static cudaError_t dev_malloc(void **p, size_t bytes)
{
    if (alloc_countdown > 0 && --alloc_countdown == 0) {
        *p = NULL;
        return cudaErrorMemoryAllocation;
    }
    return cudaMalloc(p, bytes);
}

static cudaError_t pinned_malloc(void **p, size_t bytes)
{
    if (alloc_countdown > 0 && --alloc_countdown == 0) {
        *p = NULL;
        return cudaErrorMemoryAllocation;
    }
    return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}

/* ------------------------------------------------------------------------ */
/* teardown                                                                  */

#define GRAPH_SPLITS (SL_CUDA_ATTN_SPLIT_MAX + 1)

static int64_t graph_slots(int64_t cap)
{
    return 2 * (cap + 1) * GRAPH_SPLITS;
}

/* Where the graph of a decode step lives: one per (sampling on the device
 * or not, T rows, S attention splits), since each bakes in its launches. */
static cudaGraphExec_t *graph_slot(cuda_backend *cb, bool sampling, int64_t T, int S)
{
    return &cb->graphs[((sampling ? 1 : 0) * (cb->graph_cap + 1) + T) * GRAPH_SPLITS + S];
}

/* Frees the captured graphs (they hold the old staging pointers). */
static void drop_graphs(cuda_backend *cb)
{
    for (int64_t i = 0; cb->graphs && i < graph_slots(cb->graph_cap); i++)
        if (cb->graphs[i]) {
            cudaGraphExecDestroy(cb->graphs[i]);
            cb->graphs[i] = NULL;
        }
}

static void cuda_destroy(sl_backend *b)
{
    cuda_backend *cb = (cuda_backend *)b;
    if (!cb)
        return;
    if (cb->stream_ok)
        cudaStreamSynchronize(cb->stream);
    sl_cuda_profile_destroy(cb->prof);
    sl_cuda_sampler_destroy(cb->sampler);
    if (cb->pinned_ptr)
        cudaHostUnregister(cb->pinned_ptr);
    drop_graphs(cb);
    free(cb->graphs);
    sl_cuda_gemm_destroy(cb->gemm);
    cudaFree(cb->f16);
    cudaFree(cb->weights);
    cudaFree(cb->kv.kv);
    float *bufs[] = {cb->x, cb->xn, cb->q, cb->k, cb->v, cb->att, cb->att_split, cb->gate, cb->up, cb->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cudaFree(bufs[i]);
    cudaFree(cb->meta_d);
    cudaFreeHost(cb->meta_h);
    if (cb->stream_ok)
        cudaStreamDestroy(cb->stream);
    free(cb->layers);
    free(cb);
}

/* ------------------------------------------------------------------------ */
/* forward                                                                   */

/* Makes room for `need` int32 entries of per-step metadata. */
static sl_status meta_reserve(cuda_backend *cb, int64_t need)
{
    if (need <= cb->meta_cap)
        return SL_OK;
    SL_CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    drop_graphs(cb);
    cudaFree(cb->meta_d);
    cudaFreeHost(cb->meta_h);
    cb->meta_d = NULL;
    cb->meta_h = NULL;
    cb->meta_cap = 0;
    SL_CUDA_CHECK(dev_malloc((void **)&cb->meta_d, (size_t)need * sizeof(int32_t)));
    SL_CUDA_CHECK(pinned_malloc((void **)&cb->meta_h, (size_t)need * sizeof(int32_t)));
    cb->meta_cap = need;
    return SL_OK;
}

#define TRY(expr)                \
    do {                         \
        sl_status rc_ = (expr);  \
        if (rc_ < 0)             \
            return SL_EBACKEND;  \
    } while (0)

/* y = x w^T: on tensor cores for many rows when the float16 copy exists,
 * else the small-batch kernels. */
static sl_status mm(cuda_backend *cb, const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y,
                    int64_t ldy)
{
    if (cb->use_gemm && w->f16)
        return sl_cuda_gemm_matmul(cb->gemm, w, (const __half *)w->f16, x, ldx, T, y, ldy);
    return sl_cuda_matmul(w, x, ldx, T, y, ldy, cb->stream);
}

/* Several matmuls of one input on tensor cores (the input converted once);
 * SL_EINVAL when the path is off or a matrix has no float16 copy (the
 * caller then goes matrix by matrix). */
static sl_status mm_multi(cuda_backend *cb, const sl_cuda_weight **w, int n, const float *x, int64_t ldx, int64_t T,
                          float **y, const int64_t *ldy)
{
    if (!cb->use_gemm)
        return SL_EINVAL;
    for (int i = 0; i < n; i++)
        if (!w[i]->f16)
            return SL_EINVAL;
    return sl_cuda_gemm_matmul_multi(cb->gemm, w, n, x, ldx, T, y, ldy) < 0 ? SL_EBACKEND : SL_OK;
}

/* Flattens the batch into token rows and concatenated block tables in the
 * pinned staging area and queues its copy to the device. Sets *T, *n_out. */
static sl_status stage_batch(cuda_backend *cb, const sl_batch_seq *seqs, int32_t n_seqs, int64_t *T_out,
                             int64_t *n_out_out)
{
    int64_t Tmax = cb->base.cfg.max_batch_tokens, bs = cb->base.cfg.kv_block_size;
    int64_t n_tab = 0;
    for (int32_t i = 0; i < n_seqs; i++)
        n_tab += ((int64_t)seqs[i].pos + seqs[i].n_tokens + bs - 1) / bs;
    TRY(meta_reserve(cb, 4 * Tmax + n_tab));
    int32_t *tokens = cb->meta_h, *tok_pos = tokens + Tmax, *tok_table = tok_pos + Tmax;
    int32_t *out_rows = tok_table + Tmax, *blocks = out_rows + Tmax;
    int64_t T = 0, n_out = 0, off = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const sl_batch_seq *s = &seqs[i];
        int64_t need = ((int64_t)s->pos + s->n_tokens + bs - 1) / bs;
        memcpy(blocks + off, s->blocks, (size_t)need * sizeof(int32_t));
        for (int32_t j = 0; j < s->n_tokens; j++, T++) {
            tokens[T] = s->tokens[j];
            tok_pos[T] = s->pos + j;
            tok_table[T] = (int32_t)off;
            if (s->logits_all || j == s->n_tokens - 1)
                out_rows[n_out++] = (int32_t)T;
        }
        off += need;
    }
    SL_CUDA_CHECK(cudaMemcpyAsync(cb->meta_d, cb->meta_h, (size_t)(4 * Tmax + n_tab) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, cb->stream));
    *T_out = T;
    *n_out_out = n_out;
    return SL_OK;
}

/* Queues the embedding and every layer for T staged token rows. */
static sl_status enqueue_layers(cuda_backend *cb, int64_t T)
{
    const sl_hparams *hp = &cb->base.model->hp;
    cudaStream_t st = cb->stream;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    int64_t Tmax = cb->base.cfg.max_batch_tokens;
    const int32_t *d_tokens = cb->meta_d;
    sl_cuda_batch batch = {cb->meta_d + Tmax, cb->meta_d + 2 * Tmax, cb->meta_d + 4 * Tmax};
    sl_cuda_profile *pf = cb->prof;

    TRY(sl_cuda_embed(cb->x, &cb->tok_embd, d_tokens, T, st));
    sl_cuda_profile_mark(pf, SL_PROF_EMBED, st);
    /* Few rows take the small-batch kernels, fused where the matrices allow;
     * many rows, or any prefill chunk, the tensor-core path (cb->use_gemm,
     * set by forward_steps): a prompt's rows then go through the same
     * kernels however the scheduler chunks it. */
    bool few = !cb->use_gemm;
    for (int l = 0; l < hp->n_layer; l++) {
        const cuda_layer *L = &cb->layers[l];
        /* the previous layer's residual add is fused into this norm */
        if (l == 0)
            TRY(sl_cuda_rmsnorm(cb->xn, cb->x, NULL, L->attn_norm, T, E, hp->norm_eps, st));
        else
            TRY(sl_cuda_add_rmsnorm(cb->x, cb->xn, cb->xn, L->attn_norm, T, E, hp->norm_eps, st));
        sl_cuda_profile_mark(pf, SL_PROF_NORM, st);
        const sl_cuda_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
        float *yqkv[3] = {cb->q, cb->k, cb->v};
        int64_t ldqkv[3] = {q_dim, kv_dim, kv_dim};
        sl_status rc = few ? sl_cuda_mmv_multi(wqkv, yqkv, ldqkv, 3, cb->xn, E, T, st) : mm_multi(cb, wqkv, 3, cb->xn, E, T, yqkv, ldqkv);
        if (rc == SL_EINVAL) {
            TRY(mm(cb, &L->wq, cb->xn, E, T, cb->q, q_dim));
            TRY(mm(cb, &L->wk, cb->xn, E, T, cb->k, kv_dim));
            TRY(mm(cb, &L->wv, cb->xn, E, T, cb->v, kv_dim));
        } else {
            TRY(rc);
        }
        sl_cuda_profile_mark(pf, SL_PROF_QKV, st);
        sl_cuda_qkv_params p = cb->qkv;
        p.bq = L->bq;
        p.bk = L->bk;
        p.bv = L->bv;
        p.q_norm = L->q_norm;
        p.k_norm = L->k_norm;
        TRY(sl_cuda_qkv_post(cb->q, cb->k, cb->v, T, &p, &cb->kv, &batch, l, st));
        sl_cuda_profile_mark(pf, SL_PROF_ROPE, st);
        TRY(sl_cuda_attention(cb->att, cb->q, T, hp->n_head, &cb->kv, &batch, l, cb->step_ctx, cb->att_split,
                              cb->att_split_floats, st));
        sl_cuda_profile_mark(pf, SL_PROF_ATTN, st);
        TRY(mm(cb, &L->wo, cb->att, q_dim, T, cb->xn, E));
        sl_cuda_profile_mark(pf, SL_PROF_WO, st);
        TRY(sl_cuda_add_rmsnorm(cb->x, cb->xn, cb->xn, L->ffn_norm, T, E, hp->norm_eps, st));
        sl_cuda_profile_mark(pf, SL_PROF_NORM, st);
        rc = few ? sl_cuda_mmv_swiglu(&L->w_gate, &L->w_up, cb->xn, E, T, cb->gate, F, st) : SL_EINVAL;
        if (rc == SL_EINVAL) {
            const sl_cuda_weight *wgu[2] = {&L->w_gate, &L->w_up};
            float *ygu[2] = {cb->gate, cb->up};
            int64_t ldgu[2] = {F, F};
            rc = few ? SL_EINVAL : mm_multi(cb, wgu, 2, cb->xn, E, T, ygu, ldgu);
            if (rc == SL_EINVAL) {
                TRY(mm(cb, &L->w_gate, cb->xn, E, T, cb->gate, F));
                TRY(mm(cb, &L->w_up, cb->xn, E, T, cb->up, F));
            } else {
                TRY(rc);
            }
            sl_cuda_profile_mark(pf, SL_PROF_GATE_UP, st);
            TRY(sl_cuda_swiglu(cb->gate, cb->up, T * F, st));
            sl_cuda_profile_mark(pf, SL_PROF_ELTWISE, st);
        } else {
            TRY(rc);
            sl_cuda_profile_mark(pf, SL_PROF_GATE_UP, st);
        }
        TRY(mm(cb, &L->w_down, cb->gate, F, T, cb->xn, E));
        sl_cuda_profile_mark(pf, SL_PROF_DOWN, st);
    }
    /* the last layer's residual add (the others' are fused into the next norm) */
    TRY(sl_cuda_add(cb->x, cb->xn, T * E, st));
    sl_cuda_profile_mark(pf, SL_PROF_ELTWISE, st);
    return SL_OK;
}

/* Queues the final norm and output projection of nr asked rows, starting
 * at entry r0 of the staged out_rows, into cb->logits. */
static sl_status enqueue_logits(cuda_backend *cb, int64_t r0, int64_t nr)
{
    const sl_hparams *hp = &cb->base.model->hp;
    const int32_t *d_out_rows = cb->meta_d + 3 * (int64_t)cb->base.cfg.max_batch_tokens;
    TRY(sl_cuda_rmsnorm(cb->xn, cb->x, d_out_rows + r0, cb->output_norm, nr, hp->n_embd, hp->norm_eps,
                        cb->stream));
    TRY(mm(cb, &cb->output, cb->xn, hp->n_embd, nr, cb->logits, hp->n_vocab));
    sl_cuda_profile_mark(cb->prof, SL_PROF_OUTPUT, cb->stream);
    return SL_OK;
}

/* The graph of a decode step of T sequences (layers, logits of all T rows,
 * and with `sampling` the draws of all T), captured on first use. Kernel
 * arguments are the fixed scratch and staging pointers; the per-step values
 * (tokens, positions, tables, sampling parameters) are read from the
 * staged device buffers, so a replay serves any decode step of the same T
 * whose longest context splits attention the same number of times
 * (cb->step_ctx, set by the caller). NULL when capture failed (graphs are
 * then turned off). */
static cudaGraphExec_t decode_graph(cuda_backend *cb, int64_t T, bool sampling)
{
    cudaGraphExec_t *slot = graph_slot(cb, sampling, T, sl_cuda_attention_launch_splits(cb->step_ctx));
    if (*slot)
        return *slot;
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        goto off;
    {
        sl_status rc = enqueue_layers(cb, T);
        if (rc == SL_OK)
            rc = enqueue_logits(cb, 0, T);
        if (rc == SL_OK && sampling)
            rc = sl_cuda_sampler_launch(cb->sampler, cb->logits, 0, (int32_t)T, cb->stream);
        cudaError_t e = cudaStreamEndCapture(cb->stream, &g);
        if (rc != SL_OK || e != cudaSuccess || !g)
            goto off;
    }
    if (cudaGraphInstantiate(&exec, g, 0) != cudaSuccess)
        goto off;
    cudaGraphDestroy(g);
    *slot = exec;
    return exec;
off:
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();   /* a failed capture leaves its error behind */
    fprintf(stderr, "cuda: capturing the decode graph for %lld rows failed; running without graphs\n",
            (long long)T);
    cb->graph_max = 0;
    return NULL;
}

/* Page-locks the first `bytes` of the caller's logits array (once per
 * array and size: the scheduler passes the same array every step). A
 * failure only costs speed. */
static void pin_logits(cuda_backend *cb, float *logits, size_t bytes)
{
    if (cb->pin_failed || (logits == cb->pinned_ptr && bytes <= cb->pinned_bytes))
        return;
    if (cb->pinned_ptr)
        cudaHostUnregister(cb->pinned_ptr);
    cb->pinned_ptr = NULL;
    if (cudaHostRegister(logits, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        cudaGetLastError();
        cb->pin_failed = true;
        return;
    }
    cb->pinned_ptr = logits;
    cb->pinned_bytes = bytes;
}

/* One step: the forward pass, then either every asked logits row copied
 * to `logits` (reqs NULL) or the tokens drawn on the device (reqs: one per
 * sequence, each sequence's one row). */
static sl_status forward_steps(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits,
                               const sl_sample_req *reqs)
{
    cuda_backend *cb = (cuda_backend *)b;
    cudaStream_t st = cb->stream;
    int64_t V = b->model->hp.n_vocab;
    bool decode = true;   /* every sequence decodes one sampled token */
    cb->step_ctx = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        decode = decode && seqs[i].n_tokens == 1 && !seqs[i].prompt;
        if ((int64_t)seqs[i].pos + seqs[i].n_tokens > cb->step_ctx)
            cb->step_ctx = (int64_t)seqs[i].pos + seqs[i].n_tokens;
    }

    int64_t T, n_out;
    sl_cuda_profile_begin(cb->prof, st);
    TRY(stage_batch(cb, seqs, n_seqs, &T, &n_out));
    if (reqs)
        TRY(sl_cuda_sampler_stage(cb->sampler, reqs, n_seqs, st));
    else
        pin_logits(cb, logits, (size_t)(n_out * V) * sizeof(float));
    cb->use_gemm = cb->gemm && (T >= cb->gemm_min || !decode);
    /* a decode graph that draws holds the sampler's launch: every row must
     * draw, and the staging it points into must be the one it was captured
     * with (the sampler reallocates it when a step outgrows it) */
    bool sampling = reqs != NULL;
    for (int32_t i = 0; sampling && i < n_seqs; i++)
        sampling = reqs[i].params != NULL;
    if (reqs && sl_cuda_sampler_generation(cb->sampler) != cb->sampler_gen) {
        drop_graphs(cb);
        cb->sampler_gen = sl_cuda_sampler_generation(cb->sampler);
    }
    cudaGraphExec_t g = decode && (!reqs || sampling) && T <= cb->graph_max ? decode_graph(cb, T, sampling) : NULL;
    /* the rows whose logits are asked, logit_rows at a time (one chunk when
     * a graph ran): norm, project, then copy back or draw */
    if (g)
        SL_CUDA_CHECK(cudaGraphLaunch(g, st));
    else
        TRY(enqueue_layers(cb, T));
    for (int64_t r0 = 0; r0 < n_out; r0 += cb->logit_rows) {
        int64_t nr = n_out - r0 < cb->logit_rows ? n_out - r0 : cb->logit_rows;
        if (!g)
            TRY(enqueue_logits(cb, r0, nr));
        if (!reqs)
            SL_CUDA_CHECK(cudaMemcpyAsync(logits + r0 * V, cb->logits, (size_t)(nr * V) * sizeof(float),
                                          cudaMemcpyDeviceToHost, st));
        else if (!g)   /* a sampling graph drew already */
            TRY(sl_cuda_sampler_launch(cb->sampler, cb->logits, (int32_t)r0, (int32_t)nr, st));
    }
    sl_cuda_profile_mark(cb->prof, reqs ? SL_PROF_SAMPLE : SL_PROF_COPY, st);
    if (reqs)
        TRY(sl_cuda_sampler_fetch(cb->sampler, st));
    SL_CUDA_CHECK(cudaStreamSynchronize(st));
    sl_cuda_profile_end(cb->prof, T);
    return SL_OK;
}

static sl_status cuda_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    sl_status rc = forward_steps(b, seqs, n_seqs, logits, NULL);
    /* A step that failed half-way may still have copies in flight into the
     * staging area or the caller's logits: drain them before returning. */
    if (rc < 0)
        cudaStreamSynchronize(((cuda_backend *)b)->stream);
    return rc;
}

static sl_status cuda_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                     const sl_sample_req *reqs, int32_t *tokens)
{
    cuda_backend *cb = (cuda_backend *)b;
    sl_status rc = forward_steps(b, seqs, n_seqs, NULL, reqs);
    if (rc < 0) {
        cudaStreamSynchronize(cb->stream);
        return rc;
    }
    for (int32_t i = 0; i < n_seqs; i++)
        tokens[i] = sl_cuda_sampler_result(cb->sampler, i, &reqs[i]);
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* creation                                                                  */

static size_t align_up(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* Weight upload plan: pass 1 (dst == NULL) sums sizes, pass 2 copies. */
typedef struct {
    uint8_t *base;     /* device arena, NULL in the sizing pass */
    size_t used;
    cudaError_t err;
} arena;

static const void *arena_put(arena *a, const void *src, size_t bytes)
{
    if (!src)
        return NULL;
    size_t at = a->used;
    a->used += align_up(bytes);
    if (!a->base)
        return NULL;
    if (a->err == cudaSuccess)
        a->err = cudaMemcpy(a->base + at, src, bytes, cudaMemcpyHostToDevice);
    return a->base + at;
}

static sl_cuda_weight arena_weight(arena *a, const sl_weight *w)
{
    sl_cuda_weight d = {w->type, w->ne0, w->ne1, w->row_bytes, NULL, NULL};
    d.data = (const uint8_t *)arena_put(a, w->data, (size_t)w->ne1 * w->row_bytes);
    return d;
}

static const float *arena_vec(arena *a, const float *v, int64_t n)
{
    return (const float *)arena_put(a, v, (size_t)n * sizeof(float));
}

/* Lays out (or uploads) every tensor; returns the bytes the arena needs. */
static size_t place_weights(cuda_backend *cb, arena *a, const double *inv_freq)
{
    const sl_model *m = cb->base.model;
    const sl_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    cb->tok_embd = arena_weight(a, &m->tok_embd);
    cb->output = m->tied_output ? cb->tok_embd : arena_weight(a, &m->output);
    cb->output_norm = arena_vec(a, m->output_norm, E);
    cb->inv_freq = (double *)arena_put(a, inv_freq, (size_t)(hp->n_rot / 2) * sizeof(double));
    for (int l = 0; l < hp->n_layer; l++) {
        const sl_layer *S = &m->layers[l];
        cuda_layer *L = &cb->layers[l];
        L->attn_norm = arena_vec(a, S->attn_norm, E);
        L->ffn_norm = arena_vec(a, S->ffn_norm, E);
        L->wq = arena_weight(a, &S->wq);
        L->wk = arena_weight(a, &S->wk);
        L->wv = arena_weight(a, &S->wv);
        L->wo = arena_weight(a, &S->wo);
        L->w_gate = arena_weight(a, &S->w_gate);
        L->w_up = arena_weight(a, &S->w_up);
        L->w_down = arena_weight(a, &S->w_down);
        L->bq = arena_vec(a, S->bq, q_dim);
        L->bk = arena_vec(a, S->bk, kv_dim);
        L->bv = arena_vec(a, S->bv, kv_dim);
        L->q_norm = arena_vec(a, S->q_norm, hp->head_dim);
        L->k_norm = arena_vec(a, S->k_norm, hp->head_dim);
    }
    return a->used;
}

#define MIB(x) ((unsigned long long)((x) >> 20))

/* The tensor-core path (gemm.cuh): float16 copies of every matrix when
 * they fit in half of the free memory (the KV cache is sized after), and a
 * cuBLAS handle. Off, with a note, when they do not fit or the environment
 * has SLUICE_CUDA_GEMM=0; only a CUDA failure is an error. */
static sl_status setup_gemm(cuda_backend *cb, char err[SL_ERR_LEN])
{
    const char *e = getenv("SLUICE_CUDA_GEMM");
    if (e && !strcmp(e, "0"))
        return SL_OK;
    const char *m = getenv("SLUICE_CUDA_GEMM_MIN");
    cb->gemm_min = m && atoi(m) > 0 ? atoi(m) : 16;
    const sl_hparams *hp = &cb->base.model->hp;
    int n_w = 7 * hp->n_layer + 1;
    sl_cuda_weight **ws = (sl_cuda_weight **)malloc((size_t)n_w * sizeof *ws);
    if (!ws) {
        snprintf(err, SL_ERR_LEN, "cuda backend: out of host memory");
        return SL_ENOMEM;
    }
    int k = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        cuda_layer *L = &cb->layers[l];
        sl_cuda_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            ws[k++] = lw[i];
    }
    ws[k++] = &cb->output;
    size_t total = 0;
    for (int i = 0; i < k; i++)
        total += align_up(sl_cuda_gemm_bytes(ws[i]));
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    if (total > free_b / 2) {
        fprintf(stderr, "cuda backend: tensor-core path off: float16 weight copies (%llu MiB) exceed half of the "
                "free memory (%llu MiB)\n", MIB(total), MIB(free_b));
        free(ws);
        return SL_OK;
    }
    sl_status rc = SL_OK;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim, F = hp->n_ff;
    int64_t widest = E > q_dim ? E : q_dim;
    widest = widest > F ? widest : F;
    if (dev_malloc((void **)&cb->f16, total) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, SL_ERR_LEN, "cuda backend: float16 weight copies (%llu MiB) do not fit: %llu MiB free",
                 MIB(total), MIB(free_b));
        rc = SL_ENOMEM;
    } else {
        int64_t rows = ((int64_t)cb->base.cfg.max_batch_tokens + SL_GEMM_COLS_MAX - 1) / SL_GEMM_COLS_MAX * SL_GEMM_COLS_MAX;
        rc = sl_cuda_gemm_create(cb->stream, rows * widest, rows, &cb->gemm, err, SL_ERR_LEN);
    }
    size_t at = 0;
    for (int i = 0; rc == SL_OK && i < k; i++) {
        __half *dst = (__half *)((uint8_t *)cb->f16 + at);
        at += align_up(sl_cuda_gemm_bytes(ws[i]));
        if (sl_cuda_gemm_dequant(ws[i], dst, cb->stream) != SL_OK) {
            snprintf(err, SL_ERR_LEN, "cuda backend: dequantizing to float16 failed");
            rc = SL_EBACKEND;
        }
        ws[i]->f16 = dst;
    }
    if (rc == SL_OK && cudaStreamSynchronize(cb->stream) != cudaSuccess) {
        snprintf(err, SL_ERR_LEN, "cuda backend: dequantizing to float16 failed");
        rc = SL_EBACKEND;
    }
    free(ws);
    return rc;
}

/* The model's matrices must be of a type the matmul kernel computes. */
static bool check_types(const sl_model *m, char err[SL_ERR_LEN])
{
    const sl_weight *w[] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++)
        if (!sl_cuda_matmul_supports(w[i]->type)) {
            snprintf(err, SL_ERR_LEN, "cuda backend: tensor type %u of %s is not supported", w[i]->type,
                     i ? "output" : "token_embd");
            return false;
        }
    for (int l = 0; l < m->hp.n_layer; l++) {
        const sl_layer *L = &m->layers[l];
        const sl_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            if (!sl_cuda_matmul_supports(lw[i]->type)) {
                snprintf(err, SL_ERR_LEN, "cuda backend: layer %d has a matrix of unsupported type %u", l,
                         lw[i]->type);
                return false;
            }
    }
    return true;
}


extern "C" __attribute__((visibility("default"))) sl_status
sl_cuda_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out, char err[SL_ERR_LEN])
{
    *out = NULL;
    const sl_hparams *hp = &m->hp;
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev < 1) {
        snprintf(err, SL_ERR_LEN, "cuda backend: no usable CUDA device (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
        return SL_EUNSUPPORTED;
    }
    if (hp->head_dim > SL_CUDA_ATTN_MAX_HEAD_DIM || hp->head_dim % 4 != 0 || hp->n_head % hp->n_head_kv != 0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: head_dim %d (a multiple of 4, max %d) or %d heads over %d kv heads "
                 "unsupported",
                 hp->head_dim, SL_CUDA_ATTN_MAX_HEAD_DIM, hp->n_head, hp->n_head_kv);
        return SL_EUNSUPPORTED;
    }
    if (!check_types(m, err))
        return SL_EUNSUPPORTED;
    if (cfg->kv_block_size < 1 || cfg->max_batch_tokens < 1 || cfg->max_ctx < 1) {
        snprintf(err, SL_ERR_LEN, "cuda backend: invalid configuration");
        return SL_EINVAL;
    }

    const char *fault = getenv("SLUICE_CUDA_FAIL_ALLOC");
    alloc_countdown = fault ? atoi(fault) : 0;
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (cb)
        cb->layers = (cuda_layer *)calloc((size_t)hp->n_layer, sizeof *cb->layers);
    if (!cb || !cb->layers) {
        free(cb);
        snprintf(err, SL_ERR_LEN, "cuda backend: out of host memory");
        return SL_ENOMEM;
    }
    /* SLUICE_CUDA_SAMPLE=0: the worker samples on the host (for comparison) */
    static const sl_backend_ops ops = {"cuda", cuda_forward, cuda_destroy, cuda_forward_sample};
    static const sl_backend_ops ops_host_sampling = {"cuda", cuda_forward, cuda_destroy, NULL};
    const char *samp = getenv("SLUICE_CUDA_SAMPLE");
    cb->base.ops = samp && !strcmp(samp, "0") ? &ops_host_sampling : &ops;
    cb->base.model = m;
    cb->base.cfg = *cfg;
    cb->base.cfg.device = "cuda";
    sl_status rc = SL_EBACKEND;
    size_t free_b = 0, total_b = 0;

#define FAIL(code, ...)                                   \
    do {                                                  \
        snprintf(err, SL_ERR_LEN, __VA_ARGS__);           \
        rc = (code);                                      \
        goto fail;                                        \
    } while (0)
#define CUDA_OR_FAIL(call, what)                                                                            \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess)                                                                              \
            FAIL(e_ == cudaErrorMemoryAllocation ? SL_ENOMEM : SL_EBACKEND, "cuda backend: %s: %s", what,   \
                 cudaGetErrorString(e_));                                                                   \
    } while (0)

    {
        CUDA_OR_FAIL(cudaSetDevice(0), "cudaSetDevice(0)");
        CUDA_OR_FAIL(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking), "cudaStreamCreate");
        cb->stream_ok = true;

        /* weights: size the arena, allocate once, upload */
        int half = hp->n_rot / 2;
        double *inv_freq = (double *)malloc((size_t)(half > 0 ? half : 1) * sizeof(double));
        if (!inv_freq)
            FAIL(SL_ENOMEM, "cuda backend: out of host memory");
        for (int i = 0; i < half; i++) {
            inv_freq[i] = pow((double)hp->rope_freq_base, -2.0 * (double)i / (double)hp->n_rot);
            if (m->rope_freqs)
                inv_freq[i] /= m->rope_freqs[i];
        }
        arena a = {NULL, 0, cudaSuccess};
        size_t wbytes = place_weights(cb, &a, inv_freq);
        cudaMemGetInfo(&free_b, &total_b);
        ce = dev_malloc((void **)&cb->weights, wbytes);
        if (ce != cudaSuccess) {
            free(inv_freq);
            FAIL(SL_ENOMEM, "cuda backend: weights (%llu MiB) do not fit: %llu MiB free of %llu MiB (%s)",
                 MIB(wbytes), MIB(free_b), MIB(total_b), cudaGetErrorString(ce));
        }
        arena up = {cb->weights, 0, cudaSuccess};
        place_weights(cb, &up, inv_freq);
        free(inv_freq);
        CUDA_OR_FAIL(up.err, "uploading weights");

        cb->qkv.inv_freq = cb->inv_freq;
        cb->qkv.freq_scale = hp->rope_freq_scale;
        cb->qkv.n_head = hp->n_head;
        cb->qkv.n_rot = hp->n_rot;
        cb->qkv.neox = hp->rope_style == SL_ROPE_NEOX;
        cb->qkv.eps = hp->norm_eps;

        /* scratch for max_batch_tokens rows */
        /* rows rounded up: the tensor-core path writes whole chunks of up to SL_GEMM_COLS_MAX rows */
        int64_t T = ((int64_t)cfg->max_batch_tokens + SL_GEMM_COLS_MAX - 1) / SL_GEMM_COLS_MAX * SL_GEMM_COLS_MAX;
        int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
        int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, V = hp->n_vocab;
        int64_t xn_dim = E > q_dim ? E : q_dim;
        cb->logit_rows = cfg->max_batch_tokens < MAX_LOGIT_ROWS ? cfg->max_batch_tokens : MAX_LOGIT_ROWS;
        int64_t lr = (cb->logit_rows + SL_GEMM_COLS_MAX - 1) / SL_GEMM_COLS_MAX * SL_GEMM_COLS_MAX;
        /* fixed for the worst case, so that a row's split never depends on what else is batched */
        cb->att_split_floats = sl_cuda_attention_scratch_floats(cfg->max_batch_tokens, hp->n_head, hp->head_dim,
                                                                cfg->max_ctx);
        struct {
            float **p;
            int64_t n;
        } sc[] = {{&cb->x, T * E},      {&cb->xn, T * xn_dim}, {&cb->q, T * q_dim},     {&cb->k, T * kv_dim},
                  {&cb->v, T * kv_dim}, {&cb->att, T * q_dim}, {&cb->gate, T * hp->n_ff}, {&cb->up, T * hp->n_ff},
                  {&cb->logits, lr * V}, {&cb->att_split, cb->att_split_floats}};
        size_t sbytes = 0;
        for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
            if (sc[i].n == 0)
                continue;   /* att_split when max_ctx never splits */
            sbytes += (size_t)sc[i].n * sizeof(float);
            ce = dev_malloc((void **)sc[i].p, (size_t)sc[i].n * sizeof(float));
            if (ce != cudaSuccess) {
                cudaMemGetInfo(&free_b, &total_b);
                FAIL(SL_ENOMEM, "cuda backend: scratch for %d batch tokens (%llu MiB so far) does not fit "
                     "after the weights (%llu MiB): %llu MiB free", cfg->max_batch_tokens, MIB(sbytes),
                     MIB(wbytes), MIB(free_b));
            }
        }
        int64_t per_seq = ((int64_t)cfg->max_ctx + cfg->kv_block_size - 1) / cfg->kv_block_size;
        int64_t tab = T * per_seq < (4 << 20) ? T * per_seq : (4 << 20);
        if (meta_reserve(cb, 4 * T + tab) < 0)
            FAIL(SL_ENOMEM, "cuda backend: per-step staging (%llu MiB) does not fit",
                 MIB((uint64_t)(4 * T + tab) * 4));

        rc = setup_gemm(cb, err);
        if (rc != SL_OK)
            goto fail;
        rc = SL_EBACKEND;

        /* KV cache: as asked, or from what is free now */
        /* sl_backend_kv_block_bytes()'s figure; computed here because the
         * library links nothing of the host binary */
        uint64_t block_bytes = 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim * cfg->kv_block_size * sizeof(float);
        uint64_t n_blocks = cfg->n_kv_blocks;
        CUDA_OR_FAIL(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        if (n_blocks == 0) {
            uint64_t reserve = total_b / RESERVE_DIV > RESERVE_MIN ? total_b / RESERVE_DIV : RESERVE_MIN;
            n_blocks = free_b > reserve ? (free_b - reserve) / block_bytes : 0;
            if (n_blocks > 0x7fffffff)
                n_blocks = 0x7fffffff;
            if (n_blocks < 1)
                FAIL(SL_ENOMEM, "cuda backend: no room for a KV cache: %llu MiB free after weights (%llu MiB) "
                     "and scratch (%llu MiB), %llu MiB kept in reserve", MIB(free_b), MIB(wbytes), MIB(sbytes),
                     MIB(reserve));
        }
        uint64_t kv_bytes = n_blocks * block_bytes;
        ce = dev_malloc((void **)&cb->kv.kv, kv_bytes);
        if (ce != cudaSuccess)
            FAIL(SL_ENOMEM, "cuda backend: KV cache (%llu MiB for %llu blocks of %u positions) does not fit: "
                 "%llu MiB free after weights (%llu MiB) and scratch (%llu MiB)", MIB(kv_bytes),
                 (unsigned long long)n_blocks, cfg->kv_block_size, MIB(free_b), MIB(wbytes), MIB(sbytes));
        CUDA_OR_FAIL(cudaMemsetAsync(cb->kv.kv, 0, kv_bytes, cb->stream), "clearing the KV cache");
        CUDA_OR_FAIL(cudaStreamSynchronize(cb->stream), "clearing the KV cache");
        cb->kv.n_blocks = (int64_t)n_blocks;
        cb->kv.block_floats = (int64_t)hp->n_head_kv * cfg->kv_block_size * hp->head_dim;
        cb->kv.block_size = (int32_t)cfg->kv_block_size;
        cb->kv.n_head_kv = hp->n_head_kv;
        cb->kv.head_dim = hp->head_dim;
        cb->base.cfg.n_kv_blocks = (uint32_t)n_blocks;
        cb->base.kv_bytes = kv_bytes;
    }
#undef CUDA_OR_FAIL
#undef FAIL
    alloc_countdown = 0;
    if (sl_cuda_attention_prepare() < 0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: attention kernels: %s", cudaGetErrorString(cudaGetLastError()));
        rc = SL_EBACKEND;
        goto fail;
    }
    if (sl_cuda_sampler_create(hp->n_vocab, &cb->sampler) < 0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: out of host memory");
        rc = SL_ENOMEM;
        goto fail;
    }
    cb->prof = sl_cuda_profile_create_from_env();
    {
        const char *g = getenv("SLUICE_CUDA_GRAPHS");
        if (!cb->prof && !(g && !strcmp(g, "0"))) {
            cb->graphs = (cudaGraphExec_t *)calloc((size_t)graph_slots(cb->logit_rows), sizeof *cb->graphs);
            cb->graph_cap = cb->graph_max = cb->graphs ? cb->logit_rows : 0;
        }
    }
    *out = &cb->base;
    return SL_OK;

fail:
    alloc_countdown = 0;
    cuda_destroy(&cb->base);
    return rc;
}
