/* frontend/http1_guard.c: the byte-at-a-time HTTP/1.1 framing check that
 * stands in front of libh2o (the contract is in http1_guard.h).
 * Runs in each front-end process, called by conn.c on every read. The
 * trade-off: it mirrors picohttpparser's grammar (one empty line skipped
 * before a request line, LF or CRLF line ends, chunk extensions and trailers
 * skipped to LF, CRs skipped before a chunk's LF) and adds only refusals, so
 * the two parsers agree on every message it lets through; the price is a
 * second pass over every byte, a few nanoseconds each, and a grammar that
 * must be kept in step with the library's.
 *
 * States, one message after another:
 *   START -> REQLINE -> HSTART <-> HNAME -> HVALUE -> HSTART -> (blank line)
 *     no body: START (next message)
 *     Content-Length: BODY -> START
 *     chunked: CSIZE -> CEXT -> CDATA -> CCRLF -> CSIZE ... size 0:
 *              CEXT -> TSTART <-> TMID -> (empty line) START
 *   any rule broken -> REFUSED (stays). */
#include "frontend/http1_guard.h"

#include <string.h>
#include <strings.h>

enum {
    ST_START, ST_START_CR, ST_REQLINE, ST_HSTART, ST_HEND_CR, ST_HNAME, ST_HVALUE,
    ST_BODY, ST_CSIZE, ST_CEXT, ST_CDATA, ST_CCRLF, ST_TSTART, ST_TMID, ST_REFUSED,
};

enum { HDR_OTHER = 0, HDR_CL = 1, HDR_TE = 2 };

void sl_http1_guard_init(sl_http1_guard *g, uint64_t chunk_max)
{
    memset(g, 0, sizeof *g);
    g->chunk_max = chunk_max;
    g->_state = ST_START;
}

static void next_message(sl_http1_guard *g)
{
    uint64_t msg = g->msg + 1, max = g->chunk_max;
    sl_http1_guard_init(g, max);
    g->msg = msg;
}

