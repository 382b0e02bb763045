/* tests/unit/gpu-worker/scheduler_test.c: gpu-worker/scheduler.c against a
 * deterministic fake backend (logits = hash of the history read back through
 * the block table, cost proportional to tokens on a fake clock) and a
 * scripted fake io. "Alone" references run the same request through a fresh
 * scheduler with nothing else in it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "fake_io.h"
#include "gpu-worker/scheduler.h"
#include "sched_harness.h"

#define N_VOCAB 64
#define N_CTX 4096
#define MS 1000000ull
#define US 1000ull

typedef struct {
    uint64_t cost_token_ns, cost_fixed_ns;
    int64_t fail_at;
    const int32_t *eog;
    int32_t n_eog;
    bool device_sampling;     /* the backend draws tokens (forward_sample) */
} knobs;

static int32_t prompts[17][2100];
static int32_t long_prompt[N_CTX];

static void fill_prompts(void)
{
    for (int i = 0; i < 17; i++)
        for (int j = 0; j < 2100; j++)
            prompts[i][j] = (int32_t)((i * 7 + j * 13 + (j * j) % 5) % N_VOCAB);
    for (int j = 0; j < N_CTX; j++)
        long_prompt[j] = (int32_t)((j * 31 + 5) % N_VOCAB);
}

static sl_sched_config test_config(void)
{
    sl_sched_config c;
    sl_sched_config_default(&c);
    c.max_seqs = 8;
    c.token_budget = 256;
    c.prefill_chunk = 64;
    c.kv_block_size = 16;
    c.n_kv_blocks = 1024;
    return c;
}

static fake_req mkreq(int prompt_idx, int n_prompt, int max_tokens, uint64_t arrive_ns)
{
    fake_req r;
    memset(&r, 0, sizeof r);
    r.req.prompt = prompts[prompt_idx];
    r.req.n_prompt = n_prompt;
    sl_sampling_params_default(&r.req.params);
    r.req.params.temperature = 0;
    r.req.max_tokens = max_tokens;
    r.arrive_ns = arrive_ns;
    return r;
}

static void h_open(sched_harness *h, fake_req *reqs, int n, const sl_sched_config *cfg, const knobs *k)
{
    fill_prompts();
    h->io = calloc(1, sizeof *h->io);
    cr_assert_not_null(h->io);
    fake_io_init(h->io, reqs, n);
    cr_assert_eq(fake_backend_init(&h->be, N_VOCAB, cfg->kv_block_size, cfg->n_kv_blocks, cfg->token_budget, N_CTX,
                                   &h->io->clock), SL_OK);
    h->be.cost_token_ns = k && k->cost_token_ns ? k->cost_token_ns : 10 * US;
    h->be.cost_fixed_ns = k ? k->cost_fixed_ns : 0;
    h->be.fail_at = k && k->fail_at ? k->fail_at : -1;
    if (k && k->device_sampling)
        cr_assert_eq(fake_backend_sample_on_device(&h->be), SL_OK);
    sl_sched_io io = fake_io_table(h->io);
    char err[SL_ERR_LEN];
    sl_status rc = sl_sched_create(&h->be.base, N_VOCAB, N_CTX, k ? k->eog : NULL, k ? k->n_eog : 0, cfg, &io,
                                   &h->s, err);
    cr_assert_eq(rc, SL_OK, "create: %s", err);
}


/* Runs one request alone on a fresh scheduler; returns its tokens. */
static int alone(const fake_req *proto, const sl_sched_config *cfg, int32_t *out)
{
    fake_req r = *proto;
    r.arrive_ns = 0;
    r.cancel_after = 0;
    r.again_count = 0;
    r.fail_emit_at = 0;
    r.n_tokens = 0;
    r.cancel = r.finished = r.polled = r.rec_missing = false;
    sched_harness h;
    h_open(&h, &r, 1, cfg, NULL);
    sched_harness_run(&h);
    memcpy(out, r.tokens, (size_t)r.n_tokens * sizeof *out);
    sched_harness_close(&h);
    return r.n_tokens;
}

static void assert_same_as_alone(const fake_req *r, const sl_sched_config *cfg)
{
    int32_t ref[FAKE_MAX_TOKENS];
    int n = alone(r, cfg, ref);
    cr_assert_eq(r->n_tokens, n, "request %llu: %d tokens vs %d alone", (unsigned long long)r->req.id,
                 r->n_tokens, n);
    cr_assert_arr_eq(r->tokens, ref, (size_t)n * sizeof *ref, "request %llu differs from its solo run",
                     (unsigned long long)r->req.id);
}

/* ------------------------------------------------------------------------ */
/* the batch window                                                          */

Test(scheduler, window_adaptive_alone_never_waits)
{
    sl_sched_config c = test_config();
    fake_req r[1] = {mkreq(0, 10, 5, 7 * MS)};
    sched_harness h;
    h_open(&h, r, 1, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[0].t.queue_ms, 0.0);
    cr_assert_eq(r[0].n_tokens, 5);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_LENGTH);
    sched_harness_close(&h);
}

