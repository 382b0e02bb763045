/* shared/shm.h: the shared-memory segment that joins master, front ends and worker.
 * Where:     one POSIX shm segment per server instance (layout in shared/shm_layout.h);
 *            each process holds an opaque sl_shm_t handle into it.
 * Who:       the master creates, destroys and recovers; a front end (one per slot)
 *            submits requests and drains token streams; the one worker pops
 *            requests, writes tokens and results. Each call below names its caller.
 * Safety:    any process may die at any instruction. Every shared transition is one
 *            compare-and-swap on one 64-bit word, or a single-writer store published
 *            with release order; no lock or counting semaphore is ever held. The
 *            recovery calls put the segment back in order after a death
 *            (docs/SHARED_MEMORY.md has the state machine and the invariants).
 * Ownership: the segment owns nothing outside itself; eventfds belong to the master,
 *            which passes their numbers to each handle (sl_shm_set_eventfds).
 * Errors:    SL_OK; SL_AGAIN = full/empty/timeout (not an error; a full queue is
 *            this); SL_ERANGE = an index outside its object; SL_ESTALE = the mailbox
 *            was recycled or this process's generation is over (the write was
 *            dropped and nothing changed); SL_ESTATE = wrong state for the call;
 *            SL_EINVAL, SL_EIO, SL_EFORMAT on create/attach with `err` filled. */
#ifndef SL_SHM_H
#define SL_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "shared/sampling.h"
#include "shared/status.h"

#define SL_SHM_SLOTS_MAX 256        /* front-end slots per segment */
#define SL_SHM_MAILBOXES_MAX 65535  /* pool size bound: keeps recovery's full scans short */
#define SL_SHM_ERROR_LEN 128        /* a mailbox's error text, NUL included */
#define SL_SHM_CONFIG_MAX 8192      /* the worker's effective-config snapshot, bytes */
#define SL_SHM_MODEL_ID_LEN 64      /* model identity string in the header, NUL included */
#define SL_SHM_GRAMMAR_BYTES_MAX (256u * 1024u) /* grammar_bytes_max bound (SL_GRAMMAR_TEXT_MAX) */

/* Sizes of everything, fixed at creation and stored in the header. Every field is
 * checked by sl_shm_create and again by every attach. */
typedef struct {
    uint32_t n_slots;              /* front-end slots, 1..SL_SHM_SLOTS_MAX */
    uint32_t n_mailboxes;          /* mailbox pool size, 1..SL_SHM_MAILBOXES_MAX */
    uint32_t submit_ring_entries;  /* per front-end slot; power of two, 2..65536 */
    uint32_t token_ring_entries;   /* per mailbox; power of two, 2..65536 */
    uint32_t prompt_tokens_max;    /* longest prompt one mailbox may carry (the model context) */
    uint32_t prompt_block_tokens;  /* tokens per prompt-arena block, 16..65536 */
    uint32_t prompt_arena_blocks;  /* blocks in the shared prompt arena (all mailboxes) */
    uint32_t logprobs;             /* 1 = every token entry has an sl_logprob_record beside it */
    uint32_t submit_queue_depth;   /* per front-end slot: requests that may wait in its ring at
                                      once (the user's queue depth, any value), 1..submit_ring_entries;
                                      0 = submit_ring_entries */
    uint32_t grammar_bytes_max;    /* longest GBNF text one mailbox may carry, 0..SL_SHM_GRAMMAR_BYTES_MAX;
                                      0 = constrained decoding off (a request with a grammar is SL_EINVAL) */
} sl_shm_limits;

/* Fills `l` with serving defaults: 8 slots, 1024 mailboxes, 256 ring entries,
 * 256 token entries, prompts up to 32768 tokens in 256-token blocks, an arena of
 * 4096 blocks (1 Mi tokens, 4 MiB), logprobs on, queue depth = ring entries,
 * grammar texts up to 65536 bytes (backed only when written: shm_layout.h). */
