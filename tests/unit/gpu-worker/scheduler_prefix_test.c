/* tests/unit/gpu-worker/scheduler_prefix_test.c: the scheduler with its
 * prefix cache, against the fake backend (which reads every sequence's
 * history back through its block table, so a wrong shared block changes the
 * tokens). A hit must give exactly the tokens of a cold run, report the
 * block-rounded cached prompt, and hold up under eviction, preemption,
 * parking and a failed step. */
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

static int32_t prompts[12][400];
static int32_t admitted_hit[16];       /* what io.admitted said, by request id; -1: not called */
static bool admitted_before_tokens[16];

static void on_admitted(void *ctx, uint64_t id, int32_t n_cached_tokens)
{
    fake_io *f = ctx;
    cr_assert_lt(id, 16);
    cr_assert_eq(admitted_hit[id], -1, "called once, at the first admission");
    admitted_hit[id] = n_cached_tokens;
    admitted_before_tokens[id] = f->reqs[id].n_tokens == 0;
}

static sl_sched_config config(bool cache)
{
    sl_sched_config c;
    sl_sched_config_default(&c);
    c.max_seqs = 4;
    c.token_budget = 128;
    c.prefill_chunk = 48;   /* not a multiple of the block: hits start mid-chunk */
    c.kv_block_size = BS;
    c.n_kv_blocks = 256;
    c.prefix_cache = cache;
    return c;
}

static fake_req mkreq(const int32_t *prompt, int n_prompt, int max_tokens, uint64_t arrive_ns)
{
    fake_req r;
    memset(&r, 0, sizeof r);
    r.req.prompt = prompt;
    r.req.n_prompt = n_prompt;
    sl_sampling_params_default(&r.req.params);
    r.req.params.temperature = 0.8f;   /* seeded sampling: a wrong history shows at once */
    r.req.params.seed = 11;
    r.req.max_tokens = max_tokens;
    r.arrive_ns = arrive_ns;
    return r;
}

static void h_open(sched_harness *h, fake_req *reqs, int n, const sl_sched_config *cfg, int64_t fail_at)
{
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 400; j++)
            prompts[i][j] = (int32_t)((i * 5 + j * 11 + (j * j) % 7) % N_VOCAB);
    h->io = calloc(1, sizeof *h->io);
    cr_assert_not_null(h->io);
    fake_io_init(h->io, reqs, n);
    cr_assert_eq(fake_backend_init(&h->be, N_VOCAB, cfg->kv_block_size, cfg->n_kv_blocks, cfg->token_budget, N_CTX,
                                   &h->io->clock), SL_OK);
    h->be.cost_token_ns = 10000;
    h->be.fail_at = fail_at;
    sl_sched_io io = fake_io_table(h->io);
    io.admitted = on_admitted;
    for (int i = 0; i < 16; i++)
        admitted_hit[i] = -1;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_sched_create(&h->be.base, N_VOCAB, N_CTX, NULL, 0, cfg, &io, &h->s, err), SL_OK, "%s", err);
}


/* The tokens a request gets alone on a fresh scheduler with the cache off. */
static int cold(const fake_req *proto, int32_t *out)
{
    fake_req r = mkreq(proto->req.prompt, proto->req.n_prompt, proto->req.max_tokens, 0);
    r.req.params = proto->req.params;
    sl_sched_config c = config(false);
    sched_harness h;
    h_open(&h, &r, 1, &c, -1);
    sched_harness_run(&h);
    memcpy(out, r.tokens, (size_t)r.n_tokens * sizeof *out);
    sched_harness_close(&h);
    return r.n_tokens;
}

static void assert_cold(const fake_req *r)
{
    int32_t ref[FAKE_MAX_TOKENS];
    int n = cold(r, ref);
    cr_assert_eq(r->n_tokens, n, "request %llu: %d tokens vs %d cold", (unsigned long long)r->req.id, r->n_tokens, n);
    cr_assert_arr_eq(r->tokens, ref, (size_t)n * sizeof *ref, "request %llu differs from its cold run",
                     (unsigned long long)r->req.id);
}

Test(scheduler_prefix, same_prompt_twice_hits_and_gives_the_cold_tokens)
{
    sl_sched_config c = config(true);
    fake_req r[2] = {mkreq(prompts[0], 150, 20, 0), mkreq(prompts[0], 150, 20, 500 * MS)};
    sched_harness h;
    h_open(&h, r, 2, &c, -1);
    sched_harness_run(&h);
    cr_assert_eq(r[0].t.n_cached_tokens, 0, "cold");
    cr_assert_eq(r[1].t.n_cached_tokens, 144, "all full blocks of the prompt: 149 / 16 blocks");
    cr_assert_eq(r[1].t.n_lookup_tokens, 150);
    cr_assert_eq(admitted_hit[1], 144, "io.admitted says it before any token");
    cr_assert(admitted_before_tokens[1]);
    cr_assert_eq(admitted_hit[0], 0);
    cr_assert_lt(r[1].t.prompt_ms * 5, r[0].t.prompt_ms, "6 tokens prefilled instead of 150");
    cr_assert_eq(r[1].n_tokens, 20);
    cr_assert_arr_eq(r[1].tokens, r[0].tokens, 20 * sizeof(int32_t));
    assert_cold(&r[1]);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert(st.prefix_cache);
    cr_assert_eq(st.prefix.query_tokens, 300);
    cr_assert_eq(st.prefix.hit_tokens, 144);
    cr_assert_geq(st.prefix.n_cached, 10, "prompt and decode blocks of 169 positions");
    cr_assert_eq(st.prefix.n_evictable, st.prefix.n_cached, "nobody holds them now");
    sched_harness_close(&h);
}

