/* tests/unit/gpu-worker/scheduler_echo_test.c: echo requests (the prompt's
 * own logprobs first, docs/SCHEDULER.md §5b) against the fake backend: the
 * records come first, one per prompt token after the first, each the
 * log-softmax of the row a direct sl_backend_forward gives; the generated
 * tokens are the plain request's; a small token ring never overflows;
 * cancel, preemption, the prefix cache, a failed step and bad requests. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "fake_io.h"
#include "gpu-worker/scheduler.h"
#include "sched_harness.h"

#define N_VOCAB 64
#define N_CTX 512
#define MS 1000000ull
#define BS 16

static int32_t prompts[4][300];

static sl_sched_config config(uint32_t n_blocks)
{
    sl_sched_config c;
    sl_sched_config_default(&c);
    c.max_seqs = 4;
    c.token_budget = 64;
    c.prefill_chunk = 24;
    c.kv_block_size = BS;
    c.n_kv_blocks = n_blocks;
    return c;
}

static fake_req mkreq(int p, int n_prompt, int max_tokens, bool echo, uint64_t arrive_ns)
{
    fake_req r;
    memset(&r, 0, sizeof r);
    r.req.prompt = prompts[p];
    r.req.n_prompt = n_prompt;
    sl_sampling_params_default(&r.req.params);
    r.req.params.temperature = 0.8f;
    r.req.params.seed = 5 + (uint64_t)p;
    r.req.params.n_logprobs = 3;
    r.req.max_tokens = max_tokens;
    r.req.ignore_eos = true;
    r.req.echo_logprobs = echo;
    r.arrive_ns = arrive_ns;
    return r;
}

static void h_open(sched_harness *h, fake_req *reqs, int n, const sl_sched_config *cfg, int64_t fail_at)
{
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 300; j++)
            prompts[i][j] = (int32_t)((i * 7 + j * 13 + (j * j) % 5) % N_VOCAB);
    h->io = calloc(1, sizeof *h->io);
    cr_assert_not_null(h->io);
    fake_io_init(h->io, reqs, n);
    cr_assert_eq(fake_backend_init(&h->be, N_VOCAB, BS, cfg->n_kv_blocks, cfg->token_budget, N_CTX, &h->io->clock),
                 SL_OK);
    h->be.cost_token_ns = 10000;
    h->be.fail_at = fail_at;
    sl_sched_io io = fake_io_table(h->io);
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_sched_create(&h->be.base, N_VOCAB, N_CTX, NULL, 0, cfg, &io, &h->s, err), SL_OK, "%s", err);
}

/* Runs reqs to the end on a fresh scheduler. */
static void run(fake_req *reqs, int n, const sl_sched_config *cfg)
{
    sched_harness h;
    h_open(&h, reqs, n, cfg, -1);
    sched_harness_run(&h);
    sched_harness_close(&h);
}

/* The rows a direct forward gives the prompt (a fresh fake, logits_all):
 * rows[i] is position i's, which token i + 1's record reads. */
static float *direct_rows(const int32_t *prompt, int n_prompt)
{
    uint64_t clock = 0;
    fake_backend be;
    cr_assert_eq(fake_backend_init(&be, N_VOCAB, BS, 64, 64, N_CTX, &clock), SL_OK);
    int32_t blocks[64];
    for (int i = 0; i < 64; i++)
        blocks[i] = 63 - i;
    float *rows = malloc((size_t)n_prompt * N_VOCAB * sizeof *rows);
    cr_assert_not_null(rows);
    for (int pos = 0; pos < n_prompt;) {
        int n = n_prompt - pos < 64 ? n_prompt - pos : 64;
        sl_batch_seq s = {.tokens = prompt + pos, .n_tokens = n, .pos = pos, .blocks = blocks,
                          .n_blocks = (pos + n + BS - 1) / BS, .logits_all = true, .prompt = true};
        cr_assert_eq(sl_backend_forward(&be.base, &s, 1, rows + (size_t)pos * N_VOCAB), SL_OK);
        pos += n;
    }
    fake_backend_fini(&be);
    return rows;
}

