/* kernels/cuda/forward.cuh: the CUDA backend's steps, the forward and
 * forward_sample slots of sl_backend_ops (kernels/backend.h states their
 * contract). Implemented in forward.cu; backend.cu puts them in the vtable
 * and nothing else calls them. */
#ifndef SL_CUDA_FORWARD_CUH
#define SL_CUDA_FORWARD_CUH

#include <stdint.h>

#include "kernels/backend.h"

/* One step: every asked logits row copied to `logits`. */
sl_status sl_cuda_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits);

/* One step: the token of each sequence drawn on the device into tokens[i]. */
sl_status sl_cuda_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                 const sl_sample_req *reqs, int32_t *tokens);

#endif
