/* shared/mailbox.c: request submission, the mailbox state machine and the token
 * rings: the hot path between front ends and the worker.
 * Runs in: front ends (submit, read, cancel, release) and the worker (wait, pop,
 * push, finish, wakeups).
 * Trade-off: one single-producer ring per front-end slot, which the worker polls,
 * instead of one multi-producer ring. A front end is one event loop, so each ring
 * has exactly one writer and publishing is one release store of its tail: a
 * producer that dies at any instruction has either published a whole entry or
 * nothing, and there is no claimed-but-unpublished slot for anyone to reclaim.
 * The price is that the worker looks at n_slots tails per pop (a few cache lines;
 * n_slots is the core count), and fairness across front ends is round robin.
 * Invariants and the state diagram are in docs/SHARED_MEMORY.md. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shared/shm_impl.h"

static inline int state_terminal(uint32_t s)
{
    return s == SL_MAILBOX_STATE_FINISHED || s == SL_MAILBOX_STATE_FAILED || s == SL_MAILBOX_STATE_CANCELLED;
}

/* ---- wakeups ----------------------------------------------------------------------- */

void sl_shm_eventfd_signal(int fd)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(fd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
}

/* Shared (not FUTEX_PRIVATE) futex ops: the word is in a segment several
 * processes map. */
static long futex_wake(_Atomic uint32_t *addr, int n)
{
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, n, NULL, NULL, 0);
}

static long futex_wait_until(_Atomic uint32_t *addr, uint32_t expected, const struct timespec *abs_monotonic)
{
    /* FUTEX_WAIT_BITSET takes an absolute deadline on CLOCK_MONOTONIC (no
     * FUTEX_CLOCK_REALTIME), so spurious returns need no deadline recomputation. */
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_BITSET, expected, abs_monotonic, NULL,
                   FUTEX_BITSET_MATCH_ANY);
}

static void doorbell_ring(sl_shm_t *h)
{
    sl_header_shm *hdr = h->hdr;
    /* Paired with sl_shm_worker_wait: the worker stores worker_sleeping, then loads
     * the doorbell, then the tails; we store a tail, bump the doorbell, then load
     * worker_sleeping. In the seq_cst order one of us sees the other, so either
     * the worker sees our entry, or its futex_wait finds the word changed, or we
     * see it sleeping and wake it. A producer dying here leaves the doorbell one
     * higher: harmless, it is not a count. */
    atomic_fetch_add_explicit(&hdr->doorbell, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&hdr->worker_sleeping, memory_order_seq_cst))
        futex_wake(&hdr->doorbell, 1);
}

static int rings_nonempty(const sl_shm_t *w)
{
    for (uint32_t s = 0; s < w->limits.n_slots; s++)
        if (atomic_load_explicit(&w->slots[s].tail, memory_order_acquire) !=
            atomic_load_explicit(&w->slots[s].head, memory_order_relaxed))
            return 1;
    return 0;
}

sl_status sl_shm_worker_wait(sl_shm_t *w, uint64_t timeout_ns)
{
    sl_header_shm *hdr = w->hdr;
    atomic_store_explicit(&hdr->worker_sleeping, 1, memory_order_seq_cst);
    uint32_t seen = atomic_load_explicit(&hdr->doorbell, memory_order_seq_cst);
    if (rings_nonempty(w)) {
        atomic_store_explicit(&hdr->worker_sleeping, 0, memory_order_relaxed);
        return SL_OK;
    }
    uint64_t deadline = sl_shm_now_ns() + timeout_ns;
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ull), .tv_nsec = (long)(deadline % 1000000000ull)};
    sl_status rc = SL_OK;
    if (futex_wait_until(&hdr->doorbell, seen, &ts) < 0 && errno == ETIMEDOUT)
        rc = SL_AGAIN;
    atomic_store_explicit(&hdr->worker_sleeping, 0, memory_order_relaxed);
    return rc;
}

/* ---- prompt arena ------------------------------------------------------------------ */

void sl_shm_blocks_free_table(sl_shm_t *h, uint32_t i, uint32_t incarnation)
{
    struct sl_mailbox_shm *mb = sl_shm_mb(h, i);
    uint64_t owner = sl_ticket_word(i + 1, incarnation);
    uint32_t n = mb->n_blocks < h->blocks_per_mailbox ? mb->n_blocks : h->blocks_per_mailbox;
    const uint32_t *table = &h->block_tables[(size_t)i * h->blocks_per_mailbox];
    for (uint32_t k = 0; k < n; k++) {
        uint32_t b = table[k];
        if (b >= h->limits.prompt_arena_blocks)
            continue; /* never followed: a corrupted table entry */
        uint64_t expect = owner;
        atomic_compare_exchange_strong_explicit(&h->block_owners[b], &expect, 0, memory_order_release,
                                                memory_order_relaxed);
    }
}