void sl_shm_limits_default(sl_shm_limits *l);

/* Mailbox states. The transitions and the party allowed to make each one are in
 * docs/SHARED_MEMORY.md; in short: FREE -claim-> CLAIMED -submit-> SUBMITTED
 * (front end), SUBMITTED -pop-> RUNNING -finish-> FINISHED|FAILED|CANCELLED
 * (worker), terminal -release-> FREE (front end). */
typedef enum {
    SL_MAILBOX_STATE_FREE = 0,      /* in the pool */
    SL_MAILBOX_STATE_CLAIMED = 1,   /* a front end is writing the request */
    SL_MAILBOX_STATE_SUBMITTED = 2, /* published; waits for the worker */
    SL_MAILBOX_STATE_RUNNING = 3,   /* taken by the worker; tokens flow */
    SL_MAILBOX_STATE_FINISHED = 4,  /* done: finish reason stop or length */
    SL_MAILBOX_STATE_FAILED = 5,    /* done with an error (error text set) */
    SL_MAILBOX_STATE_CANCELLED = 6, /* done because the front end asked */
} sl_mailbox_state;

typedef enum {
    SL_FINISH_REASON_NONE = 0,      /* still running */
    SL_FINISH_REASON_STOP = 1,      /* EOS or a stop condition */
    SL_FINISH_REASON_LENGTH = 2,    /* max_tokens or the context reached */
    SL_FINISH_REASON_CANCELLED = 3, /* the front end cancelled */
    SL_FINISH_REASON_ERROR = 4,     /* see the error text */
} sl_finish_reason;

typedef enum {
    SL_WORKER_STATE_STARTING = 0,   /* forked, not yet attached */
    SL_WORKER_STATE_LOADING = 1,    /* loading the model */
    SL_WORKER_STATE_READY = 2,      /* serving */
    SL_WORKER_STATE_DEAD = 3,       /* the master saw it die (set by recovery) */
} sl_worker_state;

typedef enum {
    SL_SHM_ROLE_MASTER = 0,
    SL_SHM_ROLE_FRONTEND = 1,
    SL_SHM_ROLE_WORKER = 2,
} sl_shm_role;

/* Names a request: its mailbox and the incarnation it was claimed under. Every
 * call that writes a mailbox checks both, so a late write lands nowhere. */
typedef struct {
    uint32_t index;
    uint32_t incarnation;
} sl_shm_ticket;

/* A request as a front end hands it in (process-local; copied into the mailbox). */
typedef struct {
    sl_sampling_params params;
    int32_t max_tokens;            /* generated tokens at most */
    int32_t min_tokens;            /* EOS is ignored before this many (vLLM) */
    uint32_t ignore_eos;           /* 1 = never stop on EOS (vLLM) */
    uint64_t request_id;           /* for logs */
    const int32_t *prompt;         /* n_prompt token ids */
    uint32_t n_prompt;             /* 1..limits.prompt_tokens_max */
    const char *grammar;           /* GBNF text (model/grammar/grammar.h) the output must match;
                                      NULL = unconstrained */
    uint32_t grammar_len;          /* bytes of grammar, 0..limits.grammar_bytes_max */
    uint32_t echo_logprobs;        /* 1 = the prompt's own logprobs come first (/v1/completions echo with
                                      logprobs): the first n_prompt - 1 token entries are prompt tokens 1..
                                      n_prompt - 1, each with the record of its logits row (the row before
                                      it; params.n_logprobs alternatives), then the generated tokens.
                                      max_tokens may then be 0 (only those entries). Needs limits.logprobs */
} sl_shm_request;

/* Per-request timings, CLOCK_MONOTONIC ns; 0 = not reached. Written by the worker
 * (queued_ns by the front end at submission). */
typedef struct {
    uint64_t queued_ns;            /* submitted */
    uint64_t admitted_ns;          /* popped by the worker */
    uint64_t first_token_ns;
    uint64_t last_token_ns;
    uint32_t n_prompt_tokens;
    uint32_t n_generated;
} sl_shm_timings;

