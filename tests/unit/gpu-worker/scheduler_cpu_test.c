/* tests/unit/gpu-worker/scheduler_cpu_test.c: the scheduler on the real CPU
 * backend with a model written by mkmodel at test time: 16 concurrent
 * requests of different lengths give exactly the tokens each gives alone
 * (on a dense and on a mixture-of-experts model),
 * greedy and seeded-sampled, whatever the backend's thread count (which
 * also draws the tokens); blocks shared as the prefix cache shares them
 * give a cold prefill's logits bitwise; and requests polled together with
 * one prompt, the followers waiting for the first one's blocks, get a cold
 * run's tokens and logprobs bitwise; an echo request's prompt records are the
 * log-softmax of a direct forward's rows. Skips (with a message) when mkmodel is not
 * built in $SLUICE_BUILD_DIR/tools. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_io.h"
#include "gpu-worker/scheduler.h"
#include "kernels/backend.h"
#include "model/model.h"

#define N_REQ 16
#define N_CTX 256

static char model_path[512];
static char model_dir[256];

#define SHAPE_LLAMA "--preset tiny-llama --n-embd 128 --n-ff 256 --head-dim 32 --n-vocab 512"
/* mixture of experts: 8 experts, top 2; requests of one batch route to different ones */
#define SHAPE_QWEN3MOE "--preset tiny-qwen3moe --n-vocab 512"
/* gemma3 with a 32-position window on its sliding layers: prompts here pass it */
#define SHAPE_GEMMA3_WINDOW "--preset tiny-gemma3 --window 32 --n-vocab 512"

/* Writes a test model of `shape` (mkmodel flags); returns 0 to skip. */
static int make_model_shaped(const char *shape)
{
    const char *bd = getenv("SLUICE_BUILD_DIR");
    char tool[512];
    snprintf(tool, sizeof tool, "%s/tools/mkmodel", bd ? bd : "build");
    if (access(tool, X_OK) != 0)
        return 0;
    snprintf(model_dir, sizeof model_dir, "/tmp/sl_sched_cpu_XXXXXX");
    if (!mkdtemp(model_dir))
        return 0;
    snprintf(model_path, sizeof model_path, "%s/m.gguf", model_dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' %s --n-ctx %d --seed 7 --threads 2 --peak 3", tool, model_path, shape,
             N_CTX);
    return system(cmd) == 0;
}

static int make_model(void)
{
    return make_model_shaped(SHAPE_LLAMA);
}

static void remove_model(void)
{
    unlink(model_path);
    rmdir(model_dir);
}

typedef struct {
    sl_model *m;
    sl_backend *be;
    sl_sched_config cfg;
} engine;

static void engine_open(engine *e, int threads)
{
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_model_load(model_path, &e->m, err), SL_OK, "%s", err);
    sl_sched_config_default(&e->cfg);
    e->cfg.max_seqs = N_REQ;
    e->cfg.token_budget = 64;        /* prefill chunks split differently batched and alone */
    e->cfg.prefill_chunk = 32;
    e->cfg.kv_block_size = 16;
    e->cfg.n_kv_blocks = N_REQ * N_CTX / 16;
    sl_backend_config bc = {.device = "cpu", .n_threads = threads, .kv_block_size = 16,
                            .n_kv_blocks = e->cfg.n_kv_blocks, .max_batch_tokens = 64, .max_ctx = N_CTX,
                            .max_batch_seqs = N_REQ};
    cr_assert_eq(sl_backend_create(e->m, &bc, &e->be, err), SL_OK, "%s", err);
}

static void engine_close(engine *e)
{
    sl_backend_destroy(e->be);
    sl_model_destroy(e->m);
}

static void run(engine *e, fake_req *reqs, int n)
{
    fake_io *io = calloc(1, sizeof *io);
    cr_assert_not_null(io);
    fake_io_init(io, reqs, n);
    sl_sched_io t = fake_io_table(io);
    sl_sched *s;
    char err[SL_ERR_LEN];
    int32_t eog = 2;
    cr_assert_eq(sl_sched_create(e->be, e->m->hp.n_vocab, N_CTX, &eog, 1, &e->cfg, &t, &s, err), SL_OK, "%s", err);
    sl_sched_run(s, &io->stop);
    cr_assert(sl_sched_check(s));
    cr_assert_eq(io->n_finished, n);
    sl_sched_destroy(s);
    free(io);
}

static int32_t prompts[N_REQ][128];

/* The batched run computes and draws on a backend of `threads` threads, the
 * solo runs on one of a single thread: a request's tokens must not depend on
 * either. */
