/* kernels/cpu/forward.c: the CPU backend's forward pass for the llama, qwen2,
 * qwen3, gemma2, gemma3, granite and phi3 architectures and the
 * mixture-of-experts ones (qwen2moe, qwen3moe, Mixtral, gpt-oss) over a batch of
 * sequences with paged KV caches (phi3's fused matrices arrive as separate
 * row views, model.h, so nothing here knows about them).
 * Runs in the worker process (and `sluice generate`) on the scheduler thread,
 * fanning work out to a sleeping thread pool.
 *
 * The batch is flattened into T token rows. Each matmul first prepares its
 * T input rows once in the format the weights' type is dotted with (by
 * default llama.cpp's: 8-bit Q8_0/Q8_1/Q8_K blocks for quantized weights,
 * fp16/bf16-rounded float32 for F16/BF16; SLUICE_CPU_ACT=q16 gives 16-bit
 * Q16_0/Q16_K blocks, closer to float64, SLUICE_CPU_ACT=f32 float32
 * everywhere: see act_quant.h, which picks the format through
 * sl_act_format_of), shared by the weights that read the same input (q/k/v,
 * gate/up). Then it reads every weight row once per step and dots it with
 * all T prepared rows (sl_vec_dot_act_multi),
 * so a step's cost is dominated by one pass over the weights whatever T is:
 * that is what makes batching pay on a memory-bound machine. Work is split
 * over weight rows and (token, head) pairs only, never inside a dot product,
 * so every output value is computed by the same instructions in the same
 * order whatever else is batched and however many threads run: a sequence's
 * logits are bitwise identical alone or in any batch.
 *
 * KV cache: float32, per layer, per block [n_head_kv][block_size][head_dim],
 * so one head's keys for consecutive positions are contiguous. A
 * sliding-window layer reads only the positions of its window, so its cost
 * is bounded by the window whatever the context (the blocks before it stay
 * allocated: the scheduler's block tables do not know about windows).
 *
 * MoE layers (moe_ffn): each token row is routed on its own
 * (sl_cpu_moe_route: softmax, top-k, ties to the lower expert index; gpt-oss:
 * top-k of the biased logits, then softmax over them), the
 * routed rows are gathered by expert, and each expert in use runs as one
 * matmul over all its rows, all experts in one pool run, so a step reads
 * each chosen expert's weights once whatever the batch. Each row then sums
 * its k outputs in slot order (a fixed order, independent of which other
 * rows share its experts), which keeps the batch invariance above.
 *
 * forward_sample: the forward pass into host rows, then each asked row drawn
 * by the reference sampler on the same thread pool (the compute threads are
 * idle by then), one row per task with that thread's scratch
 * (kernels/cpu/sample_batch.h). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/moe_watch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sample_batch.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/cpu/vec_dot.h"
#include "model/quant.h"

#define ROWS_PER_TASK 16   /* weight rows per matmul task: small enough to balance 2-16 threads */
#define TOKEN_TILE 16      /* activation rows dotted per decoded weight block; 16 rows of x stay in L2 */
#define ROWS_PER_CALL 4    /* weight rows per sl_vec_dot_act_rows call (its Q8_0/Q4_0 register tile) */
#define MAX_FUSED 3        /* matmuls sharing one input in one job (q,k,v / gate,up) */

typedef struct {
    sl_backend base;
    sl_threadpool *pool;
    int n_threads;
    int64_t block_floats;     /* floats of one layer's K (or V) in one block */
    float *kv;                /* (n_layer, 2, n_kv_blocks, n_head_kv, block_size, head_dim) */
    sl_sample_batch *sampling; /* forward_sample's rows (max_batch_seqs, n_vocab) and per-thread scratch,
                                * made by its first call (a caller that only runs forward pays nothing) */

    /* scratch sized once for max_batch_tokens rows (T) */
    float *x;                 /* (T, n_embd) residual stream */
    float *xn;                /* (T, max(n_embd, q_dim)) normed input / projection output */
    float *q;                 /* (T, q_dim) */
    float *k, *v;             /* (T, kv_dim) */
    float *att;               /* (T, q_dim) attention output */
    float *gate, *up;         /* (T, n_ff), or (T, n_ff_shexp) for a MoE model's shared expert */
    float *cos_t, *sin_t;     /* (T, n_rot/2) at the global layers' rope base */
    float *cos_swa, *sin_swa; /* (T, n_rot/2) at the sliding-window layers' base; NULL when the same */
    int32_t *tok_seq;         /* (T) batch index of each token row */
    int32_t *tok_pos;         /* (T) position of each token row */
    int32_t *out_rows;        /* (T) token rows whose logits are asked */
    float *scores;            /* (n_threads, max_ctx) attention scores */
    float *tmp;               /* (n_threads, ROWS_PER_CALL, TOKEN_TILE) dot results */
    void *act[MAX_FUSED];     /* (T, act_stride) bytes each: a matmul input in one act format */
    size_t act_stride;        /* bytes per row of act[], the most any matmul needs */
    double *inv_freq;         /* (n_rot/2) rope inverse frequencies */
    double *inv_freq_swa;     /* (n_rot/2) the same at rope_freq_base_swa, with cos_swa */

    /* MoE scratch (NULL for a dense model), R = T * n_expert_used routed rows */
    float *router;            /* (T, n_expert) router outputs */
    float *route_tmp;         /* (n_expert) routing probabilities of one row */
    int32_t *route_id;        /* (T, n_expert_used) chosen experts, by slot (decreasing weight) */
    float *route_w;           /* (T, n_expert_used) their weights */
    int32_t *slot_row;        /* (T, n_expert_used) each slot's row in the grouped arrays */
    int32_t *grp_off;         /* (n_expert + 1) expert e's grouped rows are [grp_off[e], grp_off[e+1]) */
    int32_t *grp_fill;        /* (n_expert) fill cursor while grouping */
    float *xg;                /* (R, n_embd) inputs grouped by expert */
    float *gg, *ug;           /* (R, n_ff_exp) expert gate and up outputs */
    float *yg;                /* (R, n_embd) expert outputs: xg's memory, free once gate and up are computed */
    float *shg;               /* (T) shared expert gate logits (qwen2moe) */
    float *sh_out;            /* (T, n_embd) shared expert outputs (qwen2moe) */
    struct matmul_entry *mm_entries; /* (2 * n_expert) one expert matmul job's entries */
} cpu_backend;

