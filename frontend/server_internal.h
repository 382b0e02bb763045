/* frontend/server_internal.h: what the server files (server.c, routes.c,
 * generate.c, stream.c, choice.c, respond.c) share inside one front-end
 * process. Not a public contract: only these files include it.
 * Layering: calls point one way, server.c -> routes.c -> generate.c ->
 *            stream.c -> respond.c; stream.c and generate.c also call
 *            choice.c (choice.h: one choice of a request; it calls nothing
 *            above it); server.c also calls stream.c (wake, tick,
 *            drain), jobs.c (pool, drain) and conn.c (accept, rearm),
 *            routes.c calls conn.c (each request), routes.c and generate.c
 *            call jobs.c (which calls back through each job's done), and
 *            routes.c, generate.c, jobs.c and conn.c call respond.c. The
 *            declarations below are grouped by the file defining them,
 *            lowest layer first.
 * Where:     one sl_fe per process. Every function here runs on the h2o
 *            event loop, except a job's work function, which runs on a
 *            tokenize-pool thread (jobs.c) and reads only what is fixed
 *            after start.
 * Ownership: sl_fe owns the shm handle, the GGUF reader, the tokenizer, the
 *            template and every h2o object; a stream (sl_fe_stream, stream.c)
 *            lives in its request's pool and is freed by the pool's dispose. */
#ifndef SL_FRONTEND_SERVER_INTERNAL_H
#define SL_FRONTEND_SERVER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <h2o.h>

#include "frontend/api_cors.h"
#include "frontend/api_error.h"
#include "frontend/api_metrics.h"
#include "frontend/api_models.h"
#include "frontend/api_request.h"
#include "frontend/tool_calls.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "shared/config.h"
#include "shared/shm.h"

#define SL_FE_TICK_MS 250            /* disconnect probe, pings, write timeouts, drain */
#define SL_FE_PING_MS 5000           /* ": ping" while a stream has nothing to send */
#define SL_FE_REQUEST_ID_MAX 64      /* longest X-Request-ID echoed; longer ones are replaced */
#define SL_FE_ACCEPT_PAUSE_MS 100    /* accept stops this long on EMFILE/ENFILE */
#define SL_FE_BODY_MARGIN_MIN (1u << 20) /* h2o's body limit is max_body + max(max_body, this) */
#define SL_FE_MAX_RESPONSE_DEFAULT (64ull << 20) /* --max-response when the config leaves it 0 */
#define SL_FE_JOBS_INLINE_MAX (64u << 10) /* bodies under this render and tokenize on the loop */
#define SL_FE_JOBS_THREADS_MAX 16        /* --tokenize-threads at most */

/* Response bodies longer than this are refused (400 response_too_large). */
static inline uint64_t sl_fe_max_response(const sl_config *cfg)
{
    return cfg->max_response > 0 ? cfg->max_response : SL_FE_MAX_RESPONSE_DEFAULT;
}

typedef struct sl_fe_stream sl_fe_stream;
typedef struct sl_fe_conn sl_fe_conn;
typedef struct sl_fe_jobs sl_fe_jobs;

