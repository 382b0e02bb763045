/* gpu-worker/scheduler.h: the continuous-batching scheduler (one iteration-
 * level loop over a batched backend). The essay, with the numbered token and
 * block accounting invariants, is docs/SCHEDULER.md.
 * Where:     the worker process, on its one scheduler thread. It talks to the
 *            outside world (shared memory, doorbell, clock) only through an
 *            sl_sched_io table, so tests drive it with fakes.
 * Who:       one thread calls every function here; the io callbacks are
 *            called on that thread, never re-entered.
 * Model:     each step admits waiting requests (KV blocks and the batch window
 *            permitting), decodes every running sequence by one token,
 *            advances prefills by chunks under a per-step token budget, runs
 *            one backend call (sl_backend_forward_sample: the forward and the
 *            draws), emits, and finishes or frees.
 * Ownership: the scheduler owns its arrays (sized once at create; a step
 *            never allocates) and the KV block bookkeeping; the backend, the
 *            eog array, the io table and each request's prompt belong to the
 *            caller (a prompt stays valid until finish() is called for it).
 * Errors:    a failure that belongs to one request fails only that request
 *            (finish with SL_SCHED_FINISH_ERROR and a reason); a backend step
 *            failure fails every live and waiting request, resets the batch
 *            state, and the scheduler carries on. */
#ifndef SL_SCHEDULER_H
#define SL_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu-worker/constraint.h"
#include "gpu-worker/prefix_cache.h"
#include "kernels/backend.h"
#include "shared/sampling.h"
#include "shared/status.h"

/* Where a config value came from (effective-config reports it). */
typedef enum {
    SL_SCHED_SOURCE_DEFAULT = 0,  /* sl_sched_config_default */
    SL_SCHED_SOURCE_FLAG,         /* a command-line flag */
    SL_SCHED_SOURCE_ENV,          /* a SLUICE_* environment variable */
    SL_SCHED_SOURCE_SEED_ALIAS,   /* the seed's environment name (CUDA_MAX_BATCH, ...) */
} sl_sched_source;

/* Why a request ended. */
typedef enum {
    SL_SCHED_FINISH_STOP = 0,     /* an end-of-generation token (not with ignore_eos) */
    SL_SCHED_FINISH_LENGTH,       /* max_tokens or the context length reached */
    SL_SCHED_FINISH_CANCELLED,    /* the cancel flag was seen */
    SL_SCHED_FINISH_ERROR,        /* refused at admission, or a failed step; error text says which */
} sl_sched_finish_reason;

/* The scheduler's knobs. Fill with sl_sched_config_default, then override
 * (and set the matching `source` entry). */
typedef struct {
    int32_t max_seqs;          /* most live sequences (seed CUDA_MAX_BATCH); >= 1 */
    int32_t token_budget;      /* most new tokens in one step; >= max_seqs, <= backend max_batch_tokens */
    int32_t prefill_chunk;     /* most prompt tokens one sequence prefills per step; >= 1 */
    int32_t window_ms;         /* batch window (seed CUDA_BATCH_WINDOW_MS): 0 = adaptive, > 0 = fixed */
    bool staggered_prefill;    /* seed STAGGERED_PREFILL: at most one new sequence starts prefill per step */
    bool ttft_trace;           /* seed TTFT_TRACE: one line per request and stage */
    FILE *trace;               /* where trace lines go; NULL = stderr */
    uint32_t kv_block_size;    /* token positions per KV block; must equal the backend's */
    uint32_t n_kv_blocks;      /* blocks in the pool; at most the backend's */
    bool prefix_cache;         /* reuse cached full KV blocks of equal prefixes (gpu-worker/prefix_cache.h) */
    sl_constraint_vocab *grammar_vocab; /* the model's tokens for constrained decoding (not owned; outlives the
                                           scheduler); NULL: a request with a grammar fails at admission */
    struct {                   /* an sl_sched_source for each knob above */
        uint8_t max_seqs, token_budget, prefill_chunk, window_ms;
        uint8_t staggered_prefill, ttft_trace, kv_block_size, n_kv_blocks;
        uint8_t prefix_cache;
    } source;
} sl_sched_config;

/* Defaults (all sources SL_SCHED_SOURCE_DEFAULT): max_seqs 16,
 * token_budget 256, prefill_chunk 256, window_ms 0 (adaptive), staggered
 * and trace off, kv_block_size SL_KV_BLOCK_TOKENS (16), n_kv_blocks 0 (the caller sizes the pool
 * from its memory budget; create refuses 0), prefix_cache on. docs/SCHEDULER.md says why. */
void sl_sched_config_default(sl_sched_config *c);

