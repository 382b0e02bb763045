/* gpu-worker/scheduler.c: the continuous-batching scheduler (worker process,
 * scheduler thread). docs/SCHEDULER.md is the essay: the loop, the window
 * rules, the numbered accounting invariants that sl_sched_check() asserts,
 * preemption and error scope.
 *
 * Trade-off: one forward per step carries every running decode plus prefill
 * chunks, so a step's cost is bounded by the token budget, and a lone
 * sequence runs the very same loop (no single-request fast path that would
 * lock newcomers out). Batch-1 pays O(max_seqs) bookkeeping per step and
 * nothing per vocabulary entry beyond its own logits row.
 *
 * The step is one backend call, sl_backend_forward_sample: the forward pass
 * and the draws (on the device or on the host, the backend's business), so
 * this file holds no logits, sampler scratch or threads. A sequence's moves
 * between states (end, preempt, park, blocks) are in scheduler_seq.c. */
#include "shared/alloc.h"
#include "gpu-worker/scheduler.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/kv_blocks.h"
#include "gpu-worker/prefix_cache.h"
#include "gpu-worker/scheduler_impl.h"

#define NS_PER_MS 1000000ull
#define ADAPTIVE_PEERS_WAIT_NS (3 * NS_PER_MS)  /* seed: stragglers when arrivals found peers */
#define ADAPTIVE_RECENT_WAIT_NS (2 * NS_PER_MS) /* seed: alone, but the last round was concurrent */
#define PAUSED_RETRY_NS (1 * NS_PER_MS)         /* emit retry interval while every sequence is paused */
#define IDLE_WAIT_NS (100 * NS_PER_MS)          /* doorbell sleep bound when idle (heartbeat cadence) */


/* ------------------------------------------------------------------------ */
/* config, create, destroy                                                   */

void sl_sched_config_default(sl_sched_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_seqs = 16;
    c->token_budget = 256;
    c->prefill_chunk = 256;
    c->window_ms = 0;
    c->kv_block_size = SL_KV_BLOCK_TOKENS;
    c->n_kv_blocks = 0;
    c->prefix_cache = true;
}

static sl_status bad(char err[SL_ERR_LEN], const char *what)
{
    snprintf(err, SL_ERR_LEN, "scheduler: %s", what);
    return SL_EINVAL;
}

