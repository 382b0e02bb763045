/* frontend/stream.c: a generation request once its n mailboxes are submitted
 * (generate.c hands them over): drain the request's choices (choice.c, one
 * mailbox each) into SSE events or one JSON response, until the last byte;
 * the disconnect probe, pings, write timeouts; the retried release of
 * mailboxes the worker still held when a request was cancelled. Runs on each
 * front-end process's event loop; a stream lives in its request's pool.
 *
 * The trade-off: tokens are read from the mailboxes only when the previous
 * write finished (h2o's proceed). A slow client therefore leaves tokens in
 * the mailbox rings, the rings fill, and the worker pauses those sequences:
 * nothing is ever dropped, and memory per stream stays one event's worth per
 * choice. One pump reads every live choice in index order and sends what
 * they made as one write: each SSE event carries one choice, so the events
 * of different choices interleave as their tokens arrive, and each choice's
 * events stay in order.
 *
 * Stream lifecycle (each arrow names the function making it):
 *   sl_fe_stream_start() -> LIVE (linked, n mailboxes submitted; a stream's
 *        headers wait for its first send, commit(), so a request that fails
 *        before anything was sent still gets an HTTP status)
 *   LIVE --pump(): a choice terminal or at a stop string--> end_choice(): its
 *        finish chunk queued, its mailbox released (or kept by
 *        sl_fe_release_later() until the worker lets go); the others go on
 *   LIVE --pump(): the last choice ended--> finish(): FINAL sent (the usage
 *        chunk and [DONE] once, or the whole response), unlinked
 *   LIVE --end_choice(): a choice failed | on_stop() (write failed) | tick():
 *        client hung up, write timeout | abort_all() (drain deadline)-->
 *        every mailbox cancelled, unlinked
 *   any --on_dispose() (the pool dies)--> cleanup; the single place that frees.
 * Invariants: (1) at most one h2o_send is in flight per stream and its bytes
 * (st->out) are untouched until proceed; (2) after FINAL/ERROR nothing touches
 * st->req; (3) each choice holds its ticket until it is released or handed to
 * sl_fe_release_later(), exactly once (sl_fe_choice_drop). */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "shared/alloc.h"
#include "frontend/api_response.h"
#include "frontend/api_sse.h"
#include "frontend/choice.h"
#include "frontend/server_internal.h"

#define READ_MAX_PER_EVENT 4096     /* tokens per choice per event at most, so one stream cannot hog the loop */

struct sl_fe_stream {
    sl_fe *fe;
    h2o_req_t *req;
    h2o_generator_t gen;
    sl_fe_stream *prev, *next;
    bool linked;
    sl_fe_reqinfo ri;

    sl_api_endpoint ep;
    bool stream, include_usage;
    bool started;                  /* h2o_start_response ran (streams only, at the first send) */
    bool keep_out;                 /* fail_with: st->out holds text to send before the error event */
    bool inflight;                 /* an h2o_send awaits proceed */
    bool done;                     /* no more sends: FINAL/ERROR sent or the client is gone */
    bool logged;
    bool write_timed_out;
    uint64_t inflight_since_ns, last_send_ns;

    char id[SL_API_ID_LEN];
    int64_t created;
    int64_t n_prompt;
    sl_fe_choice *choices;         /* n_choices, in index order (malloc'd) */
    uint32_t n_choices, n_ended;
    sl_fe_buf out;                 /* bytes of the write in flight (stream) */
};

/* ================================================================ mailbox release */

void sl_fe_streams_retry_releases(sl_fe *fe)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < fe->n_pending; i++) {
        if (sl_shm_release(fe->shm, fe->pending[i]) == SL_ESTATE)
            fe->pending[k++] = fe->pending[i];   /* the worker still holds it */
    }
    fe->n_pending = k;
}

/* Every choice's mailbox, cancelled and given up (the ended ones already were). */
static void drop_all(sl_fe_stream *st, bool cancel)
{
    for (uint32_t i = 0; i < st->n_choices; i++)
        sl_fe_choice_drop(&st->choices[i], cancel);
}