static void batched_equals_alone_shaped(const char *shape, bool sampled, int threads)
{
    if (!make_model_shaped(shape)) {
        cr_skip_test("mkmodel not built in $SLUICE_BUILD_DIR/tools: skipping the CPU backend test");
    }
    engine e;
    engine_open(&e, threads);
    fake_req *reqs = calloc(N_REQ, sizeof *reqs);
    for (int i = 0; i < N_REQ; i++) {
        fake_req *r = &reqs[i];
        int n_prompt = 3 + 5 * i;   /* 3 .. 78 */
        for (int j = 0; j < n_prompt; j++)
            prompts[i][j] = (int32_t)(3 + (i * 37 + j * 11) % 500);
        r->req.prompt = prompts[i];
        r->req.n_prompt = n_prompt;
        sl_sampling_params_default(&r->req.params);
        r->req.params.temperature = sampled ? 0.9f : 0.0f;
        r->req.params.seed = 100 + (uint64_t)i;
        r->req.params.top_k = sampled ? 40 : 0;
        r->req.max_tokens = 4 + 2 * (i % 7);
        r->req.ignore_eos = i % 2 == 0;
        r->arrive_ns = (uint64_t)(i % 4) * 1000;
    }
    run(&e, reqs, N_REQ);
    engine_close(&e);
    engine_open(&e, 1);
    for (int i = 0; i < N_REQ; i++) {
        fake_req solo = reqs[i];
        solo.arrive_ns = 0;
        solo.n_tokens = 0;
        solo.finished = solo.polled = false;
        run(&e, &solo, 1);
        cr_assert_eq(reqs[i].n_tokens, solo.n_tokens, "request %d: %d tokens batched, %d alone", i,
                     reqs[i].n_tokens, solo.n_tokens);
        cr_assert_arr_eq(reqs[i].tokens, solo.tokens, (size_t)solo.n_tokens * sizeof(int32_t),
                         "request %d: batched tokens differ from its solo run", i);
        cr_assert_eq(reqs[i].reason, solo.reason);
    }
    free(reqs);
    engine_close(&e);
    remove_model();
}

static void batched_equals_alone(bool sampled, int threads)
{
    batched_equals_alone_shaped(SHAPE_LLAMA, sampled, threads);
}

Test(scheduler_cpu, sixteen_greedy_requests_on_a_moe_model_match_their_solo_runs)
{
    batched_equals_alone_shaped(SHAPE_QWEN3MOE, false, 2);
}

Test(scheduler_cpu, seeded_sampled_requests_on_a_moe_model_drawn_on_three_threads_match_their_solo_runs)
{
    batched_equals_alone_shaped(SHAPE_QWEN3MOE, true, 3);
}

Test(scheduler_cpu, sixteen_greedy_requests_match_their_solo_runs)
{
    batched_equals_alone(false, 2);
}

Test(scheduler_cpu, sixteen_seeded_sampled_requests_match_their_solo_runs)
{
    batched_equals_alone(true, 2);
}

Test(scheduler_cpu, seeded_sampled_requests_drawn_on_three_threads_match_their_solo_runs)
{
    batched_equals_alone(true, 3);
}

/* Feeds tokens[from, to) into the table's blocks in calls of at most `chunk`
 * tokens (prompt rows), or one token per call as decode does (decode true);
 * returns the last call's last logits row in out. */
static void feed(engine *e, const int32_t *tokens, int from, int to, const int32_t *blocks, int chunk, bool decode,
                 float *out)
{
    for (int pos = from; pos < to;) {
        int n = decode ? 1 : (to - pos < chunk ? to - pos : chunk);
        sl_batch_seq s = {.tokens = tokens + pos, .n_tokens = n, .pos = pos, .blocks = blocks,
                          .n_blocks = (pos + n + 15) / 16, .logits_all = false, .prompt = !decode};
        cr_assert_eq(sl_backend_forward(e->be, &s, 1, out), SL_OK);
        pos += n;
    }
}

/* What the prefix cache relies on: the KV a block holds is bitwise what a
 * cold prefill writes there, whether the block was filled by prompt chunks
 * or by decode steps, so a sequence reading shared blocks and computing only
 * the rest gets exactly the cold run's logits. */
