/* tests/unit/gpu-worker/fake_io.h: a scripted outside world for scheduler
 * tests: requests arrive at set times on a fake clock, emits and finishes are
 * recorded with their times, cancels and full consumer rings are injected
 * (scripted SL_AGAINs, or a small ring its reader drains slowly), and `wait`
 * jumps the clock to the next arrival. Request i has id i. */
#ifndef SL_TEST_FAKE_IO_H
#define SL_TEST_FAKE_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu-worker/scheduler.h"

#define FAKE_MAX_TOKENS 512
#define FAKE_MAX_STEPS 20000

typedef struct {
    /* script */
    sl_sched_request req;         /* id, prompt, params, limits; submit_ns is set from arrive_ns */
    uint64_t arrive_ns;
    int32_t cancel_after;         /* cancel once this many tokens were emitted; 0 = never */
    uint64_t cancel_at_ns;        /* cancel once the clock reaches this; 0 = never */
    int32_t again_at;             /* emit of token index again_at answers SL_AGAIN ... */
    int32_t again_count;          /* ... this many times */
    int32_t fail_emit_at;         /* emit of token index fail_emit_at - 1 fails with SL_EIO; 0 never */
    int32_t ring_cap;             /* a token ring of this many entries (0: unbounded): an emit into a full
                                     one answers SL_AGAIN; the reader takes one entry per step and per wait */
    /* results */
    int32_t tokens[FAKE_MAX_TOKENS];
    uint64_t token_ns[FAKE_MAX_TOKENS];
    float logprob[FAKE_MAX_TOKENS];   /* each token's record (params.n_logprobs >= 0), else 0 */
    float top_logprob[FAKE_MAX_TOKENS];   /* and its first alternative's */
    sl_logprob_record *records;   /* caller storage of FAKE_MAX_TOKENS: each token's whole record; NULL none */
    int32_t n_tokens;
    int32_t n_read;               /* entries the reader took (ring_cap) */
    int32_t n_full;               /* emits that found the ring full */
    int32_t n_records;            /* emits that carried a record */
    bool polled, cancel, finished, rec_missing;
    int reason;
    char error[160];
    sl_sched_timings t;
    uint64_t finish_ns;
    uint64_t finish_step;         /* steps run when finish was called */
    uint64_t cancel_step;         /* steps run when the cancel flag went up */
} fake_req;

typedef struct {
    uint64_t clock;
    fake_req *reqs;               /* sorted by arrive_ns */
    int n_reqs, next, n_finished;
    volatile int stop;
    uint64_t steps;
    sl_sched_stats stats[FAKE_MAX_STEPS];   /* per step, as step_done got them */
    uint64_t step_end_ns[FAKE_MAX_STEPS];
    uint64_t clock_limit_ns;      /* stop when the clock passes this (a hung test) */
} fake_io;

/* Sets up `io` (caller storage, zeroed here) over n requests. */
void fake_io_init(fake_io *f, fake_req *reqs, int n);

/* The io table pointing at f. */
sl_sched_io fake_io_table(fake_io *f);

#endif