Test(scheduler, window_adaptive_waits_3ms_when_arrivals_find_peers)
{
    sl_sched_config c = test_config();
    fake_req r[3] = {mkreq(0, 10, 5, 0), mkreq(1, 10, 5, 0), mkreq(2, 10, 5, 1 * MS)};
    sched_harness h;
    h_open(&h, r, 3, &c, NULL);
    sched_harness_run(&h);
    cr_assert_float_eq(r[0].t.queue_ms, 3.0, 1e-9);
    cr_assert_float_eq(r[1].t.queue_ms, 3.0, 1e-9);
    cr_assert_float_eq(r[2].t.queue_ms, 2.0, 1e-9, "the straggler joins the first step");
    cr_assert_eq(h.io->stats[0].step_seqs, 3);
    sched_harness_close(&h);
}

Test(scheduler, window_adaptive_no_wait_when_batch_full)
{
    sl_sched_config c = test_config();
    c.max_seqs = 2;
    fake_req r[2] = {mkreq(0, 10, 5, 0), mkreq(1, 10, 5, 0)};
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[0].t.queue_ms, 0.0);
    cr_assert_eq(r[1].t.queue_ms, 0.0);
    sched_harness_close(&h);
}

Test(scheduler, window_adaptive_waits_2ms_alone_after_concurrent_round)
{
    sl_sched_config c = test_config();
    fake_req r[3] = {mkreq(0, 10, 5, 0), mkreq(1, 10, 5, 0), mkreq(2, 10, 5, 1000 * MS)};
    sched_harness h;
    h_open(&h, r, 3, &c, NULL);
    sched_harness_run(&h);
    cr_assert_float_eq(r[2].t.queue_ms, 2.0, 1e-9);
    sched_harness_close(&h);
}

Test(scheduler, window_fixed_waits_deadline_or_full)
{
    sl_sched_config c = test_config();
    c.window_ms = 5;
    c.max_seqs = 3;
    fake_req r[4] = {mkreq(0, 10, 5, 0), mkreq(1, 10, 5, 1000 * MS), mkreq(2, 10, 5, 1001 * MS),
                     mkreq(3, 10, 5, 1002 * MS)};
    sched_harness h;
    h_open(&h, r, 4, &c, NULL);
    sched_harness_run(&h);
    cr_assert_float_eq(r[0].t.queue_ms, 5.0, 1e-9, "alone: waits the whole window");
    cr_assert_float_eq(r[1].t.queue_ms, 2.0, 1e-9, "full batch at 1002 ms: goes at once");
    cr_assert_float_eq(r[2].t.queue_ms, 1.0, 1e-9);
    cr_assert_float_eq(r[3].t.queue_ms, 0.0, 1e-9);
    sched_harness_close(&h);
}

/* ------------------------------------------------------------------------ */
/* admission, joins, recycling                                               */

Test(scheduler, staggered_prefill_starts_one_sequence_per_step)
{
    sl_sched_config c = test_config();
    c.staggered_prefill = true;
    c.max_seqs = 2;   /* the two first arrive together and fill the batch: no window */
    fake_req r[2] = {mkreq(0, 40, 5, 0), mkreq(1, 40, 5, 0)};
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(h.io->stats[0].step_seqs, 1, "one prefill starts in the first step");
    cr_assert_eq(h.io->stats[1].step_seqs, 2, "the second starts next step");
    cr_assert_eq(r[0].t.queue_ms, 0.0);
    cr_assert_float_eq(r[1].t.queue_ms, 0.4, 1e-9, "one 40-token step of 10 us/token later");
    assert_same_as_alone(&r[0], &c);
    assert_same_as_alone(&r[1], &c);
    sched_harness_close(&h);
}

Test(scheduler, join_while_one_runs_gets_first_token_within_two_steps)
{
    sl_sched_config c = test_config();
    fake_req r[2] = {mkreq(0, 20, 100, 0), mkreq(1, 20, 10, 0)};
    r[1].arrive_ns = 20 * 10 * US + 40 * 10 * US + 5 * US;   /* mid decode of A */
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    uint64_t started_after = 0;
    for (uint64_t i = 0; i < h.io->steps; i++) {
        uint64_t start = h.io->step_end_ns[i] - h.io->stats[i].step_ns;
        if (start >= r[1].arrive_ns && h.io->step_end_ns[i] <= r[1].token_ns[0])
            started_after++;
    }
    cr_assert_leq(started_after, 2, "B's first token took %llu steps", (unsigned long long)started_after);
    cr_assert_eq(r[0].n_tokens, 100);
    cr_assert_eq(r[1].n_tokens, 10);
    assert_same_as_alone(&r[0], &c);
    assert_same_as_alone(&r[1], &c);
    sched_harness_close(&h);
}

