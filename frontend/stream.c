/* frontend/stream.c: a generation request once its mailbox is submitted
 * (generate.c hands it over): drain the mailbox into SSE events or one JSON
 * response, until the last byte; the disconnect probe, pings, write timeouts;
 * the release of mailboxes the worker still held when a request was cancelled.
 * Runs on each front-end process's event loop; a stream lives in its
 * request's pool.
 *
 * The trade-off: tokens are read from the mailbox only when the previous write
 * finished (h2o's proceed). A slow client therefore leaves tokens in the
 * mailbox ring, the ring fills, and the worker pauses that sequence: nothing
 * is ever dropped, and memory per stream stays one event's worth.
 *
 * Stream lifecycle (each arrow names the function making it):
 *   sl_fe_stream_start() -> LIVE (linked, mailbox submitted; a stream's
 *        headers wait for its first send, commit(), so a request that fails
 *        before anything was sent still gets an HTTP status)
 *   LIVE --pump(): terminal or stop string--> finish(): FINAL sent, unlinked,
 *        mailbox released (or kept by release_later() until the worker lets go)
 *   LIVE --on_stop() (write failed) | tick(): client hung up, write timeout |
 *        abort_all() (drain deadline)--> cancelled, unlinked
 *   any --on_dispose() (the pool dies)--> cleanup; the single place that frees.
 * Invariants: (1) at most one h2o_send is in flight per stream and its bytes
 * (st->out) are untouched until proceed; (2) after FINAL/ERROR nothing touches
 * st->req; (3) a stream holds its ticket until it is released or handed to
 * release_later(), exactly once. */
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
#include "frontend/api_json.h"
#include "frontend/api_stop.h"
#include "frontend/reasoning.h"
#include "frontend/server_internal.h"
#include "frontend/tool_calls.h"

#define READ_BATCH 64               /* tokens per sl_shm_read_tokens call */
#define READ_MAX_PER_EVENT 4096     /* tokens per event at most, so one stream cannot hog the loop */

struct sl_fe_stream {
    sl_fe *fe;
    h2o_req_t *req;
    h2o_generator_t gen;
    sl_fe_stream *prev, *next;
    bool linked;
    sl_fe_reqinfo ri;

    sl_api_endpoint ep;
    bool stream, include_usage, logprobs;
    sl_shm_ticket ticket;
    bool have_ticket;
    bool started;                  /* h2o_start_response ran (streams only, at the first send) */
    bool keep_out;                 /* fail_with: st->out holds text to send before the error event */
    uint32_t worker_gen;           /* the worker generation when the request was taken over */
    bool inflight;                 /* an h2o_send awaits proceed */
    bool done;                     /* no more sends: FINAL/ERROR sent or the client is gone */
    bool logged;
    bool write_timed_out;
    bool stop_hit;
    uint64_t inflight_since_ns, last_send_ns;

    char id[SL_API_ID_LEN];
    int64_t created;
    int64_t n_prompt, n_generated;
    sl_detok detok;
    sl_api_stop stop;
    char *piece;                   /* detokenizer output, sl_detok_max_piece bytes */
    size_t piece_cap;
    char *lp_scratch;              /* token texts for one logprob record */
    size_t lp_cap;
    sl_api_logprobs lp;            /* stream: this event's tokens; else all */
    bool lp_live;
    bool oom;            /* text or a logprob was lost to a failed allocation: the request fails */
    char *text;                    /* stream: this event's text; else the whole answer */
    size_t text_len, text_cap;
    char *out;                     /* bytes of the write in flight (stream) */
    size_t out_len, out_cap;

    /* Chat answers that go through the reasoning splitter and/or the tool
     * call parser ("filtered"): after the stop strings, text is split into
     * content, reasoning and calls. A stream collects this event's deltas in
     * order (`deltas`); a whole answer collects content in `text`, the
     * reasoning in `reason` and the calls in `calls`. */
    bool filtered;
    bool reasoning_on;
    sl_reasoning reasoning;
    sl_tool_parser *tools;         /* NULL: no tool parsing */
    json_t *deltas;                /* stream: this event's delta objects */
    char *reason;                  /* whole answer: the reasoning text */
    size_t reason_len, reason_cap;
    json_t *calls;                 /* whole answer: message.tool_calls; NULL = none */
    int32_t n_calls;
};

