/* frontend/reasoning.c: the <think> block splitter (reasoning.h).
 * Runs in the front ends, per chat request of a reasoning model. The
 * trade-off: only a block at the start of the answer counts, so an answer
 * that talks about "<think>" tags keeps them; a model that thinks in the
 * middle of its answer would have that thought left in content. */
#include <stdlib.h>
#include <string.h>

#include "frontend/reasoning.h"
#include "shared/alloc.h"

static const char OPEN[] = "<think>";
static const char CLOSE[] = "</think>";

enum {
    PHASE_START = 0,    /* only whitespace so far: a block may still open */
    PHASE_THINK_LEAD,   /* just inside the block: its leading whitespace is dropped */
    PHASE_THINK,        /* inside the block */
    PHASE_AFTER,        /* just after </think>: whitespace is dropped */
    PHASE_CONTENT,      /* the answer: everything passes */
};

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static const char *find_mem(const char *h, size_t hn, const char *n, size_t nn)
{
    if (hn < nn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && memcmp(h + i, n, nn) == 0)
            return h + i;
    return NULL;
}

void sl_reasoning_init(sl_reasoning *r, bool start_open)
{
    memset(r, 0, sizeof *r);
    r->_phase = start_open ? PHASE_THINK_LEAD : PHASE_START;
}

void sl_reasoning_fini(sl_reasoning *r)
{
    free(r->_buf);
    r->_buf = NULL;
    r->_len = r->_cap = 0;
}

/* Runs the phases over the held text; returns bytes decided. */
static sl_status step(sl_reasoning *r, bool final, sl_reasoning_on_text on_text, void *ctx, size_t *used)
{
    const char *s = r->_buf;
    size_t n = r->_len, pos = 0;
    sl_status rc = SL_OK;
    while (rc == SL_OK && pos < n) {
        const char *p = s + pos;
        size_t left = n - pos;
        switch (r->_phase) {
        case PHASE_START: {
            size_t t = 0;
            while (t < left && is_ws(p[t]))
                t++;
            size_t rest = left - t, ol = sizeof OPEN - 1;
            if (rest >= ol && memcmp(p + t, OPEN, ol) == 0) {
                pos += t + ol;
                r->_phase = PHASE_THINK_LEAD;
                break;
            }
            if (!final && (rest == 0 || (rest < ol && memcmp(p + t, OPEN, rest) == 0))) {
                *used = pos;
                return SL_OK;   /* whitespace or part of "<think>": undecided */
            }
            r->_phase = PHASE_CONTENT;
            break;
        }
        case PHASE_THINK_LEAD:
        case PHASE_AFTER: {
            size_t t = 0;
            while (t < left && is_ws(p[t]))
                t++;
            pos += t;
            if (t < left)
                r->_phase = r->_phase == PHASE_AFTER ? PHASE_CONTENT : PHASE_THINK;
            break;
        }
        case PHASE_THINK: {
            size_t cl = sizeof CLOSE - 1;
            const char *e = find_mem(p, left, CLOSE, cl);
            if (e != NULL) {
                size_t k = (size_t)(e - p);
                if (k > 0)
                    rc = on_text(ctx, SL_REASONING_EVENT_REASONING, p, k);
                pos += k + cl;
                r->_phase = PHASE_AFTER;
                break;
            }
            size_t h = 0;
            if (!final)
                for (size_t k = cl - 1 < left ? cl - 1 : left; k > 0 && h == 0; k--)
                    if (memcmp(p + left - k, CLOSE, k) == 0)
                        h = k;
            if (left - h > 0)
                rc = on_text(ctx, SL_REASONING_EVENT_REASONING, p, left - h);
            pos += left - h;
            *used = pos;
            return rc;
        }
        default:
            rc = on_text(ctx, SL_REASONING_EVENT_CONTENT, p, left);
            pos = n;
            break;
        }
    }
    *used = pos;
    return rc;
}

sl_status sl_reasoning_feed(sl_reasoning *r, const char *s, size_t n, bool final, sl_reasoning_on_text on_text,
                            void *ctx)
{
    if (r->_finished)
        return SL_ESTATE;
    if (r->_phase == PHASE_CONTENT && r->_len == 0) {
        /* the common case once the block is behind: no copy */
        if (final)
            r->_finished = true;
        return n ? on_text(ctx, SL_REASONING_EVENT_CONTENT, s, n) : SL_OK;
    }
    if (r->_len + n + 1 > r->_cap) {
        size_t c = r->_cap ? r->_cap : 64;
        while (c < r->_len + n + 1)
            c *= 2;
        char *p = sl_realloc(r->_buf, c);
        if (p == NULL)
            return SL_ENOMEM;
        r->_buf = p;
        r->_cap = c;
    }
    if (n)
        memcpy(r->_buf + r->_len, s, n);
    r->_len += n;
    size_t used = 0;
    sl_status rc = step(r, final, on_text, ctx, &used);
    memmove(r->_buf, r->_buf + used, r->_len - used);
    r->_len -= used;
    if (final)
        r->_finished = true;
    return rc;
}

bool sl_reasoning_template_thinks(const char *src, size_t len)
{
    return src != NULL && find_mem(src, len, OPEN, sizeof OPEN - 1) != NULL;
}

bool sl_reasoning_prompt_opens(const char *text, size_t len)
{
    size_t ol = sizeof OPEN - 1;
    while (len > 0 && is_ws(text[len - 1]))
        len--;
    return len >= ol && memcmp(text + len - ol, OPEN, ol) == 0;
}
