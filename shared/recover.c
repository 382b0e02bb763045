/* shared/recover.c: putting the segment back in order after a death, and a census.
 * Runs in: the master, after it reaped a dead child (waitpid) and before it starts
 * the successor, so the dead process can no longer write.
 * Trade-off: recovery scans the whole mailbox pool and prompt arena (a few
 * thousand words) instead of keeping per-owner lists; a death is rare, and a list
 * would itself be shared state a dying process could leave half updated. */
#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shared/shm_impl.h"

static const char worker_died_text[] = "the worker process died while running this request";

sl_status sl_shm_recover_worker_death(sl_shm_t *m, uint32_t *n_failed)
{
    sl_header_shm *hdr = m->hdr;
    uint32_t failed = 0;
    /* A new generation first: a worker that is somehow still running now gets
     * SL_ESTALE from every write (the master must still have reaped it). */
    atomic_fetch_add_explicit(&hdr->worker_generation, 1, memory_order_acq_rel);
    atomic_store_explicit(&hdr->worker_state, SL_WORKER_STATE_DEAD, memory_order_release);
    atomic_store_explicit(&hdr->worker_pid, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->worker_sleeping, 0, memory_order_relaxed);
    for (uint32_t i = 0; i < m->limits.n_mailboxes; i++) {
        struct sl_mailbox_shm *mb = sl_shm_mb(m, i);
        uint64_t w = atomic_load_explicit(&mb->word, memory_order_acquire);
        /* SUBMITTED mailboxes stay as they are, with their ring entries: the next
         * worker takes them. Only RUNNING ones were taken by the dead worker. */
        while (sl_word_state(w) == SL_MAILBOX_STATE_RUNNING) {
            uint32_t owner = sl_word_owner(w), inc = sl_word_incarnation(w);
            uint64_t nw;
            if (owner == SL_SHM_OWNER_ORPHAN) {
                sl_shm_blocks_free_table(m, i, inc);
                nw = sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, inc);
            } else {
                mb->finish_reason = SL_FINISH_REASON_ERROR;
                memcpy(mb->error, worker_died_text, sizeof(worker_died_text));
                nw = sl_word_make(SL_MAILBOX_STATE_FAILED, owner, inc);
            }
            /* Front ends cannot change a RUNNING word, so this fails only if a
             * front-end recovery ran concurrently; the loop then looks again. */
            if (atomic_compare_exchange_strong_explicit(&mb->word, &w, nw, memory_order_acq_rel,
                                                        memory_order_acquire)) {
                if (owner != SL_SHM_OWNER_ORPHAN) {
                    failed++;
                    atomic_fetch_add_explicit(&hdr->counters[SL_COUNTER_REQUESTS_FAILED], 1, memory_order_relaxed);
                }
                break;
            }
        }
    }
    for (uint32_t s = 0; s < m->limits.n_slots; s++)
        if (m->eventfds[s] >= 0)
            sl_shm_eventfd_signal(m->eventfds[s]);
#ifndef NDEBUG
    char err[SL_ERR_LEN];
    assert(sl_shm_check(m, 0, err) == SL_OK);
#endif
    if (n_failed)
        *n_failed = failed;
    return SL_OK;
}

