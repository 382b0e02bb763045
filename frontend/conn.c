/* frontend/conn.c: one client connection as the front end sees it: the
 * count of open connections, and the HTTP/1.1 framing guard
 * (http1_guard.h) standing in front of libh2o on every read.
 * Runs on each front-end process's event loop; server.c hands it each
 * accepted socket, routes.c tells it about each request h2o hands over.
 *
 * How the guard gets the bytes first. h2o 2.2.5 has no hook between reading
 * a socket and parsing it, and its HTTP/1 code re-arms its own read callback
 * (h2o_socket_read_start) after every response. So the guard takes the
 * socket's callback slots: sock->_cb.read and sock->_cb.write are replaced by
 * on_read/on_write, which run h2o's callback they displaced and then take the
 * slots again (rearm). The slots also change when our own code sends on a
 * connection from outside its callbacks (a wake, the tick): server.c calls
 * sl_fe_conn_rearm_all after those. The guard frames the bytes h2o has not
 * seen yet: in 2.2.5 sock->bytes_read is what this one read added, at the
 * end of sock->input (h2o keeps the bytes it has not parsed at the end of its
 * buffer). If that ever does not add up the guard steps aside for the
 * connection (logged) rather than guess.
 *
 * A refused message: when it is the next request h2o would hand over (every
 * earlier one answered), the 400 is written straight to the socket and h2o's
 * read callback is told the socket failed, which closes the connection its
 * own way; h2o never parses the message, so no body is read. When earlier
 * pipelined requests are still ahead of it, those are answered and the
 * connection closes after the first of them (h2o never reaches the bad one).
 *
 * The trade-off: this leans on two private slots of h2o_socket_t (named
 * with a leading underscore in h2o/socket.h) instead of patching libh2o; the
 * integration tests (test_46_smuggling.py) pin the behaviour. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/alloc.h"
#include "frontend/http1_guard.h"
#include "frontend/server_internal.h"

struct sl_fe_conn {
    sl_fe *fe;
    h2o_socket_t *sock;
    sl_fe_conn *prev, *next;
    h2o_socket_cb h2o_read, h2o_write;  /* h2o's callbacks the guard stands in front of */
    uint64_t handed;                    /* requests h2o handed to on_req */
    sl_http1_guard guard;
    bool guarding;                      /* false once the guard stepped aside */
    bool poisoned;                      /* a pipelined request was refused: close after this response */
    uint64_t write_since_ns;            /* a write is in flight, without progress since (0 = none) */
    size_t written_at;                  /* sock->bytes_written at write_since_ns */
    int outq_at;                        /* unsent bytes in the kernel (SIOCOUTQ) then */
    bool write_timed_out;
    int depth;                          /* inside one of h2o's callbacks */
    bool closed;                        /* the socket is gone; freed when depth returns to 0 */
};

static const char refused_err[] = "refused by the framing guard";

/* ================================================================ list */

static void conn_unlink(sl_fe_conn *c)
{
    sl_fe *fe = c->fe;
    if (c->prev)
        c->prev->next = c->next;
    else
        fe->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void on_close(void *data)
{
    sl_fe_conn *c = data;
    c->fe->n_conns--;
    conn_unlink(c);
    c->closed = true;
    c->sock = NULL;
    if (c->depth == 0)
        free(c);
}

/* ================================================================ the callback slots */

static void on_read(h2o_socket_t *sock, const char *err);
static void on_write(h2o_socket_t *sock, const char *err);

static void rearm(sl_fe_conn *c)
{
    h2o_socket_t *s = c->sock;
    if (c->closed || s == NULL)
        return;
    if (s->_cb.read != NULL && s->_cb.read != on_read) {
        c->h2o_read = s->_cb.read;
        s->_cb.read = on_read;
    }
    if (s->_cb.write != NULL && s->_cb.write != on_write) {
        c->h2o_write = s->_cb.write;
        s->_cb.write = on_write;
        c->write_since_ns = sl_shm_now_ns();   /* a new write: the write timeout counts from here */
        c->written_at = s->bytes_written;
        c->outq_at = -2;                        /* first tick: read the kernel's queue */
    }
}

/* Runs h2o's callback, then takes the slots back (or frees c if the
 * connection closed inside it). */
static void call_h2o(sl_fe_conn *c, h2o_socket_cb cb, h2o_socket_t *sock, const char *err)
{
    c->depth++;
    cb(sock, err);
    c->depth--;
    if (c->closed) {
        if (c->depth == 0)
            free(c);
        return;
    }
    rearm(c);
}

void sl_fe_conn_rearm_all(sl_fe *fe)
{
    for (sl_fe_conn *c = fe->conns; c != NULL; c = c->next)
        rearm(c);
}

/* ================================================================ refusal */

/* The 400 for a refused message, written to the socket directly: h2o has
 * no request for it and no write is in flight (h2o reads only between
 * responses). A short write only truncates a hostile client's answer. */
static void refuse_now(sl_fe_conn *c)
{
    sl_api_error e;
    sl_api_error_set(&e, SL_API_ERR_INVALID_REQUEST, NULL,
                     "The request has %s: its framing is ambiguous, so it is refused (RFC 9112 section 6.3).", c->guard.why);
    e.code = "bad_http_framing";
    int http = 400;
    char *body = sl_api_error_body(&e, &http);
    char head[256];
    size_t blen = body ? strlen(body) : 0;
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nServer: sluice\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", blen);
    char *msg = sl_malloc((size_t)hl + blen);
    if (msg != NULL) {
        memcpy(msg, head, (size_t)hl);
        if (body)
            memcpy(msg + hl, body, blen);
        ssize_t w;
        while ((w = write(h2o_socket_get_fd(c->sock), msg, (size_t)hl + blen)) < 0 && errno == EINTR) {
        }
        free(msg);
    }
    free(body);
    fprintf(stderr, "sluice-fe slot=%" PRIu32 ": refused a request with %s\n", c->fe->slot, c->guard.why);
    sl_fe_respond_log_refused(c->fe, c->sock, 400, "bad_http_framing");
}

/* ================================================================ callbacks */

static void on_read(h2o_socket_t *sock, const char *err)
{
    sl_fe_conn *c = sock->on_close.data;
    if (err == NULL && c->guarding && !c->poisoned) {
        size_t fresh = sock->bytes_read;   /* 2.2.5: the bytes this read added, at the end of input */
        if (fresh > sock->input->size) {
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": framing guard lost its place (%zu new of %zu buffered); "
                    "h2o frames this connection alone\n", c->fe->slot, fresh, sock->input->size);
            c->guarding = false;
        } else {
            size_t used = 0;
            const char *p = sock->input->bytes + sock->input->size - fresh;
            if (sl_http1_guard_feed(&c->guard, p, fresh, &used) == SL_HTTP1_GUARD_REFUSE) {
                if (c->guard.msg == c->handed) {
                    refuse_now(c);
                    call_h2o(c, c->h2o_read, sock, refused_err);
                    return;
                }
                c->poisoned = true;
            }
        }
    }
    call_h2o(c, c->h2o_read, sock, err);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    sl_fe_conn *c = sock->on_close.data;
    c->write_since_ns = 0;
    call_h2o(c, c->h2o_write, sock, err);
}