Test(scheduler, finished_slots_are_recycled)
{
    sl_sched_config c = test_config();
    c.max_seqs = 2;
    c.token_budget = 64;
    fake_req r[6];
    for (int i = 0; i < 6; i++)
        r[i] = mkreq(i, 10 + i, 3 + 2 * i, (uint64_t)i * 50 * US);
    sched_harness h;
    h_open(&h, r, 6, &c, NULL);
    sched_harness_run(&h);
    for (uint64_t i = 0; i < h.io->steps; i++)
        cr_assert_leq(h.io->stats[i].in_flight, 2);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_eq(st.peak_in_flight, 2);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(r[i].n_tokens, 3 + 2 * i);
        assert_same_as_alone(&r[i], &c);
    }
    sched_harness_close(&h);
}

Test(scheduler, cancel_frees_blocks_within_one_step)
{
    sl_sched_config c = test_config();
    fake_req r[2] = {mkreq(0, 40, 200, 0), mkreq(1, 40, 50, 0)};
    r[0].cancel_after = 5;
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert_eq(r[0].n_tokens, 5);
    cr_assert_eq(r[0].finish_step, r[0].cancel_step + 1, "finished before another forward ran");
    /* the step after the cancel carries only the survivor, and its blocks alone are held */
    sl_sched_stats *after = &h.io->stats[r[0].cancel_step + 1];
    cr_assert_eq(after->in_flight, 1);
    cr_assert_eq(after->kv_blocks_total - after->kv_blocks_free, 3, "ceil(45 / 16) for the survivor");
    cr_assert_eq(r[1].n_tokens, 50);
    assert_same_as_alone(&r[1], &c);
    sched_harness_close(&h);
}

Test(scheduler, cancel_while_waiting)
{
    sl_sched_config c = test_config();
    c.max_seqs = 1;
    fake_req r[2] = {mkreq(0, 10, 20, 0), mkreq(1, 10, 20, 0)};
    r[1].cancel = true;
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert_eq(r[1].n_tokens, 0);
    cr_assert_eq(r[0].n_tokens, 20);
    sched_harness_close(&h);
}

/* ------------------------------------------------------------------------ */
/* error scope                                                               */

Test(scheduler, bad_request_fails_alone_with_a_reason)
{
    sl_sched_config c = test_config();
    fake_req r[6] = {mkreq(0, 10, 8, 0), mkreq(1, 10, 8, 0), mkreq(2, 10, 8, 0), mkreq(3, 1, 200, 0),
                     mkreq(4, 10, 8, 0), mkreq(5, 10, 8, 0)};
    r[1].req.params.temperature = -1;
    static int32_t bad_prompt[3] = {1, 99, 2};
    r[2].req.prompt = bad_prompt;
    r[2].req.n_prompt = 3;
    r[3].req.prompt = long_prompt;
    r[3].req.n_prompt = 4000;
    r[4].req.min_tokens = 9;
    r[5].fail_emit_at = 3;
    sched_harness h;
    h_open(&h, r, 6, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strstr(r[1].error, "temperature"), "%s", r[1].error);
    cr_assert_eq(r[2].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strstr(r[2].error, "outside the vocabulary"), "%s", r[2].error);
    cr_assert_eq(r[3].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strstr(r[3].error, "exceeds the context"), "%s", r[3].error);
    cr_assert_eq(r[4].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strstr(r[4].error, "min_tokens"), "%s", r[4].error);
    cr_assert_eq(r[5].reason, SL_SCHED_FINISH_ERROR, "its emit failed");
    cr_assert_eq(r[5].n_tokens, 2);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_LENGTH);
    cr_assert_eq(r[0].n_tokens, 8);
    assert_same_as_alone(&r[0], &c);
    sched_harness_close(&h);
}

Test(scheduler, request_larger_than_the_kv_pool_is_refused)
{
    sl_sched_config c = test_config();
    c.n_kv_blocks = 4;
    fake_req r[2] = {mkreq(0, 60, 10, 0), mkreq(1, 10, 10, 0)};
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strstr(r[0].error, "KV blocks"), "%s", r[0].error);
    cr_assert_eq(r[1].n_tokens, 10);
    sched_harness_close(&h);
}

Test(scheduler, step_failure_fails_all_then_next_requests_match_a_fresh_worker)
{
    sl_sched_config c = test_config();
    c.max_seqs = 3;
    fake_req r[7] = {mkreq(0, 30, 40, 0), mkreq(1, 50, 40, 0), mkreq(2, 70, 40, 0), mkreq(3, 20, 40, 0),
                     mkreq(4, 33, 30, 100 * MS), mkreq(5, 47, 30, 100 * MS), mkreq(6, 90, 30, 100 * MS)};
    knobs k = {.fail_at = 5};
    sched_harness h;
    h_open(&h, r, 7, &c, &k);
    sched_harness_run(&h);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_ERROR, "request %d: live or waiting when the step failed", i);
        cr_assert(strstr(r[i].error, "backend"), "%s", r[i].error);
    }
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_eq(st.n_step_failures, 1);
    /* the three later requests as a fresh worker would run them, together */
    fake_req fresh[3] = {r[4], r[5], r[6]};
    for (int i = 0; i < 3; i++) {
        fresh[i].arrive_ns = 0;
        fresh[i].n_tokens = 0;
    }
    sched_harness h2;
    h_open(&h2, fresh, 3, &c, NULL);
    sched_harness_run(&h2);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[4 + i].reason, SL_SCHED_FINISH_LENGTH);
        cr_assert_eq(r[4 + i].n_tokens, fresh[i].n_tokens);
        cr_assert_arr_eq(r[4 + i].tokens, fresh[i].tokens, (size_t)fresh[i].n_tokens * sizeof(int32_t));
    }
    sched_harness_close(&h2);
    sched_harness_close(&h);
}