static void moe_ffn(cpu_backend *cb, const sl_layer *L, int64_t T);

/* ------------------------------------------------------------------------ */
/* matmul: Y[t, r] = dot(W row r, X[t]) for up to MAX_FUSED weights        */

/* How a matmul's input rows are prepared: one slot per distinct 8-bit or
 * rounded format among its weights; weights in F32 format read x itself. */
typedef struct {
    int n;                             /* slots used */
    enum sl_act_format fmt[MAX_FUSED]; /* per slot */
    size_t stride[MAX_FUSED];          /* per slot: bytes per row, 64-aligned */
    int slot_of[MAX_FUSED];            /* per weight: its slot, -1 for float32 x */
} act_plan;

static void act_plan_make(const sl_weight *const *w, int n, act_plan *p)
{
    p->n = 0;
    for (int i = 0; i < n; i++) {
        enum sl_act_format f = sl_act_format_of(w[i]->type);
        p->slot_of[i] = -1;
        if (f == SL_ACT_F32)
            continue;
        for (int s = 0; s < p->n; s++)
            if (p->fmt[s] == f)
                p->slot_of[i] = s;
        if (p->slot_of[i] < 0) {
            p->fmt[p->n] = f;
            p->stride[p->n] = (sl_act_row_bytes(f, w[i]->ne0) + 63) / 64 * 64;
            p->slot_of[i] = p->n++;
        }
    }
}

/* Raises *slots and *stride to what a matmul over these weights needs. */
static void act_need(const sl_weight *const *w, int n, int *slots, size_t *stride)
{
    act_plan p;
    act_plan_make(w, n, &p);
    *slots = p.n > *slots ? p.n : *slots;
    for (int s = 0; s < p.n; s++)
        *stride = p.stride[s] > *stride ? p.stride[s] : *stride;
}

typedef struct {
    const act_plan *plan;
    const float *x;
    int64_t ldx, ne;
    void *const *dst;
} act_job;

static void act_task(void *ctx, int64_t t, int thread)
{
    (void)thread;
    act_job *j = ctx;
    for (int s = 0; s < j->plan->n; s++)
        sl_act_quantize_row(j->plan->fmt[s], j->x + t * j->ldx, (char *)j->dst[s] + t * j->plan->stride[s], j->ne);
}

/* One weight's part of a matmul job: its T input rows (prepared) and outputs. */
typedef struct matmul_entry {
    const sl_weight *w;
    enum sl_act_format fmt;
    const void *xa;                /* prepared input rows */
    size_t ldxa;                   /* their stride in bytes */
    float *y;
    int64_t ldy;
    int64_t T;
    int64_t first_task;            /* tasks [first_task, next entry's first_task) */
} matmul_entry;

/* n entries (up to MAX_FUSED for the dense matmuls, n_w per expert in use
 * for the MoE ones) in increasing first_task: a task belongs to the last
 * entry that starts at or before it. */
typedef struct {
    matmul_entry *e;
    int n;
    cpu_backend *cb;
} matmul_job;

static void matmul_task(void *ctx, int64_t task, int thread)
{
    matmul_job *j = ctx;
    int lo = 0, hi = j->n - 1;   /* the last entry whose first_task <= task */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->e[mid].first_task <= task)
            lo = mid;
        else
            hi = mid - 1;
    }
    const matmul_entry *me = &j->e[lo];
    const sl_weight *w = me->w;
    int64_t r0 = (task - me->first_task) * ROWS_PER_TASK;
    int64_t r1 = r0 + ROWS_PER_TASK < w->ne1 ? r0 + ROWS_PER_TASK : w->ne1;
    float *tmp = j->cb->tmp + (int64_t)thread * ROWS_PER_CALL * TOKEN_TILE;
    for (int64_t t0 = 0; t0 < me->T; t0 += TOKEN_TILE) {
        int mt = (int)(me->T - t0 < TOKEN_TILE ? me->T - t0 : TOKEN_TILE);
        for (int64_t r = r0; r < r1; r += ROWS_PER_CALL) {
            int nr = (int)(r1 - r < ROWS_PER_CALL ? r1 - r : ROWS_PER_CALL);
            const void *row = (const char *)w->data + r * w->row_bytes;
            sl_vec_dot_act_rows(w->type, me->fmt, row, w->row_bytes, nr, (const char *)me->xa + t0 * me->ldxa,
                                me->ldxa, mt, tmp, w->ne0);
            for (int i = 0; i < nr; i++)
                for (int t = 0; t < mt; t++)
                    me->y[(t0 + t) * me->ldy + r + i] = tmp[i * mt + t];
        }
    }
}

