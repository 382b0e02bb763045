/* tools/workerbench/workerbench.c: the worker and its scheduler measured
 * through the shared-memory path alone (no HTTP): this process plays the
 * master (creates the segment, forks the real worker) and one front end
 * (submits requests, sleeps on its eventfd, reads tokens with timestamps).
 *
 *   workerbench -m MODEL [--threads T] [--prompt N] [--gen G] [--conc 1,4,16]
 *
 * Prints, per concurrency: aggregate tok/s, mean and max request latency,
 * mean inter-token latency; then the join case (the seed's F-BATCH-003): a
 * request B submitted when A is half done, B's time to first token against
 * B alone, and A's inter-token latency before and after B joined. */
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu-worker/worker.h"
#include "shared/config.h"
#include "shared/shm.h"

#define MAX_REQ 64
#define MAX_GEN 4096

typedef struct {
    sl_shm_ticket t;
    uint64_t submit_ns, tok_ns[MAX_GEN];
    uint32_t n;
    bool done;
} req;

static sl_shm_t *fe;
static int efd;

static void submit(req *r, int id, int n_prompt, int gen)
{
    int32_t prompt[4096];
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((id * 7919 + i * 104729 + 17) % 32000);
    sl_shm_request q = {.max_tokens = gen, .ignore_eos = 1, .prompt = prompt, .n_prompt = (uint32_t)n_prompt,
                        .request_id = (uint64_t)id};
    sl_sampling_params_default(&q.params);
    q.params.temperature = 0;
    memset(r, 0, sizeof *r);
    r->submit_ns = sl_shm_now_ns();
    while (sl_shm_submit(fe, &q, &r->t) == SL_AGAIN)
        usleep(1000);
}

/* Reads what arrived for every live request; returns how many are still live. */
static int drain(req *rs, int n)
{
    int live = 0;
    uint64_t now = sl_shm_now_ns();
    for (int i = 0; i < n; i++) {
        req *r = &rs[i];
        if (r->done)
            continue;
        int32_t toks[256];
        uint32_t got = 0;
        sl_mailbox_state st;
        if (sl_shm_read_tokens(fe, r->t, toks, NULL, 256, &got, &st) < 0) {
            r->done = true;
            continue;
        }
        for (uint32_t k = 0; k < got && r->n < MAX_GEN; k++)
            r->tok_ns[r->n++] = now;
        if (st >= SL_MAILBOX_STATE_FINISHED && got == 0) {
            sl_shm_release(fe, r->t);
            r->done = true;
        } else {
            live++;
        }
    }
    return live;
}

static void wait_wake(void)
{
    struct pollfd p = {.fd = efd, .events = POLLIN};
    poll(&p, 1, 100);
    uint64_t v;
    if (read(efd, &v, sizeof v) < 0) {
        /* nothing pending: a timeout */
    }
}

static double ms(uint64_t ns) { return ns / 1e6; }

static void run_concurrency(int c, int n_prompt, int gen)
{
    static req rs[MAX_REQ];
    uint64_t t0 = sl_shm_now_ns();
    for (int i = 0; i < c; i++)
        submit(&rs[i], 1000 * c + i, n_prompt, gen);
    while (drain(rs, c) > 0)
        wait_wake();
    uint64_t t1 = 0, total = 0;
    double lat_sum = 0, lat_max = 0, itl_sum = 0;
    for (int i = 0; i < c; i++) {
        req *r = &rs[i];
        if (r->n == 0) {
            fprintf(stderr, "workerbench: request %d produced no tokens (prompt + gen over the context?)\n", i);
            exit(1);
        }
        total += r->n;
        uint64_t end = r->tok_ns[r->n - 1];
        t1 = end > t1 ? end : t1;
        double lat = ms(end - r->submit_ns);
        lat_sum += lat;
        lat_max = lat > lat_max ? lat : lat_max;
        itl_sum += r->n > 1 ? ms(r->tok_ns[r->n - 1] - r->tok_ns[0]) / (r->n - 1) : 0;
    }
    printf("concurrency %2d: %5.1f tok/s aggregate; request latency mean %.0f ms, max %.0f ms; "
           "inter-token mean %.1f ms\n", c, total / ((t1 - t0) / 1e9), lat_sum / c, lat_max, itl_sum / c);
    fflush(stdout);
}

