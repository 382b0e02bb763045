/* tools/loadgen/loadgen.c: closed-loop load generator for an OpenAI-compatible
 * server (sluice serve, or tools/stubserver for calibration).
 *
 *   loadgen --url HOST:PORT [--concurrency 1,64,256] [--requests N | --duration S]
 *           [--endpoint chat|completions] [--prompt-words W] [--shared-prefix-words P]
 *           [--max-tokens M]
 *           [--ignore-eos] [--threads T] [--timeout S] [--no-retry-stale] [--json FILE] ...
 *
 * For each concurrency level C in turn, C connections each run requests back
 * to back over HTTP/1.1 keep-alive (a new request the moment the previous one
 * ends: closed loop). Every request streams, with stream_options.include_usage.
 * Per request: TTFT (request start to the first non-empty content chunk),
 * inter-token gaps (between content chunks), end-to-end time. Output tok/s
 * is the sum of usage.completion_tokens over successful requests divided by
 * the level's wall time; content chunks are counted as a cross-check.
 *
 * The trade-off: T threads each run their own epoll loop over their share of
 * the connections, and all times of one recv() batch share one clock read, so
 * gaps between chunks that arrived in the same read are 0 (they did arrive
 * together). Latencies go into log histograms with 2% buckets: percentiles are
 * accurate to 2%, memory stays fixed however long the run. The load
 * generator's own CPU time (getrusage) is printed so a run shows whether the
 * generator, not the server, was the bottleneck.
 *
 * A stale keep-alive connection: a server may close a kept-alive connection
 * while a request is on its way (llama.cpp's llama-server does, under load).
 * A request sent on a REUSED connection that sees EOF or a reset before the
 * first response byte is sent again, once, on a new connection, and counted
 * in retried_stale rather than as an error, as HTTP clients do (RFC 9112
 * section 9.3.1: no response byte came, so nothing was processed that the
 * client saw). A fresh connection closed the same way, a second stale close,
 * or a close after any response byte is still an error. The retried request
 * keeps its clock: TTFT and end-to-end run from the first send, so they
 * include the wasted attempt and the reconnect, as a real client sees them. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tools/loadgen/event.h"
#include "tools/loadgen/resp.h"

#define MAX_LEVELS 16
#define HIST_N 1100           /* 1 us .. ~2e9 us in 2% steps */
#define HIST_STEP 1.02
#define HEAD_MAX 1024         /* request head: room for the host and an API key */

/* ------------------------------------------------------------------------ */
/* options                                                                   */

typedef struct {
    char host[256], port[16];
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int levels[MAX_LEVELS], n_levels;
    long requests;            /* per level; 0 = --duration */
    double duration, timeout; /* seconds */
    int chat, prompt_words, max_tokens, ignore_eos, threads, read_size;
    int shared_prefix_words;  /* the same words open every prompt (the prefix cache's load) */
    int show_request;         /* --show-request: print that request's body and exit; -1 off */
    int no_retry_stale;       /* --no-retry-stale: a stale keep-alive close is an error (the raw behaviour) */
    const char *model, *json_path, *api_key;
    const char *extra;        /* --extra-json: members added to every body, or NULL */
} options;

static options opt;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------ */
/* statistics                                                                */

typedef struct {
    uint64_t n, counts[HIST_N];
    double sum, max;          /* microseconds */
} hist;

static void hist_add(hist *h, double us)
{
    int b = us < 1 ? 0 : 1 + (int)(log(us) / log(HIST_STEP));
    h->counts[b < HIST_N ? b : HIST_N - 1]++;
    h->n++;
    h->sum += us;
    if (us > h->max)
        h->max = us;
}

static void hist_merge(hist *to, const hist *from)
{
    for (int i = 0; i < HIST_N; i++)
        to->counts[i] += from->counts[i];
    to->n += from->n;
    to->sum += from->sum;
    if (from->max > to->max)
        to->max = from->max;
}

/* The q-quantile in milliseconds: the geometric middle of its bucket. */
static double hist_ms(const hist *h, double q)
{
    if (!h->n)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;
    if (want < 1)
        want = 1;
    for (int i = 0; i < HIST_N; i++) {
        seen += h->counts[i];
        if (seen >= want) {
            double v = i == 0 ? 0.5 : pow(HIST_STEP, i - 0.5);
            return (v < h->max ? v : h->max) / 1e3;
        }
    }
    return h->max / 1e3;
}

