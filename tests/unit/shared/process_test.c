/* tests/unit/shared/process_test.c: real processes. P front-end processes submit
 * K requests each; one worker process echoes every prompt back as tokens; each
 * front end checks that every stream arrives complete, in order, exactly once,
 * and to the right request, waking on its own eventfd. */
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shm_testlib.h"

#define P 3
#define K 200

static void frontend_main(const char *name, uint32_t slot, int efd, uint32_t cancel_every)
{
    char err[SL_ERR_LEN];
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, slot, err);
    if (fe == NULL) {
        fprintf(stderr, "front end %u: %s\n", slot, err);
        _exit(10);
    }
    static tl_client c;
    memset(&c, 0, sizeof(c));
    c.fe = fe;
    c.rid_base = 1000u * (slot + 1);
    c.to_submit = K;
    c.prompt_max = 90;
    c.max_out = 8;
    c.cancel_every = cancel_every;
    uint64_t deadline = sl_shm_now_ns() + 60000000000ull;
    while (!tl_client_done(&c) && sl_shm_now_ns() < deadline) {
        if (tl_client_step(&c) == 0) {
            struct pollfd pfd = {.fd = efd, .events = POLLIN};
            if (poll(&pfd, 1, 10) > 0) {
                uint64_t v;
                (void)!read(efd, &v, 8);
            }
        }
    }
    if (c.errors || !tl_client_done(&c) || (cancel_every == 0 && c.finished != K)) {
        fprintf(stderr, "front end %u: %u errors (%s), completed %u finished %u failed %u cancelled %u\n", slot,
                c.errors, c.why, c.completed, c.finished, c.failed, c.cancelled);
        _exit(11);
    }
    sl_shm_detach(fe);
    _exit(0);
}

static void worker_main(const char *name, const int *efds)
{
    char err[SL_ERR_LEN];
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    if (w == NULL) {
        fprintf(stderr, "worker: %s\n", err);
        _exit(20);
    }
    sl_shm_set_eventfds(w, efds, P);
    sl_shm_set_worker_state(w, SL_WORKER_STATE_READY, "echo");
    static tl_worker tw;
    memset(&tw, 0, sizeof(tw));
    tw.w = w;
    tw.per_step = 4;
    for (;;) { /* runs until the master kills it */
        sl_shm_heartbeat(w, sl_shm_now_ns(), 1000000);
        if (tl_worker_step(&tw) == 0 && tw.n == 0)
            sl_shm_worker_wait(w, 5000000);
    }
}

static void run(const char *tag, uint32_t cancel_every)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), tag);
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = P;
    l.n_mailboxes = 16;
    l.submit_ring_entries = 4;
    l.token_ring_entries = 16;
    l.prompt_tokens_max = 128;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 64;
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);
    int efds[P];
    for (int i = 0; i < P; i++)
        efds[i] = eventfd(0, EFD_NONBLOCK);
    sl_shm_set_eventfds(m, efds, P);
    pid_t worker = fork();
    if (worker == 0)
        worker_main(name, efds);
    pid_t fes[P];
    for (int i = 0; i < P; i++) {
        fes[i] = fork();
        if (fes[i] == 0)
            frontend_main(name, (uint32_t)i, efds[i], cancel_every);
    }
    int bad = 0;
    for (int i = 0; i < P; i++) {
        int status;
        waitpid(fes[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            bad++;
    }
    kill(worker, SIGKILL);
    waitpid(worker, NULL, 0);
    cr_assert_eq(bad, 0, "every front end got every stream right");
    sl_shm_census_info c;
    sl_shm_census(m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_FREE], l.n_mailboxes);
    cr_assert_eq(c.blocks_free, l.prompt_arena_blocks);
    uint64_t done = sl_shm_counter_get(m, SL_COUNTER_REQUESTS_FINISHED) +
                    sl_shm_counter_get(m, SL_COUNTER_REQUESTS_CANCELLED);
    cr_assert_eq(done, P * K);
    for (int i = 0; i < P; i++)
        close(efds[i]);
    sl_shm_destroy(m);
}

Test(process, producers_times_requests_echoed_exactly_once, .timeout = 120)
{
    run("pk", 0);
}

Test(process, with_cancellations, .timeout = 120)
{
    run("pkc", 7);
}