static void cached_blocks_equal_cold(const char *shape)
{
    if (!make_model_shaped(shape)) {
        cr_skip_test("mkmodel not built in $SLUICE_BUILD_DIR/tools: skipping the CPU backend test");
    }
    engine e;
    engine_open(&e, 2);
    int32_t h[160];
    for (int j = 0; j < 160; j++)
        h[j] = (int32_t)(3 + (j * 29 + 7) % 500);
    int32_t a[10], b[10], c[10];
    for (int i = 0; i < 10; i++) {
        a[i] = i;
        b[i] = i < 6 ? a[i] : 20 + i;   /* 6 full blocks of a shared, as a hit maps them */
        c[i] = 40 + i;
    }
    int32_t n_vocab = e.m->hp.n_vocab;
    float *lb = malloc((size_t)n_vocab * sizeof *lb), *lc = malloc((size_t)n_vocab * sizeof *lc);
    cr_assert(lb && lc);
    feed(&e, h, 0, 70, a, 40, false, lb);    /* a's prompt, in chunks of 40 */
    feed(&e, h, 70, 110, a, 1, true, lb);    /* then 40 decode steps: blocks 4 and 5 filled by decode */
    feed(&e, h, 96, 140, b, 64, false, lb);  /* b computes only past the shared blocks */
    feed(&e, h, 0, 140, c, 64, false, lc);   /* c: the same 140 tokens, cold */
    cr_assert_eq(memcmp(lb, lc, (size_t)n_vocab * sizeof *lb), 0, "logits over shared blocks differ from cold");
    free(lb);
    free(lc);
    engine_close(&e);
    remove_model();
}

Test(scheduler_cpu, cached_blocks_hold_what_a_cold_prefill_writes)
{
    cached_blocks_equal_cold(SHAPE_LLAMA);
}

/* Sliding-window layers keep every position's K/V (only the reads are
 * windowed), so a cached block is as good as on a global layer: the 140
 * positions here are past the 32-position window. */
Test(scheduler_cpu, cached_blocks_hold_what_a_cold_prefill_writes_with_a_sliding_window)
{
    cached_blocks_equal_cold(SHAPE_GEMMA3_WINDOW);
}

/* n identical prompts polled in one step (n > 1 choices): the first
 * prefills, the others wait for its blocks and compute only the last
 * partial block; each gets, bitwise, the tokens and logprobs it gets alone
 * with the cache off. */
Test(scheduler_cpu, followers_of_an_in_flight_prompt_match_a_cold_run_bitwise)
{
    if (!make_model()) {
        cr_skip_test("mkmodel not built in $SLUICE_BUILD_DIR/tools: skipping the CPU backend test");
    }
    engine e;
    engine_open(&e, 2);
    enum { N = 4, N_PROMPT = 100 };
    int32_t prompt[N_PROMPT];
    for (int j = 0; j < N_PROMPT; j++)
        prompt[j] = (int32_t)(3 + (j * 53 + 5) % 500);
    fake_req *reqs = calloc(2 * N, sizeof *reqs);
    cr_assert_not_null(reqs);
    for (int i = 0; i < N; i++) {
        fake_req *r = &reqs[i];
        r->req.prompt = prompt;
        r->req.n_prompt = N_PROMPT;
        sl_sampling_params_default(&r->req.params);
        r->req.params.temperature = i == 0 ? 0.0f : 0.9f;
        r->req.params.seed = 40 + (uint64_t)i;
        r->req.params.n_logprobs = 2;
        r->req.max_tokens = 12;
        r->req.ignore_eos = true;
    }
    run(&e, reqs, N);
    for (int i = 1; i < N; i++)
        cr_assert_eq(reqs[i].t.n_cached_tokens, 96, "request %d mapped the first one's 6 blocks", i);
    e.cfg.prefix_cache = false;
    for (int i = 0; i < N; i++) {
        fake_req *solo = &reqs[N + i];
        solo->req = reqs[i].req;
        run(&e, solo, 1);
        cr_assert_eq(reqs[i].n_tokens, solo->n_tokens);
        cr_assert_arr_eq(reqs[i].tokens, solo->tokens, (size_t)solo->n_tokens * sizeof(int32_t),
                         "request %d: tokens differ from its cold run", i);
        cr_assert_eq(memcmp(reqs[i].logprob, solo->logprob, (size_t)solo->n_tokens * sizeof(float)), 0,
                     "request %d: logprobs differ from its cold run", i);
        cr_assert_eq(memcmp(reqs[i].top_logprob, solo->top_logprob, (size_t)solo->n_tokens * sizeof(float)), 0,
                     "request %d: top logprobs differ from its cold run", i);
        cr_assert(!reqs[i].rec_missing);
    }
    free(reqs);
    engine_close(&e);
    remove_model();
}

/* An echo request (the prompt's logprobs first) beside plain ones on the
 * real backend: each record is, bitwise, what sl_backend_logprob_record
 * makes of the row a direct sl_backend_forward (logits_all, other chunks)
 * gives, and within 1e-6 of a float64 log-softmax of it; the generated
 * tokens and logprobs are the plain request's alone, bitwise, and the plain
 * requests beside it get their solo tokens. */