/* ================================================================ buffers */

static bool buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *p = sl_realloc(*buf, c);
        if (p == NULL)
            return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

/* Frames one chunk's JSON as an SSE event onto st->out; frees json. */
static bool out_event(sl_fe_stream *st, char *json)
{
    if (json == NULL)
        return false;
    size_t need = sl_api_sse_frame(NULL, 0, json, strlen(json));
    bool ok = true;
    if (st->out_len + need + 1 > st->out_cap) {
        size_t c = st->out_cap ? st->out_cap : 512;
        while (c < st->out_len + need + 1)
            c *= 2;
        char *p = sl_realloc(st->out, c);
        ok = p != NULL;
        if (ok) {
            st->out = p;
            st->out_cap = c;
        }
    }
    if (ok)
        st->out_len += sl_api_sse_frame(st->out + st->out_len, need, json, strlen(json));
    free(json);
    return ok;
}

/* ================================================================ mailbox release */

/* Releases `t` now if the worker let go, else keeps it in fe->pending for
 * sl_fe_streams_retry_releases (a cancelled request is released only after
 * the worker saw the cancel). */
static void release_later(sl_fe *fe, sl_shm_ticket t)
{
    sl_status rc = sl_shm_release(fe->shm, t);
    if (rc != SL_ESTATE)
        return;     /* released, or no longer ours (recovery took it back): nothing to keep */
    if (fe->n_pending == fe->cap_pending) {
        uint32_t cap = fe->cap_pending ? fe->cap_pending * 2 : 16;
        sl_shm_ticket *p = sl_realloc(fe->pending, cap * sizeof *p);
        if (p == NULL) {
            /* Out of memory: the mailbox stays taken until this slot is recovered
             * (the master reclaims a dead front end's mailboxes). Logged once per case. */
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": out of memory keeping mailbox %" PRIu32 "\n",
                    fe->slot, t.index);
            return;
        }
        fe->pending = p;
        fe->cap_pending = cap;
    }
    fe->pending[fe->n_pending++] = t;
}

void sl_fe_streams_retry_releases(sl_fe *fe)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < fe->n_pending; i++) {
        if (sl_shm_release(fe->shm, fe->pending[i]) == SL_ESTATE)
            fe->pending[k++] = fe->pending[i];   /* the worker still holds it */
    }
    fe->n_pending = k;
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

/* Cancels the request in the worker and gives the mailbox up (released now if
 * the worker already let go, else as soon as it does). */