typedef struct {
    /* configuration and model (read-only after start) */
    const sl_config *cfg;
    uint32_t slot;
    sl_shm_t *shm;
    sl_gguf *gguf;
    sl_tokenizer *tok;
    sl_chat_template *tmpl;
    char *bos_text, *eos_text;       /* token texts the template sees ("" when none) */
    uint32_t n_ctx;                  /* prompt + output tokens at most */
    uint32_t max_prompt;             /* prompt tokens at most (<= n_ctx) */
    int32_t n_vocab;
    sl_api_models models;            /* the names requests may give (--model-alias, --accept-any-model) */
    const char *model_name;          /* models.names[0]: what responses report */
    char fingerprint[SL_API_FINGERPRINT_LEN];   /* responses' system_fingerprint (build and model) */
    sl_api_cors cors;                /* --cors-origin */
    sl_tool_format tool_format;      /* how the template's model writes tool calls (tool_calls.h) */
    int32_t tool_markers[2];         /* control tokens of that format ([TOOL_CALLS], [ARGS],
                                        <|python_tag|>) shown as text to the call parser; -1 = none */
    bool template_thinks;            /* the model writes <think> blocks (template or vocabulary) */
    bool reasoning_inline;           /* --reasoning-format inline: <think> text stays in content */
    int64_t started;                 /* unix seconds, /v1/models "created" */

    /* h2o */
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_evloop_t *loop;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;          /* NULL once closed for the drain */
    h2o_socket_t *wake_sock;
    h2o_socket_t *sig_sock;
    h2o_timeout_t tick_timeout;
    h2o_timeout_entry_t tick_entry;
    h2o_timeout_t accept_timeout;    /* SL_FE_ACCEPT_PAUSE_MS: accepting again after EMFILE */
    h2o_timeout_entry_t accept_entry;
    bool accept_paused;
    uint64_t accept_pauses;          /* EMFILE/ENFILE pauses since start */
    uint64_t accept_pause_logged_ns; /* the last one logged (one line per 10 s at most) */

    /* state */
    sl_fe_stream *streams;           /* live generation requests (doubly linked) */
    uint32_t n_streams;
    sl_fe_conn *conns;               /* open client connections (conn.c, doubly linked) */
    uint32_t n_conns;
    sl_fe_jobs *jobs;                /* the tokenize pool (jobs.c); NULL = everything inline */
    uint32_t n_jobs;                 /* jobs whose request still waits for them */
    bool log_json;                   /* --log-format json */
    bool metrics_vllm;               /* --metrics-names vllm: /metrics under vLLM's names */
    bool draining;
    uint64_t drain_start_ns;
    bool stop_loop;

    /* mailboxes cancelled while the worker still held them: released later */
    sl_shm_ticket *pending;
    uint32_t n_pending, cap_pending;
} sl_fe;

/* Per-request bookkeeping every route fills (request id, start time). */
typedef struct {
    char id[SL_FE_REQUEST_ID_MAX + 1];
    char client[64];                 /* "addr:port" at arrival (the log's client; "-" if unknown) */
    uint64_t t0_ns;
} sl_fe_reqinfo;

/* ---- respond.c (calls nothing above it) ---- */

/* Takes the X-Request-ID header if it is 1..SL_FE_REQUEST_ID_MAX bytes of
 * [A-Za-z0-9-_.:/+=@], else makes 32 hex digits; notes the client's address
 * (a gone client has none by the time its line is logged); sets t0 to now. */
void sl_fe_respond_reqinfo_init(sl_fe_reqinfo *ri, h2o_req_t *req);

/* Sends a whole response: status, reason, content type (NULL: none, for a
 * 204), x-request-id, an optional Retry-After (retry_after_s > 0) and the
 * body (copied). Logs the request line. */
void sl_fe_respond(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status,
                   const char *content_type, const char *body, size_t len, int retry_after_s);

/* The same, logging the request's token counts, its finish reason (NULL for
 * none) and its error (the error's code or type; NULL for none). */
void sl_fe_respond_counted(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status,
                           const char *content_type, const char *body, size_t len, int retry_after_s,
                           int64_t prompt_tokens, int64_t completion_tokens, const char *finish,
                           const char *error);

/* Sends e as an OpenAI error body with its status (and Retry-After). */
void sl_fe_respond_error(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_api_error *e);

/* What the log's error field says for an error: its code, else its type. */
const char *sl_fe_respond_outcome(const sl_api_error *e);

/* One access-log line (stderr; text or JSON, fe->log_json) for a finished
 * request; for responses that do not go through sl_fe_respond* (streams).
 * finish: "stop"/"length"/"tool_calls", or NULL; error: the error's code (or
 * type) when the request failed (a non-2xx status, or a stream that ended
 * with an error event), else NULL. /health and /ready are left out when
 * log_health is 0. */
