/* tools/loadgen/resp.c: the HTTP/1.1 response and SSE parser of the load
 * generator (see resp.h). A byte-driven state machine: protocol lines
 * (status, headers, chunk sizes, trailers) are gathered in one buffer, body
 * bytes are de-chunked and split into SSE lines in another. The trade-off:
 * one `data:` line is one event, dispatched when its newline arrives rather
 * than at the blank line that ends it, because OpenAI-compatible servers
 * send one data line per event and the arrival time is what we measure;
 * a multi-line event would show up as several (malformed) events. */
#include "tools/loadgen/resp.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BODY_KEEP 512

void lg_resp_init(lg_resp *r, lg_resp_on_event on_event, void *ctx)
{
    r->state = LG_RESP_STATE_STATUS;
    r->status = 0;
    r->chunked = r->close = r->event_stream = 0;
    r->chunk_left = r->body_left = 0;
    r->on_event = on_event;
    r->ctx = ctx;
    r->_line_len = r->_sse_len = 0;
    if (r->_body)
        r->_body[0] = 0;
    r->_body_len = 0;
}

void lg_resp_fini(lg_resp *r)
{
    free(r->_line);
    free(r->_sse);
    free(r->_body);
    r->_line = r->_sse = r->_body = NULL;
    r->_line_cap = r->_sse_cap = 0;
}

const char *lg_resp_body(const lg_resp *r)
{
    return r->_body ? r->_body : "";
}

/* Appends to a growable buffer; SL_EFORMAT past LG_RESP_LINE_MAX. */
static sl_status append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n > LG_RESP_LINE_MAX)
        return SL_EFORMAT;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b)
            return SL_ENOMEM;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = 0;
    return SL_OK;
}

/* ---- SSE lines within the body ------------------------------------------ */

static sl_status sse_line(lg_resp *r, const char *p, size_t n)
{
    if (n && p[n - 1] == '\r')
        n--;
    if (n == 0 || p[0] == ':')       /* event separator or a comment (": ping") */
        return SL_OK;
    if (n >= 5 && memcmp(p, "data:", 5) == 0) {
        p += 5;
        n -= 5;
        if (n && *p == ' ')
            p++, n--;
        int rc = r->on_event ? r->on_event(r->ctx, p, n) : 0;
        return rc < 0 ? rc : SL_OK;
    }
    return SL_OK;                    /* event:, id:, retry: fields are ignored */
}

static sl_status body_bytes(lg_resp *r, const char *p, size_t n)
{
    if (!r->event_stream) {
        size_t k = r->_body_len + n < BODY_KEEP ? n : BODY_KEEP - 1 - r->_body_len;
        if (k && !r->_body && !(r->_body = malloc(BODY_KEEP)))
            return SL_ENOMEM;
        if (k) {
            memcpy(r->_body + r->_body_len, p, k);
            r->_body_len += k;
            r->_body[r->_body_len] = 0;
        }
        return SL_OK;
    }
    while (n) {
        const char *nl = memchr(p, '\n', n);
        if (!nl)
            return append(&r->_sse, &r->_sse_len, &r->_sse_cap, p, n);
        size_t k = (size_t)(nl - p);
        sl_status rc;
        if (r->_sse_len == 0) {
            rc = sse_line(r, p, k);  /* the whole line is in this read: no copy */
        } else {
            if ((rc = append(&r->_sse, &r->_sse_len, &r->_sse_cap, p, k)) < 0)
                return rc;
            rc = sse_line(r, r->_sse, r->_sse_len);
            r->_sse_len = 0;
        }
        if (rc < 0)
            return rc;
        p += k + 1;
        n -= k + 1;
    }
    return SL_OK;
}

/* ---- protocol lines ------------------------------------------------------ */

static sl_status header_line(lg_resp *r, char *line, size_t n)
{
    char *colon = memchr(line, ':', n);
    if (!colon)
        return SL_EFORMAT;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!strcasecmp(line, "content-length")) {
        char *end;
        r->body_left = strtoull(v, &end, 10);
        if (end == v)
            return SL_EFORMAT;
    } else if (!strcasecmp(line, "transfer-encoding")) {
        r->chunked = strcasestr(v, "chunked") != NULL;
    } else if (!strcasecmp(line, "connection")) {
        r->close = strcasestr(v, "close") != NULL;
    } else if (!strcasecmp(line, "content-type")) {
        r->event_stream = strcasestr(v, "text/event-stream") != NULL;
    }
    return SL_OK;
}

