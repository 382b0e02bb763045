/* frontend/server.c: the front-end process: h2o setup, the event loop, signals,
 * the worker's wakeups, the 250 ms tick and the graceful drain.
 * Runs in each front-end child (sl_frontend_main). One h2o evloop thread does
 * every request's work, except rendering and tokenizing large bodies, which
 * --tokenize-threads pool threads do (jobs.c). The trade-off: a single loop
 * thread per process keeps streams lock-free, and scaling is by more processes
 * sharing the port with SO_REUSEPORT (the master's n_frontends).
 * It calls routes.c (route table, body limits) and stream.c (wake, tick,
 * drain); nothing calls back into it.
 * libh2o 2.2.5 quirks this file works around: h2o_evloop_run returns -1 on
 * EINTR (signals come through a blocked-signal signalfd instead), idle HTTP/1
 * disconnects are invisible because h2o stops reading the socket once the
 * request is parsed (the tick probes them, stream.c), and h2o_context_dispose
 * asserts that no timeout entry is linked (fe_dispose unlinks the tick and
 * HTTP/2's graceful-shutdown timer first). */
#include "shared/alloc.h"
#include "frontend/api_json.h"
#include "frontend/server.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "frontend/reasoning.h"
#include "frontend/server_internal.h"
#include "shared/build_info.h"

/* ================================================================ event sources */

static sl_fe *g_fe;   /* the process's one front end; h2o callbacks carry no user pointer */

static void on_accept(h2o_socket_t *listener, const char *err)
{
    sl_fe *fe = g_fe;
    if (err != NULL)
        return;
    errno = 0;
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (sock != NULL) {
        sl_fe_conn_accept(fe, sock);
        return;
    }
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors (or kernel memory): the connection stays in the
         * backlog and the listener stays readable, so epoll (level-triggered)
         * would call us again at once, forever. Stop listening for a while;
         * connections closing meanwhile make room. */
        int e = errno;
        h2o_socket_read_stop(listener);
        fe->accept_paused = true;
        h2o_timeout_link(fe->loop, &fe->accept_timeout, &fe->accept_entry);
        uint64_t now = sl_shm_now_ns();
        fe->accept_pauses++;
        if (now - fe->accept_pause_logged_ns > 10ull * 1000000000ull || fe->accept_pause_logged_ns == 0) {
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": accept: %s with %" PRIu32 " connections open; "
                    "not accepting for %d ms (%" PRIu64 " pauses so far)\n", fe->slot, strerror(e), fe->n_conns,
                    SL_FE_ACCEPT_PAUSE_MS, fe->accept_pauses);
            fe->accept_pause_logged_ns = now;
        }
    }
    /* else EAGAIN: another front end won the race */
}

static void on_accept_resume(h2o_timeout_entry_t *entry)
{
    sl_fe *fe = g_fe;
    (void)entry;
    fe->accept_paused = false;
    if (fe->listener != NULL)
        h2o_socket_read_start(fe->listener, on_accept);
}

static void on_wake(h2o_socket_t *sock, const char *err)
{
    sl_fe *fe = g_fe;
    (void)err;
    uint64_t v;
    /* epoll is level-triggered here: an undrained eventfd would spin the loop. */
    while (read(h2o_socket_get_fd(sock), &v, sizeof v) == (ssize_t)sizeof v) {
    }
    sl_fe_streams_retry_releases(fe);
    sl_fe_streams_pump_all(fe);
    sl_fe_conn_rearm_all(fe);
}

static void close_listener(sl_fe *fe)
{
    if (fe->listener == NULL)
        return;
    if (h2o_timeout_is_linked(&fe->accept_entry))
        h2o_timeout_unlink(&fe->accept_entry);
    h2o_socket_read_stop(fe->listener);
    h2o_socket_close(fe->listener);
    fe->listener = NULL;
    h2o_context_request_shutdown(&fe->ctx);
    /* Idle keep-alive connections would otherwise live out the full idle timeout. */
    fe->ctx.http1.req_timeout.timeout = 100;
}

