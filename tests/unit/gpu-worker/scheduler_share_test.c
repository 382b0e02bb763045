/* tests/unit/gpu-worker/scheduler_share_test.c: requests whose prompts
 * share blocks with a prefill still in flight wait for its blocks instead of
 * computing them again (docs/SCHEDULER.md §5a, "Sharing an in-flight
 * prompt"), against the fake backend, which counts the prompt tokens it is
 * fed and reads every history back through the block tables (a wrong
 * shared block changes the tokens). Every step is checked, the planned
 * batch too (invariant 12, through step_begin). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "fake_io.h"
#include "gpu-worker/scheduler.h"
#include "sched_harness.h"

#define N_VOCAB 64
#define N_CTX 1024
#define MS 1000000ull
#define BS 16

static int32_t prompts[6][400];
static sched_harness *current;   /* for the step_begin hook */
static int64_t n_planned_checks;

static void on_step_begin(void *ctx, int32_t n_seqs, int32_t n_tokens)
{
    (void)ctx;
    (void)n_seqs;
    (void)n_tokens;
    cr_assert(sl_sched_check(current->s), "the planned batch breaks an invariant");
    n_planned_checks++;
}

static sl_sched_config config(bool cache)
{
    sl_sched_config c;
    sl_sched_config_default(&c);
    c.max_seqs = 4;
    c.token_budget = 128;
    c.prefill_chunk = 48;   /* not a multiple of the block */
    c.kv_block_size = BS;
    c.n_kv_blocks = 256;
    c.prefix_cache = cache;
    return c;
}

static fake_req mkreq(const int32_t *prompt, int n_prompt, int max_tokens, uint64_t arrive_ns, uint64_t seed)
{
    fake_req r;
    memset(&r, 0, sizeof r);
    r.req.prompt = prompt;
    r.req.n_prompt = n_prompt;
    sl_sampling_params_default(&r.req.params);
    r.req.params.temperature = 0.8f;
    r.req.params.seed = seed;
    r.req.max_tokens = max_tokens;
    r.arrive_ns = arrive_ns;
    return r;
}

static void fill_prompts(void)
{
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 400; j++)
            prompts[i][j] = (int32_t)((i * 5 + j * 11 + (j * j) % 7) % N_VOCAB);
}

static void h_open(sched_harness *h, fake_req *reqs, int n, const sl_sched_config *cfg)
{
    fill_prompts();
    h->io = calloc(1, sizeof *h->io);
    cr_assert_not_null(h->io);
    fake_io_init(h->io, reqs, n);
    cr_assert_eq(fake_backend_init(&h->be, N_VOCAB, cfg->kv_block_size, cfg->n_kv_blocks, cfg->token_budget, N_CTX,
                                   &h->io->clock), SL_OK);
    h->be.cost_token_ns = 10000;
    sl_sched_io io = fake_io_table(h->io);
    io.step_begin = on_step_begin;
    current = h;
    n_planned_checks = 0;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_sched_create(&h->be.base, N_VOCAB, N_CTX, NULL, 0, cfg, &io, &h->s, err), SL_OK, "%s", err);
}

/* The tokens a request gets alone on a fresh scheduler with the cache off. */
static void assert_cold(const fake_req *r)
{
    fake_req solo = mkreq(r->req.prompt, r->req.n_prompt, r->req.max_tokens, 0, 0);
    solo.req.params = r->req.params;
    sl_sched_config c = config(false);
    sched_harness h;
    h_open(&h, &solo, 1, &c);
    sched_harness_run(&h);
    cr_assert_eq(r->n_tokens, solo.n_tokens, "request %llu: %d tokens vs %d cold", (unsigned long long)r->req.id,
                 r->n_tokens, solo.n_tokens);
    cr_assert_arr_eq(r->tokens, solo.tokens, (size_t)solo.n_tokens * sizeof(int32_t),
                     "request %llu differs from its cold run", (unsigned long long)r->req.id);
    sched_harness_close(&h);
}

static sl_sched_stats last_stats(const sched_harness *h)
{
    sl_sched_stats st;
    sl_sched_stats_get(h->s, &st);
    return st;
}

/* n > 1 choices, or many clients with one system prompt: polled in one step,
 * the first prefills the prompt and the others map its blocks. */