/* One complete protocol line (without CRLF) in the current state. */
static sl_status proto_line(lg_resp *r, char *line, size_t n)
{
    switch (r->state) {
    case LG_RESP_STATE_STATUS:
        if (n < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[8] != ' ')
            return SL_EFORMAT;
        r->status = atoi(line + 9);
        if (r->status < 100 || r->status > 999)
            return SL_EFORMAT;
        if (line[7] == '0')
            r->close = 1;            /* HTTP/1.0: no keep-alive unless asked, which we never do */
        r->state = LG_RESP_STATE_HEADERS;
        return SL_OK;
    case LG_RESP_STATE_HEADERS:
        if (n)
            return header_line(r, line, n);
        if (r->status / 100 == 1) {  /* 100 Continue and friends: a real response follows */
            r->state = LG_RESP_STATE_STATUS;
            return SL_OK;
        }
        if (r->status == 204 || r->status == 304)
            r->state = LG_RESP_STATE_DONE;
        else if (r->chunked)
            r->state = LG_RESP_STATE_CHUNK_SIZE;
        else if (r->body_left)
            r->state = LG_RESP_STATE_LENGTH;
        else
            r->state = r->close ? LG_RESP_STATE_UNTIL_CLOSE : LG_RESP_STATE_DONE;
        return SL_OK;
    case LG_RESP_STATE_CHUNK_SIZE: {
        char *end;
        if (n == 0)
            return SL_EFORMAT;
        r->chunk_left = strtoull(line, &end, 16);
        if (end == line || (*end && *end != ';' && *end != ' '))
            return SL_EFORMAT;
        r->state = r->chunk_left ? LG_RESP_STATE_CHUNK_DATA : LG_RESP_STATE_TRAILER;
        return SL_OK;
    }
    case LG_RESP_STATE_CHUNK_CRLF:
        if (n)
            return SL_EFORMAT;
        r->state = LG_RESP_STATE_CHUNK_SIZE;
        return SL_OK;
    case LG_RESP_STATE_TRAILER:
        if (n == 0)
            r->state = LG_RESP_STATE_DONE;
        return SL_OK;
    default:
        return SL_EFORMAT;
    }
}

sl_status lg_resp_feed(lg_resp *r, const char *buf, size_t n, size_t *used)
{
    size_t i = 0;
    sl_status rc = SL_OK;
    while (i < n && r->state != LG_RESP_STATE_DONE) {
        if (r->state == LG_RESP_STATE_CHUNK_DATA || r->state == LG_RESP_STATE_LENGTH ||
            r->state == LG_RESP_STATE_UNTIL_CLOSE) {
            uint64_t left = r->state == LG_RESP_STATE_CHUNK_DATA ? r->chunk_left
                            : r->state == LG_RESP_STATE_LENGTH   ? r->body_left
                                                                 : UINT64_MAX;
            size_t k = n - i < left ? n - i : (size_t)left;
            if ((rc = body_bytes(r, buf + i, k)) < 0)
                break;
            i += k;
            if (r->state == LG_RESP_STATE_CHUNK_DATA && (r->chunk_left -= k) == 0)
                r->state = LG_RESP_STATE_CHUNK_CRLF;
            else if (r->state == LG_RESP_STATE_LENGTH && (r->body_left -= k) == 0)
                r->state = LG_RESP_STATE_DONE;
            continue;
        }
        const char *nl = memchr(buf + i, '\n', n - i);
        size_t k = nl ? (size_t)(nl - (buf + i)) : n - i;
        if ((rc = append(&r->_line, &r->_line_len, &r->_line_cap, buf + i, k)) < 0)
            break;
        i += k;
        if (!nl)
            break;
        i++;                         /* the '\n' */
        size_t len = r->_line_len;
        if (len && r->_line[len - 1] == '\r')
            r->_line[--len] = 0;
        r->_line_len = 0;
        if ((rc = proto_line(r, r->_line, len)) < 0)
            break;
    }
    *used = i;
    if (rc < 0)
        return rc;
    return r->state == LG_RESP_STATE_DONE ? SL_OK : SL_AGAIN;
}

sl_status lg_resp_eof(lg_resp *r)
{
    if (r->state == LG_RESP_STATE_UNTIL_CLOSE) {
        if (r->_sse_len)
            sse_line(r, r->_sse, r->_sse_len);
        r->state = LG_RESP_STATE_DONE;
    }
    return r->state == LG_RESP_STATE_DONE ? SL_OK : SL_EFORMAT;
}
