/* shared/shm_impl.h: the per-process handle into the segment and helpers shared
 * by shm.c, mailbox.c and recover.c. Private to shared/: nothing else includes it.
 * The handle keeps its own validated copy of the limits, so a range check never
 * trusts a number another process could have overwritten. */
#ifndef SL_SHM_IMPL_H
#define SL_SHM_IMPL_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shared/shm.h"
#include "shared/shm_layout.h"

struct sl_shm {
    sl_header_shm *hdr;               /* the mapping starts here */
    size_t size;
    int owns_mapping;                 /* 0 for sl_shm_attach_shared handles */
    int creator;                      /* 1 for sl_shm_create's handle: destroy unlinks */
    sl_shm_role role;
    uint32_t slot;                    /* front end: its slot */
    uint32_t slot_generation;         /* front end: generation at attach */
    uint32_t worker_generation;       /* worker: generation at attach */
    uint32_t blocks_per_mailbox;
    uint32_t pop_cursor;              /* worker: next slot to look at */
    sl_shm_limits limits;             /* validated copy */
    sl_slot_shm *slots;               /* (n_slots) */
    _Atomic uint64_t *ring;           /* (n_slots, submit_ring_entries) */
    struct sl_mailbox_shm *mailboxes; /* (n_mailboxes) */
    uint32_t *block_tables;           /* (n_mailboxes, blocks_per_mailbox) */
    int32_t *tokens;                  /* (n_mailboxes, token_ring_entries) */
    sl_logprob_record *records;       /* (n_mailboxes, token_ring_entries) or NULL */
    _Atomic uint64_t *block_owners;   /* (prompt_arena_blocks) */
    int32_t *arena;                   /* (prompt_arena_blocks, prompt_block_tokens) */
    char *grammar;                    /* (n_mailboxes, grammar_bytes_max) or NULL */
    uint64_t off_grammar;             /* byte offset of `grammar` in the segment file */
    int fd;                           /* the segment's fd, for pwrite into the grammar region
                                         (kept by the handle that owns the mapping; -1 = none) */
    int eventfds[SL_SHM_SLOTS_MAX];   /* -1 = none; the master's numbers, inherited */
    uint64_t dirty[SL_SHM_SLOTS_MAX / 64]; /* worker: front ends owed a wakeup */
    char name[64];
};

/* Crash points: SL_CRASH_POINT(n) kills this process at the armed hit. */
#ifdef SLUICE_CRASH_POINTS
void sl_shm_crash_hit(int point);
#define SL_CRASH_POINT(n) sl_shm_crash_hit(n)
#else
#define SL_CRASH_POINT(n) ((void)0)
#endif

static inline struct sl_mailbox_shm *sl_shm_mb(const sl_shm_t *h, uint32_t i) { return &h->mailboxes[i]; }
static inline uint64_t sl_ticket_word(uint32_t index, uint32_t incarnation)
{
    return (uint64_t)index | ((uint64_t)incarnation << 32);
}

/* Frees the prompt blocks of mailbox `i` recorded under `incarnation` in its block
 * table (mailbox.c). Each block goes back only if still owned by that ticket, so a
 * repeat after a crash is harmless. */
void sl_shm_blocks_free_table(sl_shm_t *h, uint32_t i, uint32_t incarnation);

/* Writes eventfd `fd` once (mailbox.c); EAGAIN (counter full) means a wakeup is
 * already pending and is not an error. */
void sl_shm_eventfd_signal(int fd);

#endif
