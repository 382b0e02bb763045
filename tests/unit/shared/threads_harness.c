/* tests/unit/shared/threads_harness.c: the process test's code in threads over
 * one mapping (sl_shm_attach_shared), so ThreadSanitizer can see every access.
 * P front-end threads x K requests, one echo worker thread, plus a thread that
 * reads the config snapshot, histograms and heartbeat while the worker writes them.
 * Run by threads_test.c (criterion, ASan) and, built with -DTL_THREADS_MAIN as a
 * plain program, by tools/tsan-shared.sh under ThreadSanitizer (criterion's
 * process arena does not start under TSan). */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shm_testlib.h"
#include "threads_harness.h"

#define P 3
#define K 150

typedef struct {
    sl_shm_t *m;
    uint32_t slot;
    int efd;
    int efds[P];
    _Atomic int *stop;
    int ok;
    char why[300];
} thread_arg;

static void *frontend_thread(void *p)
{
    thread_arg *a = p;
    char err[SL_ERR_LEN];
    sl_shm_t *fe = sl_shm_attach_shared(a->m, SL_SHM_ROLE_FRONTEND, a->slot, err);
    if (fe == NULL) {
        snprintf(a->why, sizeof(a->why), "%s", err);
        return NULL;
    }
    tl_client *c = calloc(1, sizeof(*c));
    c->fe = fe;
    c->rid_base = 1000u * (a->slot + 1);
    c->to_submit = K;
    c->prompt_max = 90;
    c->max_out = 8;
    c->cancel_every = a->slot == 2 ? 5 : 0;
    uint64_t deadline = sl_shm_now_ns() + 60000000000ull;
    while (!tl_client_done(c) && sl_shm_now_ns() < deadline) {
        if (tl_client_step(c) == 0) {
            struct pollfd pfd = {.fd = a->efd, .events = POLLIN};
            if (poll(&pfd, 1, 10) > 0) {
                uint64_t v;
                (void)!read(a->efd, &v, 8);
            }
        }
        sl_shm_histogram_observe(fe, SL_HISTOGRAM_E2E, 1000);
    }
    a->ok = c->errors == 0 && tl_client_done(c) && (c->cancel_every || c->finished == K);
    snprintf(a->why, sizeof(a->why), "%u errors (%s), completed %u finished %u", c->errors, c->why, c->completed,
             c->finished);
    free(c);
    sl_shm_detach(fe);
    return NULL;
}

static void *worker_thread(void *p)
{
    thread_arg *a = p;
    char err[SL_ERR_LEN];
    sl_shm_t *w = sl_shm_attach_shared(a->m, SL_SHM_ROLE_WORKER, 0, err);
    if (w == NULL)
        return NULL;
    sl_shm_set_eventfds(w, a->efds, P);
    sl_shm_set_worker_state(w, SL_WORKER_STATE_READY, "echo");
    tl_worker *tw = calloc(1, sizeof(*tw));
    tw->w = w;
    tw->per_step = 4;
    uint64_t steps = 0;
    while (!atomic_load(a->stop)) {
        sl_shm_heartbeat(w, sl_shm_now_ns(), 1000000);
        if (++steps % 64 == 0) {
            char cfg[64];
            int n = snprintf(cfg, sizeof(cfg), "{\"steps\":%llu}", (unsigned long long)steps);
            sl_shm_config_publish(w, cfg, (size_t)n);
        }
        if (tl_worker_step(tw) == 0 && tw->n == 0)
            sl_shm_worker_wait(w, 2000000);
    }
    a->ok = 1;
    free(tw);
    sl_shm_detach(w);
    return NULL;
}

static void *reader_thread(void *p)
{
    thread_arg *a = p;
    char buf[SL_SHM_CONFIG_MAX + 1];
    a->ok = 1;
    while (!atomic_load(a->stop)) {
        size_t len;
        if (sl_shm_config_read(a->m, buf, sizeof(buf), &len) == SL_OK && (len < 10 || buf[0] != '{'))
            a->ok = 0;
        uint64_t cum[SL_SHM_HISTOGRAM_BUCKETS + 1], sum;
        sl_shm_histogram_read(a->m, SL_HISTOGRAM_E2E, cum, &sum);
        sl_shm_worker_alive(a->m, sl_shm_now_ns(), 1000000000ull);
        usleep(200);
    }
    return NULL;
}

int tl_threads_run(char *why, size_t cap)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "thr");
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
    if (m == NULL) {
        snprintf(why, cap, "%s", err);
        return 0;
    }
    _Atomic int stop = 0;
    thread_arg fa[P], wa, ra;
    memset(&wa, 0, sizeof(wa));
    memset(&ra, 0, sizeof(ra));
    wa.m = ra.m = m;
    wa.stop = ra.stop = &stop;
    for (int i = 0; i < P; i++) {
        memset(&fa[i], 0, sizeof(fa[i]));
        fa[i].m = m;
        fa[i].slot = (uint32_t)i;
        fa[i].efd = eventfd(0, EFD_NONBLOCK);
        wa.efds[i] = fa[i].efd;
    }
    pthread_t wt, rt, ft[P];
    pthread_create(&wt, NULL, worker_thread, &wa);
    pthread_create(&rt, NULL, reader_thread, &ra);
    for (int i = 0; i < P; i++)
        pthread_create(&ft[i], NULL, frontend_thread, &fa[i]);
    for (int i = 0; i < P; i++)
        pthread_join(ft[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(wt, NULL);
    pthread_join(rt, NULL);
    int ok = 1;
    snprintf(why, cap, "ok");
    for (int i = 0; i < P; i++) {
        if (!fa[i].ok) {
            snprintf(why, cap, "front end %d: %.200s", i, fa[i].why);
            ok = 0;
        }
        close(fa[i].efd);
    }
    if (!wa.ok || !ra.ok) {
        snprintf(why, cap, "worker ok %d, reader ok %d (torn config snapshot?)", wa.ok, ra.ok);
        ok = 0;
    }
    sl_shm_census_info c;
    sl_shm_census(m, &c);
    if (c.mailboxes[SL_MAILBOX_STATE_FREE] != l.n_mailboxes || c.blocks_free != l.prompt_arena_blocks) {
        snprintf(why, cap, "pool not full at the end: %u mailboxes, %u blocks free", c.mailboxes[SL_MAILBOX_STATE_FREE],
                 c.blocks_free);
        ok = 0;
    }
    sl_shm_destroy(m);
    return ok;
}

#ifdef TL_THREADS_MAIN
int main(void)
{
    char why[512];
    int ok = tl_threads_run(why, sizeof(why));
    printf("threads harness: %s\n", ok ? "ok" : why);
    return ok ? 0 : 1;
}
#endif