Test(scheduler_share, identical_prompts_polled_together_prefill_the_shared_blocks_once)
{
    sl_sched_config c = config(true);
    fake_req r[4];
    for (int i = 0; i < 4; i++)
        r[i] = mkreq(prompts[0], 150, 20, 0, 11 + (uint64_t)i);
    sched_harness h;
    h_open(&h, r, 4, &c);
    sched_harness_run(&h);
    cr_assert_eq(h.be.prompt_tokens, 150 + 3 * 6, "the leader computes 150, each follower the 6 past 9 blocks");
    cr_assert_eq(r[0].t.n_cached_tokens, 0);
    for (int i = 1; i < 4; i++) {
        cr_assert_eq(r[i].t.n_cached_tokens, 144, "request %d maps the leader's 9 full blocks", i);
        cr_assert_gt(r[i].t.queue_ms, r[0].t.queue_ms, "the wait is queueing time");
    }
    sl_sched_stats st = last_stats(&h);
    cr_assert_eq(st.n_deferrals, 3);
    cr_assert_eq(st.n_deferred, 0);
    cr_assert_eq(st.n_preemptions, 0);
    cr_assert_gt(n_planned_checks, 0);
    cr_assert_eq(h.io->stats[0].step_seqs, 1, "the first step prefills the leader alone");
    cr_assert_eq(h.io->stats[0].n_deferred, 3);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        assert_cold(&r[i]);
    }
    sched_harness_close(&h);
}

Test(scheduler_share, no_deferral_with_the_cache_off)
{
    sl_sched_config c = config(false);
    fake_req r[4];
    for (int i = 0; i < 4; i++)
        r[i] = mkreq(prompts[0], 150, 20, 0, 11 + (uint64_t)i);
    sched_harness h;
    h_open(&h, r, 4, &c);
    sched_harness_run(&h);
    cr_assert_eq(h.be.prompt_tokens, 4 * 150, "nothing is shared");
    cr_assert_eq(h.io->stats[0].in_flight, 4, "all four admitted in the first step");
    cr_assert_eq(last_stats(&h).n_deferrals, 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(r[i].t.n_cached_tokens, 0);
    sched_harness_close(&h);
}

/* Waiting for blocks is not waiting for room: a request behind a deferred
 * one, with nothing to share, is admitted past it. */
Test(scheduler_share, requests_behind_a_deferred_one_are_admitted)
{
    sl_sched_config c = config(true);
    fake_req r[3] = {mkreq(prompts[0], 150, 10, 0, 1), mkreq(prompts[0], 150, 10, 0, 2),
                     mkreq(prompts[1], 150, 10, 0, 3)};
    sched_harness h;
    h_open(&h, r, 3, &c);
    sched_harness_run(&h);
    cr_assert_eq(h.io->stats[0].in_flight, 2, "the leader and the distinct prompt");
    cr_assert_eq(h.io->stats[0].n_deferred, 1);
    cr_assert_lt(r[2].t.queue_ms, r[1].t.queue_ms, "the third overtook the deferred second");
    cr_assert_eq(r[1].t.n_cached_tokens, 144);
    cr_assert_eq(r[2].t.n_cached_tokens, 0);
    cr_assert_eq(h.be.prompt_tokens, 150 + 6 + 150);
    for (int i = 0; i < 3; i++)
        assert_cold(&r[i]);
    sched_harness_close(&h);
}

/* A follower whose prompt leaves the leader's after 100 tokens waits for the
 * 6 blocks they share, not for the whole prefill, and computes the rest. */
Test(scheduler_share, a_longer_prompt_waits_for_the_shared_blocks_only)
{
    static int32_t mixed[300];
    fill_prompts();
    memcpy(mixed, prompts[0], 100 * sizeof *mixed);
    memcpy(mixed + 100, prompts[2] + 100, 200 * sizeof *mixed);
    sl_sched_config c = config(true);
    fake_req r[2] = {mkreq(prompts[0], 300, 10, 0, 1), mkreq(mixed, 300, 10, 0, 2)};
    sched_harness h;
    h_open(&h, r, 2, &c);
    sched_harness_run(&h);
    cr_assert_eq(r[1].t.n_cached_tokens, 96);
    cr_assert_eq(h.be.prompt_tokens, 300 + 300 - 96);
    cr_assert_lt(r[1].t.queue_ms, r[0].t.prompt_ms, "admitted while the leader still prefills");
    assert_cold(&r[1]);
    sched_harness_close(&h);
}

/* A leader cancelled mid-prefill defers nobody: the first follower maps what
 * it computed and becomes the leader of the others. */
Test(scheduler_share, a_cancelled_leader_releases_its_followers)
{
    sl_sched_config c = config(true);
    fake_req r[3];
    for (int i = 0; i < 3; i++)
        r[i] = mkreq(prompts[3], 300, 12, 0, 5 + (uint64_t)i);
    r[0].cancel_at_ns = 3 * MS + 1200000;   /* window 3 ms, then steps of 48 tokens, 0.48 ms each: its third */
    sched_harness h;
    h_open(&h, r, 3, &c);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert_eq(r[1].t.n_cached_tokens, 144, "r[0] computed 3 chunks of 48 before the cancel");
    cr_assert_eq(r[2].t.n_cached_tokens, 288, "r[2] waited for r[1]");
    cr_assert_eq(h.be.prompt_tokens, 144 + (300 - 144) + 12);
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        assert_cold(&r[i]);
    }
    sched_harness_close(&h);
}

