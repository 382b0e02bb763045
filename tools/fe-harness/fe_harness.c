/* tools/fe-harness: a test launcher for the front end before (and beside) the
 * real master and worker. It does the master's setup in small (segment, one
 * SO_REUSEPORT socket and one eventfd per slot, fork N sl_frontend_main
 * children) and runs an in-process ECHO worker: each request's "generation" is
 * its own prompt tokens, then EOS, one token per --token-ms (after, for a
 * request with echo_logprobs, its prompt tokens 1.. as their own scored
 * entries, as shm.h asks of a worker). It prints
 * `port=NNNN` on stdout once serving and stops everything on SIGTERM/SIGINT
 * (front ends first, the worker last, so their drains can finish).
 * Trade-off: deterministic and instant instead of a model, so the HTTP layer
 * is tested alone; the integration tests of the real server cover the rest. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frontend/server.h"
#include "model/gguf.h"
#include "shared/config.h"
#include "shared/shm.h"

#define MAX_FE 16

typedef struct {
    sl_shm_ticket t;
    int32_t *prompt;
    uint32_t n_prompt, pos;     /* next prompt token to echo */
    uint32_t scored;            /* echo_logprobs: prompt tokens 1..n_prompt-1 scored so far (they lead the ring) */
    bool echo_logprobs;
    int32_t max_tokens;
    int32_t n_logprobs;
    uint32_t n_out;
    bool eos_sent;
    uint64_t next_ns;
} echo_req;

static volatile sig_atomic_t g_stop;
static void on_term(int sig) { (void)sig; g_stop = 1; }

static void usage(void)
{
    fprintf(stderr,
            "usage: fe-harness -m MODEL [-p PORT] [-n FRONTENDS] [--mode echo] [--api-key K]\n"
            "  [--max-body N] [--max-response N] [--ctx-size N] [--mailboxes N] [--token-ring N] [--token-ms N]\n"
            "  [--first-token-ms N] [--fail-after N] [--ready-after-ms N] [--write-timeout-ms N]\n"
            "  [--drain-delay-s N] [--drain-timeout-s N] [--chat-template T] [--model-alias A]...\n"
            "  [--accept-any-model] [--cors-origin O]... [--log-format text|json]\n"
            "  [--default-max-tokens N] [--max-prompt-tokens N] [--tokenize-threads N] [--no-logprobs]\n");
    exit(2);
}

/* A repeated list option (--model-alias, --cors-origin) adds to its list, as
 * `sluice serve` does; the items are not checked here. */
static void list_add(char *list, size_t cap, const char *v)
{
    size_t n = strlen(list);
    snprintf(list + n, cap - n, "%s%s", n ? "," : "", v);
}

static int listen_socket(const char *host, uint32_t port, uint32_t *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 512) < 0) {
        fprintf(stderr, "fe-harness: bind/listen %s:%" PRIu32 ": %s\n", host, port, strerror(errno));
        exit(1);
    }
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *bound = ntohs(a.sin_port);
    return fd;
}

int main(int argc, char **argv)
{
    static sl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
    cfg.n_frontends = 1;
    cfg.max_body = 1 << 20;
    cfg.idle_timeout_ms = 10000;
    cfg.write_timeout_ms = 10000;
    cfg.drain_delay_s = 0;
    cfg.drain_timeout_s = 10;
    cfg.heartbeat_timeout_ms = 2000;
    cfg.queue_depth = 64;
    cfg.tokenize_threads = 1;
    uint32_t mailboxes = 64, token_ring = 256, token_ms = 0, first_ms = 0, fail_after = 0, ready_after_ms = 0;
    int logprobs = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v != NULL && ++i)
        if (OPT("-m")) snprintf(cfg.model, sizeof cfg.model, "%s", v);
        else if (OPT("-p")) cfg.port = (uint32_t)atoi(v);
        else if (OPT("-n")) cfg.n_frontends = (uint32_t)atoi(v);
        else if (OPT("--mode")) { if (strcmp(v, "echo") != 0) usage(); }
        else if (OPT("--api-key")) snprintf(cfg.api_key, sizeof cfg.api_key, "%s", v);
        else if (OPT("--max-body")) cfg.max_body = strtoull(v, NULL, 10);
        else if (OPT("--max-response")) cfg.max_response = strtoull(v, NULL, 10);
        else if (OPT("--ctx-size")) cfg.ctx_size = (uint32_t)atoi(v);
        else if (OPT("--mailboxes")) mailboxes = (uint32_t)atoi(v);
        else if (OPT("--token-ring")) token_ring = (uint32_t)atoi(v);
        else if (OPT("--token-ms")) token_ms = (uint32_t)atoi(v);
        else if (OPT("--first-token-ms")) first_ms = (uint32_t)atoi(v);
        else if (OPT("--fail-after")) fail_after = (uint32_t)atoi(v);
        else if (OPT("--ready-after-ms")) ready_after_ms = (uint32_t)atoi(v);
        else if (OPT("--write-timeout-ms")) cfg.write_timeout_ms = (uint32_t)atoi(v);
        else if (OPT("--drain-delay-s")) cfg.drain_delay_s = (uint32_t)atoi(v);
        else if (OPT("--drain-timeout-s")) cfg.drain_timeout_s = (uint32_t)atoi(v);
        else if (OPT("--chat-template")) snprintf(cfg.chat_template, sizeof cfg.chat_template, "%s", v);
        else if (OPT("--model-alias")) list_add(cfg.model_alias, sizeof cfg.model_alias, v);
        else if (OPT("--cors-origin")) list_add(cfg.cors_origin, sizeof cfg.cors_origin, v);
        else if (OPT("--log-format")) snprintf(cfg.log_format, sizeof cfg.log_format, "%s", v);
        else if (strcmp(a, "--accept-any-model") == 0) cfg.accept_any_model = 1;
        else if (OPT("--default-max-tokens")) cfg.default_max_tokens = (uint32_t)atoi(v);
        else if (OPT("--max-prompt-tokens")) cfg.max_prompt_tokens = (uint32_t)atoi(v);
        else if (OPT("--tokenize-threads")) cfg.tokenize_threads = (uint32_t)atoi(v);
        else if (strcmp(a, "--no-logprobs") == 0) logprobs = 0;
        else usage();