enum {
    ERR_CONNECT,              /* connect() failed or the connection was refused */
    ERR_HTTP,                 /* a status other than 200 */
    ERR_MALFORMED,            /* bad HTTP framing, an event that is not JSON, no [DONE] */
    ERR_STREAM,               /* the server sent an error event mid-stream */
    ERR_NO_USAGE,             /* [DONE] without a usage chunk */
    ERR_TIMEOUT,              /* no complete response within --timeout */
    ERR_IO,                   /* reset or closed mid-response (a stale keep-alive close retried once is not) */
    ERR_N
};
static const char *err_names[ERR_N] = {"connect", "http", "malformed", "stream_error", "missing_usage",
                                       "timeout", "io"};

typedef struct {
    uint64_t ok, errors[ERR_N], connects;
    uint64_t retried_stale;   /* requests sent again after a reused connection closed before any response byte */
    int64_t completion_tokens, prompt_tokens, content_chunks;
    hist ttft, itl, e2e;
    double cpu_s;             /* this thread's CPU time (RUSAGE_THREAD) */
    char first_error[200];
} stats;

/* ------------------------------------------------------------------------ */
/* connections                                                               */

typedef enum { CONN_IDLE, CONN_CONNECTING, CONN_SENDING, CONN_RECEIVING, CONN_FINISHED } conn_state;

typedef struct worker worker;

typedef struct {
    int fd;
    conn_state state;
    worker *w;
    char *req;
    size_t req_len, req_off, req_cap;
    lg_resp resp;
    double t_start, t_first, t_last, t_now, deadline, retry_at;
    int64_t n_content, completion_tokens, prompt_tokens;
    int saw_done, stream_error, bad_event;
    int reused;               /* the current attempt went out on a connection that had carried a response */
    int retried;              /* the current request was already sent again once (a stale close) */
    size_t resp_bytes;        /* response bytes received by the current attempt */
} conn;

struct worker {
    int id, n_conns, epfd;
    conn *conns;
    pthread_t thread;
    double t_end;             /* when this level ends for --duration */
    stats st;
};

static atomic_long next_request;  /* requests claimed in this level */

static void note_error(worker *w, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note_error(worker *w, int kind, const char *fmt, ...)
{
    w->st.errors[kind]++;
    if (!w->st.first_error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->st.first_error, sizeof w->st.first_error, fmt, ap);
        va_end(ap);
    }
}

static const char *words[] = {
    "time", "person", "year", "way", "day", "thing", "man", "world", "life", "hand", "part", "child",
    "eye", "woman", "place", "work", "week", "case", "point", "government", "company", "number", "group",
    "problem", "fact", "river", "stone", "light", "garden", "window", "music", "paper", "market", "winter",
    "summer", "bridge", "engine", "silver", "forest", "harbor", "letter", "mountain", "village", "question",
    "answer", "story", "history", "science", "language", "kitchen", "morning", "evening", "station",
    "island", "table", "chair", "road", "ocean", "cloud", "field", "animal", "doctor", "teacher", "city",
};

