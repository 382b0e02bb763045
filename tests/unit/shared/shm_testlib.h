/* tests/unit/shared/shm_testlib.h: an echo worker and a checking front-end client
 * over the shm library, shared by the process, crash-sweep and threaded tests.
 * The worker echoes each request's prompt back as its tokens; prompt token k of
 * request rid is tl_token(rid, k), so the client can tell a duplicated, missing,
 * reordered or misdelivered token from the value alone. */
#ifndef SL_SHM_TESTLIB_H
#define SL_SHM_TESTLIB_H

#include <stdint.h>

#include "shared/shm.h"

#define TL_PROMPT_MAX 1000   /* echo prompts: k < 1024 fits tl_token */
#define TL_SEQS_MAX 64
#define TL_OUT_MAX 64

static inline int32_t tl_token(uint64_t rid, uint32_t k) { return (int32_t)(((rid & 0xfffffu) << 10) | (k & 0x3ffu)); }

typedef struct {
    sl_shm_ticket t;
    uint32_t n_prompt, pos;
    int32_t prompt[TL_PROMPT_MAX];
} tl_seq;

typedef struct {
    sl_shm_t *w;
    uint32_t per_step;       /* tokens pushed per sequence per step */
    int n;
    uint64_t finished;       /* requests ended (any reason) */
    tl_seq seqs[TL_SEQS_MAX];
} tl_worker;

/* One scheduler step: pop what fits, push up to per_step tokens per sequence,
 * finish the complete or cancelled ones, flush wakeups. Returns the number of
 * actions taken (0 = idle), or -1 once this worker is stale. */
int tl_worker_step(tl_worker *tw);

typedef struct {
    sl_shm_ticket t;
    uint64_t rid;
    uint32_t n_prompt, got;
    int active;
} tl_out;

typedef struct {
    sl_shm_t *fe;
    uint64_t rid_base;       /* request ids rid_base + 0, 1, ... */
    uint32_t to_submit;      /* requests to send in all */
    uint32_t prompt_max;     /* prompt lengths vary in 1..prompt_max */
    uint32_t cancel_every;   /* 0 = never; else cancel each rid % cancel_every == 0 */
    uint32_t max_out;        /* in flight at most (<= TL_OUT_MAX) */
    uint32_t submitted, completed, finished, failed, cancelled, rejected;
    uint64_t tokens;
    uint32_t errors;
    char why[256];
    tl_out out[TL_OUT_MAX];
} tl_client;

/* Submits what it may, drains and checks every stream, releases finished
 * mailboxes. Returns actions taken (0 = nothing to do now). */
int tl_client_step(tl_client *c);

/* 1 when every submitted request completed. */
static inline int tl_client_done(const tl_client *c) { return c->completed == c->to_submit; }

/* A segment name unique to this process and a tag. */
void tl_name(char *buf, size_t cap, const char *tag);

#endif