/* One request handed to the scheduler by io.poll. */
typedef struct {
    uint64_t id;                 /* opaque handle of the source (mailbox index + incarnation) */
    const int32_t *prompt;       /* n_prompt ids; valid until finish() is called for id */
    int32_t n_prompt;
    sl_sampling_params params;   /* validated again at admission */
    int32_t max_tokens;          /* >= 1; 0 only with echo_logprobs (the prompt's records, nothing drawn) */
    int32_t min_tokens;          /* 0 <= min_tokens <= max_tokens: EOG ids banned until reached */
    bool ignore_eos;             /* EOG ids do not stop (and are not banned) */
    uint64_t submit_ns;          /* submission time on the io clock (CLOCK_MONOTONIC) */
    const char *grammar;         /* GBNF text every drawn token must follow (grammar_len bytes, compiled at
                                    intake; need not outlive poll); NULL = unconstrained */
    uint32_t grammar_len;
    bool echo_logprobs;          /* the prompt's own logprobs first (docs/SCHEDULER.md §5b): emits prompt tokens
                                    1..n_prompt-1, each with its record (needs params.n_logprobs >= 0), then
                                    the generated tokens */
} sl_sched_request;

/* What finish() reports for every request, measured on the io clock. A
 * stage that never happened reads 0. */
typedef struct {
    double queue_ms;             /* submission to (first) admission */
    double prompt_ms;            /* start of the step with its first prefill chunk to the end of
                                    the step that produced its first token */
    double predicted_ms;         /* first token to last token */
    int32_t n_prompt_tokens;
    int32_t n_generated;         /* tokens the client received */
    int32_t n_preempted;         /* times it was preempted and recomputed */
    int32_t n_cached_tokens;     /* prompt tokens found in the prefix cache at first admission */
    int32_t n_lookup_tokens;     /* prompt tokens looked up then (0: never admitted, or the cache is off) */
} sl_sched_timings;

/* What step_done() gets after every step. */
typedef struct {
    uint64_t steps;              /* forward passes run so far */
    int32_t in_flight;           /* live sequences (admitted, holding or owed KV), after joins */
    int32_t peak_in_flight;      /* high-water mark of in_flight */
    int32_t n_waiting;           /* polled requests not yet admitted (incl. preempted) */
    int32_t step_seqs;           /* sequences in this step's batch */
    int32_t step_tokens;         /* new tokens in this step's batch (<= token_budget) */
    uint64_t step_ns;            /* duration of this step's forward on the io clock */
    uint32_t kv_blocks_free;     /* on the free list or held by the prefix cache alone (evictable) */
    uint32_t kv_blocks_total;
    uint32_t kv_blocks_touched;  /* distinct blocks handed out since start (sl_kv_blocks_touched) */
    uint64_t n_preemptions;      /* total so far */
    uint64_t n_step_failures;    /* whole-step failures so far */
    int32_t n_parked;            /* sequences parked now: their consumer was full (not in in_flight) */
    uint64_t n_parkings;         /* total so far: a live sequence left the batch for a full consumer */
    uint64_t n_park_drops;       /* total so far: a parked sequence's blocks were freed for others */
    bool prefix_cache;           /* the prefix cache is on */
    sl_prefix_cache_stats prefix;/* its figures (lookups count every admission, recomputes too) */
    uint64_t grammar_mask_ns;    /* total so far: time computing grammar masks (gpu-worker/constraint.h) */
    uint64_t n_constrained;      /* total so far: requests that ran with a grammar */
    int32_t n_deferred;          /* waiting now for a live prefill computing their prefix's blocks */
    uint64_t n_deferrals;        /* total so far: requests that waited so at least once */
} sl_sched_stats;

/* The outside world. All slots required but step_begin and admitted. */
typedef struct {
    void *ctx;
    /* Next waiting request into *out; SL_AGAIN if none. Never blocks. */
    sl_status (*poll)(void *ctx, sl_sched_request *out);
    /* One new token, with its logprob record when params.n_logprobs >= 0
     * (else rec is NULL). SL_OK: delivered. SL_AGAIN: the consumer is full;
     * the scheduler keeps the token and pauses the sequence until a retry
     * succeeds. SL_ESTALE: the request is gone; the sequence is dropped
     * without finish(). Other negatives fail the request. */
    sl_status (*emit)(void *ctx, uint64_t id, int32_t token, const sl_logprob_record *rec);
    /* The request ended (reason: sl_sched_finish_reason); error is a one-line
     * reason for SL_SCHED_FINISH_ERROR, else NULL. Called exactly once per
     * polled request (except after emit's SL_ESTALE). */
    void (*finish)(void *ctx, uint64_t id, int reason, const char *error, const sl_sched_timings *t);
    /* Whether the request was cancelled; read each step for each request the
     * scheduler holds. */
    bool (*cancelled)(void *ctx, uint64_t id);
    /* Sleeps until new work may be there or timeout_ns passed (the doorbell). */
    void (*wait)(void *ctx, uint64_t timeout_ns);
    /* The monotonic clock, in ns. */
    uint64_t (*now_ns)(void *ctx);
    /* After every step: publish in-flight, peak, KV usage, heartbeat. */
    void (*step_done)(void *ctx, const sl_sched_stats *s);
    /* Optional (NULL: nothing): the batch is planned and its forward starts
     * now, n_seqs sequences carrying n_tokens new tokens; the worker beats
     * with a bound for a step of that size. */
    void (*step_begin)(void *ctx, int32_t n_seqs, int32_t n_tokens);
    /* Optional (NULL: nothing): the request was admitted for the first time,
     * its first n_cached_tokens prompt tokens found in the prefix cache
     * (before any emit for it; finish's timings say it again). */
    void (*admitted)(void *ctx, uint64_t id, int32_t n_cached_tokens);
    /* Optional (NULL: no bound): entries the request's consumer can take now
     * without an SL_AGAIN. A step emits at most this many prompt records for
     * an echo request; without it a full consumer's SL_AGAIN stops them, and
     * the positions not delivered are computed again later. */
    uint32_t (*ring_space)(void *ctx, uint64_t id);
} sl_sched_io;

