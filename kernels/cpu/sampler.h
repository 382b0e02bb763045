/* kernels/cpu/sampler.h: one row of logits -> the next token (the reference;
 * a backend that samples on its device implements the same steps).
 * Where:     behind sl_backend_forward_sample (kernels/cpu/sample_batch.h
 *            draws a step's rows with it), once per sequence per step; the
 *            CUDA checks (tools/cudacheck) as the reference.
 * Who:       any thread, each with its own scratch; no global state.
 * Order:     1. NaN logits become -inf (bad model output never poisons a draw);
 *            2. logprobs (if asked) from these raw logits: float64 log-softmax,
 *               the chosen token's value and the top-n alternatives;
 *            3. logit bias (each entry added; duplicates add up);
 *            4. penalties over the window (the last penalty_last_n tokens of
 *               history): repetition (l > 0 ? l / r : l * r) and presence once
 *               per distinct token, frequency times its count;
 *            5. temperature == 0 (or not a finite positive number): argmax,
 *               ties to the lowest id; else
 *               6. top-k (partial selection), softmax of logits / temperature,
 *               top-p (smallest prefix by descending probability with mass
 *               >= top_p, at least one token), min-p (drop p < min_p * p_max),
 *               renormalise, one draw: the first kept token, in id order,
 *               whose running weight passes u * total. The device sampler
 *               (kernels/cuda/sample.cu) follows these steps in the same
 *               order, so the two agree on a row but for rounding at a
 *               boundary.
 * Random:    counter-based (sl_sampling_uniform): the draw is a pure function
 *            of (seed, draw_index),
 *            so a seeded request's output never depends on its batch peers
 *            and recompute after preemption lands on the same tokens.
 * Ties:      tokens are ordered by (logit descending, id ascending) wherever
 *            an order matters, so the result is identical on any thread.
 * Safety:    params are validated by the caller (sl_sampling_validate); the
 *            sampler still never reads or writes out of bounds on bad params
 *            (out-of-range tokens are skipped, counts are clamped, non-finite
 *            biases and penalties ignored), so after step 1 no NaN ever
 *            reaches a comparison.
 * Errors:    SL_OK; SL_EINVAL for NULL pointers or n_vocab beyond the scratch. */
#ifndef SL_SAMPLER_H
#define SL_SAMPLER_H

#include <stdint.h>

#include "shared/sampling.h"
#include "shared/status.h"

/* Per-thread scratch sized for a vocabulary, allocated once, reused for every
 * row. Opaque: its layout is the sampler's business. */
typedef struct sl_sampler_scratch sl_sampler_scratch;

/* Allocates scratch for rows of up to `n_vocab` logits.
 * Returns SL_OK with *out set; SL_EINVAL if n_vocab <= 0; SL_ENOMEM.
 * On failure *out is NULL. Free with sl_sampler_scratch_destroy. */
sl_status sl_sampler_scratch_create(int32_t n_vocab, sl_sampler_scratch **out);

/* Frees scratch from sl_sampler_scratch_create; NULL is a no-op. */
void sl_sampler_scratch_destroy(sl_sampler_scratch *s);

/* Picks the next token from one row of logits, in the order stated above.
 *   p          validated sampling parameters of the sequence.
 *   logits     the model's row (n_vocab floats); modified in place (bias,
 *              penalties): the caller must not reuse it afterwards.
 *   n_vocab    row length, at most the scratch's n_vocab.
 *   history    the sequence's tokens so far (prompt + generated); may be NULL
 *              when n_history is 0. Ids outside [0, n_vocab) are ignored.
 *   draw_index index of the output token being drawn (0 for the first).
 *   s          this thread's scratch.
 *   token      OUT: the chosen id, in [0, n_vocab).
 *   record     OUT if p->n_logprobs >= 0 (else may be NULL): the chosen
 *              token's logprob and min(n_logprobs, 20) alternatives sorted by
 *              logprob descending, ties by lower id.
 * Returns SL_OK; SL_EINVAL (bad pointer, n_vocab out of range, record NULL
 * while logprobs are asked), in which case *token is -1 when token is
 * non-NULL. Never allocates, never blocks. If every logit is -inf, or a +inf
 * logit makes the softmax undefined, the result is the argmax (lowest id). */
sl_status sl_sampler_sample(const sl_sampling_params *p, float *logits, int32_t n_vocab,
                            const int32_t *history, int32_t n_history, uint64_t draw_index,
                            sl_sampler_scratch *s, int32_t *token, sl_logprob_record *record);

/* The logprob record of a given token from one row, as step 2 above computes
 * it for a drawn one (the raw distribution: no bias, penalties or
 * temperature): the worker's prompt logprobs (echo), where the token is the
 * prompt's next one rather than a draw.
 *   logits     the model's row (n_vocab floats); NaN entries become -inf in
 *              place, nothing else changes.
 *   token      the id whose logprob is wanted, in [0, n_vocab).
 *   n_top      alternatives wanted, clamped to [0, min(20, n_vocab)].
 *   record     OUT: token, its logprob, the top alternatives sorted as
 *              sl_sampler_sample sorts them (logprob descending, lower id
 *              first on ties).
 * Returns SL_OK; SL_EINVAL (NULL pointer, n_vocab <= 0, token out of range),
 * with *record untouched. Needs no scratch; never allocates, never blocks. */
sl_status sl_sampler_logprob_record(float *logits, int32_t n_vocab, int32_t token, int32_t n_top,
                                    sl_logprob_record *record);

#endif
