/* tools/cudacheck/cudacheck.c: the CUDA backend against the CPU backend, in
 * one command, for every model file given (run on a GPU machine).
 *
 *   cudacheck [--ops] [--sampling] [--draws N] [--faults] [--prompt N] [--chunk N] [--gen N] [--seqs N] [--bench N]
 *             [--batches 1,8,...] [--tol X] [--threads N] [--no-cpu] [--no-bench]
 *             [--device cuda|cpu] [--kv-type auto|f32|f16|q8_0] MODEL.gguf...
 *
 * --kv-type: how the backend under test stores K/V (default auto: the
 * backend's default, f16 on CUDA); the CPU reference always stores f32.
 *
 * --sampling checks the device sampler against the reference sampler
 * (kernels/cpu/sampler.c) on synthetic rows, --draws draws per case
 * (tools/cudacheck/sampling.c says what is compared).
 * --ops first runs the library's per-kernel self-test (sl_cuda_selftest in
 * kernels/cuda/selftest.cu: matmul per type, rmsnorm, paged attention against
 * float64 host references; then sl_cuda_selftest_window in
 * kernels/cuda/selftest_window.cu: sliding windows and soft caps; then
 * sl_cuda_selftest_kv in kernels/cuda/selftest_kv.cu: the K/V writer of
 * each storage type; then sl_cuda_selftest_fa in kernels/cuda/selftest_fa.cu:
 * the tensor-core flash attention of prefill steps; then sl_cuda_selftest_moe
 * in kernels/cuda/selftest_moe.cu: MoE routing, grouping and experts; then
 * sl_cuda_selftest_mmvq in kernels/cuda/selftest_mmvq.cu: the integer
 * small-batch matmul of SLUICE_CUDA_MMVQ=1, with its timing lines), which
 * points at the kernel when a model fails.
 * Per model:
 *  1. cpu vs cuda: one sequence, the prompt prefilled in chunks (logits of
 *     every row), then --gen greedy decode steps fed the CPU's argmax: the
 *     relative L2 distance of each step's logits, ||g - c|| / ||c||, and
 *     whether both pick the same token (greedy agreement).
 *  2. batch invariance on the GPU: --seqs sequences run alone (prefill in
 *     chunks, then decode) and together (one prefill call, then batched
 *     decode steps): every logits row must be bitwise equal (prefill rows
 *     take the tensor-core path alone or batched, decode rows the
 *     small-batch kernels while --seqs stays under its threshold of 16;
 *     run with SLUICE_CUDA_GEMM=0 it checks the small-batch kernels alone).
 *  3. timing: decode tok/s at each --batches size (default 1,8; --bench
 *     steps after a --prompt prefill per sequence), logits copied back each
 *     step as the scheduler gets them.
 * --faults first sweeps allocation failures through creation (env
 * SLUICE_CUDA_FAIL_ALLOC=N fails the Nth allocation): each must be a clean
 * SL_ENOMEM with a message (run it under compute-sanitizer for leaks).
 * --device cpu puts the CPU backend under test instead: every figure must
 * then be exact (a check of this tool on a machine without a GPU).
 * On a MoE model, a prompt row whose CPU routing was a near-tie in some
 * layer (the k-th and (k+1)-th router logits within TIE_GAP,
 * kernels/cpu/moe_watch.h) is reported apart and left out of the prefill
 * figure: another rounding of the same input may pick the other expert.
 * Fails (exit 1) when a relative L2 exceeds --tol (default per K/V type,
 * default_tol() says why), when greedy tokens disagree, or when batched
 * differs from alone. Exit 2 on bad usage or a model/backend that cannot be
 * loaded. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/moe_watch.h"
#include "kernels/cpu/sampler.h"
#include "kernels/backend.h"
#include "model/ggml_types.h"
#include "tools/cudacheck/cudacheck.h"
#include "model/model.h"

#define BLOCK SL_KV_BLOCK_TOKENS   /* the worker's block size */

typedef struct {
    int ops, sampling, draws, faults, prompt, chunk, gen, seqs, bench, threads, no_cpu, no_bench;
    int batches[8], n_batches, maxb;   /* timing batch sizes; maxb their largest */
    const char *device;                /* backend under test: cuda (cpu checks this tool itself) */
    sl_kv_type kv_type;                /* the backend under test's K/V storage (AUTO: its default) */
    double tol;                        /* > 0: --tol given; 0: default_tol() of the type the backend stores */
} options;