/* A config value and where it came from, as effective-config shows it. */
typedef struct {
    int64_t value;
    uint32_t source;             /* sl_sched_source */
    uint32_t _pad;
} sl_sched_knob;

/* The scheduler's part of the effective-config snapshot: plain fixed-width
 * data, so the glue can copy it into the shared segment as is. */
typedef struct {
    char kind[16];               /* "continuous" */
    char model[128];             /* the model's name ("" if unknown) */
    char backend[16];            /* the backend's name */
    sl_sched_knob max_in_flight; /* max_seqs */
    sl_sched_knob window_ms;
    sl_sched_knob prefill_chunk_size;
    sl_sched_knob token_budget;
    sl_sched_knob staggered_prefill;
    sl_sched_knob ttft_trace;
    sl_sched_knob kv_block_size;
    sl_sched_knob kv_blocks;
    sl_sched_knob prefix_cache;
    int32_t slots_admitted;      /* live sequences admission can reach: min(max_seqs, KV blocks) */
    char admission_ceiling_reason[64]; /* which of the two binds, in words */
    int32_t in_flight_now;
    int32_t peak_in_flight;
    int32_t queue_capacity;      /* requests the scheduler holds waiting (the ring holds more) */
    int32_t n_vocab;
    int32_t n_ctx;               /* longest sequence: prompt + max_tokens must fit */
    uint64_t kv_bytes;           /* bytes the backend's KV cache takes */
} sl_sched_snapshot;

typedef struct sl_sched sl_sched;

/* Creates a scheduler over `be` (not owned) for a model of
 * n_vocab tokens and n_ctx positions per sequence; eog holds n_eog end-of-
 * generation ids (copied). cfg is copied; io is copied. Allocates everything
 * a step needs. Returns SL_OK with *out set; SL_EINVAL with err naming the
 * bad value (a knob out of range, a block size or count the backend does not
 * have, a token budget over the backend's max_batch_tokens, max_seqs over
 * its max_batch_seqs); SL_ENOMEM. On
 * failure *out is NULL. */
sl_status sl_sched_create(sl_backend *be, int32_t n_vocab, int32_t n_ctx, const int32_t *eog, int32_t n_eog,
                          const sl_sched_config *cfg, const sl_sched_io *io, sl_sched **out,
                          char err[SL_ERR_LEN]);

/* Frees the scheduler. Requests it still holds are not finished (the worker
 * is exiting; the master fails their mailboxes). NULL is a no-op. */
void sl_sched_destroy(sl_sched *s);

/* Runs one iteration: cancels, emit retries, intake, admission, one
 * forward with its draws, emits, finishes. Never blocks, never allocates
 * (the backend's first sampling call may, once: kernels/backend.h).
 * Returns SL_OK when a forward ran (successfully or not: a failed step has
 * already failed its requests); SL_AGAIN when there was nothing to run (idle,
 * every sequence parked, or the batch window still open): the caller waits
 * sl_sched_wait_ns() and calls again. */
sl_status sl_sched_step(sl_sched *s);

/* The part of a step that runs no forward, for a paused worker (admin
 * `pause`): cancels (held requests, live or waiting, end at once) and intake
 * into free slots (they wait; nothing is admitted, no emit is retried), then
 * refreshes the stats' in_flight, n_waiting and kv_blocks_free. Never blocks,
 * never allocates; step_done is not called. */
void sl_sched_step_paused(sl_sched *s);

/* After a step returned SL_AGAIN: how long the caller may sleep on the
 * doorbell before the next step is due (window deadline, parked emits'
 * retry interval, or the idle heartbeat interval). */
uint64_t sl_sched_wait_ns(const sl_sched *s);

/* Loops sl_sched_step until *stop is non-zero, calling io.wait whenever a
 * step returns SL_AGAIN. Returns when *stop is set (checked every step). */
void sl_sched_run(sl_sched *s, volatile int *stop);

/* The latest stats (as last passed to step_done). */
void sl_sched_stats_get(const sl_sched *s, sl_sched_stats *out);

/* Fills the effective-config snapshot from the config, backend and counters. */
void sl_sched_snapshot_fill(const sl_sched *s, sl_sched_snapshot *out);

/* The accounting checker (docs/SCHEDULER.md invariants 1-13), for
 * `assert(sl_sched_check(s))` in debug builds and for tests. Returns 1 if
 * every invariant holds, else 0. O(slots + KV blocks). */
int sl_sched_check(const sl_sched *s);

#endif