/* ------------------------------------------------------------------------ */
/* preemption, paused emits                                                  */

Test(scheduler, preemption_and_recompute_give_the_uninterrupted_tokens)
{
    sl_sched_config c = test_config();
    c.n_kv_blocks = 12;   /* 192 positions for 4 sequences that grow to 90 each */
    fake_req r[4];
    for (int i = 0; i < 4; i++)
        r[i] = mkreq(i, 30 + 5 * i, 60 - 5 * i, 0);
    r[3].req.params.temperature = 0.9f;   /* seeded sampling resumes at the same draw */
    r[3].req.params.seed = 42;
    r[3].req.params.repetition_penalty = 1.3f;
    sched_harness h;
    h_open(&h, r, 4, &c, NULL);
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_gt(st.n_preemptions, 0, "the pool is small enough to force preemption");
    sl_sched_config big = test_config();
    int preempted = 0;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        cr_assert_eq(r[i].t.n_generated, r[i].n_tokens, "never re-sent");
        preempted += r[i].t.n_preempted;
        assert_same_as_alone(&r[i], &big);
    }
    cr_assert_eq((uint64_t)preempted, st.n_preemptions);
    sched_harness_close(&h);
}

Test(scheduler, full_consumer_pauses_without_losing_or_repeating_tokens)
{
    sl_sched_config c = test_config();
    c.n_kv_blocks = 12;
    fake_req r[3] = {mkreq(0, 30, 60, 0), mkreq(1, 40, 60, 0), mkreq(2, 50, 60, 0)};
    r[0].again_at = 3;
    r[0].again_count = 7;
    r[2].again_at = 10;
    r[2].again_count = 40;
    sched_harness h;
    h_open(&h, r, 3, &c, NULL);
    sched_harness_run(&h);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].n_tokens, 60);
        assert_same_as_alone(&r[i], &c);
    }
    sched_harness_close(&h);
}

/* A consumer that stops reading parks its sequence: the batch slot goes to
 * the next request at once, and the parked one resumes where it left. */
Test(scheduler, parked_sequence_gives_its_batch_slot_to_a_waiting_one)
{
    sl_sched_config c = test_config();
    c.max_seqs = 2;
    c.token_budget = 64;
    fake_req r[3] = {mkreq(0, 20, 40, 0), mkreq(1, 20, 200, 0), mkreq(2, 20, 10, 0)};
    r[0].again_at = 3;
    r[0].again_count = 400;   /* full for 400 retries: longer than r[2] needs in all */
    sched_harness h;
    h_open(&h, r, 3, &c, NULL);
    sched_harness_run(&h);
    cr_assert_lt(r[2].finish_ns, r[1].finish_ns, "the short one ran beside r[1], in r[0]'s slot");
    cr_assert_lt(r[2].finish_ns, r[0].finish_ns, "and finished while r[0] was parked");
    bool saw_parked = false;
    for (uint64_t i = 0; i < h.io->steps && i < FAKE_MAX_STEPS; i++) {
        cr_assert_leq(h.io->stats[i].in_flight, 2);
        if (h.io->stats[i].n_parked == 1 && h.io->stats[i].in_flight == 2)
            saw_parked = true;
    }
    cr_assert(saw_parked, "two ran while the third was parked");
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_eq(st.n_parkings, 1);
    cr_assert_eq(st.n_parked, 0);
    sl_sched_config big = test_config();
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        assert_same_as_alone(&r[i], &big);
    }
    sched_harness_close(&h);
}

/* Under pool pressure the parked sequence's blocks go first (before any
 * live sequence is preempted); it recomputes on return and its tokens are
 * those of an uninterrupted run. */
