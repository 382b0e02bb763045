/* gpu-worker/scheduler_impl.h: the scheduler's private state, shared by
 * the files that make up the scheduler (scheduler.c, the loop;
 * scheduler_echo.c, the prompt-logprobs call; scheduler_check.c, the
 * accounting checker). Nothing else includes it.
 * Where:     the worker process, on the scheduler thread.
 * Who:       the scheduler's one thread; no locking.
 * What:      a slot per request the scheduler holds (its state, history,
 *            block table and timings) and the scheduler's lists and step
 *            arrays. The states and the invariants over these fields are
 *            docs/SCHEDULER.md §3 and §4.
 * Ownership: every array is sized once by sl_sched_create and freed by
 *            sl_sched_destroy.
 * Errors:    none: plain data. */
#ifndef SL_SCHEDULER_IMPL_H
#define SL_SCHEDULER_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu-worker/kv_blocks.h"
#include "gpu-worker/prefix_cache.h"
#include "gpu-worker/scheduler.h"

/* A slot's state (docs/SCHEDULER.md, state diagram). */
enum seq_state {
    SEQ_FREE = 0,   /* unused */
    SEQ_WAITING,    /* polled, not admitted (or preempted): holds no KV blocks */
    SEQ_PREFILL,    /* admitted: n_cached < prefill_target(), blocks cover the target */
    SEQ_DECODE,     /* admitted: n_cached == n_hist - 1; the last token is fed next */
    SEQ_PARKED,     /* out of the live set since its consumer was full: n_cached is n_hist - 1
                       (blocks kept) or 0 (blocks dropped under pressure: recompute on return) */
};

/* Most logits rows one step's echo call computes (all echo sequences
 * together): bounds the echo logits buffer, allocated once at create. */
#define SL_SCHED_ECHO_ROWS 8

typedef struct {
    sl_sched_request req;
    enum seq_state state;
    bool paused;            /* hist[n_hist-1] was sampled but not yet emitted (consumer full); only PARKED */
    bool prefill_started;
    bool dropped;           /* emit said SL_ESTALE: free without finish */
    bool deferred;          /* has waited behind a live prefill of its prefix (counted once) */
    int32_t *hist;          /* (n_ctx) prompt, then generated tokens */
    int32_t n_hist;         /* n_prompt + n_gen */
    int32_t n_gen;          /* tokens sampled */
    int32_t n_emitted;      /* tokens the client has */
    int32_t n_cached;       /* positions whose KV the backend holds */
    int32_t n_preempted;
    sl_kv_table table;
    sl_prefix_chain chain;  /* how far the table's blocks are in the prefix cache */
    int32_t n_prefix_hit;   /* prompt tokens the cache gave at first admission */
    int32_t n_prefix_lookup;/* prompt tokens looked up then */
    sl_logprob_record rec;  /* record of the last sampled token */
    sl_constraint *con;     /* the grammar matcher and allow bitmap; NULL: unconstrained */
    uint64_t seen_ns, admit_ns, prefill_ns, first_ns, last_ns;
    int32_t chunk;          /* tokens this step feeds (0: not in this step) */
    int32_t n_echoed;       /* prompt records emitted (echo_logprobs): tokens 1..n_echoed; never goes back */
    int32_t echo_rows;      /* rows this step's echo call computes for it; 0 outside a planned step */
    bool echo_blocked;      /* planned no echo rows: its consumer had no room (invariant 12 lets it wait) */
    int echo_end;           /* after the echo call: the finish reason it must end with, -1 none */
    const char *echo_error; /* and its error text (static) */
} seq;

struct sl_sched {
    sl_backend *be;
    sl_sched_io io;
    sl_sched_config cfg;
    int32_t n_vocab, n_ctx;
    int32_t *eog;           /* (n_eog) */
    int32_t n_eog;
    FILE *trace;

    sl_kv_blocks kv;
    sl_prefix_cache pc;     /* holds full blocks past their sequences (empty when off) */
    int32_t n_slots;        /* max_seqs live + max_seqs waiting + max_seqs parked */
    seq *slots;             /* (n_slots) */
    int32_t *hist_mem;      /* (n_slots, n_ctx) */
    int32_t *live;          /* (max_seqs) admitted slots, oldest admission first */
    int32_t n_live;
    int32_t *waiting;       /* (n_slots) waiting slots, admission order (preempted first) */
    int32_t n_waiting;
    int32_t *parked;        /* (n_slots) parked slots, oldest parking first */
    int32_t n_parked;