sl_status sl_shm_recover_frontend_death(sl_shm_t *m, uint32_t slot, uint32_t *n_reclaimed)
{
    if (n_reclaimed)
        *n_reclaimed = 0;
    if (slot >= m->limits.n_slots)
        return SL_ERANGE;
    uint32_t n = 0;
    /* A new generation first: the dead front end's handle (should it be a ghost)
     * gets SL_ESTALE from every call from now on. */
    atomic_fetch_add_explicit(&m->slots[slot].generation, 1, memory_order_acq_rel);
    atomic_store_explicit(&m->slots[slot].pid, 0, memory_order_relaxed);
    for (uint32_t i = 0; i < m->limits.n_mailboxes; i++) {
        struct sl_mailbox_shm *mb = sl_shm_mb(m, i);
        uint64_t w = atomic_load_explicit(&mb->word, memory_order_acquire);
        while (sl_word_owner(w) == slot) {
            uint32_t st = sl_word_state(w), inc = sl_word_incarnation(w);
            uint64_t nw;
            if (st == SL_MAILBOX_STATE_RUNNING) {
                /* The worker holds it: ask it to stop and let it free the mailbox
                 * when it lets go (sl_shm_worker_finish sees the ORPHAN owner). */
                atomic_store_explicit(&mb->cancel, 1, memory_order_release);
                nw = sl_word_make(SL_MAILBOX_STATE_RUNNING, SL_SHM_OWNER_ORPHAN, inc);
            } else {
                /* CLAIMED, SUBMITTED or terminal. A SUBMITTED one's ring entry stays
                 * and the worker skips it; the CAS races the worker's pop fairly. */
                sl_shm_blocks_free_table(m, i, inc);
                nw = sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, inc);
            }
            if (atomic_compare_exchange_strong_explicit(&mb->word, &w, nw, memory_order_acq_rel,
                                                        memory_order_acquire)) {
                n++;
                break;
            }
        }
    }
    /* Blocks a death left owned but unrecorded (between a block's CAS and its
     * table entry, or a partly freed table): free every block whose owner ticket
     * names a mailbox that is FREE or has moved to another incarnation. A live
     * claimer takes its mailbox before its blocks, so its blocks always match a
     * non-FREE word of the same incarnation and are kept. */
    for (uint32_t b = 0; b < m->limits.prompt_arena_blocks; b++) {
        uint64_t o = atomic_load_explicit(&m->block_owners[b], memory_order_acquire);
        if (o == 0)
            continue;
        uint32_t i1 = (uint32_t)o, inc = (uint32_t)(o >> 32);
        int stale = 1;
        if (i1 >= 1 && i1 - 1 < m->limits.n_mailboxes) {
            uint64_t w = atomic_load_explicit(&sl_shm_mb(m, i1 - 1)->word, memory_order_acquire);
            stale = sl_word_state(w) == SL_MAILBOX_STATE_FREE || sl_word_incarnation(w) != inc;
        }
        if (stale)
            atomic_compare_exchange_strong_explicit(&m->block_owners[b], &o, 0, memory_order_release,
                                                    memory_order_relaxed);
    }
#ifndef NDEBUG
    char err[SL_ERR_LEN];
    assert(sl_shm_check(m, 0, err) == SL_OK);
#endif
    if (n_reclaimed)
        *n_reclaimed = n;
    return SL_OK;
}

void sl_shm_census(const sl_shm_t *h, sl_shm_census_info *out)
{
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < h->limits.n_mailboxes; i++) {
        uint64_t w = atomic_load_explicit(&sl_shm_mb(h, i)->word, memory_order_acquire);
        uint32_t st = sl_word_state(w);
        if (st < 7)
            out->mailboxes[st]++;
        if (st == SL_MAILBOX_STATE_RUNNING && sl_word_owner(w) == SL_SHM_OWNER_ORPHAN)
            out->orphans++;
    }
    for (uint32_t b = 0; b < h->limits.prompt_arena_blocks; b++)
        if (atomic_load_explicit(&h->block_owners[b], memory_order_relaxed) == 0)
            out->blocks_free++;
    for (uint32_t s = 0; s < h->limits.n_slots; s++)
        out->ring_used[s] = (uint32_t)(atomic_load_explicit(&h->slots[s].tail, memory_order_acquire) -
                                       atomic_load_explicit(&h->slots[s].head, memory_order_acquire));
}

