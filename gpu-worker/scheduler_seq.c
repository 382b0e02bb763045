/* gpu-worker/scheduler_seq.c: a sequence's moves between the scheduler's
 * states (docs/SCHEDULER.md: the state machine and its invariants): end,
 * preempt, park and unpark, the blocks a prefill takes (prefix-cache hits
 * first), and which live prefill a waiting request defers to. Called from
 * scheduler.c's step on the scheduler thread; every function keeps the
 * accounting sl_sched_check asserts. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "gpu-worker/kv_blocks.h"
#include "gpu-worker/prefix_cache.h"
#include "gpu-worker/scheduler_impl.h"


static double ms_between(uint64_t a, uint64_t b)
{
    return b > a ? (double)(b - a) / 1e6 : 0.0;
}

void sl_sched_trace(sl_sched *s, const seq *q, const char *stage, uint64_t now)
{
    if (s->cfg.ttft_trace)
        fprintf(s->trace, "TTFT_TRACE id=%llu stage=%s ms=%.3f\n", (unsigned long long)q->req.id, stage,
                ms_between(q->req.submit_ns, now));
}

void sl_sched_list_remove(int32_t *list, int32_t *n, int32_t slot)
{
    for (int32_t i = 0; i < *n; i++)
        if (list[i] == slot) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return;
        }
    assert(!"slot not in list");
}

/* Ends a request: frees its blocks and slot, tells the source (unless it is
 * gone). Transition: any state -> SEQ_FREE. */
void sl_sched_seq_end(sl_sched *s, int32_t slot, int reason, const char *error)
{
    seq *q = &s->slots[slot];
    if (q->state == SEQ_WAITING)
        sl_sched_list_remove(s->waiting, &s->n_waiting, slot);
    else if (q->state == SEQ_PREFILL || q->state == SEQ_DECODE)
        sl_sched_list_remove(s->live, &s->n_live, slot);
    else if (q->state == SEQ_PARKED)
        sl_sched_list_remove(s->parked, &s->n_parked, slot);
    sl_prefix_cache_release(&s->pc, &s->kv, &q->table);
    sl_constraint_destroy(q->con);
    q->con = NULL;
    if (!q->dropped) {
        sl_sched_timings t = {
            .queue_ms = q->admit_ns ? ms_between(q->req.submit_ns, q->admit_ns) : 0,
            .prompt_ms = q->first_ns ? ms_between(q->prefill_ns, q->first_ns) : 0,
            .predicted_ms = q->first_ns ? ms_between(q->first_ns, q->last_ns) : 0,
            .n_prompt_tokens = q->req.n_prompt,
            .n_generated = q->n_emitted,
            .n_preempted = q->n_preempted,
            .n_cached_tokens = q->n_prefix_hit,
            .n_lookup_tokens = q->n_prefix_lookup,
        };
        s->io.finish(s->io.ctx, q->req.id, reason, error, &t);
    }
    memset(&q->req, 0, sizeof q->req);
    q->state = SEQ_FREE;
}

/* Frees a live sequence's blocks and puts it back at the head of the waiting
 * list: recompute re-prefills prompt + generated tokens, and sampling resumes
 * at draw_index n_gen, so nothing already emitted is produced again.
 * Transition: SEQ_PREFILL/SEQ_DECODE -> SEQ_WAITING. */
void sl_sched_seq_preempt(sl_sched *s, int32_t slot)
{
    seq *q = &s->slots[slot];
    sl_sched_list_remove(s->live, &s->n_live, slot);
    sl_prefix_cache_release(&s->pc, &s->kv, &q->table);
    q->n_cached = 0;
    q->state = SEQ_WAITING;
    q->n_preempted++;
    s->stats.n_preemptions++;
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = slot;
    s->n_waiting++;
}

/* Takes a decoding sequence whose consumer is full out of the live set, so
 * it holds no batch slot while nobody reads; it keeps its blocks (dropped
 * later only if the pool runs short: park_drop) and its owed token.
 * Transition: SEQ_DECODE -> SEQ_PARKED. */
void sl_sched_seq_park(sl_sched *s, int32_t slot)
{
    seq *q = &s->slots[slot];
    sl_sched_list_remove(s->live, &s->n_live, slot);
    q->state = SEQ_PARKED;
    s->parked[s->n_parked++] = slot;
    s->stats.n_parkings++;
}

/* Frees the blocks of one parked sequence, the one parked longest whose
 * consumer is still full, else the one parked longest; it will recompute when
 * it returns, as a preempted sequence does. Returns false when no parked
 * sequence holds blocks. Transition: none (SEQ_PARKED, n_cached -> 0). */
bool sl_sched_park_drop(sl_sched *s)
{
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < s->n_parked; i++) {
            seq *q = &s->slots[s->parked[i]];
            if (q->n_cached == 0 || (pass == 0 && !q->paused))
                continue;
            sl_prefix_cache_release(&s->pc, &s->kv, &q->table);
            q->n_cached = 0;
            s->stats.n_park_drops++;
            return true;
        }
    return false;
}