/* Same, for a client gone or given up on: the live choices count as aborted. */
static void abandon_all(sl_fe_stream *st)
{
    for (uint32_t i = 0; i < st->n_choices; i++)
        sl_fe_choice_abort(&st->choices[i]);
}

static int64_t n_generated(const sl_fe_stream *st)
{
    int64_t n = 0;
    for (uint32_t i = 0; i < st->n_choices; i++)
        n += st->choices[i].n_generated;
    return n;
}

/* ================================================================ list */

static void link_stream(sl_fe *fe, sl_fe_stream *st)
{
    st->prev = NULL;
    st->next = fe->streams;
    if (fe->streams)
        fe->streams->prev = st;
    fe->streams = st;
    st->linked = true;
    fe->n_streams++;
}

static void unlink_stream(sl_fe_stream *st)
{
    if (!st->linked)
        return;
    sl_fe *fe = st->fe;
    if (st->prev)
        st->prev->next = st->next;
    else
        fe->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    st->linked = false;
    fe->n_streams--;
}

/* ================================================================ sending */

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req);
static void on_stop(h2o_generator_t *gen, h2o_req_t *req);

/* The headers of a stream: sent with its first event, not at submission, so
 * that a request lost before it produced anything (a worker death while it
 * was queued or in prefill) can still get a 503 a proxy will retry. */
static void commit(sl_fe_stream *st)
{
    h2o_req_t *req = st->req;
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/event-stream"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, st->ri.id,
                          strlen(st->ri.id));
    st->gen = (h2o_generator_t){on_proceed, on_stop};
    h2o_start_response(req, &st->gen);
    st->started = true;
}

/* Drops what st->out holds unless it is the first event still waiting for
 * the headers (the role chunks, or ": ok"), which goes out with the next send. */
static void out_reset(sl_fe_stream *st)
{
    if (st->started)
        st->out.len = 0;
}

static void send_out(sl_fe_stream *st, h2o_send_state_t state)
{
    if (!st->started)
        commit(st);
    h2o_iovec_t v = h2o_iovec_init(st->out.p, st->out.len);
    st->last_send_ns = sl_shm_now_ns();
    if (state == H2O_SEND_STATE_IN_PROGRESS) {
        st->inflight = true;
        st->inflight_since_ns = st->last_send_ns;
    } else {
        st->done = true;
        unlink_stream(st);
        if (st->fe->draining)
            st->req->http1_is_persistent = 0;
    }
    h2o_send(st->req, &v, 1, state);
}

/* The chunk fields every event of this response shares. */
static sl_api_chunk chunk_template(const sl_fe_stream *st)
{
    return (sl_api_chunk){.endpoint = st->ep, .id = st->id, .created = st->created, .model = st->fe->model_name,
                          .system_fingerprint = st->fe->fingerprint, .include_usage = st->include_usage};
}

/* The request's usage and timings over its ended choices: prompt figures
 * (and cached tokens) from choice 0, the generated ones summed, the decode
 * time from the first choice's first token to the last choice's last. */
static void totals(const sl_fe_stream *st, sl_api_usage *u, sl_api_timings *tm)
{
    const sl_shm_timings *t0 = &st->choices[0].info.timings;
    *u = (sl_api_usage){st->n_prompt, n_generated(st), st->choices[0].info.cached_tokens};
    *tm = (sl_api_timings){.prompt_n = st->n_prompt, .predicted_n = u->completion_tokens};
    if (t0->first_token_ns > t0->admitted_ns && t0->admitted_ns > 0)
        tm->prompt_ms = (double)(t0->first_token_ns - t0->admitted_ns) / 1e6;
    uint64_t first = 0, last = 0;
    for (uint32_t i = 0; i < st->n_choices; i++) {
        const sl_shm_timings *t = &st->choices[i].info.timings;
        if (t->first_token_ns > 0 && (first == 0 || t->first_token_ns < first))
            first = t->first_token_ns;
        if (t->last_token_ns > last)
            last = t->last_token_ns;
    }
    if (last > first && first > 0)
        tm->predicted_ms = (double)(last - first) / 1e6;
}

