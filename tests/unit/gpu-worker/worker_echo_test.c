/* tests/unit/gpu-worker/worker_echo_test.c: the real worker process
 * (sl_worker_main, CPU backend) over a real segment whose token rings hold
 * 4 entries: a mailbox with echo_logprobs gets its prompt tokens 1.. first,
 * each with a record, then its generated tokens, the very ones (and
 * records) the plain request gets; with max_tokens 0 it finishes LENGTH
 * after the records; echo without logprobs fails with a reason. This
 * process plays master and front end, reading slowly. Skips (with a
 * message) when mkmodel or the test tokenizer is not built in
 * $SLUICE_BUILD_DIR. */
#include <criterion/criterion.h>
#include <poll.h>
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

static char model_path[512], model_dir[256];

static int make_model(void)
{
    const char *bd = getenv("SLUICE_BUILD_DIR");
    char tool[512], tokjson[512];
    snprintf(tool, sizeof tool, "%s/tools/mkmodel", bd ? bd : "build");
    snprintf(tokjson, sizeof tokjson, "%s/testdata/tokenizers/mistral/tokenizer.json", bd ? bd : "build");
    if (access(tool, X_OK) != 0 || access(tokjson, R_OK) != 0)
        return 0;
    snprintf(model_dir, sizeof model_dir, "/tmp/sl_worker_echo_XXXXXX");
    if (!mkdtemp(model_dir))
        return 0;
    snprintf(model_path, sizeof model_path, "%s/m.gguf", model_dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --preset tiny-llama --type Q4_K --tokenizer '%s' --peak 8 >/dev/null",
             tool, model_path, tokjson);
    return system(cmd) == 0;
}

#define N_PROMPT 30

typedef struct {
    sl_shm_ticket t;
    int32_t toks[128];
    sl_logprob_record recs[128];
    uint32_t n;
    sl_shm_result_info res;
    bool done;
} req;

static sl_shm_t *fe;
static int efd;
static int32_t prompt[N_PROMPT];

static void submit(req *r, bool echo, int n_logprobs, int max_tokens)
{
    sl_shm_request q = {.max_tokens = max_tokens, .prompt = prompt, .n_prompt = N_PROMPT,
                        .echo_logprobs = echo ? 1u : 0u};
    sl_sampling_params_default(&q.params);
    q.params.temperature = 0.9f;
    q.params.seed = 12;
    q.params.n_logprobs = n_logprobs;
    q.ignore_eos = 1;
    memset(r, 0, sizeof *r);
    cr_assert_eq(sl_shm_submit(fe, &q, &r->t), SL_OK);
}

/* Reads at most 3 entries of each request a call: a slow reader. */
static int drain(req *rs, int n)
{
    int live = 0;
    for (int i = 0; i < n; i++) {
        req *r = &rs[i];
        if (r->done)
            continue;
        uint32_t got = 0, max = 128 - r->n < 3 ? 128 - r->n : 3;
        sl_mailbox_state st;
        cr_assert_eq(sl_shm_read_tokens(fe, r->t, r->toks + r->n, r->recs + r->n, max, &got, &st), SL_OK);
        r->n += got;
        if (st >= SL_MAILBOX_STATE_FINISHED && got < max) {
            cr_assert_eq(sl_shm_result(fe, r->t, &r->res), SL_OK);
            cr_assert_eq(sl_shm_release(fe, r->t), SL_OK);
            r->done = true;
        } else {
            live++;
        }
    }
    return live;
}