static void drop_ticket(sl_fe_stream *st, bool cancel)
{
    if (!st->have_ticket)
        return;
    if (cancel)
        sl_shm_cancel(st->fe->shm, st->ticket);
    release_later(st->fe, st->ticket);
    st->have_ticket = false;
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
 * the headers (the role chunk, or ": ok"), which goes out with the next send. */
static void out_reset(sl_fe_stream *st)
{
    if (st->started)
        st->out_len = 0;
}

static void send_out(sl_fe_stream *st, h2o_send_state_t state)
{
    if (!st->started)
        commit(st);
    h2o_iovec_t v = h2o_iovec_init(st->out, st->out_len);
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

static sl_api_timings timings_of(const sl_fe_stream *st, const sl_shm_timings *t)
{
    sl_api_timings r = {0};
    r.prompt_n = st->n_prompt;
    if (t->first_token_ns > t->admitted_ns && t->admitted_ns > 0)
        r.prompt_ms = (double)(t->first_token_ns - t->admitted_ns) / 1e6;
    r.predicted_n = st->n_generated;
    if (t->last_token_ns > t->first_token_ns && t->first_token_ns > 0)
        r.predicted_ms = (double)(t->last_token_ns - t->first_token_ns) / 1e6;
    return r;
}

static void observe(sl_fe *fe, const sl_shm_timings *t, int64_t n)
{
    if (t->queued_ns == 0)
        return;
    if (t->admitted_ns >= t->queued_ns)
        sl_shm_histogram_observe(fe->shm, SL_HISTOGRAM_QUEUE, t->admitted_ns - t->queued_ns);
    if (t->first_token_ns >= t->queued_ns && t->first_token_ns > 0) {
        sl_shm_histogram_observe(fe->shm, SL_HISTOGRAM_TTFT, t->first_token_ns - t->queued_ns);
        if (n > 1 && t->last_token_ns > t->first_token_ns)
            sl_shm_histogram_observe(fe->shm, SL_HISTOGRAM_INTER_TOKEN,
                                     (t->last_token_ns - t->first_token_ns) / (uint64_t)(n - 1));
    }
    uint64_t end = t->last_token_ns ? t->last_token_ns : sl_shm_now_ns();
    if (end >= t->queued_ns)
        sl_shm_histogram_observe(fe->shm, SL_HISTOGRAM_E2E, end - t->queued_ns);
}

/* Ends a stream that already sent headers with the error event e, or answers
 * a request that has sent nothing yet (non-streaming, or a stream before its
 * first event) with e's status. */
static void fail_with(sl_fe_stream *st, const sl_api_error *ep)
{
    sl_api_error e = *ep;
    drop_ticket(st, true);
    if (!st->started) {
        st->done = true;
        st->logged = true;
        unlink_stream(st);
        int http = 500;
        if (e.kind == SL_API_ERR_UNAVAILABLE && e.retry_after_s == 0)
            e.retry_after_s = 1;   /* nothing was sent: a proxy may replay it (HAProxy retry-on 503) */
        char *body = sl_api_error_body(&e, &http);
        sl_fe_respond_counted(st->fe, st->req, &st->ri, http, "application/json", body ? body : "",
                              body ? strlen(body) : 0, e.retry_after_s, st->n_prompt, st->n_generated,
                              sl_fe_respond_outcome(&e));
        free(body);
        return;
    }
    size_t n = 0;
    char *ev = sl_api_sse_error(&e, &n);
    if (!st->keep_out)
        st->out_len = 0;
    if (ev != NULL)
        buf_append(&st->out, &st->out_len, &st->out_cap, ev, n);
    free(ev);
    st->logged = true;
    sl_fe_respond_log(st->fe, st->req, &st->ri, 200, st->n_prompt, st->n_generated, sl_fe_respond_outcome(&e));
    if (st->out_len == 0) {
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

/* ================================================================ tokens -> text */

/* ---- filtered answers: content, reasoning and calls ---- */

/* Appends text to the last delta if it is of the same key, else a new one. */
static sl_status delta_text(sl_fe_stream *st, const char *key, const char *s, size_t n)
{
    if (st->deltas == NULL && (st->deltas = json_array()) == NULL)
        return SL_ENOMEM;
    size_t k = json_array_size(st->deltas);
    json_t *last = k ? json_array_get(st->deltas, k - 1) : NULL;
    json_t *old = last && json_object_size(last) == 1 ? json_object_get(last, key) : NULL;
    size_t ol = old ? json_string_length(old) : 0;
    char *cat = sl_malloc(ol + n + 1);
    if (cat == NULL)
        return SL_ENOMEM;
    if (ol)
        memcpy(cat, json_string_value(old), ol);
    memcpy(cat + ol, s, n);
    json_t *v = sl_api_json_string_lossy(cat, ol + n);
    free(cat);
    if (v == NULL)
        return SL_ENOMEM;
    if (old)
        return json_object_set_new(last, key, v) ? SL_ENOMEM : SL_OK;
    json_t *d = json_object();
    if (d == NULL || json_object_set_new(d, key, v) || json_array_append_new(st->deltas, d))
        return SL_ENOMEM;
    return SL_OK;
}

static sl_status on_tool_event(void *ctx, const sl_tool_event *ev)
{
    sl_fe_stream *st = ctx;
    if (ev->kind == SL_TOOL_EVENT_CONTENT) {
        if (st->stream)
            return delta_text(st, "content", ev->text, ev->len);
        return buf_append(&st->text, &st->text_len, &st->text_cap, ev->text, ev->len) ? SL_OK : SL_ENOMEM;
    }
    st->n_calls++;
    if (!st->stream) {
        if (st->calls == NULL && (st->calls = json_array()) == NULL)
            return SL_ENOMEM;
        json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", ev->id, "type", "function", "function", "name",
                              ev->name, "arguments", ev->arguments);
        return o && json_array_append_new(st->calls, o) == 0 ? SL_OK : SL_ENOMEM;
    }
    /* OpenAI's shape: the first delta of a call names it, the next carry its arguments. */
    if (st->deltas == NULL && (st->deltas = json_array()) == NULL)
        return SL_ENOMEM;
    json_t *head = json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", (int)ev->index, "id", ev->id,
                             "type", "function", "function", "name", ev->name, "arguments", "");
    json_t *args = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", (int)ev->index, "function", "arguments",
                             ev->arguments);
    bool bad = head == NULL || args == NULL;
    bad |= json_array_append_new(st->deltas, head) != 0;
    bad |= json_array_append_new(st->deltas, args) != 0;
    return bad ? SL_ENOMEM : SL_OK;
}

static sl_status on_reasoning_text(void *ctx, sl_reasoning_event_kind kind, const char *s, size_t n)
{
    sl_fe_stream *st = ctx;
    if (kind == SL_REASONING_EVENT_REASONING) {
        if (st->stream)
            return delta_text(st, "reasoning_content", s, n);
        return buf_append(&st->reason, &st->reason_len, &st->reason_cap, s, n) ? SL_OK : SL_ENOMEM;
    }
    if (st->tools)
        return sl_tool_parser_feed(st->tools, s, n, false, on_tool_event, st);
    sl_tool_event ev = {.kind = SL_TOOL_EVENT_CONTENT, .text = s, .len = n};
    return on_tool_event(st, &ev);
}

/* Text past the stop strings: to the answer, or through the filters. final:
 * the answer ends (held text is decided now). */
static void out_text(sl_fe_stream *st, const char *s, size_t n, bool final)
{
    if (!st->filtered) {
        if (n && !buf_append(&st->text, &st->text_len, &st->text_cap, s, n))
            st->oom = true;
        return;
    }
    sl_status rc = SL_OK;
    if (st->reasoning_on)
        rc = sl_reasoning_feed(&st->reasoning, s, n, final, on_reasoning_text, st);
    else if (n)
        rc = on_reasoning_text(st, SL_REASONING_EVENT_CONTENT, s, n);
    if (rc == SL_OK && final && st->tools)
        rc = sl_tool_parser_feed(st->tools, "", 0, true, on_tool_event, st);
    if (rc < 0)
        st->oom = true;
}

static void take_text(sl_fe_stream *st, const char *s, size_t n)
{
    const char *emit = NULL;
    size_t emit_len = 0;
    if (n == 0 || st->stop_hit)
        return;
    if (sl_api_stop_push(&st->stop, s, n, &emit, &emit_len) < 0)
        return;    /* out of memory: the matcher kept the text; it comes out with the next piece */
    out_text(st, emit, emit_len, false);
    if (st->stop.hit) {
        st->stop_hit = true;
        /* The client's answer is complete: stop the worker now, not at max_tokens. */
        if (st->have_ticket)
            sl_shm_cancel(st->fe->shm, st->ticket);
    }
}

static void consume(sl_fe_stream *st, int32_t token, const sl_logprob_record *rec)
{
    sl_fe *fe = st->fe;
    if (st->stop_hit)
        return;     /* tokens the worker made before it saw the cancel: not the client's */
    st->n_generated++;
    bool marker = st->tools != NULL && token >= 0 && (token == fe->tool_markers[0] || token == fe->tool_markers[1]);
    size_t n = sl_detok_push(&st->detok, fe->tok, token, marker, st->piece, st->piece_cap);
    take_text(st, st->piece, n);
    if (st->logprobs && rec != NULL && st->lp_live && !sl_tokenizer_is_eog(fe->tok, token)) {
        sl_api_token_logprob tl;
        if (sl_api_token_logprob_from_record(&tl, rec, fe->tok, st->lp_scratch, st->lp_cap) == SL_OK &&
            sl_api_logprobs_push(&st->lp, &tl) < 0)
            st->oom = true;
    }
}

static bool lp_has_entries(const sl_fe_stream *st)
{
    if (!st->lp_live || st->lp._obj == NULL)
        return false;
    json_t *c = json_object_get(st->lp._obj, st->ep == SL_API_ENDPOINT_CHAT ? "content" : "tokens");
    return json_array_size(c) > 0;
}

static void lp_reset(sl_fe_stream *st)
{
    if (!st->logprobs)
        return;
    size_t off = st->lp.text_offset;
    if (st->lp_live)
        sl_api_logprobs_fini(&st->lp);
    st->lp_live = sl_api_logprobs_init(&st->lp, st->ep, off) == SL_OK;
    if (!st->lp_live)
        st->oom = true;
}

/* A filtered stream's deltas of this event as chunks onto st->out, the
 * event's logprobs on the first; with none, the logprobs wait for the next
 * event, or (last) ride on an empty content delta. */
static bool out_deltas(sl_fe_stream *st, bool last)
{
    size_t n = json_array_size(st->deltas);
    bool lp = lp_has_entries(st);
    if (n == 0 && !(last && lp))
        return true;
    sl_api_chunk c = {.endpoint = st->ep, .kind = SL_API_CHUNK_DELTA, .id = st->id, .created = st->created,
                      .model = st->fe->model_name, .include_usage = st->include_usage};
    bool ok = true;
    if (n == 0) {
        json_t *d = json_pack("{s:s}", "content", "");
        c.delta = d;
        c.logprobs = &st->lp;
        ok = d != NULL && out_event(st, sl_api_chunk_build(&c));
        json_decref(d);
    }
    for (size_t i = 0; i < n && ok; i++) {
        c.delta = json_array_get(st->deltas, i);
        c.logprobs = i == 0 && lp ? &st->lp : NULL;
        ok = out_event(st, sl_api_chunk_build(&c));
    }
    json_array_clear(st->deltas);
    lp_reset(st);
    return ok;
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* ================================================================ finish */

/* A FAILED mailbox that a worker death failed (shared/recover.c), not the
 * worker itself: recovery bumps the worker generation before it marks the
 * mailboxes, so a generation newer than at submission says so; its error
 * text is the fallback for a death between submission and takeover. */
static bool worker_died(const sl_fe_stream *st, const sl_shm_result_info *info)
{
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(st->fe->shm, &wi);
    if (wi.worker_generation != st->worker_gen)
        return true;
    static const char died[] = "the worker process died";
    return strncmp(info->error, died, sizeof died - 1) == 0;
}

static void finish(sl_fe_stream *st)
{
    sl_fe *fe = st->fe;
    sl_shm_result_info info;
    memset(&info, 0, sizeof info);
    if (st->have_ticket && sl_shm_result(fe->shm, st->ticket, &info) != SL_OK) {
        fail(st, SL_API_ERR_UNAVAILABLE, "the request was lost: the worker restarted");
        return;
    }
    if (!st->stop_hit) {
        size_t n = sl_detok_flush(&st->detok, fe->tok, st->piece, st->piece_cap);
        take_text(st, st->piece, n);
    }
    if (!st->stop_hit) {
        const char *emit = NULL;
        size_t emit_len = 0;
        sl_api_stop_flush(&st->stop, &emit, &emit_len);
        out_text(st, emit, emit_len, false);
    }
    if (st->filtered)
        out_text(st, "", 0, true);   /* also after a stop string: what the filters held is decided */
    if (st->oom) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory");
        return;
    }
    sl_api_finish fin = SL_API_FINISH_STOP;
    if (!st->stop_hit) {
        if (info.state == SL_MAILBOX_STATE_FAILED) {
            bool died = worker_died(st, &info);
            if (!st->started && died) {
                /* Nothing reached the client: a 503 with Retry-After says it is
                 * safe to send again (HAProxy's retry-on 503 replays it). */
                sl_api_error e;
                sl_api_error_set(&e, SL_API_ERR_UNAVAILABLE, NULL,
                                 "%s; nothing was sent, so it can be retried.",
                                 info.error[0] ? info.error : "the worker process died while running this request");
                e.code = "worker_lost";
                e.retry_after_s = 1;
                fail_with(st, &e);
                return;
            }
            char msg[SL_SHM_ERROR_LEN + 32];
            snprintf(msg, sizeof msg, "generation failed: %s", info.error[0] ? info.error : "worker error");
            if (st->stream && !st->started && (st->text_len > 0 || lp_has_entries(st))) {
                /* The worker failed after making text nobody has seen yet: the
                 * stream starts, sends it, and ends with the error event. */
                sl_api_chunk c = {.endpoint = st->ep, .kind = SL_API_CHUNK_TEXT, .id = st->id,
                                  .created = st->created, .model = fe->model_name, .text = st->text,
                                  .text_len = st->text_len, .logprobs = lp_has_entries(st) ? &st->lp : NULL,
                                  .include_usage = st->include_usage};
                if (out_event(st, sl_api_chunk_build(&c))) {
                    commit(st);
                    st->keep_out = true;
                }
            }
            if (died) {
                /* Part of the answer is out: the error event says what was
                 * lost, as the 503 would have (a client's retry is its call). */
                sl_api_error e;
                sl_api_error_set(&e, SL_API_ERR_UNAVAILABLE, NULL, "%s; the answer so far is incomplete.",
                                 info.error[0] ? info.error : "the worker process died while running this request");
                e.code = "worker_lost";
                fail_with(st, &e);
                return;
            }
            fail(st, SL_API_ERR_INTERNAL, msg);
            return;
        }
        if (info.state == SL_MAILBOX_STATE_CANCELLED) {
            fail(st, SL_API_ERR_UNAVAILABLE, "the request was cancelled by the server");
            return;
        }
        fin = info.finish_reason == SL_FINISH_REASON_LENGTH ? SL_API_FINISH_LENGTH : SL_API_FINISH_STOP;
        observe(fe, &info.timings, st->n_generated);
    }
    if (st->n_calls > 0 && fin == SL_API_FINISH_STOP)
        fin = SL_API_FINISH_TOOL_CALLS;
    drop_ticket(st, false);   /* released now, or after the worker saw the stop string's cancel */

    sl_api_usage usage = {st->n_prompt, st->n_generated, info.cached_tokens};
    sl_api_timings tm = timings_of(st, &info.timings);
    if (!st->stream) {
        sl_api_result r = {
            .endpoint = st->ep, .id = st->id, .created = st->created, .model = fe->model_name,
            .text = st->text ? st->text : "", .text_len = st->text_len, .finish = fin, .usage = usage,
            .timings = &tm, .logprobs = st->lp_live ? &st->lp : NULL,
        };
        if (st->filtered) {
            r.content_null = blank(st->text, st->text_len);
            r.reasoning = st->reasoning_on && st->reason_len > 0 ? st->reason : NULL;
            r.reasoning_len = st->reason_len;
            r.tool_calls = st->calls;
        }
        char *body = sl_api_response_build(&r);
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
        sl_fe_respond_counted(fe, st->req, &st->ri, 200, "application/json", body, strlen(body), 0, st->n_prompt,
                              st->n_generated, sl_api_finish_name(fin));
        free(body);
        return;
    }
    out_reset(st);
    sl_api_chunk c = {.endpoint = st->ep, .id = st->id, .created = st->created, .model = fe->model_name,
                      .include_usage = st->include_usage};
    bool ok = true;
    if (st->filtered) {
        ok = out_deltas(st, true);
    } else if (st->text_len > 0 || lp_has_entries(st)) {
        c.kind = SL_API_CHUNK_TEXT;
        c.text = st->text ? st->text : "";
        c.text_len = st->text_len;
        c.logprobs = lp_has_entries(st) ? &st->lp : NULL;
        ok = ok && out_event(st, sl_api_chunk_build(&c));
    }
    c.kind = SL_API_CHUNK_FINISH;
    c.text = "";
    c.text_len = 0;
    c.logprobs = NULL;
    c.finish = fin;
    c.timings = st->include_usage ? NULL : &tm;
    ok = ok && out_event(st, sl_api_chunk_build(&c));
    if (st->include_usage) {
        c.kind = SL_API_CHUNK_USAGE;
        c.usage = &usage;
        c.timings = &tm;
        ok = ok && out_event(st, sl_api_chunk_build(&c));
    }
    ok = ok && buf_append(&st->out, &st->out_len, &st->out_cap, SL_API_SSE_DONE, strlen(SL_API_SSE_DONE));
    if (!ok) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory building the last events");
        return;
    }
    st->logged = true;
    sl_fe_respond_log(fe, st->req, &st->ri, 200, st->n_prompt, st->n_generated, sl_api_finish_name(fin));
    send_out(st, H2O_SEND_STATE_FINAL);
}

