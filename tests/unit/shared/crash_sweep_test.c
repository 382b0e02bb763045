/* tests/unit/shared/crash_sweep_test.c: SIGKILL at every numbered crash point.
 * For each point, 20 rounds on one segment: a victim process (a front end or the
 * worker) is armed to kill itself at the point's 1st, 2nd or 3rd hit while it
 * works; the test process plays the master and a surviving front end (and, for
 * front-end points, the worker). After each death the master's recovery runs,
 * the survivors finish their requests (every token checked: in order, once, to
 * the right request), and the segment must be back to full: every mailbox FREE,
 * every prompt block free, every submission ring drained. Prints the kills per
 * point. Needs the crash-point build of the library (build_*.c in this folder). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shm_testlib.h"

#define ROUNDS 20
#define DEADLINE_NS 20000000000ull
#define VICTIM_SLOT 1
#define ORPHAN_SLOT 2

static const struct {
    int point;
    int worker_side;
    const char *name;
} points[] = {
    {SL_CRASH_SUBMIT_CLAIMED, 0, "submit: claimed"},
    {SL_CRASH_SUBMIT_BLOCK_TAKEN, 0, "submit: block taken"},
    {SL_CRASH_SUBMIT_BLOCKS_DONE, 0, "submit: blocks done"},
    {SL_CRASH_SUBMIT_WRITTEN, 0, "submit: request written"},
    {SL_CRASH_SUBMIT_ENTRY, 0, "submit: ring entry written"},
    {SL_CRASH_SUBMIT_STATE, 0, "submit: state SUBMITTED"},
    {SL_CRASH_SUBMIT_PUBLISHED, 0, "submit: tail published"},
    {SL_CRASH_POP_READ, 1, "pop: entry read"},
    {SL_CRASH_POP_TAKEN, 1, "pop: RUNNING, head not moved"},
    {SL_CRASH_PUSH_WRITTEN, 1, "push: token written"},
    {SL_CRASH_PUSH_PUBLISHED, 1, "push: tail published"},
    {SL_CRASH_FINISH_WRITTEN, 1, "finish: result written"},
    {SL_CRASH_FINISH_ORPHAN_BLOCKS, 1, "finish: orphan blocks freed"},
    {SL_CRASH_READ_COPIED, 0, "read: tokens copied"},
    {SL_CRASH_RELEASE_BLOCKS, 0, "release: blocks freed"},
    {SL_CRASH_CANCEL_FLAG, 0, "cancel: flag set"},
};
#define N_POINTS (sizeof(points) / sizeof(points[0]))
_Static_assert(N_POINTS == SL_CRASH_COUNT - 1, "every crash point is swept");

static sl_shm_limits sweep_limits(void)
{
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 3;
    l.n_mailboxes = 8;
    l.submit_ring_entries = 4;
    l.token_ring_entries = 8;
    l.prompt_tokens_max = 64;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 32;
    l.logprobs = 1;
    return l;
}

static int segment_full(sl_shm_t *m, const sl_shm_limits *l)
{
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_shm_check(m, 0, err), SL_OK, "%s", err);
    sl_shm_census_info c;
    sl_shm_census(m, &c);
    if (c.mailboxes[SL_MAILBOX_STATE_FREE] != l->n_mailboxes || c.blocks_free != l->prompt_arena_blocks)
        return 0;
    for (uint32_t s = 0; s < l->n_slots; s++)
        if (c.ring_used[s] != 0)
            return 0;
    return 1;
}

static void client_init(tl_client *c, sl_shm_t *fe, uint64_t rid_base, uint32_t n, uint32_t cancel_every)
{
    memset(c, 0, sizeof(*c));
    c->fe = fe;
    c->rid_base = rid_base;
    c->to_submit = n;
    c->prompt_max = 64;
    c->max_out = 4;
    c->cancel_every = cancel_every;
}

/* A front end that works until its crash point kills it (exit 3 if it never does). */
static void victim_frontend(const char *name, int point, uint32_t nth, uint32_t round)
{
    char err[SL_ERR_LEN];
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, VICTIM_SLOT, err);
    if (fe == NULL)
        _exit(2);
    static tl_client c;
    client_init(&c, fe, 500000 + round * 1000, 900, point == SL_CRASH_CANCEL_FLAG ? 1 : 3);
    sl_shm_crash_arm(point, nth);
    uint64_t deadline = sl_shm_now_ns() + DEADLINE_NS;
    while (!tl_client_done(&c) && sl_shm_now_ns() < deadline)
        if (tl_client_step(&c) == 0)
            usleep(50);
    _exit(c.errors ? 4 : 3);
}

