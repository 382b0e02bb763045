/* tools/schedbench/schedbench.c: the scheduler's own cost on the CPU backend,
 * without shared memory: (1) batch-1 decode step time of a dedicated
 * single-request loop (what `sluice generate` runs: forward_sample) against
 * the same request driven by sl_sched_step; (2) aggregate decode tok/s at
 * each concurrency. Requests are all queued at the start; greedy.
 *
 *   schedbench -m MODEL.gguf [-t THREADS] [-p PROMPT] [-n TOKENS] [-c 1,4,16]
 *
 * The shared-memory path benchmark (front end -> ring -> worker) lives with
 * the worker glue; this one isolates what the scheduler adds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu-worker/scheduler.h"
#include "kernels/backend.h"
#include "model/model.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* a real-clock io over a fixed set of requests                              */

typedef struct {
    sl_sched_request *reqs;
    int n, next, done;
    int64_t tokens;
    volatile int stop;
    uint64_t last_step_end;
    double batch1_ns;        /* sum of step-to-step times of single-token steps */
    int64_t batch1_steps;
} bench_io;

static sl_status b_poll(void *ctx, sl_sched_request *out)
{
    bench_io *b = ctx;
    if (b->next >= b->n)
        return SL_AGAIN;
    *out = b->reqs[b->next++];
    return SL_OK;
}

static sl_status b_emit(void *ctx, uint64_t id, int32_t token, const sl_logprob_record *rec)
{
    (void)id, (void)token, (void)rec;
    ((bench_io *)ctx)->tokens++;
    return SL_OK;
}

static void b_finish(void *ctx, uint64_t id, int reason, const char *error, const sl_sched_timings *t)
{
    (void)id, (void)reason, (void)t;
    bench_io *b = ctx;
    if (error)
        fprintf(stderr, "schedbench: request failed: %s\n", error);
    if (++b->done == b->n)
        b->stop = 1;
}

static bool b_cancelled(void *ctx, uint64_t id)
{
    (void)ctx, (void)id;
    return false;
}

static void b_wait(void *ctx, uint64_t ns)
{
    (void)ctx, (void)ns;
}

static uint64_t b_now(void *ctx)
{
    (void)ctx;
    return now_ns();
}

static void b_step_done(void *ctx, const sl_sched_stats *s)
{
    bench_io *b = ctx;
    uint64_t t = now_ns();
    /* whole-step time (bookkeeping + forward + sampling + emit) of decode
     * steps of one sequence, measured end to end like the dedicated loop */
    if (s->step_seqs == 1 && s->step_tokens == 1 && b->last_step_end) {
        b->batch1_ns += (double)(t - b->last_step_end);
        b->batch1_steps++;
    }
    b->last_step_end = t;
}

typedef struct {
    sl_backend *be;
    int32_t V, n_prompt, n_gen, n_ctx, per_seq, max_c;
    const int32_t *prompt;   /* (max_c, n_prompt) */
    sl_sampling_params sp;
} bench;

/* The dedicated loop, as `sluice generate` runs it: ms per decode step
 * (forward and draw), the first step excluded as warm-up. */