sl_status sl_sched_create(sl_backend *be, int32_t n_vocab, int32_t n_ctx, const int32_t *eog, int32_t n_eog,
                          const sl_sched_config *cfg, const sl_sched_io *io, sl_sched **out,
                          char err[SL_ERR_LEN])
{
    *out = NULL;
    err[0] = 0;
    if (!be || !cfg || !io || n_vocab < 1 || n_ctx < 2 || n_eog < 0 || (n_eog > 0 && !eog))
        return bad(err, "missing backend, config or io, or bad n_vocab/n_ctx/eog");
    if (!io->poll || !io->emit || !io->finish || !io->cancelled || !io->wait || !io->now_ns || !io->step_done)
        return bad(err, "every io callback is required");
    if (cfg->max_seqs < 1 || cfg->max_seqs > 4096)
        return bad(err, "max_seqs must be in [1, 4096]");
    if (cfg->max_seqs > sl_backend_max_batch_seqs(&be->cfg)) {
        snprintf(err, SL_ERR_LEN, "scheduler: max_seqs %d exceeds the backend's max_batch_seqs %d",
                 cfg->max_seqs, sl_backend_max_batch_seqs(&be->cfg));
        return SL_EINVAL;
    }
    if (cfg->token_budget < cfg->max_seqs)
        return bad(err, "token_budget must be >= max_seqs (every running sequence decodes each step)");
    if (cfg->token_budget > be->cfg.max_batch_tokens) {
        snprintf(err, SL_ERR_LEN, "scheduler: token_budget %d exceeds the backend's max_batch_tokens %d",
                 cfg->token_budget, be->cfg.max_batch_tokens);
        return SL_EINVAL;
    }
    if (cfg->prefill_chunk < 1)
        return bad(err, "prefill_chunk must be >= 1");
    if (cfg->window_ms < 0 || cfg->window_ms > 10000)
        return bad(err, "window_ms must be in [0, 10000]");
    if (cfg->kv_block_size != be->cfg.kv_block_size) {
        snprintf(err, SL_ERR_LEN, "scheduler: kv_block_size %u differs from the backend's %u",
                 cfg->kv_block_size, be->cfg.kv_block_size);
        return SL_EINVAL;
    }
    if (cfg->n_kv_blocks < 1 || cfg->n_kv_blocks > be->cfg.n_kv_blocks) {
        snprintf(err, SL_ERR_LEN, "scheduler: n_kv_blocks %u must be in [1, %u] (the backend's pool)",
                 cfg->n_kv_blocks, be->cfg.n_kv_blocks);
        return SL_EINVAL;
    }
    if (n_ctx > be->cfg.max_ctx) {
        snprintf(err, SL_ERR_LEN, "scheduler: n_ctx %d exceeds the backend's max_ctx %d", n_ctx, be->cfg.max_ctx);
        return SL_EINVAL;
    }

    sl_sched *s = sl_calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->be = be;
    s->io = *io;
    s->cfg = *cfg;
    s->n_vocab = n_vocab;
    s->n_ctx = n_ctx;
    s->trace = cfg->trace ? cfg->trace : stderr;
    s->n_slots = 3 * cfg->max_seqs;
    int32_t M = cfg->max_seqs;
    s->eog = sl_malloc((size_t)(n_eog ? n_eog : 1) * sizeof *s->eog);
    s->slots = sl_calloc((size_t)s->n_slots, sizeof *s->slots);
    s->hist_mem = sl_malloc((size_t)s->n_slots * (size_t)n_ctx * sizeof *s->hist_mem);
    s->live = sl_malloc((size_t)M * sizeof *s->live);
    s->waiting = sl_malloc((size_t)s->n_slots * sizeof *s->waiting);
    s->parked = sl_malloc((size_t)s->n_slots * sizeof *s->parked);
    s->batch = sl_calloc((size_t)M, sizeof *s->batch);
    s->batch_slot = sl_malloc((size_t)M * sizeof *s->batch_slot);
    s->reqs = sl_calloc((size_t)M, sizeof *s->reqs);
    s->drawn = sl_malloc((size_t)M * sizeof *s->drawn);
    s->mask_con = sl_calloc((size_t)M, sizeof *s->mask_con);
    s->mask_eog = sl_calloc((size_t)M, sizeof *s->mask_eog);
    s->mask_entry = sl_calloc((size_t)M, sizeof *s->mask_entry);
    s->mask_out = sl_calloc((size_t)M, sizeof *s->mask_out);
    s->echo_logits = sl_malloc((size_t)SL_SCHED_ECHO_ROWS * (size_t)n_vocab * sizeof *s->echo_logits);
    if (!s->eog || !s->slots || !s->hist_mem || !s->live || !s->waiting || !s->parked || !s->batch || !s->batch_slot ||
        !s->reqs || !s->drawn || !s->mask_con || !s->mask_eog || !s->mask_entry || !s->mask_out || !s->echo_logits)
        goto nomem;
    for (int32_t i = 0; i < n_eog; i++)   /* ids outside the vocabulary can never be drawn */
        if (eog[i] >= 0 && eog[i] < n_vocab)
            s->eog[s->n_eog++] = eog[i];
    sl_status rc = sl_kv_blocks_init(&s->kv, cfg->n_kv_blocks, cfg->kv_block_size);
    if (rc < 0 || sl_prefix_cache_init(&s->pc, &s->kv, cfg->prefix_cache) < 0)
        goto nomem;
    for (int32_t i = 0; i < s->n_slots; i++) {
        s->slots[i].hist = s->hist_mem + (size_t)i * (size_t)n_ctx;
        if (sl_kv_blocks_table_init(&s->kv, &s->slots[i].table, (uint32_t)n_ctx) < 0)
            goto nomem;
    }
    s->stats.kv_blocks_total = cfg->n_kv_blocks;
    s->stats.kv_blocks_free = cfg->n_kv_blocks;
    s->stats.prefix_cache = s->pc.enabled;   /* fixed for the scheduler's life */
    *out = s;
    return SL_OK;
nomem:
    sl_sched_destroy(s);
    snprintf(err, SL_ERR_LEN, "scheduler: out of memory sizing %d sequences of %d positions", cfg->max_seqs, n_ctx);
    return SL_ENOMEM;
}

