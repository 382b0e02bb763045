/* kernels/backend_check.h: the checks sl_backend_* runs before a backend's
 * slot, so no backend reads outside its KV cache or vocabulary on a bad
 * config, batch or sampling request. Internal to kernels/ (backend.c); the
 * sizes the interface promises (sl_backend_kv_block_bytes,
 * sl_batch_logit_rows, sl_backend_max_batch_seqs) live in backend_check.c
 * too, so a backend uses them without calling back into the registry.
 * Errors:    SL_OK or SL_EINVAL; nothing is modified. */
#ifndef SL_BACKEND_CHECK_H
#define SL_BACKEND_CHECK_H

#include "kernels/backend.h"

/* A config sl_backend_create accepts: threads, block size, batch limits and
 * context >= 1; n_kv_blocks >= 1 unless gpu_ok (0: size from device memory,
 * CUDA only); max_batch_seqs in [0, max_batch_tokens]. On SL_EINVAL err says
 * what was given. */
sl_status sl_backend_check_config(const sl_backend_config *cfg, bool gpu_ok, char err[SL_ERR_LEN]);

/* A batch sl_backend_forward accepts: 1..max_batch_seqs sequences, each with
 * n_tokens >= 1 inside max_ctx, a block table covering it with ids inside
 * the cache, token ids inside the vocabulary; max_batch_tokens in all. */
sl_status sl_backend_check_batch(const sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs);

/* What sl_backend_forward_sample accepts on top of the batch check: every
 * sequence logits_all false; where params are set, valid parameters
 * (sl_sampling_validate), a history pointer for a history count, ban ids
 * inside the vocabulary, a record where logprobs are asked. */
sl_status sl_backend_check_sample(const sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                  const sl_sample_req *reqs);

#endif