/* Takes nb free blocks for mailbox i, recording each in its table as it goes.
 * Returns the number taken (< nb when the arena ran short). A death between a
 * block's CAS and its table entry leaves a block owned by a ticket that
 * sl_shm_recover_frontend_death's sweep frees. */
static uint32_t blocks_take(sl_shm_t *h, uint32_t i, uint32_t incarnation, uint32_t nb)
{
    struct sl_mailbox_shm *mb = sl_shm_mb(h, i);
    uint32_t *table = &h->block_tables[(size_t)i * h->blocks_per_mailbox];
    uint64_t owner = sl_ticket_word(i + 1, incarnation);
    uint32_t n_blocks = h->limits.prompt_arena_blocks;
    uint32_t start = atomic_fetch_add_explicit(&h->hdr->block_hint, nb, memory_order_relaxed) % n_blocks;
    uint32_t taken = 0;
    mb->n_blocks = 0;
    for (uint32_t k = 0; k < n_blocks && taken < nb; k++) {
        uint32_t b = start + k < n_blocks ? start + k : start + k - n_blocks;
        uint64_t expect = 0;
        if (atomic_load_explicit(&h->block_owners[b], memory_order_relaxed) != 0)
            continue;
        if (!atomic_compare_exchange_strong_explicit(&h->block_owners[b], &expect, owner, memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue;
        SL_CRASH_POINT(SL_CRASH_SUBMIT_BLOCK_TAKEN);
        table[taken++] = b;
        mb->n_blocks = taken;
    }
    return taken;
}

/* ---- front end ---------------------------------------------------------------------- */

static int frontend_current(const sl_shm_t *fe)
{
    return fe->role == SL_SHM_ROLE_FRONTEND &&
           atomic_load_explicit(&fe->slots[fe->slot].generation, memory_order_acquire) == fe->slot_generation;
}

/* Loads mailbox t's word for its owning front end: SL_ERANGE, or SL_ESTALE when
 * the mailbox was recycled, freed, or this front end's slot was reclaimed. */
static sl_status frontend_word(const sl_shm_t *fe, sl_shm_ticket t, uint64_t *w)
{
    if (t.index >= fe->limits.n_mailboxes)
        return SL_ERANGE;
    if (!frontend_current(fe))
        return SL_ESTALE;
    *w = atomic_load_explicit(&sl_shm_mb(fe, t.index)->word, memory_order_acquire);
    if (sl_word_incarnation(*w) != t.incarnation || sl_word_owner(*w) != fe->slot ||
        sl_word_state(*w) == SL_MAILBOX_STATE_FREE)
        return SL_ESTALE;
    return SL_OK;
}

/* Copies a grammar text into mailbox i's slice with pwrite, not a store: the
 * region is not reserved (shm_layout.h), and a store into a page that a full
 * /dev/shm cannot back is SIGBUS where pwrite answers ENOSPC. Returns SL_OK or
 * SL_ENOMEM (the errno logged). */
static sl_status grammar_write(sl_shm_t *fe, uint32_t i, const char *text, uint32_t len)
{
    if (fe->grammar == NULL || fe->fd < 0)
        return SL_ENOMEM;
    off_t at = (off_t)(fe->off_grammar + (uint64_t)i * fe->limits.grammar_bytes_max);
    for (uint32_t done = 0; done < len;) {
        ssize_t n = pwrite(fe->fd, text + done, len - done, at + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "sluice: pwrite(grammar text, %u bytes): %s\n", len, n < 0 ? strerror(errno) : "short write");
            return SL_ENOMEM;
        }
        done += (uint32_t)n;
    }
    return SL_OK;
}

sl_status sl_shm_submit(sl_shm_t *fe, const sl_shm_request *req, sl_shm_ticket *ticket)
{
    ticket->index = UINT32_MAX;
    ticket->incarnation = 0;
    if (fe->role != SL_SHM_ROLE_FRONTEND || req->n_prompt == 0 || req->n_prompt > fe->limits.prompt_tokens_max ||
        req->prompt == NULL)
        return SL_EINVAL;
    if (req->grammar_len > 0 && (req->grammar == NULL || req->grammar_len > fe->limits.grammar_bytes_max ||
                                 memchr(req->grammar, 0, req->grammar_len) != NULL))
        return SL_EINVAL;
    if (!frontend_current(fe))
        return SL_ESTALE;
    sl_slot_shm *slot = &fe->slots[fe->slot];
    /* the ring is a power of two; the queue depth the user set may be less */
    uint32_t ring_n = fe->limits.submit_ring_entries;
    uint32_t depth = fe->limits.submit_queue_depth ? fe->limits.submit_queue_depth : ring_n;
    uint64_t tail = atomic_load_explicit(&slot->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&slot->head, memory_order_acquire) >= depth) {
        sl_shm_counter_add(fe, SL_COUNTER_REQUESTS_REJECTED_FULL, 1);
        return SL_AGAIN;
    }

    /* FREE -> CLAIMED, with this slot as owner in the same word, so the owner of a
     * claimed mailbox is never unknown, whatever instruction we die at. */
    uint32_t n = fe->limits.n_mailboxes;
    uint32_t start = atomic_fetch_add_explicit(&fe->hdr->claim_hint, 1, memory_order_relaxed) % n;
    uint32_t i = UINT32_MAX, inc = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t j = start + k < n ? start + k : start + k - n;
        _Atomic uint64_t *word = &sl_shm_mb(fe, j)->word;
        uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
        if (sl_word_state(w) != SL_MAILBOX_STATE_FREE)
            continue;
        uint64_t nw = sl_word_make(SL_MAILBOX_STATE_CLAIMED, fe->slot, sl_word_incarnation(w) + 1);
        if (atomic_compare_exchange_strong_explicit(word, &w, nw, memory_order_acq_rel, memory_order_relaxed)) {
            i = j;
            inc = sl_word_incarnation(nw);
            break;
        }
    }
    if (i == UINT32_MAX) {
        sl_shm_counter_add(fe, SL_COUNTER_REQUESTS_REJECTED_FULL, 1);
        return SL_AGAIN;
    }
    SL_CRASH_POINT(SL_CRASH_SUBMIT_CLAIMED);
    struct sl_mailbox_shm *mb = sl_shm_mb(fe, i);
    mb->owner_generation = fe->slot_generation;
    atomic_store_explicit(&mb->cancel, 0, memory_order_relaxed);

    uint32_t bt = fe->limits.prompt_block_tokens;
    uint32_t nb = (req->n_prompt + bt - 1) / bt;
    if (blocks_take(fe, i, inc, nb) < nb) {
        sl_shm_blocks_free_table(fe, i, inc);
        uint64_t w = sl_word_make(SL_MAILBOX_STATE_CLAIMED, fe->slot, inc);
        atomic_compare_exchange_strong_explicit(&mb->word, &w, sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, inc),
                                                memory_order_release, memory_order_relaxed);
        sl_shm_counter_add(fe, SL_COUNTER_REQUESTS_REJECTED_FULL, 1);
        return SL_AGAIN;
    }
    SL_CRASH_POINT(SL_CRASH_SUBMIT_BLOCKS_DONE);
    if (req->grammar_len > 0 && grammar_write(fe, i, req->grammar, req->grammar_len) < 0) {
        sl_shm_blocks_free_table(fe, i, inc);
        uint64_t w = sl_word_make(SL_MAILBOX_STATE_CLAIMED, fe->slot, inc);
        atomic_compare_exchange_strong_explicit(&mb->word, &w, sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, inc),
                                                memory_order_release, memory_order_relaxed);
        return SL_ENOMEM;
    }

    const uint32_t *table = &fe->block_tables[(size_t)i * fe->blocks_per_mailbox];
    for (uint32_t k = 0; k < nb; k++) {
        uint32_t len = req->n_prompt - k * bt < bt ? req->n_prompt - k * bt : bt;
        memcpy(&fe->arena[(size_t)table[k] * bt], req->prompt + (size_t)k * bt, (size_t)len * sizeof(int32_t));
    }
    mb->params = req->params;
    mb->max_tokens = req->max_tokens;
    mb->min_tokens = req->min_tokens;
    mb->ignore_eos = req->ignore_eos;
    mb->request_id = req->request_id;
    mb->n_prompt = req->n_prompt;
    mb->grammar_len = req->grammar_len;
    mb->echo_logprobs = req->echo_logprobs ? 1u : 0u;
    mb->finish_reason = SL_FINISH_REASON_NONE;
    mb->worker_generation = 0;
    mb->error[0] = 0;
    atomic_store_explicit(&mb->n_cached_tokens, 0, memory_order_relaxed);
    memset(&mb->timings, 0, sizeof(mb->timings));
    mb->timings.queued_ns = sl_shm_now_ns();
    mb->timings.n_prompt_tokens = req->n_prompt;
    atomic_store_explicit(&mb->tok_tail, 0, memory_order_relaxed);
    atomic_store_explicit(&mb->tok_head, 0, memory_order_relaxed);
    SL_CRASH_POINT(SL_CRASH_SUBMIT_WRITTEN);

    atomic_store_explicit(&fe->ring[(size_t)fe->slot * ring_n + (tail & (ring_n - 1))], sl_ticket_word(i, inc),
                          memory_order_relaxed);
    SL_CRASH_POINT(SL_CRASH_SUBMIT_ENTRY);
    uint64_t w = sl_word_make(SL_MAILBOX_STATE_CLAIMED, fe->slot, inc);
    if (!atomic_compare_exchange_strong_explicit(&mb->word, &w, sl_word_make(SL_MAILBOX_STATE_SUBMITTED, fe->slot, inc),
                                                 memory_order_release, memory_order_relaxed))
        return SL_ESTALE; /* the master reclaimed our slot: we are a ghost */
    SL_CRASH_POINT(SL_CRASH_SUBMIT_STATE);
    atomic_store_explicit(&slot->tail, tail + 1, memory_order_seq_cst);
    SL_CRASH_POINT(SL_CRASH_SUBMIT_PUBLISHED);
    doorbell_ring(fe);
    sl_shm_counter_add(fe, SL_COUNTER_REQUESTS_SUBMITTED, 1);
    sl_shm_counter_add(fe, SL_COUNTER_PROMPT_TOKENS, req->n_prompt);
    ticket->index = i;
    ticket->incarnation = inc;
    return SL_OK;
}