static double dedicated_step_ms(const bench *B)
{
    int32_t *hist = malloc((size_t)B->n_ctx * sizeof *hist);
    int32_t *blocks = malloc((size_t)B->per_seq * sizeof *blocks);
    if (!hist || !blocks) {
        fprintf(stderr, "schedbench: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < B->per_seq; i++)
        blocks[i] = i;
    memcpy(hist, B->prompt, (size_t)B->n_prompt * sizeof *hist);
    sl_batch_seq s = {.tokens = hist, .n_tokens = B->n_prompt, .pos = 0, .blocks = blocks, .n_blocks = B->per_seq,
                      .prompt = true};
    int32_t n = B->n_prompt, tok = -1;
    sl_sample_req r = {.params = &B->sp, .history = hist, .n_history = n};
    sl_backend_forward_sample(B->be, &s, 1, &r, &tok);
    double ns = 0;
    for (int g = 0; g < B->n_gen; g++) {
        uint64_t t0 = now_ns();
        hist[n++] = tok;
        if (g + 1 == B->n_gen)
            break;
        s = (sl_batch_seq){.tokens = &hist[n - 1], .n_tokens = 1, .pos = n - 1, .blocks = blocks,
                           .n_blocks = B->per_seq};
        r = (sl_sample_req){.params = &B->sp, .history = hist, .n_history = n, .draw_index = (uint64_t)g + 1};
        sl_backend_forward_sample(B->be, &s, 1, &r, &tok);
        if (g > 0)
            ns += (double)(now_ns() - t0);
    }
    free(hist);
    free(blocks);
    return ns / (B->n_gen - 2) / 1e6;
}

/* c concurrent requests through the scheduler: aggregate tok/s (prefill
 * included in the time) and, at c == 1, ms per batch-1 decode step. */
static double sched_tps(const bench *B, int c, double *batch1_ms)
{
    sl_sched_request *reqs = calloc((size_t)c, sizeof *reqs);
    for (int i = 0; i < c; i++) {
        reqs[i].id = (uint64_t)i;
        reqs[i].prompt = B->prompt + (size_t)i * (size_t)B->n_prompt;
        reqs[i].n_prompt = B->n_prompt;
        reqs[i].params = B->sp;
        reqs[i].max_tokens = B->n_gen;
        reqs[i].ignore_eos = true;
        reqs[i].submit_ns = now_ns();
    }
    bench_io b = {.reqs = reqs, .n = c};
    sl_sched_io io = {.ctx = &b, .poll = b_poll, .emit = b_emit, .finish = b_finish, .cancelled = b_cancelled,
                      .wait = b_wait, .now_ns = b_now, .step_done = b_step_done};
    sl_sched_config cfg;
    sl_sched_config_default(&cfg);
    cfg.max_seqs = B->max_c > 16 ? B->max_c : 16;
    cfg.n_kv_blocks = B->be->cfg.n_kv_blocks;
    cfg.prefix_cache = false;   /* every request has the same prompt: measure the compute, not cache hits */
    if (cfg.token_budget < cfg.max_seqs)
        cfg.token_budget = cfg.max_seqs;
    sl_sched *sc;
    char err[SL_ERR_LEN];
    if (sl_sched_create(B->be, B->V, B->n_ctx, NULL, 0, &cfg, &io, &sc, err) < 0) {
        fprintf(stderr, "schedbench: %s\n", err);
        exit(1);
    }
    uint64_t t0 = now_ns();
    sl_sched_run(sc, &b.stop);
    double secs = (double)(now_ns() - t0) / 1e9;
    *batch1_ms = b.batch1_steps ? b.batch1_ns / (double)b.batch1_steps / 1e6 : 0;
    sl_sched_destroy(sc);
    free(reqs);
    return (double)b.tokens / secs;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *conc = "1,4,16";
    int threads = 4, n_prompt = 32, n_gen = 64, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) path = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) conc = argv[i + 1];
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (!path || threads < 1 || n_prompt < 1 || n_gen < 3 || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: schedbench -m MODEL.gguf [-t THREADS] [-p PROMPT] [-n TOKENS] [-c 1,4,16] [-r REPS]\n");
        return 2;
    }
    char err[SL_ERR_LEN];
    sl_model *m;
    if (sl_model_load(path, &m, err) < 0) {
        fprintf(stderr, "schedbench: %s\n", err);
        return 1;
    }
    bench B = {.n_prompt = n_prompt, .n_gen = n_gen, .n_ctx = n_prompt + n_gen, .max_c = 1};
    for (const char *p = conc; *p;) {
        int c = atoi(p);
        if (c > B.max_c) B.max_c = c;
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    B.per_seq = (B.n_ctx + SL_KV_BLOCK_TOKENS - 1) / SL_KV_BLOCK_TOKENS;
    sl_backend_config bc = {.device = "cpu", .n_threads = threads, .kv_block_size = SL_KV_BLOCK_TOKENS,
                            .n_kv_blocks = (uint32_t)(B.per_seq * B.max_c), .max_batch_tokens = 256,
                            .max_ctx = B.n_ctx, .max_batch_seqs = B.max_c > 16 ? B.max_c : 16};
    if (sl_backend_create(m, &bc, &B.be, err) < 0) {
        fprintf(stderr, "schedbench: %s\n", err);
        return 1;
    }
    B.V = m->hp.n_vocab;
    int32_t *prompt = malloc((size_t)B.max_c * (size_t)n_prompt * sizeof *prompt);
    for (int i = 0; i < B.max_c * n_prompt; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % B.V);
    B.prompt = prompt;
    sl_sampling_params_default(&B.sp);
    B.sp.temperature = 0;
    printf("model %s, %d threads, prompt %d, %d tokens per request, %d reps (medians)\n", m->name, threads,
           n_prompt, n_gen, reps);

    /* batch-1: the dedicated loop and the scheduler, alternated so drift hits both */
    double loop[64], sched[64], ratio[64];
    for (int r = 0; r < reps; r++) {
        loop[r] = dedicated_step_ms(&B);
        sched_tps(&B, 1, &sched[r]);
        ratio[r] = sched[r] / loop[r];
    }
    qsort(loop, (size_t)reps, sizeof *loop, cmp_double);
    qsort(sched, (size_t)reps, sizeof *sched, cmp_double);
    qsort(ratio, (size_t)reps, sizeof *ratio, cmp_double);
    printf("batch-1 decode step: dedicated loop %.3f ms, scheduler %.3f ms, ratio %.3f (min %.3f, max %.3f)\n",
           loop[reps / 2], sched[reps / 2], ratio[reps / 2], ratio[0], ratio[reps - 1]);

    double tps1 = 0;
    for (const char *p = conc; *p;) {
        int c = atoi(p);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        double tps[64], b1;
        for (int r = 0; r < reps; r++)
            tps[r] = sched_tps(&B, c, &b1);
        qsort(tps, (size_t)reps, sizeof *tps, cmp_double);
        if (c == 1)
            tps1 = tps[reps / 2];
        printf("concurrency %2d: %.1f tok/s aggregate", c, tps[reps / 2]);
        if (tps1 > 0 && c > 1)
            printf(" (%.2fx of 1)", tps[reps / 2] / tps1);
        printf("\n");
    }
    free(prompt);
    sl_backend_destroy(B.be);
    sl_model_destroy(m);
    return 0;
}
