/* shared/shm_layout.h: the byte layout of the sluice shared-memory segment.
 * Where:  included by the shared/ sources only (and by tests that audit the layout); other
 *         code goes through shared/shm.h.
 * Rule:   fixed-width integers and indices only, never pointers; every atomic is
 *         lock-free (checked below), so it works between processes. A change to any
 *         struct here bumps SL_SHM_LAYOUT_VERSION; attach refuses a mismatch.
 *
 * The segment, in order (offsets are stored in the header and re-derived from the
 * limits at every attach; a segment whose stored offsets disagree is refused):
 *
 *   offset 0            sl_header_shm       identity, limits, worker, doorbell,
 *                                           config snapshot, counters, histograms
 *   off_slots           sl_slot_shm[n_slots]            per front end: ring head/tail
 *   off_ring            u64[n_slots][submit_ring_entries] ring entries (ticket words)
 *   off_mailboxes       sl_mailbox_shm[n_mailboxes]
 *   off_block_tables    u32[n_mailboxes][blocks_per_mailbox] prompt block indices
 *   off_tokens          i32[n_mailboxes][token_ring_entries]
 *   off_records         sl_logprob_record[n_mailboxes][token_ring_entries] (if logprobs)
 *   off_block_owners    u64[prompt_arena_blocks]    0 = free, else owner ticket word
 *   off_arena           i32[prompt_arena_blocks][prompt_block_tokens]
 *   off_grammar         char[n_mailboxes][grammar_bytes_max]  GBNF text (0 = none: the
 *                                           region is absent and off_grammar is 0)
 *
 * Every region starts on a 64-byte line. blocks_per_mailbox =
 * ceil(prompt_tokens_max / prompt_block_tokens).
 *
 * The grammar region is the one part not reserved by posix_fallocate: it is last,
 * past the fallocated length, so its pages are backed only when first written and
 * an untouched slice costs nothing (1024 mailboxes x 64 KiB would otherwise
 * reserve 64 MiB for texts few requests carry). A store into an unbacked page of
 * a full /dev/shm would be SIGBUS, so sl_shm_submit writes the text with pwrite on
 * the segment's fd, which answers ENOSPC instead (SL_ENOMEM); the worker only
 * reads bytes that a pwrite backed.
 *
 * What survives a crash: everything here is the state itself, so a dead process
 * leaves no private half of any transition. After a worker death the master's
 * sl_shm_recover_worker_death fails RUNNING mailboxes and keeps SUBMITTED ones;
 * the rings, the arena and the counters carry over unchanged. After a front-end
 * death sl_shm_recover_frontend_death frees its mailboxes and blocks. Nothing is
 * rebuilt from scratch except by a new master, which creates a fresh segment. */
#ifndef SL_SHM_LAYOUT_H
#define SL_SHM_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/sampling.h"
#include "shared/shm.h"

#define SL_SHM_MAGIC 0x314d48534543554cULL /* "LUCESHM1" little-endian: 'L','U','C','E','S','H','M','1' */
#define SL_SHM_LAYOUT_VERSION 6u   /* 2: limits.submit_queue_depth, the pause flag;
                                      3: mailbox n_cached_tokens, the prefix-cache counters;
                                      4: limits.grammar_bytes_max, off_grammar, mailbox grammar_len;
                                      5: mailbox echo_logprobs;
                                      6: 11 histograms (was 4; token-count ones), the
                                         request-success counters */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free to work across processes");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free to work across processes");

/* The mailbox control word, changed only by compare-and-swap:
 *   bits  0..7   state (sl_mailbox_state)
 *   bits  8..23  owner front-end slot; SL_SHM_OWNER_NONE when free, SL_SHM_OWNER_ORPHAN
 *                when the owner died while the worker held the mailbox
 *   bits 24..31  zero
 *   bits 32..63  incarnation, +1 at every claim
 * A submission-ring entry and a prompt block's owner are "ticket words":
 *   bits 0..31 mailbox index (+1 for block owners, so 0 means free), 32..63 incarnation. */
#define SL_SHM_OWNER_NONE 0xfffeu
#define SL_SHM_OWNER_ORPHAN 0xffffu

