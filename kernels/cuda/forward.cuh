/* kernels/cuda/forward.cuh: the CUDA backend's steps, the forward and
 * forward_sample slots of sl_backend_ops (kernels/backend.h states their
 * contract), and the per-step staging they own. Implemented in forward.cu;
 * backend.cu puts the steps in the vtable and sizes the staging at creation,
 * and nothing else calls them. */
#ifndef SL_CUDA_FORWARD_CUH
#define SL_CUDA_FORWARD_CUH

#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cuda/backend.cuh"

/* One step: every asked logits row copied to `logits`. */
sl_status sl_cuda_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits);

/* One step: the token of each sequence drawn on the device into tokens[i]. */
sl_status sl_cuda_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                 const sl_sample_req *reqs, int32_t *tokens);

/* sl_cuda_forward_sample with the allow bitmaps written by fill while the
 * layers run (kernels/backend.h, sl_backend_forward_sample_overlap); fill
 * NULL is sl_cuda_forward_sample. */
sl_status sl_cuda_forward_sample_overlap(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                         const sl_sample_req *reqs, int32_t *tokens, const sl_allow_fill *fill);

/* Makes room for `need` int32 entries in the per-step staging (meta_h and
 * its device mirror meta_d). When it grows them it synchronises the stream
 * and drops the captured graphs, which point into the old buffers.
 * Returns SL_OK, or SL_EBACKEND after logging the failed CUDA call; on
 * failure meta_cap is 0 and whatever was allocated is freed by destroy. */
sl_status sl_cuda_forward_meta_reserve(cuda_backend *cb, int64_t need);

/* Frees every captured decode graph and clears its slot, so the next
 * decode step of that shape captures anew. No-op when graphs are off. */
void sl_cuda_forward_drop_graphs(cuda_backend *cb);

#endif