/* A finished request's result, copied out by sl_shm_result. */
typedef struct {
    sl_mailbox_state state;
    sl_finish_reason finish_reason;
    sl_shm_timings timings;
    uint32_t cached_tokens;        /* prompt tokens the worker's prefix cache held (0 = none or off) */
    char error[SL_SHM_ERROR_LEN];
} sl_shm_result_info;

typedef struct sl_shm sl_shm_t;

/* ---- segment lifecycle (master) ------------------------------------------------ */

/* Creates segment `name` ("/sluice-<id>"), mode 0600, sized from `limits` and
 * reserved with posix_fallocate, so a small /dev/shm fails here, not with SIGBUS
 * later. A segment of that name whose creator is dead (or whose header is not
 * ours) is unlinked and replaced; one whose creator is alive is refused.
 * Returns the master's handle, or NULL with `err` filled. Destroy with sl_shm_destroy. */
sl_shm_t *sl_shm_create(const char *name, const sl_shm_limits *limits, char err[SL_ERR_LEN]);

/* Attaches to an existing segment as a front end (`slot` < n_slots) or the worker
 * (`slot` ignored). Refuses, with `err` naming the field, a segment of another
 * magic, layout version, struct size or inconsistent sizes. A front end records
 * its slot's generation, the worker the worker generation: after the master's
 * recovery bumps them, this handle's writes return SL_ESTALE.
 * Returns the handle or NULL. Free with sl_shm_detach. */
sl_shm_t *sl_shm_attach(const char *name, sl_shm_role role, uint32_t slot, char err[SL_ERR_LEN]);

/* A second handle over the mapping of `h`, for another thread of the same process
 * (a threaded front end or test harness): same checks and generation rules as
 * sl_shm_attach, no new mapping. Free it with sl_shm_detach before `h`.
 * Returns NULL with `err` filled on a bad role or slot. */
sl_shm_t *sl_shm_attach_shared(const sl_shm_t *h, sl_shm_role role, uint32_t slot, char err[SL_ERR_LEN]);

/* sl_shm_destroy: unmaps and, for the handle sl_shm_create returned, unlinks the
 * segment. sl_shm_detach: unmaps only. NULL is a no-op for both. */
void sl_shm_destroy(sl_shm_t *h);
void sl_shm_detach(sl_shm_t *h);

/* Gives the handle the eventfd numbers of the front-end slots (fds[i] for slot i,
 * -1 = none); the numbers are copied, the fds stay the caller's. Returns SL_ERANGE
 * if n > n_slots. */
sl_status sl_shm_set_eventfds(sl_shm_t *h, const int *fds, uint32_t n);

/* The limits the segment was created with (copied at attach, validated). */
const sl_shm_limits *sl_shm_get_limits(const sl_shm_t *h);

/* ---- front end ------------------------------------------------------------------ */

/* Claims a free mailbox, copies `req` and its prompt into it and publishes it in
 * this slot's submission ring, then rings the worker's doorbell. Never blocks.
 * Returns SL_OK with *ticket set; SL_AGAIN when no mailbox or prompt block is
 * free or submit_queue_depth requests already wait in this slot's ring (answer
 * 429; nothing was taken); SL_EINVAL for a prompt of 0 or more than
 * prompt_tokens_max tokens, or a grammar (grammar_len > 0) longer than
 * grammar_bytes_max, holding a NUL byte, or sent while grammar_bytes_max is 0;
 * SL_ENOMEM when /dev/shm has no room left to back the grammar text (nothing
 * was taken); SL_ESTALE if this slot was reclaimed.
 * On failure *ticket is {UINT32_MAX, 0}. One thread per slot may call this. */
sl_status sl_shm_submit(sl_shm_t *fe, const sl_shm_request *req, sl_shm_ticket *ticket /* OUT */);

