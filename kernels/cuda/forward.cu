/* kernels/cuda/forward.cu: the CUDA backend's step: the forward pass for
 * the llama, qwen2, qwen3, gemma2, gemma3, granite and phi3 architectures
 * (phi3's fused matrices arrive as separate row views) and the MoE ones
 * (qwen2moe, qwen3moe, Mixtral, and gpt-oss with its biases, sinks,
 * routing and clamped SwiGLU: moe_ffn, moe.cuh) over a batch of
 * sequences with paged KV caches, and the forward/forward_sample entry points
 * (forward.cuh) that backend.cu puts in the vtable. It runs on the state
 * backend.cu created (backend.cuh).
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
 * Trade-off: a decode step replays a CUDA graph, captured on first use for
 * its (draws or copies, row count, attention split count), so its launches
 * cost one graph launch instead of several per layer; the price is a graph
 * held per shape seen, and a recapture whenever the staging the graphs
 * point into moves (sl_cuda_forward_drop_graphs). */
#include <string.h>

#include "kernels/cuda/alloc.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_fa.cuh"
#include "kernels/cuda/backend.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/eltwise.cuh"
#include "kernels/cuda/embed.cuh"
#include "kernels/cuda/forward.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm_moe.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/mmvq.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/profile.cuh"
#include "kernels/cuda/qkv_post.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/sample.cuh"

/* ------------------------------------------------------------------------ */
/* per-step staging and the graphs that point into it                       */

void sl_cuda_forward_drop_graphs(cuda_backend *cb)
{
    for (int64_t i = 0; cb->graphs && i < graph_slots(cb->graph_cap); i++)
        if (cb->graphs[i]) {
            cudaGraphExecDestroy(cb->graphs[i]);
            cb->graphs[i] = NULL;
        }
}