/* Ends a stream that already sent headers with the error event e, or answers
 * a request that has sent nothing yet (non-streaming, or a stream before its
 * first event) with e's status. Every mailbox is cancelled. */
static void fail_with(sl_fe_stream *st, const sl_api_error *ep)
{
    sl_api_error e = *ep;
    drop_all(st, true);
    int64_t n_gen = n_generated(st);
    if (!st->started) {
        st->done = true;
        st->logged = true;
        unlink_stream(st);
        int http = 500;
        if (e.kind == SL_API_ERR_UNAVAILABLE && e.retry_after_s == 0)
            e.retry_after_s = 1;   /* nothing was sent: a proxy may replay it (HAProxy retry-on 503) */
        char *body = sl_api_error_body(&e, &http);
        sl_fe_respond_counted(st->fe, st->req, &st->ri, http, "application/json", body ? body : "",
                              body ? strlen(body) : 0, e.retry_after_s, st->n_prompt, n_gen, NULL,
                              sl_fe_respond_outcome(&e));
        free(body);
        return;
    }
    size_t n = 0;
    char *ev = sl_api_sse_error(&e, &n);
    if (!st->keep_out)
        st->out.len = 0;
    if (ev != NULL)
        sl_fe_buf_append(&st->out, ev, n);
    free(ev);
    st->logged = true;
    sl_fe_respond_log(st->fe, st->req, &st->ri, 200, st->n_prompt, n_gen, NULL, sl_fe_respond_outcome(&e));
    if (st->out.len == 0) {
        st->done = true;
        unlink_stream(st);
        h2o_send(st->req, NULL, 0, H2O_SEND_STATE_ERROR);
        return;
    }
    send_out(st, H2O_SEND_STATE_FINAL);
}

static void fail(sl_fe_stream *st, sl_api_err_kind kind, const char *msg)
{
    sl_api_error e;
    sl_api_error_set(&e, kind, NULL, "%s", msg);
    fail_with(st, &e);
}

/* A non-streamed answer grew past --max-response: the worker is stopped
 * and the client told, instead of building a body nobody may hold. */
static void fail_too_large(sl_fe_stream *st, size_t bytes)
{
    sl_api_error e;
    sl_api_error_set(&e, SL_API_ERR_INVALID_REQUEST, NULL,
                     "The response would be at least %zu bytes; this server sends at most %" PRIu64
                     " (--max-response); stream it instead.", bytes, sl_fe_max_response(st->fe->cfg));
    e.code = "response_too_large";
    fail_with(st, &e);
}

/* ================================================================ finish */

/* Choice c's mailbox is done: a stream queues its last chunks (the request's
 * timings ride on the last choice's finish chunk when there is no usage
 * chunk). false when the request failed (answered here). */
static bool end_choice(sl_fe_stream *st, sl_fe_choice *c)
{
    sl_api_error e;
    bool flush = false;
    if (!sl_fe_choice_end(c, st->started, &e, &flush)) {
        if (flush && st->stream && !st->started) {
            /* The worker failed after making text nobody has seen yet: the
             * stream starts, sends it, and ends with the error event. */
            sl_api_chunk tmpl = chunk_template(st);
            if (sl_fe_choice_out_pending(c, &tmpl, &st->out)) {
                commit(st);
                st->keep_out = true;
            }
        }
        fail_with(st, &e);
        return false;
    }
    st->n_ended++;
    if (!st->stream)
        return true;
    sl_api_usage u;
    sl_api_timings tm;
    bool last = st->n_ended == st->n_choices;
    if (last)
        totals(st, &u, &tm);
    sl_api_chunk tmpl = chunk_template(st);
    if (!sl_fe_choice_out_final(c, &tmpl, last && !st->include_usage ? &tm : NULL, &st->out)) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory building the last events");
        return false;
    }
    return true;
}

