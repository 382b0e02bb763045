/* kernels/cuda/forward.cu: the CUDA backend: weight upload, the device
 * buffers, and the forward pass for the llama, qwen2 and qwen3 architectures
 * over a batch of sequences with paged KV caches.
 * Runs in the worker process on the scheduler thread; every launch goes to
 * one stream and a step ends with one synchronisation, after the logits are
 * on the host.
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
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/qkv_post.cuh"
#include "kernels/cuda/rmsnorm.cuh"

#define LOGIT_ROWS 64              /* logits rows computed and copied back per chunk */
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
    float *gate, *up;            /* (T, n_ff) */
    float *logits;               /* (LOGIT_ROWS, n_vocab) */

    /* per-step integers: host pinned staging, mirrored on the device:
     * [tokens T | tok_pos T | tok_table T | out_rows T | blocks cap] */
    int32_t *meta_h, *meta_d;
    int64_t meta_cap;            /* int32 entries both hold */
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

static void cuda_destroy(sl_backend *b)
{
    cuda_backend *cb = (cuda_backend *)b;
    if (!cb)
        return;
    if (cb->stream_ok)
        cudaStreamSynchronize(cb->stream);
    cudaFree(cb->weights);
    cudaFree(cb->kv.kv);
    float *bufs[] = {cb->x, cb->xn, cb->q, cb->k, cb->v, cb->att, cb->gate, cb->up, cb->logits};
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

static sl_status forward_steps(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    cuda_backend *cb = (cuda_backend *)b;
    const sl_hparams *hp = &b->model->hp;
    cudaStream_t st = cb->stream;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    int64_t Tmax = b->cfg.max_batch_tokens, bs = b->cfg.kv_block_size;

    /* flatten the batch into token rows and concatenated block tables */
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
                                  cudaMemcpyHostToDevice, st));
    const int32_t *d_tokens = cb->meta_d, *d_out_rows = cb->meta_d + 3 * Tmax;
    sl_cuda_batch batch = {cb->meta_d + Tmax, cb->meta_d + 2 * Tmax, cb->meta_d + 4 * Tmax};

    TRY(sl_cuda_embed(cb->x, &cb->tok_embd, d_tokens, T, st));
    for (int l = 0; l < hp->n_layer; l++) {
        const cuda_layer *L = &cb->layers[l];
        TRY(sl_cuda_rmsnorm(cb->xn, cb->x, NULL, L->attn_norm, T, E, hp->norm_eps, st));
        TRY(sl_cuda_matmul(&L->wq, cb->xn, E, T, cb->q, q_dim, st));
        TRY(sl_cuda_matmul(&L->wk, cb->xn, E, T, cb->k, kv_dim, st));
        TRY(sl_cuda_matmul(&L->wv, cb->xn, E, T, cb->v, kv_dim, st));
        sl_cuda_qkv_params p = cb->qkv;
        p.bq = L->bq;
        p.bk = L->bk;
        p.bv = L->bv;
        p.q_norm = L->q_norm;
        p.k_norm = L->k_norm;
        TRY(sl_cuda_qkv_post(cb->q, cb->k, cb->v, T, &p, &cb->kv, &batch, l, st));
        TRY(sl_cuda_attention(cb->att, cb->q, T, hp->n_head, &cb->kv, &batch, l, st));
        TRY(sl_cuda_matmul(&L->wo, cb->att, q_dim, T, cb->xn, E, st));
        TRY(sl_cuda_add(cb->x, cb->xn, T * E, st));

        TRY(sl_cuda_rmsnorm(cb->xn, cb->x, NULL, L->ffn_norm, T, E, hp->norm_eps, st));
        TRY(sl_cuda_matmul(&L->w_gate, cb->xn, E, T, cb->gate, F, st));
        TRY(sl_cuda_matmul(&L->w_up, cb->xn, E, T, cb->up, F, st));
        TRY(sl_cuda_swiglu(cb->gate, cb->up, T * F, st));
        TRY(sl_cuda_matmul(&L->w_down, cb->gate, F, T, cb->xn, E, st));
        TRY(sl_cuda_add(cb->x, cb->xn, T * E, st));
    }

    /* the rows whose logits are asked, LOGIT_ROWS at a time: norm, project, copy back */
    for (int64_t r0 = 0; r0 < n_out; r0 += LOGIT_ROWS) {
        int64_t nr = n_out - r0 < LOGIT_ROWS ? n_out - r0 : LOGIT_ROWS;
        TRY(sl_cuda_rmsnorm(cb->xn, cb->x, d_out_rows + r0, cb->output_norm, nr, E, hp->norm_eps, st));
        TRY(sl_cuda_matmul(&cb->output, cb->xn, E, nr, cb->logits, V, st));
        SL_CUDA_CHECK(cudaMemcpyAsync(logits + r0 * V, cb->logits, (size_t)(nr * V) * sizeof(float),
                                      cudaMemcpyDeviceToHost, st));
    }
    SL_CUDA_CHECK(cudaStreamSynchronize(st));
    return SL_OK;
}

static sl_status cuda_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    sl_status rc = forward_steps(b, seqs, n_seqs, logits);
    /* A step that failed half-way may still have copies in flight into the
     * staging area or the caller's logits: drain them before returning. */
    if (rc < 0)
        cudaStreamSynchronize(((cuda_backend *)b)->stream);
    return rc;
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
    sl_cuda_weight d = {w->type, w->ne0, w->ne1, w->row_bytes, NULL};
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

#define MIB(x) ((unsigned long long)((x) >> 20))

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
    if (hp->head_dim > SL_CUDA_ATTN_MAX_HEAD_DIM || hp->n_head % hp->n_head_kv != 0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: head_dim %d (max %d) or %d heads over %d kv heads unsupported",
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
    static const sl_backend_ops ops = {"cuda", cuda_forward, cuda_destroy};
    cb->base.ops = &ops;
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
        int64_t T = cfg->max_batch_tokens, E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
        int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, V = hp->n_vocab;
        int64_t xn_dim = E > q_dim ? E : q_dim, lr = T < LOGIT_ROWS ? T : LOGIT_ROWS;
        struct {
            float **p;
            int64_t n;
        } sc[] = {{&cb->x, T * E},      {&cb->xn, T * xn_dim}, {&cb->q, T * q_dim},     {&cb->k, T * kv_dim},
                  {&cb->v, T * kv_dim}, {&cb->att, T * q_dim}, {&cb->gate, T * hp->n_ff}, {&cb->up, T * hp->n_ff},
                  {&cb->logits, lr * V}};
        size_t sbytes = 0;
        for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
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
    *out = &cb->base;
    return SL_OK;

fail:
    alloc_countdown = 0;
    cuda_destroy(&cb->base);
    return rc;
}