void sl_fe_respond_log(const sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status,
                       int64_t prompt_tokens, int64_t completion_tokens, const char *finish, const char *error);

/* A request refused before h2o made it one (conn.c's framing guard): the
 * access-log line, with the client's address from `sock` and finish `code`. */
void sl_fe_respond_log_refused(const sl_fe *fe, h2o_socket_t *sock, int status, const char *code);

/* The client's "addr:port" ("[v6]:port"; "-" when unknown) for diagnostics. */
void sl_fe_peer(h2o_socket_t *sock, char *out, size_t cap);

/* ---- conn.c (calls respond.c) ---- */

/* Takes an accepted socket: counts it, hands it to h2o and puts the HTTP/1.1
 * framing guard (http1_guard.h) in front of h2o's reads. On allocation
 * failure the socket is closed. */
void sl_fe_conn_accept(sl_fe *fe, h2o_socket_t *sock);

/* h2o handed over a request (routes.c, first thing): counts it, and makes
 * the response close the connection when a later pipelined request on it
 * was refused. */
void sl_fe_conn_on_request(sl_fe *fe, h2o_req_t *req);

/* Every SL_FE_TICK_MS: a connection whose write made no progress for
 * write_timeout_ms (any response, streamed or not) is shut down. */
void sl_fe_conn_tick(sl_fe *fe, uint64_t now_ns);

/* Puts the guard back in front of h2o's callbacks on every connection; after
 * sends made outside a connection's own callbacks (wake, tick, signal). */
void sl_fe_conn_rearm_all(sl_fe *fe);

/* ---- jobs.c (calls conn.c and respond.c, and each job's callbacks) ---- */

/* The render-and-tokenize step of one request, run on a pool thread when the
 * body is large. sl_fe_jobs_new makes it (the caller's struct, this first)
 * with the body; the caller sets work and done and hands it to
 * sl_fe_jobs_run. */
typedef struct sl_fe_job sl_fe_job;
struct sl_fe_job {
    /* Required. On a pool thread (or inline): pure work on what the job owns
     * and on fe's read-only fields; no h2o object, no mutable sl_fe field.
     * Skipped when the request went away first. */
    void (*work)(const sl_fe *fe, sl_fe_job *job);
    /* Required. On the loop, once: continues the request (req != NULL) or,
     * with req NULL (request gone, drain abort, teardown), only cleans up.
     * Frees the job either way. */
    void (*done)(sl_fe *fe, sl_fe_job *job, h2o_req_t *req);
    sl_fe_reqinfo ri;                /* the request's; answers a drain abort */
    const char *body;                /* the request body: req->entity inline, else body_owned */
    char *body_owned;                /* the job's copy when offloaded (the owner frees it) */
    size_t len;
    /* private to jobs.c */
    bool _offload;                   /* runs on a pool thread (sl_fe_jobs_new decided) */
    sl_fe_jobs *_pool;
    void *_ref;                      /* the request's link to the job, in req's pool */
    h2o_req_t *_req;                 /* loop only; NULL once orphaned */
    atomic_bool _cancelled;          /* set by the loop when orphaned: a thread skips work */
    sl_fe_job *_next;                /* queue link, under the pool's mutex */
    sl_fe_job *_live_prev, *_live_next;
};

/* Starts --tokenize-threads pool threads (0: none, fe->jobs stays NULL and
 * every job runs inline). After h2o's loop exists. On failure logs once and
 * falls back to inline. */
void sl_fe_jobs_create(sl_fe *fe);

/* Whether a request with this many body bytes should go to the pool. */
bool sl_fe_jobs_wanted(const sl_fe *fe, size_t bytes);

/* A zeroed job of `size` bytes (the caller's struct, sl_fe_job first) that
 * holds req's body: a copy of it when the job will run on a pool thread
 * (sl_fe_jobs_wanted), else req->entity itself. ri is copied in. NULL after
 * answering 500 when memory runs out. */