Test(worker_echo, the_prompt_records_come_first_through_a_small_ring, .timeout = 120)
{
    if (!make_model()) {
        cr_log_warn("skipped: mkmodel or the mistral test tokenizer is not built");
        return;
    }
    for (int j = 0; j < N_PROMPT; j++)
        prompt[j] = j == 0 ? 1 : 300 + (j * 37) % 2000;
    static sl_config cfg;
    snprintf(cfg.model, sizeof cfg.model, "%s", model_path);
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    snprintf(cfg.shm_name, sizeof cfg.shm_name, "/sluice-we-%d", (int)getpid());
    cfg.threads = 1;
    cfg.n_frontends = 1;
    cfg.max_seqs = 4;
    cfg.token_budget = 64;
    cfg.prefill_chunk = 64;
    cfg.ctx_size = 256;
    cfg.kv_memory = 64ull << 20;
    cfg.heartbeat_timeout_ms = 60000;
    cfg.prefix_cache = 1;
    char err[SL_ERR_LEN];
    sl_shm_limits lim;
    sl_shm_limits_default(&lim);
    lim.n_slots = 1;
    lim.n_mailboxes = 16;
    lim.prompt_tokens_max = cfg.ctx_size;
    lim.grammar_bytes_max = 4096;
    lim.token_ring_entries = 4;   /* smaller than the 8 rows an echo call may compute */
    lim.logprobs = 1;
    sl_shm_t *m = sl_shm_create(cfg.shm_name, &lim, err);
    cr_assert_not_null(m, "%s", err);
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    sl_shm_set_eventfds(m, &efd, 1);
    pid_t pid = fork();
    if (pid == 0)
        _exit(sl_worker_main(&cfg, &efd, 1));
    fe = sl_shm_attach(cfg.shm_name, SL_SHM_ROLE_FRONTEND, 0, err);
    cr_assert_not_null(fe, "%s", err);
    sl_shm_set_eventfds(fe, &efd, 1);
    for (;;) {
        sl_shm_worker_info wi;
        sl_shm_worker_info_get(m, &wi);
        if (wi.worker_state == SL_WORKER_STATE_READY)
            break;
        int status;
        cr_assert_neq(waitpid(pid, &status, WNOHANG), pid, "the worker exited (status %d)", status);
        usleep(10000);
    }

    static req rs[4];
    submit(&rs[0], true, 3, 6);
    submit(&rs[1], false, 3, 6);
    submit(&rs[2], true, 0, 0);
    submit(&rs[3], true, -1, 4);
    for (int spins = 0; drain(rs, 4) > 0; spins++) {
        cr_assert_lt(spins, 20000, "the requests finish");
        struct pollfd p = {.fd = efd, .events = POLLIN};
        poll(&p, 1, 20);
        uint64_t v;
        if (read(efd, &v, sizeof v) < 0) {
            /* a timeout */
        }
    }
    cr_assert_eq(rs[0].res.finish_reason, SL_FINISH_REASON_LENGTH, "%s", rs[0].res.error);
    cr_assert_eq(rs[0].n, N_PROMPT - 1 + 6);
    for (int i = 0; i + 1 < N_PROMPT; i++) {
        cr_assert_eq(rs[0].toks[i], prompt[i + 1], "entry %d is prompt token %d", i, i + 1);
        cr_assert_eq(rs[0].recs[i].token, prompt[i + 1]);
        cr_assert_leq(rs[0].recs[i].logprob, 0.0f);
        cr_assert_eq(rs[0].recs[i].n_top, 3);
        cr_assert_geq(rs[0].recs[i].top[0].logprob, rs[0].recs[i].logprob);
        cr_assert_eq(rs[2].toks[i], prompt[i + 1]);
        cr_assert_eq(rs[2].recs[i].n_top, 0);
        cr_assert_eq(memcmp(&rs[0].recs[i].logprob, &rs[2].recs[i].logprob, sizeof(float)), 0,
                     "entry %d: the same logprob in either echo request", i);
    }
    cr_assert_eq(rs[1].n, 6);
    cr_assert_arr_eq(rs[0].toks + N_PROMPT - 1, rs[1].toks, 6 * sizeof(int32_t), "generated: the plain request's");
    for (int i = 0; i < 6; i++)
        cr_assert_eq(memcmp(&rs[0].recs[N_PROMPT - 1 + i], &rs[1].recs[i], sizeof rs[1].recs[i]), 0);
    cr_assert_eq(rs[2].res.state, SL_MAILBOX_STATE_FINISHED, "%s", rs[2].res.error);
    cr_assert_eq(rs[2].res.finish_reason, SL_FINISH_REASON_LENGTH);
    cr_assert_eq(rs[2].n, N_PROMPT - 1, "max_tokens 0: the records only");
    cr_assert_eq(rs[3].res.state, SL_MAILBOX_STATE_FAILED);
    cr_assert_str_eq(rs[3].res.error, "the prompt's logprobs (echo) need logprobs >= 0");
    cr_assert_eq(rs[3].n, 0);

    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
    close(efd);
    unlink(model_path);
    rmdir(model_dir);
}
