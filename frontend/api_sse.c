/* frontend/api_sse.c: SSE event framing. Runs in the front ends for every
 * streamed chunk. Trade-off: framing copies the payload once more instead of
 * handing h2o an iovec of prefix + payload + suffix; a chunk is ~300 bytes,
 * and one buffer per event keeps the send path simple. */
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_sse.h"

size_t sl_api_sse_frame(char *out, size_t cap, const char *payload, size_t len)
{
    size_t n = 0;
#define PUT(p, k) do { size_t k_ = (k); \
        if (n < cap) memcpy(out + n, (p), k_ <= cap - n ? k_ : cap - n); \
        n += k_; } while (0)
    size_t start = 0;
    for (;;) {
        const char *nl = len > start ? memchr(payload + start, '\n', len - start) : NULL;
        size_t end = nl ? (size_t)(nl - payload) : len;
        size_t line = end - start;
        if (line && payload[start + line - 1] == '\r') line--;   /* CRLF is one break */
        PUT("data: ", 6);
        PUT(payload + start, line);
        PUT("\n", 1);
        if (!nl) break;
        start = end + 1;
    }
    PUT("\n", 1);
#undef PUT
    return n;
}

char *sl_api_sse_frame_dup(const char *payload, size_t len, size_t *n_out)
{
    size_t n = sl_api_sse_frame(NULL, 0, payload, len);
    char *s = sl_malloc(n + 1);
    if (!s) return NULL;
    sl_api_sse_frame(s, n, payload, len);
    s[n] = '\0';
    if (n_out) *n_out = n;
    return s;
}

char *sl_api_sse_error(const sl_api_error *e, size_t *n_out)
{
    char *body = sl_api_error_body(e, NULL);
    if (!body) return NULL;
    char *s = sl_api_sse_frame_dup(body, strlen(body), n_out);
    free(body);
    return s;
}