sl_fe_job *sl_fe_jobs_new(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, size_t size);

/* Runs job (work and done set): on a pool thread when sl_fe_jobs_new copied
 * the body for it, else inline, now. Either way job->done runs on the loop
 * exactly once. Does not block. */
void sl_fe_jobs_run(sl_fe *fe, h2o_req_t *req, sl_fe_job *job);

/* Drain deadline passed: answers every waiting request 503 shutting_down;
 * the jobs finish orphaned. */
void sl_fe_jobs_abort_all(sl_fe *fe, const char *why);

/* Stops and joins the threads (waiting for a running job), hands every job
 * left to its done with req NULL, closes the eventfd. Safe with fe->jobs NULL. */
void sl_fe_jobs_destroy(sl_fe *fe);

/* ---- stream.c (calls choice.c and respond.c) ---- */

/* Takes over a submitted request of n choices (1..SL_API_N_MAX), tickets[i]
 * being choice i's mailbox: allocates its stream in req's pool, links it,
 * and either starts the SSE response (headers plus the first events) or,
 * without "stream", waits for the whole answer. The stream owns every ticket
 * from here, also on failure (an error response, the tickets cancelled). r
 * is only read during the call (the stop strings and tool names are copied).
 * think_open: the rendered prompt ends inside an open <think>. prompt: the
 * n_prompt token ids submitted (read during the call: an echo's text and first
 * logprobs entry come from them). */
void sl_fe_stream_start(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_api_request *r,
                        const sl_shm_ticket *tickets, uint32_t n, const int32_t *prompt, int64_t n_prompt,
                        bool think_open);

/* The wake eventfd fired: move every stream forward. */
void sl_fe_streams_pump_all(sl_fe *fe);

/* Every SL_FE_TICK_MS: disconnect probe, pings, write timeouts. */
void sl_fe_streams_tick(sl_fe *fe, uint64_t now_ns);

/* Drain deadline passed: end every stream with an error event. */
void sl_fe_streams_abort_all(sl_fe *fe, const char *why);

/* Releases the mailboxes of cancelled requests that the worker has let go
 * since (fe->pending); the rest stay listed. Called on each wake and tick. */
void sl_fe_streams_retry_releases(sl_fe *fe);

/* ---- generate.c (calls stream.c and respond.c) ---- */

/* POST /v1/chat/completions (chat != 0) and /v1/completions, auth and body
 * size already checked: answers every refusal itself, else submits and hands
 * the request to sl_fe_stream_start. */
void sl_fe_generate(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int chat);

/* ---- routes.c (calls generate.c and respond.c) ---- */

/* Registers every route on `host`. */
void sl_fe_routes_register(sl_fe *fe, h2o_hostconf_t *host);

/* The request body limit: --max-body, else 1 MiB. Bodies over it get our
 * JSON 413 (routes.c) as long as h2o let them through. */
uint64_t sl_fe_routes_body_limit(const sl_config *cfg);

/* The limit given to h2o (which answers bodies over it with its own plain
 * 413 before our handler runs): max_body + max(max_body, 1 MiB), clamped to
 * SIZE_MAX. */
size_t sl_fe_routes_h2o_body_limit(uint64_t max_body);

/* The worker's own effective-config snapshot from the segment (parsed; the
 * caller decrefs it), or NULL when none is published. Uses a static buffer:
 * the event loop's thread only. (worker_snapshot.c) */
json_t *sl_fe_worker_snapshot(const sl_fe *fe);

/* ---- metrics.c (called by routes.c) ---- */

/* Appends every GET /metrics series to m, under vLLM's names when
 * fe->metrics_vllm (colons allowed then), each labelled model_name. A series
 * the builder refuses is left out; m's own failure flag reports memory. */
void sl_fe_metrics_render(const sl_fe *fe, sl_api_metrics *m);

/* server.c (sl_frontend_main, server.h) calls routes.c and stream.c; nothing
 * here calls server.c. */

#endif
