/* kernels/cpu/sample_batch.h: a step's draws on the host: the logits rows
 * of a forward pass -> one token per sequence that asks, with the reference
 * sampler (kernels/cpu/sampler.h).
 * Where:     the CPU backend's forward_sample; sl_backend_forward_sample's
 *            default for a backend without that slot (kernels/backend.c).
 * Who:       one caller thread at a time; the rows are drawn on a thread
 *            pool, each thread with its own sampler scratch.
 * Guarantee: a row's token and record depend only on the row and its
 *            request (the sampler is a pure function of them and the seed
 *            counter), never on the other rows or the thread count.
 * Ownership: sl_sample_batch owns the rows and the scratch; the pool is
 *            borrowed (the CPU backend's) or owned (created here).
 * Errors:    SL_OK; SL_EINVAL for bad sizes; SL_ENOMEM. */
#ifndef SL_SAMPLE_BATCH_H
#define SL_SAMPLE_BATCH_H

#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/threadpool.h"

typedef struct sl_sample_batch sl_sample_batch;

/* Allocates rows for up to max_rows sequences of n_vocab logits and one
 * sampler scratch per thread: the threads of `pool` when it is given (it
 * must outlive the sl_sample_batch), else a pool of n_threads created here
 * (none when n_threads is 1: the caller draws alone). On failure *out is
 * NULL. Free with sl_sample_batch_destroy. */
sl_status sl_sample_batch_create(int32_t n_vocab, int32_t max_rows, sl_threadpool *pool, int n_threads,
                                 sl_sample_batch **out);

/* Frees it (and the pool it created); NULL is a no-op. */
void sl_sample_batch_destroy(sl_sample_batch *sb);

/* (max_rows, n_vocab) floats: where the forward pass writes row i for
 * sequence i. */
float *sl_sample_batch_rows(sl_sample_batch *sb);

/* Draws one token per reqs[i] with params (rows [0, n_rows)), in the steps of
 * sampler.h after the tokens the req's allow bitmap leaves out and its ban ids
 * are set to -inf in its row; the rows are modified. tokens[i] OUT: the id, or
 * -1 where none was asked, the sampler failed or an allow bitmap left nothing. reqs[i].record OUT where params->n_logprobs >= 0 (its token is -1
 * when the draw failed). The requests are validated by the caller
 * (sl_backend_forward_sample). Blocks until every row is drawn. */
void sl_sample_batch_draw(sl_sample_batch *sb, const sl_sample_req *reqs, int32_t n_rows, int32_t *tokens);

#endif