static bool refuse(sl_http1_guard *g, const char *why)
{
    g->why = why;
    g->_state = ST_REFUSED;
    return false;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool ows(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* A header line ended: check the framing headers. */
static bool end_header(sl_http1_guard *g)
{
    if (g->_hdr == HDR_OTHER)
        return true;
    size_t n = g->_val_len;
    while (n > 0 && ows((unsigned char)g->_val[n - 1]))
        n--;
    if (g->_hdr == HDR_CL) {
        if (g->_cl)
            return refuse(g, "more than one Content-Length header");
        if (g->_te)
            return refuse(g, "both Transfer-Encoding and Content-Length");
        if (g->_val_long || n == 0 || n > 19)
            return refuse(g, "a malformed Content-Length");
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++) {
            if (g->_val[i] < '0' || g->_val[i] > '9')
                return refuse(g, "a malformed Content-Length");
            v = v * 10 + (uint64_t)(g->_val[i] - '0');
        }
        g->_cl = true;
        g->_size = v;
        return true;
    }
    if (g->_te)
        return refuse(g, "more than one Transfer-Encoding header");
    if (g->_cl)
        return refuse(g, "both Transfer-Encoding and Content-Length");
    if (g->_val_long || n != 7 || strncasecmp(g->_val, "chunked", 7) != 0)
        return refuse(g, "a Transfer-Encoding other than chunked");
    g->_te = true;
    return true;
}

/* The blank line after the headers: where the body starts. */
static void end_head(sl_http1_guard *g)
{
    if (g->_te) {
        g->_state = ST_CSIZE;
        g->_size = 0;
        g->_digits = 0;
    } else if (g->_cl && g->_size > 0) {
        g->_state = ST_BODY;
        g->_left = g->_size;
    } else {
        next_message(g);
    }
}

/* One byte of the head or the chunk framing; false when it broke a rule. */
static bool step(sl_http1_guard *g, unsigned char c)
{
    switch (g->_state) {
    case ST_START:
        /* picohttpparser skips one empty line before a request line. */
        if (c == '\r' && !g->_blank_skipped) {
            g->_state = ST_START_CR;
            return true;
        }
        if (c == '\n' && !g->_blank_skipped) {
            g->_blank_skipped = true;
            return true;
        }
        g->_state = ST_REQLINE;
        g->_line = 0;
        g->_cr = false;
        return step(g, c);
    case ST_START_CR:
        if (c != '\n')
            return refuse(g, "a malformed request line");
        g->_blank_skipped = true;
        g->_state = ST_START;
        return true;
    case ST_REQLINE:
        if (c == '\n') {
            static const char v10[] = " HTTP/1.0", v11[] = " HTTP/1.1";
            if (g->_line < 9 + 3 || (memcmp(g->_tail, v10, 9) != 0 && memcmp(g->_tail, v11, 9) != 0))
                return refuse(g, "an HTTP version other than 1.0 or 1.1");
            g->_state = ST_HSTART;
            return true;
        }
        if (g->_cr || c < 0x20 || c == 0x7f) {
            if (c == '\r' && !g->_cr) {
                g->_cr = true;
                return true;
            }
            return refuse(g, "a control character in the request line");
        }
        memmove(g->_tail, g->_tail + 1, sizeof g->_tail - 1);
        g->_tail[sizeof g->_tail - 1] = (char)c;
        if (g->_line < UINT32_MAX)
            g->_line++;
        return true;
    case ST_HSTART:
        g->_cr = false;
        if (c == '\r') {
            g->_state = ST_HEND_CR;
            return true;
        }
        if (c == '\n') {
            end_head(g);
            return true;
        }
        if (ows(c))
            return refuse(g, "a folded header line (obs-fold)");
        g->_state = ST_HNAME;
        g->_name_len = 0;
        g->_hdr = HDR_OTHER;
        return step(g, c);
    case ST_HEND_CR:
        if (c != '\n')
            return refuse(g, "a malformed header line");
        end_head(g);
        return true;
    case ST_HNAME:
        if (c == ':') {
            static const char cl[] = "content-length", te[] = "transfer-encoding";
            if (g->_name_len == 0)
                return refuse(g, "an empty header name");
            if (g->_name_len == sizeof cl - 1 && memcmp(g->_name, cl, sizeof cl - 1) == 0)
                g->_hdr = HDR_CL;
            else if (g->_name_len == sizeof te - 1 && memcmp(g->_name, te, sizeof te - 1) == 0)
                g->_hdr = HDR_TE;
            g->_state = ST_HVALUE;
            g->_val_len = 0;
            g->_val_long = false;
            return true;
        }
        if (c <= 0x20 || c >= 0x7f)
            return refuse(g, "a malformed header name");   /* includes space before the colon (RFC 9112 5.1) */
        if (g->_name_len < SL_HTTP1_GUARD_NAME_MAX)
            g->_name[g->_name_len] = (char)(c >= 'A' && c <= 'Z' ? c | 0x20 : c);
        if (g->_name_len < UINT8_MAX)
            g->_name_len++;
        return true;
    case ST_HVALUE:
        if (c == '\n') {
            if (!end_header(g))
                return false;
            g->_state = ST_HSTART;
            return true;
        }
        if (g->_cr || (c < 0x20 && c != '\t') || c == 0x7f) {
            if (c == '\r' && !g->_cr) {
                g->_cr = true;
                return true;
            }
            return refuse(g, "a control character in a header value");
        }
        if (g->_hdr != HDR_OTHER && !(g->_val_len == 0 && ows(c))) {
            if (g->_val_len < SL_HTTP1_GUARD_VALUE_MAX)
                g->_val[g->_val_len++] = (char)c;
            else
                g->_val_long = true;
        }
        return true;
    case ST_CSIZE: {
        int v = hexval(c);
        if (v < 0) {
            if (g->_digits == 0)
                return refuse(g, "a malformed chunk size");
            g->_state = ST_CEXT;
            return step(g, c);
        }
        g->_size = g->_size * 16 + (uint64_t)v;
        if (++g->_digits > 16 || g->_size > g->chunk_max)
            return refuse(g, "a chunk larger than this server's body limit");
        return true;
    }
    case ST_CEXT:
        if (c == '\n') {
            if (g->_size == 0) {
                g->_state = ST_TSTART;
            } else {
                g->_state = ST_CDATA;
                g->_left = g->_size;
            }
        }
        return true;
    case ST_CCRLF:
        if (c == '\r')
            return true;
        if (c != '\n')
            return refuse(g, "a chunk not followed by CRLF");
        g->_state = ST_CSIZE;
        g->_size = 0;
        g->_digits = 0;
        return true;
    case ST_TSTART:
        if (c == '\r')
            return true;
        if (c == '\n')
            next_message(g);
        else
            g->_state = ST_TMID;
        return true;
    case ST_TMID:
        if (c == '\n')
            g->_state = ST_TSTART;
        return true;
    default:
        return false;
    }
}

sl_http1_guard_verdict sl_http1_guard_feed(sl_http1_guard *g, const char *p, size_t n, size_t *used)
{
    size_t i = 0;
    if (g->_state == ST_REFUSED) {
        *used = 0;
        return SL_HTTP1_GUARD_REFUSE;
    }
    while (i < n) {
        if (g->_state == ST_BODY || g->_state == ST_CDATA) {
            /* Body bytes are not looked at: skip them in one go. */
            uint64_t k = n - i < g->_left ? n - i : g->_left;
            g->_left -= k;
            i += (size_t)k;
            if (g->_left == 0) {
                if (g->_state == ST_BODY)
                    next_message(g);
                else
                    g->_state = ST_CCRLF;
            }
            continue;
        }
        if (!step(g, (unsigned char)p[i])) {
            *used = i;
            return SL_HTTP1_GUARD_REFUSE;
        }
        i++;
    }
    *used = n;
    return SL_HTTP1_GUARD_OK;
}