Test(scheduler_cpu, echo_records_are_the_prompt_rows_log_softmax_and_its_tokens_the_plain_ones)
{
    if (!make_model()) {
        cr_skip_test("mkmodel not built in $SLUICE_BUILD_DIR/tools: skipping the CPU backend test");
    }
    engine e;
    engine_open(&e, 2);
    enum { N = 3, N_PROMPT = 70, TOP = 5 };
    static sl_logprob_record recs[FAKE_MAX_TOKENS];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N_PROMPT; j++)
            prompts[i][j] = (int32_t)(3 + (i * 41 + j * 17 + (j * j) % 13) % 500);
    fake_req *reqs = calloc(2 * N, sizeof *reqs);
    cr_assert_not_null(reqs);
    for (int i = 0; i < N; i++) {
        fake_req *r = &reqs[i];
        r->req.prompt = prompts[i];
        r->req.n_prompt = N_PROMPT - 10 * i;
        sl_sampling_params_default(&r->req.params);
        r->req.params.temperature = 0.9f;
        r->req.params.seed = 70 + (uint64_t)i;
        r->req.params.n_logprobs = TOP;
        r->req.max_tokens = 8;
        r->req.ignore_eos = true;
    }
    reqs[0].req.echo_logprobs = true;
    reqs[0].records = recs;
    run(&e, reqs, N);
    cr_assert_eq(reqs[0].n_tokens, N_PROMPT - 1 + 8);
    cr_assert(!reqs[0].rec_missing);

    int32_t V = e.m->hp.n_vocab, blocks[N_CTX / 16];
    for (int i = 0; i < N_CTX / 16; i++)
        blocks[i] = i;
    float *rows = malloc((size_t)N_PROMPT * (size_t)V * sizeof *rows);
    cr_assert_not_null(rows);
    for (int pos = 0; pos < N_PROMPT;) {
        int n = N_PROMPT - pos < 64 ? N_PROMPT - pos : 64;
        sl_batch_seq s = {.tokens = prompts[0] + pos, .n_tokens = n, .pos = pos, .blocks = blocks,
                          .n_blocks = (pos + n + 15) / 16, .logits_all = true, .prompt = true};
        cr_assert_eq(sl_backend_forward(e.be, &s, 1, rows + (size_t)pos * (size_t)V), SL_OK);
        pos += n;
    }
    for (int i = 0; i + 1 < N_PROMPT; i++) {
        const sl_logprob_record *got = &recs[i];
        float *row = rows + (size_t)i * (size_t)V;
        int32_t tok = prompts[0][i + 1];
        cr_assert_eq(reqs[0].tokens[i], tok, "entry %d is prompt token %d", i, i + 1);
        double m = -INFINITY, z = 0;
        for (int32_t v = 0; v < V; v++)
            m = fmax(m, row[v]);
        for (int32_t v = 0; v < V; v++)
            z += exp((double)row[v] - m);
        double want = (double)row[tok] - (m + log(z));
        cr_assert(fabs(got->logprob - want) <= 1e-6 * fmax(1.0, fabs(want)), "entry %d: %.9g vs %.9g", i,
                  got->logprob, want);
        sl_logprob_record ref;
        memset(&ref, 0, sizeof ref);
        cr_assert_eq(sl_backend_logprob_record(row, V, tok, TOP, &ref), SL_OK);
        cr_assert_eq(got->token, ref.token);
        cr_assert_eq(memcmp(&got->logprob, &ref.logprob, sizeof ref.logprob), 0, "entry %d: not bitwise", i);
        cr_assert_eq(got->n_top, TOP);
        cr_assert_eq(memcmp(got->top, ref.top, TOP * sizeof ref.top[0]), 0, "entry %d: top-n differ", i);
        for (int k = 1; k < TOP; k++)
            cr_assert(got->top[k].logprob <= got->top[k - 1].logprob);
    }
    free(rows);

    for (int i = 0; i < N; i++) {
        fake_req *solo = &reqs[N + i];
        solo->req = reqs[i].req;
        solo->req.echo_logprobs = false;
        run(&e, solo, 1);
        int off = i == 0 ? N_PROMPT - 1 : 0;
        cr_assert_eq(reqs[i].n_tokens - off, solo->n_tokens);
        cr_assert_arr_eq(reqs[i].tokens + off, solo->tokens, (size_t)solo->n_tokens * sizeof(int32_t),
                         "request %d: tokens differ from its plain solo run", i);
        cr_assert_eq(memcmp(reqs[i].logprob + off, solo->logprob, (size_t)solo->n_tokens * sizeof(float)), 0,
                     "request %d: logprobs differ from its plain solo run", i);
    }
    free(reqs);
    engine_close(&e);
    remove_model();
}