void sl_sched_destroy(sl_sched *s)
{
    if (!s)
        return;
    if (s->slots) {
        for (int32_t i = 0; i < s->n_slots; i++) {
            sl_prefix_cache_release(&s->pc, &s->kv, &s->slots[i].table);
            sl_kv_blocks_table_fini(&s->slots[i].table);
            sl_constraint_destroy(s->slots[i].con);
        }
    }
    sl_prefix_cache_fini(&s->pc, &s->kv);
    sl_kv_blocks_fini(&s->kv);
    free(s->eog);
    free(s->slots);
    free(s->hist_mem);
    free(s->live);
    free(s->waiting);
    free(s->parked);
    free(s->batch);
    free(s->batch_slot);
    free(s->reqs);
    free(s->drawn);
    free(s->mask_con);
    free(s->mask_eog);
    free(s->mask_entry);
    free(s->mask_out);
    free(s->echo_logits);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* intake: poll, validate                                                    */

static bool is_eog(const sl_sched *s, int32_t tok)
{
    for (int32_t i = 0; i < s->n_eog; i++)
        if (s->eog[i] == tok)
            return true;
    return false;
}

static int32_t free_slot(const sl_sched *s)
{
    for (int32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].state == SEQ_FREE)
            return i;
    return -1;
}

/* Refuses what shared memory must not be trusted with. Returns NULL if the
 * request may run, else the reason (in buf when formatted). */
static const char *validate(const sl_sched *s, const sl_sched_request *r, char *buf, size_t cap)
{
    const char *why;
    if (!r->prompt || r->n_prompt < 1)
        return "the prompt is empty";
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab) {
            snprintf(buf, cap, "prompt token %d at %d is outside the vocabulary (%d)", r->prompt[i], i, s->n_vocab);
            return buf;
        }
    if (sl_sampling_validate(&r->params, s->n_vocab, &why) < 0) {
        snprintf(buf, cap, "invalid sampling parameter: %s", why ? why : "?");
        return buf;
    }
    if (r->max_tokens < (r->echo_logprobs ? 0 : 1))
        return r->echo_logprobs ? "max_tokens must be >= 0" : "max_tokens must be >= 1";
    if (r->echo_logprobs && r->params.n_logprobs < 0)
        return "the prompt's logprobs (echo) need logprobs >= 0";
    if (r->min_tokens < 0 || r->min_tokens > r->max_tokens)
        return "min_tokens must be in [0, max_tokens]";
    if ((int64_t)r->n_prompt + r->max_tokens > s->n_ctx) {
        snprintf(buf, cap, "prompt (%d tokens) + max_tokens (%d) exceeds the context length (%d)", r->n_prompt,
                 r->max_tokens, s->n_ctx);
        return buf;
    }
    /* A sequence the whole pool cannot hold would be preempted forever. */
    uint32_t need = sl_kv_blocks_needed(&s->kv, NULL, (uint32_t)(r->n_prompt + r->max_tokens));
    if (need > s->kv.n_blocks) {
        snprintf(buf, cap, "prompt + max_tokens needs %u KV blocks; the cache has %u", need, s->kv.n_blocks);
        return buf;
    }
    return NULL;
}

static void intake(sl_sched *s, uint64_t now)
{
    for (;;) {
        /* max_seqs may run and max_seqs wait; parked sequences take the
         * third max_seqs of slots (and, past that, room from the waiting) */
        int32_t slot = s->n_live + s->n_waiting < 2 * s->cfg.max_seqs ? free_slot(s) : -1;
        if (slot < 0)
            return;   /* the rest waits in the source's queue (backpressure) */
        seq *q = &s->slots[slot];
        if (s->io.poll(s->io.ctx, &q->req) != SL_OK)
            return;
        char buf[160];
        const char *why = validate(s, &q->req, buf, sizeof buf);
        q->state = SEQ_WAITING;
        q->paused = q->prefill_started = q->dropped = q->deferred = false;
        q->n_gen = q->n_emitted = q->n_cached = q->n_preempted = 0;
        q->n_prefix_hit = q->n_prefix_lookup = 0;
        q->seen_ns = now;
        q->admit_ns = q->prefill_ns = q->first_ns = q->last_ns = 0;
        q->chunk = q->n_echoed = q->echo_rows = 0;
        q->echo_blocked = false;
        s->waiting[s->n_waiting++] = slot;
        if (!why && q->req.grammar_len > 0) {
            if (!s->cfg.grammar_vocab)
                why = "grammar: constrained decoding is not available in this worker";
            else if (sl_constraint_create(s->cfg.grammar_vocab, q->req.grammar, q->req.grammar_len, &q->con, buf,
                                          sizeof buf) < 0)
                why = buf;
        }
        q->req.grammar = NULL;   /* compiled: the text is not read again */
        if (why) {
            q->n_hist = q->req.n_prompt > 0 ? q->req.n_prompt : 0;   /* keeps invariant 5 for the checker */
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, why);
            continue;
        }
        memcpy(q->hist, q->req.prompt, (size_t)q->req.n_prompt * sizeof *q->hist);
        q->n_hist = q->req.n_prompt;
        sl_sched_trace(s, q, "queued", now);
        if (q->req.max_tokens == 0 && q->req.n_prompt == 1)
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_LENGTH, NULL);   /* echo of one token: no record, nothing drawn */
    }
}