/* The worker, armed; serves until its crash point kills it. */
static void victim_worker(const char *name, int point, uint32_t nth)
{
    char err[SL_ERR_LEN];
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    if (w == NULL)
        _exit(2);
    static tl_worker tw;
    memset(&tw, 0, sizeof(tw));
    tw.w = w;
    tw.per_step = 3;
    sl_shm_crash_arm(point, nth);
    uint64_t deadline = sl_shm_now_ns() + DEADLINE_NS;
    while (sl_shm_now_ns() < deadline)
        if (tl_worker_step(&tw) == 0)
            sl_shm_worker_wait(w, 1000000);
    _exit(3);
}

/* A front end that gets two requests RUNNING and then dies: its mailboxes become
 * orphans, which the worker must free when it lets go. */
static void orphan_maker(const char *name)
{
    char err[SL_ERR_LEN];
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, ORPHAN_SLOT, err);
    if (fe == NULL)
        _exit(2);
    sl_shm_ticket t[2];
    int32_t prompt[64];
    for (int i = 0; i < 64; i++)
        prompt[i] = i;
    sl_shm_request req;
    memset(&req, 0, sizeof(req));
    req.prompt = prompt;
    req.n_prompt = 64;
    for (int k = 0; k < 2; k++)
        if (sl_shm_submit(fe, &req, &t[k]) != SL_OK)
            _exit(5);
    uint64_t deadline = sl_shm_now_ns() + DEADLINE_NS;
    while (sl_shm_now_ns() < deadline) {
        sl_shm_result_info r0, r1;
        sl_shm_result(fe, t[0], &r0);
        sl_shm_result(fe, t[1], &r1);
        if (r0.state == SL_MAILBOX_STATE_RUNNING && r1.state == SL_MAILBOX_STATE_RUNNING)
            kill(getpid(), SIGKILL); /* it never reads: the token rings fill and the requests stay RUNNING */
        usleep(100);
    }
    _exit(6);
}

static int killed(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

/* One round with a front end as the victim. Returns 1 if it died at the point. */
static int round_frontend(const char *name, sl_shm_t *m, sl_shm_t *fe0, const sl_shm_limits *l, int point,
                          uint32_t round)
{
    char err[SL_ERR_LEN];
    pid_t pid = fork();
    if (pid == 0)
        victim_frontend(name, point, 1 + round % 3, round);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(w, "%s", err);
    static tl_worker tw;
    memset(&tw, 0, sizeof(tw));
    tw.w = w;
    tw.per_step = 3;
    static tl_client c0;
    client_init(&c0, fe0, 100000 + round * 1000, 4, 0);
    uint64_t deadline = sl_shm_now_ns() + DEADLINE_NS;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        cr_assert(sl_shm_now_ns() < deadline, "victim never reached point %d", point);
        tl_worker_step(&tw);
        tl_client_step(&c0);
    }
    int ok = killed(status);
    cr_assert(ok, "point %d round %u: victim exited with status %d", point, round, status);
    uint32_t n;
    cr_assert_eq(sl_shm_recover_frontend_death(m, VICTIM_SLOT, &n), SL_OK);
    while (!(tl_client_done(&c0) && tw.n == 0 && segment_full(m, l))) {
        cr_assert(sl_shm_now_ns() < deadline, "point %d round %u: segment not back to full", point, round);
        tl_worker_step(&tw);
        tl_client_step(&c0);
    }
    cr_assert_eq(c0.errors, 0, "survivor: %s", c0.why);
    cr_assert_eq(c0.finished, 4);
    sl_shm_detach(w);
    return ok;
}