/* Copies up to n_max new tokens of the request (and their logprob records when
 * `records` is non-NULL and the segment carries them) and frees their ring entries.
 * *state is the mailbox state loaded before the tokens were read: when it is
 * terminal and *n_read < n_max, the stream is complete. Returns SL_OK (maybe 0
 * tokens), SL_ERANGE, SL_ESTALE (mailbox not ours any more); on error *n_read = 0. */
sl_status sl_shm_read_tokens(sl_shm_t *fe, sl_shm_ticket t, int32_t *tokens, sl_logprob_record *records,
                             uint32_t n_max, uint32_t *n_read /* OUT */, sl_mailbox_state *state /* OUT */);

/* Asks the worker to stop the request: sets the cancel flag (read by the worker at
 * its next step); a request still SUBMITTED goes straight to CANCELLED. Returns
 * SL_OK, SL_ERANGE, SL_ESTALE. */
sl_status sl_shm_cancel(sl_shm_t *fe, sl_shm_ticket t);

/* Copies the state and, once terminal, the finish reason, timings and error text
 * (for the worker's handle the timings also while RUNNING: it writes them).
 * Returns SL_OK, SL_ERANGE, SL_ESTALE. */
sl_status sl_shm_result(sl_shm_t *h, sl_shm_ticket t, sl_shm_result_info *out /* OUT */);

/* Returns a finished, failed or cancelled mailbox (and its prompt blocks) to the
 * pool. Legal only once the worker let go: SL_ESTATE while SUBMITTED or RUNNING.
 * Returns SL_OK, SL_ERANGE, SL_ESTALE, SL_ESTATE. */
sl_status sl_shm_release(sl_shm_t *fe, sl_shm_ticket t);

/* ---- worker --------------------------------------------------------------------- */

/* Sleeps on the doorbell until a submission arrives or `timeout_ns` passes
 * (CLOCK_MONOTONIC). Returns SL_OK at once if any ring holds an entry, SL_OK on a
 * wake, SL_AGAIN on timeout. Blocks. */
sl_status sl_shm_worker_wait(sl_shm_t *w, uint64_t timeout_ns);

/* Takes the next submitted request, round robin over the slots, and marks it
 * RUNNING under this worker's generation. Stale ring entries (recycled or
 * cancelled mailboxes, out-of-range indices) are skipped and counted.
 * Returns SL_OK with *ticket, SL_AGAIN if nothing is waiting, SL_ESTALE if this
 * worker's generation is over. */
sl_status sl_shm_worker_pop(sl_shm_t *w, sl_shm_ticket *ticket /* OUT */);

/* The request of a RUNNING mailbox, read-only, for the worker's admission (the
 * worker validates params itself). NULL on a bad or stale ticket. The prompt
 * tokens are copied with sl_shm_prompt_copy. */
typedef struct sl_mailbox_shm sl_mailbox_shm;
const sl_mailbox_shm *sl_shm_mailbox(const sl_shm_t *h, sl_shm_ticket t);

/* Copies the request's parameters out of the mailbox. */
sl_status sl_shm_request_get(const sl_shm_t *h, sl_shm_ticket t, sl_sampling_params *params /* OUT */,
                             int32_t *max_tokens /* OUT */, int32_t *min_tokens /* OUT */,
                             uint32_t *ignore_eos /* OUT */, uint64_t *request_id /* OUT */,
                             uint32_t *n_prompt /* OUT */);

/* 1 if the request asked for its prompt's logprobs first (sl_shm_request.echo_logprobs),
 * else 0 (also for a bad or stale ticket). */
uint32_t sl_shm_request_echo(const sl_shm_t *h, sl_shm_ticket t);

/* The GBNF text of a RUNNING mailbox, in place (not NUL-terminated): *text and
 * *len (0 and NULL for an unconstrained request). The bytes stay valid until the
 * worker finishes the request. Returns SL_OK; SL_ERANGE (bad index, or a stored
 * length past grammar_bytes_max); SL_ESTALE (recycled); SL_ESTATE (not RUNNING).
 * On failure *text is NULL and *len 0. */
