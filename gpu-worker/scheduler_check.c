/* gpu-worker/scheduler_check.c: the scheduler's accounting checker
 * (docs/SCHEDULER.md §4, invariants 1-13), for `assert(sl_sched_check(s))`
 * after every step in debug builds and for the tests. Worker process,
 * scheduler thread. It reads the state and changes nothing.
 *
 * Trade-off: it walks every slot and the whole block pool, O(slots + KV
 * blocks), too slow for a release step but cheap next to a debug forward. */
#include "gpu-worker/scheduler_impl.h"

int sl_sched_check(const sl_sched *s)
{
    const sl_kv_table *tables[8192];
    uint32_t n_tables = 0;
    int32_t n_live = 0, n_waiting = 0, n_parked = 0;
    for (int32_t i = 0; i < s->n_slots; i++) {
        const seq *q = &s->slots[i];
        uint32_t bs = s->kv.block_size;
        switch (q->state) {
        case SEQ_FREE:
            if (q->table.n_used)
                return 0;                                   /* 1 */
            break;
        case SEQ_WAITING:
            n_waiting++;
            if (q->table.n_used || q->n_cached)
                return 0;                                   /* 2 */
            break;
        case SEQ_PREFILL:
        case SEQ_DECODE:
            n_live++;
            if (q->state == SEQ_PREFILL && q->n_cached >= prefill_target(q))
                return 0;                                   /* 3 */
            if (q->state == SEQ_DECODE && q->n_cached != q->n_hist - 1)
                return 0;                                   /* 3 */
            if ((uint64_t)q->table.n_used * bs < (uint64_t)q->n_cached)
                return 0;                                   /* 4 */
            break;
        case SEQ_PARKED:
            n_parked++;
            if (q->n_gen < 1 || (q->n_cached != 0 && q->n_cached != q->n_hist - 1))
                return 0;                                   /* 10 */
            if (q->n_cached == 0 ? q->table.n_used != 0 : (uint64_t)q->table.n_used * bs < (uint64_t)q->n_cached)
                return 0;                                   /* 10 */
            break;
        }
        if (q->echo_rows != 0 && (!s->planned || q->state != SEQ_PREFILL || !echo_phase(q) ||
                                  q->n_cached != q->n_echoed || q->n_cached + q->echo_rows > q->req.n_prompt - 1))
            return 0;                                       /* 13 */
        if (q->state != SEQ_FREE && q->req.echo_logprobs &&
            (q->n_echoed > q->req.n_prompt - 1 || (q->n_gen > 0 && q->n_echoed != q->req.n_prompt - 1)))
            return 0;                                       /* 13 */
        if (q->state != SEQ_FREE) {
            if (q->n_hist != q->req.n_prompt + q->n_gen)
                return 0;                                   /* 5 */
            if (q->n_emitted > q->n_gen || q->n_emitted < q->n_gen - 1 || (q->paused != (q->n_emitted < q->n_gen)) ||
                (q->paused && q->state != SEQ_PARKED))
                return 0;                                   /* 6 */
            if (q->n_gen > q->req.max_tokens || q->n_hist > s->n_ctx)
                return 0;                                   /* 7 */
        }
        if (q->table.n_used && n_tables < sizeof tables / sizeof *tables)
            tables[n_tables++] = &q->table;
    }
    if (n_live != s->n_live || n_waiting != s->n_waiting || n_parked != s->n_parked ||
        s->n_live > s->cfg.max_seqs || s->n_live + s->n_waiting > 2 * s->cfg.max_seqs)
        return 0;                                           /* 8 */
    if (s->planned) {                                       /* 12 */
        int32_t oldest = -1;
        for (int32_t i = 0; i < s->n_live && oldest < 0; i++)
            if (s->slots[s->live[i]].state == SEQ_PREFILL)
                oldest = s->live[i];
        if (oldest >= 0 && s->slots[oldest].chunk < 1 && s->slots[oldest].echo_rows < 1 &&
            !s->slots[oldest].echo_blocked)
            return 0;   /* the oldest prefill always advances (or its echo records wait for its reader):
                           whoever waits on a prefill is not stuck */
        if (s->n_deferred_now > 0 && (oldest < 0 || !s->pc.enabled || s->n_deferred_now > s->n_waiting))
            return 0;   /* a deferred request waits on a live prefill, and only with the cache on */
    }
    const sl_kv_table *held = sl_prefix_cache_held(&s->pc);
    if (held && held->n_used && n_tables < sizeof tables / sizeof *tables)
        tables[n_tables++] = held;
    return sl_kv_blocks_check(&s->kv, tables, n_tables) && /* 9 */
           sl_prefix_cache_check(&s->pc, &s->kv);          /* 11 */
}