sl_status sl_cuda_forward_meta_reserve(cuda_backend *cb, int64_t need)
{
    if (need <= cb->meta_cap)
        return SL_OK;
    SL_CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    sl_cuda_forward_drop_graphs(cb);
    cudaFree(cb->meta_d);
    cudaFreeHost(cb->meta_h);
    cb->meta_d = NULL;
    cb->meta_h = NULL;
    cb->meta_cap = 0;
    SL_CUDA_CHECK(sl_cuda_dev_malloc((void **)&cb->meta_d, (size_t)need * sizeof(int32_t)));
    SL_CUDA_CHECK(sl_cuda_pinned_malloc((void **)&cb->meta_h, (size_t)need * sizeof(int32_t)));
    cb->meta_cap = need;
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* one step's launches                                                      */

#define TRY(expr)                \
    do {                         \
        sl_status rc_ = (expr);  \
        if (rc_ < 0)             \
            return SL_EBACKEND;  \
    } while (0)

/* y = x w^T: on tensor cores for a step of many rows when w takes that
 * path (from its float16 copy, or streamed), else the small-batch kernels. */
/* The integer small-batch path (mmvq.cuh, SLUICE_CUDA_MMVQ=1: cb->xq set)
 * on a step that takes the small-batch kernels: rounds x's T rows once into
 * cb->xq for the n matrices w, which must all take the path with one
 * activation format and row length. SL_OK: quantized (launched); SL_EINVAL:
 * nothing launched, take the float kernels (path off, a matrix it does not
 * compute, an input wider than the scratch); else the launch's error. */
static sl_status q8_input(cuda_backend *cb, const sl_cuda_weight *const *w, int n, const float *x, int64_t ldx,
                          int64_t T)
{
    if (!cb->xq || cb->use_gemm)
        return SL_EINVAL;
    int f = sl_cuda_q8_format(w[0]->type);
    for (int i = 0; i < n; i++)
        if (!sl_cuda_mmvq_supports(w[i]) || sl_cuda_q8_format(w[i]->type) != f || w[i]->ne0 != w[0]->ne0)
            return SL_EINVAL;
    if ((size_t)T * sl_cuda_q8_row_bytes(w[0]->ne0) > cb->xq_bytes)
        return SL_EINVAL;
    return sl_cuda_q8_quantize(f, x, ldx, w[0]->ne0, T, cb->xq, cb->stream);
}

static sl_status mm(cuda_backend *cb, const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y,
                    int64_t ldy)
{
    if (cb->use_gemm && w->gemm)
        return sl_cuda_gemm_matmul(cb->gemm, w, (const __half *)w->f16, x, ldx, T, y, ldy);
    sl_status rc = q8_input(cb, &w, 1, x, ldx, T);
    if (rc == SL_OK)
        return sl_cuda_mmvq(w, cb->xq, T, y, ldy, cb->stream);
    if (rc != SL_EINVAL)
        return rc;
    return sl_cuda_matmul(w, x, ldx, T, y, ldy, cb->stream);
}

/* y[i] = x w[i]^T by the small-batch kernels: on the integer path one
 * quantization of x and one launch per run of matrices of one type (q and k
 * (Q4_K) in one, v (Q6_K) in another, in a Q4_K_M file), else mmv.cu's
 * fused launch. SL_EINVAL: neither applies, nothing launched (go matrix by
 * matrix). */
static sl_status small_multi(cuda_backend *cb, const sl_cuda_weight *const *w, int n, float *const *y,
                             const int64_t *ldy, const float *x, int64_t ldx, int64_t T)
{
    sl_status rc = q8_input(cb, w, n, x, ldx, T);
    if (rc == SL_EINVAL)
        return sl_cuda_mmv_multi(w, y, ldy, n, x, ldx, T, cb->stream);
    if (rc != SL_OK)
        return rc;
    /* q8_input checked every matrix, so no run should fail; if one did with
     * SL_EINVAL the caller would redo them all, still correct */
    for (int i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && w[j]->type == w[i]->type; j++)
            ;
        rc = sl_cuda_mmvq_multi(w + i, y + i, ldy + i, j - i, cb->xq, T, cb->stream);
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

/* y = silu(x gate^T) * (x up^T) by the small-batch kernels, fused where the
 * types allow; u (same shape as y) holds up when gate and up take the
 * integer path with different types. SL_EINVAL: nothing launched. */
static sl_status small_swiglu(cuda_backend *cb, const sl_cuda_weight *gate, const sl_cuda_weight *up, const float *x,
                              int64_t ldx, int64_t T, float *y, int64_t ldy, float *u)
{
    const sl_cuda_weight *w[2] = {gate, up};
    sl_status rc = q8_input(cb, w, 2, x, ldx, T);
    if (rc == SL_EINVAL)
        return sl_cuda_mmv_swiglu(gate, up, x, ldx, T, y, ldy, cb->stream);
    if (rc != SL_OK)
        return rc;
    rc = sl_cuda_mmvq_swiglu(gate, up, cb->xq, T, y, ldy, cb->stream);
    if (rc != SL_EINVAL)
        return rc;
    TRY(sl_cuda_mmvq(gate, cb->xq, T, y, ldy, cb->stream));
    TRY(sl_cuda_mmvq(up, cb->xq, T, u, ldy, cb->stream));
    return sl_cuda_swiglu(y, u, T * ldy, cb->stream);
}

/* Several matmuls of one input on tensor cores (the input converted once);
 * SL_EINVAL when the path is off or a matrix does not take it (the caller
 * then goes matrix by matrix). */
static sl_status mm_multi(cuda_backend *cb, const sl_cuda_weight **w, int n, const float *x, int64_t ldx, int64_t T,
                          float **y, const int64_t *ldy)
{
    if (!cb->use_gemm)
        return SL_EINVAL;
    for (int i = 0; i < n; i++)
        if (!w[i]->gemm)
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
    int64_t n_rows = 0;
    for (int32_t i = 0; i < n_seqs; i++)
        n_rows += seqs[i].n_tokens;
    /* a flash-attention step's groups (two entries each, at most one per row) and decode rows follow the tables */
    int64_t n_fa = cb->use_fa ? 3 * n_rows : 0;
    TRY(sl_cuda_forward_meta_reserve(cb, 4 * Tmax + n_tab + n_fa));
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
    cb->fa_groups = cb->fa_decode = 0;
    cb->fa_off = 4 * Tmax + n_tab;
    if (cb->use_fa) {
        /* prompt chunks: query groups (sequence by sequence cuts the same, a
         * sequence always starts a group); decode rows: a list for the split
         * kernel, written after the groups once their count is known */
        const sl_hparams *hp = &cb->base.model->hp;
        int qp = sl_cuda_fa_group_positions(hp->n_head / hp->n_head_kv);
        int32_t *g = cb->meta_h + cb->fa_off, *dec = g + 2 * T;   /* dec: moved down below */
        int64_t t0 = 0;
        for (int32_t i = 0; i < n_seqs; t0 += seqs[i].n_tokens, i++) {
            if (seqs[i].n_tokens == 1 && !seqs[i].prompt) {
                dec[cb->fa_decode++] = (int32_t)t0;
                continue;
            }
            int32_t *gi = g + 2 * cb->fa_groups;
            int64_t n = sl_cuda_fa_groups(tok_pos + t0, tok_table + t0, seqs[i].n_tokens, qp, gi);
            for (int64_t j = 0; j < 2 * n; j++)
                gi[j] += (int32_t)t0;
            cb->fa_groups += n;
        }
        memmove(g + 2 * cb->fa_groups, dec, (size_t)cb->fa_decode * sizeof(int32_t));
        n_fa = 2 * cb->fa_groups + cb->fa_decode;
    }
    SL_CUDA_CHECK(cudaMemcpyAsync(cb->meta_d, cb->meta_h, (size_t)(4 * Tmax + n_tab + n_fa) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, cb->stream));
    *T_out = T;
    *n_out_out = n_out;
    return SL_OK;
}

/* A MoE layer's FFN of xn's T rows, into xn (moe.cuh; kernels/cpu/forward.c
 * moe_ffn is the reference): the router in float32 (plus
 * gpt-oss's bias), routing and grouping on the device (gpt-oss: top-k,
 * then softmax), the experts' gate and up fused with SiLU (gpt-oss: their
 * biases, then the clamped SwiGLU), their down (and bias), qwen2moe's shared expert as a dense FFN, then each
 * row's sum. The experts take the tensor-core kernel (gemm_moe.cuh) in
 * the steps whose dense matmuls do (use_gemm), the small-batch kernel in the
 * others, as the dense layers switch; the other choices by T keep the bits
 * (routing and grouping fused up to 16 rows, staged expert inputs from 8).
 * No launch reads what the routing chose on the host, so decode steps keep
 * their graphs. */
static sl_status moe_ffn(cuda_backend *cb, const cuda_layer *L, int64_t T)
{
    const sl_hparams *hp = &cb->base.model->hp;
    cudaStream_t st = cb->stream;
    int n = hp->n_expert, k = hp->n_expert_used;
    int64_t E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp, R = T * k;
    /* a float32 router (every T: its order depends on the shape only) on its many-warp kernel */
    if (sl_cuda_moe_router_supports(&L->router))
        TRY(sl_cuda_moe_router(&L->router, cb->xn, E, T, cb->moe.logits, n, st));
    else
        TRY(mm(cb, &L->router, cb->xn, E, T, cb->moe.logits, n));
    if (L->router_b)   /* gpt-oss */
        TRY(sl_cuda_add_rows(cb->moe.logits, n, L->router_b, T, n, st));
    TRY(sl_cuda_moe_route_group(cb->moe.logits, T, n, k, hp->moe_gating == SL_MOE_GATING_TOPK_SOFTMAX,
                                hp->moe_norm_w, cb->moe.ids, cb->moe.w, cb->moe.off, cb->moe.pairs, cb->moe.used, st));
    sl_cuda_profile_mark(cb->prof, SL_PROF_MOE_ROUTE, st);
    /* gpt-oss: expert biases before the activation, and its clamped SwiGLU */
    bool oai = hp->ffn_act == SL_FFN_SWIGLU_OAI;
    if (cb->use_gemm && sl_cuda_moe_gemm_enabled() && sl_cuda_moe_gemm_supports(L->exp_gate.type) &&
        sl_cuda_moe_gemm_supports(L->exp_down.type)) {
        /* a tensor-core step: the experts on tensor cores too (gemm_moe.cuh) */
        TRY(sl_cuda_moe_gemm_tiles(cb->moe.off, cb->moe.used, cb->moe.tiles, st));
        TRY(sl_cuda_moe_gemm_scales(cb->xn, E, E, T, cb->moe.scale, st));
        TRY(sl_cuda_moe_gemm(&L->exp_gate, &L->exp_up, L->exp_gate_b, L->exp_up_b, oai, n, cb->moe.off,
                             cb->moe.pairs, cb->moe.tiles, R, k, cb->xn, E, cb->moe.scale, cb->moe.h, F, st));
        sl_cuda_profile_mark(cb->prof, SL_PROF_GATE_UP, st);
        TRY(sl_cuda_moe_gemm_scales(cb->moe.h, F, F, R, cb->moe.scale, st));
        TRY(sl_cuda_moe_gemm(&L->exp_down, NULL, L->exp_down_b, NULL, false, n, cb->moe.off, cb->moe.pairs,
                             cb->moe.tiles, R, 1, cb->moe.h, F, cb->moe.scale, cb->moe.y, E, st));
    } else {
        TRY(sl_cuda_mmv_experts_biased(&L->exp_gate, &L->exp_up, L->exp_gate_b, L->exp_up_b, oai, n, cb->moe.off,
                                       cb->moe.pairs, cb->moe.used, R, T, k, cb->xn, E, cb->moe.h, F, st));
        sl_cuda_profile_mark(cb->prof, SL_PROF_GATE_UP, st);
        TRY(sl_cuda_mmv_experts_biased(&L->exp_down, NULL, L->exp_down_b, NULL, false, n, cb->moe.off,
                                       cb->moe.pairs, cb->moe.used, R, T, 1, cb->moe.h, F, cb->moe.y, E, st));
    }
    bool shared = L->sh_down.data != NULL;
    if (shared) {
        sl_status rc = cb->use_gemm ? SL_EINVAL
                                    : small_swiglu(cb, &L->sh_gate, &L->sh_up, cb->xn, E, T, cb->moe.sh_h, S,
                                                   cb->moe.sh_u);
        if (rc == SL_EINVAL) {
            TRY(mm(cb, &L->sh_gate, cb->xn, E, T, cb->moe.sh_h, S));
            TRY(mm(cb, &L->sh_up, cb->xn, E, T, cb->moe.sh_u, S));
            TRY(sl_cuda_swiglu(cb->moe.sh_h, cb->moe.sh_u, T * S, st));
        } else {
            TRY(rc);
        }
        TRY(mm(cb, &L->sh_gate_inp, cb->xn, E, T, cb->moe.shg, 1));
        TRY(mm(cb, &L->sh_down, cb->moe.sh_h, S, T, cb->moe.sh_out, E));
    }
    TRY(sl_cuda_moe_combine(cb->xn, cb->moe.y, cb->moe.w, T, k, E, shared ? cb->moe.sh_out : NULL, cb->moe.shg, st));
    return SL_OK;
}

/* A dense layer's FFN of xn's T rows, into xn: gate and up (fused with
 * SwiGLU by the small-batch kernel where it can), the activation, down. */
static sl_status dense_ffn(cuda_backend *cb, const cuda_layer *L, int64_t T)
{
    const sl_hparams *hp = &cb->base.model->hp;
    cudaStream_t st = cb->stream;
    sl_cuda_profile *pf = cb->prof;
    int64_t E = hp->n_embd, F = hp->n_ff;
    bool gelu = hp->ffn_act == SL_FFN_GELU_TANH;   /* mmv.cu's fused gate+up launch is SwiGLU only */
    bool few = !cb->use_gemm;
    sl_status rc =
        few && !gelu ? small_swiglu(cb, &L->w_gate, &L->w_up, cb->xn, E, T, cb->gate, F, cb->up) : SL_EINVAL;
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
        TRY(gelu ? sl_cuda_geglu_tanh(cb->gate, cb->up, T * F, st) : sl_cuda_swiglu(cb->gate, cb->up, T * F, st));
        sl_cuda_profile_mark(pf, SL_PROF_ELTWISE, st);
    } else {
        TRY(rc);
        sl_cuda_profile_mark(pf, SL_PROF_GATE_UP, st);
    }
    return mm(cb, &L->w_down, cb->gate, F, T, cb->xn, E);
}

/* Queues the embedding and every layer for T staged token rows. */
static sl_status enqueue_layers(cuda_backend *cb, int64_t T)
{
    const sl_hparams *hp = &cb->base.model->hp;
    cudaStream_t st = cb->stream;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t Tmax = cb->base.cfg.max_batch_tokens;
    const int32_t *d_tokens = cb->meta_d;
    sl_cuda_batch batch = {cb->meta_d + Tmax, cb->meta_d + 2 * Tmax, cb->meta_d + 4 * Tmax};
    sl_cuda_profile *pf = cb->prof;

    TRY(sl_cuda_embed(cb->x, &cb->tok_embd, d_tokens, T, st));
    if (hp->embd_scale != 1.0f)
        TRY(sl_cuda_scale(cb->x, hp->embd_scale, T * E, st));
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
        sl_status rc = few ? small_multi(cb, wqkv, 3, yqkv, ldqkv, cb->xn, E, T)
                           : mm_multi(cb, wqkv, 3, cb->xn, E, T, yqkv, ldqkv);
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
        if (L->window > 0) {   /* a sliding-window layer's rope (gemma3: its own base) */
            p.inv_freq = cb->inv_freq_swa;
            p.freq_scale = hp->rope_freq_scale_swa;
        }
        TRY(sl_cuda_qkv_post(cb->q, cb->k, cb->v, T, &p, &cb->kv, &batch, l, st));
        sl_cuda_profile_mark(pf, SL_PROF_ROPE, st);
        sl_cuda_attn_opts ao = {hp->attn_scale, hp->attn_softcap, L->window, L->sinks};
        if (cb->use_fa) {
            /* prompt rows by flash attention, decode rows (if any) by the split kernel */
            const int32_t *groups = cb->meta_d + cb->fa_off, *dec = groups + 2 * cb->fa_groups;
            TRY(sl_cuda_attention_fa(cb->att, cb->q, T, hp->n_head, &cb->kv, &batch, groups, cb->fa_groups, l, &ao,
                                     st));
            TRY(sl_cuda_attention_layer_rows(cb->att, cb->q, T, dec, cb->fa_decode, hp->n_head, &cb->kv, &batch, l,
                                             cb->step_ctx, &ao, cb->att_split, cb->att_split_floats, st));
        } else
            TRY(sl_cuda_attention_layer(cb->att, cb->q, T, hp->n_head, &cb->kv, &batch, l, cb->step_ctx, &ao,
                                        cb->att_split, cb->att_split_floats, st));
        sl_cuda_profile_mark(pf, SL_PROF_ATTN, st);
        TRY(mm(cb, &L->wo, cb->att, q_dim, T, cb->xn, E));
        if (L->bo)   /* gpt-oss */
            TRY(sl_cuda_add_rows(cb->xn, E, L->bo, T, E, st));
        if (L->post_attn_norm)   /* in place; the residual add stays fused into the next norm */
            TRY(sl_cuda_rmsnorm(cb->xn, cb->xn, NULL, L->post_attn_norm, T, E, hp->norm_eps, st));
        if (hp->residual_scale != 1.0f)   /* granite: before the add, which the next norm fuses */
            TRY(sl_cuda_scale(cb->xn, hp->residual_scale, T * E, st));
        sl_cuda_profile_mark(pf, SL_PROF_WO, st);
        TRY(sl_cuda_add_rmsnorm(cb->x, cb->xn, cb->xn, L->ffn_norm, T, E, hp->norm_eps, st));
        sl_cuda_profile_mark(pf, SL_PROF_NORM, st);
        TRY(L->moe ? moe_ffn(cb, L, T) : dense_ffn(cb, L, T));
        if (L->post_ffn_norm)
            TRY(sl_cuda_rmsnorm(cb->xn, cb->xn, NULL, L->post_ffn_norm, T, E, hp->norm_eps, st));
        if (hp->residual_scale != 1.0f)
            TRY(sl_cuda_scale(cb->xn, hp->residual_scale, T * E, st));
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
    if (hp->final_softcap > 0.0f)
        TRY(sl_cuda_softcap(cb->logits, hp->final_softcap, nr * hp->n_vocab, cb->stream));
    if (hp->logit_mul != 1.0f)   /* granite: 1/logit_scale */
        TRY(sl_cuda_scale(cb->logits, hp->logit_mul, nr * hp->n_vocab, cb->stream));
    sl_cuda_profile_mark(cb->prof, SL_PROF_OUTPUT, cb->stream);
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* decode graphs                                                            */

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

/* ------------------------------------------------------------------------ */
/* the step                                                                 */

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
 * sequence, each sequence's one row). With fill (reqs set), the allow
 * bitmaps are written by fill once the pass is queued: the graph then is
 * one without the draw (the draw must wait for the bitmaps' copy, queued
 * after the host wrote them), and the draw is launched after that copy. */
static sl_status forward_steps(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits,
                               const sl_sample_req *reqs, const sl_allow_fill *fill)
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

    int64_t T, n_out, n_rows = 0;
    for (int32_t i = 0; i < n_seqs; i++)
        n_rows += seqs[i].n_tokens;
    cb->use_gemm = cb->gemm && (n_rows >= cb->gemm_min || !decode);
    /* flash attention for the prompt rows of a step with a prompt chunk on
     * the tensor-core path; its decode rows and decode-only steps keep the
     * split kernel (whose rows do not depend on what else it computes), so
     * the rule is per row, and no FA launch is ever held in a graph */
    cb->use_fa = cb->use_gemm && !decode && cb->fa_ok;
    sl_cuda_profile_begin(cb->prof, st);
    TRY(stage_batch(cb, seqs, n_seqs, &T, &n_out));
    if (reqs && fill)
        TRY(sl_cuda_sampler_stage_deferred(cb->sampler, reqs, n_seqs, st));
    else if (reqs)
        TRY(sl_cuda_sampler_stage(cb->sampler, reqs, n_seqs, st));
    else
        pin_logits(cb, logits, (size_t)(n_out * V) * sizeof(float));
    /* a decode graph that draws holds the sampler's launch: every row must
     * draw, and the staging it points into must be the one it was captured
     * with (the sampler reallocates it when a step outgrows it) */
    bool sampling = reqs != NULL && !fill;
    for (int32_t i = 0; sampling && i < n_seqs; i++)
        sampling = reqs[i].params != NULL;
    if (reqs && sl_cuda_sampler_generation(cb->sampler) != cb->sampler_gen) {
        sl_cuda_forward_drop_graphs(cb);
        cb->sampler_gen = sl_cuda_sampler_generation(cb->sampler);
    }
    /* a late fill takes the graph without the draw (graph_max <= logit_rows:
     * a graph's rows are one chunk) */
    bool late = fill != NULL;
    cudaGraphExec_t g = decode && (!reqs || sampling || late) && T <= cb->graph_max ? decode_graph(cb, T, sampling)
                                                                                   : NULL;
    /* the rows whose logits are asked, logit_rows at a time (one chunk when
     * a graph ran): norm, project, then copy back or draw */
    if (g)
        SL_CUDA_CHECK(cudaGraphLaunch(g, st));
    else
        TRY(enqueue_layers(cb, T));
    if (late) {   /* the device runs the layers while the host writes the masks */
        fill->fn(fill->ctx);
        TRY(sl_cuda_sampler_stage_allow(cb->sampler, reqs, n_seqs, st));
    }
    for (int64_t r0 = 0; r0 < n_out; r0 += cb->logit_rows) {
        int64_t nr = n_out - r0 < cb->logit_rows ? n_out - r0 : cb->logit_rows;
        if (!g)
            TRY(enqueue_logits(cb, r0, nr));
        if (!reqs)
            SL_CUDA_CHECK(cudaMemcpyAsync(logits + r0 * V, cb->logits, (size_t)(nr * V) * sizeof(float),
                                          cudaMemcpyDeviceToHost, st));
        else if (!g || !sampling)   /* a sampling graph drew already */
            TRY(sl_cuda_sampler_launch(cb->sampler, cb->logits, (int32_t)r0, (int32_t)nr, st));
    }
    sl_cuda_profile_mark(cb->prof, reqs ? SL_PROF_SAMPLE : SL_PROF_COPY, st);
    if (reqs)
        TRY(sl_cuda_sampler_fetch(cb->sampler, st));
    SL_CUDA_CHECK(cudaStreamSynchronize(st));
    sl_cuda_profile_end(cb->prof, T);
    return SL_OK;
}

sl_status sl_cuda_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    sl_status rc = forward_steps(b, seqs, n_seqs, logits, NULL, NULL);
    /* A step that failed half-way may still have copies in flight into the
     * staging area or the caller's logits: drain them before returning. */
    if (rc < 0)
        cudaStreamSynchronize(((cuda_backend *)b)->stream);
    return rc;
}

sl_status sl_cuda_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                 const sl_sample_req *reqs, int32_t *tokens)
{
    return sl_cuda_forward_sample_overlap(b, seqs, n_seqs, reqs, tokens, NULL);
}

sl_status sl_cuda_forward_sample_overlap(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                         const sl_sample_req *reqs, int32_t *tokens, const sl_allow_fill *fill)
{
    cuda_backend *cb = (cuda_backend *)b;
    sl_status rc = forward_steps(b, seqs, n_seqs, NULL, reqs, fill);
    if (rc < 0) {
        cudaStreamSynchronize(cb->stream);
        return rc;
    }
    for (int32_t i = 0; i < n_seqs; i++)
        tokens[i] = sl_cuda_sampler_result(cb->sampler, i, &reqs[i]);
    return SL_OK;
}