static void on_signal(h2o_socket_t *sock, const char *err)
{
    sl_fe *fe = g_fe;
    (void)err;
    struct signalfd_siginfo si;
    while (read(h2o_socket_get_fd(sock), &si, sizeof si) == (ssize_t)sizeof si) {
        if (!fe->draining) {
            fe->draining = true;
            fe->drain_start_ns = sl_shm_now_ns();
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": signal %u, draining (delay %" PRIu32 " s, timeout %" PRIu32 " s)\n",
                    fe->slot, si.ssi_signo, fe->cfg->drain_delay_s, fe->cfg->drain_timeout_s);
        } else if (si.ssi_signo == SIGINT) {
            fe->stop_loop = true;   /* a second Ctrl-C: stop now */
        }
    }
    sl_fe_conn_rearm_all(fe);
}

static void on_tick(h2o_timeout_entry_t *entry)
{
    sl_fe *fe = g_fe;
    (void)entry;
    uint64_t now = sl_shm_now_ns();
    sl_fe_streams_retry_releases(fe);
    sl_fe_streams_tick(fe, now);
    sl_fe_conn_tick(fe, now);
    if (fe->draining) {
        uint64_t since = now - fe->drain_start_ns;
        uint64_t delay = (uint64_t)fe->cfg->drain_delay_s * 1000000000ull;
        uint64_t deadline = delay + (uint64_t)fe->cfg->drain_timeout_s * 1000000000ull;
        if (since >= delay)
            close_listener(fe);
        if (since >= deadline && fe->n_streams > 0)
            sl_fe_streams_abort_all(fe, "the server is shutting down");
        if (since >= deadline && fe->n_jobs > 0)
            sl_fe_jobs_abort_all(fe, "The server is shutting down.");
        if (fe->listener == NULL && fe->n_streams == 0 && fe->n_jobs == 0 &&
            (fe->n_conns == 0 || since >= deadline))
            fe->stop_loop = true;
    }
    sl_fe_conn_rearm_all(fe);
    h2o_timeout_link(fe->loop, &fe->tick_timeout, &fe->tick_entry);
}

/* ================================================================ model */