Test(scheduler, parked_blocks_are_dropped_under_pressure_and_recomputed)
{
    sl_sched_config c = test_config();
    c.max_seqs = 2;
    c.token_budget = 64;
    c.n_kv_blocks = 8;   /* r[0] parked at 33 positions holds 3 blocks; r[1] and r[2] need 5 + 3 */
    fake_req r[3] = {mkreq(0, 30, 40, 0), mkreq(1, 30, 40, 0), mkreq(2, 20, 20, 0)};
    r[0].again_at = 3;
    r[0].again_count = 300;   /* back after r[1] and r[2] are done */
    r[0].req.params.temperature = 0.9f;   /* seeded: recompute resumes at the same draw */
    r[0].req.params.seed = 7;
    sched_harness h;
    h_open(&h, r, 3, &c, NULL);
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_geq(st.n_park_drops, 1, "the parked blocks were taken");
    cr_assert_eq(st.n_preemptions, 0, "no live sequence was preempted while parked blocks existed");
    sl_sched_config big = test_config();
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        cr_assert_eq(r[i].t.n_generated, r[i].n_tokens, "never re-sent");
        assert_same_as_alone(&r[i], &big);
    }
    sched_harness_close(&h);
}

/* A parked sequence whose consumer drained rejoins ahead of every waiting
 * request, even when it must wait for a batch slot to do so. */
Test(scheduler, returning_sequence_rejoins_ahead_of_waiting_ones)
{
    sl_sched_config c = test_config();
    c.max_seqs = 1;
    c.token_budget = 64;
    fake_req r[3] = {mkreq(0, 20, 30, 0), mkreq(1, 20, 60, 1 * MS), mkreq(2, 20, 30, 2 * MS)};
    r[0].again_at = 2;
    r[0].again_count = 5;   /* drained long before r[1] ends: waits for the slot, then goes first */
    sched_harness h;
    h_open(&h, r, 3, &c, NULL);
    sched_harness_run(&h);
    cr_assert(r[1].token_ns[0] < r[0].finish_ns, "r[1] took the slot while r[0] was parked");
    cr_assert(r[0].finish_ns < r[2].token_ns[0], "r[0] went back ahead of r[2], which waited longer");
    for (int i = 0; i < 3; i++)
        assert_same_as_alone(&r[i], &c);
    sched_harness_close(&h);
}

/* Cancels and whole-step failures reach parked sequences as well. */
Test(scheduler, parked_sequence_is_cancelled_and_failed_like_a_live_one)
{
    sl_sched_config c = test_config();
    fake_req r[2] = {mkreq(0, 20, 100, 0), mkreq(1, 20, 400, 0)};
    r[0].again_at = 4;
    r[0].again_count = 1000000;   /* never drains */
    r[0].cancel_at_ns = 5 * MS;   /* parked by ~3.5 ms (after the 3 ms window); r[1] ends ~7.5 ms */
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert_eq(r[0].n_tokens, 4, "%d tokens, reason %d, finish %llu", r[0].n_tokens, r[0].reason, (unsigned long long)r[0].finish_ns);
    cr_assert_lt(r[0].finish_ns, r[1].finish_ns, "cancelled while parked, r[1] still running");
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_eq(st.n_parkings, 1);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_LENGTH);
    sched_harness_close(&h);

    fake_req f[2] = {mkreq(0, 20, 100, 0), mkreq(1, 20, 100, 0)};
    f[0].again_at = 2;
    f[0].again_count = 1000000;
    knobs k = {.fail_at = 10};
    h_open(&h, f, 2, &c, &k);
    sched_harness_run(&h);
    cr_assert_eq(f[0].reason, SL_SCHED_FINISH_ERROR, "parked at the failed step: failed too");
    cr_assert_eq(f[1].reason, SL_SCHED_FINISH_ERROR);
    sched_harness_close(&h);
}

/* ------------------------------------------------------------------------ */
/* chunked prefill, in-flight, timings                                       */

Test(scheduler, long_prompt_never_stretches_a_decode_step_past_the_budget)
{
    sl_sched_config c = test_config();
    c.token_budget = 64;
    c.prefill_chunk = 64;
    fake_req r[5];
    for (int i = 0; i < 4; i++)
        r[i] = mkreq(i, 8, 120, 0);
    r[4] = mkreq(16, 2000, 4, 2 * MS);
    knobs k = {.cost_token_ns = 10 * US};
    sched_harness h;
    h_open(&h, r, 5, &c, &k);
    sched_harness_run(&h);
    uint64_t budget_step = 64 * 10 * US;
    for (uint64_t i = 0; i < h.io->steps; i++) {
        cr_assert_leq(h.io->stats[i].step_tokens, 64);
        cr_assert_leq(h.io->stats[i].step_ns, budget_step);
    }
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(r[i].n_tokens, 120);
        for (int j = 1; j < 120; j++)
            cr_assert_leq(r[i].token_ns[j] - r[i].token_ns[j - 1], budget_step, "stream %d token %d", i, j);
    }
    cr_assert_eq(r[4].n_tokens, 4);
    cr_assert_gt(r[4].t.prompt_ms, 0.0);
    assert_same_as_alone(&r[4], &c);
    sched_harness_close(&h);
}