/* ================================================================ pump */

/* Moves one stream forward: reads what the mailbox holds (only when no write
 * is in flight: that is the backpressure), turns it into text, and sends one
 * event, or finishes. */
static void pump(sl_fe_stream *st)
{
    sl_fe *fe = st->fe;
    if (st->done || st->inflight || !st->have_ticket)
        return;
    static int32_t toks[READ_BATCH];
    static sl_logprob_record recs[READ_BATCH];
    bool want_recs = st->logprobs && sl_shm_get_limits(fe->shm)->logprobs;
    if (st->stream) {
        st->text_len = 0;
        if (!st->filtered)
            lp_reset(st);   /* a filtered stream resets once its logprobs went out (out_deltas) */
    }
    bool terminal = false;
    uint32_t total = 0;
    while (!st->stop_hit && (!st->stream || total < READ_MAX_PER_EVENT)) {
        uint32_t n = 0;
        sl_mailbox_state state = SL_MAILBOX_STATE_RUNNING;
        sl_status rc = sl_shm_read_tokens(fe->shm, st->ticket, toks, want_recs ? recs : NULL, READ_BATCH, &n, &state);
        if (rc < 0) {
            st->have_ticket = false;   /* not ours any more (recovery took it back) */
            fail(st, SL_API_ERR_UNAVAILABLE, "the request was lost: the worker restarted");
            return;
        }
        for (uint32_t i = 0; i < n; i++)
            consume(st, toks[i], want_recs ? &recs[i] : NULL);
        total += n;
        if (st->oom) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory");
            return;
        }
        if (state >= SL_MAILBOX_STATE_FINISHED && n < READ_BATCH) {
            terminal = true;
            break;
        }
        if (n < READ_BATCH)
            break;
    }
    if (!st->stream && st->text_len + st->reason_len > sl_fe_max_response(fe->cfg)) {
        fail_too_large(st, st->text_len + st->reason_len);
        return;
    }
    if (terminal || st->stop_hit) {
        finish(st);
        return;
    }
    if (st->stream && st->filtered) {
        if (json_array_size(st->deltas) == 0)
            return;     /* all held back (a call or a tag being decided) */
        out_reset(st);
        if (!out_deltas(st, false)) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory building an event");
            return;
        }
        send_out(st, H2O_SEND_STATE_IN_PROGRESS);
        return;
    }
    if (!st->stream || (st->text_len == 0 && !lp_has_entries(st)))
        return;
    out_reset(st);
    sl_api_chunk c = {.endpoint = st->ep, .kind = SL_API_CHUNK_TEXT, .id = st->id, .created = st->created,
                      .model = fe->model_name, .text = st->text, .text_len = st->text_len,
                      .logprobs = lp_has_entries(st) ? &st->lp : NULL, .include_usage = st->include_usage};
    if (!out_event(st, sl_api_chunk_build(&c))) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory building an event");
        return;
    }
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
    drop_ticket(st, true);
}

