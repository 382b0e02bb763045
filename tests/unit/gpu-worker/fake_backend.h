/* tests/unit/gpu-worker/fake_backend.h: a deterministic backend for scheduler
 * tests. Its "KV cache" stores the token at each physical position, read back
 * through the block table, and a sequence's logits are a hash of its whole
 * history so read: a wrong block table, a stale block or a skipped token
 * changes the tokens. Each forward advances a fake clock by a cost
 * proportional to the tokens it carries, and can be made to fail. */
#ifndef SL_TEST_FAKE_BACKEND_H
#define SL_TEST_FAKE_BACKEND_H

#include <stdint.h>

#include "kernels/backend.h"

typedef struct {
    sl_backend base;          /* first: the scheduler sees an sl_backend */
    sl_model model;           /* only hp.n_vocab and name are set */
    int32_t *kv;              /* (n_kv_blocks * kv_block_size) token at each physical position, -1 unwritten */
    uint64_t *clock;          /* fake clock, ns */
    uint64_t cost_fixed_ns;   /* per forward */
    uint64_t cost_token_ns;   /* per new token */
    int64_t fail_at;          /* index of the forward call that returns SL_EBACKEND; -1 none */
    int64_t calls;            /* forward calls so far */
    int64_t prompt_tokens;    /* tokens fed as prompt rows so far (prefill and recompute) */
    /* fake_backend_sample_on_device: forward_sample draws with the reference
     * sampler from the rows forward makes, as a device would */
    struct sl_sampler_scratch *scratch;
    float *rows;              /* (max_batch_tokens, n_vocab) */
} fake_backend;

/* Sets up the fake, with forward only: sl_backend_forward_sample uses the
 * interface's default (forward, then the reference sampler on the host).
 * The clock must outlive it. Returns SL_OK or SL_ENOMEM. */
sl_status fake_backend_init(fake_backend *f, int32_t n_vocab, uint32_t block_size, uint32_t n_blocks,
                            int32_t max_batch_tokens, int32_t max_ctx, uint64_t *clock);
void fake_backend_fini(fake_backend *f);

/* Gives the fake its own forward_sample (before the scheduler is created),
 * drawing as a device would. SL_OK or SL_ENOMEM. */
sl_status fake_backend_sample_on_device(fake_backend *f);

#endif