/* ------------------------------------------------------------------------ */
/* the batch window (seed CUDA_BATCH_WINDOW_MS)                              */

/* When the worker is idle, returns the time admission may start for the
 * waiting requests; 0 = now. While sequences run, joins never wait: the next
 * step boundary is the earliest moment anyway. */
static uint64_t window_deadline(const sl_sched *s)
{
    if (s->n_live > 0 || s->n_waiting == 0)
        return 0;
    int32_t k = s->n_waiting;
    if (k >= s->cfg.max_seqs)
        return 0;                         /* the batch is full: go */
    uint64_t t0 = s->slots[s->waiting[0]].seen_ns;
    for (int32_t i = 1; i < k; i++)
        if (s->slots[s->waiting[i]].seen_ns < t0)
            t0 = s->slots[s->waiting[i]].seen_ns;
    if (s->cfg.window_ms > 0)
        return t0 + (uint64_t)s->cfg.window_ms * NS_PER_MS;
    if (k > 1)
        return t0 + ADAPTIVE_PEERS_WAIT_NS;
    if (s->last_round_n > 1 || s->last_step_seqs > 1)
        return t0 + ADAPTIVE_RECENT_WAIT_NS;
    return 0;                             /* alone, and recent steps single: never wait */
}

/* ------------------------------------------------------------------------ */
/* one step                                                                  */

/* The KV and prefix-cache figures of the stats, as they are now. */
static void stats_refresh(sl_sched *s)
{
    sl_prefix_cache_stats_get(&s->pc, &s->kv, &s->stats.prefix);
    s->stats.kv_blocks_free = sl_kv_blocks_free_count(&s->kv) + s->stats.prefix.n_evictable;   /* as free */
    s->stats.kv_blocks_touched = sl_kv_blocks_touched(&s->kv);
    s->stats.grammar_mask_ns = sl_constraint_vocab_mask_ns(s->cfg.grammar_vocab);
    s->stats.n_constrained = sl_constraint_vocab_n_created(s->cfg.grammar_vocab);
}

/* Fails every live and waiting request and rebuilds the batch state from
 * nothing, so the next step cannot reuse anything of the failed one. */
static void fail_all(sl_sched *s, const char *why)
{
    while (s->n_live > 0)
        sl_sched_seq_end(s, s->live[0], SL_SCHED_FINISH_ERROR, why);
    while (s->n_waiting > 0)
        sl_sched_seq_end(s, s->waiting[0], SL_SCHED_FINISH_ERROR, why);
    while (s->n_parked > 0)
        sl_sched_seq_end(s, s->parked[0], SL_SCHED_FINISH_ERROR, why);
    sl_prefix_cache_clear(&s->pc, &s->kv);   /* cached blocks are read-only, but trust nothing after a failure */
    assert(sl_kv_blocks_free_count(&s->kv) == s->kv.n_blocks);
    s->last_step_seqs = 0;
    s->last_round_n = 0;
    s->stats.n_step_failures++;
}

/* Delivers the sequence's pending token; then applies the stop rules.
 * Returns true if the sequence is still running afterwards. */
static bool deliver(sl_sched *s, int32_t slot, uint64_t now)
{
    seq *q = &s->slots[slot];
    int32_t tok = q->hist[q->n_hist - 1];
    const sl_logprob_record *rec = q->req.params.n_logprobs >= 0 ? &q->rec : NULL;
    sl_status rc = s->io.emit(s->io.ctx, q->req.id, tok, rec);
    if (rc == SL_AGAIN) {
        q->paused = true;
        if (q->state != SEQ_PARKED)
            sl_sched_seq_park(s, slot);
        return true;
    }
    if (rc == SL_ESTALE) {
        q->dropped = true;
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_CANCELLED, NULL);
        return false;
    }
    if (rc < 0) {
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, "delivering a token failed");
        return false;
    }
    q->paused = false;
    q->n_emitted++;
    q->last_ns = now;
    if (!q->req.ignore_eos && is_eog(s, tok))
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_STOP, NULL);
    else if (q->con && sl_constraint_finished(q->con))
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_STOP, NULL);   /* the grammar is complete: even with ignore_eos */
    else if (q->n_gen >= q->req.max_tokens || q->n_hist >= s->n_ctx)
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_LENGTH, NULL);
    else
        return true;
    return false;
}