static void on_dispose(void *p)
{
    sl_fe_stream *st = p;
    unlink_stream(st);
    drop_ticket(st, true);
    if (!st->logged)
        sl_fe_respond_log(st->fe, st->req, &st->ri, 499, st->n_prompt, st->n_generated, "client_closed");
    sl_api_stop_fini(&st->stop);
    if (st->lp_live)
        sl_api_logprobs_fini(&st->lp);
    free(st->piece);
    free(st->lp_scratch);
    free(st->text);
    free(st->out);
    sl_reasoning_fini(&st->reasoning);
    sl_tool_parser_destroy(st->tools);
    json_decref(st->deltas);
    free(st->reason);
    json_decref(st->calls);
}

/* The client went away (probe) or stopped reading (write timeout) or the drain
 * deadline passed: cancel the request and end the response. */
static void kill_stream(sl_fe_stream *st, int status_if_unstarted)
{
    drop_ticket(st, true);
    st->done = true;
    unlink_stream(st);
    if (st->started) {
        h2o_send(st->req, NULL, 0, H2O_SEND_STATE_ERROR);
    } else {
        st->logged = true;
        st->req->http1_is_persistent = 0;
        sl_fe_respond_counted(st->fe, st->req, &st->ri, status_if_unstarted, "application/json", "", 0, 0,
                              st->n_prompt, st->n_generated, "client_closed");
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
                drop_ticket(st, true);
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
                if (buf_append(&st->out, &st->out_len, &st->out_cap, ping, sizeof ping - 1))
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
            drop_ticket(st, true);
            int fd = stream_fd(st);
            if (fd >= 0)
                shutdown(fd, SHUT_RDWR);
            continue;
        }
        fail(st, SL_API_ERR_UNAVAILABLE, why);
    }
}