/* A leader preempted mid-prefill (a decoding sequence needs its blocks)
 * goes back to the head of the waiting list: it defers nobody there, and
 * when it is admitted again its followers wait for it once more. */
Test(scheduler_share, a_preempted_leader_releases_its_followers)
{
    sl_sched_config c = config(true);
    c.prefill_chunk = 4;   /* a long prefill: the decode runs out of blocks while it lasts */
    c.n_kv_blocks = 24;
    uint64_t t = 250000;   /* the decode has started (5 chunks of 4 at 40 us) */
    fake_req r[4] = {mkreq(prompts[4], 20, 100, 0, 1), mkreq(prompts[5], 300, 8, t, 2),
                     mkreq(prompts[5], 300, 8, t, 3), mkreq(prompts[5], 300, 8, t, 4)};
    sched_harness h;
    h_open(&h, r, 4, &c);
    sched_harness_run(&h);
    sl_sched_stats st = last_stats(&h);
    cr_assert_gt(st.n_preemptions, 0);
    cr_assert_gt(r[1].t.n_preempted, 0, "the leader was the newest live sequence");
    cr_assert_eq(r[2].t.n_preempted, 0);
    for (uint64_t i = 1; i < h.io->steps && i < FAKE_MAX_STEPS; i++)
        if (h.io->stats[i].n_preemptions > h.io->stats[i - 1].n_preemptions)
            cr_assert_eq(h.io->stats[i].n_deferred, 0, "step %llu: nobody waits on a preempted leader",
                         (unsigned long long)i);
    for (int i = 2; i < 4; i++)
        cr_assert_eq(r[i].t.n_cached_tokens, 288, "request %d mapped the leader's blocks", i);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        assert_cold(&r[i]);
    }
    sched_harness_close(&h);
}

/* Staggered prefill admits one sequence per step; a deferred request is not
 * an admission, so the next one is admitted in its step. */
Test(scheduler_share, staggered_prefill_still_admits_one_per_step)
{
    sl_sched_config c = config(true);
    c.staggered_prefill = true;
    fake_req r[4] = {mkreq(prompts[0], 150, 10, 0, 1), mkreq(prompts[0], 150, 10, 0, 2),
                     mkreq(prompts[1], 150, 10, 0, 3), mkreq(prompts[2], 150, 10, 0, 4)};
    sched_harness h;
    h_open(&h, r, 4, &c);
    sched_harness_run(&h);
    cr_assert_eq(h.io->stats[0].in_flight, 1);
    cr_assert_eq(h.io->stats[1].in_flight, 2, "the distinct prompt goes past the deferred one");
    cr_assert_eq(h.io->stats[1].n_deferred, 1);
    for (uint64_t i = 1; i < h.io->steps && i < FAKE_MAX_STEPS; i++)
        cr_assert_leq(h.io->stats[i].in_flight - h.io->stats[i - 1].in_flight, 1, "step %llu admitted two",
                      (unsigned long long)i);
    cr_assert_lt(r[2].t.queue_ms, r[1].t.queue_ms);
    cr_assert_lt(r[3].t.queue_ms, r[1].t.queue_ms);
    cr_assert_eq(r[1].t.n_cached_tokens, 144);
    for (int i = 0; i < 4; i++)
        assert_cold(&r[i]);
    sched_harness_close(&h);
}