static int64_t matmul_tasks(const sl_weight *w)
{
    return (w->ne1 + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
}

static void matmul(cpu_backend *cb, const float *x, int64_t ldx, int64_t T, int n, const sl_weight *const *w,
                   float *const *y, const int64_t *ldy)
{
    matmul_entry e[MAX_FUSED];
    matmul_job j = {.e = e, .n = n, .cb = cb};
    act_plan plan;
    act_plan_make(w, n, &plan);
    for (int s = 0; s < plan.n; s++)   /* sized for every matmul at creation */
        assert(cb->act[s] && plan.stride[s] <= cb->act_stride);
    if (plan.n > 0) {   /* each input row prepared once, for every weight that reads it */
        act_job aj = {.plan = &plan, .x = x, .ldx = ldx, .ne = w[0]->ne0, .dst = cb->act};
        sl_threadpool_run(cb->pool, act_task, &aj, T);
    }
    int64_t tasks = 0;
    for (int i = 0; i < n; i++) {
        int s = plan.slot_of[i];
        e[i] = (matmul_entry){.w = w[i], .fmt = sl_act_format_of(w[i]->type), .xa = s < 0 ? (const void *)x : cb->act[s],
                              .ldxa = s < 0 ? (size_t)ldx * sizeof(float) : plan.stride[s], .y = y[i], .ldy = ldy[i],
                              .T = T, .first_task = tasks};
        tasks += matmul_tasks(w[i]);
    }
    sl_threadpool_run(cb->pool, matmul_task, &j, tasks);
}

static void matmul1(cpu_backend *cb, const float *x, int64_t ldx, int64_t T, const sl_weight *w, float *y,
                    int64_t ldy)
{
    matmul(cb, x, ldx, T, 1, &w, &y, &ldy);
}

/* ------------------------------------------------------------------------ */
/* attention: one task per (token row, query head)                          */

typedef struct {
    cpu_backend *cb;
    const sl_batch_seq *seqs;
    int layer;
} attn_job;

static void attn_task(void *ctx, int64_t task, int thread)
{
    attn_job *j = ctx;
    cpu_backend *cb = j->cb;
    const sl_hparams *hp = &cb->base.model->hp;
    int n_head = hp->n_head, hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    int64_t t = task / n_head;
    int h = (int)(task % n_head), kvh = h / group;
    int64_t q_dim = (int64_t)n_head * hd;
    const sl_batch_seq *s = &j->seqs[cb->tok_seq[t]];
    int32_t n_pos = cb->tok_pos[t] + 1;   /* causal: positions [0, pos] */
    int32_t window = cb->base.model->layers[j->layer].window;
    int32_t p0 = window > 0 && n_pos > window ? n_pos - window : 0;   /* sliding: (pos - window, pos] */
    uint32_t bs = cb->base.cfg.kv_block_size;
    const float *q = cb->q + t * q_dim + (int64_t)h * hd;
    float *scores = cb->scores + (int64_t)thread * cb->base.cfg.max_ctx;
    const float *kbase = cb->kv + (int64_t)j->layer * 2 * cb->base.cfg.n_kv_blocks * cb->block_floats;
    const float *vbase = kbase + (int64_t)cb->base.cfg.n_kv_blocks * cb->block_floats;
    float scale = hp->attn_scale, cap = hp->attn_softcap;
    const float *sinks = cb->base.model->layers[j->layer].attn_sinks;

    float mx = -INFINITY;
    for (int32_t p = p0; p < n_pos; p++) {
        const float *kp = kbase + (int64_t)s->blocks[p / bs] * cb->block_floats +
                          ((int64_t)kvh * bs + p % bs) * hd;
        float d = 0.0f;
        for (int i = 0; i < hd; i++)
            d += q[i] * kp[i];
        scores[p - p0] = d * scale;
        if (cap > 0.0f)
            scores[p - p0] = cap * tanhf(scores[p - p0] / cap);
        if (scores[p - p0] > mx)
            mx = scores[p - p0];
    }
    /* gpt-oss's sink: one more logit in the denominator, with no value */
    float sink = sinks ? sinks[h] : -INFINITY;
    if (sink > mx)
        mx = sink;
    double sum = sinks ? (double)expf(sink - mx) : 0.0;
    for (int32_t p = p0; p < n_pos; p++) {
        scores[p - p0] = expf(scores[p - p0] - mx);
        sum += scores[p - p0];
    }
    float inv = (float)(1.0 / sum);
    float *out = cb->att + t * q_dim + (int64_t)h * hd;
    memset(out, 0, (size_t)hd * sizeof *out);
    for (int32_t p = p0; p < n_pos; p++) {
        const float *vp = vbase + (int64_t)s->blocks[p / bs] * cb->block_floats +
                          ((int64_t)kvh * bs + p % bs) * hd;
        float a = scores[p - p0] * inv;
        for (int i = 0; i < hd; i++)
            out[i] += a * vp[i];
    }
}

/* ------------------------------------------------------------------------ */
/* element-wise jobs over token rows                                         */

typedef struct {
    float *gate;           /* (rows, n_ff): becomes act(gate) * up */
    const float *up;       /* (rows, n_ff) */
    int64_t n_ff;
    enum sl_ffn_act act;
} glu_job;

static void glu_task(void *ctx, int64_t t, int thread)
{
    (void)thread;
    glu_job *j = ctx;
    float *g = j->gate + t * j->n_ff;
    if (j->act == SL_FFN_GELU_TANH)
        sl_cpu_geglu_tanh(g, g, j->up + t * j->n_ff, j->n_ff);
    else if (j->act == SL_FFN_SWIGLU_OAI)
        sl_cpu_swiglu_oai(g, g, j->up + t * j->n_ff, j->n_ff);
    else
        sl_cpu_swiglu(g, g, j->up + t * j->n_ff, j->n_ff);
}

/* Biases, per-head q/k norms and rope for token row t, then its K/V into the cache. */
static void qkv_post(cpu_backend *cb, const sl_layer *L, const sl_batch_seq *seqs, int layer, int64_t t)
{
    const sl_model *m = cb->base.model;
    const sl_hparams *hp = &m->hp;
    int hd = hp->head_dim;
    int64_t q_dim = (int64_t)hp->n_head * hd, kv_dim = (int64_t)hp->n_head_kv * hd;
    float *q = cb->q + t * q_dim, *k = cb->k + t * kv_dim, *v = cb->v + t * kv_dim;
    if (L->bq) {
        sl_cpu_add(q, L->bq, q_dim);
        sl_cpu_add(k, L->bk, kv_dim);
        sl_cpu_add(v, L->bv, kv_dim);
    }
    if (L->q_norm) {
        for (int h = 0; h < hp->n_head; h++)
            sl_cpu_rmsnorm(q + (int64_t)h * hd, q + (int64_t)h * hd, L->q_norm, hd, hp->norm_eps);
        for (int h = 0; h < hp->n_head_kv; h++)
            sl_cpu_rmsnorm(k + (int64_t)h * hd, k + (int64_t)h * hd, L->k_norm, hd, hp->norm_eps);
    }
    int half = hp->n_rot / 2, neox = hp->rope_style == SL_ROPE_NEOX;
    bool swa = L->window > 0 && cb->cos_swa;
    const float *ct = (swa ? cb->cos_swa : cb->cos_t) + t * half, *st = (swa ? cb->sin_swa : cb->sin_t) + t * half;
    sl_cpu_rope(q, hp->n_head, hd, hp->n_rot, ct, st, neox);
    sl_cpu_rope(k, hp->n_head_kv, hd, hp->n_rot, ct, st, neox);

    const sl_batch_seq *s = &seqs[cb->tok_seq[t]];
    uint32_t bs = cb->base.cfg.kv_block_size;
    int32_t pos = cb->tok_pos[t];
    float *kbase = cb->kv + (int64_t)layer * 2 * cb->base.cfg.n_kv_blocks * cb->block_floats;
    float *vbase = kbase + (int64_t)cb->base.cfg.n_kv_blocks * cb->block_floats;
    int64_t block_off = (int64_t)s->blocks[pos / bs] * cb->block_floats;
    for (int h = 0; h < hp->n_head_kv; h++) {
        int64_t off = block_off + ((int64_t)h * bs + pos % bs) * hd;
        memcpy(kbase + off, k + (int64_t)h * hd, (size_t)hd * sizeof(float));
        memcpy(vbase + off, v + (int64_t)h * hd, (size_t)hd * sizeof(float));
    }
}


/* ------------------------------------------------------------------------ */
/* mixture-of-experts FFN                                                    */

/* For every expert e in use, rows [grp_off[e], grp_off[e+1]) of x through
 * n_w of its matrices (views[i][e]: gate and up, or down) in one pool run,
 * so each expert's weights are read once per step for all its rows. The
 * rows are prepared once for all experts: the experts of one tensor share
 * its type. */
static void matmul_experts(cpu_backend *cb, const float *x, int64_t ldx, int n_w, const sl_weight *const *views,
                           float *const *y, const int64_t *ldy)
{
    int32_t n_exp = cb->base.model->hp.n_expert;
    const int32_t *off = cb->grp_off;
    const sl_weight *w0[MAX_FUSED];
    for (int i = 0; i < n_w; i++)
        w0[i] = &views[i][0];
    act_plan plan;
    act_plan_make(w0, n_w, &plan);
    for (int s = 0; s < plan.n; s++)   /* sized for every matmul at creation */
        assert(cb->act[s] && plan.stride[s] <= cb->act_stride);
    if (plan.n > 0) {
        act_job aj = {.plan = &plan, .x = x, .ldx = ldx, .ne = w0[0]->ne0, .dst = cb->act};
        sl_threadpool_run(cb->pool, act_task, &aj, off[n_exp]);
    }
    matmul_entry *e = cb->mm_entries;
    matmul_job j = {.e = e, .n = 0, .cb = cb};
    int64_t tasks = 0;
    for (int32_t ex = 0; ex < n_exp; ex++) {
        int64_t r0 = off[ex], rows = off[ex + 1] - off[ex];
        if (rows == 0)
            continue;
        for (int i = 0; i < n_w; i++) {
            const sl_weight *w = &views[i][ex];
            int s = plan.slot_of[i];
            e[j.n++] = (matmul_entry){
                .w = w, .fmt = sl_act_format_of(w->type),
                .xa = s < 0 ? (const void *)(x + r0 * ldx) : (const char *)cb->act[s] + r0 * plan.stride[s],
                .ldxa = s < 0 ? (size_t)ldx * sizeof(float) : plan.stride[s],
                .y = y[i] + r0 * ldy[i], .ldy = ldy[i], .T = rows, .first_task = tasks};
            tasks += matmul_tasks(w);
        }
    }
    sl_threadpool_run(cb->pool, matmul_task, &j, tasks);
}

typedef struct {
    cpu_backend *cb;
    bool shared;
} moe_sum_job;

/* Row t's FFN output into xn: its k expert outputs weighted and summed in
 * slot order (decreasing routing weight, the lower expert index first on a
 * tie), then qwen2moe's gated shared expert: a fixed order per row, so the
 * sum is the same bits whatever the batch or the thread count. */
static void moe_sum_task(void *ctx, int64_t t, int thread)
{
    (void)thread;
    moe_sum_job *j = ctx;
    cpu_backend *cb = j->cb;
    const sl_hparams *hp = &cb->base.model->hp;
    int64_t E = hp->n_embd;
    int k = hp->n_expert_used;
    const int32_t *pos = cb->slot_row + t * k;
    const float *w = cb->route_w + t * k;
    float *out = cb->xn + t * E;
    const float *y0 = cb->yg + (int64_t)pos[0] * E;
    for (int64_t i = 0; i < E; i++)
        out[i] = w[0] * y0[i];
    for (int s = 1; s < k; s++) {
        const float *ys = cb->yg + (int64_t)pos[s] * E;
        for (int64_t i = 0; i < E; i++)
            out[i] += w[s] * ys[i];
    }
    if (j->shared) {
        float g = 1.0f / (1.0f + expf(-cb->shg[t]));
        const float *sh = cb->sh_out + t * E;
        for (int64_t i = 0; i < E; i++)
            out[i] += g * sh[i];
    }
}

/* gpt-oss: expert e's bias row (bias + e * n) added to each of e's grouped
 * rows of y (ld n), for every expert in use. */
static void add_expert_bias(const cpu_backend *cb, float *y, const float *bias, int64_t n)
{
    for (int32_t e = 0; e < cb->base.model->hp.n_expert; e++)
        for (int32_t r = cb->grp_off[e]; r < cb->grp_off[e + 1]; r++)
            sl_cpu_add(y + (int64_t)r * n, bias + (int64_t)e * n, n);
}

/* The MoE FFN of xn's T rows, into xn: route each row (router matmul,
 * softmax, top-k; gpt-oss: biased logits, top-k, softmax), group the routed rows by expert (rows in token order
 * within an expert), run each expert over its rows, sum per row. */
static void moe_ffn(cpu_backend *cb, const sl_layer *L, int64_t T)
{
    const sl_hparams *hp = &cb->base.model->hp;
    const sl_moe *moe = &L->moe;
    int n = hp->n_expert, k = hp->n_expert_used;
    int64_t E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp;
    matmul1(cb, cb->xn, E, T, &moe->router, cb->router, n);
    memset(cb->grp_off, 0, (size_t)(n + 1) * sizeof *cb->grp_off);
    void *watch_ctx;
    sl_cpu_moe_watch_fn watch = sl_cpu_moe_watcher(&watch_ctx);   /* a check tool's, normally NULL */
    for (int64_t t = 0; t < T; t++) {
        if (moe->router_b)
            sl_cpu_add(cb->router + t * n, moe->router_b, n);
        if (watch)
            watch(watch_ctx, t, sl_cpu_moe_margin(cb->router + t * n, n, k));
        if (hp->moe_gating == SL_MOE_GATING_TOPK_SOFTMAX)
            sl_cpu_moe_route_topk_softmax(cb->router + t * n, n, k, cb->route_tmp, cb->route_id + t * k,
                                          cb->route_w + t * k);
        else
            sl_cpu_moe_route(cb->router + t * n, n, k, hp->moe_norm_w, cb->route_tmp, cb->route_id + t * k,
                             cb->route_w + t * k);
        for (int s = 0; s < k; s++)
            cb->grp_off[cb->route_id[t * k + s] + 1]++;
    }
    for (int e = 0; e < n; e++) {
        cb->grp_off[e + 1] += cb->grp_off[e];
        cb->grp_fill[e] = cb->grp_off[e];
    }
    for (int64_t t = 0; t < T; t++)
        for (int s = 0; s < k; s++) {
            int32_t r = cb->grp_fill[cb->route_id[t * k + s]]++;
            cb->slot_row[t * k + s] = r;
            memcpy(cb->xg + (int64_t)r * E, cb->xn + t * E, (size_t)E * sizeof(float));
        }
    int64_t R = T * k;
    matmul_experts(cb, cb->xg, E, 2, (const sl_weight *const[]){moe->gate, moe->up}, (float *const[]){cb->gg, cb->ug},
                   (const int64_t[]){F, F});
    if (moe->gate_b) {
        add_expert_bias(cb, cb->gg, moe->gate_b, F);
        add_expert_bias(cb, cb->ug, moe->up_b, F);
    }
    /* the experts' activation: SiLU, or gpt-oss's clamped SwiGLU */
    glu_job gj = {.gate = cb->gg, .up = cb->ug, .n_ff = F,
                  .act = hp->ffn_act == SL_FFN_SWIGLU_OAI ? SL_FFN_SWIGLU_OAI : SL_FFN_SILU};
    sl_threadpool_run(cb->pool, glu_task, &gj, R);
    matmul_experts(cb, cb->gg, F, 1, (const sl_weight *const[]){moe->down}, (float *const[]){cb->yg},
                   (const int64_t[]){E});
    if (moe->down_b)
        add_expert_bias(cb, cb->yg, moe->down_b, E);
    bool shared = moe->sh_down.data != NULL;
    if (shared) {
        const sl_weight *wsh[3] = {&moe->sh_gate, &moe->sh_up, &moe->sh_gate_inp};
        matmul(cb, cb->xn, E, T, 3, wsh, (float *const[]){cb->gate, cb->up, cb->shg}, (const int64_t[]){S, S, 1});
        glu_job sj = {.gate = cb->gate, .up = cb->up, .n_ff = S, .act = SL_FFN_SILU};
        sl_threadpool_run(cb->pool, glu_task, &sj, T);
        matmul1(cb, cb->gate, S, T, &moe->sh_down, cb->sh_out, E);
    }
    moe_sum_job mj = {.cb = cb, .shared = shared};
    sl_threadpool_run(cb->pool, moe_sum_task, &mj, T);
}

/* ------------------------------------------------------------------------ */

static sl_status cpu_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    cpu_backend *cb = (cpu_backend *)b;
    const sl_model *m = b->model;
    const sl_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    int half = hp->n_rot / 2;

    /* flatten the batch; embeddings; rope angles */
    int64_t T = 0, n_out = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        for (int32_t j = 0; j < seqs[i].n_tokens; j++, T++) {
            cb->tok_seq[T] = i;
            cb->tok_pos[T] = seqs[i].pos + j;
            if (seqs[i].logits_all || j == seqs[i].n_tokens - 1)
                cb->out_rows[n_out++] = (int32_t)T;
            const void *row = (const char *)m->tok_embd.data + (int64_t)seqs[i].tokens[j] * m->tok_embd.row_bytes;
            if (sl_quant_dequantize_row(m->tok_embd.type, row, cb->x + T * E, E) < 0)
                return SL_EBACKEND;
            if (hp->embd_scale != 1.0f)
                for (int64_t e = 0; e < E; e++)
                    cb->x[T * E + e] *= hp->embd_scale;
            double mscale = hp->rope_attn_factor;   /* longrope's magnitude correction, else 1 */
            for (int r = 0; r < half; r++) {
                double theta = (double)cb->tok_pos[T] * hp->rope_freq_scale * cb->inv_freq[r];
                cb->cos_t[T * half + r] = (float)(mscale * cos(theta));
                cb->sin_t[T * half + r] = (float)(mscale * sin(theta));
            }
            for (int r = 0; cb->cos_swa && r < half; r++) {
                double theta = (double)cb->tok_pos[T] * hp->rope_freq_scale_swa * cb->inv_freq_swa[r];
                cb->cos_swa[T * half + r] = (float)(mscale * cos(theta));
                cb->sin_swa[T * half + r] = (float)(mscale * sin(theta));
            }
        }
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const sl_layer *L = &m->layers[l];
        for (int64_t t = 0; t < T; t++)
            sl_cpu_rmsnorm(cb->xn + t * E, cb->x + t * E, L->attn_norm, E, hp->norm_eps);
        const sl_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
        float *yqkv[3] = {cb->q, cb->k, cb->v};
        int64_t ldqkv[3] = {q_dim, kv_dim, kv_dim};
        matmul(cb, cb->xn, E, T, 3, wqkv, yqkv, ldqkv);
        for (int64_t t = 0; t < T; t++)
            qkv_post(cb, L, seqs, l, t);

        attn_job aj = {.cb = cb, .seqs = seqs, .layer = l};
        sl_threadpool_run(cb->pool, attn_task, &aj, T * hp->n_head);

        matmul1(cb, cb->att, q_dim, T, &L->wo, cb->xn, E);
        for (int64_t t = 0; L->bo && t < T; t++)
            sl_cpu_add(cb->xn + t * E, L->bo, E);
        for (int64_t t = 0; L->post_attn_norm && t < T; t++)
            sl_cpu_rmsnorm(cb->xn + t * E, cb->xn + t * E, L->post_attn_norm, E, hp->norm_eps);
        if (hp->residual_scale != 1.0f)
            sl_cpu_scale(cb->xn, T * E, hp->residual_scale);
        sl_cpu_add(cb->x, cb->xn, T * E);

        for (int64_t t = 0; t < T; t++)
            sl_cpu_rmsnorm(cb->xn + t * E, cb->x + t * E, L->ffn_norm, E, hp->norm_eps);
        if (L->moe.gate) {
            moe_ffn(cb, L, T);
        } else {
            const sl_weight *wgu[2] = {&L->w_gate, &L->w_up};
            float *ygu[2] = {cb->gate, cb->up};
            int64_t ldgu[2] = {F, F};
            matmul(cb, cb->xn, E, T, 2, wgu, ygu, ldgu);
            glu_job gj = {.gate = cb->gate, .up = cb->up, .n_ff = F, .act = hp->ffn_act};
            sl_threadpool_run(cb->pool, glu_task, &gj, T);
            matmul1(cb, cb->gate, F, T, &L->w_down, cb->xn, E);
        }
        for (int64_t t = 0; L->post_ffn_norm && t < T; t++)
            sl_cpu_rmsnorm(cb->xn + t * E, cb->xn + t * E, L->post_ffn_norm, E, hp->norm_eps);
        if (hp->residual_scale != 1.0f)
            sl_cpu_scale(cb->xn, T * E, hp->residual_scale);
        sl_cpu_add(cb->x, cb->xn, T * E);
    }

    /* the rows whose logits are asked: final norm, output projection */
    for (int64_t i = 0; i < n_out; i++)
        sl_cpu_rmsnorm(cb->xn + i * E, cb->x + (int64_t)cb->out_rows[i] * E, m->output_norm, E, hp->norm_eps);
    matmul1(cb, cb->xn, E, n_out, &m->output, logits, hp->n_vocab);
    if (hp->final_softcap > 0.0f)
        sl_cpu_softcap(logits, n_out * hp->n_vocab, hp->final_softcap);
    if (hp->logit_mul != 1.0f)
        sl_cpu_scale(logits, n_out * hp->n_vocab, hp->logit_mul);
    return SL_OK;
}

