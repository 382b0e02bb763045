/* tools/shmbench/shmbench.c: benchmark of the shared-memory IPC (not a test).
 * Real processes, as in `sluice serve`: this process is the master; it forks the
 * worker and the front ends for each phase:
 *   1. submission: 4 front ends submit requests (16-token prompts) as fast as the
 *      pool lets them; the worker pops and finishes each at once; the front ends
 *      sleep on their eventfds and release. Reports requests/s.
 *   2. tokens: 4 consumers own 16 requests each; every worker step pushes one
 *      token to each of the 64 sequences and writes each consumer's eventfd once;
 *      consumers sleep in poll and drain. Reports tokens/s delivered.
 *   3. wakeup latency: the worker asleep on the doorbell (submit -> pop), and 4
 *      consumers asleep in poll on their eventfds (push+flush -> read). p50/p99;
 *      then the floor: a bare eventfd between two processes, no library.
 * Usage: shmbench [seconds per token phase, default 3] [latency: only phase 3] */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/shm.h"

#define FES 4
#define SEQS_PER_FE 16
#define LAT_ROUNDS 2000

typedef struct {
    _Atomic int go;
    _Atomic int stop;
    uint64_t tokens[FES];
    uint64_t requests[FES];
    uint32_t n_doorbell, n_eventfd[FES];
    uint64_t doorbell_ns[LAT_ROUNDS];
    uint64_t eventfd_ns[FES][LAT_ROUNDS];
    _Atomic uint64_t bare_sent;   /* baseline: the sender's clock at its eventfd write */
    uint64_t bare_ns[LAT_ROUNDS];
} results;

static results *R;
static char seg_name[64];
static int efds[FES];

static sl_shm_t *attach(sl_shm_role role, uint32_t slot)
{
    char err[SL_ERR_LEN];
    sl_shm_t *h = sl_shm_attach(seg_name, role, slot, err);
    if (h == NULL) {
        fprintf(stderr, "shmbench: %s\n", err);
        _exit(1);
    }
    if (role == SL_SHM_ROLE_WORKER)
        sl_shm_set_eventfds(h, efds, FES);
    return h;
}

static void wait_go(void)
{
    while (!atomic_load(&R->go))
        sched_yield();
}

static void sleep_efd(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) > 0) {
        uint64_t v;
        (void)!read(fd, &v, 8);
    }
}

static sl_shm_request make_req(int32_t *prompt, uint32_t n, int32_t max_tokens, uint64_t id)
{
    sl_shm_request r;
    memset(&r, 0, sizeof(r));
    sl_sampling_params_default(&r.params);
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = (int32_t)i;
    r.prompt = prompt;
    r.n_prompt = n;
    r.max_tokens = max_tokens;
    r.request_id = id;
    return r;
}

static sl_shm_t *segment(uint32_t logprobs)
{
    char err[SL_ERR_LEN];
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = FES;
    l.logprobs = logprobs;
    snprintf(seg_name, sizeof(seg_name), "/sluice-shmbench-%d", (int)getpid());
    sl_shm_t *m = sl_shm_create(seg_name, &l, err);
    if (m == NULL) {
        fprintf(stderr, "shmbench: %s\n", err);
        exit(1);
    }
    return m;
}

static double secs(uint64_t ns) { return (double)ns / 1e9; }

/* ---- phase 1: submission ---------------------------------------------------------- */

static void submit_fe(uint32_t slot, uint64_t n)
{
    sl_shm_t *fe = attach(SL_SHM_ROLE_FRONTEND, slot);
    int32_t prompt[16];
    sl_shm_request req = make_req(prompt, 16, 1, 0);
    sl_shm_ticket out[64];
    int n_out = 0;
    uint64_t done = 0, sent = 0;
    wait_go();
    while (done < n) {
        while (sent < n && n_out < 64 && sl_shm_submit(fe, &req, &out[n_out]) == SL_OK) {
            n_out++;
            sent++;
        }
        int progressed = 0;
        for (int k = 0; k < n_out;) {
            sl_shm_result_info r;
            sl_shm_result(fe, out[k], &r);
            if (r.state == SL_MAILBOX_STATE_FINISHED) {
                sl_shm_release(fe, out[k]);
                out[k] = out[--n_out];
                done++;
                progressed = 1;
            } else {
                k++;
            }
        }
        if (!progressed)
            sleep_efd(efds[slot], 1);
    }
    R->requests[slot] = done;
    _exit(0);
}