/* Random arrivals of prompts built from three shared prefixes and private
 * tails, cancels, a pool small enough to preempt, with and without
 * staggered prefill: every invariant after every step, every request ends,
 * and every one that was not cancelled has its cold run's tokens. */
Test(scheduler_share, random_loads_over_shared_prefixes_match_cold_runs)
{
    enum { N = 20 };
    static int32_t texts[N][400];
    uint64_t deferrals = 0, preemptions = 0, hits = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        fill_prompts();
        uint64_t x = seed * 0x9e3779b97f4a7c15ull;
#define RND(n) ((x = x * 6364136223846793005ull + 1442695040888963407ull), (int)((x >> 33) % (uint64_t)(n)))
        sl_sched_config c = config(true);
        c.n_kv_blocks = 24;
        c.prefill_chunk = 8 + RND(40);
        c.staggered_prefill = seed % 2 == 0;
        fake_req r[N];
        uint64_t t = 0;
        for (int i = 0; i < N; i++) {
            int p = RND(3), n_pre = 20 + RND(180), n_tail = RND(60);
            memcpy(texts[i], prompts[p], (size_t)n_pre * sizeof **texts);
            for (int j = 0; j < n_tail; j++)
                texts[i][n_pre + j] = RND(N_VOCAB);
            t += (uint64_t)RND(3) * 300000;   /* often together, sometimes apart */
            r[i] = mkreq(texts[i], n_pre + n_tail, 4 + RND(30), t, seed * 100 + (uint64_t)i);
            if (RND(8) == 0)
                r[i].cancel_at_ns = t + (uint64_t)RND(4) * 500000 + 1;
        }
#undef RND
        sched_harness h;
        h_open(&h, r, N, &c);
        sched_harness_run(&h);
        sl_sched_stats st = last_stats(&h);
        deferrals += st.n_deferrals;
        preemptions += st.n_preemptions;
        hits += st.prefix.hit_tokens;
        for (int i = 0; i < N; i++) {
            if (r[i].reason == SL_SCHED_FINISH_CANCELLED)
                continue;
            cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH, "seed %llu request %d: %s", (unsigned long long)seed, i,
                         r[i].error);
            assert_cold(&r[i]);
        }
        sched_harness_close(&h);
    }
    cr_assert_gt(deferrals, 0, "requests waited for leaders");
    cr_assert_gt(preemptions, 0, "the pool preempted");
    cr_assert_gt(hits, 0);
}

/* TTFT_TRACE writes one `deferred` line per follower, between `queued` and
 * `admitted`; the leader has none. */
Test(scheduler_share, a_deferral_is_traced_once)
{
    FILE *tr = tmpfile();
    cr_assert_not_null(tr);
    sl_sched_config c = config(true);
    c.ttft_trace = true;
    c.trace = tr;
    fake_req r[3];
    for (int i = 0; i < 3; i++)
        r[i] = mkreq(prompts[0], 150, 4, 0, 1 + (uint64_t)i);
    sched_harness h;
    h_open(&h, r, 3, &c);
    sched_harness_run(&h);
    sched_harness_close(&h);
    rewind(tr);
    char line[256];
    int deferred[3] = {0}, admitted_after[3] = {0};
    while (fgets(line, sizeof line, tr)) {
        unsigned id;
        char stage[64];
        if (sscanf(line, "TTFT_TRACE id=%u stage=%63s", &id, stage) != 2 || id >= 3)
            continue;
        if (!strcmp(stage, "deferred"))
            deferred[id]++;
        if (!strcmp(stage, "admitted") && deferred[id])
            admitted_after[id] = 1;
    }
    fclose(tr);
    cr_assert_eq(deferred[0], 0);
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(deferred[i], 1, "request %d: one deferred line", i);
        cr_assert(admitted_after[i], "request %d: admitted after it", i);
    }
}
