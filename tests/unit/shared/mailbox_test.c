/* tests/unit/shared/mailbox_test.c: the mailbox state machine, submission limits,
 * the prompt arena, token rings, cancellation, stale and out-of-range tickets,
 * the doorbell and eventfd wakeups, in one process. */
#include <criterion/criterion.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shared/shm_layout.h"
#include "shm_testlib.h"

typedef struct {
    char name[64];
    sl_shm_t *m, *fe, *fe1, *w;
} fixture;

static void setup_with(fixture *f, const char *tag, sl_shm_limits l)
{
    char err[SL_ERR_LEN];
    tl_name(f->name, sizeof(f->name), tag);
    f->m = sl_shm_create(f->name, &l, err);
    cr_assert_not_null(f->m, "%s", err);
    f->fe = sl_shm_attach(f->name, SL_SHM_ROLE_FRONTEND, 0, err);
    f->fe1 = sl_shm_attach(f->name, SL_SHM_ROLE_FRONTEND, 1, err);
    f->w = sl_shm_attach(f->name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert(f->fe && f->fe1 && f->w, "%s", err);
}

static sl_shm_limits small_limits(void)
{
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 2;
    l.n_mailboxes = 4;
    l.submit_ring_entries = 2;
    l.token_ring_entries = 4;
    l.prompt_tokens_max = 64;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 8;
    return l;
}

static void teardown(fixture *f)
{
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_shm_check(f->m, 1, err), SL_OK, "%s", err);
    sl_shm_detach(f->fe);
    sl_shm_detach(f->fe1);
    sl_shm_detach(f->w);
    sl_shm_destroy(f->m);
}

static sl_status submit_n(sl_shm_t *fe, uint64_t rid, uint32_t n, sl_shm_ticket *t)
{
    static int32_t prompt[40000];
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = tl_token(rid, i);
    sl_shm_request req;
    memset(&req, 0, sizeof(req));
    sl_sampling_params_default(&req.params);
    req.params.temperature = 0.5f;
    req.max_tokens = 7;
    req.min_tokens = 2;
    req.ignore_eos = 1;
    req.request_id = rid;
    req.prompt = prompt;
    req.n_prompt = n;
    return sl_shm_submit(fe, &req, t);
}

/* The worker observes each gap between consecutive tokens as it pushes them:
 * n tokens make n - 1 observations, the first token none. */
Test(mailbox, push_observes_every_gap_between_tokens)
{
    fixture f;
    setup_with(&f, "itl", small_limits());
    sl_shm_ticket t, wt;
    cr_assert_eq(submit_n(f.fe, 7, 4, &t), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    uint64_t cum[SL_SHM_HISTOGRAM_BUCKETS + 1], sum;
    cr_assert_eq(sl_shm_worker_push(f.w, wt, 1, NULL), SL_OK);
    sl_shm_histogram_read(f.fe, SL_HISTOGRAM_INTER_TOKEN, cum, &sum);
    cr_assert_eq(cum[SL_SHM_HISTOGRAM_BUCKETS], 0, "the first token has no gap before it");
    int32_t toks[4];
    uint32_t n;
    sl_mailbox_state st;
    for (int i = 0; i < 3; i++) {
        struct timespec pause = {0, 2000000};   /* 2 ms: the gap lands in the le=0.0025 bucket or above */
        nanosleep(&pause, NULL);
        cr_assert_eq(sl_shm_worker_push(f.w, wt, 2 + i, NULL), SL_OK);
        cr_assert_eq(sl_shm_read_tokens(f.fe, t, toks, NULL, 4, &n, &st), SL_OK);
    }
    sl_shm_histogram_read(f.fe, SL_HISTOGRAM_INTER_TOKEN, cum, &sum);
    cr_assert_eq(cum[SL_SHM_HISTOGRAM_BUCKETS], 3);
    cr_assert_eq(cum[0], 0, "no gap under 1 ms");
    cr_assert_geq(sum, 3 * 2000000ull);
    sl_shm_result_info res;
    cr_assert_eq(sl_shm_result(f.w, wt, &res), SL_OK);
    cr_assert_leq(sum, res.timings.last_token_ns - res.timings.first_token_ns, "the gaps add up to the decode time");
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_LENGTH, NULL), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    teardown(&f);
}