/* r's first n_prompt - 1 entries are the prompt's tokens 1.. with the
 * log-softmax of the direct rows (float64, 1e-6) and top-n sorted. */
static void assert_records(const fake_req *r)
{
    int n_prompt = r->req.n_prompt;
    cr_assert_geq(r->n_tokens, n_prompt - 1);
    float *rows = direct_rows(r->req.prompt, n_prompt);
    for (int i = 0; i + 1 < n_prompt; i++) {
        const sl_logprob_record *rec = &r->records[i];
        cr_assert_eq(r->tokens[i], r->req.prompt[i + 1], "entry %d is prompt token %d", i, i + 1);
        cr_assert_eq(rec->token, r->req.prompt[i + 1]);
        const float *row = rows + (size_t)i * N_VOCAB;
        double m = -INFINITY, z = 0;
        for (int v = 0; v < N_VOCAB; v++)
            m = fmax(m, row[v]);
        for (int v = 0; v < N_VOCAB; v++)
            z += exp((double)row[v] - m);
        double lz = m + log(z);
        cr_assert(fabs(rec->logprob - ((double)row[rec->token] - lz)) < 1e-6, "entry %d: %g vs %g", i,
                  rec->logprob, (double)row[rec->token] - lz);
        cr_assert_eq(rec->n_top, r->req.params.n_logprobs);
        for (int k = 0; k < rec->n_top; k++) {
            cr_assert(fabs(rec->top[k].logprob - ((double)row[rec->top[k].token] - lz)) < 1e-6);
            if (k > 0)
                cr_assert(rec->top[k].logprob < rec->top[k - 1].logprob ||
                          (rec->top[k].logprob == rec->top[k - 1].logprob && rec->top[k].token > rec->top[k - 1].token));
        }
        for (int v = 0; v < N_VOCAB; v++)   /* nothing left out beats the last one listed */
            if (rec->n_top > 0 && row[v] > row[rec->top[rec->n_top - 1].token]) {
                bool in = false;
                for (int k = 0; k < rec->n_top; k++)
                    in |= rec->top[k].token == v;
                cr_assert(in, "entry %d: token %d belongs in the top-n", i, v);
            }
    }
    free(rows);
}

/* The same request without echo, alone: its tokens. */
static void assert_generated_plain(const fake_req *r)
{
    fake_req p = mkreq(0, r->req.n_prompt, r->req.max_tokens, false, 0);
    p.req = r->req;
    p.req.echo_logprobs = false;
    sl_sched_config c = config(256);
    run(&p, 1, &c);
    int off = r->req.n_prompt - 1;
    cr_assert_eq(r->n_tokens - off, p.n_tokens, "generated %d vs %d plain", r->n_tokens - off, p.n_tokens);
    cr_assert_arr_eq(r->tokens + off, p.tokens, (size_t)p.n_tokens * sizeof *p.tokens);
    cr_assert_eq(memcmp(r->logprob + off, p.logprob, (size_t)p.n_tokens * sizeof *p.logprob), 0);
    cr_assert_eq(r->reason, p.reason);
}

static sl_logprob_record recs[4][FAKE_MAX_TOKENS];

Test(scheduler_echo, records_first_then_the_plain_requests_tokens)
{
    fake_req r = mkreq(0, 90, 7, true, 0);
    r.records = recs[0];
    sl_sched_config c = config(256);
    run(&r, 1, &c);
    cr_assert_eq(r.reason, SL_SCHED_FINISH_LENGTH);
    cr_assert_eq(r.n_tokens, 89 + 7);
    cr_assert_eq(r.n_records, 89 + 7);
    cr_assert(!r.rec_missing);
    cr_assert_eq(r.t.n_prompt_tokens, 90);
    cr_assert_eq(r.t.n_generated, 7, "the records are not generated tokens");
    cr_assert_gt(r.t.prompt_ms, 0.0);
    assert_records(&r);
    assert_generated_plain(&r);
}