sl_status sl_shm_grammar_get(const sl_shm_t *w, sl_shm_ticket t, const char **text /* OUT */,
                             uint32_t *len /* OUT */);

/* Copies prompt tokens [from, from + n) into dst. Returns SL_OK, SL_ERANGE. */
sl_status sl_shm_prompt_copy(const sl_shm_t *h, sl_shm_ticket t, uint32_t from, uint32_t n, int32_t *dst);

/* Appends one token (and its record when the segment carries records; rec may be
 * NULL then, giving a zeroed record) to a RUNNING mailbox and marks its front end
 * dirty for the next sl_shm_worker_flush_wakeups. Returns SL_OK; SL_AGAIN if the
 * ring is full (pause the sequence until drained); SL_ESTALE if recycled or this
 * worker is stale (nothing written); SL_ESTATE if not RUNNING; SL_ERANGE. */
sl_status sl_shm_worker_push(sl_shm_t *w, sl_shm_ticket t, int32_t token, const sl_logprob_record *rec);

/* Free token-ring entries of a RUNNING mailbox (0 if stale). */
uint32_t sl_shm_worker_ring_space(const sl_shm_t *w, sl_shm_ticket t);

/* 1 if the front end asked to cancel (or died), else 0 (also for a stale ticket). */
int sl_shm_worker_cancelled(const sl_shm_t *w, sl_shm_ticket t);

/* Ends a RUNNING request: FINISHED for STOP/LENGTH, CANCELLED, or FAILED for ERROR
 * with `error` (may be NULL) as its text. A mailbox whose front end died goes
 * straight back to FREE. Marks the front end dirty. Returns SL_OK, SL_ESTALE,
 * SL_ESTATE, SL_ERANGE, SL_EINVAL (reason NONE). */
sl_status sl_shm_worker_finish(sl_shm_t *w, sl_shm_ticket t, sl_finish_reason reason, const char *error);

/* Sets when a RUNNING request's computation began (the scheduler's admission,
 * or the start of the step with its first prefill chunk), replacing the pop
 * time, so queue and prompt times reported to the client are the scheduler's
 * own. Returns SL_OK, SL_ESTALE, SL_ESTATE, SL_ERANGE. */
sl_status sl_shm_worker_set_admitted(sl_shm_t *w, sl_shm_ticket t, uint64_t admitted_ns);

/* Records how many of a RUNNING request's prompt tokens came from the
 * worker's prefix cache (usage.prompt_tokens_details.cached_tokens); call it
 * before the request's first token, so sl_shm_result reads it from then on,
 * terminal or not. Returns SL_OK, SL_ESTALE, SL_ESTATE, SL_ERANGE. */
sl_status sl_shm_worker_set_cached(sl_shm_t *w, sl_shm_ticket t, uint32_t n_cached_tokens);

/* Writes each dirty front end's eventfd once and clears the marks: call once per
 * step. Returns the number of eventfd writes. */
uint32_t sl_shm_worker_flush_wakeups(sl_shm_t *w);

/* Heartbeat: a new step begins at now_ns and may take up to max_step_ns (from its
 * token budget). Call with max_step_ns = 0 for an idle beat. */
void sl_shm_heartbeat(sl_shm_t *w, uint64_t now_ns, uint64_t max_step_ns);

/* Sets the worker state and the model identity (may be NULL: unchanged). Set the
 * identity at most once per worker, before or with READY: readers copy it once
 * they see READY, so it must not change under them. */
void sl_shm_set_worker_state(sl_shm_t *w, sl_worker_state state, const char *model_id);

/* Pause (admin `pause`/`resume`; master): while set, the worker runs no forward
 * step but keeps beating, honouring cancellations and taking requests into its
 * free scheduler slots. The flag lives in the segment, so a worker restarted
 * while paused starts paused. sl_shm_paused: 1 if set (anyone). */