/* Every choice ended: the whole response, or the stream's usage chunk and
 * [DONE]. */
static void finish(sl_fe_stream *st)
{
    sl_fe *fe = st->fe;
    sl_api_usage usage;
    sl_api_timings tm;
    totals(st, &usage, &tm);
    int64_t longest = 0;
    for (uint32_t i = 0; i < st->n_choices; i++)
        if (st->choices[i].n_generated > longest)
            longest = st->choices[i].n_generated;
    sl_shm_histogram_observe(fe->shm, SL_HISTOGRAM_MAX_GENERATION_TOKENS, (uint64_t)longest);
    const char *fin = sl_api_finish_name(st->choices[0].fin);
    if (!st->stream) {
        sl_api_result *r = sl_calloc(st->n_choices, sizeof *r);
        if (r == NULL) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory building the response");
            return;
        }
        for (uint32_t i = 0; i < st->n_choices; i++)
            sl_fe_choice_result(&st->choices[i], &r[i]);
        r[0].id = st->id;
        r[0].created = st->created;
        r[0].model = fe->model_name;
        r[0].system_fingerprint = fe->fingerprint;
        r[0].usage = usage;
        r[0].timings = &tm;
        char *body = sl_api_response_build_n(r, st->n_choices);
        free(r);
        if (body == NULL) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory building the response");
            return;
        }
        size_t blen = strlen(body);
        if (blen > sl_fe_max_response(fe->cfg)) {
            free(body);
            fail_too_large(st, blen);
            return;
        }
        st->done = true;
        st->logged = true;
        unlink_stream(st);
        sl_fe_respond_counted(fe, st->req, &st->ri, 200, "application/json", body, blen, 0, st->n_prompt,
                              usage.completion_tokens, fin, NULL);
        free(body);
        return;
    }
    bool ok = true;
    if (st->include_usage) {
        sl_api_chunk c = chunk_template(st);
        c.kind = SL_API_CHUNK_USAGE;
        c.usage = &usage;
        c.timings = &tm;
        ok = sl_fe_buf_event(&st->out, sl_api_chunk_build(&c));
    }
    ok = ok && sl_fe_buf_append(&st->out, SL_API_SSE_DONE, strlen(SL_API_SSE_DONE));
    if (!ok) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory building the last events");
        return;
    }
    st->logged = true;
    sl_fe_respond_log(fe, st->req, &st->ri, 200, st->n_prompt, usage.completion_tokens, fin, NULL);
    send_out(st, H2O_SEND_STATE_FINAL);
}

/* ================================================================ pump */

/* Moves one stream forward: reads what every live choice's mailbox holds
 * (only when no write is in flight: that is the backpressure), turns it into
 * text, and sends one write of events, or finishes. */
static void pump(sl_fe_stream *st)
{
    sl_fe *fe = st->fe;
    if (st->done || st->inflight || st->choices == NULL)
        return;
    if (st->stream)
        out_reset(st);
    size_t base = st->out.len;   /* a stream's first write also carries what start queued */
    sl_api_chunk tmpl = chunk_template(st);
    for (uint32_t i = 0; i < st->n_choices; i++) {
        sl_fe_choice *c = &st->choices[i];
        if (c->ended)
            continue;
        bool terminal = false;
        if (sl_fe_choice_read(c, st->stream ? READ_MAX_PER_EVENT : UINT32_MAX, &terminal) < 0) {
            fail(st, SL_API_ERR_UNAVAILABLE, "the request was lost: the worker restarted");
            return;
        }
        if (c->oom) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory");
            return;
        }
        if (terminal || c->stop_hit) {
            if (!end_choice(st, c))
                return;
            continue;
        }
        if (st->stream && !sl_fe_choice_out_progress(c, &tmpl, &st->out)) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory building an event");
            return;
        }
    }
    if (!st->stream) {
        size_t bytes = 0;
        for (uint32_t i = 0; i < st->n_choices; i++)
            bytes += sl_fe_choice_bytes(&st->choices[i]);
        if (bytes > sl_fe_max_response(fe->cfg)) {
            fail_too_large(st, bytes);
            return;
        }
    }
    if (st->n_ended == st->n_choices) {
        finish(st);
        return;
    }
    if (st->stream && st->out.len > base)
        send_out(st, H2O_SEND_STATE_IN_PROGRESS);
}