/* min_tokens not reached: end-of-generation tokens may not be drawn. */
static bool holds_back_eog(const seq *q)
{
    return !q->req.ignore_eos && q->n_gen < q->req.min_tokens;
}

/* Whether this step's forward ends with a token to draw for q: a decode
 * step, or the last chunk of a prompt (not of a recompute after preemption,
 * which resumes with the token it already has). */
/* The step's grammar masks, into the bitmaps its draws point at (the
 * sl_allow_fill of sl_backend_forward_sample_overlap): on a GPU they are
 * computed while the layers run, so a cold mask no longer adds to the step. */
static void masks_fill(void *ctx)
{
    sl_sched *s = ctx;
    sl_constraint_mask_batch(s->cfg.grammar_vocab, s->mask_con, s->mask_eog, s->n_masks, s->mask_out);
    for (int32_t i = 0; i < s->n_masks; i++)
        assert(s->mask_out[i] == s->reqs[s->mask_entry[i]].allow);
}

static bool draws_this_step(const seq *q)
{
    if (q->state != SEQ_PREFILL)
        return true;
    return q->n_cached + q->chunk >= prefill_target(q) && q->n_gen == 0;
}

/* The draw q asks of this step (sl_backend_forward_sample): from its last
 * row, after the token fed now, seeded by its output count; end-of-generation
 * banned until min_tokens. */
static sl_sample_req sample_req(sl_sched *s, seq *q)
{
    if (q->req.params.n_logprobs >= 0)
        q->rec.token = -1;
    bool ban = holds_back_eog(q);
    return (sl_sample_req){.params = &q->req.params, .history = q->hist, .n_history = q->n_hist,
                           .draw_index = (uint64_t)q->n_gen, .ban = ban ? s->eog : NULL,
                           .n_ban = ban ? s->n_eog : 0, .record = &q->rec};
}

/* Takes the drawn token into the sequence and delivers it. Per-request
 * failures end only this request. */
static void take_sample(sl_sched *s, int32_t slot, int32_t tok, uint64_t now)
{
    seq *q = &s->slots[slot];
    if (tok < 0) {
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, q->con ? sl_constraint_error(q->con) : "sampling failed");
        return;
    }
    if (q->con && sl_constraint_accept(q->con, tok) < 0) {
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, "grammar: the drawn token does not match");
        return;
    }
    if (q->req.params.n_logprobs >= 0 && q->rec.token != tok) {
        sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, "the token's logprob record is missing");
        return;
    }
    q->hist[q->n_hist++] = tok;
    q->n_gen++;
    q->state = SEQ_DECODE;
    if (!q->first_ns) {
        q->first_ns = now;
        sl_sched_trace(s, q, "first_token", now);
    }
    deliver(s, slot, now);
}