Test(mailbox, full_lifecycle)
{
    fixture f;
    setup_with(&f, "life", small_limits());
    sl_shm_ticket t, wt;
    cr_assert_eq(submit_n(f.fe, 42, 20, &t), SL_OK);
    sl_shm_result_info res;
    cr_assert_eq(sl_shm_result(f.fe, t, &res), SL_OK);
    cr_assert_eq(res.state, SL_MAILBOX_STATE_SUBMITTED);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_ESTATE, "not while submitted");

    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(wt.index, t.index);
    cr_assert_eq(wt.incarnation, t.incarnation);
    sl_sampling_params p;
    int32_t max_tokens, min_tokens;
    uint32_t ignore_eos, n_prompt;
    uint64_t rid;
    cr_assert_eq(sl_shm_request_get(f.w, wt, &p, &max_tokens, &min_tokens, &ignore_eos, &rid, &n_prompt), SL_OK);
    cr_assert(p.temperature == 0.5f && max_tokens == 7 && min_tokens == 2 && ignore_eos == 1 && rid == 42 &&
              n_prompt == 20);
    cr_assert_eq(sl_shm_result(f.w, wt, &res), SL_OK);
    cr_assert(res.state == SL_MAILBOX_STATE_RUNNING && res.timings.queued_ns > 0 &&
              res.timings.admitted_ns >= res.timings.queued_ns, "the worker sees its queue time");
    int32_t prompt[20];
    cr_assert_eq(sl_shm_prompt_copy(f.w, wt, 0, 20, prompt), SL_OK);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(prompt[i], tl_token(42, i));
    cr_assert_eq(sl_shm_prompt_copy(f.w, wt, 10, 11, prompt), SL_ERANGE);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_ESTATE, "not while running");

    sl_logprob_record rec = {.token = 5, .logprob = -1.5f, .n_top = 1};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sl_shm_worker_push(f.w, wt, 100 + i, &rec), SL_OK);
    cr_assert_eq(sl_shm_worker_push(f.w, wt, 104, &rec), SL_AGAIN, "token ring full");
    cr_assert_eq(sl_shm_worker_ring_space(f.w, wt), 0);
    int32_t toks[8];
    sl_logprob_record recs[8];
    uint32_t n;
    sl_mailbox_state st;
    cr_assert_eq(sl_shm_read_tokens(f.fe, t, toks, recs, 3, &n, &st), SL_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(st, SL_MAILBOX_STATE_RUNNING);
    cr_assert(toks[0] == 100 && toks[2] == 102 && recs[1].logprob == -1.5f);
    cr_assert_eq(sl_shm_worker_push(f.w, wt, 104, NULL), SL_OK);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_LENGTH, NULL), SL_OK);
    cr_assert_eq(sl_shm_worker_push(f.w, wt, 105, NULL), SL_ESTATE, "no token after finish");
    cr_assert_eq(sl_shm_read_tokens(f.fe, t, toks, recs, 8, &n, &st), SL_OK);
    cr_assert_eq(n, 2);
    cr_assert(toks[0] == 103 && toks[1] == 104 && recs[1].logprob == 0.0f);
    cr_assert_eq(st, SL_MAILBOX_STATE_FINISHED);
    cr_assert_eq(sl_shm_result(f.fe, t, &res), SL_OK);
    cr_assert_eq(res.finish_reason, SL_FINISH_REASON_LENGTH);
    cr_assert_eq(res.timings.n_generated, 5);
    cr_assert_eq(res.timings.n_prompt_tokens, 20);
    cr_assert(res.timings.queued_ns <= res.timings.admitted_ns && res.timings.admitted_ns <= res.timings.first_token_ns &&
              res.timings.first_token_ns <= res.timings.last_token_ns && res.timings.queued_ns > 0);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_ESTALE, "twice");
    sl_shm_census_info c;
    sl_shm_census(f.m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_FREE], 4);
    cr_assert_eq(c.blocks_free, 8);
    teardown(&f);
}