sl_status sl_shm_read_tokens(sl_shm_t *fe, sl_shm_ticket t, int32_t *tokens, sl_logprob_record *records,
                             uint32_t n_max, uint32_t *n_read, sl_mailbox_state *state)
{
    uint64_t w;
    *n_read = 0;
    sl_status rc = frontend_word(fe, t, &w);
    if (rc < 0)
        return rc;
    *state = (sl_mailbox_state)sl_word_state(w);
    struct sl_mailbox_shm *mb = sl_shm_mb(fe, t.index);
    uint32_t ring_n = fe->limits.token_ring_entries;
    uint64_t head = atomic_load_explicit(&mb->tok_head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&mb->tok_tail, memory_order_acquire);
    uint64_t avail = tail - head;
    if (avail > ring_n)
        avail = ring_n; /* only a broken worker could do this; never read past the ring */
    uint32_t n = avail < n_max ? (uint32_t)avail : n_max;
    const int32_t *ring = &fe->tokens[(size_t)t.index * ring_n];
    for (uint32_t k = 0; k < n; k++)
        tokens[k] = ring[(head + k) & (ring_n - 1)];
    if (records && fe->records) {
        const sl_logprob_record *rr = &fe->records[(size_t)t.index * ring_n];
        for (uint32_t k = 0; k < n; k++)
            records[k] = rr[(head + k) & (ring_n - 1)];
    }
    SL_CRASH_POINT(SL_CRASH_READ_COPIED);
    atomic_store_explicit(&mb->tok_head, head + n, memory_order_release);
    *n_read = n;
    return SL_OK;
}