void sl_shm_set_paused(sl_shm_t *m, int paused);
int sl_shm_paused(const sl_shm_t *h);

/* ---- anyone --------------------------------------------------------------------- */

typedef struct {
    uint32_t worker_generation;
    sl_worker_state worker_state;
    int32_t worker_pid;
    uint64_t step;                 /* steps begun */
    uint64_t step_start_ns;        /* start of the current step (or last idle beat) */
    uint64_t step_max_ns;          /* longest the current step may take; 0 = idle */
    char model_id[SL_SHM_MODEL_ID_LEN]; /* set with READY; "" in other states */
} sl_shm_worker_info;

void sl_shm_worker_info_get(const sl_shm_t *h, sl_shm_worker_info *out /* OUT */);

/* 1 if the worker is READY and its current step (or idle beat) started no longer
 * than step_max_ns + slack_ns before now_ns: busy but progressing counts as alive. */
int sl_shm_worker_alive(const sl_shm_t *h, uint64_t now_ns, uint64_t slack_ns);

/* CLOCK_MONOTONIC in ns. */
uint64_t sl_shm_now_ns(void);

/* Publishes the worker's effective-config snapshot (text, up to SL_SHM_CONFIG_MAX
 * bytes) under a sequence counter. Returns SL_OK or SL_ERANGE (too long). */
sl_status sl_shm_config_publish(sl_shm_t *w, const char *text, size_t len);

/* Copies a consistent snapshot into buf (NUL-terminated; cap >= len + 1).
 * Returns SL_OK with *len; SL_AGAIN if none is published yet or a writer kept
 * it busy (retry later); SL_ERANGE if cap is too small. */
sl_status sl_shm_config_read(const sl_shm_t *h, char *buf, size_t cap, size_t *len /* OUT */);

/* Shared counters (monotonic, any process adds). */
typedef enum {
    SL_COUNTER_REQUESTS_SUBMITTED = 0,
    SL_COUNTER_REQUESTS_REJECTED_FULL,    /* submit returned SL_AGAIN */
    SL_COUNTER_REQUESTS_FINISHED,
    SL_COUNTER_REQUESTS_FAILED,
    SL_COUNTER_REQUESTS_CANCELLED,
    SL_COUNTER_TOKENS_GENERATED,
    SL_COUNTER_PROMPT_TOKENS,
    SL_COUNTER_STALE_ENTRIES_SKIPPED,      /* worker skipped a dead ring entry */
    SL_COUNTER_WORKER_RESTARTS,            /* the master, when it plans a restart (not recovery: a drain's exits count none) */
    SL_COUNTER_FRONTEND_RESTARTS,          /* likewise */
    SL_COUNTER_PREFIX_QUERY_TOKENS,        /* worker: prompt tokens looked up in the prefix cache */
    SL_COUNTER_PREFIX_HIT_TOKENS,          /* worker: of those, found cached */
    SL_COUNTER_GRAMMAR_REQUESTS,           /* worker: requests that ran with a grammar (compiled) */
    SL_COUNTER_GRAMMAR_MASK_NS,            /* worker: ns spent computing grammar token masks */
    SL_COUNTER_SUCCESS_STOP,               /* front end: choices answered, by finish reason: stop */
    SL_COUNTER_SUCCESS_LENGTH,             /*   length (max_tokens or the context) */
    SL_COUNTER_SUCCESS_TOOL_CALLS,         /*   tool_calls */
    SL_COUNTER_SUCCESS_ABORT,              /* front end: choices abandoned before their end (client gone,
                                              write timeout, drain deadline) */
    SL_COUNTER_COUNT
} sl_counter;
#define SL_SHM_COUNTERS_MAX 64             /* room reserved in the header */

