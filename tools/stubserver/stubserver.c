/* tools/stubserver/stubserver.c: a fake OpenAI-compatible server for
 * calibrating tools/loadgen: no model, no tokenizer, it only streams.
 *
 *   stubserver [--host H] [--port P] [--threads T] [--token-us U] [--ttft-us U] [--fault F]
 *              [--close-idle-after N]
 *
 * POST /v1/chat/completions and /v1/completions answer, like sluice serve,
 * with a chunked text/event-stream: (chat) a role chunk, then max_tokens
 * content chunks of one "token" each, a final chunk with finish_reason
 * "length", with stream_options.include_usage a usage chunk, then [DONE].
 * max_tokens defaults to 16; a non-streaming request gets one JSON body.
 * GET /health answers 200. Tokens go out as fast as the socket takes them
 * (--token-us 0, the default: the whole response in one write), or one per
 * --token-us microseconds after --ttft-us (default: --token-us).
 * --fault breaks every stream one way, for the load generator's error tests:
 * bad-json (the second content chunk is not JSON), no-usage, no-done,
 * error-event (an error event instead of the end), close (the connection
 * closes after half the tokens).
 * --close-idle-after N drops a kept-alive connection the way llama.cpp's
 * llama-server was seen to: N responses go out without "Connection: close",
 * then the next request on the connection is read and the connection closed
 * with no response byte (the load generator's stale keep-alive test).
 * Prints "stubserver: listening on http://HOST:PORT" once all threads listen.
 *
 * The trade-off: each thread has its own SO_REUSEPORT listener and epoll
 * loop (the kernel spreads connections by hash, so a handful of connections
 * may land unevenly) and one timerfd set to its earliest due token, which
 * gives microsecond pacing without a timer per connection. */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define IN_MAX (1 << 20)      /* request head + body at most */
#define MAX_TOKENS_CAP 1000000

static struct {
    const char *host;
    int port, threads;
    long token_ns, ttft_ns;
    const char *fault;        /* NULL, or one of the --fault names */
    long close_idle_after;    /* --close-idle-after: responses per connection, then a silent close; 0 off */
} opt;

static int fault(const char *name)
{
    return opt.fault && !strcmp(opt.fault, name);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* connections                                                               */

typedef struct {
    char *p;
    size_t len, off, cap;
} buf;

static int buf_reserve(buf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return 0;
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->len + n)
        c *= 2;
    char *p = realloc(b->p, c);
    if (!p)
        return -1;
    b->p = p;
    b->cap = c;
    return 0;
}

