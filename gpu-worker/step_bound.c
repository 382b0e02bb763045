/* gpu-worker/step_bound.c: the heartbeat's step bound over a sliding window
 * of recent steps (step_bound.h states the rule).
 * Trade-off: a bound that follows recent steps catches a stopped busy
 * worker within about twice its usual step, but a step much longer than
 * the recent ones and no bigger in tokens (a page-in, a noisy neighbour)
 * has only the floor and --heartbeat-timeout-ms as slack; the timeout is
 * the operator's knob for that. A bound that kept the longest step ever
 * seen (what this replaced) grew to tens of seconds on a loaded machine
 * and never came back down. */
#include <string.h>

#include "gpu-worker/step_bound.h"

void sl_step_bound_init(sl_step_bound *b, uint64_t first_ns)
{
    memset(b, 0, sizeof *b);
    b->first_ns = first_ns;
}

/* Re-derives p99 and the largest step from the ring: 128 entries, once per
 * step, a few microseconds against a step of milliseconds. */
static void summarize(sl_step_bound *b)
{
    uint64_t sorted[SL_STEP_BOUND_WINDOW];
    memcpy(sorted, b->step_ns, b->n * sizeof *sorted);
    for (uint32_t i = 1; i < b->n; i++) {   /* insertion sort: small and mostly sorted runs */
        uint64_t v = sorted[i];
        uint32_t j = i;
        for (; j > 0 && sorted[j - 1] > v; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = v;
    }
    uint32_t rank = (99 * b->n + 99) / 100;   /* nearest rank: ceil(0.99 n), in [1, n] */
    b->p99_ns = sorted[rank - 1];
    b->big_tokens = 0;
    b->big_ns = 0;
    for (uint32_t i = 0; i < b->n; i++)
        if (b->step_tokens[i] > b->big_tokens ||
            (b->step_tokens[i] == b->big_tokens && b->step_ns[i] > b->big_ns)) {
            b->big_tokens = b->step_tokens[i];
            b->big_ns = b->step_ns[i];
        }
}

void sl_step_bound_record(sl_step_bound *b, uint64_t step_ns, int32_t step_tokens)
{
    b->step_ns[b->head] = step_ns;
    b->step_tokens[b->head] = step_tokens > 0 ? step_tokens : 1;
    b->head = (b->head + 1) % SL_STEP_BOUND_WINDOW;
    if (b->n < SL_STEP_BOUND_WINDOW)
        b->n++;
    summarize(b);
}

uint64_t sl_step_bound_get(const sl_step_bound *b, int32_t n_tokens)
{
    uint64_t bound;
    if (b->n == 0) {
        bound = b->first_ns;
    } else {
        bound = 2 * b->p99_ns;
        /* a step as big as the largest recent one or bigger (a prefill chunk
         * among decodes, which p99 may leave out): linear in its tokens from
         * the largest recent step, doubled */
        uint64_t by_tokens = 2 * (b->big_ns / (uint64_t)b->big_tokens) * (uint64_t)(n_tokens > 0 ? n_tokens : 0);
        if (by_tokens > bound)
            bound = by_tokens;
    }
    return bound > SL_STEP_BOUND_FLOOR_NS ? bound : SL_STEP_BOUND_FLOOR_NS;
}

uint64_t sl_step_bound_p99(const sl_step_bound *b)
{
    return b->n ? b->p99_ns : 0;
}
