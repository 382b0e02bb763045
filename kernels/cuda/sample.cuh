/* kernels/cuda/sample.cuh: drawing the next token on the device, so a step
 * sends only the chosen ids (and the logprob records asked for) to the host
 * instead of a 0.5 MB logits row per sequence.
 * Where:     libsluice_cuda.so; the backend's forward_sample (forward.cu)
 *            and the exported check entry sl_cuda_sample_host (tools/cudacheck).
 * Who:       the thread that drives the backend.
 * Semantics: the steps and order of kernels/cpu/sampler.h, row by row: the
 *            allow bitmap (a row with no allowed token left draws -1), ban,
 *            NaN -> -inf, logprobs of the raw row, bias, penalties, greedy or
 *            top-k / top-p / min-p and one draw in id order with the same
 *            counter-based uniform (sl_sampling_uniform). The two samplers
 *            agree on a row except where a running sum meets a boundary
 *            within rounding (the device adds in another order, and decides
 *            top-p on masses in fixed point: 2^-40 of the top token).
 * Guarantee: one block per row, every reduction in an order fixed by the
 *            row length: a row's token depends only on the row and its
 *            request, never on the other rows of the launch.
 * Memory:    one staging area (pinned host + device, same layout) grown
 *            when a step asks for more; a step that fits allocates nothing. */
#ifndef SL_CUDA_SAMPLE_CUH
#define SL_CUDA_SAMPLE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/backend.h"
}

typedef struct sl_cuda_sampler sl_cuda_sampler;

/* A sampler for rows of n_vocab logits. SL_OK, SL_EINVAL, SL_ENOMEM. */
sl_status sl_cuda_sampler_create(int32_t n_vocab, sl_cuda_sampler **out);

/* Frees it; the stream that used it must be idle. NULL is a no-op. */
void sl_cuda_sampler_destroy(sl_cuda_sampler *s);

/* Stages one step of n sequences: reqs[i] with params draws from logits
 * row i of the step (one row per sequence). Copies the staging to the
 * device on `st`. The previous step's results must have been read (the area
 * is reused). SL_OK, SL_ENOMEM, SL_EBACKEND. */
sl_status sl_cuda_sampler_stage(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st);

/* sl_cuda_sampler_stage without the allow bitmaps' words: their places are
 * laid out (a row draws under a mask where reqs[i].allow is set) but
 * neither read nor copied until sl_cuda_sampler_stage_allow, which must
 * follow on st before the draw. Lets the host write the masks while the
 * forward pass runs. Same returns. */
sl_status sl_cuda_sampler_stage_deferred(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st);

/* Reads the bitmaps of the step staged by sl_cuda_sampler_stage_deferred
 * (the same reqs, now with their words written) and queues their copy on
 * st. SL_OK, SL_EBACKEND. */
sl_status sl_cuda_sampler_stage_allow(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st);

/* Draws for the staged sequences in [row0, row0 + n_rows) from `logits`
 * (n_rows x n_vocab on the device, row row0 first; edited in place).
 * Async on st. */
sl_status sl_cuda_sampler_launch(sl_cuda_sampler *s, float *logits, int32_t row0, int32_t n_rows, cudaStream_t st);

/* Changes whenever the device staging moves (a step outgrew it): a graph
 * that captured sl_cuda_sampler_launch is stale once this changes. */
uint64_t sl_cuda_sampler_generation(const sl_cuda_sampler *s);

/* Queues the copy of every staged result to the host. Async on st. */
sl_status sl_cuda_sampler_fetch(sl_cuda_sampler *s, cudaStream_t st);

/* After st is synchronised: sequence i's token (-1 when it asked none),
 * its record copied to req->record when logprobs were asked. */
int32_t sl_cuda_sampler_result(const sl_cuda_sampler *s, int32_t i, const sl_sample_req *req);

#endif