sl_status sl_shm_cancel(sl_shm_t *fe, sl_shm_ticket t)
{
    uint64_t w;
    sl_status rc = frontend_word(fe, t, &w);
    if (rc < 0)
        return rc;
    struct sl_mailbox_shm *mb = sl_shm_mb(fe, t.index);
    atomic_store_explicit(&mb->cancel, 1, memory_order_release);
    SL_CRASH_POINT(SL_CRASH_CANCEL_FLAG);
    if (sl_word_state(w) == SL_MAILBOX_STATE_SUBMITTED) {
        /* Races the worker's pop on the same word: exactly one CAS wins. If we win,
         * the ring entry stays behind and the worker skips it as stale. */
        uint64_t nw = sl_word_make(SL_MAILBOX_STATE_CANCELLED, fe->slot, t.incarnation);
        if (atomic_compare_exchange_strong_explicit(&mb->word, &w, nw, memory_order_acq_rel, memory_order_acquire)) {
            mb->finish_reason = SL_FINISH_REASON_CANCELLED;
            sl_shm_counter_add(fe, SL_COUNTER_REQUESTS_CANCELLED, 1);
        }
    }
    return SL_OK;
}

sl_status sl_shm_result(sl_shm_t *h, sl_shm_ticket t, sl_shm_result_info *out)
{
    memset(out, 0, sizeof(*out));
    if (t.index >= h->limits.n_mailboxes)
        return SL_ERANGE;
    struct sl_mailbox_shm *mb = sl_shm_mb(h, t.index);
    uint64_t w = atomic_load_explicit(&mb->word, memory_order_acquire);
    if (sl_word_incarnation(w) != t.incarnation)
        return SL_ESTALE;
    out->state = (sl_mailbox_state)sl_word_state(w);
    /* set at admission: a request cut short by a stop string reads it while RUNNING */
    out->cached_tokens = atomic_load_explicit(&mb->n_cached_tokens, memory_order_relaxed);
    if (h->role == SL_SHM_ROLE_WORKER && out->state == SL_MAILBOX_STATE_RUNNING) {
        out->timings = mb->timings; /* our own writes: queue time for the histograms */
        return SL_OK;
    }
    if (!state_terminal(out->state))
        return SL_OK; /* results are written by the worker until it lets go */
    out->finish_reason = (sl_finish_reason)mb->finish_reason;
    out->timings = mb->timings;
    memcpy(out->error, mb->error, SL_SHM_ERROR_LEN);
    out->error[SL_SHM_ERROR_LEN - 1] = 0;
    return SL_OK;
}