static void submit_worker(void)
{
    sl_shm_t *w = attach(SL_SHM_ROLE_WORKER, 0);
    sl_shm_set_worker_state(w, SL_WORKER_STATE_READY, "bench");
    wait_go();
    while (!atomic_load(&R->stop)) {
        sl_shm_ticket t;
        int n = 0;
        while (sl_shm_worker_pop(w, &t) == SL_OK) {
            sl_shm_worker_finish(w, t, SL_FINISH_REASON_STOP, NULL);
            n++;
        }
        sl_shm_worker_flush_wakeups(w);
        if (n == 0)
            sl_shm_worker_wait(w, 10000000);
    }
    _exit(0);
}

/* ---- phase 2: tokens ------------------------------------------------------------------ */

static void token_fe(uint32_t slot)
{
    sl_shm_t *fe = attach(SL_SHM_ROLE_FRONTEND, slot);
    int32_t prompt[16], buf[256];
    sl_logprob_record *recs = sl_shm_get_limits(fe)->logprobs ? malloc(256 * sizeof(*recs)) : NULL;
    sl_shm_request req = make_req(prompt, 16, INT32_MAX, slot);
    sl_shm_ticket t[SEQS_PER_FE];
    int live[SEQS_PER_FE];
    for (int k = 0; k < SEQS_PER_FE; k++) {
        while (sl_shm_submit(fe, &req, &t[k]) != SL_OK)
            sched_yield();
        live[k] = 1;
    }
    wait_go();
    uint64_t tokens = 0;
    int n_live = SEQS_PER_FE;
    while (n_live > 0) {
        sleep_efd(efds[slot], 100);
        for (int k = 0; k < SEQS_PER_FE; k++) {
            if (!live[k])
                continue;
            uint32_t n;
            sl_mailbox_state st;
            do {
                sl_shm_read_tokens(fe, t[k], buf, recs, 256, &n, &st);
                tokens += n;
            } while (n == 256);
            if (st == SL_MAILBOX_STATE_FINISHED) {
                sl_shm_release(fe, t[k]);
                live[k] = 0;
                n_live--;
            }
        }
    }
    R->tokens[slot] = tokens;
    _exit(0);
}

static void token_worker(void)
{
    sl_shm_t *w = attach(SL_SHM_ROLE_WORKER, 0);
    sl_shm_ticket seqs[FES * SEQS_PER_FE];
    int n = 0;
    while (n < FES * SEQS_PER_FE)
        if (sl_shm_worker_pop(w, &seqs[n]) == SL_OK)
            n++;
        else
            sl_shm_worker_wait(w, 1000000);
    wait_go();
    sl_logprob_record rec;
    memset(&rec, 0, sizeof(rec));
    int32_t tok = 0;
    while (!atomic_load(&R->stop)) {
        sl_shm_heartbeat(w, sl_shm_now_ns(), 1000000);
        int pushed = 0;
        for (int k = 0; k < n; k++)
            pushed += sl_shm_worker_push(w, seqs[k], tok++, &rec) == SL_OK;
        sl_shm_worker_flush_wakeups(w);
        if (pushed == 0)
            sched_yield(); /* every ring full: the consumers are behind */
    }
    for (int k = 0; k < n; k++)
        sl_shm_worker_finish(w, seqs[k], SL_FINISH_REASON_LENGTH, NULL);
    sl_shm_worker_flush_wakeups(w);
    _exit(0);
}

/* ---- phase 3: latency ------------------------------------------------------------------ */

static void lat_doorbell_fe(void)
{
    sl_shm_t *fe = attach(SL_SHM_ROLE_FRONTEND, 0);
    int32_t prompt[16];
    wait_go();
    for (int i = 0; i < LAT_ROUNDS; i++) {
        struct timespec ts = {0, 300000};
        nanosleep(&ts, NULL); /* let the worker fall asleep */
        sl_shm_request req = make_req(prompt, 16, 1, sl_shm_now_ns());
        sl_shm_ticket t;
        while (sl_shm_submit(fe, &req, &t) != SL_OK)
            sched_yield();
        sl_shm_result_info r;
        do {
            sleep_efd(efds[0], 10);
            sl_shm_result(fe, t, &r);
        } while (r.state != SL_MAILBOX_STATE_FINISHED);
        sl_shm_release(fe, t);
    }
    _exit(0);
}

static void lat_doorbell_worker(void)
{
    sl_shm_t *w = attach(SL_SHM_ROLE_WORKER, 0);
    wait_go();
    uint32_t n = 0;
    while (n < LAT_ROUNDS) {
        if (sl_shm_worker_wait(w, 100000000) != SL_OK)
            continue;
        sl_shm_ticket t;
        while (sl_shm_worker_pop(w, &t) == SL_OK) {
            uint64_t now = sl_shm_now_ns(), sent;
            sl_shm_request_get(w, t, NULL, NULL, NULL, NULL, &sent, NULL);
            R->doorbell_ns[n++] = now - sent;
            sl_shm_worker_finish(w, t, SL_FINISH_REASON_STOP, NULL);
        }
        sl_shm_worker_flush_wakeups(w);
    }
    R->n_doorbell = n;
    _exit(0);
}