/* Every seqs[i] has logits_all false (sl_backend_forward_sample checked),
 * so row i is sequence i's last position. */
static sl_status cpu_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                    const sl_sample_req *reqs, int32_t *tokens)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (!cb->sampling && sl_sample_batch_create(b->model->hp.n_vocab, sl_backend_max_batch_seqs(&b->cfg), cb->pool,
                                                cb->n_threads, &cb->sampling) < 0)
        return SL_ENOMEM;
    sl_status rc = cpu_forward(b, seqs, n_seqs, sl_sample_batch_rows(cb->sampling));
    if (rc < 0)
        return rc;
    sl_sample_batch_draw(cb->sampling, reqs, n_seqs, tokens);
    return SL_OK;
}

static void cpu_destroy(sl_backend *b)
{
    cpu_backend *cb = (cpu_backend *)b;
    sl_sample_batch_destroy(cb->sampling);   /* borrows the pool: before it */
    sl_threadpool_destroy(cb->pool);
    free(cb->kv);
    free(cb->x);
    free(cb->xn);
    free(cb->q);
    free(cb->k);
    free(cb->v);
    free(cb->att);
    free(cb->gate);
    free(cb->up);
    free(cb->cos_t);
    free(cb->sin_t);
    free(cb->cos_swa);
    free(cb->sin_swa);
    free(cb->inv_freq_swa);
    free(cb->tok_seq);
    free(cb->tok_pos);
    free(cb->out_rows);
    free(cb->scores);
    free(cb->tmp);
    for (int s = 0; s < MAX_FUSED; s++)
        free(cb->act[s]);
    free(cb->inv_freq);
    free(cb->router);
    free(cb->route_tmp);
    free(cb->route_id);
    free(cb->route_w);
    free(cb->slot_row);
    free(cb->grp_off);
    free(cb->grp_fill);
    free(cb->xg);
    free(cb->gg);
    free(cb->ug);
    free(cb->shg);
    free(cb->sh_out);
    free(cb->mm_entries);
    free(cb);
}