Test(scheduler, in_flight_and_peak_match_what_ran)
{
    sl_sched_config c = test_config();
    fake_req r[5];
    for (int i = 0; i < 5; i++)
        r[i] = mkreq(i, 5, 10 + 10 * i, (uint64_t)i * 30 * US);
    sched_harness h;
    h_open(&h, r, 5, &c, NULL);
    sched_harness_run(&h);
    int32_t peak = 0;
    for (uint64_t i = 0; i < h.io->steps; i++) {
        sl_sched_stats *s = &h.io->stats[i];
        cr_assert_eq(s->in_flight, s->step_seqs, "step %llu: every live sequence ran", (unsigned long long)i);
        if (s->in_flight > peak)
            peak = s->in_flight;
        cr_assert_eq(s->peak_in_flight, peak);
    }
    cr_assert_eq(peak, 5);
    sl_sched_snapshot snap;
    sl_sched_snapshot_fill(h.s, &snap);
    cr_assert_eq(snap.peak_in_flight, 5);
    cr_assert_eq(snap.in_flight_now, h.io->stats[h.io->steps - 1].in_flight);
    sched_harness_close(&h);
}

Test(scheduler, each_request_reports_its_own_counts_and_timings)
{
    sl_sched_config c = test_config();
    fake_req r[4];
    for (int i = 0; i < 4; i++)
        r[i] = mkreq(i, 20 + 30 * i, 5 + 7 * i, (uint64_t)i * 400 * US);
    sched_harness h;
    h_open(&h, r, 4, &c, NULL);
    sched_harness_run(&h);
    for (int i = 0; i < 4; i++) {
        fake_req *q = &r[i];
        cr_assert_eq(q->t.n_generated, 5 + 7 * i);
        cr_assert_eq(q->t.n_prompt_tokens, 20 + 30 * i);
        double predicted = (double)(q->token_ns[q->n_tokens - 1] - q->token_ns[0]) / 1e6;
        cr_assert_float_eq(q->t.predicted_ms, predicted, 1e-9);
        cr_assert_geq(q->t.queue_ms, 0.0);
        /* first token time = submission + queue + wait for step start + prompt */
        cr_assert_geq((double)(q->token_ns[0] - q->arrive_ns) / 1e6 + 1e-9, q->t.queue_ms + q->t.prompt_ms);
        cr_assert_gt(q->t.prompt_ms, 0.0);
    }
    sched_harness_close(&h);
}

/* ------------------------------------------------------------------------ */
/* stops, logprobs, sampling                                                 */

Test(scheduler, stops_eog_min_tokens_ignore_eos_and_length)
{
    sl_sched_config c = test_config();
    int32_t ref[FAKE_MAX_TOKENS];
    fill_prompts();
    fake_req p = mkreq(0, 10, 30, 0);
    int n = alone(&p, &c, ref);
    cr_assert_eq(n, 30);
    int32_t eog[1] = {ref[4]};
    int first = 0;
    while (ref[first] != eog[0])
        first++;   /* first == the first time ref[4]'s token appears */
    knobs k = {.eog = eog, .n_eog = 1};
    fake_req r[3] = {p, p, p};
    r[1].req.min_tokens = first + 2;
    r[2].req.ignore_eos = true;
    sched_harness h;
    h_open(&h, r, 3, &c, &k);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_STOP);
    cr_assert_eq(r[0].n_tokens, first + 1, "stops on the EOG token, which is sent");
    cr_assert_arr_eq(r[0].tokens, ref, (size_t)(first + 1) * sizeof *ref);
    cr_assert_geq(r[1].n_tokens, first + 2);
    for (int j = 0; j < first + 2 && j < r[1].n_tokens; j++)
        cr_assert(r[1].tokens[j] != eog[0], "EOG banned before min_tokens");
    cr_assert_eq(r[2].reason, SL_SCHED_FINISH_LENGTH);
    cr_assert_arr_eq(r[2].tokens, ref, 30 * sizeof *ref);
    sched_harness_close(&h);
}

Test(scheduler, context_length_stops_with_length)
{
    sl_sched_config c = test_config();
    fake_req r[1] = {mkreq(0, N_CTX - 5, 5, 0)};
    /* prompt + max_tokens == n_ctx exactly: allowed, ends by length */
    c.token_budget = 256;
    sched_harness h;
    r[0].req.prompt = long_prompt;
    h_open(&h, r, 1, &c, NULL);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_LENGTH);
    cr_assert_eq(r[0].n_tokens, 5);
    sched_harness_close(&h);
}

Test(scheduler, logprobs_ride_with_every_token)
{
    sl_sched_config c = test_config();
    fake_req r[2] = {mkreq(0, 10, 12, 0), mkreq(1, 12, 12, 0)};
    r[0].req.params.n_logprobs = 3;
    r[1].req.params.n_logprobs = 0;
    r[1].req.params.temperature = 1.0f;
    r[1].req.params.seed = 9;
    sched_harness h;
    h_open(&h, r, 2, &c, NULL);
    sched_harness_run(&h);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(r[i].n_tokens, 12);
        cr_assert_not(r[i].rec_missing);
    }
    sched_harness_close(&h);
}