/* Builds the request for request number id into c->req. */
static int build_request(conn *c, long id)
{
    size_t nw = sizeof words / sizeof words[0];
    size_t cap = HEAD_MAX + 1024 + ((size_t)opt.prompt_words + (size_t)opt.shared_prefix_words) * 12 +
                 (opt.extra ? strlen(opt.extra) : 0);
    if (c->req_cap < cap) {
        free(c->req);
        if (!(c->req = malloc(cap)))
            return -1;
        c->req_cap = cap;
    }
    char *body = c->req + HEAD_MAX, *p = body, *end = c->req + cap;
    p += sprintf(p, "{%s%s%s%s", opt.model ? "\"model\":\"" : "", opt.model ? opt.model : "", opt.model ? "\"," : "",
                 opt.chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"" : "\"prompt\":\"");
    uint64_t s = 0x243f6a8885a308d3ull;   /* a fixed seed: every request's prefix is the same text */
    for (int i = 0; i < opt.shared_prefix_words; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p += sprintf(p, "%s%s", i ? " " : "", words[s % nw]);
    }
    s = (uint64_t)id * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < opt.prompt_words; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;   /* xorshift: different words per request */
        p += sprintf(p, "%s%s", i || opt.shared_prefix_words ? " " : "", words[s % nw]);
    }
    p += snprintf(p, (size_t)(end - p), "\"%s,\"max_tokens\":%d,\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true}%s%s%s}",
                  opt.chat ? "}]" : "", opt.max_tokens, opt.ignore_eos ? ",\"ignore_eos\":true" : "",
                  opt.extra ? "," : "", opt.extra ? opt.extra : "");
    size_t blen = (size_t)(p - body);
    char head[HEAD_MAX];
    int hlen = snprintf(head, sizeof head,
                        "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                        "Accept: text/event-stream\r\nContent-Length: %zu\r\n%s%s%s\r\n",
                        opt.chat ? "/v1/chat/completions" : "/v1/completions", opt.host, opt.port, blen,
                        opt.api_key ? "Authorization: Bearer " : "", opt.api_key ? opt.api_key : "",
                        opt.api_key ? "\r\n" : "");
    if (hlen >= HEAD_MAX)
        return -1;
    memmove(c->req + hlen, body, blen);
    memcpy(c->req, head, (size_t)hlen);
    c->req_len = (size_t)hlen + blen;
    c->req_off = 0;
    return 0;
}

/* One SSE event of the current response. */
static int on_event(void *ctx, const char *data, size_t len)
{
    conn *c = ctx;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        c->saw_done = 1;
        return 0;
    }
    lg_event ev;
    if (lg_event_parse(data, len, opt.chat, &ev) < 0) {
        c->bad_event++;
        return 0;
    }
    if (ev.error)
        c->stream_error = 1;
    if (ev.usage) {
        c->completion_tokens = ev.completion_tokens;
        c->prompt_tokens = ev.prompt_tokens;
    }
    if (ev.content) {
        stats *st = &c->w->st;
        if (c->n_content == 0) {
            c->t_first = c->t_now;
            hist_add(&st->ttft, (c->t_now - c->t_start) * 1e6);
        } else {
            hist_add(&st->itl, (c->t_now - c->t_last) * 1e6);
        }
        c->t_last = c->t_now;
        c->n_content++;
    }
    return 0;
}

