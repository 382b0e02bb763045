/* gpu-worker/step_bound.h: how long the worker's next step may take before
 * the master calls it wedged (the heartbeat's max_step_ns; the master adds
 * --heartbeat-timeout-ms).
 * Where:     one sl_step_bound in the worker, on caller storage; no
 *            allocation, no clock: the caller feeds measured steps.
 * Who:       the scheduler thread only.
 * Rule:      the bound follows the last SL_STEP_BOUND_WINDOW steps, so it
 *            comes back down after a long step instead of remembering it
 *            forever: the largest of SL_STEP_BOUND_FLOOR_NS, twice the
 *            window's p99 step time, and, for a step of n tokens, twice n
 *            at the per-token cost of the window's largest step (a step
 *            costs no more than linearly more than a smaller one: the
 *            weights are read once per step). Before any step it is the
 *            caller's guess (first_ns, from the model's size).
 * Errors:    none. */
#ifndef SL_STEP_BOUND_H
#define SL_STEP_BOUND_H

#include <stdint.h>

#define SL_STEP_BOUND_WINDOW 128                /* steps remembered; p99 of 128 ignores the single worst */
#define SL_STEP_BOUND_FLOOR_NS 250000000ull     /* a step may always take 250 ms (a loaded machine's jitter) */

typedef struct {
    uint64_t first_ns;                          /* the bound before any step was measured */
    uint64_t step_ns[SL_STEP_BOUND_WINDOW];     /* ring of the last steps' durations */
    int32_t step_tokens[SL_STEP_BOUND_WINDOW];  /* and their token counts */
    uint32_t n;                                 /* steps in the ring, up to the window */
    uint32_t head;                              /* next ring slot to write */
    uint64_t p99_ns;                            /* p99 of step_ns over the ring (nearest rank) */
    uint64_t big_ns;                            /* the duration of the ring's largest step (most tokens; slowest of those) */
    int32_t big_tokens;                         /* and its token count */
} sl_step_bound;

/* Starts with nothing measured: sl_step_bound_get gives max(first_ns, floor). */
void sl_step_bound_init(sl_step_bound *b, uint64_t first_ns);

/* Records one step that ran step_tokens tokens in step_ns (step_tokens < 1
 * counts as 1); the oldest leaves the window once it is full. */
void sl_step_bound_record(sl_step_bound *b, uint64_t step_ns, int32_t step_tokens);

/* The bound for a step of n_tokens tokens (0: not known yet, the recent
 * steps' bound alone). */
uint64_t sl_step_bound_get(const sl_step_bound *b, int32_t n_tokens);

/* The window's p99 step time, 0 before any step. */
uint64_t sl_step_bound_p99(const sl_step_bound *b);

#endif