/* A second turn resends the first turn's prompt and answer: those are cached
 * (decode blocks too, once full) and only the new tokens are computed. */
Test(scheduler_prefix, multi_turn_computes_only_the_new_tokens)
{
    fake_req first = mkreq(prompts[1], 100, 30, 0);
    int32_t answer[FAKE_MAX_TOKENS];
    int n = cold(&first, answer);
    cr_assert_eq(n, 30);
    static int32_t turn2[200];
    memcpy(turn2, prompts[1], 100 * sizeof *turn2);
    memcpy(turn2 + 100, answer, 30 * sizeof *turn2);
    memcpy(turn2 + 130, prompts[2], 25 * sizeof *turn2);
    sl_sched_config c = config(true);
    fake_req r[2] = {first, mkreq(turn2, 155, 10, 500 * MS)};
    sched_harness h;
    h_open(&h, r, 2, &c, -1);
    sched_harness_run(&h);
    cr_assert_arr_eq(r[0].tokens, answer, 30 * sizeof(int32_t));
    /* turn 1 computed KV for 129 positions (its last token was never fed): 8 full blocks */
    cr_assert_eq(r[1].t.n_cached_tokens, 128);
    assert_cold(&r[1]);
    sched_harness_close(&h);
}

Test(scheduler_prefix, off_finds_nothing_and_reports_zero)
{
    sl_sched_config c = config(false);
    fake_req r[2] = {mkreq(prompts[0], 150, 5, 0), mkreq(prompts[0], 150, 5, 500 * MS)};
    sched_harness h;
    h_open(&h, r, 2, &c, -1);
    sched_harness_run(&h);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(r[i].t.n_cached_tokens, 0);
        cr_assert_eq(r[i].t.n_lookup_tokens, 0);
    }
    cr_assert_arr_eq(r[1].tokens, r[0].tokens, 5 * sizeof(int32_t));
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert(!st.prefix_cache);
    cr_assert_eq(st.prefix.query_tokens, 0);
    cr_assert_eq(st.prefix.n_cached, 0);
    sl_sched_snapshot snap;
    sl_sched_snapshot_fill(h.s, &snap);
    cr_assert_eq(snap.prefix_cache.value, 0);
    sched_harness_close(&h);
}

/* A pool that holds few prompts: cached blocks are evicted to admit new
 * ones (never a live sequence's), and every answer is still the cold one. */
Test(scheduler_prefix, eviction_under_pressure_keeps_answers_cold)
{
    sl_sched_config c = config(true);
    c.n_kv_blocks = 30;
    c.max_seqs = 2;
    fake_req r[12];
    for (int i = 0; i < 12; i++)   /* 10 distinct prompts, then the first two again */
        r[i] = mkreq(prompts[i % 10], 120 + (i % 10), 12, (uint64_t)i * 200 * MS);
    sched_harness h;
    h_open(&h, r, 12, &c, -1);
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_gt(st.prefix.n_evicted, 0, "the pool forced evictions");
    cr_assert_eq(st.n_preemptions, 0, "evictable blocks go before any live sequence");
    for (int i = 0; i < 12; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        assert_cold(&r[i]);
    }
    sched_harness_close(&h);
}

/* Identical prompts side by side in a pool too small for them: preemption,
 * recompute through the cache, parking and dropped parked blocks, all with
 * shared blocks; every answer is the cold one and never re-sent. */
Test(scheduler_prefix, preemption_and_parking_with_shared_blocks)
{
    sl_sched_config c = config(true);
    c.n_kv_blocks = 14;
    fake_req r[5];
    for (int i = 0; i < 5; i++)
        r[i] = mkreq(prompts[3], 90 + (i % 2) * 16, 60, 0);
    r[1].again_at = 4;
    r[1].again_count = 200;   /* parked a long while: its blocks are dropped under pressure */
    r[3].req.params.seed = 99;
    sched_harness h;
    h_open(&h, r, 5, &c, -1);
    sched_harness_run(&h);
    sl_sched_stats st;
    sl_sched_stats_get(h.s, &st);
    cr_assert_gt(st.n_preemptions, 0, "the pool is small enough to preempt");
    cr_assert_gt(st.n_park_drops, 0, "and to drop the parked sequence's blocks");
    cr_assert_gt(st.prefix.hit_tokens, 0, "later sequences and recomputes hit the cache");
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        cr_assert_eq(r[i].t.n_generated, r[i].n_tokens, "never re-sent");
        assert_cold(&r[i]);
    }
    sched_harness_close(&h);
}

/* After a failed step nothing cached before it is trusted. */
Test(scheduler_prefix, step_failure_empties_the_cache)
{
    sl_sched_config c = config(true);
    fake_req r[3] = {mkreq(prompts[4], 100, 10, 0), mkreq(prompts[4], 100, 30, 300 * MS),
                     mkreq(prompts[4], 100, 10, 600 * MS)};
    sched_harness h;
    h_open(&h, r, 3, &c, 14);   /* r[0] takes 3 prefill steps and 9 decodes; r[1] fails mid-decode */
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_LENGTH);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_ERROR);
    cr_assert_eq(r[1].t.n_cached_tokens, 96, "it hit before the failure");
    cr_assert_eq(r[2].t.n_cached_tokens, 0, "the failure emptied the cache");
    assert_cold(&r[2]);
    sched_harness_close(&h);
}