static int buf_append(buf *b, const char *p, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

typedef struct {
    int fd, streaming, close_after, chat, usage, watching_out, dead;
    long n_tokens, sent;      /* content chunks to send, sent so far */
    long responses;           /* responses started on this connection */
    int64_t due_ns;           /* next token's time when paced */
    buf in, out;
} conn;

typedef struct {
    int lfd, epfd, tfd;
    conn **live;              /* connections with a paced stream */
    int n_live, cap_live;
    int rearm;                /* a paced stream started: the timer may need an earlier time */
    conn **dead;              /* closed in this epoll batch, freed after it */
    int n_dead, cap_dead;
    pthread_t thread;
} worker;

/* Closes c now and frees it after the current epoll batch, which may still
 * hold an event for it (Redis's freeClientAsync). */
static void conn_free(worker *w, conn *c)
{
    if (c->dead)
        return;
    for (int i = 0; i < w->n_live; i++)
        if (w->live[i] == c)
            w->live[i] = w->live[--w->n_live];
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->dead = 1;
    if (w->n_dead == w->cap_dead) {
        int cap = w->cap_dead ? 2 * w->cap_dead : 64;
        conn **d = realloc(w->dead, (size_t)cap * sizeof *d);
        if (!d)
            abort();          /* cannot even queue a free: out of memory */
        w->dead = d;
        w->cap_dead = cap;
    }
    w->dead[w->n_dead++] = c;
}

static void free_dead(worker *w)
{
    for (int i = 0; i < w->n_dead; i++) {
        free(w->dead[i]->in.p);
        free(w->dead[i]->out.p);
        free(w->dead[i]);
    }
    w->n_dead = 0;
}

/* One SSE event as one HTTP chunk. */
static int put_event(buf *b, const char *data, size_t n)
{
    char head[32];
    int h = snprintf(head, sizeof head, "%zx\r\n", n + 8);
    if (buf_reserve(b, (size_t)h + n + 10) < 0)
        return -1;
    buf_append(b, head, (size_t)h);
    buf_append(b, "data: ", 6);
    buf_append(b, data, n);
    buf_append(b, "\n\n\r\n", 4);
    return 0;
}

static int put_chunk(conn *c, const char *delta_or_text, const char *finish)
{
    char ev[512];
    int n;
    if (c->chat)
        n = snprintf(ev, sizeof ev,
                     "{\"id\":\"chatcmpl-stub\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"stub\","
                     "\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}]%s}",
                     delta_or_text, finish, c->usage ? ",\"usage\":null" : "");
    else
        n = snprintf(ev, sizeof ev,
                     "{\"id\":\"cmpl-stub\",\"object\":\"text_completion\",\"created\":0,\"model\":\"stub\","
                     "\"choices\":[{\"index\":0,\"text\":%s,\"logprobs\":null,\"finish_reason\":%s}]%s}",
                     delta_or_text, finish, c->usage ? ",\"usage\":null" : "");
    return put_event(&c->out, ev, (size_t)n);
}

static int put_token(conn *c)
{
    c->sent++;
    if (c->sent == 2 && fault("bad-json"))
        return put_event(&c->out, "{\"choices\":[{\"delta\":", 21);
    return put_chunk(c, c->chat ? "{\"content\":\" tok\"}" : "\" tok\"", "null");
}

/* The final chunk, the usage chunk, [DONE] and the last HTTP chunk. */
static int put_end(conn *c)
{
    if (fault("error-event")) {
        static const char e[] = "{\"error\":{\"message\":\"stub fault\",\"type\":\"server_error\"}}";
        c->streaming = 0;
        if (put_event(&c->out, e, sizeof e - 1) < 0)
            return -1;
        return buf_append(&c->out, "0\r\n\r\n", 5);
    }
    if (put_chunk(c, c->chat ? "{}" : "\"\"", "\"length\"") < 0)
        return -1;
    if (c->usage && !fault("no-usage")) {
        char ev[256];
        int n = snprintf(ev, sizeof ev,
                         "{\"id\":\"stub\",\"object\":\"%s\",\"created\":0,\"model\":\"stub\",\"choices\":[],"
                         "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%ld,\"total_tokens\":%ld}}",
                         c->chat ? "chat.completion.chunk" : "text_completion", c->n_tokens, c->n_tokens + 1);
        if (put_event(&c->out, ev, (size_t)n) < 0)
            return -1;
    }
    if (!fault("no-done") && put_event(&c->out, "[DONE]", 6) < 0)
        return -1;
    c->streaming = 0;
    return buf_append(&c->out, "0\r\n\r\n", 5);
}

/* --fault close: half the tokens, then the connection closes (after the
 * output is flushed: flush_out drops a close_after connection once idle). */
static int cut_short(conn *c)
{
    if (!fault("close") || c->sent < c->n_tokens / 2)
        return 0;
    c->streaming = 0;
    c->close_after = 1;
    return 1;
}

static int simple_response(conn *c, int status, const char *reason, const char *type, const char *body)
{
    char head[256];
    int h = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", status,
                     reason, type, strlen(body), c->close_after ? "Connection: close\r\n" : "");
    if (buf_append(&c->out, head, (size_t)h) < 0)
        return -1;
    return buf_append(&c->out, body, strlen(body));
}