Test(scheduler, seeded_sampled_requests_match_their_solo_runs)
{
    sl_sched_config c = test_config();
    fake_req r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = mkreq(i, 5 + 11 * i, 10 + 3 * i, (uint64_t)i * 170 * US);
        r[i].req.params.temperature = 0.8f;
        r[i].req.params.top_k = 20;
        r[i].req.params.top_p = 0.9f;
        r[i].req.params.seed = 1000 + (uint64_t)i;
        r[i].req.params.presence_penalty = 0.5f;
    }
    sched_harness h;
    h_open(&h, r, 8, &c, NULL);
    sched_harness_run(&h);
    for (int i = 0; i < 8; i++)
        assert_same_as_alone(&r[i], &c);
    sched_harness_close(&h);
}

/* A backend with its own forward_sample (drawing as a device would) and
 * one with the interface's default (forward, then the reference sampler on
 * the host) get the same requests from the scheduler: the same tokens, stops
 * and records for every kind of request, preemption included. */
Test(scheduler, device_sampling_matches_host_sampling)
{
    sl_sched_config c = test_config();
    c.n_kv_blocks = 14;   /* small enough to preempt */
    fill_prompts();
    int32_t eog[2] = {5, 17};
    fake_req proto[6];
    for (int i = 0; i < 6; i++) {
        proto[i] = mkreq(i, 20 + 7 * i, 40, (uint64_t)i * 90 * US);
        sl_sampling_params *p = &proto[i].req.params;
        p->temperature = i == 0 ? 0.0f : 0.7f + 0.1f * (float)i;
        p->seed = 77 + (uint64_t)i;
        p->n_logprobs = i % 3 == 0 ? 4 : -1;
    }
    proto[1].req.params.top_k = 9;
    proto[2].req.params.top_p = 0.8f;
    proto[2].req.params.min_p = 0.05f;
    proto[3].req.params.repetition_penalty = 1.4f;
    proto[3].req.params.frequency_penalty = 0.3f;
    proto[3].req.params.penalty_last_n = -1;
    proto[4].req.params.n_logit_bias = 2;
    proto[4].req.params.logit_bias[0] = (sl_logit_bias){3, 4.0f};
    proto[4].req.params.logit_bias[1] = (sl_logit_bias){3, 1.5f};
    proto[5].req.min_tokens = 30;
    fake_req host[6], dev[6];
    memcpy(host, proto, sizeof proto);
    memcpy(dev, proto, sizeof proto);
    knobs kh = {.eog = eog, .n_eog = 2}, kd = {.eog = eog, .n_eog = 2, .device_sampling = true};
    sched_harness h;
    h_open(&h, host, 6, &c, &kh);
    sched_harness_run(&h);
    sched_harness_close(&h);
    h_open(&h, dev, 6, &c, &kd);
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_gt(st.n_preemptions, 0, "the pool is small enough to force preemption");
    sched_harness_close(&h);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(dev[i].reason, host[i].reason, "request %d", i);
        cr_assert_eq(dev[i].n_tokens, host[i].n_tokens, "request %d", i);
        cr_assert_arr_eq(dev[i].tokens, host[i].tokens, (size_t)host[i].n_tokens * sizeof(int32_t), "request %d", i);
        cr_assert_not(dev[i].rec_missing, "request %d", i);
    }
    for (int j = 0; j < dev[5].n_tokens && j < 30; j++)
        cr_assert(dev[5].tokens[j] != 5 && dev[5].tokens[j] != 17, "EOG held back before min_tokens");
}

/* ------------------------------------------------------------------------ */
/* config and effective-config                                               */

Test(scheduler, create_refuses_bad_config_with_a_reason)
{
    uint64_t clock = 0;
    fake_backend be;
    cr_assert_eq(fake_backend_init(&be, N_VOCAB, 16, 64, 128, N_CTX, &clock), SL_OK);
    fake_io *io = calloc(1, sizeof *io);
    fake_io_init(io, NULL, 0);
    sl_sched_io t = fake_io_table(io);
    char err[SL_ERR_LEN];
    sl_sched *s = (sl_sched *)&clock;
    sl_sched_config c = test_config();
    c.n_kv_blocks = 64;
    c.token_budget = 256;   /* over the backend's 128 */
    cr_assert_eq(sl_sched_create(&be.base, N_VOCAB, N_CTX, NULL, 0, &c, &t, &s, err), SL_EINVAL);
    cr_assert_null(s);
    cr_assert(strstr(err, "max_batch_tokens"), "%s", err);
    c.token_budget = 4;     /* under max_seqs */
    cr_assert_eq(sl_sched_create(&be.base, N_VOCAB, N_CTX, NULL, 0, &c, &t, &s, err), SL_EINVAL);
    c.token_budget = 128;
    c.kv_block_size = 32;
    cr_assert_eq(sl_sched_create(&be.base, N_VOCAB, N_CTX, NULL, 0, &c, &t, &s, err), SL_EINVAL);
    cr_assert(strstr(err, "kv_block_size"), "%s", err);
    c.kv_block_size = 16;
    c.n_kv_blocks = 0;
    cr_assert_eq(sl_sched_create(&be.base, N_VOCAB, N_CTX, NULL, 0, &c, &t, &s, err), SL_EINVAL);
    c.n_kv_blocks = 64;
    t.emit = NULL;
    cr_assert_eq(sl_sched_create(&be.base, N_VOCAB, N_CTX, NULL, 0, &c, &t, &s, err), SL_EINVAL);
    t = fake_io_table(io);
    cr_assert_eq(sl_sched_create(&be.base, N_VOCAB, N_CTX, NULL, 0, &c, &t, &s, err), SL_OK, "%s", err);
    sl_sched_destroy(s);
    fake_backend_fini(&be);
    free(io);
}

