/* frontend/api_stop.c: stop strings over a stream of decoded pieces.
 * Runs in the front ends, once per decoded piece. Trade-off: each push scans
 * the held tail plus the new piece naively for every stop string (at most
 * 4 x 256 bytes); held text is bounded by the longest stop string, so the
 * cost per piece stays small without a KMP/Aho-Corasick automaton.
 *
 * Invariant: the held text (_buf[_skip.._len)) never contains a whole stop
 * string, and it is always a suffix of the text seen that is a proper prefix
 * of some stop string (or empty). So a match can only start inside the held
 * text or the new piece, and the held text is shorter than the longest stop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_stop.h"

sl_status sl_api_stop_init(sl_api_stop *s, const char *const *stops, const size_t *lens, int n)
{
    memset(s, 0, sizeof *s);
    s->hit_index = -1;
    if (n < 0 || n > SL_API_STOP_N_MAX) return SL_EINVAL;
    for (int i = 0; i < n; i++) {
        if (!stops[i] || lens[i] == 0) { sl_api_stop_fini(s); return SL_EINVAL; }
        s->_stop[i] = sl_malloc(lens[i]);
        if (!s->_stop[i]) { sl_api_stop_fini(s); return SL_ENOMEM; }
        memcpy(s->_stop[i], stops[i], lens[i]);
        s->_stop_len[i] = lens[i];
        s->n = i + 1;
    }
    return SL_OK;
}

void sl_api_stop_fini(sl_api_stop *s)
{
    for (int i = 0; i < s->n; i++) free(s->_stop[i]);
    free(s->_buf);
    memset(s, 0, sizeof *s);
    s->hit_index = -1;
}

/* Length of the longest suffix of b[0..n) that is a proper prefix of any stop. */
static size_t partial_suffix(const sl_api_stop *s, const char *b, size_t n)
{
    size_t best = 0;
    for (int i = 0; i < s->n; i++) {
        size_t m = s->_stop_len[i] - 1;
        if (m > n) m = n;
        for (size_t k = m; k > best; k--)
            if (memcmp(b + n - k, s->_stop[i], k) == 0) { best = k; break; }
    }
    return best;
}

sl_status sl_api_stop_push(sl_api_stop *s, const char *piece, size_t len,
                           const char **emit, size_t *emit_len)
{
    *emit = "";
    *emit_len = 0;
    if (s->hit) return SL_OK;
    /* Drop what the last call emitted, keep the held tail. */
    if (s->_skip) {
        memmove(s->_buf, s->_buf + s->_skip, s->_len - s->_skip);
        s->_len -= s->_skip;
        s->_skip = 0;
    }
    if (s->n == 0) {   /* nothing to match: pass the piece through untouched */
        *emit = len ? piece : "";
        *emit_len = len;
        return SL_OK;
    }
    if (s->_len + len > s->_cap) {
        size_t cap = s->_cap ? s->_cap : 256;
        while (cap < s->_len + len) cap *= 2;
        char *b = sl_realloc(s->_buf, cap);
        if (!b) return SL_ENOMEM;
        s->_buf = b;
        s->_cap = cap;
    }
    if (len) memcpy(s->_buf + s->_len, piece, len);
    size_t n = s->_len + len;
    s->_len = n;

    /* The match that completes first (smallest end), as if the text had
     * come byte by byte; on a tie the longer one (it starts earlier). This
     * makes the cut independent of how the text was split into pieces. By
     * the invariant every match ends inside the new piece and none starts
     * in text already emitted (it would have been held back). */
    size_t best_end = SIZE_MAX, best_pos = 0;
    int best = -1;
    for (int i = 0; i < s->n; i++) {
        size_t sl = s->_stop_len[i];
        for (size_t p = 0; p + sl <= n && p + sl <= best_end; p++) {
            if (memcmp(s->_buf + p, s->_stop[i], sl) == 0) {
                if (p + sl < best_end || p < best_pos) {
                    best_end = p + sl;
                    best_pos = p;
                    best = i;
                }
                break;
            }
        }
    }
    if (best >= 0) {
        s->hit = true;
        s->hit_index = best;
        *emit = s->_buf;
        *emit_len = best_pos;
        s->_skip = s->_len;   /* nothing more is ever emitted */
        return SL_OK;
    }
    size_t hold = partial_suffix(s, s->_buf, n);
    *emit = s->_buf;
    *emit_len = n - hold;
    s->_skip = n - hold;
    return SL_OK;
}

void sl_api_stop_flush(sl_api_stop *s, const char **emit, size_t *emit_len)
{
    *emit = "";
    *emit_len = 0;
    if (s->hit || s->n == 0 || !s->_buf) return;
    *emit = s->_buf + s->_skip;
    *emit_len = s->_len - s->_skip;
    s->_skip = s->_len;
}