/* ================================================================ start */

void sl_fe_stream_start(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_api_request *r,
                        sl_shm_ticket ticket, int64_t n_prompt, bool think_open)
{
    sl_fe_stream *st = h2o_mem_alloc_shared(&req->pool, sizeof *st, on_dispose);
    memset(st, 0, sizeof *st);
    st->fe = fe;
    st->req = req;
    st->ri = *ri;
    st->ep = r->endpoint;
    st->stream = r->stream;
    st->include_usage = r->include_usage;
    st->logprobs = r->logprobs;
    st->ticket = ticket;
    st->have_ticket = true;
    st->created = (int64_t)time(NULL);
    st->n_prompt = n_prompt;
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(fe->shm, &wi);
    st->worker_gen = wi.worker_generation;
    sl_api_id_make(st->id, st->ep);
    /* generated text continues the prompt: its leading space is kept */
    sl_detok_init_continuation(&st->detok);
    st->piece_cap = sl_detok_max_piece(fe->tok);
    st->piece = sl_malloc(st->piece_cap);
    st->lp_cap = (1 + SL_TOP_LOGPROBS_MAX) * st->piece_cap;
    st->lp_scratch = st->logprobs ? sl_malloc(st->lp_cap) : NULL;
    sl_status rc = sl_api_stop_init(&st->stop, r->stop, r->stop_len, r->n_stop);
    if (st->logprobs)
        st->lp_live = sl_api_logprobs_init(&st->lp, st->ep, 0) == SL_OK;
    if (st->ep == SL_API_ENDPOINT_CHAT) {
        /* Reasoning: the request's reasoning_format, else the server's. */
        bool inline_ = r->reasoning_format == SL_API_REASONING_INLINE ||
                       (r->reasoning_format == SL_API_REASONING_SERVER && fe->reasoning_inline);
        st->reasoning_on = fe->template_thinks && !inline_;
        sl_reasoning_init(&st->reasoning, think_open);
        /* Calls: parsed unless tool_choice is none; a forced call is parsed in
         * the format its grammar wrote, also for a template without one. */
        bool forced = r->tool_choice_mode == SL_API_TOOL_CHOICE_REQUIRED ||
                      r->tool_choice_mode == SL_API_TOOL_CHOICE_NAMED;
        sl_tool_format tf = fe->tool_format == SL_TOOL_FORMAT_NONE && forced ? SL_TOOL_FORMAT_HERMES : fe->tool_format;
        if (r->tools != NULL && json_array_size(r->tools) > 0 && r->tool_choice_mode != SL_API_TOOL_CHOICE_NONE &&
            tf != SL_TOOL_FORMAT_NONE && sl_tool_parser_create(tf, r->tools, &st->tools) < 0)
            rc = SL_ENOMEM;
        st->filtered = st->reasoning_on || st->tools != NULL;
    }
    link_stream(fe, st);
    if (st->piece == NULL || rc != SL_OK || (st->logprobs && (st->lp_scratch == NULL || !st->lp_live))) {
        fail(st, SL_API_ERR_INTERNAL, "out of memory");
        return;
    }
    st->last_send_ns = sl_shm_now_ns();    /* the ping timer counts from submission */
    if (st->stream) {
        /* The first event is made now and sent with the first tokens (or the
         * first ping, or the end), together with the headers (commit): the
         * role delta for chat, a comment for completions (which have no role
         * chunk). */
        st->out_len = 0;
        bool ok;
        if (st->ep == SL_API_ENDPOINT_CHAT) {
            sl_api_chunk c = {.endpoint = st->ep, .kind = SL_API_CHUNK_ROLE, .id = st->id, .created = st->created,
                              .model = fe->model_name, .include_usage = st->include_usage};
            ok = out_event(st, sl_api_chunk_build(&c));
        } else {
            ok = buf_append(&st->out, &st->out_len, &st->out_cap, ": ok\n\n", 6);
        }
        if (!ok) {
            fail(st, SL_API_ERR_INTERNAL, "out of memory");
            return;
        }
    }
    pump(st);   /* an echo worker may already be done; normally this reads nothing */
}