Test(mailbox, queue_full_is_again_and_takes_nothing)
{
    fixture f;
    setup_with(&f, "full", small_limits());
    sl_shm_ticket t[4];
    cr_assert_eq(submit_n(f.fe, 1, 1, &t[0]), SL_OK);
    cr_assert_eq(submit_n(f.fe, 2, 1, &t[1]), SL_OK);
    cr_assert_eq(submit_n(f.fe, 3, 1, &t[2]), SL_AGAIN, "ring of 2 is full");
    cr_assert_eq(t[2].index, UINT32_MAX);
    cr_assert_eq(submit_n(f.fe1, 4, 1, &t[2]), SL_OK, "another slot has its own ring");
    cr_assert_eq(submit_n(f.fe1, 5, 1, &t[3]), SL_OK);
    sl_shm_ticket x;
    sl_shm_ticket wt;
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(submit_n(f.fe, 6, 1, &x), SL_AGAIN, "no mailbox left (4 of 4)");
    sl_shm_census_info c;
    sl_shm_census(f.m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_SUBMITTED], 3);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_RUNNING], 1);
    cr_assert_eq(c.blocks_free, 4);
    cr_assert(sl_shm_counter_get(f.m, SL_COUNTER_REQUESTS_REJECTED_FULL) >= 2);
    teardown(&f);
}

Test(mailbox, prompt_arena_exhaustion_is_again)
{
    fixture f;
    setup_with(&f, "arena", small_limits());
    sl_shm_ticket a, b, c;
    cr_assert_eq(submit_n(f.fe, 1, 64, &a), SL_OK);   /* 4 blocks */
    cr_assert_eq(submit_n(f.fe1, 2, 49, &b), SL_OK);  /* 4 blocks: arena of 8 is full */
    sl_shm_ticket wt;
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK); /* frees a ring entry of one slot */
    sl_shm_t *fe = wt.index == a.index ? f.fe : f.fe1;
    cr_assert_eq(submit_n(fe, 3, 1, &c), SL_AGAIN, "no block left");
    sl_shm_census_info cs;
    sl_shm_census(f.m, &cs);
    cr_assert_eq(cs.mailboxes[SL_MAILBOX_STATE_FREE], 2, "the failed claim gave its mailbox back");
    cr_assert_eq(cs.blocks_free, 0);
    cr_assert_eq(submit_n(f.fe, 4, 65, &c), SL_EINVAL, "longer than prompt_tokens_max");
    cr_assert_eq(submit_n(f.fe, 4, 0, &c), SL_EINVAL);
    teardown(&f);
}

Test(mailbox, long_prompt_through_arena)
{
    fixture f;
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 2;
    l.n_mailboxes = 1024;
    setup_with(&f, "long", l);
    sl_shm_ticket t, wt;
    static int32_t prompt[32768];
    cr_assert_eq(submit_n(f.fe, 7, 32768, &t), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(sl_shm_prompt_copy(f.w, wt, 0, 32768, prompt), SL_OK);
    for (int i = 0; i < 32768; i++)
        cr_assert_eq(prompt[i], tl_token(7, (uint32_t)i));
    cr_assert_eq(sl_shm_prompt_copy(f.w, wt, 1000, 300, prompt), SL_OK);
    cr_assert_eq(prompt[0], tl_token(7, 1000));
    cr_assert_eq(prompt[299], tl_token(7, 1299));
    teardown(&f);
}

Test(mailbox, cancel_before_and_after_pop)
{
    fixture f;
    setup_with(&f, "cancel", small_limits());
    sl_shm_ticket a, b, wt;
    cr_assert_eq(submit_n(f.fe, 1, 4, &a), SL_OK);
    cr_assert_eq(submit_n(f.fe, 2, 4, &b), SL_OK);
    cr_assert_eq(sl_shm_cancel(f.fe, a), SL_OK);
    sl_shm_result_info res;
    sl_shm_result(f.fe, a, &res);
    cr_assert_eq(res.state, SL_MAILBOX_STATE_CANCELLED, "never taken: cancelled at once");
    cr_assert_eq(sl_shm_release(f.fe, a), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(wt.index, b.index, "the cancelled entry is skipped");
    cr_assert_eq(sl_shm_counter_get(f.m, SL_COUNTER_STALE_ENTRIES_SKIPPED), 1);
    cr_assert_eq(sl_shm_worker_cancelled(f.w, wt), 0);
    cr_assert_eq(sl_shm_cancel(f.fe, b), SL_OK);
    cr_assert_eq(sl_shm_worker_cancelled(f.w, wt), 1);
    cr_assert_eq(sl_shm_release(f.fe, b), SL_ESTATE, "the worker has not let go");
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_CANCELLED, NULL), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, b), SL_OK);
    teardown(&f);
}