static char *dup_token_text(const sl_tokenizer *t, int32_t id)
{
    size_t len = 0;
    const char *s = id >= 0 ? sl_tokenizer_text(t, id, &len) : NULL;
    char *out = sl_malloc(len + 1);
    if (out == NULL)
        return NULL;
    if (s != NULL)
        memcpy(out, s, len);
    out[len] = '\0';
    return out;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *p = sl_realloc(buf, cap);
            if (p == NULL) { free(buf); fclose(f); return NULL; }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Opens the GGUF for its metadata (the pages are shared with the worker's
 * mapping), builds the tokenizer and compiles the template. */
static sl_status load_model(sl_fe *fe, char err[SL_ERR_LEN])
{
    const sl_config *cfg = fe->cfg;
    sl_status rc = sl_gguf_open(cfg->model, &fe->gguf, err);
    if (rc < 0)
        return rc;
    if ((rc = sl_tokenizer_create(fe->gguf, &fe->tok, err)) < 0)
        return rc;
    fe->n_vocab = sl_tokenizer_n_vocab(fe->tok);
    fe->bos_text = dup_token_text(fe->tok, sl_tokenizer_bos(fe->tok));
    fe->eos_text = dup_token_text(fe->tok, sl_tokenizer_eos(fe->tok));
    if (fe->bos_text == NULL || fe->eos_text == NULL)
        return SL_ENOMEM;

    int64_t n_ctx = 0;
    sl_gguf_str arch;
    if (sl_gguf_get_str(fe->gguf, "general.architecture", &arch) == SL_OK && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        sl_gguf_get_int(fe->gguf, key, &n_ctx);
    }
    if (cfg->ctx_size > 0)
        n_ctx = cfg->ctx_size;
    if (n_ctx <= 1) {
        snprintf(err, SL_ERR_LEN, "%.200s: no context length (set --ctx-size)", cfg->model);
        return SL_EFORMAT;
    }
    fe->n_ctx = (uint32_t)(n_ctx > UINT32_MAX ? UINT32_MAX : n_ctx);
    fe->max_prompt = fe->n_ctx - 1;     /* room for one generated token at least */
    if (cfg->max_prompt_tokens > 0 && cfg->max_prompt_tokens < fe->max_prompt)
        fe->max_prompt = cfg->max_prompt_tokens;
    const sl_shm_limits *lim = sl_shm_get_limits(fe->shm);
    if (lim->prompt_tokens_max < fe->max_prompt)
        fe->max_prompt = lim->prompt_tokens_max;

    /* The template: the override (a built-in name, else a file), else the model's. */
    const char *src = NULL;
    char *owned = NULL;
    size_t len = 0;
    if (cfg->chat_template[0] != '\0') {
        src = sl_chat_template_builtin(cfg->chat_template);
        if (src != NULL) {
            len = strlen(src);
        } else if ((owned = read_file(cfg->chat_template, &len)) != NULL) {
            src = owned;
        } else {
            snprintf(err, SL_ERR_LEN, "chat template %.150s: neither a built-in name nor a readable file (%s)",
                     cfg->chat_template, strerror(errno));
            return SL_EINVAL;
        }
    } else {
        sl_gguf_str s;
        if (sl_gguf_get_str(fe->gguf, "tokenizer.chat_template", &s) == SL_OK) {
            src = s.ptr;
            len = s.len;
        } else {
            /* No template in the model: the built-in for its architecture. */
            sl_gguf_str arch = {0};
            const char *name = sl_gguf_get_str(fe->gguf, "general.architecture", &arch) == SL_OK
                                   ? sl_chat_template_default_name(arch.ptr, arch.len)
                                   : sl_chat_template_default_name(NULL, 0);
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": %s has no chat template; using %s\n", fe->slot,
                    cfg->model, name);
            src = sl_chat_template_builtin(name);
            len = strlen(src);
        }
    }
    rc = sl_chat_template_compile(src, len, &fe->tmpl, err);
    /* What the template's model writes for calls and thoughts, read off its source once. */
    fe->tool_format = sl_tool_format_detect(src, len);
    /* The detokenizer hides control tokens, and these are how the format
     * marks a call: a request with tools sees them as text (stream.c). */
    static const char *const markers[][2] = {
        [SL_TOOL_FORMAT_LLAMA3] = {"<|python_tag|>", NULL},
        [SL_TOOL_FORMAT_MISTRAL] = {"[TOOL_CALLS]", "[ARGS]"},
    };
    for (int i = 0; i < 2; i++) {
        const char *m = (size_t)fe->tool_format < sizeof markers / sizeof markers[0] ? markers[fe->tool_format][i]
                                                                                    : NULL;
        int32_t id = m ? sl_tokenizer_find(fe->tok, m, strlen(m)) : -1;
        fe->tool_markers[i] = id >= 0 && sl_tokenizer_attr(fe->tok, id) == SL_TOKEN_ATTR_CONTROL ? id : -1;
    }
    fe->template_thinks = sl_reasoning_template_thinks(src, len) || sl_tokenizer_find(fe->tok, "<think>", 7) >= 0;
    free(owned);
    if (rc < 0)
        return rc;

    const char *base = strrchr(cfg->model, '/');
    if ((rc = sl_api_models_init(&fe->models, cfg->model_alias, base ? base + 1 : cfg->model,
                                 cfg->accept_any_model != 0, err)) < 0)
        return rc;
    fe->model_name = fe->models.names[0];
    sl_api_models_fingerprint(fe->gguf, sl_build_version, sl_build_commit, fe->fingerprint);
    return SL_OK;
}