void sl_fe_streams_pump_all(sl_fe *fe)
{
    for (sl_fe_stream *st = fe->streams, *next; st != NULL; st = next) {
        next = st->next;
        pump(st);
    }
}

/* ================================================================ h2o callbacks */

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    (void)req;
    sl_fe_stream *st = H2O_STRUCT_FROM_MEMBER(sl_fe_stream, gen, gen);
    st->inflight = false;
    pump(st);
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    (void)req;
    sl_fe_stream *st = H2O_STRUCT_FROM_MEMBER(sl_fe_stream, gen, gen);
    st->done = true;    /* the connection is gone: the write failed or it was closed */
    unlink_stream(st);
    abandon_all(st);
}

static void on_dispose(void *p)
{
    sl_fe_stream *st = p;
    unlink_stream(st);
    abandon_all(st);
    if (!st->logged)
        sl_fe_respond_log(st->fe, st->req, &st->ri, 499, st->n_prompt, n_generated(st), NULL, "client_closed");
    for (uint32_t i = 0; i < st->n_choices; i++)
        sl_fe_choice_fini(&st->choices[i]);
    free(st->choices);
    sl_fe_buf_fini(&st->out);
}

/* The client went away (probe) or stopped reading (write timeout) or the drain
 * deadline passed: cancel the request and end the response. */
static void kill_stream(sl_fe_stream *st, int status_if_unstarted)
{
    abandon_all(st);
    st->done = true;
    unlink_stream(st);
    if (st->started) {
        h2o_send(st->req, NULL, 0, H2O_SEND_STATE_ERROR);
    } else {
        st->logged = true;
        st->req->http1_is_persistent = 0;
        sl_fe_respond_counted(st->fe, st->req, &st->ri, status_if_unstarted, "application/json", "", 0, 0,
                              st->n_prompt, n_generated(st), NULL, "client_closed");
    }
}

static int stream_fd(sl_fe_stream *st)
{
    h2o_conn_t *conn = st->req->conn;
    if (st->req->version >= 0x200 || conn->callbacks->get_socket == NULL)
        return -1;     /* HTTP/2 reads on its own and reports resets through stop() */
    h2o_socket_t *sock = conn->callbacks->get_socket(conn);
    return sock ? h2o_socket_get_fd(sock) : -1;
}

void sl_fe_streams_tick(sl_fe *fe, uint64_t now)
{
    static const char ping[] = SL_API_SSE_PING;
    uint64_t wto = (uint64_t)fe->cfg->write_timeout_ms * 1000000ull;
    for (sl_fe_stream *st = fe->streams, *next; st != NULL; st = next) {
        next = st->next;
        int fd = stream_fd(st);
        if (!st->inflight) {
            /* A safety net for a lost or coalesced wakeup: reading an empty
             * mailbox costs two loads. */
            pump(st);
            if (st->done)
                continue;   /* finished (or failed) just now: st->req may be gone */
        }
        if (st->inflight) {
            /* h2o 2.2.5 has no write timeout: shutting the socket down makes the
             * pending write fail, and h2o then calls stop(). */
            /* pump() above may have started this write after `now` was read:
             * compare without letting the unsigned difference wrap. */
            if (wto > 0 && !st->write_timed_out && now > st->inflight_since_ns &&
                now - st->inflight_since_ns > wto && fd >= 0) {
                st->write_timed_out = true;
                abandon_all(st);
                fprintf(stderr, "sluice-fe slot=%" PRIu32 ": request_id=%s write timeout, dropping the client\n",
                        fe->slot, st->ri.id);
                shutdown(fd, SHUT_RDWR);
            }
            continue;
        }
        if (fd >= 0) {
            /* HTTP/1 stops reading once the request is parsed, so an idle client's
             * close is seen only by asking the socket. */
            struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
            if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                kill_stream(st, 499);
                continue;
            }
        }
        if (st->stream && !st->done && now > st->last_send_ns &&
            now - st->last_send_ns >= (uint64_t)SL_FE_PING_MS * 1000000ull) {
            if (!st->started) {
                /* Queued or in a long prefill: the headers and the first
                 * event go out now, with the ping, to keep proxies open. */
                if (sl_fe_buf_append(&st->out, ping, sizeof ping - 1))
                    send_out(st, H2O_SEND_STATE_IN_PROGRESS);
                continue;
            }
            st->inflight = true;
            st->inflight_since_ns = st->last_send_ns = now;
            h2o_iovec_t v = h2o_iovec_init(ping, sizeof ping - 1);
            h2o_send(st->req, &v, 1, H2O_SEND_STATE_IN_PROGRESS);
        }
    }
}