static void lat_eventfd_fe(uint32_t slot)
{
    sl_shm_t *fe = attach(SL_SHM_ROLE_FRONTEND, slot);
    int32_t prompt[16], tok[8];
    sl_logprob_record rec[8];
    sl_shm_request req = make_req(prompt, 16, INT32_MAX, slot);
    sl_shm_ticket t;
    while (sl_shm_submit(fe, &req, &t) != SL_OK)
        sched_yield();
    wait_go();
    uint32_t got = 0;
    sl_mailbox_state st = SL_MAILBOX_STATE_RUNNING;
    while (st != SL_MAILBOX_STATE_FINISHED) {
        struct pollfd p = {.fd = efds[slot], .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        uint64_t v;
        (void)!read(efds[slot], &v, 8);
        uint32_t n;
        do {
            sl_shm_read_tokens(fe, t, tok, rec, 8, &n, &st);
            uint64_t now = sl_shm_now_ns(); /* when the consumer holds the token */
            for (uint32_t i = 0; i < n && got < LAT_ROUNDS; i++) {
                /* the push time travels in the record: top[0..1] hold its two halves */
                uint64_t sent = (uint64_t)(uint32_t)rec[i].top[0].token | ((uint64_t)(uint32_t)rec[i].top[1].token << 32);
                R->eventfd_ns[slot][got++] = now - sent;
            }
        } while (n == 8);
    }
    R->n_eventfd[slot] = got;
    sl_shm_release(fe, t);
    _exit(0);
}

/* fanout 0: each round wakes one consumer (round robin); 1: all four at once,
 * which on 2 cores also measures the consumers queueing for a core. */
static void lat_eventfd_worker(int fanout)
{
    sl_shm_t *w = attach(SL_SHM_ROLE_WORKER, 0);
    sl_shm_ticket seqs[FES];
    int n = 0;
    while (n < FES)
        if (sl_shm_worker_pop(w, &seqs[n]) == SL_OK)
            n++;
        else
            sl_shm_worker_wait(w, 1000000);
    wait_go();
    sl_logprob_record rec;
    memset(&rec, 0, sizeof(rec));
    rec.n_top = 2;
    for (int i = 0; i < LAT_ROUNDS; i++) {
        struct timespec ts = {0, 300000};
        nanosleep(&ts, NULL); /* let the consumers fall asleep */
        uint64_t now = sl_shm_now_ns();
        rec.top[0].token = (int32_t)(uint32_t)now;
        rec.top[1].token = (int32_t)(uint32_t)(now >> 32);
        for (int k = 0; k < n; k++)
            if (fanout || k == i % n)
                sl_shm_worker_push(w, seqs[k], i, &rec);
        sl_shm_worker_flush_wakeups(w);
    }
    for (int k = 0; k < n; k++)
        sl_shm_worker_finish(w, seqs[k], SL_FINISH_REASON_LENGTH, NULL);
    sl_shm_worker_flush_wakeups(w);
    _exit(0);
}

/* Baseline without the library: one process writes its clock into shared
 * memory and an eventfd every 300 us, another sleeps in poll on that eventfd
 * and reads the clock. What a wakeup costs on this machine before any of
 * our code runs: the floor under the eventfd figures above. */
static void lat_bare_fe(void)
{
    wait_go();
    int got = 0;
    while (got < LAT_ROUNDS) {
        struct pollfd p = {.fd = efds[0], .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        uint64_t v, now = sl_shm_now_ns();
        (void)!read(efds[0], &v, 8);
        R->bare_ns[got++] = now - atomic_load(&R->bare_sent);
    }
    _exit(0);
}

static void lat_bare_sender(void)
{
    wait_go();
    for (int i = 0; i < LAT_ROUNDS; i++) {
        struct timespec ts = {0, 300000};
        nanosleep(&ts, NULL);
        atomic_store(&R->bare_sent, sl_shm_now_ns());
        uint64_t one = 1;
        (void)!write(efds[0], &one, 8);
    }
    _exit(0);
}

/* ---- driver ------------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void percentiles(const char *what, uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    printf("%-34s n=%zu  p50 %.1f us  p99 %.1f us  max %.1f us\n", what, n, (double)v[n / 2] / 1e3,
           (double)v[(size_t)((double)n * 0.99)] / 1e3, (double)v[n - 1] / 1e3);
}

static void reap(int n)
{
    for (int i = 0; i < n; i++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "shmbench: a child failed (status %d)\n", st);
            exit(1);
        }
    }
}

static void reset(void)
{
    memset(R, 0, sizeof(*R));
    for (int i = 0; i < FES; i++) {
        uint64_t v;
        while (read(efds[i], &v, 8) == 8)
            ;
    }
}

static void phase_tokens(uint32_t logprobs, double seconds)
{
    reset();
    sl_shm_t *m = segment(logprobs);
    if (fork() == 0)
        token_worker();
    for (uint32_t s = 0; s < FES; s++)
        if (fork() == 0)
            token_fe(s);
    sl_shm_census_info c;
    do { /* all 64 requests running */
        usleep(1000);
        sl_shm_census(m, &c);
    } while (c.mailboxes[SL_MAILBOX_STATE_RUNNING] < FES * SEQS_PER_FE);
    uint64_t t0 = sl_shm_now_ns();
    atomic_store(&R->go, 1);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&R->stop, 1);
    reap(FES + 1);
    uint64_t t1 = sl_shm_now_ns(), total = 0;
    for (int s = 0; s < FES; s++)
        total += R->tokens[s];
    printf("tokens to %d consumers (%s)%s %.0f tokens/s (%llu tokens in %.2f s, 64 sequences)\n", FES,
           logprobs ? "with logprob records" : "ids only", logprobs ? ":" : ":           ", (double)total / secs(t1 - t0),
           (unsigned long long)total, secs(t1 - t0));
    sl_shm_destroy(m);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    R = mmap(NULL, sizeof(results), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (R == MAP_FAILED)
        return 1;
    for (int i = 0; i < FES; i++)
        efds[i] = eventfd(0, EFD_NONBLOCK);
    printf("shmbench: %ld cores online\n", sysconf(_SC_NPROCESSORS_ONLN));
    int only_latency = argc > 2 && strcmp(argv[2], "latency") == 0;
    sl_shm_t *m;
    if (only_latency)
        goto latency;

    /* 1. submission */
    reset();
    m = segment(0);
    const uint64_t per_fe = 100000;
    if (fork() == 0)
        submit_worker();
    for (uint32_t s = 0; s < FES; s++)
        if (fork() == 0)
            submit_fe(s, per_fe);
    usleep(100000);
    uint64_t t0 = sl_shm_now_ns();
    atomic_store(&R->go, 1);
    for (int i = 0; i < FES; i++)
        wait(NULL);
    uint64_t t1 = sl_shm_now_ns();
    atomic_store(&R->stop, 1);
    reap(1);
    printf("submission (%d front ends, 1 worker):   %.0f requests/s (submit+pop+finish+release, %llu requests)\n", FES,
           (double)(FES * per_fe) / secs(t1 - t0), (unsigned long long)(FES * per_fe));
    sl_shm_destroy(m);

    /* 2. tokens */
    phase_tokens(0, seconds);
    phase_tokens(1, seconds);

latency:
    /* 3. latency: doorbell */
    reset();
    m = segment(1);
    if (fork() == 0)
        lat_doorbell_worker();
    if (fork() == 0)
        lat_doorbell_fe();
    usleep(100000);
    atomic_store(&R->go, 1);
    reap(2);
    percentiles("wakeup, doorbell (submit -> pop):", R->doorbell_ns, R->n_doorbell);
    sl_shm_destroy(m);

    /* 3. latency: eventfds, one consumer woken per round, then all four */
    for (int fanout = 0; fanout < 2; fanout++) {
        reset();
        m = segment(1);
        if (fork() == 0)
            lat_eventfd_worker(fanout);
        for (uint32_t s = 0; s < FES; s++)
            if (fork() == 0)
                lat_eventfd_fe(s);
        usleep(200000);
        atomic_store(&R->go, 1);
        reap(FES + 1);
        static uint64_t all[FES * LAT_ROUNDS];
        size_t n = 0;
        for (int s = 0; s < FES; s++)
            for (uint32_t i = 0; i < R->n_eventfd[s]; i++)
                all[n++] = R->eventfd_ns[s][i];
        percentiles(fanout ? "wakeup, eventfd, 4 at once:" : "wakeup, eventfd (push -> read):", all, n);
        sl_shm_destroy(m);
    }

    /* 3. latency: the machine's floor, a bare eventfd between two processes */
    reset();
    if (fork() == 0)
        lat_bare_sender();
    if (fork() == 0)
        lat_bare_fe();
    usleep(100000);
    atomic_store(&R->go, 1);
    reap(2);
    percentiles("baseline, bare eventfd (no library):", R->bare_ns, LAT_ROUNDS);
    return 0;
}