/* Gives a sequence about to prefill (admission, or a return that must
 * recompute) its blocks: the longest cached prefix of its history, mapped
 * from the prefix cache, then fresh blocks for the rest and room for the
 * first decode position, evicting unused cached blocks and then dropping
 * parked sequences' blocks when the pool is short. At least the last
 * position of the target is always computed (its row gives the next token).
 * Returns false, holding nothing, if the pool cannot make the room. */
bool sl_sched_seq_take_blocks(sl_sched *s, seq *q)
{
    uint32_t target = (uint32_t)prefill_target(q), bs = s->kv.block_size;
    uint32_t look = echo_phase(q) ? (uint32_t)q->n_echoed : target;   /* echo: only rows it has out (§5b) */
    uint32_t max_hit = echo_phase(q) ? look / bs : (target - 1) / bs;
    uint32_t hit = sl_prefix_cache_match(&s->pc, &s->kv, q->hist, look, max_hit, &q->table, &q->chain);
    /* echo with max_tokens 0 draws nothing: no first decode position */
    uint32_t need = sl_kv_blocks_needed(&s->kv, &q->table, q->req.max_tokens > 0 ? target + 1 : target);
    while (need > sl_kv_blocks_free_count(&s->kv) &&
           (sl_prefix_cache_evict(&s->pc, &s->kv, need - sl_kv_blocks_free_count(&s->kv)) > 0 || sl_sched_park_drop(s)))
        ;
    if (need > sl_kv_blocks_free_count(&s->kv)) {
        sl_prefix_cache_release(&s->pc, &s->kv, &q->table);
        return false;
    }
    sl_status rc = sl_kv_blocks_reserve(&s->kv, &q->table, target);
    assert(rc == SL_OK);
    (void)rc;
    q->n_cached = (int32_t)(hit * bs);
    return true;
}

/* The live prefill a waiting sequence should wait for, or -1 (docs/
 * SCHEDULER.md §5a, "Sharing an in-flight prompt"): a live PREFILL sequence
 * l whose target and q's agree on l's next uncomputed full block and every
 * block before it, where that block is one q's lookup could map (it stops
 * (target - 1) / bs blocks in) and one l's prefill completes (its target
 * covers it). What l computed so far is cached, so q admitted now would map
 * it and then compute the very block l is computing; admitted once l has
 * computed the shared blocks, q maps them all. "Cached" is read from l's
 * progress, not looked up: a lookup maps blocks and counts a query. Where
 * that reading is wrong (another sequence cached blocks past l's progress,
 * or l's blocks could not be inserted) q waits needlessly, but only until
 * l's prefill passes the block: l is live and advances (invariant 12).
 * Cost: per live prefill one block compared, the run before it only when
 * that block is equal (then q usually waits). Nothing is allocated. */
int32_t sl_sched_defer_leader(const sl_sched *s, const seq *q)
{
    if (!s->pc.enabled || echo_phase(q))
        return -1;   /* nothing would be shared; an echo request computes its prompt rows itself */
    uint32_t bs = s->kv.block_size;
    size_t block_bytes = (size_t)bs * sizeof *q->hist;
    uint32_t q_blocks = ((uint32_t)prefill_target(q) - 1) / bs;
    for (int32_t i = 0; i < s->n_live; i++) {
        const seq *l = &s->slots[s->live[i]];
        if (l->state != SEQ_PREFILL || echo_phase(l))
            continue;   /* an echo request advances at its reader's pace (§5b): nobody waits on it */
        uint32_t done = (uint32_t)l->n_cached / bs;
        if (done >= q_blocks || done >= (uint32_t)prefill_target(l) / bs)
            continue;
        if (memcmp(q->hist + (size_t)done * bs, l->hist + (size_t)done * bs, block_bytes) != 0 ||
            memcmp(q->hist, l->hist, done * block_bytes) != 0)
            continue;
        return s->live[i];
    }
    return -1;
}

/* Puts a parked sequence whose owed token was delivered back into the live
 * set, as its newest member: DECODE where it left when it kept its blocks,
 * else PREFILL of hist[0, n_hist-1) (its blocks taken by the caller's
 * seq_take_blocks). Transition: SEQ_PARKED -> SEQ_DECODE / SEQ_PREFILL. */
void sl_sched_seq_unpark(sl_sched *s, int32_t slot)
{
    seq *q = &s->slots[slot];
    sl_sched_list_remove(s->parked, &s->n_parked, slot);
    s->live[s->n_live++] = slot;
    q->chunk = 0;
    q->state = q->table.n_used > 0 && q->n_cached == q->n_hist - 1 ? SEQ_DECODE : SEQ_PREFILL;
}
