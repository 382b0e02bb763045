/* kernels/cuda/backend.cu: the CUDA backend's creation and teardown: device
 * selection, the checks of what the model needs, the weight arena and its
 * upload, the float16 copies of the tensor-core path, scratch, the per-step
 * staging, the KV cache, and the vtable that points at forward.cu's steps.
 * sl_cuda_backend_create() is the one symbol the library exports.
 * Runs in the worker process, once per backend, before its first step
 * (creating the backend initialises CUDA).
 *
 * Memory is sized and allocated once, at creation: one allocation for all
 * weights, one for the KV cache, one per scratch tensor sized for
 * max_batch_tokens rows (a MoE model's layer scratch in one more); a step
 * allocates nothing, except that the staging
 * area for block tables grows if a step's tables outgrow it (a wart: a fixed
 * bound from the scheduler's table limits would remove it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/alloc.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/forward.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mmvq.cuh"
#include "kernels/cuda/gemm_moe.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/profile.cuh"
#include "kernels/cuda/sample.cuh"

#define ALIGN 256                  /* device sub-allocation alignment (bytes) */
#define RESERVE_MIN (512ull << 20) /* free memory left when sizing the KV cache ... */
#define RESERVE_DIV 32             /* ... or 1/32 of the card, whichever is larger */

/* ------------------------------------------------------------------------ */
/* teardown                                                                  */

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
    sl_cuda_forward_drop_graphs(cb);
    free(cb->graphs);
    sl_cuda_gemm_destroy(cb->gemm);
    cudaFree(cb->f16);
    cudaFree(cb->weights);
    cudaFree(cb->kv.kv);
    float *bufs[] = {cb->x, cb->xn, cb->q, cb->k, cb->v, cb->att, cb->att_split, cb->gate, cb->up, cb->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cudaFree(bufs[i]);
    cudaFree(cb->moe.base);
    cudaFree(cb->xq);
    cudaFree(cb->meta_d);
    cudaFreeHost(cb->meta_h);
    if (cb->stream_ok)
        cudaStreamDestroy(cb->stream);
    free(cb->layers);
    free(cb);
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
    sl_cuda_weight d = {w->type, w->ne0, w->ne1, w->row_bytes, NULL, false, NULL};
    d.data = (const uint8_t *)arena_put(a, w->data, (size_t)w->ne1 * w->row_bytes);
    return d;
}

/* The n_expert matrices of a 3-D expert tensor, contiguous in the file
 * (model_moe.c binds them so), as one upload; returns expert 0's matrix. */
static sl_cuda_weight arena_experts(arena *a, const sl_weight *views, int32_t n_expert)
{
    const sl_weight *w = &views[0];
    sl_cuda_weight d = {w->type, w->ne0, w->ne1, w->row_bytes, NULL, false, NULL};
    d.data = (const uint8_t *)arena_put(a, w->data, (size_t)n_expert * (size_t)w->ne1 * w->row_bytes);
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
    /* inv_freq holds the global layers' table, then the sliding-window layers' */
    cb->inv_freq = (double *)arena_put(a, inv_freq, (size_t)hp->n_rot * sizeof(double));
    cb->inv_freq_swa = cb->inv_freq ? cb->inv_freq + hp->n_rot / 2 : NULL;
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
        L->bo = arena_vec(a, S->bo, E);
        L->sinks = arena_vec(a, S->attn_sinks, hp->n_head);
        L->q_norm = arena_vec(a, S->q_norm, hp->head_dim);
        L->k_norm = arena_vec(a, S->k_norm, hp->head_dim);
        L->post_attn_norm = arena_vec(a, S->post_attn_norm, E);
        L->post_ffn_norm = arena_vec(a, S->post_ffn_norm, E);
        L->window = S->window;
        const sl_moe *mo = &S->moe;
        L->moe = mo->gate != NULL;
        if (L->moe) {
            L->router = arena_weight(a, &mo->router);
            L->exp_gate = arena_experts(a, mo->gate, hp->n_expert);
            L->exp_up = arena_experts(a, mo->up, hp->n_expert);
            L->exp_down = arena_experts(a, mo->down, hp->n_expert);
            L->sh_gate = arena_weight(a, &mo->sh_gate);
            L->sh_up = arena_weight(a, &mo->sh_up);
            L->sh_down = arena_weight(a, &mo->sh_down);
            L->sh_gate_inp = arena_weight(a, &mo->sh_gate_inp);
            L->router_b = arena_vec(a, mo->router_b, hp->n_expert);
            L->exp_gate_b = arena_vec(a, mo->gate_b, (int64_t)hp->n_expert * hp->n_ff_exp);
            L->exp_up_b = arena_vec(a, mo->up_b, (int64_t)hp->n_expert * hp->n_ff_exp);
            L->exp_down_b = arena_vec(a, mo->down_b, (int64_t)hp->n_expert * E);
        }
    }
    return a->used;
}

