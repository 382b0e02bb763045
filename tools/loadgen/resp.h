/* tools/loadgen/resp.h: incremental parser of one HTTP/1.1 response carrying
 * an OpenAI server-sent-event stream, fed whatever bytes a recv() returned.
 * Where:     the load generator; one lg_resp per connection, reused per request.
 * Who:       one thread (the connection's event loop).
 * Safety:    any split of the bytes gives the same events (tested by reading
 *            1..7 bytes at a time); a line or event over LG_RESP_LINE_MAX is
 *            malformed, never a crash or an unbounded buffer.
 * Ownership: the parser owns its line buffer (grown on demand, freed by
 *            lg_resp_fini); event text passed to on_event lives until it returns.
 * Errors:    SL_OK when a response is complete, SL_AGAIN for more bytes,
 *            SL_EFORMAT on a protocol violation (hot path: codes only). */
#ifndef LG_RESP_H
#define LG_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "shared/status.h"

/* A single header, status, chunk-size or SSE line longer than this is malformed. */
#define LG_RESP_LINE_MAX (1 << 20)

/* Called once per complete SSE `data:` event (comments and other fields are
 * skipped); data is the payload after "data: " without the newline, not
 * NUL-terminated. Return < 0 to abort the parse (lg_resp_feed returns it). */
typedef int (*lg_resp_on_event)(void *ctx, const char *data, size_t len);

typedef enum {
    LG_RESP_STATE_STATUS,      /* reading "HTTP/1.1 200 OK" */
    LG_RESP_STATE_HEADERS,     /* reading header lines up to the blank one */
    LG_RESP_STATE_CHUNK_SIZE,  /* chunked: reading "1a3\r\n" */
    LG_RESP_STATE_CHUNK_DATA,  /* chunked: chunk_left bytes of data to go */
    LG_RESP_STATE_CHUNK_CRLF,  /* chunked: the CRLF after a chunk's data */
    LG_RESP_STATE_TRAILER,     /* chunked: trailer lines after the 0 chunk */
    LG_RESP_STATE_LENGTH,      /* Content-Length body: body_left bytes to go */
    LG_RESP_STATE_UNTIL_CLOSE, /* neither: the body ends when the peer closes */
    LG_RESP_STATE_DONE,        /* the response is complete */
} lg_resp_state;

typedef struct {
    lg_resp_state state;
    int status;                /* HTTP status code, 0 until the status line is read */
    int chunked;               /* Transfer-Encoding: chunked */
    int close;                 /* the server will close after this response */
    int event_stream;          /* Content-Type: text/event-stream */
    uint64_t chunk_left, body_left;
    lg_resp_on_event on_event;
    void *ctx;
    /* _line: the partial protocol line; _sse: the partial SSE line (body bytes) */
    char *_line, *_sse;
    size_t _line_len, _line_cap, _sse_len, _sse_cap;
    char *_body;               /* a non-stream body (an error), kept for the report, capped */
    size_t _body_len;
} lg_resp;

/* Prepares r for a response. r must be zeroed before its first init; call
 * again between responses (buffers are kept). */
void lg_resp_init(lg_resp *r, lg_resp_on_event on_event, void *ctx);

/* Releases the buffers; r may be init'ed again. */
void lg_resp_fini(lg_resp *r);

/* Feeds n bytes. Sets *used to the bytes consumed (less than n only when the
 * response completed inside them: the rest belongs to the next response).
 * Returns SL_OK when the response is complete (state DONE), SL_AGAIN when it
 * wants more bytes, SL_EFORMAT on a protocol violation, or the negative value
 * an on_event callback returned. */
sl_status lg_resp_feed(lg_resp *r, const char *buf, size_t n, size_t *used);

/* The peer closed the connection: SL_OK if that ends the response (a body
 * read until close), SL_EFORMAT if the response was cut short. */
sl_status lg_resp_eof(lg_resp *r);

/* The first bytes of a body that was not an event stream (an error body),
 * NUL-terminated, at most 511 bytes; "" if none. */
const char *lg_resp_body(const lg_resp *r);

#endif
