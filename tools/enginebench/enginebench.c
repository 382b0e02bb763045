/* tools/enginebench/enginebench.c: engine throughput without any server:
 * prefill and decode tok/s of a model at a given batch size, and the machine's
 * memory read bandwidth (the roofline of memory-bound decode).
 *
 *   enginebench -m MODEL [--batch B] [--prompt N] [--gen G] [--chunk C] [--threads T] [--reps R]
 *               [--device cpu|cuda]
 *   enginebench --membw [--threads T]
 *
 * B sequences each get an N-token prompt of fixed pseudo-random ids; they are
 * prefilled together (at most C tokens per forward call, default 512, which is
 * also the backend's max_batch_tokens), then
 * decoded G steps with one token each per step (greedy, fed back, drawn by
 * sl_backend_forward_sample as in serving: on the device for CUDA, on the
 * compute threads for the CPU). The best of R repetitions is printed, one
 * line per phase. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpu/threadpool.h"
#include "model/model.h"

#define BLOCK SL_KV_BLOCK_TOKENS
#define PREFILL_CHUNK 512   /* default --chunk */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- memory bandwidth: threads summing disjoint slices of a large array ---- */

typedef struct {
    const double *a;
    int64_t n, per;
    double sums[256];
} sum_job;

static void sum_task(void *ctx, int64_t i, int thread)
{
    (void)thread;
    sum_job *j = ctx;
    int64_t lo = i * j->per, hi = lo + j->per < j->n ? lo + j->per : j->n;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t k = lo; k + 3 < hi; k += 4) {
        s0 += j->a[k];
        s1 += j->a[k + 1];
        s2 += j->a[k + 2];
        s3 += j->a[k + 3];
    }
    j->sums[i] = s0 + s1 + s2 + s3;
}

