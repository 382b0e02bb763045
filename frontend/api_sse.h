/* frontend/api_sse.h: Server-Sent Events framing for streamed responses.
 * Where:     front ends, between the chunk builders and h2o's send.
 * Who:       any thread; no state.
 * Format:    one event per chunk, "data: <json>\n\n"; the stream ends with
 *            "data: [DONE]\n\n" (OpenAI); a failure after the stream started
 *            is a final "data: {"error":{...}}\n\n" and then the stream ends
 *            (no [DONE], as llama-server and vLLM do); ": ping\n\n" is a
 *            comment clients ignore, sent to keep idle proxies open and to
 *            notice a gone client.
 * Ownership: frames go to caller buffers or malloc'd strings. */
#ifndef SL_API_SSE_H
#define SL_API_SSE_H

#include <stddef.h>

#include "frontend/api_error.h"

#define SL_API_SSE_DONE "data: [DONE]\n\n"
#define SL_API_SSE_PING ": ping\n\n"

/* Frames payload[0..len) as one event: each line of the payload (compact
 * JSON has none, but the format allows them) becomes its own "data: " line,
 * then a blank line. Writes min(needed, cap) bytes to out (out may be NULL
 * when cap is 0) and returns the bytes needed, without a NUL. */
size_t sl_api_sse_frame(char *out, size_t cap, const char *payload, size_t len);

/* The same into a malloc'd NUL-terminated string; *n_out (may be NULL) gets
 * its length. NULL on allocation failure. */
char *sl_api_sse_frame_dup(const char *payload, size_t len, size_t *n_out);

/* The mid-stream failure event for `e` (malloc'd, NUL-terminated). */
char *sl_api_sse_error(const sl_api_error *e, size_t *n_out);

#endif