#undef OPT
    }
    if (cfg.model[0] == '\0' || cfg.n_frontends < 1 || cfg.n_frontends > MAX_FE)
        usage();

    /* What the echo worker needs from the model: EOS, vocabulary size, context. */
    char err[SL_ERR_LEN];
    sl_gguf *g = NULL;
    if (sl_gguf_open(cfg.model, &g, err) < 0) {
        fprintf(stderr, "fe-harness: %s\n", err);
        return 2;
    }
    int64_t eos = -1, n_ctx = 0;
    sl_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &eos);
    sl_gguf_arr toks;
    int64_t n_vocab = sl_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) == SL_OK ? (int64_t)toks.n : 1;
    sl_gguf_str arch;
    if (sl_gguf_get_str(g, "general.architecture", &arch) == SL_OK) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        sl_gguf_get_int(g, key, &n_ctx);
    }
    sl_gguf_close(g);
    if (cfg.ctx_size)
        n_ctx = cfg.ctx_size;

    snprintf(cfg.shm_name, sizeof cfg.shm_name, "/sluice-feh-%d", (int)getpid());
    sl_shm_limits lim;
    sl_shm_limits_default(&lim);
    lim.n_slots = cfg.n_frontends;
    lim.n_mailboxes = mailboxes;
    lim.token_ring_entries = token_ring;
    lim.submit_ring_entries = 64;
    lim.prompt_tokens_max = (uint32_t)(n_ctx > 0 && n_ctx < 32768 ? n_ctx : 32768);
    lim.prompt_arena_blocks = 512;
    lim.logprobs = (uint32_t)logprobs;
    sl_shm_t *m = sl_shm_create(cfg.shm_name, &lim, err);
    if (m == NULL) {
        fprintf(stderr, "fe-harness: %s\n", err);
        return 1;
    }
    int lfd[MAX_FE], efd[MAX_FE];
    uint32_t port = cfg.port;
    for (uint32_t i = 0; i < cfg.n_frontends; i++) {
        lfd[i] = listen_socket(cfg.host, port, &port);
        efd[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
    cfg.port = port;
    sl_shm_set_eventfds(m, efd, cfg.n_frontends);

    /* The worker handle exists before the children, so /ready sees LOADING at once. */
    sl_shm_t *w = sl_shm_attach(cfg.shm_name, SL_SHM_ROLE_WORKER, 0, err);
    if (w == NULL) {
        fprintf(stderr, "fe-harness: %s\n", err);
        return 1;
    }
    sl_shm_set_eventfds(w, efd, cfg.n_frontends);
    sl_shm_set_worker_state(w, SL_WORKER_STATE_LOADING, NULL);

    pid_t pids[MAX_FE];
    for (uint32_t i = 0; i < cfg.n_frontends; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            for (uint32_t k = 0; k < cfg.n_frontends; k++)
                if (k != i) { close(lfd[k]); close(efd[k]); }
            sl_shm_detach(w);
            sl_shm_detach(m);   /* the child's copy of the mapping only; the parent keeps the segment */
            int rc = sl_frontend_main(&cfg, i, lfd[i], efd[i]);
            exit(rc);
        }
    }
    for (uint32_t i = 0; i < cfg.n_frontends; i++)
        close(lfd[i]);   /* else the kernel keeps queueing connections nobody accepts */

    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("port=%" PRIu32 "\n", port);
    fflush(stdout);

    char snap[512];
    uint64_t t_start = sl_shm_now_ns();
    bool ready = false;
    echo_req *reqs = calloc(mailboxes, sizeof *reqs);
    uint32_t n_reqs = 0;
    bool stopping = false;
    uint32_t alive = cfg.n_frontends;
    int exit_code = 0;
    while (alive > 0) {
        uint64_t now = sl_shm_now_ns();
        if (g_stop && !stopping) {
            stopping = true;
            for (uint32_t i = 0; i < cfg.n_frontends; i++)
                kill(pids[i], SIGTERM);
        }
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            alive--;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            fprintf(stderr, "fe-harness: front end pid %d exited with %d\n", (int)p, code);
            if (code != 0)
                exit_code = 1;
        }
        if (!ready && now - t_start >= (uint64_t)ready_after_ms * 1000000ull) {
            ready = true;
            sl_shm_set_worker_state(w, SL_WORKER_STATE_READY, "echo");
        }
        sl_shm_heartbeat(w, now, 0);
        snprintf(snap, sizeof snap,
                 "{\"kind\":\"echo\",\"backend\":\"none\",\"kv_blocks_total\":%u,\"kv_blocks_used\":%u,"
                 "\"in_flight_now\":%u,\"token_ms\":%u}",
                 mailboxes, n_reqs, n_reqs, token_ms);
        sl_shm_config_publish(w, snap, strlen(snap));

        sl_shm_ticket t;
        while (ready && n_reqs < mailboxes && sl_shm_worker_pop(w, &t) == SL_OK) {
            echo_req *r = &reqs[n_reqs];
            memset(r, 0, sizeof *r);
            sl_sampling_params sp;
            int32_t mt, mn;
            uint32_t ie, np;
            uint64_t rid;
            if (sl_shm_request_get(w, t, &sp, &mt, &mn, &ie, &rid, &np) != SL_OK)
                continue;
            r->t = t;
            r->prompt = malloc(np * sizeof *r->prompt);
            sl_shm_prompt_copy(w, t, 0, np, r->prompt);
            r->n_prompt = np;
            r->max_tokens = mt;
            r->n_logprobs = sp.n_logprobs;
            r->echo_logprobs = sl_shm_request_echo(w, t) != 0;
            r->scored = 1;
            r->next_ns = now + (uint64_t)first_ms * 1000000ull;
            n_reqs++;
        }
        for (uint32_t i = 0; i < n_reqs;) {
            echo_req *r = &reqs[i];
            bool end = false;
            sl_finish_reason why = SL_FINISH_REASON_STOP;
            const char *error = NULL;
            if (sl_shm_worker_cancelled(w, r->t)) {
                end = true;
                why = SL_FINISH_REASON_CANCELLED;
            }
            while (!end && now >= r->next_ns) {
                if (fail_after > 0 && r->n_out >= fail_after) {
                    end = true;
                    why = SL_FINISH_REASON_ERROR;
                    error = "injected failure (fe-harness --fail-after)";
                    break;
                }
                /* echo_logprobs: the prompt's own entries first (shm.h's contract), then the echo */
                bool scoring = r->echo_logprobs && r->scored < r->n_prompt;
                if (!scoring && (int32_t)r->n_out >= r->max_tokens) { end = true; why = SL_FINISH_REASON_LENGTH; break; }
                if (!scoring && r->eos_sent) { end = true; break; }
                int32_t tok = scoring ? r->prompt[r->scored] : r->pos < r->n_prompt ? r->prompt[r->pos] : (int32_t)eos;
                if (tok < 0) { end = true; break; }
                sl_logprob_record rec = {.token = tok, .logprob = -0.25f};
                if (r->n_logprobs > 0) {
                    rec.n_top = r->n_logprobs;
                    rec.top[0].token = tok;
                    rec.top[0].logprob = -0.25f;
                    for (int k = 1; k < rec.n_top; k++) {
                        rec.top[k].token = (int32_t)((tok + k) % n_vocab);
                        rec.top[k].logprob = -1.0f - (float)k;
                    }
                }
                sl_status rc = sl_shm_worker_push(w, r->t, tok, &rec);
                if (rc == SL_AGAIN)
                    break;          /* the ring is full: this sequence pauses until the front end reads */
                if (rc != SL_OK) { end = true; why = SL_FINISH_REASON_CANCELLED; break; }
                if (scoring) { r->scored++; continue; }
                r->n_out++;
                if (r->pos < r->n_prompt) r->pos++; else r->eos_sent = true;
                if (token_ms > 0) { r->next_ns = now + (uint64_t)token_ms * 1000000ull; }
            }
            if (end) {
                sl_shm_worker_finish(w, r->t, why, error);
                free(r->prompt);
                reqs[i] = reqs[--n_reqs];
                continue;
            }
            i++;
        }
        sl_shm_worker_flush_wakeups(w);
        sl_shm_worker_wait(w, 2000000ull);   /* 2 ms: token pacing and heartbeats */
    }
    for (uint32_t i = 0; i < n_reqs; i++)
        free(reqs[i].prompt);
    free(reqs);
    sl_shm_detach(w);
    sl_shm_destroy(m);
    for (uint32_t i = 0; i < cfg.n_frontends; i++)
        close(efd[i]);
    return exit_code;
}