void sl_shm_counter_add(sl_shm_t *h, sl_counter c, uint64_t n);
uint64_t sl_shm_counter_get(const sl_shm_t *h, sl_counter c);

/* Histograms with fixed bucket bounds. A histogram counts either nanoseconds
 * (SL_SHM_HISTOGRAM_UNIT_NS: vLLM's latency scale, 1 ms .. 80 s) or tokens
 * (SL_SHM_HISTOGRAM_UNIT_TOKENS: 1, 2, 5, 10, .. 2,000,000); the unit is fixed
 * per histogram (sl_shm_histogram_unit). Observed per choice at its end by the
 * front end, except INTER_TOKEN (the worker, at every token after the first)
 * and MAX_GENERATION_TOKENS (the front end, once per request). */
typedef enum {
    SL_HISTOGRAM_TTFT = 0,                 /* ns: submission to first token */
    SL_HISTOGRAM_MEAN_INTER_TOKEN,         /* ns: (last - first token) / (tokens - 1), per choice */
    SL_HISTOGRAM_QUEUE,                    /* ns: submission to admission by the worker */
    SL_HISTOGRAM_E2E,                      /* ns: submission to the last token */
    SL_HISTOGRAM_INTER_TOKEN,              /* ns: each gap between two consecutive tokens of a choice */
    SL_HISTOGRAM_PREFILL,                  /* ns: admission to first token */
    SL_HISTOGRAM_DECODE,                   /* ns: first token to last token */
    SL_HISTOGRAM_INFERENCE,                /* ns: admission to last token */
    SL_HISTOGRAM_PROMPT_TOKENS,            /* tokens: prompt length */
    SL_HISTOGRAM_GENERATION_TOKENS,        /* tokens: tokens generated for the choice */
    SL_HISTOGRAM_MAX_GENERATION_TOKENS,    /* tokens: per request, the longest of its choices */
    SL_HISTOGRAM_COUNT
} sl_histogram;
#define SL_SHM_HISTOGRAM_BUCKETS 20        /* finite bounds; +Inf is one more */

typedef enum {
    SL_SHM_HISTOGRAM_UNIT_NS = 0,
    SL_SHM_HISTOGRAM_UNIT_TOKENS,
} sl_shm_histogram_unit_t;

/* The unit of `which` (NS for an unknown one). */
sl_shm_histogram_unit_t sl_shm_histogram_unit(sl_histogram which);

/* The upper bounds (ascending, in the histogram's unit) of its
 * SL_SHM_HISTOGRAM_BUCKETS finite buckets. */
const uint64_t *sl_shm_histogram_bounds(sl_histogram which);

/* Adds one sample (atomic; any process). */
void sl_shm_histogram_observe(sl_shm_t *h, sl_histogram which, uint64_t value /* in its unit */);

/* Reads Prometheus-style cumulative counts: cumulative[i] = samples <= bound i,
 * cumulative[SL_SHM_HISTOGRAM_BUCKETS] = all samples (+Inf); *sum the sum of the
 * samples in the histogram's unit. */
void sl_shm_histogram_read(const sl_shm_t *h, sl_histogram which,
                           uint64_t cumulative[SL_SHM_HISTOGRAM_BUCKETS + 1] /* OUT */,
                           uint64_t *sum /* OUT */);

/* ---- recovery (master) ---------------------------------------------------------- */

/* After the worker died (reaped: it must not run any more): bumps the worker
 * generation, sets state DEAD, fails every RUNNING mailbox ("worker died"; it is
 * never replayed), frees RUNNING mailboxes whose front end died, keeps SUBMITTED
 * ones for the next worker, and writes every front end's eventfd.
 * *n_failed (may be NULL) = mailboxes failed. Idempotent. */
sl_status sl_shm_recover_worker_death(sl_shm_t *m, uint32_t *n_failed /* OUT */);