void sl_fe_streams_abort_all(sl_fe *fe, const char *why)
{
    for (sl_fe_stream *st = fe->streams, *next; st != NULL; st = next) {
        next = st->next;
        if (st->inflight) {
            abandon_all(st);
            int fd = stream_fd(st);
            if (fd >= 0)
                shutdown(fd, SHUT_RDWR);
            continue;
        }
        abandon_all(st);   /* given up on: counted as aborted, not failed */
        fail(st, SL_API_ERR_UNAVAILABLE, why);
    }
}

/* ================================================================ start */

void sl_fe_stream_start(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_api_request *r,
                        const sl_shm_ticket *tickets, uint32_t n, const int32_t *prompt, int64_t n_prompt,
                        bool think_open)
{
    sl_fe_stream *st = h2o_mem_alloc_shared(&req->pool, sizeof *st, on_dispose);
    memset(st, 0, sizeof *st);
    st->fe = fe;
    st->req = req;
    st->ri = *ri;
    st->ep = r->endpoint;
    st->stream = r->stream;
    st->include_usage = r->include_usage;
    st->created = (int64_t)time(NULL);
    st->n_prompt = n_prompt;
    sl_api_id_make(st->id, st->ep);
    link_stream(fe, st);
    st->choices = sl_calloc(n, sizeof *st->choices);
    if (st->choices == NULL) {
        for (uint32_t i = 0; i < n; i++) {
            sl_shm_cancel(fe->shm, tickets[i]);
            sl_fe_release_later(fe, tickets[i]);
        }
        fail(st, SL_API_ERR_INTERNAL, "out of memory");
        return;
    }
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(fe->shm, &wi);
    st->n_choices = n;
    bool ok = true;
    for (uint32_t i = 0; i < n; i++)
        ok &= sl_fe_choice_init(&st->choices[i], fe, r, (int32_t)i, tickets[i], wi.worker_generation,
                                think_open, prompt, (uint32_t)n_prompt) == SL_OK;
    if (!ok) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory");
        return;
    }
    st->last_send_ns = sl_shm_now_ns();    /* the ping timer counts from submission */
    if (st->stream) {
        /* The first event is made now and sent with the first tokens (or the
         * first ping, or the end), together with the headers (commit): the
         * role delta of each choice for chat, a comment for completions
         * (which have no role chunk). */
        st->out.len = 0;
        if (st->ep == SL_API_ENDPOINT_CHAT) {
            sl_api_chunk c = chunk_template(st);
            c.kind = SL_API_CHUNK_ROLE;
            for (uint32_t i = 0; i < n && ok; i++) {
                c.index = (int32_t)i;
                ok = sl_fe_buf_event(&st->out, sl_api_chunk_build(&c));
            }
        } else {
            ok = sl_fe_buf_append(&st->out, ": ok\n\n", 6);
        }
        if (!ok) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory");
            return;
        }
    }
    pump(st);   /* sends an echoed prompt at once; an echo worker may already be done */
}