/* One round with the worker as the victim. */
static int round_worker(const char *name, sl_shm_t *m, sl_shm_t *fe0, const sl_shm_limits *l, int point,
                        uint32_t round)
{
    char err[SL_ERR_LEN];
    pid_t pid = fork();
    if (pid == 0)
        victim_worker(name, point, point == SL_CRASH_FINISH_ORPHAN_BLOCKS ? 1 : 1 + round % 3);
    if (point == SL_CRASH_FINISH_ORPHAN_BLOCKS) {
        pid_t op = fork();
        if (op == 0)
            orphan_maker(name);
        int st;
        waitpid(op, &st, 0);
        cr_assert(killed(st), "orphan maker status %d", st);
        cr_assert_eq(sl_shm_recover_frontend_death(m, ORPHAN_SLOT, NULL), SL_OK);
    }
    static tl_client c0;
    client_init(&c0, fe0, 200000 + round * 1000, 6, 0);
    uint64_t deadline = sl_shm_now_ns() + DEADLINE_NS;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        cr_assert(sl_shm_now_ns() < deadline, "worker never reached point %d", point);
        if (tl_client_step(&c0) == 0)
            usleep(50);
    }
    int ok = killed(status);
    cr_assert(ok, "point %d round %u: worker exited with status %d", point, round, status);
    uint32_t failed = 0;
    cr_assert_eq(sl_shm_recover_worker_death(m, &failed), SL_OK);
    /* the next worker: in this process */
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(w, "%s", err);
    static tl_worker tw;
    memset(&tw, 0, sizeof(tw));
    tw.w = w;
    tw.per_step = 3;
    while (!(tl_client_done(&c0) && tw.n == 0 && segment_full(m, l))) {
        cr_assert(sl_shm_now_ns() < deadline, "point %d round %u: segment not back to full", point, round);
        tl_worker_step(&tw);
        tl_client_step(&c0);
    }
    cr_assert_eq(c0.errors, 0, "survivor: %s", c0.why);
    cr_assert_eq(c0.finished + c0.failed, 6);
    cr_assert(c0.failed <= failed, "only requests the dead worker held failed (%u > %u)", c0.failed, failed);
    sl_shm_detach(w);
    return ok;
}

Test(crash, sweep_every_point, .timeout = 110)
{
    cr_assert(sl_shm_crash_points_enabled(), "test build without crash points");
    sl_shm_limits l = sweep_limits();
    int kills[N_POINTS];
    for (size_t p = 0; p < N_POINTS; p++) {
        char name[64], err[SL_ERR_LEN];
        tl_name(name, sizeof(name), "sweep");
        sl_shm_t *m = sl_shm_create(name, &l, err);
        cr_assert_not_null(m, "%s", err);
        sl_shm_t *fe0 = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err);
        cr_assert_not_null(fe0, "%s", err);
        kills[p] = 0;
        for (uint32_t r = 0; r < ROUNDS; r++)
            kills[p] += points[p].worker_side ? round_worker(name, m, fe0, &l, points[p].point, r)
                                               : round_frontend(name, m, fe0, &l, points[p].point, r);
        cr_assert(segment_full(m, &l));
        cr_assert_eq(sl_shm_check(m, 1, err), SL_OK, "%s", err);
        sl_shm_detach(fe0);
        sl_shm_destroy(m);
    }
    fprintf(stderr, "crash sweep: SIGKILLs per point (rounds of %d)\n", ROUNDS);
    for (size_t p = 0; p < N_POINTS; p++) {
        fprintf(stderr, "  %2d %-30s %d\n", points[p].point, points[p].name, kills[p]);
        cr_expect_geq(kills[p], 20);
    }
}