static void run_join(int n_prompt, int gen)
{
    static req a, b, solo;
    submit(&solo, 7, n_prompt, 2);
    while (drain(&solo, 1) > 0)
        wait_wake();
    double solo_ttft = ms(solo.tok_ns[0] - solo.submit_ns);
    submit(&a, 8, n_prompt, gen);
    bool b_in = false;
    uint32_t a_at_join = 0;
    for (;;) {
        int live = drain(&a, 1) + (b_in ? drain(&b, 1) : 0);
        if (!b_in && a.n >= (uint32_t)gen / 2) {
            a_at_join = a.n;
            submit(&b, 9, n_prompt, 4);
            b_in = true;
            live++;
        }
        if (live == 0)
            break;
        wait_wake();
    }
    double b_ttft = ms(b.tok_ns[0] - b.submit_ns);
    double before = ms(a.tok_ns[a_at_join - 1] - a.tok_ns[0]) / (a_at_join - 1);
    uint32_t last = a.n - 1;
    double after = ms(a.tok_ns[last] - a.tok_ns[a_at_join - 1]) / (last - (a_at_join - 1));
    printf("join (F-BATCH-003): B's first token %.1f ms after submission (B alone: %.1f ms); "
           "A's inter-token %.1f ms before B, %.1f ms after\n", b_ttft, solo_ttft, before, after);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *conc = "1,4,16";
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), n_prompt = 32, gen = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conc")) conc = argv[i + 1];
        else {
            fprintf(stderr, "workerbench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || n_prompt < 1 || n_prompt > 4096 || gen < 4 || gen > MAX_GEN || threads < 1) {
        fprintf(stderr, "usage: workerbench -m MODEL [--threads T] [--prompt N] [--gen G] [--conc 1,4,16]\n");
        return 2;
    }
    static sl_config cfg;
    snprintf(cfg.model, sizeof cfg.model, "%s", model);
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    snprintf(cfg.shm_name, sizeof cfg.shm_name, "/sluice-wb-%d", (int)getpid());
    cfg.threads = (uint32_t)threads;
    cfg.n_frontends = 1;
    cfg.max_seqs = 16;
    cfg.token_budget = 256;
    cfg.prefill_chunk = 256;
    cfg.ctx_size = (uint32_t)(n_prompt + gen + 16);
    cfg.kv_memory = 1ull << 30;
    cfg.heartbeat_timeout_ms = 60000;

    char err[SL_ERR_LEN];
    sl_shm_limits lim;
    sl_shm_limits_default(&lim);
    lim.n_slots = 1;
    lim.logprobs = 0;
    lim.prompt_tokens_max = cfg.ctx_size;
    sl_shm_t *m = sl_shm_create(cfg.shm_name, &lim, err);
    if (!m) {
        fprintf(stderr, "workerbench: %s\n", err);
        return 1;
    }
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    sl_shm_set_eventfds(m, &efd, 1);
    pid_t pid = fork();
    if (pid == 0)
        _exit(sl_worker_main(&cfg, &efd, 1));
    fe = sl_shm_attach(cfg.shm_name, SL_SHM_ROLE_FRONTEND, 0, err);
    if (!fe) {
        fprintf(stderr, "workerbench: %s\n", err);
        return 1;
    }
    sl_shm_set_eventfds(fe, &efd, 1);
    for (;;) {
        sl_shm_worker_info wi;
        sl_shm_worker_info_get(m, &wi);
        if (wi.worker_state == SL_WORKER_STATE_READY)
            break;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "workerbench: the worker exited (status %d)\n", status);
            return 1;
        }
        usleep(10000);
    }
    printf("model %s, %d threads, prompt %d, gen %d, shared-memory path (no HTTP)\n", model, threads, n_prompt, gen);
    for (const char *p = conc; *p;) {
        int c = atoi(p);
        if (c >= 1 && c <= MAX_REQ)
            run_concurrency(c, n_prompt, gen);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    run_join(n_prompt, gen);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
    return 0;
}