#define MIB(x) ((unsigned long long)((x) >> 20))

/* Float16 elements of the slab a streamed matrix is dequantized into: 128
 * MiB, so a 70B layer's 28672 x 8192 gate goes through in four slabs and
 * an 8B's largest layer matrix in one. */
#define STREAM_SLAB_MAX ((int64_t)64 << 20)

/* The tensor-core path (gemm.cuh) and which matrices it reads from a
 * resident float16 copy: copies are made in layer order (the output
 * matrix last) while their total fits in the budget, half of the free
 * memory (the KV cache is sized after) or SLUICE_CUDA_F16_COPIES_MIB; the
 * matrices past it are streamed through one scratch slab. So a model whose
 * copies all fit keeps the fastest path, and one whose copies do not (a
 * 70B on one card, or a budget of 0 for the least device memory) still
 * runs its large steps on tensor cores. SLUICE_CUDA_GEMM=0 turns the path
 * off; only a CUDA failure is an error. */
static sl_status setup_gemm(cuda_backend *cb, char err[SL_ERR_LEN])
{
    const char *e = getenv("SLUICE_CUDA_GEMM");
    if (e && !strcmp(e, "0"))
        return SL_OK;
    const char *m = getenv("SLUICE_CUDA_GEMM_MIN");
    cb->gemm_min = m && atoi(m) > 0 ? atoi(m) : 16;
    const sl_hparams *hp = &cb->base.model->hp;
    int n_w = 10 * hp->n_layer + 1;
    sl_cuda_weight **ws = (sl_cuda_weight **)malloc((size_t)n_w * sizeof *ws);
    if (!ws) {
        snprintf(err, SL_ERR_LEN, "cuda backend: out of host memory");
        return SL_ENOMEM;
    }
    int k = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        cuda_layer *L = &cb->layers[l];
        /* a MoE layer's router and experts take the small-batch kernels
         * (the router keeps its float32 routing, the experts their grouped
         * kernel: moe.cuh); its shared expert takes this path */
        sl_cuda_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                &L->sh_gate, &L->sh_up, &L->sh_down};
        for (int i = 0; i < 10; i++)
            if (lw[i]->data)
                ws[k++] = lw[i];
    }
    ws[k++] = &cb->output;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    size_t budget = free_b / 2;
    const char *bm = getenv("SLUICE_CUDA_F16_COPIES_MIB");
    if (bm && *bm) {
        char *end;
        long long v = strtoll(bm, &end, 10);
        if (*end || v < 0) {
            snprintf(err, SL_ERR_LEN, "cuda backend: SLUICE_CUDA_F16_COPIES_MIB=%s is not a number of MiB >= 0", bm);
            free(ws);
            return SL_EINVAL;
        }
        budget = (size_t)v << 20;
    }
    /* the resident prefix of ws: [0, n_res) */
    size_t total = 0;
    int n_res = 0;
    while (n_res < k && total + align_up(sl_cuda_gemm_bytes(ws[n_res])) <= budget)
        total += align_up(sl_cuda_gemm_bytes(ws[n_res++]));
    int64_t slab = 0;
    for (int i = n_res; i < k; i++) {
        int64_t el = ws[i]->ne0 * ws[i]->ne1;
        slab = el > slab ? el : slab;
    }
    slab = slab < STREAM_SLAB_MAX ? slab : STREAM_SLAB_MAX;
    for (int i = n_res; i < k; i++)
        if (slab / ws[i]->ne0 < 1)
            slab = ws[i]->ne0;   /* at least one row of every streamed matrix */
    fprintf(stderr, "cuda backend: tensor cores: %d of %d matrices with float16 copies (%llu MiB of a %llu MiB "
            "budget), %d streamed through a %llu MiB slab\n", n_res, k, MIB(total), MIB(budget), k - n_res,
            MIB((size_t)slab * sizeof(__half)));
    sl_status rc = SL_OK;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim, F = hp->n_ff;
    int64_t widest = E > q_dim ? E : q_dim;
    widest = widest > F ? widest : F;
    widest = widest > hp->n_ff_shexp ? widest : hp->n_ff_shexp;
    if (total > 0 && sl_cuda_dev_malloc((void **)&cb->f16, total) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, SL_ERR_LEN, "cuda backend: float16 weight copies (%llu MiB) do not fit: %llu MiB free",
                 MIB(total), MIB(free_b));
        rc = SL_ENOMEM;
    } else {
        int64_t rows = ((int64_t)cb->base.cfg.max_batch_tokens + SL_GEMM_COLS_MAX - 1) / SL_GEMM_COLS_MAX * SL_GEMM_COLS_MAX;
        rc = sl_cuda_gemm_create(cb->stream, rows * widest, rows, slab, &cb->gemm, err, SL_ERR_LEN);
    }
    size_t at = 0;
    for (int i = 0; rc == SL_OK && i < k; i++) {
        ws[i]->gemm = true;
        if (i >= n_res)
            continue;
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

/* The type's name for a message ("type 99" if GGUF has none). */
static const char *type_label(uint32_t type, char buf[16])
{
    const char *n = sl_ggml_type_name(type);
    if (n)
        return n;
    snprintf(buf, 16, "type %u", type);
    return buf;
}

/* The model's matrices must be of a type the matmul kernel computes; the
 * others (the IQ1/IQ2/IQ3 grid and TQ1_0/TQ2_0 ternary formats: CPU only)
 * are refused here, before any upload, never computed wrong. */
static bool check_types(const sl_model *m, char err[SL_ERR_LEN])
{
    char buf[16];
    /* gpt-oss (attention sinks, biases, top-k-then-softmax routing, the
     * clamped SwiGLU, MXFP4 experts) has kernels here that have not yet been
     * checked against the CPU backend on a GPU: refused unless asked for */
    const char *oss = getenv("SLUICE_CUDA_GPT_OSS");
    if (m->hp.arch == SL_ARCH_GPT_OSS && !(oss && !strcmp(oss, "1"))) {
        snprintf(err, SL_ERR_LEN, "cuda backend: gpt-oss on CUDA is not yet verified against the CPU backend; "
                 "SLUICE_CUDA_GPT_OSS=1 enables it, --device cpu computes it");
        return false;
    }
    const sl_weight *w[] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++)
        if (!sl_cuda_matmul_supports(w[i]->type)) {
            snprintf(err, SL_ERR_LEN, "cuda backend: %s is %s, a tensor type only the CPU backend computes",
                     i ? "output" : "token_embd", type_label(w[i]->type, buf));
            return false;
        }
    static const char *const names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                         "ffn_down"};
    for (int l = 0; l < m->hp.n_layer; l++) {
        const sl_layer *L = &m->layers[l];
        const sl_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            if (lw[i]->data && !sl_cuda_matmul_supports(lw[i]->type)) {
                snprintf(err, SL_ERR_LEN, "cuda backend: blk.%d.%s is %s, a tensor type only the CPU backend "
                         "computes", l, names[i], type_label(lw[i]->type, buf));
                return false;
            }
        if (!L->moe.gate)
            continue;
        const sl_moe *mo = &L->moe;
        static const char *const mnames[5] = {"ffn_gate_inp", "ffn_gate_inp_shexp", "ffn_gate_shexp",
                                              "ffn_up_shexp", "ffn_down_shexp"};
        const sl_weight *mw[] = {&mo->router, &mo->sh_gate_inp, &mo->sh_gate, &mo->sh_up, &mo->sh_down};
        for (int i = 0; i < 5; i++)
            if (mw[i]->data && !sl_cuda_matmul_supports(mw[i]->type)) {
                snprintf(err, SL_ERR_LEN, "cuda backend: blk.%d.%s is %s, a tensor type only the CPU backend "
                         "computes", l, mnames[i], type_label(mw[i]->type, buf));
                return false;
            }
        /* the experts go through the grouped small-batch kernel (moe.cuh), which takes fewer types */
        static const char *const enames[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        const sl_weight *ew[] = {&mo->gate[0], &mo->up[0], &mo->down[0]};
        for (int i = 0; i < 3; i++)
            if (!sl_cuda_mmv_experts_supports(ew[i]->type)) {
                snprintf(err, SL_ERR_LEN, "cuda backend: blk.%d.%s is %s; the CUDA expert kernel takes Q4_K, Q5_K, "
                         "Q6_K, Q8_0, Q8_1, Q2_K, Q3_K, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 experts "
                         "(--device cpu computes the others)", l, enames[i], type_label(ew[i]->type, buf));
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
    /* mixture of experts: the routing kernel holds a row's softmax in shared
     * memory and each chosen slot in a warp lane (moe.cuh) */
    if (hp->n_expert > SL_CUDA_MOE_MAX_EXPERTS || hp->n_expert_used > SL_CUDA_MOE_MAX_USED) {
        snprintf(err, SL_ERR_LEN, "cuda backend: %s routes each token to %d of %d experts; the CUDA routing kernel "
                 "takes at most %d of %d (--device cpu computes it)", m->arch_name, hp->n_expert_used,
                 hp->n_expert, SL_CUDA_MOE_MAX_USED, SL_CUDA_MOE_MAX_EXPERTS);
        return SL_EUNSUPPORTED;
    }
    if (!check_types(m, err))
        return SL_EUNSUPPORTED;
    if (cfg->kv_block_size < 1 || cfg->max_batch_tokens < 1 || cfg->max_ctx < 1) {
        snprintf(err, SL_ERR_LEN, "cuda backend: invalid configuration");
        return SL_EINVAL;
    }
    /* K/V storage (paged.cuh): float16 unless asked otherwise, half of
     * float32's bytes at ~1e-3 relative error per value (docs/CUDA.md) */
    sl_kv_type kv_type = cfg->kv_type == SL_KV_TYPE_AUTO ? SL_KV_TYPE_F16 : cfg->kv_type;
    if (kv_type != SL_KV_TYPE_F32 && kv_type != SL_KV_TYPE_F16 && kv_type != SL_KV_TYPE_Q8_0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: K/V type %d is not one of f32, f16, q8_0", (int)kv_type);
        return SL_EINVAL;
    }
    if (sl_kv_row_bytes(kv_type, hp->head_dim) == 0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: K/V type q8_0 needs head_dim a multiple of %d; the model's head_dim "
                 "is %d", SL_KV_Q8_0_GROUP, hp->head_dim);
        return SL_EINVAL;
    }

    const char *fault = getenv("SLUICE_CUDA_FAIL_ALLOC");
    sl_cuda_alloc_fail_after(fault ? atoi(fault) : 0);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (cb)
        cb->layers = (cuda_layer *)calloc((size_t)hp->n_layer, sizeof *cb->layers);
    if (!cb || !cb->layers) {
        free(cb);
        snprintf(err, SL_ERR_LEN, "cuda backend: out of host memory");
        return SL_ENOMEM;
    }
    /* SLUICE_CUDA_SAMPLE=0: the worker samples on the host (for comparison) */
    static const sl_backend_ops ops = {"cuda", sl_cuda_forward, cuda_destroy, sl_cuda_forward_sample,
                                       sl_cuda_forward_sample_overlap};
    static const sl_backend_ops ops_host_sampling = {"cuda", sl_cuda_forward, cuda_destroy, NULL, NULL};
    /* SLUICE_CUDA_MASK_OVERLAP=0: grammar masks are computed before the step
     * instead of during its layers (for comparison) */
    static const sl_backend_ops ops_no_overlap = {"cuda", sl_cuda_forward, cuda_destroy, sl_cuda_forward_sample,
                                                  NULL};
    const char *samp = getenv("SLUICE_CUDA_SAMPLE");
    const char *overlap = getenv("SLUICE_CUDA_MASK_OVERLAP");
    cb->base.ops = samp && !strcmp(samp, "0")         ? &ops_host_sampling
                   : overlap && !strcmp(overlap, "0") ? &ops_no_overlap
                                                      : &ops;
    cb->base.model = m;
    cb->base.cfg = *cfg;
    cb->base.cfg.device = "cuda";
    cb->base.cfg.kv_type = kv_type;
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
        double *inv_freq = (double *)malloc((size_t)(half > 0 ? 2 * half : 1) * sizeof(double));
        if (!inv_freq)
            FAIL(SL_ENOMEM, "cuda backend: out of host memory");
        const float *divisors = sl_model_rope_divisors(m, cfg->max_ctx);   /* llama3 or longrope, or NULL */
        for (int i = 0; i < half; i++) {
            inv_freq[i] = pow((double)hp->rope_freq_base, -2.0 * (double)i / (double)hp->n_rot);
            inv_freq[half + i] = pow((double)hp->rope_freq_base_swa, -2.0 * (double)i / (double)hp->n_rot);
            if (divisors) {
                inv_freq[i] /= divisors[i];
                inv_freq[half + i] /= divisors[i];
            }
        }
        arena a = {NULL, 0, cudaSuccess};
        size_t wbytes = place_weights(cb, &a, inv_freq);
        cudaMemGetInfo(&free_b, &total_b);
        ce = sl_cuda_dev_malloc((void **)&cb->weights, wbytes);
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
        cb->qkv.mscale = hp->rope_attn_factor;
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
            ce = sl_cuda_dev_malloc((void **)sc[i].p, (size_t)sc[i].n * sizeof(float));
            if (ce != cudaSuccess) {
                cudaMemGetInfo(&free_b, &total_b);
                FAIL(SL_ENOMEM, "cuda backend: scratch for %d batch tokens (%llu MiB so far) does not fit "
                     "after the weights (%llu MiB): %llu MiB free", cfg->max_batch_tokens, MIB(sbytes),
                     MIB(wbytes), MIB(free_b));
            }
        }
        if (sl_model_is_moe(m)) {
            /* MoE scratch, one allocation: T rows, R = T*k routed pairs */
            int64_t n = hp->n_expert, R = T * hp->n_expert_used, F = hp->n_ff_exp, S = hp->n_ff_shexp;
            int64_t count[] = {T * n, R, R, 2 * (n + 1), R, R * F, R * E, T * S, T * S, T, S > 0 ? T * E : 0,
                               1 + 2 * sl_cuda_moe_gemm_max_tiles(R, (int)n), R};
            size_t at[13], mbytes = 0;
            for (int i = 0; i < 13; i++) {
                at[i] = mbytes;
                mbytes += align_up((size_t)count[i] * 4);   /* float or int32 entries */
            }
            sbytes += mbytes;
            ce = sl_cuda_dev_malloc((void **)&cb->moe.base, mbytes);
            if (ce != cudaSuccess) {
                cudaMemGetInfo(&free_b, &total_b);
                FAIL(SL_ENOMEM, "cuda backend: MoE scratch for %d batch tokens (%llu MiB) does not fit after the "
                     "weights (%llu MiB): %llu MiB free", cfg->max_batch_tokens, MIB(mbytes), MIB(wbytes),
                     MIB(free_b));
            }
            uint8_t *mb = cb->moe.base;
            cb->moe.logits = (float *)(mb + at[0]);
            cb->moe.ids = (int32_t *)(mb + at[1]);
            cb->moe.w = (float *)(mb + at[2]);
            cb->moe.off = (int32_t *)(mb + at[3]);
            cb->moe.used = cb->moe.off + n + 1;
            cb->moe.pairs = (int32_t *)(mb + at[4]);
            cb->moe.h = (float *)(mb + at[5]);
            cb->moe.y = (float *)(mb + at[6]);
            cb->moe.sh_h = (float *)(mb + at[7]);
            cb->moe.sh_u = (float *)(mb + at[8]);
            cb->moe.shg = (float *)(mb + at[9]);
            cb->moe.sh_out = (float *)(mb + at[10]);
            cb->moe.tiles = (int32_t *)(mb + at[11]);
            cb->moe.scale = (float *)(mb + at[12]);
        }
        if (sl_cuda_mmvq_enabled()) {
            /* SLUICE_CUDA_MMVQ=1: the 8-bit rows of the largest matmul input
             * (n_embd, q_dim, n_ff, the shared expert's n_ff) for T rows; an
             * input past it takes the float kernels (forward.cu's q8_input) */
            int64_t in = xn_dim > hp->n_ff ? xn_dim : hp->n_ff;
            if (hp->n_ff_shexp > in)
                in = hp->n_ff_shexp;
            cb->xq_bytes = (size_t)T * sl_cuda_q8_row_bytes(in);
            sbytes += cb->xq_bytes;
            ce = sl_cuda_dev_malloc((void **)&cb->xq, cb->xq_bytes);
            if (ce != cudaSuccess) {
                cudaMemGetInfo(&free_b, &total_b);
                FAIL(SL_ENOMEM, "cuda backend: 8-bit activation scratch (SLUICE_CUDA_MMVQ=1) for %d batch tokens "
                     "(%llu MiB) does not fit after the weights (%llu MiB): %llu MiB free", cfg->max_batch_tokens,
                     MIB(cb->xq_bytes), MIB(wbytes), MIB(free_b));
            }
        }
        int64_t per_seq = ((int64_t)cfg->max_ctx + cfg->kv_block_size - 1) / cfg->kv_block_size;
        int64_t tab = T * per_seq < (4 << 20) ? T * per_seq : (4 << 20);
        /* rows, their tables, and a flash-attention step's groups and decode rows (3 per row at most) */
        if (sl_cuda_forward_meta_reserve(cb, 7 * T + tab) < 0)
            FAIL(SL_ENOMEM, "cuda backend: per-step staging (%llu MiB) does not fit",
                 MIB((uint64_t)(7 * T + tab) * 4));

        rc = setup_gemm(cb, err);
        if (rc != SL_OK)
            goto fail;
        rc = SL_EBACKEND;

        /* KV cache: as asked, or from what is free now */
        /* sl_backend_kv_block_bytes()'s figure; computed here because the
         * library links nothing of the host binary */
        uint64_t block_bytes = 2ull * hp->n_layer * hp->n_head_kv * cfg->kv_block_size *
                               (uint64_t)sl_kv_row_bytes(kv_type, hp->head_dim);
        uint64_t n_blocks = cfg->n_kv_blocks;
        CUDA_OR_FAIL(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        if (n_blocks == 0) {
            /* vLLM's gpu_memory_utilization: weights, scratch and the pool
             * together take at most `frac` of the card, so two instances
             * can share one at 0.45 each; and never more than is free now
             * (another process's memory is not ours to take), less a
             * reserve for what CUDA allocates later (graphs, cuBLAS
             * workspaces) */
            double frac = cfg->gpu_memory_fraction > 0.0 && cfg->gpu_memory_fraction <= 1.0
                              ? cfg->gpu_memory_fraction : 0.90;
            uint64_t cap = (uint64_t)(frac * (double)total_b), ours = (uint64_t)wbytes + sbytes;
            uint64_t by_frac = cap > ours ? cap - ours : 0;
            uint64_t reserve = total_b / RESERVE_DIV > RESERVE_MIN ? total_b / RESERVE_DIV : RESERVE_MIN;
            uint64_t by_free = free_b > reserve ? free_b - reserve : 0;
            n_blocks = (by_frac < by_free ? by_frac : by_free) / block_bytes;
            if (n_blocks > 0x7fffffff)
                n_blocks = 0x7fffffff;
            if (n_blocks < 1)
                FAIL(SL_ENOMEM, "cuda backend: no room for a KV cache: --gpu-memory-fraction %.2f of %llu MiB "
                     "leaves %llu MiB after weights (%llu MiB) and scratch (%llu MiB); %llu MiB free, %llu MiB "
                     "kept in reserve", frac, MIB(total_b), MIB(by_frac), MIB(wbytes), MIB(sbytes), MIB(free_b),
                     MIB(reserve));
        }
        uint64_t kv_bytes = n_blocks * block_bytes;
        ce = sl_cuda_dev_malloc((void **)&cb->kv.kv, kv_bytes);
        if (ce != cudaSuccess)
            FAIL(SL_ENOMEM, "cuda backend: KV cache (%llu MiB for %llu blocks of %u positions) does not fit: "
                 "%llu MiB free after weights (%llu MiB) and scratch (%llu MiB)", MIB(kv_bytes),
                 (unsigned long long)n_blocks, cfg->kv_block_size, MIB(free_b), MIB(wbytes), MIB(sbytes));
        CUDA_OR_FAIL(cudaMemsetAsync(cb->kv.kv, 0, kv_bytes, cb->stream), "clearing the KV cache");
        CUDA_OR_FAIL(cudaStreamSynchronize(cb->stream), "clearing the KV cache");
        cb->kv.n_blocks = (int64_t)n_blocks;
        cb->kv.block_size = (int32_t)cfg->kv_block_size;
        cb->kv.n_head_kv = hp->n_head_kv;
        cb->kv.head_dim = hp->head_dim;
        cb->kv.type = kv_type;
        cb->base.cfg.n_kv_blocks = (uint32_t)n_blocks;
        cb->base.kv_bytes = kv_bytes;
    }
#undef CUDA_OR_FAIL
#undef FAIL
    sl_cuda_alloc_fail_after(0);
    if (sl_cuda_attention_prepare() < 0) {
        snprintf(err, SL_ERR_LEN, "cuda backend: attention kernels: %s", cudaGetErrorString(cudaGetLastError()));
        rc = SL_EBACKEND;
        goto fail;
    }
    {
        /* flash attention for prefill steps: f16 cache and the head shapes its kernel takes; a
         * device that cannot give its shared memory keeps the split kernel (the error is not sticky) */
        const char *fa = getenv("SLUICE_CUDA_FLASH_ATTN");
        cb->fa_ok = !(fa && !strcmp(fa, "0")) && sl_cuda_fa_supported(&cb->kv, hp->n_head);
        if (cb->fa_ok && sl_cuda_attention_fa_prepare() < 0) {
            cudaGetLastError();
            fprintf(stderr, "cuda backend: flash attention off: its shared memory was refused\n");
            cb->fa_ok = false;
        }
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
    sl_cuda_alloc_fail_after(0);
    cuda_destroy(&cb->base);
    return rc;
}
