/* tests/unit/gpu-worker/worker_grammar_test.c: the real worker process
 * (sl_worker_main, CPU backend) over a real segment with a model written by
 * mkmodel with a real tokenizer: a request whose mailbox carries a grammar
 * gets only text the grammar allows and stops when it is complete, next to an
 * unconstrained one; a bad grammar fails its mailbox with "grammar: ...";
 * the segment's grammar counters move. This process plays master and front
 * end, as tools/workerbench does. Skips (with a message) when mkmodel or the
 * test tokenizer is not built in $SLUICE_BUILD_DIR. */
#include <criterion/criterion.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu-worker/worker.h"
#include "model/model.h"
#include "model/tokenizer.h"
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
    snprintf(model_dir, sizeof model_dir, "/tmp/sl_worker_grammar_XXXXXX");
    if (!mkdtemp(model_dir))
        return 0;
    snprintf(model_path, sizeof model_path, "%s/m.gguf", model_dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --preset tiny-llama --type Q4_K --tokenizer '%s' --peak 8 >/dev/null",
             tool, model_path, tokjson);
    return system(cmd) == 0;
}

typedef struct {
    sl_shm_ticket t;
    int32_t toks[512];
    uint32_t n;
    sl_shm_result_info res;
    bool done;
} req;

static sl_shm_t *fe;
static int efd;

static void submit(req *r, const char *grammar, float temperature, uint64_t seed, int max_tokens)
{
    static const int32_t prompt[4] = {1, 415, 2936, 264};
    sl_shm_request q = {.max_tokens = max_tokens, .prompt = prompt, .n_prompt = 4, .grammar = grammar,
                        .grammar_len = grammar ? (uint32_t)strlen(grammar) : 0};
    sl_sampling_params_default(&q.params);
    q.params.temperature = temperature;
    q.params.seed = seed;
    memset(r, 0, sizeof *r);
    cr_assert_eq(sl_shm_submit(fe, &q, &r->t), SL_OK);
}

static int drain(req *rs, int n)
{
    int live = 0;
    for (int i = 0; i < n; i++) {
        req *r = &rs[i];
        if (r->done)
            continue;
        uint32_t got = 0;
        sl_mailbox_state st;
        cr_assert_eq(sl_shm_read_tokens(fe, r->t, r->toks + r->n, NULL, 512 - r->n, &got, &st), SL_OK);
        r->n += got;
        if (st >= SL_MAILBOX_STATE_FINISHED && got == 0) {
            cr_assert_eq(sl_shm_result(fe, r->t, &r->res), SL_OK);
            cr_assert_eq(sl_shm_release(fe, r->t), SL_OK);
            r->done = true;
        } else {
            live++;
        }
    }
    return live;
}

static void text_of(const sl_tokenizer *tok, const req *r, char *out, size_t cap)
{
    size_t n = sl_detokenize(tok, r->toks, r->n, false, out, cap - 1);
    out[n < cap - 1 ? n : cap - 1] = 0;
}

static bool full_match(const char *pattern, const char *text)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    bool ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

Test(worker_grammar, a_mailbox_grammar_constrains_the_real_worker, .timeout = 120)
{
    if (!make_model()) {
        cr_log_warn("skipped: mkmodel or the mistral test tokenizer is not built");
        return;
    }
    static sl_config cfg;
    snprintf(cfg.model, sizeof cfg.model, "%s", model_path);
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    snprintf(cfg.shm_name, sizeof cfg.shm_name, "/sluice-wg-%d", (int)getpid());
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

    static const char digits[] = "root ::= [0-9]{1,5}";
    static const char yesno[] = "root ::= \"yes\" | \"no\"";
    static req rs[5];
    submit(&rs[0], digits, 1.0f, 3, 100);
    submit(&rs[1], NULL, 1.0f, 3, 20);
    submit(&rs[2], yesno, 0.0f, 0, 100);
    submit(&rs[3], "root ::= \"x", 0.0f, 0, 10);
    submit(&rs[4], yesno, 1.5f, 9, 100);
    for (int spins = 0; drain(rs, 5) > 0; spins++) {
        cr_assert_lt(spins, 20000, "the requests finish");
        struct pollfd p = {.fd = efd, .events = POLLIN};
        poll(&p, 1, 100);
        uint64_t v;
        if (read(efd, &v, sizeof v) < 0) {
            /* a timeout */
        }
    }
    sl_model *model;
    sl_tokenizer *tok;
    cr_assert_eq(sl_model_load(model_path, &model, err), SL_OK, "%s", err);
    cr_assert_eq(sl_tokenizer_create(model->gguf, &tok, err), SL_OK, "%s", err);
    char text[2048];
    text_of(tok, &rs[0], text, sizeof text);
    cr_assert(full_match("^[0-9]{1,5}$", text), "digits: \"%s\"", text);
    cr_assert_eq(rs[0].res.state, SL_MAILBOX_STATE_FINISHED, "%s", rs[0].res.error);
    cr_assert_eq(rs[0].res.finish_reason, SL_FINISH_REASON_STOP);
    cr_assert_eq(rs[1].res.finish_reason, SL_FINISH_REASON_LENGTH, "the unconstrained request runs on");
    cr_assert_eq(rs[1].n, 20);
    for (int i = 2; i <= 4; i += 2) {
        text_of(tok, &rs[i], text, sizeof text);
        cr_assert(strcmp(text, "yes") == 0 || strcmp(text, "no") == 0, "request %d: \"%s\"", i, text);
        cr_assert_eq(rs[i].res.finish_reason, SL_FINISH_REASON_STOP);
    }
    cr_assert_eq(rs[3].res.state, SL_MAILBOX_STATE_FAILED);
    cr_assert(strncmp(rs[3].res.error, "grammar: ", 9) == 0, "%s", rs[3].res.error);
    cr_assert_eq(rs[3].n, 0);
    cr_assert_eq(sl_shm_counter_get(m, SL_COUNTER_GRAMMAR_REQUESTS), 3, "three grammars compiled");
    cr_assert_gt(sl_shm_counter_get(m, SL_COUNTER_GRAMMAR_MASK_NS), 0);

    sl_tokenizer_destroy(tok);
    sl_model_destroy(model);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
    close(efd);
    unlink(model_path);
    rmdir(model_dir);
}
