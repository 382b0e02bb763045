/* gpu-worker/scheduler_echo.c: the scheduler's prompt-logprobs call (echo
 * with logprobs on /v1/completions), worker process, scheduler thread.
 * docs/SCHEDULER.md §5b is the essay.
 *
 * An echo request's prompt positions 0..n_prompt-2 are computed by a second
 * backend call of the step, sl_backend_forward with logits_all, because the
 * step's main call (sl_backend_forward_sample) returns only a drawn token
 * per sequence, never rows. Row i gives prompt token i + 1 its record, on
 * the host (sl_backend_logprob_record: the reference sampler's record).
 *
 * Trade-off: at most SL_SCHED_ECHO_ROWS rows a step, all echo sequences
 * together, so the host logits buffer is small and allocated once and a
 * long prompt's records take prompt / 8 steps (rows, not forwards, bound
 * the host work: each row is a log-softmax over the vocabulary). And never
 * more records than the consumer's ring can take now, so none waits in the
 * scheduler: a position whose record is not out is not counted as computed. */
#include <string.h>

#include "gpu-worker/scheduler_impl.h"

int32_t sl_sched_echo_plan(sl_sched *s, seq *q, int32_t budget_left, int32_t *rows_used)
{
    int32_t n = q->req.n_prompt - 1 - q->n_echoed;
    if (n > SL_SCHED_ECHO_ROWS - *rows_used)
        n = SL_SCHED_ECHO_ROWS - *rows_used;
    if (n > budget_left)
        n = budget_left;
    q->echo_blocked = false;
    if (n > 0 && s->io.ring_space) {
        uint32_t room = s->io.ring_space(s->io.ctx, q->req.id);
        if ((uint32_t)n > room)
            n = (int32_t)room;
        q->echo_blocked = n == 0;
    }
    if (n < 0)
        n = 0;
    q->echo_rows = n;
    *rows_used += n;
    return n;
}

/* Emits the records of q's rows (logits: its first row). Returns the
 * records delivered, or -1 when q ended (its consumer is gone or failed). */
static int32_t echo_emit(sl_sched *s, int32_t slot, float *logits, int32_t rows)
{
    seq *q = &s->slots[slot];
    int32_t n_top = q->req.params.n_logprobs;
    for (int32_t j = 0; j < rows; j++) {
        int32_t pos = q->n_cached + j, tok = q->hist[pos + 1];
        sl_logprob_record rec;
        if (sl_backend_logprob_record(logits + (size_t)j * (size_t)s->n_vocab, s->n_vocab, tok, n_top, &rec) < 0) {
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, "computing a prompt logprob failed");
            return -1;
        }
        sl_status rc = s->io.emit(s->io.ctx, q->req.id, tok, &rec);
        if (rc == SL_AGAIN)
            return j;   /* full after all (no ring_space bound): the rest is computed again later */
        if (rc == SL_ESTALE) {
            q->dropped = true;
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_CANCELLED, NULL);
            return -1;
        }
        if (rc < 0) {
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, "delivering a token failed");
            return -1;
        }
    }
    return rows;
}

int32_t sl_sched_echo_run(sl_sched *s, uint64_t t0)
{
    int32_t n = 0, rows = 0;
    for (int32_t i = 0; i < s->n_live; i++) {
        int32_t slot = s->live[i];
        seq *q = &s->slots[slot];
        if (q->echo_rows == 0)
            continue;
        s->echo_batch[n] = (sl_batch_seq){
            .tokens = q->hist + q->n_cached,
            .n_tokens = q->echo_rows,
            .pos = q->n_cached,
            .blocks = q->table.blocks,
            .n_blocks = (int32_t)q->table.n_used,
            .logits_all = true,
            .prompt = true,
        };
        s->echo_slot[n++] = slot;
        rows += q->echo_rows;
        if (!q->prefill_started) {
            q->prefill_started = true;
            q->prefill_ns = t0;
        }
    }
    if (n == 0)
        return 0;
    sl_status rc = sl_backend_forward(s->be, s->echo_batch, n, s->echo_logits);
    if (rc < 0) {
        for (int32_t b = 0; b < n; b++)
            s->slots[s->echo_slot[b]].echo_rows = 0;
        return rc;
    }
    uint64_t now = s->io.now_ns(s->io.ctx);
    float *row = s->echo_logits;
    for (int32_t b = 0; b < n; b++) {
        int32_t slot = s->echo_slot[b];
        seq *q = &s->slots[slot];
        int32_t k = q->echo_rows;
        q->echo_rows = 0;
        int32_t out = echo_emit(s, slot, row, k);
        row += (size_t)k * (size_t)s->n_vocab;
        if (out < 0)
            continue;   /* ended */
        q->n_cached += out;
        q->n_echoed = q->n_cached;
        sl_prefix_cache_insert(&s->pc, &s->kv, &q->table, q->hist, (uint32_t)q->n_cached, &q->chain);
        if (!echo_phase(q) && q->req.max_tokens == 0) {
            q->first_ns = q->last_ns = now;   /* prompt_ms: the echo rows were its whole computation */
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_LENGTH, NULL);
        }
    }
    return rows;
}
