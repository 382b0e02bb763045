/* frontend/respond.c: the bottom of the front end's server code: whole
 * responses (status, headers, body), OpenAI error responses, the request id,
 * and the one access-log line per request.
 * Runs on each front-end process's event loop, called by routes.c,
 * generate.c, stream.c and conn.c; it calls nothing above it. The trade-off:
 * the log line is written when a response is handed to h2o, not when the
 * client has it, so every request gets exactly one line even if the client
 * is gone, and its "ms" leaves the write out.
 * Access log fields, in this order, as logfmt after "sluice-fe " (text) or
 * one JSON object per line (--log-format json): ts (ISO 8601 UTC, ms), slot,
 * client (addr:port), method, path (%XX-escaped), status, request_id,
 * prompt_tokens, completion_tokens, finish (stop/length/tool_calls of a
 * generation; "-"/null otherwise), error (a failed request's OpenAI error
 * code, else its type, as its body or final event had it: model_not_found,
 * invalid_api_key, not_found_error; also client_closed, bad_http_framing;
 * "-"/null for a success), ms. */
#include <ctype.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "frontend/server_internal.h"
#include "shared/alloc.h"

/* HTTP reason phrase for a status (h2o needs one: a NULL reason crashes). */
static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default:  return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

/* The bytes a client's request id may hold: what UUIDs, hex, base64 and
 * trace ids use. It is echoed in a header and written unquoted into log
 * lines (text and JSON), so no quote, backslash, space, comma, semicolon or
 * control byte; an id with any other byte is replaced. */
static bool request_id_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_' ||
           c == '.' || c == ':' || c == '/' || c == '+' || c == '=' || c == '@';
}

static void peer_of(struct sockaddr *sa, socklen_t len, char *out, size_t cap);

void sl_fe_respond_reqinfo_init(sl_fe_reqinfo *ri, h2o_req_t *req)
{
    ri->t0_ns = sl_shm_now_ns();
    snprintf(ri->client, sizeof ri->client, "-");
    if (req->conn->callbacks->get_peername != NULL) {
        struct sockaddr_storage ss;
        socklen_t len = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
        peer_of((struct sockaddr *)&ss, len, ri->client, sizeof ri->client);
    }
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    if (i >= 0) {
        h2o_iovec_t v = req->headers.entries[i].value;
        bool ok = v.len >= 1 && v.len <= SL_FE_REQUEST_ID_MAX;
        for (size_t k = 0; ok && k < v.len; k++)
            ok = request_id_char((unsigned char)v.base[k]);
        if (ok) {
            memcpy(ri->id, v.base, v.len);
            ri->id[v.len] = '\0';
            return;
        }
    }
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
        /* Entropy not ready (early boot): the clock and pid still make ids unique enough for logs. */
        uint64_t a = ri->t0_ns, b = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
        memcpy(rnd, &a, 8);
        memcpy(rnd + 8, &b, 8);
    }
    for (int k = 0; k < 16; k++)
        snprintf(ri->id + 2 * k, 3, "%02x", rnd[k]);
}

/* ================================================================ access log */

/* One access-log record, every field already safe to print as is (the
 * client's bytes are escaped or replaced before they get here). */
typedef struct {
    const char *client;     /* "addr:port", "[v6]:port" or "-" */
    const char *method, *path, *request_id, *finish, *error;   /* finish, error: NULL = none */
    int status;
    int64_t prompt_tokens, completion_tokens;
    double ms;
} log_rec;