sl_status sl_sched_step(sl_sched *s)
{
    uint64_t now = s->io.now_ns(s->io.ctx);

    /* 1. cancels: every request held, live or waiting, frees at once */
    for (int32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].state != SEQ_FREE && s->io.cancelled(s->io.ctx, s->slots[i].req.id))
            sl_sched_seq_end(s, i, SL_SCHED_FINISH_CANCELLED, NULL);

    /* 2. retry the owed emits of parked sequences (oldest parking first) */
    for (int32_t i = 0; i < s->n_parked;) {
        int32_t slot = s->parked[i];
        if (s->slots[slot].paused && !deliver(s, slot, now))
            continue;   /* it ended and left the parked list: same index is the next one */
        i++;
    }

    /* 3. intake */
    intake(s, now);

    /* 4. returns: parked sequences whose owed token went out rejoin first,
     *    oldest parking first (they were admitted before anything waiting
     *    now, and most still hold their blocks). One that must recompute
     *    needs its blocks like an admission, and counts as one for
     *    staggered prefill; nobody overtakes a return that does not fit. */
    int32_t admitted = 0;
    bool return_blocked = false;   /* a return did not fit: no admission overtakes it */
    for (int32_t i = 0; i < s->n_parked && s->n_live < s->cfg.max_seqs;) {
        int32_t slot = s->parked[i];
        seq *q = &s->slots[slot];
        if (q->paused) {
            i++;
            continue;
        }
        if (q->n_cached == 0) {
            if (s->cfg.staggered_prefill && admitted >= 1)
                break;
            if (!sl_sched_seq_take_blocks(s, q)) {
                return_blocked = true;
                break;
            }
            admitted++;
        }
        sl_sched_seq_unpark(s, slot);   /* left the list: same index is the next one */
    }

    /* 5. decodes: each running sequence needs a block for its next position;
     *    when the pool is short, drop a parked sequence's blocks, else
     *    preempt the newest live sequence (perhaps itself), and retry.
     *    Oldest first, so a victim is never in the batch. */
    int32_t n_batch = 0, n_tokens = 0;
    for (int32_t i = 0; i < s->n_live; i++) {
        int32_t slot = s->live[i];
        seq *q = &s->slots[slot];
        q->chunk = 0;
        q->echo_blocked = false;
        if (q->state != SEQ_DECODE)
            continue;
        sl_status rc;
        while ((rc = sl_kv_blocks_reserve(&s->kv, &q->table, (uint32_t)q->n_hist)) == SL_AGAIN) {
            if (sl_prefix_cache_evict(&s->pc, &s->kv, 1) > 0 || sl_sched_park_drop(s))
                continue;   /* unused cached and parked blocks go before any live sequence's */
            int32_t victim = s->live[s->n_live - 1];
            sl_sched_seq_preempt(s, victim);
            if (victim == slot)
                break;
        }
        if (q->state != SEQ_DECODE)
            { i--; continue; }  /* preempted itself: it was the last live entry */
        if (rc < 0) {
            sl_sched_seq_end(s, slot, SL_SCHED_FINISH_ERROR, "KV table capacity exceeded");
            i--;
            continue;
        }
        q->chunk = 1;
        n_tokens++;
    }

    /* 6. admission (joins): waiting requests in order, after the returns,
     *    while slots, blocks and the window allow; staggered prefill admits
     *    one per step. Parked sequences' blocks are dropped to make room;
     *    live ones are never preempted for an admission. A request whose
     *    prefix a live prefill is computing waits for it in its place, and
     *    the ones behind it may go: it waits for blocks to be cached, not
     *    for room. */
    uint64_t deadline = window_deadline(s);
    bool was_idle = s->n_live == 0;
    s->n_deferred_now = 0;
    if (deadline && now < deadline) {
        s->wait_ns = deadline - now;
    } else {
        for (int32_t i = 0; !return_blocked && i < s->n_waiting && s->n_live < s->cfg.max_seqs;) {
            if (s->cfg.staggered_prefill && admitted >= 1)
                break;
            int32_t slot = s->waiting[i];
            seq *q = &s->slots[slot];
            if (sl_sched_defer_leader(s, q) >= 0) {
                if (!q->deferred) {
                    q->deferred = true;
                    s->stats.n_deferrals++;
                    sl_sched_trace(s, q, "deferred", now);
                }
                s->n_deferred_now++;
                i++;
                continue;
            }
            /* blocks for the prefill plus the first decode position */
            if (!sl_sched_seq_take_blocks(s, q))
                break;   /* FIFO: nobody overtakes a request that does not fit */
            sl_sched_list_remove(s->waiting, &s->n_waiting, slot);   /* same index is the next one */
            s->live[s->n_live++] = slot;
            q->state = SEQ_PREFILL;
            q->chunk = 0;
            q->echo_blocked = false;
            if (!q->admit_ns) {
                q->admit_ns = now;
                q->n_prefix_hit = q->n_cached;
                q->n_prefix_lookup = s->pc.enabled && !q->req.echo_logprobs ? q->n_hist : 0;
                if (s->io.admitted)
                    s->io.admitted(s->io.ctx, q->req.id, q->n_prefix_hit);
                sl_sched_trace(s, q, "admitted", now);
            }
            admitted++;
        }
        if (was_idle && admitted > 0)
            s->last_round_n = admitted + s->n_waiting;   /* the round's size: admitted now or next steps */
    }

    /* 7. prefill chunks under what the budget leaves, oldest first; an echo
     *    request's prompt rows go to the echo call instead (§5b) */
    int32_t echo_rows = 0, n_echo = 0;
    for (int32_t i = 0; i < s->n_live && n_tokens < s->cfg.token_budget; i++) {
        seq *q = &s->slots[s->live[i]];
        if (q->state != SEQ_PREFILL)
            continue;
        if (echo_phase(q) && q->n_cached == q->n_echoed) {
            int32_t n = sl_sched_echo_plan(s, q, s->cfg.token_budget - n_tokens, &echo_rows);
            n_echo += n > 0;
            n_tokens += n;
            continue;
        }
        int32_t n = prefill_stop(q) - q->n_cached;
        if (n > s->cfg.prefill_chunk)
            n = s->cfg.prefill_chunk;
        if (n > s->cfg.token_budget - n_tokens)
            n = s->cfg.token_budget - n_tokens;
        q->chunk = n;
        n_tokens += n;
    }

    /* in-flight is published after joins and before the step */
    s->stats.in_flight = s->n_live;
    if (s->n_live > s->stats.peak_in_flight)
        s->stats.peak_in_flight = s->n_live;
    s->stats.n_waiting = s->n_waiting;
    s->stats.n_parked = s->n_parked;
    s->stats.n_deferred = s->n_deferred_now;

    for (int32_t i = 0; i < s->n_live; i++) {
        int32_t slot = s->live[i];
        seq *q = &s->slots[slot];
        if (!q->chunk)
            continue;
        s->batch[n_batch] = (sl_batch_seq){
            .tokens = q->hist + q->n_cached,
            .n_tokens = q->chunk,
            .pos = q->n_cached,
            .blocks = q->table.blocks,
            .n_blocks = (int32_t)q->table.n_used,
            .logits_all = false,
            .prompt = q->state == SEQ_PREFILL,
        };
        s->batch_slot[n_batch++] = slot;
    }
    s->planned = true;   /* until the forward returns: a step_begin hook may check invariant 12 */
    assert(sl_sched_check(s));
    if (n_batch == 0 && n_echo == 0) {
        s->planned = false;
        if (!(deadline && now < deadline))
            s->wait_ns = s->n_live > 0 || s->n_parked > 0 ? PAUSED_RETRY_NS : IDLE_WAIT_NS;
        stats_refresh(s);
        return SL_AGAIN;
    }

    /* 8. one forward */
    if (s->io.step_begin)
        s->io.step_begin(s->io.ctx, n_batch + n_echo, n_tokens);
    uint64_t t0 = s->io.now_ns(s->io.ctx);
    for (int32_t b = 0; b < n_batch + s->n_live; b++) {   /* the batch, then echo rows */
        seq *q = &s->slots[b < n_batch ? s->batch_slot[b] : s->live[b - n_batch]];
        if (q->state == SEQ_PREFILL && !q->prefill_started && (b < n_batch || q->echo_rows > 0)) {
            q->prefill_started = true;
            q->prefill_ns = t0;
            sl_sched_trace(s, q, "first_prefill_chunk", t0);
        }
    }
    int32_t n_masks = 0;
    for (int32_t b = 0; b < n_batch; b++) {
        seq *q = &s->slots[s->batch_slot[b]];
        s->reqs[b] = draws_this_step(q) ? sample_req(s, q) : (sl_sample_req){0};
        if (s->reqs[b].params && q->con) {
            s->mask_con[n_masks] = q->con;
            s->mask_eog[n_masks] = !q->req.ignore_eos;
            s->mask_entry[n_masks++] = b;
        }
    }
    /* the grammar masks: each draw points at its constraint's bitmap now,
     * and the backend has them written (in parallel) while its layers run */
    for (int32_t i = 0; i < n_masks; i++)
        s->reqs[s->mask_entry[i]].allow = sl_constraint_allow(s->mask_con[i]);
    s->n_masks = n_masks;
    /* the echo call first (its records are the earliest entries of its requests), then the step's */
    int32_t echo_rc = sl_sched_echo_run(s);
    for (int32_t b = 0; echo_rc > 0 && b < s->n_echo_batch; b++) {   /* what the echo call ended */
        const seq *q = &s->slots[s->echo_slot[b]];
        if (q->echo_end >= 0)
            sl_sched_seq_end(s, s->echo_slot[b], q->echo_end, q->echo_error);
    }
    sl_allow_fill fill = {masks_fill, s};
    sl_status rc = echo_rc < 0    ? (sl_status)echo_rc
                   : n_batch == 0 ? SL_OK
                   : n_masks > 0  ? sl_backend_forward_sample_overlap(s->be, s->batch, n_batch, s->reqs, s->drawn, &fill)
                                  : sl_backend_forward_sample(s->be, s->batch, n_batch, s->reqs, s->drawn);
    s->planned = false;
    uint64_t t1 = s->io.now_ns(s->io.ctx);
    s->stats.steps++;
    s->stats.step_seqs = n_batch + n_echo;
    s->stats.step_tokens = n_tokens;
    s->stats.step_ns = t1 - t0;
    if (rc < 0) {
        fail_all(s, rc == SL_EBACKEND ? "the backend failed a step"
                    : rc == SL_ENOMEM ? "the backend is out of memory for its sampling rows"
                                      : "the backend refused the batch");
    } else {
        /* 9. take the drawn tokens, emit, stop; in batch order. */
        s->last_step_seqs = n_batch;
        for (int32_t b = 0; b < n_batch; b++) {
            seq *q = &s->slots[s->batch_slot[b]];
            q->n_cached += q->chunk;
            q->chunk = 0;
            sl_prefix_cache_insert(&s->pc, &s->kv, &q->table, q->hist, (uint32_t)q->n_cached, &q->chain);
            if (q->state == SEQ_PREFILL && q->n_cached >= prefill_target(q) && q->n_gen > 0)
                q->state = SEQ_DECODE;   /* recompute done: decode resumes with the last token */
        }
        for (int32_t b = 0; b < n_batch; b++)
            if (s->reqs[b].params)
                take_sample(s, s->batch_slot[b], s->drawn[b], t1);
    }
    assert(sl_sched_check(s));
    stats_refresh(s);
    s->io.step_done(s->io.ctx, &s->stats);
    return SL_OK;
}