static const sl_backend_ops cpu_ops = {
    .name = "cpu",
    .forward = cpu_forward,
    .destroy = cpu_destroy,
    .forward_sample = cpu_forward_sample,
};

sl_status sl_cpu_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out,
                                char err[SL_ERR_LEN])
{
    *out = NULL;
    const sl_hparams *hp = &m->hp;
    if (cfg->kv_type != SL_KV_TYPE_AUTO && cfg->kv_type != SL_KV_TYPE_F32) {
        snprintf(err, SL_ERR_LEN, "cpu backend: K/V are stored as f32 only, not %s", sl_kv_type_name(cfg->kv_type));
        return SL_EINVAL;
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, SL_ERR_LEN, "cpu backend: out of memory");
        return SL_ENOMEM;
    }
    cb->base.ops = &cpu_ops;
    cb->base.model = m;
    cb->base.cfg = *cfg;
    cb->base.cfg.device = "cpu";
    cb->base.cfg.kv_type = SL_KV_TYPE_F32;
    cb->base.description = sl_vec_dot_isa();
    cb->n_threads = cfg->n_threads;
    cb->block_floats = (int64_t)hp->n_head_kv * cfg->kv_block_size * hp->head_dim;
    cb->base.kv_bytes = (uint64_t)cfg->n_kv_blocks * sl_backend_kv_block_bytes(m, cfg->kv_block_size, SL_KV_TYPE_F32);

    int64_t T = cfg->max_batch_tokens, E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, half = hp->n_rot / 2;
    int64_t xn_dim = E > q_dim ? E : q_dim;
    bool ok = sl_threadpool_create(cfg->n_threads, &cb->pool) == SL_OK;
    ok = ok && (cb->kv = calloc(cb->base.kv_bytes / sizeof(float), sizeof(float)));
    /* 64-byte aligned rows: the AVX2 dot kernels are ~30% slower on unaligned activations */