Test(scheduler, snapshot_reports_values_and_sources)
{
    sl_sched_config c = test_config();
    c.source.max_seqs = SL_SCHED_SOURCE_SEED_ALIAS;
    c.window_ms = 4;
    c.source.window_ms = SL_SCHED_SOURCE_FLAG;
    c.source.n_kv_blocks = SL_SCHED_SOURCE_ENV;
    c.n_kv_blocks = 6;
    sched_harness h;
    h_open(&h, NULL, 0, &c, NULL);
    sl_sched_snapshot s;
    sl_sched_snapshot_fill(h.s, &s);
    cr_assert_str_eq(s.kind, "continuous");
    cr_assert_str_eq(s.model, "fake-model");
    cr_assert_str_eq(s.backend, "fake");
    cr_assert_eq(s.max_in_flight.value, 8);
    cr_assert_eq(s.max_in_flight.source, SL_SCHED_SOURCE_SEED_ALIAS);
    cr_assert_eq(s.window_ms.value, 4);
    cr_assert_eq(s.window_ms.source, SL_SCHED_SOURCE_FLAG);
    cr_assert_eq(s.token_budget.value, 256);
    cr_assert_eq(s.token_budget.source, SL_SCHED_SOURCE_DEFAULT);
    cr_assert_eq(s.prefill_chunk_size.value, 64);
    cr_assert_eq(s.kv_blocks.source, SL_SCHED_SOURCE_ENV);
    cr_assert_eq(s.slots_admitted, 6, "6 blocks bind before 8 slots");
    cr_assert(strstr(s.admission_ceiling_reason, "kv_blocks"));
    cr_assert_eq(s.queue_capacity, 8);
    cr_assert_eq(s.n_ctx, N_CTX);
    cr_assert_eq(s.kv_bytes, 6ull * 16 * sizeof(int32_t));
    sl_sched_destroy(h.s);
    fake_backend_fini(&h.be);
    free(h.io);
}

Test(scheduler, ttft_trace_writes_each_stage)
{
    sl_sched_config c = test_config();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    c.ttft_trace = true;
    c.trace = f;
    fake_req r[1] = {mkreq(0, 10, 3, 0)};
    sched_harness h;
    h_open(&h, r, 1, &c, NULL);
    sched_harness_run(&h);
    fclose(f);
    cr_assert(strstr(buf, "id=0 stage=queued ms=0.000"), "%s", buf);
    cr_assert(strstr(buf, "id=0 stage=admitted"), "%s", buf);
    cr_assert(strstr(buf, "id=0 stage=first_prefill_chunk"), "%s", buf);
    cr_assert(strstr(buf, "id=0 stage=first_token ms=0.100"), "%s", buf);
    free(buf);
    sched_harness_close(&h);
}

/* ------------------------------------------------------------------------ */
/* paused (admin pause): intake and cancels, no forward                      */

Test(scheduler, paused_step_takes_in_and_cancels_but_never_runs)
{
    sl_sched_config cfg = test_config();   /* max_seqs 8: 16 slots */
    fake_req r[20];
    for (int i = 0; i < 20; i++) {
        r[i] = mkreq(i % 17, 40, 5, 0);
        r[i].req.id = (uint64_t)i;
    }
    sched_harness h;
    h_open(&h, r, 20, &cfg, NULL);
    for (int k = 0; k < 5; k++)
        sl_sched_step_paused(h.s);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    int polled = 0;
    for (int i = 0; i < 20; i++)
        polled += r[i].polled;
    cr_assert_eq(polled, 16, "max_seqs running + max_seqs waiting are taken in");
    cr_assert_eq(st.steps, 0);
    cr_assert_eq(st.in_flight, 0);
    cr_assert_eq(st.n_waiting, 16);
    cr_assert_eq(st.kv_blocks_free, st.kv_blocks_total);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(r[i].n_tokens, 0);
    /* a cancel while paused ends the request and frees its slot for the next */
    r[3].cancel = true;
    sl_sched_step_paused(h.s);
    cr_assert(r[3].finished);
    cr_assert_eq(r[3].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert(r[16].polled);
    cr_assert(sl_sched_check(h.s));
    /* resumed: everything else runs as if nothing happened */
    sched_harness_run(&h);
    assert_same_as_alone(&r[5], &cfg);
    sched_harness_close(&h);
}