static void conn_close(conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(c->w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
}

/* The current request failed: count it, drop the connection, go idle. */
static void conn_fail(conn *c, int kind, const char *what)
{
    note_error(c->w, kind, "%s", what);
    conn_close(c);
    c->state = CONN_IDLE;
    c->retry_at = now_s() + 0.01;   /* no hot loop against a server that resets or is down */
}

static void set_events(conn *c, uint32_t ev)
{
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(c->w->epfd, EPOLL_CTL_MOD, c->fd, &e);
}

static int claim_request(worker *w, long *id)
{
    if (opt.requests) {
        long k = atomic_fetch_add(&next_request, 1);
        *id = k;
        return k < opt.requests;
    }
    *id = atomic_fetch_add(&next_request, 1);
    return now_s() < w->t_end;
}

static void try_send(conn *c);

/* Opens a new connection for the request in c->req and sends it once
 * connected (at once, or from the event loop after EINPROGRESS). */
static void conn_connect(conn *c)
{
    c->reused = 0;
    c->fd = socket(opt.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        perror("loadgen: socket");
        exit(1);
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->w->st.connects++;
    struct epoll_event e = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(c->w->epfd, EPOLL_CTL_ADD, c->fd, &e);
    if (connect(c->fd, (struct sockaddr *)&opt.addr, opt.addr_len) == 0) {
        c->state = CONN_SENDING;
        try_send(c);
    } else if (errno == EINPROGRESS) {
        c->state = CONN_CONNECTING;
    } else {
        char m[96];
        snprintf(m, sizeof m, "connect: %s", strerror(errno));
        conn_fail(c, ERR_CONNECT, m);
    }
}

/* Starts the next request on an idle connection, opening one if needed. */
static void conn_start(conn *c)
{
    long id;
    if (!claim_request(c->w, &id)) {
        conn_close(c);
        c->state = CONN_FINISHED;
        return;
    }
    if (build_request(c, id) < 0) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(1);
    }
    c->t_start = now_s();
    c->deadline = c->t_start + opt.timeout;
    c->n_content = 0;
    c->completion_tokens = c->prompt_tokens = -1;
    c->saw_done = c->stream_error = c->bad_event = 0;
    c->retried = 0;
    c->resp_bytes = 0;
    lg_resp_init(&c->resp, on_event, c);
    if (c->fd < 0) {
        conn_connect(c);
        return;
    }
    c->reused = 1;
    c->state = CONN_SENDING;
    try_send(c);
}

/* The connection closed or reset under the current attempt (what: the
 * error's text). A first close of a reused connection before any response
 * byte is the server dropping an idle keep-alive connection: the request is
 * sent again, once, on a new connection, keeping its t_start and deadline
 * (the client's view: its latency includes the wasted attempt). Anything
 * else fails the request. */
static void conn_lost(conn *c, const char *what)
{
    if (!c->reused || c->retried || c->resp_bytes || opt.no_retry_stale) {
        conn_fail(c, ERR_IO, what);
        return;
    }
    conn_close(c);
    c->w->st.retried_stale++;
    c->retried = 1;
    c->req_off = 0;
    lg_resp_init(&c->resp, on_event, c);
    conn_connect(c);
}

static void try_send(conn *c)
{
    while (c->req_off < c->req_len) {
        ssize_t k = send(c->fd, c->req + c->req_off, c->req_len - c->req_off, MSG_NOSIGNAL);
        if (k > 0) {
            c->req_off += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EAGAIN) {
            set_events(c, EPOLLOUT);
            return;
        }
        char m[96];
        snprintf(m, sizeof m, "send: %s", k < 0 ? strerror(errno) : "closed");
        if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
            conn_lost(c, m);
        else
            conn_fail(c, ERR_IO, m);
        return;
    }
    c->state = CONN_RECEIVING;
    set_events(c, EPOLLIN | EPOLLRDHUP);
}

/* The response is complete: classify it and record its numbers. */
static void conn_finish(conn *c)
{
    worker *w = c->w;
    char m[200];
    int keep = !c->resp.close;
    if (c->resp.status != 200) {
        snprintf(m, sizeof m, "HTTP %d: %.160s", c->resp.status, lg_resp_body(&c->resp));
        note_error(w, ERR_HTTP, "%s", m);
    } else if (c->stream_error) {
        note_error(w, ERR_STREAM, "error event in the stream");
    } else if (c->bad_event || !c->saw_done) {
        note_error(w, ERR_MALFORMED, c->bad_event ? "an event that is not a JSON object" : "no [DONE]");
    } else if (c->completion_tokens < 0) {
        note_error(w, ERR_NO_USAGE, "no usage chunk before [DONE]");
    } else {
        w->st.ok++;
        w->st.completion_tokens += c->completion_tokens;
        w->st.prompt_tokens += c->prompt_tokens > 0 ? c->prompt_tokens : 0;
        w->st.content_chunks += c->n_content;
        hist_add(&w->st.e2e, (c->t_now - c->t_start) * 1e6);
    }
    if (!keep)
        conn_close(c);
    c->state = CONN_IDLE;
}

static void conn_readable(conn *c, char *buf)
{
    for (;;) {
        ssize_t k = recv(c->fd, buf, (size_t)opt.read_size, 0);
        if (k < 0 && errno == EAGAIN)
            return;
        c->t_now = now_s();
        if (k <= 0) {
            if (k == 0 && lg_resp_eof(&c->resp) == SL_OK) {
                conn_close(c);
                conn_finish(c);
            } else if (k == 0 || errno == ECONNRESET) {
                char m[96];
                snprintf(m, sizeof m, "recv: %s %s", k < 0 ? strerror(errno) : "closed",
                         c->resp_bytes ? "mid-response" : "before any response byte");
                conn_lost(c, m);
            } else {
                char m[96];
                snprintf(m, sizeof m, "recv: %s", strerror(errno));
                conn_fail(c, ERR_IO, m);
            }
            return;
        }
        c->resp_bytes += (size_t)k;
        size_t used;
        sl_status rc = lg_resp_feed(&c->resp, buf, (size_t)k, &used);
        if (rc < 0) {
            conn_fail(c, ERR_MALFORMED, "malformed HTTP response framing");
            return;
        }
        if (rc == SL_OK) {
            if (used < (size_t)k) {  /* bytes after a complete response we never asked for */
                conn_fail(c, ERR_MALFORMED, "bytes after the response");
                return;
            }
            conn_finish(c);
            return;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* one worker thread: an epoll loop over its connections                    */

static void *worker_main(void *arg)
{
    worker *w = arg;
    char *buf = malloc((size_t)opt.read_size);
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!buf || w->epfd < 0) {
        perror("loadgen: epoll_create1");
        exit(1);
    }
    for (int i = 0; i < w->n_conns; i++)
        w->conns[i] = (conn){.fd = -1, .state = CONN_IDLE, .w = w};
    struct epoll_event ev[256];
    double last_scan = 0;
    for (;;) {
        int live = 0, waiting = 0;
        double t = now_s();
        for (int i = 0; i < w->n_conns; i++) {
            conn *c = &w->conns[i];
            while (c->state == CONN_IDLE && c->retry_at <= t)
                conn_start(c);
            live += c->state != CONN_FINISHED;
            waiting += c->state == CONN_IDLE;
        }
        if (!live)
            break;
        int n = epoll_wait(w->epfd, ev, 256, waiting ? 5 : 50);
        for (int i = 0; i < n; i++) {
            conn *c = ev[i].data.ptr;
            if (c->state == CONN_CONNECTING) {
                int e = 0;
                socklen_t l = sizeof e;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &l);
                if (e) {
                    char m[96];
                    snprintf(m, sizeof m, "connect: %s", strerror(e));
                    conn_fail(c, ERR_CONNECT, m);
                    continue;
                }
                c->state = CONN_SENDING;
            }
            if (c->state == CONN_SENDING)
                try_send(c);
            else if (c->state == CONN_RECEIVING)
                conn_readable(c, buf);
        }
        t = now_s();
        if (t - last_scan > 0.05) {
            last_scan = t;
            for (int i = 0; i < w->n_conns; i++) {
                conn *c = &w->conns[i];
                if ((c->state == CONN_CONNECTING || c->state == CONN_SENDING || c->state == CONN_RECEIVING) &&
                    t > c->deadline)
                    conn_fail(c, ERR_TIMEOUT, "no complete response within --timeout");
            }
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    w->st.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    for (int i = 0; i < w->n_conns; i++) {
        free(w->conns[i].req);
        lg_resp_fini(&w->conns[i].resp);
    }
    close(w->epfd);
    free(buf);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* one concurrency level                                                     */

typedef struct {
    int concurrency, threads;
    double wall_s, cpu_s, busiest_thread_s;
    stats st;
} level_result;

static double cpu_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static void run_level(int concurrency, level_result *r)
{
    int nt = opt.threads < concurrency ? opt.threads : concurrency;
    worker *ws = calloc((size_t)nt, sizeof *ws);
    conn *conns = calloc((size_t)concurrency, sizeof *conns);
    if (!ws || !conns) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(1);
    }
    atomic_store(&next_request, 0);
    double cpu0 = cpu_self(), t0 = now_s();
    for (int i = 0, off = 0; i < nt; i++) {
        ws[i].id = i;
        ws[i].n_conns = concurrency / nt + (i < concurrency % nt);
        ws[i].conns = conns + off;
        ws[i].t_end = t0 + opt.duration;
        off += ws[i].n_conns;
        if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
            fprintf(stderr, "loadgen: pthread_create failed\n");
            exit(1);
        }
    }
    memset(r, 0, sizeof *r);
    for (int i = 0; i < nt; i++) {
        pthread_join(ws[i].thread, NULL);
        stats *s = &ws[i].st;
        r->st.ok += s->ok;
        for (int k = 0; k < ERR_N; k++)
            r->st.errors[k] += s->errors[k];
        r->st.connects += s->connects;
        r->st.retried_stale += s->retried_stale;
        r->st.completion_tokens += s->completion_tokens;
        r->st.prompt_tokens += s->prompt_tokens;
        r->st.content_chunks += s->content_chunks;
        hist_merge(&r->st.ttft, &s->ttft);
        hist_merge(&r->st.itl, &s->itl);
        hist_merge(&r->st.e2e, &s->e2e);
        if (s->cpu_s > r->busiest_thread_s)
            r->busiest_thread_s = s->cpu_s;
        if (!r->st.first_error[0])
            memcpy(r->st.first_error, s->first_error, sizeof s->first_error);
    }
    r->wall_s = now_s() - t0;
    r->cpu_s = cpu_self() - cpu0;
    r->concurrency = concurrency;
    r->threads = nt;
    free(ws);
    free(conns);
}

/* ------------------------------------------------------------------------ */
/* report                                                                    */

static uint64_t n_errors(const stats *s)
{
    uint64_t n = 0;
    for (int k = 0; k < ERR_N; k++)
        n += s->errors[k];
    return n;
}

static void print_header(void)
{
    printf("%5s %7s %6s %7s %8s %10s %8s %7s %17s %17s %17s %6s %6s\n", "conc", "ok", "errors", "retried", "wall_s",
           "out_tok/s", "req/s", "chk/tok", "TTFT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 ms", "cpu%", "thr%");
}

static void print_level(const level_result *r)
{
    const stats *s = &r->st;
    char ttft[32], itl[32], e2e[32];
    snprintf(ttft, sizeof ttft, "%.2f/%.2f", hist_ms(&s->ttft, .5), hist_ms(&s->ttft, .99));
    snprintf(itl, sizeof itl, "%.2f/%.2f", hist_ms(&s->itl, .5), hist_ms(&s->itl, .99));
    snprintf(e2e, sizeof e2e, "%.1f/%.1f", hist_ms(&s->e2e, .5), hist_ms(&s->e2e, .99));
    printf("%5d %7llu %6llu %7llu %8.2f %10.1f %8.1f %7.3f %17s %17s %17s %6.1f %6.1f\n", r->concurrency,
           (unsigned long long)s->ok, (unsigned long long)n_errors(s), (unsigned long long)s->retried_stale, r->wall_s, s->completion_tokens / r->wall_s,
           s->ok / r->wall_s, s->completion_tokens ? (double)s->content_chunks / s->completion_tokens : 0, ttft, itl,
           e2e, 100 * r->cpu_s / r->wall_s, 100 * r->busiest_thread_s / r->wall_s);
    if (n_errors(s)) {
        printf("      errors:");
        for (int k = 0; k < ERR_N; k++)
            if (s->errors[k])
                printf(" %s=%llu", err_names[k], (unsigned long long)s->errors[k]);
        printf("; first: %s\n", s->first_error);
    }
    fflush(stdout);
}

static json_t *hist_json(const hist *h)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)h->n, "mean", h->n ? h->sum / h->n / 1e3 : 0.0,
                     "p50", hist_ms(h, .5), "p90", hist_ms(h, .9), "p99", hist_ms(h, .99), "p999", hist_ms(h, .999),
                     "max", h->max / 1e3);
}

