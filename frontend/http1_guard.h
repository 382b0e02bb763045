/* frontend/http1_guard.h: a strict HTTP/1.1 framing check that sees every
 * byte a client sends before libh2o does.
 * Where:     front ends, one per client connection (frontend/conn.c feeds it
 *            from the socket's read callback, in front of h2o's).
 * Why:       h2o 2.2.5 (picohttpparser) frames some ambiguous messages its
 *            own way: the first of two Content-Lengths, chunked over
 *            Content-Length, an obs-fold line, any HTTP/1.x version, a
 *            16-hex-digit chunk size it then waits on. A proxy in front may
 *            frame them differently (request smuggling). This check accepts
 *            a strict subset of what h2o accepts, so whatever it passes h2o
 *            frames the same way and the two stay in step, message after
 *            message; anything else is refused (RFC 9112 section 6.3: 400,
 *            then close).
 * Who:       one connection's bytes, in order, exactly once; no shared state.
 * Ownership: the caller's storage; nothing allocated.
 * Errors:    a verdict (below); never a crash on any input. */
#ifndef SL_HTTP1_GUARD_H
#define SL_HTTP1_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    SL_HTTP1_GUARD_OK = 0,   /* every byte framed; feed the next ones */
    SL_HTTP1_GUARD_REFUSE,   /* message `msg` breaks a rule (`why`): answer 400, close */
} sl_http1_guard_verdict;

#define SL_HTTP1_GUARD_NAME_MAX 24   /* header names kept (longer ones are neither CL nor TE) */
#define SL_HTTP1_GUARD_VALUE_MAX 24  /* Content-Length / Transfer-Encoding values kept */

typedef struct {
    uint64_t chunk_max;      /* larger chunk sizes are refused (the body limit) */
    uint64_t msg;            /* index of the message being framed (0 = the first) */
    const char *why;         /* the rule broken, after REFUSE (static text) */
    /* private */
    uint8_t _state;
    bool _cr;                /* the previous byte of this line was CR */
    bool _blank_skipped;     /* the one empty line before a request line was seen */
    bool _cl, _te;           /* Content-Length / Transfer-Encoding seen in this head */
    uint8_t _hdr;            /* which header this line is: 0 other, 1 CL, 2 TE */
    uint8_t _digits;         /* hex digits of the chunk size so far */
    uint64_t _left;          /* bytes left of a Content-Length body or a chunk */
    uint64_t _size;          /* chunk size being read; Content-Length */
    uint32_t _line;          /* bytes in the current line */
    char _tail[9];           /* the request line's last 9 bytes (its version) */
    char _name[SL_HTTP1_GUARD_NAME_MAX];
    uint8_t _name_len;
    char _val[SL_HTTP1_GUARD_VALUE_MAX];
    uint8_t _val_len;
    bool _val_long;
} sl_http1_guard;

/* Starts a connection: the first message, chunk sizes up to chunk_max. */
void sl_http1_guard_init(sl_http1_guard *g, uint64_t chunk_max);

/* Frames the next n bytes of the connection. OK: all framed. REFUSE: the
 * byte at *used (OUT; n on OK) decided it; g->msg is the refused message and
 * g->why says why; the guard stays refused (later calls return REFUSE with
 * *used = 0). Never blocks, never allocates. */
sl_http1_guard_verdict sl_http1_guard_feed(sl_http1_guard *g, const char *p, size_t n, size_t *used);

#endif