sl_status sl_shm_release(sl_shm_t *fe, sl_shm_ticket t)
{
    uint64_t w;
    sl_status rc = frontend_word(fe, t, &w);
    if (rc < 0)
        return rc;
    if (!state_terminal(sl_word_state(w)))
        return SL_ESTATE;
    /* Blocks first, then the word: a death in between leaves a terminal mailbox
     * with fewer blocks, which the slot's recovery finishes (freeing is idempotent). */
    sl_shm_blocks_free_table(fe, t.index, t.incarnation);
    SL_CRASH_POINT(SL_CRASH_RELEASE_BLOCKS);
    uint64_t nw = sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, t.incarnation);
    if (!atomic_compare_exchange_strong_explicit(&sl_shm_mb(fe, t.index)->word, &w, nw, memory_order_release,
                                                 memory_order_relaxed))
        return SL_ESTALE;
    return SL_OK;
}

/* ---- worker -------------------------------------------------------------------------- */

static int worker_current(const sl_shm_t *w)
{
    return w->role == SL_SHM_ROLE_WORKER &&
           atomic_load_explicit(&w->hdr->worker_generation, memory_order_acquire) == w->worker_generation;
}

/* Loads mailbox t's word for the worker: SL_ERANGE, SL_ESTALE (recycled, or this
 * worker's generation is over), SL_ESTATE (not RUNNING). */
static sl_status worker_word(const sl_shm_t *w, sl_shm_ticket t, uint64_t *wd)
{
    if (t.index >= w->limits.n_mailboxes)
        return SL_ERANGE;
    if (!worker_current(w))
        return SL_ESTALE;
    *wd = atomic_load_explicit(&sl_shm_mb(w, t.index)->word, memory_order_acquire);
    if (sl_word_incarnation(*wd) != t.incarnation || sl_word_state(*wd) == SL_MAILBOX_STATE_FREE)
        return SL_ESTALE; /* recycled, or released and not yet recycled */
    if (sl_word_state(*wd) != SL_MAILBOX_STATE_RUNNING)
        return SL_ESTATE;
    return SL_OK;
}

static inline void mark_dirty(sl_shm_t *w, uint32_t owner)
{
    if (owner < w->limits.n_slots)
        w->dirty[owner / 64] |= 1ull << (owner % 64);
}