/* ================================================================ main */

static void fe_dispose(sl_fe *fe, bool h2o_ready)
{
    if (h2o_ready) {
        if (h2o_timeout_is_linked(&fe->tick_entry))
            h2o_timeout_unlink(&fe->tick_entry);
        if (h2o_timeout_is_linked(&fe->accept_entry))
            h2o_timeout_unlink(&fe->accept_entry);
        if (h2o_timeout_is_linked(&fe->ctx.http2._graceful_shutdown_timeout))
            h2o_timeout_unlink(&fe->ctx.http2._graceful_shutdown_timeout);
        if (fe->listener != NULL) {
            h2o_socket_read_stop(fe->listener);
            h2o_socket_close(fe->listener);
        }
        sl_fe_jobs_destroy(fe);   /* joins the pool before its eventfd closes */
        h2o_socket_read_stop(fe->wake_sock);
        h2o_socket_close(fe->wake_sock);
        h2o_socket_read_stop(fe->sig_sock);
        h2o_socket_close(fe->sig_sock);
        /* Let the loop run the closes (sockets are freed on the next pass). */
        h2o_evloop_run(fe->loop, 0);
        h2o_timeout_dispose(fe->loop, &fe->tick_timeout);
        h2o_timeout_dispose(fe->loop, &fe->accept_timeout);
        h2o_context_dispose(&fe->ctx);
        h2o_evloop_destroy(fe->loop);
    }
    h2o_config_dispose(&fe->config);
    sl_fe_streams_retry_releases(fe);
    free(fe->pending);
    sl_chat_template_destroy(fe->tmpl);
    sl_tokenizer_destroy(fe->tok);
    sl_gguf_close(fe->gguf);
    free(fe->bos_text);
    free(fe->eos_text);
    sl_shm_detach(fe->shm);
}