/* The relative L2 allowed against the CPU backend (float32 K/V) when the
 * backend under test stores K/V as `t`. f32: 5e-3: the small-batch kernels
 * keep activations in float32, so only summation order differs; the
 * tensor-core path rounds them to float16 (~1e-3 measured). f16 K/V rounds
 * each stored value by up to 2^-11 relative, which adds little to that:
 * measured on an H200 (docs/CUDA.md, "K/V storage"), the worst row of the
 * tiny models went from 1.07e-3 to 1.18e-3 and of the 1B shape (4,000-token
 * prompt) from 1.93e-3 to 1.97e-3, so f16 keeps f32's 5e-3. q8_0 rounds by
 * up to half a step of amax/127 per group of 32, ~10x f16's error on the
 * logits: 1.08e-2 worst on the tiny models, 1.48e-2 on the 1B shape, so
 * 4e-2. Greedy agreement stays required for every type; a random tiny
 * model's near-tied logits can flip under q8_0 (tiny-llama Q4_K_M did at
 * token 24), so gpu-check runs q8_0 on models measured to agree. */
static double default_tol(sl_kv_type t)
{
    switch (t) {
    case SL_KV_TYPE_Q8_0: return 4e-2;
    default: return 5e-3;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static double rel_l2(const float *g, const float *c, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Batched vs alone: counts rows that are not bitwise equal, tracks the
 * worst relative L2 and rows whose greedy token differs. */
static void compare_row(const float *b, const float *a, int64_t V, int *diff_rows, double *worst, int *argmax_diff)
{
    if (memcmp(b, a, (size_t)V * sizeof(float)) == 0)
        return;
    (*diff_rows)++;
    double d = rel_l2(b, a, V);
    if (d > *worst)
        *worst = d;
    *argmax_diff += argmax(b, (int)V) != argmax(a, (int)V);
}

static const char *tname(uint32_t t)
{
    const char *s = sl_ggml_type_name(t);
    return s ? s : "?";
}

/* A sequence's block table: blocks [first, first + n). */
static void table(int32_t *t, int first, int n)
{
    for (int i = 0; i < n; i++)
        t[i] = first + i;
}

/* A MoE prompt row whose CPU routing margin (moe_watch.h) is at most this
 * in some layer is a near-tie: router logits are O(1)-O(10) and float16
 * rounding of the router's input (the K/V cache's, the tensor-core path's)
 * moves them by ~1e-3 of that, enough to pick the other expert, after
 * which the row's logits move by 1e-2 or more with every kernel right. */
#define TIE_GAP 0.02f

/* The CPU reference's smallest routing margin per prompt position, over
 * the MoE layers (+inf for a dense model). */
typedef struct {
    float *min;
    int64_t base, n;   /* base: the position of the current step's row 0 */
} margins;

static void note_margin(void *ctx, int64_t row, float m)
{
    margins *g = ctx;
    int64_t p = g->base + row;
    if (p >= 0 && p < g->n && m < g->min[p])
        g->min[p] = m;
}

/* Prefills `n` tokens in chunks; logits of every row (all = 1) or of the
 * last row only land in `out`. g: non-NULL to record the (CPU) backend's
 * routing margins per position. */
static sl_status prefill(sl_backend *b, const int32_t *tok, int n, int chunk, const int32_t *blocks, int n_blocks,
                         int all, float *out, int V, margins *g)
{
    for (int p = 0; p < n; p += chunk) {
        int k = n - p < chunk ? n - p : chunk;
        if (g)
            g->base = p;
        sl_batch_seq s = {.tokens = tok + p, .n_tokens = k, .pos = p, .blocks = blocks, .n_blocks = n_blocks,
                          .logits_all = all != 0, .prompt = true};
        sl_status rc = sl_backend_forward(b, &s, 1, all ? out + (int64_t)p * V : out);
        if (rc < 0)
            return rc;
    }
    return SL_OK;
}

/* prefill of the CPU reference, recording its routing margins per position
 * into margin (P floats, +inf where no MoE layer routed) */
static sl_status prefill_watched(sl_backend *b, const int32_t *tok, int n, int chunk, const int32_t *blocks,
                                 int n_blocks, float *out, int V, float *margin)
{
    for (int p = 0; p < n; p++)
        margin[p] = INFINITY;
    margins g = {.min = margin, .n = n};
    sl_cpu_moe_watch(note_margin, &g);
    sl_status rc = prefill(b, tok, n, chunk, blocks, n_blocks, 1, out, V, &g);
    sl_cpu_moe_watch(NULL, NULL);
    return rc;
}

/* The fill of check_overlap_masks: sequence s allows the tokens t with
 * (t + s) % 5 == 0, on odd s only (even ones draw unmasked). */
typedef struct {
    uint32_t *masks;
    int S, words, V;
    int calls;
} overlap_fill;

static void write_masks(void *ctx)
{
    overlap_fill *f = ctx;
    f->calls++;
    memset(f->masks, 0, (size_t)f->S * (size_t)f->words * sizeof *f->masks);
    for (int s = 1; s < f->S; s += 2)
        for (int t = (5 - s % 5) % 5; t < f->V; t += 5)
            f->masks[(size_t)s * f->words + (size_t)t / 32] |= 1u << (t % 32);
}

/* 2c. grammar masks written while the layers run
 * (sl_backend_forward_sample_overlap) draw what the same masks written
 * before the step draw (sl_backend_forward_sample), greedy and sampled, and
 * no masked row draws outside its mask. Reruns the step of 2b. */
static int check_overlap_masks(sl_backend *gpu, int S, const int32_t *lens, const int32_t *bt, int per_seq,
                               const int32_t *feed, int32_t (*hist)[8], int G, const sl_sampling_params *greedy,
                               const sl_sampling_params *sampled)
{
    int V = gpu->model->hp.n_vocab, words = (V + 31) / 32, bad = 0, differ = 0, outside = 0;
    overlap_fill f = {calloc((size_t)S * (size_t)words, sizeof(uint32_t)), S, words, V, 0};
    int32_t before[64], during[64];
    sl_batch_seq bs[64];
    sl_sample_req rq[64];
    sl_logprob_record rec[64];   /* greedy asks logprobs: every draw needs its record */
    const sl_sampling_params *ps[2] = {greedy, sampled};
    for (int k = 0; f.masks && k < 2 && !bad; k++) {
        for (int s = 0; s < S; s++) {
            bs[s] = (sl_batch_seq){.tokens = &feed[s], .n_tokens = 1, .pos = lens[s] + G, .blocks = bt + s * per_seq,
                                   .n_blocks = per_seq};
            rq[s] = (sl_sample_req){.params = ps[k], .history = hist[s], .n_history = 8,
                                    .draw_index = (uint64_t)(G + s), .allow = s % 2 ? f.masks + (size_t)s * words : NULL,
                                    .record = &rec[s]};
        }
        sl_allow_fill fill = {write_masks, &f};
        memset(f.masks, 0xff, (size_t)S * (size_t)words * sizeof *f.masks);   /* stale until fill runs */
        f.calls = 0;
        bad |= sl_backend_forward_sample_overlap(gpu, bs, S, rq, during, &fill) < 0 || f.calls != 1;
        write_masks(&f);
        bad |= sl_backend_forward_sample(gpu, bs, S, rq, before) < 0;
        for (int s = 0; s < S && !bad; s++) {
            differ += before[s] != during[s];
            if (s % 2)
                outside += during[s] < 0 || (during[s] + s) % 5 != 0;
        }
    }
    bad |= !f.masks || differ > 0 || outside > 0;
    free(f.masks);
    printf("  sampling with masks written during the layers vs before the step: %d tokens differ, %d outside "
           "the mask%s\n", differ, outside, bad ? "  FAIL" : "");
    return bad;
}

/* 2b. the device sampler inside the backend: one more step of the batched
 * sequences (tables bt) through forward_sample, against the reference
 * sampler on the same step's logits from the alone sequences (tables at,
 * bitwise the same rows, part 2). Each parameter set reruns the same step
 * (same token, same position: the KV writes repeat). Greedy must agree
 * always; sampled draws but for rounding at a boundary (allowed once). */
static int check_device_sampling(sl_backend *gpu, const options *o, int S, int G, const int32_t *lens,
                                 const int32_t *bt, const int32_t *at, int per_seq, const int32_t *dec,
                                 const float *alone, float *lg)
{
    int V = gpu->model->hp.n_vocab, bad = 0, differ = 0, rec_bad = 0, cases = 0;
    (void)o;
    int32_t feed[64], tok[64], hist[64][8];
    sl_batch_seq bs[64];
    sl_sample_req rq[64];
    sl_logprob_record rec[64], ref;
    sl_sampling_params p[4];
    sl_sampler_scratch *scr = NULL;
    if (S > 64 || sl_sampler_scratch_create(V, &scr) < 0)
        return 1;
    for (int k = 0; k < 4; k++) {
        sl_sampling_params_default(&p[k]);
        p[k].seed = 40 + (uint64_t)k;
    }
    p[0].temperature = 0.0f;
    p[0].n_logprobs = 3;
    p[1].temperature = 0.8f;
    p[1].top_k = 40;
    p[1].top_p = 0.9f;
    p[2].repetition_penalty = 1.3f;
    p[2].n_logprobs = 2;
    p[3].min_p = 0.05f;
    p[3].n_logit_bias = 1;
    p[3].logit_bias[0] = (sl_logit_bias){1, 2.0f};
    for (int s = 0; s < S; s++) {
        feed[s] = (int32_t)argmax(alone + ((int64_t)s * (G + 1) + G) * V, V);
        for (int j = 0; j < 8; j++)
            hist[s][j] = j < G ? dec[s * (G + 1) + j] : feed[s];
    }
    /* the reference logits: the alone sequences' next step */
    for (int s = 0; s < S; s++) {
        sl_batch_seq q = {.tokens = &feed[s], .n_tokens = 1, .pos = lens[s] + G, .blocks = at + s * per_seq,
                          .n_blocks = per_seq};
        if (sl_backend_forward(gpu, &q, 1, lg + (int64_t)s * V) < 0) {
            sl_sampler_scratch_destroy(scr);
            return 1;
        }
    }
    float *work = malloc((size_t)V * sizeof *work);
    for (int k = 0; work && k < 4; k++) {
        for (int s = 0; s < S; s++) {
            bs[s] = (sl_batch_seq){.tokens = &feed[s], .n_tokens = 1, .pos = lens[s] + G, .blocks = bt + s * per_seq,
                                   .n_blocks = per_seq};
            rq[s] = (sl_sample_req){.params = &p[k], .history = hist[s], .n_history = 8,
                                    .draw_index = (uint64_t)(G + s), .record = &rec[s]};
        }
        if (sl_backend_forward_sample(gpu, bs, S, rq, tok) < 0) {
            bad = 1;
            break;
        }
        for (int s = 0; s < S; s++, cases++) {
            memcpy(work, lg + (int64_t)s * V, (size_t)V * sizeof *work);
            int32_t t = -1;
            sl_sampler_sample(&p[k], work, V, hist[s], 8, (uint64_t)(G + s), scr, &t, &ref);
            differ += tok[s] != t;
            bad |= p[k].temperature == 0.0f && tok[s] != t;
            if (p[k].n_logprobs >= 0 && tok[s] == t &&
                (rec[s].token != ref.token || rec[s].n_top != ref.n_top || fabsf(rec[s].logprob - ref.logprob) > 1e-5f))
                rec_bad++;
        }
    }
    bad |= !work || differ > 1 || rec_bad > 0;
    free(work);
    sl_sampler_scratch_destroy(scr);
    printf("  sampling %d draws on the device vs the reference on the same logits: %d tokens differ, %d records "
           "differ%s\n", cases, differ, rec_bad, bad ? "  FAIL" : "");
    return bad | check_overlap_masks(gpu, S, lens, bt, per_seq, feed, hist, G, &p[0], &p[1]);
}

static int check_model(const char *path, const options *o)
{
    char err[SL_ERR_LEN];
    sl_model *m;
    if (sl_model_load(path, &m, err) < 0) {
        fprintf(stderr, "cudacheck: %s\n", err);
        return 2;
    }
    const sl_hparams *hp = &m->hp;
    int V = hp->n_vocab, P = o->prompt, S = o->seqs;
    int steps = o->gen > o->bench ? o->gen : o->bench;
    int ctx = P + steps + 1, per_seq = (ctx + BLOCK - 1) / BLOCK;
    int max_tok = S * P > o->chunk ? S * P : o->chunk;
    if (max_tok < o->maxb)
        max_tok = o->maxb;
    /* block ranges: run 1 | S alone runs | S batched runs | maxb timing sequences */
    int n_runs = 1 + 2 * S + o->maxb;
    sl_backend_config cfg = {.device = o->device, .n_threads = o->threads, .kv_block_size = BLOCK,
                             .n_kv_blocks = (uint32_t)(n_runs * per_seq), .max_batch_tokens = max_tok,
                             .max_ctx = ctx, .kv_type = o->kv_type};
    printf("model %s: %s, %d layers, n_embd %d, vocab %d; wq %s, w_down %s, output %s\n", path, m->arch_name,
           hp->n_layer, hp->n_embd, V, tname(m->layers[0].wq.type), tname(m->layers[0].w_down.type),
           tname(m->output.type));
    sl_backend *gpu = NULL, *cpu = NULL;
    if (o->faults) {
        /* fail the 1st, 2nd, ... allocation of a creation until one succeeds */
        int n, bad = 0;
        sl_status frc = SL_OK;
        for (n = 1; n <= 64; n++) {
            char v[16];
            snprintf(v, sizeof v, "%d", n);
            setenv("SLUICE_CUDA_FAIL_ALLOC", v, 1);
            err[0] = 0;
            frc = sl_backend_create(m, &cfg, &gpu, err);
            if (frc >= 0)
                break;
            if (frc != SL_ENOMEM && n == 1)
                break;   /* no device or no library: reported below as could-not-run */
            if (frc != SL_ENOMEM || !err[0] || gpu) {
                printf("  faults   allocation %d: status %d, err '%s': not a clean out-of-memory error\n", n, frc, err);
                bad = 1;
                break;
            }
        }
        unsetenv("SLUICE_CUDA_FAIL_ALLOC");
        sl_backend_destroy(gpu);
        gpu = NULL;
        if (frc < 0 && !bad) {
            fprintf(stderr, "cudacheck: %s\n", err);
            sl_model_destroy(m);
            return 2;
        }
        printf("  faults   allocations 1..%d failed in turn: %s\n", n - 1, bad ? "NOT all clean" : "each a clean error");
        if (bad) {
            sl_model_destroy(m);
            return 1;
        }
    }
    if (sl_backend_create(m, &cfg, &gpu, err) < 0) {
        fprintf(stderr, "cudacheck: %s\n", err);
        sl_model_destroy(m);
        return 2;
    }
    double tol = o->tol > 0 ? o->tol : default_tol(gpu->cfg.kv_type);
    printf("  %s backend: KV cache %u blocks, %.1f MiB, K/V %s (rel L2 tolerance %.3g)\n", gpu->ops->name,
           gpu->cfg.n_kv_blocks, gpu->kv_bytes / 1048576.0, sl_kv_type_name(gpu->cfg.kv_type), tol);
    cfg.device = "cpu";
    cfg.kv_type = SL_KV_TYPE_F32;   /* the reference */
    if (!o->no_cpu && sl_backend_create(m, &cfg, &cpu, err) < 0) {
        fprintf(stderr, "cudacheck: cpu backend: %s\n", err);
        sl_backend_destroy(gpu);
        sl_model_destroy(m);
        return 2;
    }

    int64_t rows = max_tok > P ? max_tok : P;
    float *lg = malloc((size_t)rows * V * sizeof(float));
    float *margin = malloc((size_t)(P > 0 ? P : 1) * sizeof(float));   /* the CPU's routing margins */
    float *lc = malloc((size_t)rows * V * sizeof(float));
    float *alone = malloc((size_t)S * (o->gen + 1) * V * sizeof(float));
    int32_t *tok = malloc((size_t)(S + o->maxb) * ctx * sizeof(int32_t));
    int32_t *tabs = malloc((size_t)n_runs * per_seq * sizeof(int32_t));
    sl_batch_seq *bs = malloc((size_t)(S + o->maxb) * sizeof(sl_batch_seq));
    int32_t *next = malloc((size_t)(S + o->maxb) * sizeof(int32_t));
    int fail = 0, rc = 0, agree_all = -1, diff_all = -1;
    double prefill_l2 = -1, decode_l2 = -1;
    if (!lg || !margin || !lc || !alone || !tok || !tabs || !bs || !next) {
        fprintf(stderr, "cudacheck: out of memory\n");
        rc = 2;
        goto out;
    }
    for (int r = 0; r < n_runs; r++)
        table(tabs + r * per_seq, r * per_seq, per_seq);
    for (int s = 0; s < S + o->maxb; s++)
        for (int j = 0; j < ctx; j++)
            tok[s * ctx + j] = (int32_t)(((uint64_t)s * 7919 + (uint64_t)j * 104729 + 17) % (uint64_t)V);

    /* 1. cpu vs cuda */
    if (cpu) {
        int32_t *t = tok, *tb = tabs;
        if (prefill(gpu, t, P, o->chunk, tb, per_seq, 1, lg, V, NULL) < 0 ||
            prefill_watched(cpu, t, P, o->chunk, tb, per_seq, lc, V, margin) < 0) {
            fprintf(stderr, "cudacheck: prefill failed\n");
            rc = 2;
            goto out;
        }
        double worst = 0, worst_tie = 0;
        int agree = 0, first_bad = -1, ties = 0, tie_over = 0;
        for (int p = 0; p < P; p++) {
            double d = rel_l2(lg + (int64_t)p * V, lc + (int64_t)p * V, V);
            if (margin[p] <= TIE_GAP) {   /* a routing near-tie: its own figure */
                ties++;
                tie_over += d > tol;
                worst_tie = d > worst_tie ? d : worst_tie;
                continue;
            }
            worst = d > worst ? d : worst;
        }
        printf("  prefill  %d tokens in chunks of %d: rel L2 max %.3g", P, o->chunk, worst);
        if (ties)
            printf(" (without %d rows whose CPU routing was a near-tie, gap <= %.2g: worst there %.3g, %d over "
                   "the tolerance)", ties, TIE_GAP, worst_tie, tie_over);
        printf("\n");
        fail |= worst > tol;
        int32_t cur = (int32_t)argmax(lc + (int64_t)(P - 1) * V, V);
        agree += argmax(lg + (int64_t)(P - 1) * V, V) == cur;
        if (!agree)
            first_bad = 0;
        double worst_d = 0;
        for (int i = 0; i < o->gen; i++) {
            sl_batch_seq s = {.tokens = &cur, .n_tokens = 1, .pos = P + i, .blocks = tb, .n_blocks = per_seq};
            if (sl_backend_forward(gpu, &s, 1, lg) < 0 || sl_backend_forward(cpu, &s, 1, lc) < 0) {
                fprintf(stderr, "cudacheck: decode failed\n");
                rc = 2;
                goto out;
            }
            double d = rel_l2(lg, lc, V);
            worst_d = d > worst_d ? d : worst_d;
            int gc = argmax(lc, V), gg = argmax(lg, V);
            if (gc == gg)
                agree++;
            else if (first_bad < 0)
                first_bad = i + 1;
            cur = gc;
        }
        printf("  decode   %d steps: rel L2 max %.3g; greedy tokens agree %d/%d", o->gen, worst_d, agree,
               o->gen + 1);
        if (first_bad >= 0)
            printf(" (first difference at token %d)", first_bad);
        printf("\n");
        fail |= worst_d > tol || agree != o->gen + 1;
        prefill_l2 = worst;
        decode_l2 = worst_d;
        agree_all = agree;
    }

    /* 2. batched == alone on the GPU, bitwise */
    {
        int G = o->gen, diff_rows = 0, argmax_diff = 0;
        double worst_b = 0;
        int32_t *lens = next;   /* prompt length per sequence */
        for (int s = 0; s < S; s++)
            lens[s] = P - 3 * s > 4 ? P - 3 * s : 4;
        int32_t *dec = malloc((size_t)S * (G + 1) * sizeof(int32_t));   /* tokens fed at each decode step */
        if (!dec) {
            rc = 2;
            goto out;
        }
        for (int s = 0; s < S; s++) {
            int32_t *tb = tabs + (1 + s) * per_seq;
            float *a = alone + (int64_t)s * (G + 1) * V;
            if (prefill(gpu, tok + (s + 1) * ctx, lens[s], o->chunk, tb, per_seq, 0, a, V, NULL) < 0) {
                free(dec);
                rc = 2;
                goto out;
            }
            for (int i = 0; i < G; i++) {
                dec[s * (G + 1) + i] = (int32_t)argmax(a + (int64_t)i * V, V);
                sl_batch_seq q = {.tokens = &dec[s * (G + 1) + i], .n_tokens = 1, .pos = lens[s] + i, .blocks = tb,
                                  .n_blocks = per_seq};
                if (sl_backend_forward(gpu, &q, 1, a + (int64_t)(i + 1) * V) < 0) {
                    free(dec);
                    rc = 2;
                    goto out;
                }
            }
        }
        for (int s = 0; s < S; s++)
            bs[s] = (sl_batch_seq){.tokens = tok + (s + 1) * ctx, .n_tokens = lens[s], .pos = 0,
                                   .blocks = tabs + (1 + S + s) * per_seq, .n_blocks = per_seq, .prompt = true};
        if (sl_backend_forward(gpu, bs, S, lg) < 0) {
            fprintf(stderr, "cudacheck: batched prefill failed\n");
            free(dec);
            rc = 2;
            goto out;
        }
        for (int s = 0; s < S; s++)
            compare_row(lg + (int64_t)s * V, alone + (int64_t)s * (G + 1) * V, V, &diff_rows, &worst_b,
                        &argmax_diff);
        for (int i = 0; i < G; i++) {
            for (int s = 0; s < S; s++)
                bs[s] = (sl_batch_seq){.tokens = &dec[s * (G + 1) + i], .n_tokens = 1, .pos = lens[s] + i,
                                       .blocks = tabs + (1 + S + s) * per_seq, .n_blocks = per_seq};
            if (sl_backend_forward(gpu, bs, S, lg) < 0) {
                fprintf(stderr, "cudacheck: batched decode failed\n");
                free(dec);
                rc = 2;
                goto out;
            }
            for (int s = 0; s < S; s++)
                compare_row(lg + (int64_t)s * V, alone + ((int64_t)s * (G + 1) + i + 1) * V, V, &diff_rows,
                            &worst_b, &argmax_diff);
        }
        if (sl_backend_samples(gpu))
            fail |= check_device_sampling(gpu, o, S, G, lens, tabs + (1 + S) * per_seq, tabs + per_seq, per_seq,
                                          dec, alone, lg);
        free(dec);
        printf("  batched  %d sequences x %d rows: %s\n", S, G + 1,
               diff_rows ? "DIFFER from alone" : "bitwise equal to alone");
        if (diff_rows)
            printf("           %d of %d rows differ; worst rel L2 %.2e; %d greedy tokens differ\n", diff_rows,
                   S * (G + 1), worst_b, argmax_diff);
        fail |= diff_rows != 0;
        diff_all = diff_rows;
    }

    /* 3. decode timing at batch 1 and 8 */
    if (!o->no_bench) {
        printf("  timing  ");
        for (int bi = 0; bi < o->n_batches; bi++) {
            int B = o->batches[bi];
            int first = 1 + 2 * S;
            for (int s = 0; s < B; s++) {
                int32_t *tb = tabs + (first + s) * per_seq;
                if (prefill(gpu, tok + (S + s) * ctx, P, o->chunk, tb, per_seq, 0, lg, V, NULL) < 0) {
                    rc = 2;
                    goto out;
                }
                next[s] = (int32_t)argmax(lg, V);
            }
            double t0 = 0;
            for (int i = 0; i < o->bench; i++) {
                if (i == 1)
                    t0 = now_s();   /* step 0 is warm-up */
                for (int s = 0; s < B; s++)
                    bs[s] = (sl_batch_seq){.tokens = &next[s], .n_tokens = 1, .pos = P + i,
                                           .blocks = tabs + (first + s) * per_seq, .n_blocks = per_seq};
                if (sl_backend_forward(gpu, bs, B, lg) < 0) {
                    rc = 2;
                    goto out;
                }
                for (int s = 0; s < B; s++)
                    next[s] = (int32_t)argmax(lg + (int64_t)s * V, V);
            }
            double dt = now_s() - t0;
            if (o->bench > 1)
                printf(" decode batch %d: %.1f tok/s (%.3f ms/step);", B, B * (o->bench - 1) / dt,
                       dt * 1e3 / (o->bench - 1));
        }
        printf("\n");
    }
    printf("  %s\n", fail ? "FAIL" : "PASS");
    /* one grep-able line per model: file, types, the worst figures, verdict */
    const char *base = strrchr(path, '/');
    printf("result %-28s kv %-4s prefill %.2e decode %.2e greedy %d/%d batched %s %s\n", base ? base + 1 : path,
           sl_kv_type_name(gpu->cfg.kv_type), prefill_l2, decode_l2, agree_all, o->gen + 1,
           diff_all == 0 ? "equal" : "DIFFER", fail ? "FAIL" : "PASS");
    rc = fail;
out:
    free(lg);
    free(margin);
    free(lc);
    free(alone);
    free(tok);
    free(tabs);
    free(bs);
    free(next);
    sl_backend_destroy(cpu);
    sl_backend_destroy(gpu);
    sl_model_destroy(m);
    return rc;
}

/* Loads libsluice_cuda.so as kernels/backend.c finds it ($SLUICE_CUDA_LIB,
 * next to this executable, one folder up) and runs its kernel self-test.
 * Returns the failures, or -1 when it could not run. */
void *cudacheck_load_lib(void)
{
    char path[4200], exe[4096];
    const char *env = getenv("SLUICE_CUDA_LIB");
    void *h = NULL;
    if (env && *env) {
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = 0;
            char *slash = strrchr(exe, '/');
            if (slash)
                *slash = 0;
            snprintf(path, sizeof path, "%s/libsluice_cuda.so", exe);
            if (!(h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
                snprintf(path, sizeof path, "%s/../libsluice_cuda.so", exe);
                h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            }
        }
    }
    if (!h)
        fprintf(stderr, "cudacheck: cannot load libsluice_cuda.so: %s\n", dlerror());
    return h;
}

static int run_ops(void)
{
    void *h = cudacheck_load_lib();
    if (!h)
        return -1;
    int (*selftest)(FILE *);
    *(void **)&selftest = dlsym(h, "sl_cuda_selftest");
    if (!selftest) {
        fprintf(stderr, "cudacheck: --ops: the library lacks sl_cuda_selftest\n");
        return -1;
    }
    printf("kernel self-test:\n");
    fflush(stdout);
    int f = selftest(stdout);
    /* the attention options of the gemma architectures (kernels/cuda/selftest_window.cu) */
    int (*window)(FILE *);
    *(void **)&window = dlsym(h, "sl_cuda_selftest_window");
    if (f >= 0 && window) {
        int fw = window(stdout);
        f = fw < 0 ? fw : f + fw;
    }
    /* the K/V writer of each storage type (kernels/cuda/selftest_kv.cu) */
    int (*kv)(FILE *);
    *(void **)&kv = dlsym(h, "sl_cuda_selftest_kv");
    if (f >= 0 && kv) {
        int fk = kv(stdout);
        f = fk < 0 ? fk : f + fk;
    }
    /* the tensor-core flash attention of prefill steps (kernels/cuda/selftest_fa.cu) */
    int (*fa)(FILE *);
    *(void **)&fa = dlsym(h, "sl_cuda_selftest_fa");
    if (f >= 0 && fa) {
        int ff = fa(stdout);
        f = ff < 0 ? ff : f + ff;
    }
    /* the MoE routing, grouping and expert kernels (kernels/cuda/selftest_moe.cu) */
    int (*moe)(FILE *);
    *(void **)&moe = dlsym(h, "sl_cuda_selftest_moe");
    if (f >= 0 && moe) {
        int fm = moe(stdout);
        f = fm < 0 ? fm : f + fm;
    }
    /* the integer small-batch matmul, SLUICE_CUDA_MMVQ=1 (kernels/cuda/selftest_mmvq.cu) */
    int (*mmvq)(FILE *);
    *(void **)&mmvq = dlsym(h, "sl_cuda_selftest_mmvq");
    if (f >= 0 && mmvq) {
        int fq = mmvq(stdout);
        f = fq < 0 ? fq : f + fq;
    }
    fflush(stdout);
    printf("result kernels %s\n", f == 0 ? "PASS" : f < 0 ? "could not run" : "FAIL");
    return f;
}

int main(int argc, char **argv)
{
    /* the CUDA backend keeps matmul inputs float32: compare it with the CPU
     * backend's float path, not its default llama.cpp-style 8-bit one, whose
     * logits sit ~1e-2 away (kernels/cpu/act_quant.h); set before the CPU
     * backend first reads it; an explicit SLUICE_CPU_ACT wins */
    setenv("SLUICE_CPU_ACT", "f32", 0);
    options o = {.draws = 64, .prompt = 40, .chunk = 16, .gen = 32, .seqs = 4, .bench = 64, .tol = 0,
                 .batches = {1, 8}, .n_batches = 2, .device = "cuda",
                 .threads = (int)sysconf(_SC_NPROCESSORS_ONLN)};
    int first = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            first = i;
            break;
        }
        if (!strcmp(a, "--ops")) { o.ops = 1; continue; }
        if (!strcmp(a, "--sampling")) { o.sampling = 1; continue; }
        if (!strcmp(a, "--faults")) { o.faults = 1; continue; }
        if (!strcmp(a, "--no-cpu")) { o.no_cpu = 1; continue; }
        if (!strcmp(a, "--no-bench")) { o.no_bench = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "cudacheck: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--prompt")) o.prompt = atoi(v);
        else if (!strcmp(a, "--chunk")) o.chunk = atoi(v);
        else if (!strcmp(a, "--gen")) o.gen = atoi(v);
        else if (!strcmp(a, "--seqs")) o.seqs = atoi(v);
        else if (!strcmp(a, "--bench")) o.bench = atoi(v);
        else if (!strcmp(a, "--batches")) {
            o.n_batches = 0;
            for (char *e = (char *)v; *v && o.n_batches < 8; v = e + (*e == ',')) {
                long b = strtol(v, &e, 10);
                if (e == v || b < 1 || b > 1024) { fprintf(stderr, "cudacheck: bad --batches\n"); return 2; }
                o.batches[o.n_batches++] = (int)b;
            }
        }
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--draws")) o.draws = atoi(v);
        else if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--kv-type")) {
            if (sl_kv_type_parse(v, &o.kv_type) < 0) { fprintf(stderr, "cudacheck: bad --kv-type %s (auto, f32, f16, q8_0)\n", v); return 2; }
        }
        else if (!strcmp(a, "--tol")) {
            o.tol = atof(v);
            if (!(o.tol > 0)) { fprintf(stderr, "cudacheck: --tol must be > 0\n"); return 2; }
        }
        else { fprintf(stderr, "cudacheck: unknown option %s\n", a); return 2; }
    }
    o.maxb = 1;
    for (int i = 0; i < o.n_batches; i++)
        o.maxb = o.batches[i] > o.maxb ? o.batches[i] : o.maxb;
    if ((first >= argc && !o.ops && !o.sampling) || o.draws < 1 || o.prompt < 1 || o.chunk < 1 || o.gen < 0 || o.seqs < 1 || o.seqs > 64 || o.bench < 0 ||
        o.threads < 1) {
        fprintf(stderr, "usage: cudacheck [--ops] [--sampling] [--draws N] [--faults] [--prompt N] [--chunk N] [--gen N] [--seqs N] [--bench N]\n"
                        "                 [--batches 1,8,...] [--tol X] [--threads N] [--no-cpu] [--no-bench]\n"
                        "                 [--device cuda|cpu] [--kv-type auto|f32|f16|q8_0] MODEL.gguf...\n");
        return 2;
    }
    int failed = 0, errors = 0, n = 0;
    if (o.ops) {
        int f = run_ops();
        errors += f < 0;
        failed += f > 0;
    }
    if (o.sampling) {
        int f = cudacheck_sampling(o.draws);
        errors += f < 0;
        failed += f > 0;
    }
    for (int i = first; i < argc; i++, n++) {
        int r = check_model(argv[i], &o);
        failed += r == 1;
        errors += r == 2;
        fflush(stdout);
    }
    if (o.tol > 0)
        printf("cudacheck: %d models, %d failed, %d could not run (tolerance rel L2 %.3g)\n", n, failed, errors, o.tol);
    else
        printf("cudacheck: %d models, %d failed, %d could not run (tolerance rel L2 by K/V type: f32 %.3g, f16 %.3g, "
               "q8_0 %.3g)\n", n, failed, errors, default_tol(SL_KV_TYPE_F32), default_tol(SL_KV_TYPE_F16),
               default_tol(SL_KV_TYPE_Q8_0));
    return errors ? 2 : failed ? 1 : 0;
}