Test(scheduler_echo, max_tokens_zero_ends_with_length_after_the_records)
{
    fake_req r[2] = {mkreq(0, 40, 0, true, 0), mkreq(1, 1, 0, true, 0)};
    r[0].records = recs[0];
    sl_sched_config c = config(256);
    run(r, 2, &c);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_LENGTH);
    cr_assert_eq(r[0].n_tokens, 39);
    cr_assert_eq(r[0].t.n_generated, 0);
    cr_assert_eq(r[0].t.n_prompt_tokens, 40);
    cr_assert_gt(r[0].t.prompt_ms, 0.0, "the echo rows are prompt time");
    assert_records(&r[0]);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_LENGTH, "one prompt token: no record, nothing drawn");
    cr_assert_eq(r[1].n_tokens, 0);
}

Test(scheduler_echo, a_ring_of_three_never_overflows)
{
    fake_req r[2] = {mkreq(0, 60, 0, true, 0), mkreq(1, 50, 5, true, 0)};
    r[0].records = recs[0];
    r[1].records = recs[1];
    r[0].ring_cap = r[1].ring_cap = 3;
    sl_sched_config c = config(256);
    run(r, 2, &c);
    cr_assert_eq(r[0].n_full, 0, "no record met a full ring");
    cr_assert_eq(r[0].n_tokens, 59);
    assert_records(&r[0]);
    cr_assert_eq(r[1].n_tokens, 49 + 5);
    assert_records(&r[1]);
    assert_generated_plain(&r[1]);
}

Test(scheduler_echo, beside_normal_requests_theirs_are_unchanged)
{
    fake_req r[4] = {mkreq(1, 70, 9, false, 0), mkreq(0, 100, 6, true, 0), mkreq(2, 33, 12, false, 0),
                     mkreq(3, 80, 3, true, 0)};
    r[1].records = recs[1];
    r[3].records = recs[3];
    r[2].req.params.n_logprobs = -1;
    sl_sched_config c = config(256);
    run(r, 4, &c);
    for (int i = 0; i < 4; i += 2) {
        fake_req solo = mkreq(0, 1, 1, false, 0);
        solo.req = r[i].req;
        run(&solo, 1, &c);
        cr_assert_eq(r[i].n_tokens, solo.n_tokens);
        cr_assert_arr_eq(r[i].tokens, solo.tokens, (size_t)solo.n_tokens * sizeof *solo.tokens, "request %d", i);
    }
    assert_records(&r[1]);
    assert_records(&r[3]);
    assert_generated_plain(&r[1]);
    assert_generated_plain(&r[3]);
}

Test(scheduler_echo, cancel_mid_echo_frees_everything)
{
    fake_req r[2] = {mkreq(0, 120, 4, true, 0), mkreq(1, 20, 4, false, 0)};
    r[0].cancel_after = 10;
    sl_sched_config c = config(256);
    run(r, 2, &c);   /* closing asserts every block is back */
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert_lt(r[0].n_tokens, 119);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_LENGTH);
}

/* A decodes into the blocks the echo request B holds: B is preempted with a
 * few records out, recomputes them (no second emit) and goes on. */
Test(scheduler_echo, preemption_mid_echo_emits_no_duplicates)
{
    fake_req r[2] = {mkreq(1, 60, 60, false, 0), mkreq(0, 64, 4, true, 300000)};
    r[1].records = recs[1];
    r[1].ring_cap = 1;   /* one record a step: still echoing when A needs its fifth block */
    sl_sched_config c = config(9);
    c.prefix_cache = false;
    sched_harness h;
    h_open(&h, r, 2, &c, -1);
    sched_harness_run(&h);
    uint64_t t_preempt = 0;
    for (uint64_t k = 0; k < h.io->steps && !t_preempt; k++)
        if (h.io->stats[k].n_preemptions > 0)
            t_preempt = h.io->step_end_ns[k];
    sched_harness_close(&h);
    cr_assert_geq(r[1].t.n_preempted, 1, "the echo request was preempted");
    cr_assert(r[1].token_ns[0] < t_preempt && r[1].token_ns[62] > t_preempt, "... with some records out, not all");
    cr_assert_eq(r[1].n_tokens, 63 + 4);
    assert_records(&r[1]);
    assert_generated_plain(&r[1]);
}