int sl_frontend_main(const sl_config *cfg, uint32_t slot, int listen_fd, int wake_fd)
{
    static sl_fe fe_storage;
    sl_fe *fe = &fe_storage;
    memset(fe, 0, sizeof *fe);
    g_fe = fe;
    fe->cfg = cfg;
    fe->slot = slot;
    fe->started = (int64_t)time(NULL);
    char err[SL_ERR_LEN] = "";
    sl_alloc_fault_init("frontend");
    sl_api_json_use_sl_alloc();

    signal(SIGPIPE, SIG_IGN);   /* h2o writes with writev; a gone client must not kill us */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": signalfd: %s\n", slot, strerror(errno));
        return SL_FRONTEND_EXIT_FAILED;
    }

    fe->shm = sl_shm_attach(cfg->shm_name, SL_SHM_ROLE_FRONTEND, slot, err);
    if (fe->shm == NULL) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": attach %s: %s\n", slot, cfg->shm_name, err);
        close(sfd);
        return SL_FRONTEND_EXIT_CONFIG;
    }
    if (load_model(fe, err) < 0) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": %s\n", slot, err[0] ? err : "cannot load the model");
        h2o_config_init(&fe->config);   /* so fe_dispose's config dispose is valid */
        fe_dispose(fe, false);
        close(sfd);
        return SL_FRONTEND_EXIT_CONFIG;
    }

    if (cfg->log_format[0] != '\0' && strcmp(cfg->log_format, "text") != 0 && strcmp(cfg->log_format, "json") != 0) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": --log-format: '%s' is not text or json\n", slot, cfg->log_format);
        h2o_config_init(&fe->config);   /* so fe_dispose's config dispose is valid */
        fe_dispose(fe, false);
        close(sfd);
        return SL_FRONTEND_EXIT_CONFIG;
    }
    fe->log_json = strcmp(cfg->log_format, "json") == 0;
    if (cfg->reasoning_format[0] != '\0' && strcmp(cfg->reasoning_format, "separate") != 0 &&
        strcmp(cfg->reasoning_format, "inline") != 0) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": --reasoning-format: '%s' is not separate or inline\n", slot,
                cfg->reasoning_format);
        h2o_config_init(&fe->config);
        fe_dispose(fe, false);
        close(sfd);
        return SL_FRONTEND_EXIT_CONFIG;
    }
    fe->reasoning_inline = strcmp(cfg->reasoning_format, "inline") == 0;
    if (sl_api_cors_init(&fe->cors, cfg->cors_origin, err) < 0) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": %s\n", slot, err);
        h2o_config_init(&fe->config);
        fe_dispose(fe, false);
        close(sfd);
        return SL_FRONTEND_EXIT_CONFIG;
    }
    fe->metrics_vllm = strcmp(cfg->metrics_names, "vllm") == 0;   /* master/config.c checked the value */

    h2o_config_init(&fe->config);
    /* Above the configured limit, so that routes.c answers bodies just over
     * it with a JSON 413 (its "body limit" section says why and how far). */
    fe->config.max_request_entity_size = sl_fe_routes_h2o_body_limit(sl_fe_routes_body_limit(cfg));
    if (cfg->idle_timeout_ms > 0)
        fe->config.http1.req_timeout = cfg->idle_timeout_ms;
    fe->config.http1.upgrade_to_http2 = 0;   /* HTTP/1.1 only: 2.2.5's HTTP/2 lacks the Rapid Reset fix */
    fe->config.server_name = h2o_iovec_init(H2O_STRLIT("sluice"));
    h2o_hostconf_t *host = h2o_config_register_host(&fe->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    sl_fe_routes_register(fe, host);

    fe->loop = h2o_evloop_create();   /* after fork: it owns an epoll fd */
    h2o_context_init(&fe->ctx, fe->loop, &fe->config);
    fe->accept_ctx.ctx = &fe->ctx;
    fe->accept_ctx.hosts = fe->config.hosts;

    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    fcntl(wake_fd, F_SETFL, fcntl(wake_fd, F_GETFL) | O_NONBLOCK);
    fe->listener = h2o_evloop_socket_create(fe->loop, listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(fe->listener, on_accept);
    fe->wake_sock = h2o_evloop_socket_create(fe->loop, wake_fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(fe->wake_sock, on_wake);
    fe->sig_sock = h2o_evloop_socket_create(fe->loop, sfd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(fe->sig_sock, on_signal);
    h2o_timeout_init(fe->loop, &fe->accept_timeout, SL_FE_ACCEPT_PAUSE_MS);
    fe->accept_entry.cb = on_accept_resume;
    h2o_timeout_init(fe->loop, &fe->tick_timeout, SL_FE_TICK_MS);
    fe->tick_entry.cb = on_tick;
    h2o_timeout_link(fe->loop, &fe->tick_timeout, &fe->tick_entry);
    sl_fe_jobs_create(fe);

    fprintf(stderr, "sluice-fe slot=%" PRIu32 ": serving %s (ctx %" PRIu32 ", prompt <= %" PRIu32 " tokens)\n",
            slot, fe->model_name, fe->n_ctx, fe->max_prompt);
    while (!fe->stop_loop)
        h2o_evloop_run(fe->loop, INT32_MAX);   /* -1 on EINTR is fine: the flag decides */

    bool clean = fe->n_conns == 0;
    if (!clean) {
        /* Connections outlived the deadline: h2o_context_dispose would assert on
         * their timers. The process is ending; the kernel closes them. */
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": drain deadline with %" PRIu32 " connections open\n",
                slot, fe->n_conns);
        sl_fe_streams_retry_releases(fe);
        /* The pool may still hold an orphaned job reading the tokenizer: the
         * threads stay (not joined) and end with the process. */
        sl_shm_detach(fe->shm);
        return SL_FRONTEND_EXIT_OK;
    }
    fe_dispose(fe, true);
    fprintf(stderr, "sluice-fe slot=%" PRIu32 ": drained\n", slot);
    return SL_FRONTEND_EXIT_OK;
}