/* After the front end of `slot` died (reaped), before its successor attaches:
 * bumps the slot generation, returns its CLAIMED, SUBMITTED and terminal mailboxes
 * and their prompt blocks to the pool, sets the cancel flag of its RUNNING ones and
 * hands them to the worker (which frees them when it lets go), and frees prompt
 * blocks a death left unrecorded. *n_reclaimed (may be NULL) = mailboxes freed or
 * orphaned. Returns SL_OK or SL_ERANGE. Idempotent. */
sl_status sl_shm_recover_frontend_death(sl_shm_t *m, uint32_t slot, uint32_t *n_reclaimed /* OUT */);

/* A census for tests and /metrics: mailboxes per state and free prompt blocks. */
typedef struct {
    uint32_t mailboxes[7];          /* indexed by sl_mailbox_state */
    uint32_t orphans;               /* RUNNING mailboxes whose front end died */
    uint32_t blocks_free;
    uint32_t ring_used[SL_SHM_SLOTS_MAX]; /* entries waiting in each slot's ring */
} sl_shm_census_info;

void sl_shm_census(const sl_shm_t *h, sl_shm_census_info *out /* OUT */);

/* Checks the segment's invariants (docs/SHARED_MEMORY.md section 3): states and
 * owners well-formed, rings and token rings within bounds, block tables in range.
 * With `quiescent` (no process is inside a library call) also that every owned
 * prompt block belongs to a live mailbox's table and every free mailbox holds no
 * block. Returns SL_OK, or SL_EFORMAT with the first violation in `err`. Recovery
 * runs it in debug builds, inside assert. */
sl_status sl_shm_check(const sl_shm_t *h, int quiescent, char err[SL_ERR_LEN]);

/* ---- crash points (test builds only) -------------------------------------------- */

/* Numbered places where a test build (SLUICE_CRASH_POINTS defined) can SIGKILL
 * itself: sl_shm_crash_arm(point, nth) kills the process at the nth time `point`
 * is reached. Without SLUICE_CRASH_POINTS the points compile to nothing and arm
 * does nothing. */
enum {
    SL_CRASH_SUBMIT_CLAIMED = 1,      /* mailbox CLAIMED, no blocks yet */
    SL_CRASH_SUBMIT_BLOCK_TAKEN,      /* one prompt block taken, not yet in the table */
    SL_CRASH_SUBMIT_BLOCKS_DONE,      /* all blocks taken, prompt not written */
    SL_CRASH_SUBMIT_WRITTEN,          /* request written, ring entry not yet */
    SL_CRASH_SUBMIT_ENTRY,            /* ring entry written, state still CLAIMED */
    SL_CRASH_SUBMIT_STATE,            /* SUBMITTED, ring tail not yet published */
    SL_CRASH_SUBMIT_PUBLISHED,        /* tail published, doorbell not rung */
    SL_CRASH_POP_READ,                /* worker read an entry, mailbox not yet RUNNING */
    SL_CRASH_POP_TAKEN,               /* RUNNING, ring head not advanced */
    SL_CRASH_PUSH_WRITTEN,            /* token written, tail not published */
    SL_CRASH_PUSH_PUBLISHED,          /* tail published, front end not marked */
    SL_CRASH_FINISH_WRITTEN,          /* result fields written, state still RUNNING */
    SL_CRASH_FINISH_ORPHAN_BLOCKS,    /* orphan: blocks freed, state not FREE */
    SL_CRASH_READ_COPIED,             /* front end copied tokens, head not advanced */
    SL_CRASH_RELEASE_BLOCKS,          /* release: blocks freed, state not FREE */
    SL_CRASH_CANCEL_FLAG,             /* cancel flag set, SUBMITTED not yet CANCELLED */
    SL_CRASH_COUNT                    /* one past the last point */
};

/* Arms crash point `point` to fire at its nth hit (nth >= 1); point 0 disarms. */
void sl_shm_crash_arm(int point, uint32_t nth);

/* 1 if this build has crash points compiled in. */
int sl_shm_crash_points_enabled(void);

#endif