static inline uint64_t sl_word_make(uint32_t state, uint32_t owner, uint32_t incarnation)
{
    return (uint64_t)(state & 0xffu) | ((uint64_t)(owner & 0xffffu) << 8) | ((uint64_t)incarnation << 32);
}
static inline uint32_t sl_word_state(uint64_t w) { return (uint32_t)(w & 0xffu); }
static inline uint32_t sl_word_owner(uint64_t w) { return (uint32_t)((w >> 8) & 0xffffu); }
static inline uint32_t sl_word_incarnation(uint64_t w) { return (uint32_t)(w >> 32); }

/* The header. Offsets are asserted below. */
typedef struct {
    /* identity: written once by the master before anyone attaches */
    uint64_t magic;                         /*    0 */
    uint32_t layout_version;                /*    8 */
    uint32_t header_size;                   /*   12 sizeof(sl_header_shm) */
    uint64_t segment_size;                  /*   16 */
    sl_shm_limits limits;                   /*   24 (40 bytes) */
    uint32_t slot_size;                     /*   64 sizeof(sl_slot_shm) */
    uint32_t mailbox_size;                  /*   68 sizeof(sl_mailbox_shm) */
    uint64_t off_slots;                     /*   72 */
    uint64_t off_ring;                      /*   80 */
    uint64_t off_mailboxes;                 /*   88 */
    uint64_t off_block_tables;              /*   96 */
    uint64_t off_tokens;                    /*  104 */
    uint64_t off_records;                   /*  112 (0 without logprobs) */
    uint64_t off_block_owners;              /*  120 */
    uint64_t off_arena;                     /*  128 */
    /* instance and worker */
    _Atomic int32_t master_pid;             /*  136 creator, for stale-segment detection */
    _Atomic uint32_t worker_generation;     /*  140 +1 at each worker death (recovery) */
    _Atomic uint32_t worker_state;          /*  144 sl_worker_state */
    _Atomic int32_t worker_pid;             /*  148 */
    _Atomic uint64_t hb_step;               /*  152 steps begun */
    _Atomic uint64_t hb_step_start_ns;      /*  160 current step (or idle beat) start */
    _Atomic uint64_t hb_step_max_ns;        /*  168 longest the current step may take */
    _Atomic uint32_t claim_hint;            /*  176 where front ends start looking for a free mailbox */
    _Atomic uint32_t block_hint;            /*  180 same, for prompt blocks */
    char model_id[SL_SHM_MODEL_ID_LEN];     /*  184 written before state READY */
    _Atomic uint32_t paused;                /*  248 1 = the worker runs no forward step (admin pause);
                                                    set by the master, survives a worker restart */
    uint32_t _pad0;                         /*  252 */
    /* doorbell: its own cache line, the only line every producer writes */
    _Atomic uint32_t doorbell;              /*  256 futex word: +1 per submission */
    _Atomic uint32_t worker_sleeping;       /*  260 1 while the worker may be in futex_wait */
    char _pad1[56];                         /*  264 */
    /* the worker's effective-config snapshot, under a sequence counter */
    _Atomic uint64_t config_seq;            /*  320 odd while being written */
    _Atomic uint64_t config_len;            /*  328 */
    _Atomic uint64_t config_words[SL_SHM_CONFIG_MAX / 8]; /* 336 (8192 bytes) */
    /* shared figures */
    _Atomic uint64_t counters[SL_SHM_COUNTERS_MAX];      /* 8528 */
    _Atomic uint64_t hist_buckets[SL_HISTOGRAM_COUNT][SL_SHM_HISTOGRAM_BUCKETS + 1]; /* 9040 non-cumulative */
    _Atomic uint64_t hist_sum[SL_HISTOGRAM_COUNT];       /* 10888 */
    uint64_t off_grammar;                                /* 10976 (0 when grammar_bytes_max is 0) */
    char _pad2[8];                                       /* 10984 */
} sl_header_shm;                                         /* 10992 */