sl_status sl_shm_worker_pop(sl_shm_t *w, sl_shm_ticket *ticket)
{
    ticket->index = UINT32_MAX;
    ticket->incarnation = 0;
    if (!worker_current(w))
        return SL_ESTALE;
    uint32_t ns = w->limits.n_slots, ring_n = w->limits.submit_ring_entries;
    for (uint32_t k = 0; k < ns; k++) {
        uint32_t s = (w->pop_cursor + k) % ns;
        sl_slot_shm *slot = &w->slots[s];
        uint64_t head = atomic_load_explicit(&slot->head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&slot->tail, memory_order_acquire);
        /* tail - head never exceeds ring_n unless the words were corrupted (no
         * death leaves that): the entries before tail - ring_n were overwritten
         * anyway, so start there instead of skipping up to 2^64 dead entries
         * (found by fuzz_shm: a hang). */
        if (tail - head > ring_n) {
            head = tail - ring_n;
            atomic_store_explicit(&slot->head, head, memory_order_release);
        }
        while (head != tail) {
            uint64_t e = atomic_load_explicit(&w->ring[(size_t)s * ring_n + (head & (ring_n - 1))], memory_order_relaxed);
            uint32_t i = (uint32_t)e, inc = (uint32_t)(e >> 32);
            SL_CRASH_POINT(SL_CRASH_POP_READ);
            if (i < w->limits.n_mailboxes) {
                struct sl_mailbox_shm *mb = sl_shm_mb(w, i);
                uint64_t wd = atomic_load_explicit(&mb->word, memory_order_acquire);
                if (sl_word_state(wd) == SL_MAILBOX_STATE_SUBMITTED && sl_word_incarnation(wd) == inc) {
                    uint64_t nw = sl_word_make(SL_MAILBOX_STATE_RUNNING, sl_word_owner(wd), inc);
                    if (!atomic_compare_exchange_strong_explicit(&mb->word, &wd, nw, memory_order_acq_rel,
                                                                 memory_order_acquire))
                        continue; /* cancelled or reclaimed meanwhile: look at the entry again */
                    /* RUNNING before the head moves: a death here leaves a RUNNING
                     * mailbox (failed by recovery) and an entry the next worker skips. */
                    SL_CRASH_POINT(SL_CRASH_POP_TAKEN);
                    mb->worker_generation = w->worker_generation;
                    mb->timings.admitted_ns = sl_shm_now_ns();
                    atomic_store_explicit(&slot->head, head + 1, memory_order_release);
                    w->pop_cursor = s + 1;
                    ticket->index = i;
                    ticket->incarnation = inc;
                    return SL_OK;
                }
            }
            /* A stale entry: its mailbox was cancelled, reclaimed or recycled, or
             * the index is out of range. Skip it; never follow it. */
            atomic_fetch_add_explicit(&w->hdr->counters[SL_COUNTER_STALE_ENTRIES_SKIPPED], 1, memory_order_relaxed);
            head++;
            atomic_store_explicit(&slot->head, head, memory_order_release);
        }
    }
    w->pop_cursor++;
    return SL_AGAIN;
}

const sl_mailbox_shm *sl_shm_mailbox(const sl_shm_t *h, sl_shm_ticket t)
{
    if (t.index >= h->limits.n_mailboxes)
        return NULL;
    const struct sl_mailbox_shm *mb = sl_shm_mb(h, t.index);
    if (sl_word_incarnation(atomic_load_explicit(&mb->word, memory_order_acquire)) != t.incarnation)
        return NULL;
    return mb;
}

sl_status sl_shm_request_get(const sl_shm_t *h, sl_shm_ticket t, sl_sampling_params *params, int32_t *max_tokens,
                             int32_t *min_tokens, uint32_t *ignore_eos, uint64_t *request_id, uint32_t *n_prompt)
{
    if (t.index >= h->limits.n_mailboxes)
        return SL_ERANGE;
    const struct sl_mailbox_shm *mb = sl_shm_mailbox(h, t);
    if (mb == NULL)
        return SL_ESTALE;
    if (params)
        *params = mb->params;
    if (max_tokens)
        *max_tokens = mb->max_tokens;
    if (min_tokens)
        *min_tokens = mb->min_tokens;
    if (ignore_eos)
        *ignore_eos = mb->ignore_eos;
    if (request_id)
        *request_id = mb->request_id;
    if (n_prompt)
        *n_prompt = mb->n_prompt;
    return SL_OK;
}

uint32_t sl_shm_request_echo(const sl_shm_t *h, sl_shm_ticket t)
{
    if (t.index >= h->limits.n_mailboxes)
        return 0;
    const struct sl_mailbox_shm *mb = sl_shm_mailbox(h, t);
    return mb != NULL && mb->echo_logprobs ? 1u : 0u;
}

sl_status sl_shm_grammar_get(const sl_shm_t *w, sl_shm_ticket t, const char **text, uint32_t *len)
{
    *text = NULL;
    *len = 0;
    if (t.index >= w->limits.n_mailboxes)
        return SL_ERANGE;
    const struct sl_mailbox_shm *mb = sl_shm_mailbox(w, t);
    if (mb == NULL)
        return SL_ESTALE;
    if (sl_word_state(atomic_load_explicit(&mb->word, memory_order_acquire)) != SL_MAILBOX_STATE_RUNNING)
        return SL_ESTATE;
    uint32_t n = mb->grammar_len;
    if (n == 0)
        return SL_OK;
    if (n > w->limits.grammar_bytes_max || w->grammar == NULL)
        return SL_ERANGE;
    *text = w->grammar + (size_t)t.index * w->limits.grammar_bytes_max;
    *len = n;
    return SL_OK;
}