static int membw(int threads)
{
    int64_t bytes = 1ll << 30, n = bytes / 8;
    double *a = malloc((size_t)bytes);
    if (!a)
        return 1;
    for (int64_t i = 0; i < n; i++)
        a[i] = (double)(i & 1023);
    sl_threadpool *pool;
    sl_threadpool_create(threads, &pool);
    sum_job j = {.a = a, .n = n, .per = (n + threads - 1) / threads};
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t = now_s();
        sl_threadpool_run(pool, sum_task, &j, threads);
        t = now_s() - t;
        best = t < best ? t : best;
    }
    printf("membw: read %.1f GB/s (%d threads, 1 GiB, best of 5)\n", bytes / best / 1e9, threads);
    sl_threadpool_destroy(pool);
    free(a);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *device = "cpu";
    int batch = 1, prompt = 128, gen = 32, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 2, bw = 0;
    int chunk = PREFILL_CHUNK;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--membw")) { bw = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "enginebench: %s needs a value\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "-m")) path = argv[++i];
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunk")) chunk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device")) device = argv[++i];   /* cuda: tools/gpu-bench.sh */
        else { fprintf(stderr, "enginebench: unknown option %s\n", argv[i]); return 2; }
    }
    if (bw)
        return membw(threads);
    if (!path || batch < 1 || batch > 256 || prompt < 1 || gen < 1 || chunk < 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: enginebench -m MODEL [--batch B] [--prompt N] [--gen G] [--chunk C] [--threads T]\n"
                        "                   [--reps R] [--device cpu|cuda]\n"
                        "       enginebench --membw [--threads T]\n");
        return 2;
    }
    char err[SL_ERR_LEN];
    sl_model *m;
    if (sl_model_load(path, &m, err) < 0) {
        fprintf(stderr, "enginebench: %s\n", err);
        return 2;
    }
    int ctx = prompt + gen, per_seq = (ctx + BLOCK - 1) / BLOCK, V = m->hp.n_vocab;
    int max_tokens = batch * prompt < chunk ? batch * prompt : chunk;
    if (max_tokens < batch)
        max_tokens = batch;
    sl_backend_config cfg = {.device = device, .n_threads = threads, .kv_block_size = BLOCK,
                             .n_kv_blocks = (uint32_t)(per_seq * batch), .max_batch_tokens = max_tokens,
                             .max_ctx = ctx, .max_batch_seqs = batch};
    sl_backend *b;
    if (sl_backend_create(m, &cfg, &b, err) < 0) {
        fprintf(stderr, "enginebench: %s\n", err);
        return 1;
    }
    int32_t *tokens = malloc((size_t)batch * ctx * sizeof *tokens);
    int32_t *blocks = malloc((size_t)batch * per_seq * sizeof *blocks);
    float *logits = malloc((size_t)max_tokens * V * sizeof *logits);
    sl_batch_seq *seqs = malloc((size_t)batch * sizeof *seqs);
    /* decode the way the server does: forward_sample, greedy */
    sl_sampling_params greedy;
    sl_sampling_params_default(&greedy);
    greedy.temperature = 0.0f;
    sl_sample_req *reqs = calloc((size_t)batch, sizeof *reqs);
    int32_t *drawn = malloc((size_t)batch * sizeof *drawn);
    if (!tokens || !blocks || !logits || !seqs || !reqs || !drawn) {
        fprintf(stderr, "enginebench: out of memory\n");
        return 1;
    }
    for (int q = 0; q < batch; q++)
        reqs[q] = (sl_sample_req){.params = &greedy, .draw_index = 0};
    for (int i = 0; i < batch * per_seq; i++)
        blocks[i] = i;
    double best_prefill = 1e9, best_decode = 1e9;
    for (int r = 0; r < reps; r++) {
        for (int s = 0; s < batch; s++)
            for (int j = 0; j < prompt; j++)
                tokens[s * ctx + j] = (int32_t)((s * 7919 + j * 104729 + 17) % V);
        double t0 = now_s();
        /* prefill: fill each call with up to max_tokens (--chunk) tokens across sequences */
        int s = 0, done = 0;
        while (s < batch) {
            int nb = 0, budget = max_tokens;
            while (s < batch && budget > 0) {
                int k = prompt - done < budget ? prompt - done : budget;
                seqs[nb++] = (sl_batch_seq){.tokens = tokens + s * ctx + done, .n_tokens = k, .pos = done,
                                            .blocks = blocks + s * per_seq, .n_blocks = per_seq, .prompt = true};
                budget -= k;
                done += k;
                if (done == prompt) {
                    s++;
                    done = 0;
                }
            }
            if (sl_backend_forward(b, seqs, nb, logits) < 0) {
                fprintf(stderr, "enginebench: forward failed\n");
                return 1;
            }
        }
        double t1 = now_s();
        for (int g = 0; g < gen; g++) {
            for (int q = 0; q < batch; q++)
                seqs[q] = (sl_batch_seq){.tokens = tokens + q * ctx + prompt + g, .n_tokens = 1,
                                         .pos = prompt + g, .blocks = blocks + q * per_seq, .n_blocks = per_seq};
            if (g == 0)
                for (int q = 0; q < batch; q++)
                    tokens[q * ctx + prompt] = (int32_t)(q % V);
            if (sl_backend_forward_sample(b, seqs, batch, reqs, drawn) < 0) {
                fprintf(stderr, "enginebench: forward failed\n");
                return 1;
            }
            if (g + 1 < gen)
                for (int q = 0; q < batch; q++)
                    tokens[q * ctx + prompt + g + 1] = drawn[q];
        }
        double t2 = now_s();
        best_prefill = t1 - t0 < best_prefill ? t1 - t0 : best_prefill;
        best_decode = t2 - t1 < best_decode ? t2 - t1 : best_decode;
    }
    double gb = m->weight_bytes / 1e9;
    printf("model: %s, %.2f GB of weights, %d threads, %s, %s\n", m->name, gb, threads,
           sl_backend_describe(b),
           sl_backend_samples(b) ? "tokens drawn by the backend (on the device for cuda)"
                                 : "tokens drawn on the host (the interface's default)");
    printf("prefill: batch %d x %d tokens in calls of up to %d: %.1f tok/s\n", batch, prompt, max_tokens,
           batch * prompt / best_prefill);
    printf("decode: batch %d x %d steps: %.1f tok/s aggregate, %.1f ms/step, %.1f GB/s of weights\n", batch,
           gen, batch * gen / best_decode, best_decode * 1e3 / gen, gb * gen / best_decode);
    free(tokens);
    free(blocks);
    free(logits);
    free(seqs);
    free(reqs);
    free(drawn);
    sl_backend_destroy(b);
    sl_model_destroy(m);
    return 0;
}
