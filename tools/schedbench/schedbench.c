/* tools/schedbench/schedbench.c: the scheduler's own cost on the CPU backend,
 * without shared memory: (1) batch-1 decode step time of a dedicated
 * single-request loop (what `sluice generate` runs: forward + sample) against
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

#include "gpu-worker/sampler.h"
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

int main(int argc, char **argv)
{
    const char *path = NULL, *conc = "1,4,16";
    int threads = 4, n_prompt = 32, n_gen = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) path = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) conc = argv[i + 1];
    }
    if (!path || threads < 1 || n_prompt < 1 || n_gen < 2) {
        fprintf(stderr, "usage: schedbench -m MODEL.gguf [-t THREADS] [-p PROMPT] [-n TOKENS] [-c 1,4,16]\n");
        return 2;
    }
    char err[SL_ERR_LEN];
    sl_model *m;
    if (sl_model_load(path, &m, err) < 0) {
        fprintf(stderr, "schedbench: %s\n", err);
        return 1;
    }
    int max_c = 1;
    for (const char *p = conc; *p;) {
        int c = atoi(p);
        if (c > max_c) max_c = c;
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    int32_t n_ctx = n_prompt + n_gen;
    int32_t per_seq = (n_ctx + 15) / 16;
    sl_backend_config bc = {.device = "cpu", .n_threads = threads, .kv_block_size = 16,
                            .n_kv_blocks = (uint32_t)(per_seq * max_c), .max_batch_tokens = 256, .max_ctx = n_ctx};
    sl_backend *be;
    if (sl_backend_create(m, &bc, &be, err) < 0) {
        fprintf(stderr, "schedbench: %s\n", err);
        return 1;
    }
    int32_t V = m->hp.n_vocab;
    int32_t *prompt = malloc((size_t)max_c * (size_t)n_prompt * sizeof *prompt);
    for (int i = 0; i < max_c * n_prompt; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % V);

    /* (1) the dedicated loop, as `sluice generate` runs it */
    sl_sampling_params sp;
    sl_sampling_params_default(&sp);
    sp.temperature = 0;
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *hist = malloc((size_t)n_ctx * sizeof *hist);
    int32_t *blocks = malloc((size_t)per_seq * sizeof *blocks);
    sl_sampler_scratch *scr;
    sl_sampler_scratch_create(V, &scr);
    for (int i = 0; i < per_seq; i++)
        blocks[i] = i;
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    sl_batch_seq s = {.tokens = hist, .n_tokens = n_prompt, .pos = 0, .blocks = blocks, .n_blocks = per_seq};
    sl_backend_forward(be, &s, 1, logits);
    int32_t n = n_prompt, tok;
    double loop_ns = 0;
    for (int g = 0; g < n_gen; g++) {
        uint64_t t0 = now_ns();
        sl_sampler_sample(&sp, logits, V, hist, n, (uint64_t)g, scr, &tok, NULL);
        hist[n++] = tok;
        if (g + 1 == n_gen)
            break;
        s = (sl_batch_seq){.tokens = &hist[n - 1], .n_tokens = 1, .pos = n - 1, .blocks = blocks, .n_blocks = per_seq};
        sl_backend_forward(be, &s, 1, logits);
        if (g > 0)   /* the first iteration pays for warming up */
            loop_ns += (double)(now_ns() - t0);
    }
    double loop_step_ms = loop_ns / (n_gen - 2) / 1e6;

    /* (2) the scheduler at each concurrency */
    printf("model %s, %d threads, prompt %d, %d tokens per request\n", m->name, threads, n_prompt, n_gen);
    printf("dedicated loop (sluice generate): %.3f ms per decode step\n", loop_step_ms);
    double tps1 = 0;
    for (const char *p = conc; *p;) {
        int c = atoi(p);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        sl_sched_request *reqs = calloc((size_t)c, sizeof *reqs);
        for (int i = 0; i < c; i++) {
            reqs[i].id = (uint64_t)i;
            reqs[i].prompt = prompt + (size_t)i * (size_t)n_prompt;
            reqs[i].n_prompt = n_prompt;
            reqs[i].params = sp;
            reqs[i].max_tokens = n_gen;
            reqs[i].ignore_eos = true;
            reqs[i].submit_ns = now_ns();
        }
        bench_io b = {.reqs = reqs, .n = c};
        sl_sched_io io = {.ctx = &b, .poll = b_poll, .emit = b_emit, .finish = b_finish, .cancelled = b_cancelled,
                          .wait = b_wait, .now_ns = b_now, .step_done = b_step_done};
        sl_sched_config cfg;
        sl_sched_config_default(&cfg);
        cfg.max_seqs = max_c > 16 ? max_c : 16;
        cfg.n_kv_blocks = bc.n_kv_blocks;
        if (cfg.token_budget < cfg.max_seqs)
            cfg.token_budget = cfg.max_seqs;
        sl_sched *sc;
        if (sl_sched_create(be, V, n_ctx, NULL, 0, &cfg, &io, &sc, err) < 0) {
            fprintf(stderr, "schedbench: %s\n", err);
            return 1;
        }
        uint64_t t0 = now_ns();
        sl_sched_run(sc, &b.stop);
        double secs = (double)(now_ns() - t0) / 1e9;
        double tps = (double)b.tokens / secs;
        if (c == 1)
            tps1 = tps;
        printf("concurrency %2d: %lld tokens in %.3f s = %.1f tok/s aggregate", c, (long long)b.tokens, secs, tps);
        if (tps1 > 0 && c > 1)
            printf(" (%.2fx of 1)", tps / tps1);
        if (b.batch1_steps > 1)
            printf("; batch-1 step %.3f ms = %.3fx the dedicated loop", b.batch1_ns / (double)b.batch1_steps / 1e6,
                   b.batch1_ns / (double)b.batch1_steps / 1e6 / loop_step_ms);
        printf("\n");
        sl_sched_destroy(sc);
        free(reqs);
    }
    sl_sampler_scratch_destroy(scr);
    free(logits);
    free(hist);
    free(blocks);
    free(prompt);
    sl_backend_destroy(be);
    sl_model_destroy(m);
    return 0;
}