Test(mailbox, stale_and_out_of_range_tickets_rejected)
{
    fixture f;
    sl_shm_limits l = small_limits();
    l.submit_ring_entries = 4;
    setup_with(&f, "stale", l);
    sl_shm_ticket t, wt;
    cr_assert_eq(submit_n(f.fe, 1, 4, &t), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, "done"), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    /* recycle the same mailbox: the pool has 4, claim them all */
    sl_shm_ticket n1;
    int recycled = 0;
    for (int i = 0; i < 2 && !recycled; i++) {
        cr_assert_eq(submit_n(f.fe1, 10 + i, 1, &n1), SL_OK);
        recycled = n1.index == t.index;
    }
    /* whether or not recycled yet, the old ticket is stale */
    cr_assert_eq(sl_shm_worker_push(f.w, wt, 1, NULL), SL_ESTALE);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, NULL), SL_ESTALE);
    int32_t tok[4];
    uint32_t n;
    sl_mailbox_state st;
    cr_assert_eq(sl_shm_read_tokens(f.fe, t, tok, NULL, 4, &n, &st), SL_ESTALE);
    cr_assert_eq(sl_shm_cancel(f.fe, t), SL_ESTALE);
    sl_shm_ticket bad = {.index = 4, .incarnation = 1};
    cr_assert_eq(sl_shm_worker_push(f.w, bad, 1, NULL), SL_ERANGE);
    cr_assert_eq(sl_shm_read_tokens(f.fe, bad, tok, NULL, 4, &n, &st), SL_ERANGE);
    cr_assert_eq(sl_shm_release(f.fe, bad), SL_ERANGE);
    cr_assert_eq(sl_shm_cancel(f.fe, bad), SL_ERANGE);
    cr_assert_eq(sl_shm_prompt_copy(f.w, bad, 0, 1, tok), SL_ERANGE);
    sl_shm_result_info res;
    cr_assert_eq(sl_shm_result(f.fe, bad, &res), SL_ERANGE);
    cr_assert_null(sl_shm_mailbox(f.w, bad));
    cr_assert_eq(sl_shm_worker_finish(f.w, bad, SL_FINISH_REASON_NONE, NULL), SL_EINVAL);
    /* another front end's mailbox is not ours to read */
    sl_shm_ticket other;
    cr_assert_eq(submit_n(f.fe1, 20, 1, &other), SL_OK);
    cr_assert_eq(sl_shm_read_tokens(f.fe, other, tok, NULL, 4, &n, &st), SL_ESTALE);
    /* roles: a worker cannot submit */
    cr_assert_eq(submit_n(f.w, 30, 1, &other), SL_EINVAL);
    teardown(&f);
}

Test(mailbox, corrupted_ring_entry_is_skipped_not_followed)
{
    fixture f;
    setup_with(&f, "corrupt", small_limits());
    sl_shm_ticket t, wt;
    cr_assert_eq(submit_n(f.fe, 1, 4, &t), SL_OK);
    /* overwrite the published entry with an index past the pool */
    sl_header_shm *hdr = *(sl_header_shm **)f.m; /* the handle's first field is the mapping */
    _Atomic uint64_t *ring = (_Atomic uint64_t *)((char *)hdr + hdr->off_ring);
    atomic_store(&ring[0], ((uint64_t)t.incarnation << 32) | 999999u);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_AGAIN);
    cr_assert_eq(sl_shm_counter_get(f.m, SL_COUNTER_STALE_ENTRIES_SKIPPED), 1);
    teardown(&f);
}