    sl_batch_seq *batch;    /* (max_seqs) this step's forward */
    int32_t *batch_slot;    /* (max_seqs) slot of each batch entry */
    sl_sample_req *reqs;    /* (max_seqs) this step's draw by batch entry; params NULL: none */
    int32_t *drawn;         /* (max_seqs) their tokens by batch entry, -1 on failure */
    sl_constraint **mask_con;     /* (max_seqs) this step's constrained draws: constraint, */
    bool *mask_eog;               /* end of generation allowed, */
    int32_t *mask_entry;          /* batch entry, */
    const uint32_t **mask_out;    /* and mask (written by masks_fill during the forward) */
    int32_t n_masks;

    /* window state */
    int32_t last_step_seqs;     /* sequences in the previous step's batch */
    int32_t last_round_n;       /* requests admitted by the previous admission round from idle */
    uint64_t wait_ns;           /* what sl_sched_wait_ns reports */

    /* sharing an in-flight prefix (docs/SCHEDULER.md §5a) */
    int32_t n_deferred_now;     /* waiting requests this step's admission left behind a live prefill */
    bool planned;               /* the batch is planned and its forward not yet run (invariant 12) */

    /* the echo call (scheduler_echo.c): at most SL_SCHED_ECHO_ROWS rows a step */
    sl_batch_seq echo_batch[SL_SCHED_ECHO_ROWS];
    int32_t echo_slot[SL_SCHED_ECHO_ROWS];
    int32_t n_echo_batch;   /* entries of the last echo call */
    float *echo_logits;     /* (SL_SCHED_ECHO_ROWS, n_vocab) */

    sl_sched_stats stats;
};

/* Positions a prefill must fill. A fresh request: the whole prompt, and its
 * last row gives the first token. A recompute after preemption: all but the
 * last generated token, landing exactly in the decode state it left (that
 * token is fed by the next decode, as it would have been). So recompute never
 * samples anything itself, and a token still owed to the client (paused) is
 * never joined by a second one. */
static inline int32_t prefill_target(const seq *q)
{
    return q->n_gen > 0 ? q->n_hist - 1 : q->n_hist;
}

/* An echo request whose prompt records are not all out: its positions from
 * n_echoed on are computed by the echo call (logits of every row), those
 * before it (recomputed after preemption) by ordinary prefill chunks. */
static inline bool echo_phase(const seq *q)
{
    return q->req.echo_logprobs && q->n_echoed < q->req.n_prompt - 1;
}

/* Where an ordinary prefill chunk of q must stop: n_echoed in the echo
 * phase (the echo call takes over there), else the prefill target. */
static inline int32_t prefill_stop(const seq *q)
{
    return echo_phase(q) ? q->n_echoed : prefill_target(q);
}

/* scheduler_seq.c: a sequence's moves between states (each function's
 * comment there states its transition). */
void sl_sched_trace(sl_sched *s, const seq *q, const char *stage, uint64_t now);   /* --ttft-trace line */
void sl_sched_list_remove(int32_t *list, int32_t *n, int32_t slot);               /* slot must be listed */
void sl_sched_seq_end(sl_sched *s, int32_t slot, int reason, const char *error);  /* any -> FREE */
void sl_sched_seq_preempt(sl_sched *s, int32_t slot);   /* PREFILL/DECODE -> WAITING (head), blocks freed */
void sl_sched_seq_park(sl_sched *s, int32_t slot);      /* DECODE -> PARKED, blocks kept */
bool sl_sched_park_drop(sl_sched *s);                   /* one parked sequence's blocks freed; false: none */
bool sl_sched_seq_take_blocks(sl_sched *s, seq *q);     /* a prefill's blocks, cache hits first; false: none */
int32_t sl_sched_defer_leader(const sl_sched *s, const seq *q);   /* the live prefill q waits for, or -1 */
void sl_sched_seq_unpark(sl_sched *s, int32_t slot);    /* PARKED -> DECODE/PREFILL, newest live */

/* scheduler_echo.c: plans q's echo rows this step (q is in the echo phase
 * with n_cached == n_echoed): at most the tokens left to the budget, the
 * rows left to the call (*rows_used, updated) and its consumer's room.
 * Sets q->echo_rows and q->echo_blocked; returns the rows. */
int32_t sl_sched_echo_plan(sl_sched *s, seq *q, int32_t budget_left, int32_t *rows_used);

/* scheduler_echo.c: runs the planned echo call (sl_backend_forward with
 * logits_all, one entry per sequence with echo_rows: echo_slot[0,
 * n_echo_batch)), emits each row's record and advances n_cached and
 * n_echoed by what went out. It ends nothing itself (scheduler.c owns the
 * lists): an entry that must end (LENGTH when its records are all out and
 * max_tokens is 0; its consumer gone or failed) gets echo_end >= 0, and the
 * caller ends it. Returns the rows
 * computed (0: nothing planned), or the backend's negative status, nothing
 * emitted (the caller fails the step). */
int32_t sl_sched_echo_run(sl_sched *s);

#endif