static json_t *level_json(const level_result *r)
{
    const stats *s = &r->st;
    json_t *errs = json_object();
    for (int k = 0; k < ERR_N; k++)
        json_object_set_new(errs, err_names[k], json_integer((json_int_t)s->errors[k]));
    return json_pack("{s:i,s:i,s:I,s:I,s:o,s:s,s:f,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:o,s:o,s:o,s:{s:f,s:f,s:f,s:f}}",
                     "concurrency", r->concurrency, "threads", r->threads, "requests_ok", (json_int_t)s->ok,
                     "errors_total", (json_int_t)n_errors(s), "errors", errs, "first_error", s->first_error,
                     "wall_s", r->wall_s, "completion_tokens", (json_int_t)s->completion_tokens, "prompt_tokens",
                     (json_int_t)s->prompt_tokens, "content_chunks", (json_int_t)s->content_chunks, "connects",
                     (json_int_t)s->connects, "retried_stale", (json_int_t)s->retried_stale, "output_tok_s", s->completion_tokens / r->wall_s, "requests_s",
                     s->ok / r->wall_s, "ttft_ms", hist_json(&s->ttft), "itl_ms", hist_json(&s->itl), "e2e_ms",
                     hist_json(&s->e2e), "cpu", "seconds", r->cpu_s, "percent_of_one_core",
                     100 * r->cpu_s / r->wall_s, "busiest_thread_s", r->busiest_thread_s, "busiest_thread_percent",
                     100 * r->busiest_thread_s / r->wall_s);
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: loadgen --url HOST:PORT [options]\n"
        "Closed-loop streaming load against an OpenAI-compatible server.\n\n"
        "  --url HOST:PORT         server (an http:// prefix and a path are ignored)\n"
        "  --concurrency LIST      connections, or a list run in sequence: 1,64,256 (default 1)\n"
        "  --requests N            requests per level (default 100)\n"
        "  --duration S            instead: start requests for S seconds per level, then let them finish\n"
        "  --endpoint chat|completions  (default chat)\n"
        "  --prompt-words W        prompt length in words (default 100), different words per request\n"
        "  --shared-prefix-words P every prompt starts with the same P words, then its own W (default 0)\n"
        "  --max-tokens M          max_tokens (default 128)\n"
        "  --ignore-eos            send ignore_eos: true (every request then makes M tokens)\n"
        "  --model NAME            model field (default: none, the server's model)\n"
        "  --extra-json MEMBERS    JSON members added to every body, e.g. '\"response_format\":{...}'\n"
        "  --api-key KEY           send Authorization: Bearer KEY\n"
        "  --threads T             event-loop threads (default: cores, at most the concurrency)\n"
        "  --timeout S             per-request limit (default 120)\n"
        "  --no-retry-stale        count a reused connection closed before any response byte as an error\n"
        "                          (default: send the request again once on a new connection, retried_stale)\n"
        "  --read-size B           bytes per recv() (default 65536; small values test the parser)\n"
        "  --json FILE             also write the results as JSON\n"
        "  --show-request ID       print the body of request ID (0, 1, ...) and exit (no server needed)\n");
}