/* Writes what the socket takes; -1 when the connection is to be dropped. */
static int flush_out(worker *w, conn *c)
{
    while (c->out.off < c->out.len) {
        ssize_t k = send(c->fd, c->out.p + c->out.off, c->out.len - c->out.off, MSG_NOSIGNAL);
        if (k > 0) {
            c->out.off += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EAGAIN) {
            if (!c->watching_out) {
                struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &e);
                c->watching_out = 1;
            }
            return 0;
        }
        return -1;
    }
    c->out.off = c->out.len = 0;
    if (c->watching_out) {
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &e);
        c->watching_out = 0;
    }
    return c->close_after && !c->streaming ? -1 : 0;
}

/* A complete request of hlen head bytes and blen body bytes: start its answer. */
static int handle_request(worker *w, conn *c, const char *head, size_t hlen, const char *body, size_t blen)
{
    (void)hlen;
    int chat = !strncmp(head, "POST /v1/chat/completions ", 26);
    int cmpl = !strncmp(head, "POST /v1/completions ", 21);
    if (!strncmp(head, "GET /health ", 12) || !strncmp(head, "GET /ready ", 11))
        return simple_response(c, 200, "OK", "text/plain", "ok\n");
    if (!chat && !cmpl)
        return simple_response(c, 404, "Not Found", "application/json",
                               "{\"error\":{\"message\":\"not found\",\"type\":\"invalid_request_error\"}}");
    json_error_t je;
    json_t *o = json_loadb(body, blen, 0, &je);
    json_t *mt = json_object_get(o, "max_tokens");
    if (!json_is_object(o) || (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
                                     json_integer_value(mt) > MAX_TOKENS_CAP))) {
        json_decref(o);
        return simple_response(c, 400, "Bad Request", "application/json",
                               "{\"error\":{\"message\":\"bad body or max_tokens\",\"type\":\"invalid_request_error\"}}");
    }
    c->chat = chat;
    c->n_tokens = mt ? (long)json_integer_value(mt) : 16;
    c->sent = 0;
    c->usage = json_is_true(json_object_get(json_object_get(o, "stream_options"), "include_usage"));
    int stream = json_is_true(json_object_get(o, "stream"));
    json_decref(o);
    if (!stream) {
        /* one JSON body: the tokens as one text */
        size_t n = (size_t)c->n_tokens * 4 + 512;
        char *b = malloc(n), *p = b;
        if (!b)
            return -1;
        p += sprintf(p, chat ? "{\"id\":\"chatcmpl-stub\",\"object\":\"chat.completion\",\"created\":0,\"model\":\"stub\","
                               "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\""
                             : "{\"id\":\"cmpl-stub\",\"object\":\"text_completion\",\"created\":0,\"model\":\"stub\","
                               "\"choices\":[{\"index\":0,\"text\":\"");
        for (long i = 0; i < c->n_tokens; i++)
            p += sprintf(p, " tok");
        sprintf(p, "\"%s,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%ld,"
                   "\"total_tokens\":%ld}}", chat ? "}" : "", c->n_tokens, c->n_tokens + 1);
        int rc = simple_response(c, 200, "OK", "application/json", b);
        free(b);
        return rc;
    }
    static const char head_ok[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n";
    if (buf_append(&c->out, head_ok, sizeof head_ok - 1) < 0)
        return -1;
    if (chat && put_chunk(c, "{\"role\":\"assistant\",\"content\":\"\"}", "null") < 0)
        return -1;
    c->streaming = 1;
    if (opt.token_ns == 0) {
        while (c->sent < c->n_tokens && !cut_short(c))
            if (put_token(c) < 0)
                return -1;
        return c->streaming ? put_end(c) : 0;
    }
    c->due_ns = now_ns() + opt.ttft_ns;
    if (w->n_live == w->cap_live) {
        int cap = w->cap_live ? 2 * w->cap_live : 64;
        conn **l = realloc(w->live, (size_t)cap * sizeof *l);
        if (!l)
            return -1;
        w->live = l;
        w->cap_live = cap;
    }
    w->live[w->n_live++] = c;
    w->rearm = 1;
    return 0;
}

/* Parses as many complete requests as the input holds (one at a time while
 * a stream is running: a pipelined request waits for its turn). */
