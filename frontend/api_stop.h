/* frontend/api_stop.h: incremental stop-string matcher.
 * Where:     front ends, per request, between the detokenizer and the
 *            response (stream chunks or the accumulated text).
 * Who:       the request's own thread; one matcher per request.
 * Contract:  text goes in as decoded pieces; out comes the text that is safe
 *            to send now. A suffix that could still become the start of a stop
 *            string is held back; a stop string that spans pieces is found;
 *            the output is cut exactly before it (OpenAI never sends the stop
 *            text). The match that completes first wins (the smallest end
 *            offset; on a tie the longest), so the cut is the same however
 *            the text was split into pieces, as if it came byte by byte.
 *            Pieces that are whole UTF-8 characters give outputs that are
 *            whole characters (a stop string starts with a lead byte).
 *            min_tokens (vLLM): stop strings do not count before min_tokens
 *            tokens; the caller sends those pieces around the matcher.
 * Ownership: stop strings are copied at init; emitted text points into the
 *            matcher and is valid until the next push/flush/fini.
 * Errors:    init: SL_OK, SL_EINVAL (too many or empty stop strings),
 *            SL_ENOMEM; push: SL_OK, SL_ENOMEM. */
#ifndef SL_API_STOP_H
#define SL_API_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/status.h"

#define SL_API_STOP_N_MAX 16    /* matcher capacity (the API allows 4) */

typedef struct {
    int n;                              /* stop strings in use; 0 = pass-through */
    char *_stop[SL_API_STOP_N_MAX];
    size_t _stop_len[SL_API_STOP_N_MAX];
    char *_buf;                         /* held text (after _skip) */
    size_t _len, _cap;
    size_t _skip;                       /* bytes of _buf emitted by the last call */
    bool hit;                           /* a stop string was found; later pushes emit nothing */
    int hit_index;                      /* which one, -1 when none */
} sl_api_stop;

/* Copies stops[i][0..lens[i]) for i < n (n = 0: pass-through; stops and
 * lens may then be NULL). On failure *s is empty and fini is still safe. */
sl_status sl_api_stop_init(sl_api_stop *s, const char *const *stops, const size_t *lens, int n);
/* Frees the copies and the held text; safe on a failed init. */
void sl_api_stop_fini(sl_api_stop *s);

/* Feeds piece[0..len). OUT emit, emit_len: text to send now (may be empty).
 * Returns SL_OK and sets s->hit when a stop string completed (emit then ends
 * right before it: send it and finish with "stop"), or SL_ENOMEM (nothing
 * emitted; the held text is kept). After a hit, pushes emit nothing. */
sl_status sl_api_stop_push(sl_api_stop *s, const char *piece, size_t len,
                           const char **emit, size_t *emit_len);

/* End of generation without a hit: OUT the held text, which is now known
 * not to start a stop string. Emits nothing after a hit. */
void sl_api_stop_flush(sl_api_stop *s, const char **emit, size_t *emit_len);

#endif