/* Found by fuzz_shm: head and tail words 2^64 apart made pop skip "stale"
 * entries for ever. The worker now starts at tail - ring size, and the slot
 * works again after one pop. */
Test(mailbox, corrupted_ring_head_tail_is_bounded)
{
    fixture f;
    setup_with(&f, "headtail", small_limits());
    sl_header_shm *hdr = *(sl_header_shm **)f.m; /* the handle's first field is the mapping */
    sl_slot_shm *slots = (sl_slot_shm *)((char *)hdr + hdr->off_slots);
    atomic_store(&slots[0].head, 3);
    atomic_store(&slots[0].tail, UINT64_MAX - 5);
    sl_shm_ticket t, wt;
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_AGAIN);
    cr_assert_eq(atomic_load(&slots[0].head), UINT64_MAX - 5);
    cr_assert_eq(submit_n(f.fe, 1, 4, &t), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(wt.index, t.index);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, NULL), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    teardown(&f);
}

Test(mailbox, doorbell_wakes_a_sleeping_worker)
{
    fixture f;
    setup_with(&f, "bell", small_limits());
    uint64_t t0 = sl_shm_now_ns();
    cr_assert_eq(sl_shm_worker_wait(f.w, 20000000), SL_AGAIN, "idle: times out");
    uint64_t waited = sl_shm_now_ns() - t0;
    cr_assert(waited >= 20000000 && waited < 2000000000ull, "waited %llu ns", (unsigned long long)waited);
    pid_t pid = fork();
    if (pid == 0) {
        usleep(50000);
        char err[SL_ERR_LEN];
        sl_shm_t *fe = sl_shm_attach(f.name, SL_SHM_ROLE_FRONTEND, 1, err);
        sl_shm_ticket t;
        _exit(fe && submit_n(fe, 9, 3, &t) == SL_OK ? 0 : 1);
    }
    t0 = sl_shm_now_ns();
    sl_status rc = sl_shm_worker_wait(f.w, 10000000000ull);
    uint64_t woke = sl_shm_now_ns() - t0;
    int status;
    waitpid(pid, &status, 0);
    cr_assert_eq(rc, SL_OK);
    cr_assert(woke < 5000000000ull, "woke by the doorbell, not the 10 s timeout");
    sl_shm_ticket wt;
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(sl_shm_worker_wait(f.w, 10000000), SL_AGAIN, "ring empty again: sleeps until the timeout");
    teardown(&f);
}

Test(mailbox, eventfd_written_once_per_step_per_front_end)
{
    fixture f;
    sl_shm_limits l = small_limits();
    l.token_ring_entries = 16;
    setup_with(&f, "efd", l);
    int fds[2] = {eventfd(0, EFD_NONBLOCK), eventfd(0, EFD_NONBLOCK)};
    sl_shm_set_eventfds(f.w, fds, 2);
    sl_shm_ticket a, b, c, w1, w2, w3;
    cr_assert_eq(submit_n(f.fe, 1, 4, &a), SL_OK);
    cr_assert_eq(submit_n(f.fe, 2, 4, &b), SL_OK);
    cr_assert_eq(submit_n(f.fe1, 3, 4, &c), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &w1), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &w2), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &w3), SL_OK);
    sl_shm_ticket ws[3] = {w1, w2, w3};
    for (int k = 0; k < 3; k++)
        if (ws[k].index != c.index)
            for (int i = 0; i < 5; i++)
                sl_shm_worker_push(f.w, ws[k], i, NULL);
    cr_assert_eq(sl_shm_worker_flush_wakeups(f.w), 1, "only front end 0 got tokens");
    uint64_t v = 0;
    cr_assert_eq(read(fds[0], &v, 8), 8);
    cr_assert_eq(v, 1, "one write for 10 tokens over 2 mailboxes");
    cr_assert_eq(read(fds[1], &v, 8), -1);
    cr_assert_eq(sl_shm_worker_flush_wakeups(f.w), 0, "marks cleared");
    sl_shm_set_eventfds(f.m, fds, 2);
    cr_assert_eq(sl_shm_set_eventfds(f.m, fds, 3), SL_ERANGE);
    close(fds[0]);
    close(fds[1]);
    teardown(&f);
}