#define ALLOC(p, n) (ok = ok && ((p) = aligned_alloc(64, ((size_t)(n) * sizeof *(p) + 63) / 64 * 64)) != NULL)
    ALLOC(cb->x, T * E);
    ALLOC(cb->xn, T * xn_dim);
    ALLOC(cb->q, T * q_dim);
    ALLOC(cb->k, T * kv_dim);
    ALLOC(cb->v, T * kv_dim);
    ALLOC(cb->att, T * q_dim);
    /* a MoE model's dense FFN width serves its shared expert only (1: none) */
    int64_t ff = hp->n_expert > 0 ? (hp->n_ff_shexp > 0 ? hp->n_ff_shexp : 1) : hp->n_ff;
    ALLOC(cb->gate, T * ff);
    ALLOC(cb->up, T * ff);
    int64_t R = T * (hp->n_expert > 0 ? hp->n_expert_used : 1);   /* rows through the experts */
    if (hp->n_expert > 0) {
        ALLOC(cb->router, T * hp->n_expert);
        ALLOC(cb->route_tmp, hp->n_expert);
        ALLOC(cb->route_id, R);
        ALLOC(cb->route_w, R);
        ALLOC(cb->slot_row, R);
        ALLOC(cb->grp_off, hp->n_expert + 1);
        ALLOC(cb->grp_fill, hp->n_expert);
        ALLOC(cb->xg, R * E);
        ALLOC(cb->gg, R * hp->n_ff_exp);
        ALLOC(cb->ug, R * hp->n_ff_exp);
        cb->yg = cb->xg;
        ALLOC(cb->mm_entries, 2 * hp->n_expert);
        if (hp->n_ff_shexp > 0) {
            ALLOC(cb->shg, T);
            ALLOC(cb->sh_out, T * E);
        }
    }
    ALLOC(cb->cos_t, T * half);
    ALLOC(cb->sin_t, T * half);
    ALLOC(cb->tok_seq, T);
    ALLOC(cb->tok_pos, T);
    ALLOC(cb->out_rows, T);
    ALLOC(cb->scores, (int64_t)cfg->n_threads * cfg->max_ctx);
    ALLOC(cb->tmp, (int64_t)cfg->n_threads * ROWS_PER_CALL * TOKEN_TILE);
    ALLOC(cb->inv_freq, half);
    bool two_ropes = hp->rope_freq_base_swa != hp->rope_freq_base || hp->rope_freq_scale_swa != hp->rope_freq_scale;
    if (two_ropes) {
        ALLOC(cb->cos_swa, T * half);
        ALLOC(cb->sin_swa, T * half);
        ALLOC(cb->inv_freq_swa, half);
    }
    /* activation slots: as many as the most formats one matmul mixes, each
     * as wide as the widest prepared row (Q8_K ~1.14 bytes per element,
     * rounded F16/BF16 rows 4) */
    int n_slots = 0;
    size_t stride = 0;
    act_need((const sl_weight *const[]){&m->output}, 1, &n_slots, &stride);
    for (int l = 0; m->layers && l < hp->n_layer; l++) {   /* NULL in shape-only test models */
        const sl_layer *L = &m->layers[l];
        const sl_moe *mo = &L->moe;
        act_need((const sl_weight *const[]){&L->wq, &L->wk, &L->wv}, 3, &n_slots, &stride);
        act_need((const sl_weight *const[]){&L->wo}, 1, &n_slots, &stride);
        if (!mo->gate) {
            act_need((const sl_weight *const[]){&L->w_gate, &L->w_up}, 2, &n_slots, &stride);
            act_need((const sl_weight *const[]){&L->w_down}, 1, &n_slots, &stride);
            continue;
        }
        act_need((const sl_weight *const[]){&mo->router}, 1, &n_slots, &stride);
        act_need((const sl_weight *const[]){&mo->gate[0], &mo->up[0]}, 2, &n_slots, &stride);
        act_need((const sl_weight *const[]){&mo->down[0]}, 1, &n_slots, &stride);
        if (mo->sh_down.data) {
            act_need((const sl_weight *const[]){&mo->sh_gate, &mo->sh_up, &mo->sh_gate_inp}, 3, &n_slots, &stride);
            act_need((const sl_weight *const[]){&mo->sh_down}, 1, &n_slots, &stride);
        }
    }
    cb->act_stride = stride;
    for (int s = 0; s < n_slots; s++)   /* R rows: the expert matmuls prepare every routed row at once */
        ok = ok && (cb->act[s] = aligned_alloc(64, (size_t)R * stride)) != NULL;
#undef ALLOC
    if (!ok) {
        snprintf(err, SL_ERR_LEN, "cpu backend: out of memory (KV cache %llu MiB for %u blocks, "
                 "scratch for %d tokens)", (unsigned long long)(cb->base.kv_bytes >> 20), cfg->n_kv_blocks,
                 cfg->max_batch_tokens);
        cpu_destroy(&cb->base);
        return SL_ENOMEM;
    }
    const float *divisors = sl_model_rope_divisors(m, cfg->max_ctx);   /* llama3 or longrope, or NULL */
    for (int64_t i = 0; i < half; i++) {
        cb->inv_freq[i] = pow((double)hp->rope_freq_base, -2.0 * (double)i / (double)hp->n_rot);
        if (divisors)
            cb->inv_freq[i] /= divisors[i];
        if (cb->inv_freq_swa) {
            cb->inv_freq_swa[i] = pow((double)hp->rope_freq_base_swa, -2.0 * (double)i / (double)hp->n_rot);
            if (divisors)
                cb->inv_freq_swa[i] /= divisors[i];
        }
    }
    *out = &cb->base;
    return SL_OK;
}