static int parse_url(const char *url)
{
    if (!strncmp(url, "http://", 7))
        url += 7;
    const char *colon = strrchr(url, ':'), *slash = strchr(url, '/');
    if (!colon || (slash && slash < colon))
        return -1;
    snprintf(opt.host, sizeof opt.host, "%.*s", (int)(colon - url), url);
    snprintf(opt.port, sizeof opt.port, "%.*s", (int)(slash ? slash - colon - 1 : (long)strlen(colon + 1)), colon + 1);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(opt.host, opt.port, &hints, &res);
    if (rc) {
        fprintf(stderr, "loadgen: %s:%s: %s\n", opt.host, opt.port, gai_strerror(rc));
        return -1;
    }
    memcpy(&opt.addr, res->ai_addr, res->ai_addrlen);
    opt.addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    opt = (options){.levels = {1}, .n_levels = 1, .requests = 100, .timeout = 120, .chat = 1, .prompt_words = 100,
                    .max_tokens = 128, .threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .read_size = 65536,
                    .model = NULL, .show_request = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--ignore-eos")) {
            opt.ignore_eos = 1;
            continue;
        }
        if (!strcmp(a, "--no-retry-stale")) {
            opt.no_retry_stale = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "loadgen: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--url")) url = v;
        else if (!strcmp(a, "--concurrency")) {
            opt.n_levels = 0;
            for (char *e = (char *)v; *v; v = e + (*e == ',')) {
                long c = strtol(v, &e, 10);
                if (e == v || c < 1 || c > 65536 || opt.n_levels == MAX_LEVELS || (*e && *e != ',')) {
                    fprintf(stderr, "loadgen: bad --concurrency\n");
                    return 2;
                }
                opt.levels[opt.n_levels++] = (int)c;
            }
        }
        else if (!strcmp(a, "--requests")) opt.requests = atol(v), opt.duration = 0;
        else if (!strcmp(a, "--duration")) opt.duration = atof(v), opt.requests = 0;
        else if (!strcmp(a, "--endpoint")) {
            if (strcmp(v, "chat") && strcmp(v, "completions")) {
                fprintf(stderr, "loadgen: --endpoint is chat or completions\n");
                return 2;
            }
            opt.chat = !strcmp(v, "chat");
        }
        else if (!strcmp(a, "--prompt-words")) opt.prompt_words = atoi(v);
        else if (!strcmp(a, "--shared-prefix-words")) opt.shared_prefix_words = atoi(v);
        else if (!strcmp(a, "--show-request")) opt.show_request = atoi(v);
        else if (!strcmp(a, "--max-tokens")) opt.max_tokens = atoi(v);
        else if (!strcmp(a, "--model")) opt.model = v;
        else if (!strcmp(a, "--extra-json")) opt.extra = v;
        else if (!strcmp(a, "--api-key")) opt.api_key = v;
        else if (!strcmp(a, "--threads")) opt.threads = atoi(v);
        else if (!strcmp(a, "--timeout")) opt.timeout = atof(v);
        else if (!strcmp(a, "--read-size")) opt.read_size = atoi(v);
        else if (!strcmp(a, "--json")) opt.json_path = v;
        else {
            fprintf(stderr, "loadgen: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((!url && opt.show_request < 0) || opt.n_levels == 0 || (opt.requests < 1 && !(opt.duration > 0)) ||
        opt.prompt_words < 0 || opt.prompt_words > 1000000 || opt.shared_prefix_words < 0 ||
        opt.shared_prefix_words > 1000000 || opt.max_tokens < 1 || opt.threads < 1 || opt.threads > 1024 ||
        !(opt.timeout > 0) || opt.read_size < 1 || (opt.model && (strlen(opt.model) > 200 || strpbrk(opt.model, "\"\\"))) ||
        (opt.api_key && (strlen(opt.api_key) > 200 || strpbrk(opt.api_key, "\r\n")))) {
        usage(stderr);
        return 2;
    }
    if (opt.show_request >= 0) {   /* what the load sends, for the tests and the curious */
        conn c = {0};
        snprintf(opt.host, sizeof opt.host, "localhost");
        snprintf(opt.port, sizeof opt.port, "0");
        if (build_request(&c, opt.show_request) < 0) {
            fprintf(stderr, "loadgen: cannot build request %d\n", opt.show_request);
            return 1;
        }
        const char *body = strstr(c.req, "\r\n\r\n");
        printf("%.*s\n", (int)(c.req + c.req_len - body - 4), body + 4);
        free(c.req);
        return 0;
    }
    if (parse_url(url) < 0) {
        fprintf(stderr, "loadgen: --url wants HOST:PORT, got '%s'\n", url);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("loadgen: %s:%s %s, %d prompt words (after %d shared), max_tokens %d%s, %s %s, up to %d threads\n",
           opt.host, opt.port, opt.chat ? "/v1/chat/completions" : "/v1/completions", opt.prompt_words,
           opt.shared_prefix_words, opt.max_tokens,
           opt.ignore_eos ? " (ignore_eos)" : "", opt.requests ? "requests per level" : "seconds per level",
           opt.requests ? "" : "", opt.threads);
    print_header();
    json_t *levels = json_array();
    uint64_t errors = 0;
    for (int i = 0; i < opt.n_levels; i++) {
        level_result r;
        run_level(opt.levels[i], &r);
        print_level(&r);
        json_array_append_new(levels, level_json(&r));
        errors += n_errors(&r.st);
    }
    if (opt.json_path) {
        json_t *doc = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:b,s:I,s:f,s:i,s:o}", "host", opt.host, "port", opt.port,
                                "endpoint", opt.chat ? "chat" : "completions", "prompt_words", opt.prompt_words,
                                "shared_prefix_words", opt.shared_prefix_words,
                                "max_tokens", opt.max_tokens, "ignore_eos", opt.ignore_eos, "requests_per_level",
                                (json_int_t)opt.requests, "duration_s", opt.duration, "threads", opt.threads,
                                "levels", levels);
        if (json_dump_file(doc, opt.json_path, JSON_INDENT(1)) < 0) {
            fprintf(stderr, "loadgen: cannot write %s\n", opt.json_path);
            json_decref(doc);
            return 1;
        }
        json_decref(doc);
    } else {
        json_decref(levels);
    }
    return errors ? 1 : 0;
}