static int parse_input(worker *w, conn *c)
{
    while (!c->streaming && c->in.len) {
        char *end = memmem(c->in.p, c->in.len, "\r\n\r\n", 4);
        if (!end)
            return c->in.len > IN_MAX ? -1 : 0;
        size_t hlen = (size_t)(end - c->in.p) + 4, blen = 0;
        for (char *line = strstr(c->in.p, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
            if (!strncasecmp(line + 2, "content-length:", 15))
                blen = strtoul(line + 17, NULL, 10);
            else if (!strncasecmp(line + 2, "connection:", 11) && strncasecmp(line + 13, " close", 6) == 0)
                c->close_after = 1;
        }
        if (blen > IN_MAX)
            return -1;
        if (c->in.len < hlen + blen)
            return 0;
        if (opt.close_idle_after && c->responses >= opt.close_idle_after)
            return -1;          /* the request is read: the close is a FIN, before any response byte */
        c->responses++;
        char save = c->in.p[hlen - 1];
        c->in.p[hlen - 1] = 0;  /* the head as a string for the checks above and below */
        int rc = handle_request(w, c, c->in.p, hlen, c->in.p + hlen, blen);
        c->in.p[hlen - 1] = save;
        if (rc < 0)
            return -1;
        memmove(c->in.p, c->in.p + hlen + blen, c->in.len - hlen - blen);
        c->in.len -= hlen + blen;
        c->in.p[c->in.len] = 0;
    }
    return 0;
}

static int on_readable(worker *w, conn *c)
{
    for (;;) {
        if (buf_reserve(&c->in, 65536 + 1) < 0)
            return -1;
        ssize_t k = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1, 0);
        if (k == 0)
            return -1;
        if (k < 0)
            return errno == EAGAIN ? 0 : -1;
        c->in.len += (size_t)k;
        c->in.p[c->in.len] = 0;
        if (parse_input(w, c) < 0 || flush_out(w, c) < 0)
            return -1;
    }
}

/* Paced streams: emit every due token, then re-arm the timer. */
static void on_timer(worker *w)
{
    uint64_t x;
    if (read(w->tfd, &x, sizeof x) < 0 && errno != EAGAIN)
        perror("stubserver: timerfd read");
    int64_t t = now_ns(), next = 0;
    for (int i = 0; i < w->n_live; i++) {
        conn *c = w->live[i];
        int bad = 0;
        while (c->streaming && c->due_ns <= t && !cut_short(c)) {
            if (c->sent < c->n_tokens) {
                bad |= put_token(c) < 0;
                c->due_ns += opt.token_ns;
            }
            if (c->sent == c->n_tokens)
                bad |= put_end(c) < 0;
        }
        if (bad || flush_out(w, c) < 0) {
            conn_free(w, c);
            i--;
            continue;
        }
        if (!c->streaming) {
            w->live[i--] = w->live[--w->n_live];
            if (parse_input(w, c) < 0 || flush_out(w, c) < 0) {
                conn_free(w, c);
                continue;
            }
            continue;
        }
        if (!next || c->due_ns < next)
            next = c->due_ns;
    }
    struct itimerspec its = {0};
    if (next)
        its.it_value = (struct timespec){.tv_sec = next / 1000000000, .tv_nsec = next % 1000000000};
    timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    struct epoll_event ev[256];
    int timer_tag = 0, listen_tag = 0;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &listen_tag};
    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->lfd, &e);
    e.data.ptr = &timer_tag;
    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->tfd, &e);
    for (;;) {
        int n = epoll_wait(w->epfd, ev, 256, -1);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &listen_tag) {
                int fd;
                while ((fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    conn *c = calloc(1, sizeof *c);
                    if (!c) {
                        close(fd);
                        continue;
                    }
                    c->fd = fd;
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event ce = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ce);
                }
            } else if (ev[i].data.ptr == &timer_tag) {
                on_timer(w);
            } else {
                conn *c = ev[i].data.ptr;
                if (c->dead)
                    continue;
                if (((ev[i].events & EPOLLOUT) && flush_out(w, c) < 0) || on_readable(w, c) < 0)
                    conn_free(w, c);
            }
        }
        if (w->rearm) {             /* a new paced stream: its first token may be the earliest */
            w->rearm = 0;
            on_timer(w);
        }
        free_dead(w);
    }
    return NULL;
}