void sl_sched_step_paused(sl_sched *s)
{
    uint64_t now = s->io.now_ns(s->io.ctx);
    for (int32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].state != SEQ_FREE && s->io.cancelled(s->io.ctx, s->slots[i].req.id))
            sl_sched_seq_end(s, i, SL_SCHED_FINISH_CANCELLED, NULL);
    intake(s, now);
    s->stats.in_flight = s->n_live;
    s->stats.n_waiting = s->n_waiting;
    s->stats.n_parked = s->n_parked;
    stats_refresh(s);
    assert(sl_sched_check(s));
}

uint64_t sl_sched_wait_ns(const sl_sched *s)
{
    return s->wait_ns;
}

void sl_sched_run(sl_sched *s, volatile int *stop)
{
    while (!*stop)
        if (sl_sched_step(s) == SL_AGAIN && !*stop)
            s->io.wait(s->io.ctx, s->wait_ns);
}

/* ------------------------------------------------------------------------ */
/* stats and effective-config                                               */

void sl_sched_stats_get(const sl_sched *s, sl_sched_stats *out)
{
    *out = s->stats;
}

void sl_sched_snapshot_fill(const sl_sched *s, sl_sched_snapshot *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->kind, sizeof out->kind, "continuous");
    if (s->be->model)
        snprintf(out->model, sizeof out->model, "%s", s->be->model->name);
    if (s->be->ops && s->be->ops->name)
        snprintf(out->backend, sizeof out->backend, "%s", s->be->ops->name);
    const sl_sched_config *c = &s->cfg;
    out->max_in_flight = (sl_sched_knob){c->max_seqs, c->source.max_seqs, 0};
    out->window_ms = (sl_sched_knob){c->window_ms, c->source.window_ms, 0};
    out->prefill_chunk_size = (sl_sched_knob){c->prefill_chunk, c->source.prefill_chunk, 0};
    out->token_budget = (sl_sched_knob){c->token_budget, c->source.token_budget, 0};
    out->staggered_prefill = (sl_sched_knob){c->staggered_prefill, c->source.staggered_prefill, 0};
    out->ttft_trace = (sl_sched_knob){c->ttft_trace, c->source.ttft_trace, 0};
    out->kv_block_size = (sl_sched_knob){c->kv_block_size, c->source.kv_block_size, 0};
    out->kv_blocks = (sl_sched_knob){c->n_kv_blocks, c->source.n_kv_blocks, 0};
    out->prefix_cache = (sl_sched_knob){c->prefix_cache, c->source.prefix_cache, 0};
    /* every live sequence holds at least one block */
    if ((uint32_t)c->max_seqs <= c->n_kv_blocks) {
        out->slots_admitted = c->max_seqs;
        snprintf(out->admission_ceiling_reason, sizeof out->admission_ceiling_reason, "max_seqs");
    } else {
        out->slots_admitted = (int32_t)c->n_kv_blocks;
        snprintf(out->admission_ceiling_reason, sizeof out->admission_ceiling_reason,
                 "kv_blocks (%u blocks of %u positions)", c->n_kv_blocks, c->kv_block_size);
    }
    out->in_flight_now = s->stats.in_flight;
    out->peak_in_flight = s->stats.peak_in_flight;
    out->queue_capacity = c->max_seqs;   /* the third max_seqs of slots is for parked sequences */
    out->n_vocab = s->n_vocab;
    out->n_ctx = s->n_ctx;
    out->kv_bytes = s->be->kv_bytes;
}