sl_status sl_shm_prompt_copy(const sl_shm_t *h, sl_shm_ticket t, uint32_t from, uint32_t n, int32_t *dst)
{
    if (t.index >= h->limits.n_mailboxes)
        return SL_ERANGE;
    const struct sl_mailbox_shm *mb = sl_shm_mailbox(h, t);
    if (mb == NULL)
        return SL_ESTALE;
    uint32_t bt = h->limits.prompt_block_tokens;
    if ((uint64_t)from + n > mb->n_prompt || mb->n_prompt > h->limits.prompt_tokens_max ||
        (mb->n_prompt + bt - 1) / bt > mb->n_blocks)
        return SL_ERANGE;
    const uint32_t *table = &h->block_tables[(size_t)t.index * h->blocks_per_mailbox];
    for (uint32_t pos = from; pos < from + n;) {
        uint32_t b = table[pos / bt];
        if (b >= h->limits.prompt_arena_blocks)
            return SL_ERANGE;
        uint32_t off = pos % bt, len = bt - off;
        if (len > from + n - pos)
            len = from + n - pos;
        memcpy(dst + (pos - from), &h->arena[(size_t)b * bt + off], (size_t)len * sizeof(int32_t));
        pos += len;
    }
    return SL_OK;
}

/* Token entries of the mailbox that are its prompt's own records (echo), not
 * generated tokens. */
static uint64_t echo_entries(const struct sl_mailbox_shm *mb)
{
    return mb->echo_logprobs && mb->n_prompt > 0 ? (uint64_t)mb->n_prompt - 1 : 0;
}

sl_status sl_shm_worker_push(sl_shm_t *w, sl_shm_ticket t, int32_t token, const sl_logprob_record *rec)
{
    uint64_t wd;
    sl_status rc = worker_word(w, t, &wd);
    if (rc < 0)
        return rc;
    struct sl_mailbox_shm *mb = sl_shm_mb(w, t.index);
    uint32_t ring_n = w->limits.token_ring_entries;
    uint64_t tail = atomic_load_explicit(&mb->tok_tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&mb->tok_head, memory_order_acquire) >= ring_n)
        return SL_AGAIN;
    size_t pos = (size_t)t.index * ring_n + (tail & (ring_n - 1));
    w->tokens[pos] = token;
    if (w->records) {
        if (rec)
            w->records[pos] = *rec;
        else
            memset(&w->records[pos], 0, sizeof(w->records[pos]));
    }
    SL_CRASH_POINT(SL_CRASH_PUSH_WRITTEN);
    atomic_store_explicit(&mb->tok_tail, tail + 1, memory_order_release);
    SL_CRASH_POINT(SL_CRASH_PUSH_PUBLISHED);
    uint64_t now = sl_shm_now_ns();
    /* An echo request's first n_prompt - 1 entries are its prompt's records:
     * the figures count generated tokens only. */
    uint64_t n_echo = echo_entries(mb);
    if (tail + 1 > n_echo) {
        if (tail == n_echo)
            mb->timings.first_token_ns = now;
        else if (now >= mb->timings.last_token_ns)
            /* Every gap, observed here where the token is made: the front end
             * reads tokens in batches (one wakeup per step at best), so the
             * gaps it saw would be its own reading cadence. */
            sl_shm_histogram_observe(w, SL_HISTOGRAM_INTER_TOKEN, now - mb->timings.last_token_ns);
        mb->timings.last_token_ns = now;
        mb->timings.n_generated = (uint32_t)(tail + 1 - n_echo);
    }
    mark_dirty(w, sl_word_owner(wd));
    return SL_OK;
}

uint32_t sl_shm_worker_ring_space(const sl_shm_t *w, sl_shm_ticket t)
{
    uint64_t wd;
    if (worker_word(w, t, &wd) < 0)
        return 0;
    const struct sl_mailbox_shm *mb = sl_shm_mb(w, t.index);
    uint64_t used = atomic_load_explicit(&mb->tok_tail, memory_order_relaxed) -
                    atomic_load_explicit(&mb->tok_head, memory_order_acquire);
    return used >= w->limits.token_ring_entries ? 0 : (uint32_t)(w->limits.token_ring_entries - used);
}

int sl_shm_worker_cancelled(const sl_shm_t *w, sl_shm_ticket t)
{
    if (t.index >= w->limits.n_mailboxes)
        return 0;
    const struct sl_mailbox_shm *mb = sl_shm_mb(w, t.index);
    uint64_t wd = atomic_load_explicit(&mb->word, memory_order_acquire);
    if (sl_word_incarnation(wd) != t.incarnation)
        return 0;
    return atomic_load_explicit(&mb->cancel, memory_order_acquire) != 0 || sl_word_owner(wd) == SL_SHM_OWNER_ORPHAN;
}