static int listen_socket(struct addrinfo *ai, int port)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_storage a;
    memcpy(&a, ai->ai_addr, ai->ai_addrlen);
    if (a.ss_family == AF_INET)
        ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, ai->ai_addrlen) < 0 || listen(fd, 4096) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    opt.host = "127.0.0.1";
    opt.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    long ttft_us = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc || a[0] != '-') {
            fprintf(stderr, "usage: stubserver [--host H] [--port P] [--threads T] [--token-us U] [--ttft-us U]"
                            " [--fault F] [--close-idle-after N]\n");
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--host")) opt.host = v;
        else if (!strcmp(a, "--port")) opt.port = atoi(v);
        else if (!strcmp(a, "--threads")) opt.threads = atoi(v);
        else if (!strcmp(a, "--token-us")) opt.token_ns = atol(v) * 1000;
        else if (!strcmp(a, "--ttft-us")) ttft_us = atol(v);
        else if (!strcmp(a, "--fault")) opt.fault = v;
        else if (!strcmp(a, "--close-idle-after")) {
            char *e;
            opt.close_idle_after = strtol(v, &e, 10);
            if (e == v || *e || opt.close_idle_after < 1) {
                fprintf(stderr, "stubserver: --close-idle-after wants a count of responses >= 1\n");
                return 2;
            }
        }
        else {
            fprintf(stderr, "stubserver: unknown option %s\n", a);
            return 2;
        }
    }
    if (opt.fault && !fault("bad-json") && !fault("no-usage") && !fault("no-done") && !fault("error-event") &&
        !fault("close")) {
        fprintf(stderr, "stubserver: --fault is bad-json, no-usage, no-done, error-event or close\n");
        return 2;
    }
    if (opt.threads < 1 || opt.threads > 1024 || opt.port < 0 || opt.port > 65535 || opt.token_ns < 0) {
        fprintf(stderr, "stubserver: bad option value\n");
        return 2;
    }
    opt.ttft_ns = ttft_us >= 0 ? ttft_us * 1000 : opt.token_ns;
    signal(SIGPIPE, SIG_IGN);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    int rc = getaddrinfo(opt.host, NULL, &hints, &ai);
    if (rc) {
        fprintf(stderr, "stubserver: %s: %s\n", opt.host, gai_strerror(rc));
        return 2;
    }
    worker *ws = calloc((size_t)opt.threads, sizeof *ws);
    int port = opt.port;
    for (int i = 0; i < opt.threads; i++) {
        /* port 0: the first listener picks a free port, the others join it */
        ws[i].lfd = listen_socket(ai, port);
        if (ws[i].lfd < 0) {
            fprintf(stderr, "stubserver: listen on %s:%d: %s\n", opt.host, port, strerror(errno));
            return 1;
        }
        if (i == 0) {
            struct sockaddr_storage a;
            socklen_t l = sizeof a;
            getsockname(ws[0].lfd, (struct sockaddr *)&a, &l);
            port = ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                                : ((struct sockaddr_in6 *)&a)->sin6_port);
        }
        ws[i].epfd = epoll_create1(EPOLL_CLOEXEC);
        ws[i].tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (ws[i].epfd < 0 || ws[i].tfd < 0) {
            perror("stubserver: epoll/timerfd");
            return 1;
        }
    }
    freeaddrinfo(ai);
    printf("stubserver: listening on http://%s:%d (%d threads, %ld us/token)\n", opt.host, port, opt.threads,
           opt.token_ns / 1000);
    fflush(stdout);
    for (int i = 1; i < opt.threads; i++)
        pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]);
    worker_main(&ws[0]);
    return 0;
}