/* ISO 8601 UTC with milliseconds: 2026-12-01T10:20:59.123Z */
static void timestamp(char out[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void peer_of(struct sockaddr *sa, socklen_t len, char *out, size_t cap)
{
    char host[NI_MAXHOST];
    size_t hl = len > 0 ? h2o_socket_getnumerichost(sa, len, host) : SIZE_MAX;
    int32_t port = len > 0 ? h2o_socket_getport(sa) : -1;
    if (hl == SIZE_MAX || port < 0) {
        snprintf(out, cap, "-");
        return;
    }
    host[hl < sizeof host ? hl : sizeof host - 1] = '\0';
    snprintf(out, cap, sa->sa_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, (int)port);
}

/* text: logfmt after "sluice-fe "; json: one object per line. Same fields,
 * same order. One fprintf per line, so lines from one process never mix. */
static void log_write(const sl_fe *fe, const log_rec *r)
{
    char ts[32];
    timestamp(ts);
    if (fe->log_json) {
        char finish[64], error[64];
        snprintf(finish, sizeof finish, r->finish ? "\"%s\"" : "null", r->finish ? r->finish : "");
        snprintf(error, sizeof error, r->error ? "\"%s\"" : "null", r->error ? r->error : "");
        fprintf(stderr,
                "{\"ts\":\"%s\",\"slot\":%" PRIu32 ",\"client\":\"%s\",\"method\":\"%s\",\"path\":\"%s\","
                "\"status\":%d,\"request_id\":\"%s\",\"prompt_tokens\":%" PRId64 ",\"completion_tokens\":%" PRId64
                ",\"finish\":%s,\"error\":%s,\"ms\":%.1f}\n",
                ts, fe->slot, r->client, r->method, r->path, r->status, r->request_id, r->prompt_tokens,
                r->completion_tokens, finish, error, r->ms);
        return;
    }
    fprintf(stderr,
            "sluice-fe ts=%s slot=%" PRIu32 " client=%s method=%s path=\"%s\" status=%d request_id=%s"
            " prompt_tokens=%" PRId64 " completion_tokens=%" PRId64 " finish=%s error=%s ms=%.1f\n",
            ts, fe->slot, r->client, r->method, r->path, r->status, r->request_id, r->prompt_tokens,
            r->completion_tokens, r->finish ? r->finish : "-", r->error ? r->error : "-", r->ms);
}

static bool is_probe(h2o_req_t *req)
{
    h2o_iovec_t p = req->path_normalized;
    return h2o_memis(p.base, p.len, H2O_STRLIT("/health")) || h2o_memis(p.base, p.len, H2O_STRLIT("/ready"));
}

void sl_fe_respond_log(const sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status,
                       int64_t prompt_tokens, int64_t completion_tokens, const char *finish, const char *error)
{
    sl_alloc_fault_end();   /* logged once, as the request ends */
    if (!fe->cfg->log_health && is_probe(req))
        return;
    /* The path is client data: anything outside printable ASCII, the quote,
     * the backslash and '%' are written as %XX, so one request is always one
     * parseable line in either format. */
    char path[256];
    size_t o = 0;
    h2o_iovec_t p = req->path_normalized;
    for (size_t i = 0; i < p.len && o + 4 < sizeof path; i++) {
        unsigned char c = (unsigned char)p.base[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%' || c == '\\')
            o += (size_t)snprintf(path + o, sizeof path - o, "%%%02X", c);
        else
            path[o++] = (char)c;
    }
    path[o] = '\0';
    char method[16];
    size_t ml = req->method.len < sizeof method - 1 ? req->method.len : sizeof method - 1;
    for (size_t i = 0; i < ml; i++) {
        unsigned char c = (unsigned char)req->method.base[i];
        method[i] = (isalnum(c) || c == '-' || c == '_' || c == '.') ? (char)c : '?';
    }
    method[ml] = '\0';
    log_rec r = {ri->client, method, path, ri->id, finish, error, status, prompt_tokens, completion_tokens,
                 (double)(sl_shm_now_ns() - ri->t0_ns) / 1e6};
    log_write(fe, &r);
}

void sl_fe_respond_log_refused(const sl_fe *fe, h2o_socket_t *sock, int status, const char *code)
{
    char client[80] = "-";
    struct sockaddr_storage ss;
    socklen_t len = h2o_socket_getpeername(sock, (struct sockaddr *)&ss);
    peer_of((struct sockaddr *)&ss, len, client, sizeof client);
    log_rec r = {client, "-", "-", "-", NULL, code, status, 0, 0, 0};
    log_write(fe, &r);
}

void sl_fe_peer(h2o_socket_t *sock, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len = h2o_socket_getpeername(sock, (struct sockaddr *)&ss);
    peer_of((struct sockaddr *)&ss, len, out, cap);
}

void sl_fe_respond(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status,
                   const char *content_type, const char *body, size_t len, int retry_after_s)
{
    sl_fe_respond_counted(fe, req, ri, status, content_type, body, len, retry_after_s, 0, 0, NULL, NULL);
}

void sl_fe_respond_counted(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status,
                           const char *content_type, const char *body, size_t len, int retry_after_s,
                           int64_t prompt_tokens, int64_t completion_tokens, const char *finish,
                           const char *error)
{
    req->res.status = status;
    req->res.reason = reason(status);
    req->res.content_length = len;
    if (content_type != NULL)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type,
                       strlen(content_type));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, ri->id,
                          strlen(ri->id));
    if (retry_after_s > 0) {
        char ra[16];
        int n = snprintf(ra, sizeof ra, "%d", retry_after_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, ra, (size_t)n);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
    }
    if (fe->draining)
        req->http1_is_persistent = 0;
    sl_fe_respond_log(fe, req, ri, status, prompt_tokens, completion_tokens, finish, error);
    h2o_send_inline(req, body, len);    /* copies the body into the pool */
}

const char *sl_fe_respond_outcome(const sl_api_error *e)
{
    const char *code = sl_api_error_code(e);
    return code ? code : sl_api_error_type(e->kind);
}

void sl_fe_respond_error(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_api_error *e)
{
    int http = 500;
    char *body = sl_api_error_body(e, &http);
    sl_fe_respond_counted(fe, req, ri, http, "application/json", body ? body : "", body ? strlen(body) : 0,
                          e->retry_after_s, 0, 0, NULL, sl_fe_respond_outcome(e));
    free(body);
}