sl_status sl_shm_worker_set_admitted(sl_shm_t *w, sl_shm_ticket t, uint64_t admitted_ns)
{
    uint64_t wd;
    sl_status rc = worker_word(w, t, &wd);
    if (rc < 0)
        return rc;
    sl_shm_mb(w, t.index)->timings.admitted_ns = admitted_ns;
    return SL_OK;
}

sl_status sl_shm_worker_set_cached(sl_shm_t *w, sl_shm_ticket t, uint32_t n_cached_tokens)
{
    uint64_t wd;
    sl_status rc = worker_word(w, t, &wd);
    if (rc < 0)
        return rc;
    /* before the first token: the front end reads it after that token's release */
    atomic_store_explicit(&sl_shm_mb(w, t.index)->n_cached_tokens, n_cached_tokens, memory_order_relaxed);
    return SL_OK;
}

sl_status sl_shm_worker_finish(sl_shm_t *w, sl_shm_ticket t, sl_finish_reason reason, const char *error)
{
    uint32_t target;
    switch (reason) {
    case SL_FINISH_REASON_STOP:
    case SL_FINISH_REASON_LENGTH: target = SL_MAILBOX_STATE_FINISHED; break;
    case SL_FINISH_REASON_CANCELLED: target = SL_MAILBOX_STATE_CANCELLED; break;
    case SL_FINISH_REASON_ERROR: target = SL_MAILBOX_STATE_FAILED; break;
    default: return SL_EINVAL;
    }
    uint64_t wd;
    sl_status rc = worker_word(w, t, &wd);
    if (rc < 0)
        return rc;
    struct sl_mailbox_shm *mb = sl_shm_mb(w, t.index);
    mb->finish_reason = reason;
    if (error) {
        size_t n = strnlen(error, SL_SHM_ERROR_LEN - 1);
        memcpy(mb->error, error, n);
        mb->error[n] = 0;
    } else {
        mb->error[0] = 0;
    }
    uint64_t n_entries = atomic_load_explicit(&mb->tok_tail, memory_order_relaxed), n_echo = echo_entries(mb);
    uint32_t n_generated = (uint32_t)(n_entries > n_echo ? n_entries - n_echo : 0);
    mb->timings.n_generated = n_generated;
    SL_CRASH_POINT(SL_CRASH_FINISH_WRITTEN);
    for (;;) {
        uint32_t owner = sl_word_owner(wd);
        uint64_t nw;
        if (owner == SL_SHM_OWNER_ORPHAN) {
            /* The front end died while we held it: nobody will release it, so we do. */
            sl_shm_blocks_free_table(w, t.index, t.incarnation);
            SL_CRASH_POINT(SL_CRASH_FINISH_ORPHAN_BLOCKS);
            nw = sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, t.incarnation);
        } else {
            nw = sl_word_make(target, owner, t.incarnation);
        }
        if (atomic_compare_exchange_strong_explicit(&mb->word, &wd, nw, memory_order_acq_rel, memory_order_acquire)) {
            if (owner != SL_SHM_OWNER_ORPHAN)
                mark_dirty(w, owner);
            break;
        }
        /* Only the master's front-end recovery changes a RUNNING word under us
         * (owner -> ORPHAN); anything else means we are stale. */
        if (sl_word_incarnation(wd) != t.incarnation || sl_word_state(wd) != SL_MAILBOX_STATE_RUNNING)
            return SL_ESTALE;
    }
    sl_counter c = target == SL_MAILBOX_STATE_FINISHED    ? SL_COUNTER_REQUESTS_FINISHED
                   : target == SL_MAILBOX_STATE_CANCELLED ? SL_COUNTER_REQUESTS_CANCELLED
                                                          : SL_COUNTER_REQUESTS_FAILED;
    sl_shm_counter_add(w, c, 1);
    sl_shm_counter_add(w, SL_COUNTER_TOKENS_GENERATED, n_generated); /* mb may be recycled by now */
    return SL_OK;
}

uint32_t sl_shm_worker_flush_wakeups(sl_shm_t *w)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < SL_SHM_SLOTS_MAX / 64; k++) {
        uint64_t bits = w->dirty[k];
        w->dirty[k] = 0;
        while (bits) {
            uint32_t s = k * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            if (w->eventfds[s] >= 0) {
                sl_shm_eventfd_signal(w->eventfds[s]);
                n++;
            }
        }
    }
    return n;
}