/* ================================================================ write timeout */

/* h2o 2.2.5 has no write timeout: a client that stops reading holds its
 * response (a whole non-streamed body, in the request's pool) for as long as
 * it keeps the connection. A write that makes no progress (h2o's byte count
 * and the kernel's unsent queue both unchanged) for write_timeout_ms gets the
 * socket shut down; h2o's write then fails and it
 * closes the connection, freeing the response and calling a stream's stop. */
void sl_fe_conn_tick(sl_fe *fe, uint64_t now)
{
    uint64_t wto = (uint64_t)fe->cfg->write_timeout_ms * 1000000ull;
    if (wto == 0)
        return;
    for (sl_fe_conn *c = fe->conns; c != NULL; c = c->next) {
        if (c->write_since_ns == 0 || c->write_timed_out || now <= c->write_since_ns)
            continue;
        /* Progress: h2o handed the kernel more, or the kernel sent some of
         * what it holds (the client is reading): count again. */
        int outq = -1;
        ioctl(h2o_socket_get_fd(c->sock), SIOCOUTQ, &outq);
        if (c->sock->bytes_written != c->written_at || outq != c->outq_at) {
            c->written_at = c->sock->bytes_written;
            c->outq_at = outq;
            c->write_since_ns = now;
            continue;
        }
        if (now - c->write_since_ns > wto) {
            c->write_timed_out = true;
            char peer[80];
            sl_fe_peer(c->sock, peer, sizeof peer);
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": client=%s write timeout: nothing read for %" PRIu32
                    " ms, dropping the connection\n", fe->slot, peer, fe->cfg->write_timeout_ms);
            shutdown(h2o_socket_get_fd(c->sock), SHUT_RDWR);
        }
    }
}

/* ================================================================ entry points */

void sl_fe_conn_accept(sl_fe *fe, h2o_socket_t *sock)
{
    sl_fe_conn *c = sl_calloc(1, sizeof *c);
    if (c == NULL) {
        h2o_socket_close(sock);
        return;
    }
    c->fe = fe;
    c->sock = sock;
    c->guarding = true;
    sl_http1_guard_init(&c->guard, fe->config.max_request_entity_size);   /* no chunk can be larger than h2o's limit */
    c->next = fe->conns;
    if (fe->conns)
        fe->conns->prev = c;
    fe->conns = c;
    fe->n_conns++;
    sock->on_close.cb = on_close;
    sock->on_close.data = c;
    c->depth++;
    h2o_accept(&fe->accept_ctx, sock);
    c->depth--;
    if (c->closed) {
        free(c);
        return;
    }
    rearm(c);
}

void sl_fe_conn_on_request(sl_fe *fe, h2o_req_t *req)
{
    (void)fe;
    h2o_conn_t *conn = req->conn;
    if (req->version >= 0x200 || conn->callbacks->get_socket == NULL)
        return;
    h2o_socket_t *sock = conn->callbacks->get_socket(conn);
    if (sock == NULL || sock->on_close.cb != on_close)
        return;
    sl_fe_conn *c = sock->on_close.data;
    c->handed++;
    if (c->poisoned)
        req->http1_is_persistent = 0;   /* a later pipelined request broke the framing rules */
}