/* Its prompt never maps cached blocks (every row is computed), but its
 * blocks are inserted: a later plain request with the prompt hits them. */
Test(scheduler_echo, no_cache_hit_for_its_prompt_but_its_blocks_serve_others)
{
    fake_req r[3] = {mkreq(0, 64, 3, false, 0), mkreq(0, 64, 3, true, 100 * MS), mkreq(0, 64, 3, false, 200 * MS)};
    r[1].records = recs[1];
    sl_sched_config c = config(256);
    sched_harness h;
    h_open(&h, r, 3, &c, -1);
    sched_harness_run(&h);
    int64_t fed = h.be.prompt_tokens;
    sched_harness_close(&h);
    cr_assert_eq(r[0].t.n_cached_tokens, 0);
    cr_assert_eq(r[1].t.n_cached_tokens, 0, "an echo request computes its whole prompt");
    cr_assert_eq(r[1].t.n_lookup_tokens, 0);
    cr_assert_eq(r[2].t.n_cached_tokens, 48);
    cr_assert_eq(fed, 64 + 64 + 16, "the echo request fed all 64 prompt positions");
    assert_records(&r[1]);

    fake_req e[2] = {mkreq(0, 64, 0, true, 0), mkreq(0, 64, 3, false, 100 * MS)};
    h_open(&h, e, 2, &c, -1);
    sched_harness_run(&h);
    sched_harness_close(&h);
    cr_assert_eq(e[1].t.n_cached_tokens, 48, "blocks an echo with max_tokens 0 computed are cached too");
}

Test(scheduler_echo, a_failed_echo_call_fails_the_step)
{
    fake_req r[2] = {mkreq(0, 40, 3, true, 0), mkreq(1, 30, 3, false, 0)};
    sl_sched_config c = config(256);
    sched_harness h;
    h_open(&h, r, 2, &c, 0);   /* the first forward call: the step's echo call */
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    sched_harness_close(&h);
    cr_assert_eq(st.n_step_failures, 1);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_ERROR);
        cr_assert_eq(r[i].n_tokens, 0);
    }
}

Test(scheduler_echo, bad_requests_fail_with_a_reason)
{
    fake_req r[4] = {mkreq(0, 10, 2, true, 0), mkreq(0, 10, 0, false, 0), mkreq(0, 10, -1, true, 0),
                     mkreq(0, 1, 3, true, 0)};
    r[0].req.params.n_logprobs = -1;
    sl_sched_config c = config(256);
    run(r, 4, &c);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_ERROR);
    cr_assert_str_eq(r[0].error, "the prompt's logprobs (echo) need logprobs >= 0");
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_ERROR);
    cr_assert_str_eq(r[1].error, "max_tokens must be >= 1");
    cr_assert_eq(r[2].reason, SL_SCHED_FINISH_ERROR);
    cr_assert_str_eq(r[2].error, "max_tokens must be >= 0");
    cr_assert_eq(r[3].reason, SL_SCHED_FINISH_LENGTH, "a one-token prompt has no record, then generates");
    cr_assert_eq(r[3].n_tokens, 3);
    assert_generated_plain(&r[3]);
}

/* An echo request advances at its reader's pace: a plain request with the
 * same prompt never waits for its blocks (no deferral), and runs ahead. */
Test(scheduler_echo, nobody_waits_on_a_slow_echo_prefill)
{
    fake_req r[2] = {mkreq(0, 200, 0, true, 0), mkreq(0, 200, 2, false, 1 * MS)};
    r[0].ring_cap = 1;
    sl_sched_config c = config(256);
    sched_harness h;
    h_open(&h, r, 2, &c, -1);
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    sched_harness_close(&h);
    cr_assert_eq(st.n_deferrals, 0);
    cr_assert_lt(r[1].finish_step, r[0].finish_step);
    cr_assert_eq(r[0].n_full, 0);
    cr_assert_eq(r[0].n_tokens, 199);
}