_Static_assert(sizeof(sl_shm_limits) == 40, "limits changed: bump SL_SHM_LAYOUT_VERSION");
_Static_assert(offsetof(sl_header_shm, limits) == 24, "header layout");
_Static_assert(offsetof(sl_header_shm, slot_size) == 64, "header layout");
_Static_assert(offsetof(sl_header_shm, off_slots) == 72, "header layout");
_Static_assert(offsetof(sl_header_shm, master_pid) == 136, "header layout");
_Static_assert(offsetof(sl_header_shm, model_id) == 184, "header layout");
_Static_assert(offsetof(sl_header_shm, paused) == 248, "header layout");
_Static_assert(offsetof(sl_header_shm, doorbell) == 256, "header layout");
_Static_assert(offsetof(sl_header_shm, config_seq) == 320, "header layout");
_Static_assert(offsetof(sl_header_shm, config_words) == 336, "header layout");
_Static_assert(offsetof(sl_header_shm, counters) == 8528, "header layout");
_Static_assert(offsetof(sl_header_shm, hist_buckets) == 9040, "header layout");
_Static_assert(SL_HISTOGRAM_COUNT == 11, "histograms changed: bump SL_SHM_LAYOUT_VERSION");
_Static_assert(SL_COUNTER_COUNT <= SL_SHM_COUNTERS_MAX, "counters outgrew the header's room");
_Static_assert(offsetof(sl_header_shm, hist_sum) == 10888, "header layout");
_Static_assert(offsetof(sl_header_shm, off_grammar) == 10976, "header layout");
_Static_assert(sizeof(sl_header_shm) == 10992, "header layout");

/* One front end's submission ring: single producer (the slot's front end),
 * single consumer (the worker). Producer and consumer indices on separate lines. */
typedef struct {
    _Atomic uint64_t tail;                  /*   0 front end: entries published */
    _Atomic uint32_t generation;            /*   8 +1 at each recovery of this slot (master) */
    _Atomic int32_t pid;                    /*  12 current front end, for logs */
    char _pad0[48];                         /*  16 */
    _Atomic uint64_t head;                  /*  64 worker: entries consumed */
    char _pad1[56];                         /*  72 */
} sl_slot_shm;                              /* 128 */

_Static_assert(offsetof(sl_slot_shm, head) == 64, "slot layout");
_Static_assert(sizeof(sl_slot_shm) == 128, "slot layout");

/* One mailbox. Fields above `tok_tail` are the request (written by the front end
 * while CLAIMED) and the result (written by the worker while RUNNING, or by the
 * master's recovery once the worker is dead); the control word's release/acquire
 * CAS hands them over. */
struct sl_mailbox_shm {
    _Atomic uint64_t word;                  /*    0 control word (above) */
    _Atomic uint32_t cancel;                /*    8 1 = stop (front end or recovery sets) */
    uint32_t owner_generation;              /*   12 owner slot's generation at claim */
    uint32_t worker_generation;             /*   16 worker generation that took it */
    uint32_t finish_reason;                 /*   20 sl_finish_reason */
    uint64_t request_id;                    /*   24 */
    int32_t max_tokens;                     /*   32 */
    int32_t min_tokens;                     /*   36 */
    uint32_t ignore_eos;                    /*   40 */
    uint32_t n_prompt;                      /*   44 */
    uint32_t n_blocks;                      /*   48 entries used in this mailbox's block table */
    _Atomic uint32_t n_cached_tokens;       /*   52 worker: prompt tokens the prefix cache held; set
                                                    at admission, before any token (readable while RUNNING) */
    sl_shm_timings timings;                 /*   56 (40 bytes) */
    char error[SL_SHM_ERROR_LEN];           /*   96 */
    uint32_t grammar_len;                   /*  224 bytes of GBNF text in this mailbox's grammar
                                                    slice; 0 = unconstrained */
    uint32_t echo_logprobs;                 /*  228 1 = prompt tokens' records first (sl_shm_request) */
    char _pad1[24];                         /*  232 */
    _Atomic uint64_t tok_tail;              /*  256 worker: tokens produced */
    char _pad2[56];                         /*  264 */
    _Atomic uint64_t tok_head;              /*  320 front end: tokens consumed */
    char _pad3[56];                         /*  328 */
    sl_sampling_params params;              /*  384 (2448 bytes) */
    char _pad4[48];                         /* 2832 */
};                                          /* 2880 */

_Static_assert(offsetof(struct sl_mailbox_shm, n_cached_tokens) == 52, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, timings) == 56, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, error) == 96, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, grammar_len) == 224, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, echo_logprobs) == 228, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, tok_tail) == 256, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, tok_head) == 320, "mailbox layout");
_Static_assert(offsetof(struct sl_mailbox_shm, params) == 384, "mailbox layout");
_Static_assert(sizeof(struct sl_mailbox_shm) == 2880, "mailbox layout");
_Static_assert(sizeof(sl_shm_timings) == 40, "timings layout");
_Static_assert(sizeof(sl_sampling_params) == 2448, "sampling params changed: bump SL_SHM_LAYOUT_VERSION");

#endif