sl_status sl_shm_check(const sl_shm_t *h, int quiescent, char err[SL_ERR_LEN])
{
    const sl_shm_limits *l = &h->limits;
    for (uint32_t s = 0; s < l->n_slots; s++) {
        uint64_t head = atomic_load_explicit(&h->slots[s].head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&h->slots[s].tail, memory_order_acquire);
        if (tail - head > l->submit_ring_entries) {
            snprintf(err, SL_ERR_LEN, "slot %u: ring holds %llu entries, more than %u", s,
                     (unsigned long long)(tail - head), l->submit_ring_entries);
            return SL_EFORMAT;
        }
    }
    for (uint32_t i = 0; i < l->n_mailboxes; i++) {
        const struct sl_mailbox_shm *mb = sl_shm_mb(h, i);
        uint64_t w = atomic_load_explicit(&mb->word, memory_order_acquire);
        uint32_t st = sl_word_state(w), owner = sl_word_owner(w);
        const char *why = NULL;
        if (st > SL_MAILBOX_STATE_CANCELLED || (w & 0xff000000u) != 0)
            why = "malformed control word";
        else if (st == SL_MAILBOX_STATE_FREE && owner != SL_SHM_OWNER_NONE)
            why = "FREE with an owner";
        else if (st != SL_MAILBOX_STATE_FREE && owner >= l->n_slots &&
                 !(owner == SL_SHM_OWNER_ORPHAN && st == SL_MAILBOX_STATE_RUNNING))
            why = "owner out of range";
        else if (st != SL_MAILBOX_STATE_FREE && st != SL_MAILBOX_STATE_CLAIMED && mb->n_blocks > h->blocks_per_mailbox)
            why = "block table longer than its capacity";
        else if (st >= SL_MAILBOX_STATE_RUNNING &&
                 atomic_load_explicit(&mb->tok_tail, memory_order_acquire) -
                         atomic_load_explicit(&mb->tok_head, memory_order_acquire) >
                     l->token_ring_entries)
            why = "token ring over capacity";
        else if (st >= SL_MAILBOX_STATE_SUBMITTED && mb->grammar_len > l->grammar_bytes_max)
            why = "grammar text longer than its slice";
        if (why) {
            snprintf(err, SL_ERR_LEN, "mailbox %u (word %016llx): %s", i, (unsigned long long)w, why);
            return SL_EFORMAT;
        }
        if (quiescent && st != SL_MAILBOX_STATE_FREE) {
            const uint32_t *table = &h->block_tables[(size_t)i * h->blocks_per_mailbox];
            uint64_t want = sl_ticket_word(i + 1, sl_word_incarnation(w));
            for (uint32_t k = 0; k < mb->n_blocks && k < h->blocks_per_mailbox; k++)
                if (table[k] >= l->prompt_arena_blocks ||
                    atomic_load_explicit(&h->block_owners[table[k]], memory_order_acquire) != want) {
                    snprintf(err, SL_ERR_LEN, "mailbox %u: block table entry %u does not own its block", i, k);
                    return SL_EFORMAT;
                }
        }
    }
    if (quiescent) {
        for (uint32_t b = 0; b < l->prompt_arena_blocks; b++) {
            uint64_t o = atomic_load_explicit(&h->block_owners[b], memory_order_acquire);
            if (o == 0)
                continue;
            uint32_t i1 = (uint32_t)o;
            uint64_t w = i1 >= 1 && i1 - 1 < l->n_mailboxes
                             ? atomic_load_explicit(&sl_shm_mb(h, i1 - 1)->word, memory_order_acquire)
                             : 0;
            if (i1 < 1 || i1 - 1 >= l->n_mailboxes || sl_word_state(w) == SL_MAILBOX_STATE_FREE ||
                sl_word_incarnation(w) != (uint32_t)(o >> 32)) {
                snprintf(err, SL_ERR_LEN, "prompt block %u owned by a dead ticket %016llx", b, (unsigned long long)o);
                return SL_EFORMAT;
            }
        }
    }
    return SL_OK;
}
