/* kernels/cuda/cuda_backend.h: the CUDA implementation of kernels/backend.h,
 * built as the shared library libsluice_cuda.so (CMake option SLUICE_CUDA)
 * and loaded at run time by sl_backend_create() (kernels/backend.c), so one
 * sluice binary also starts on hosts without a GPU or a CUDA runtime.
 * Where:     the worker process only: creating this backend initialises CUDA,
 *            and the process must not fork afterwards.
 * Who:       one thread drives a backend (a step is synchronous: it returns
 *            with the logits, or with the tokens drawn on the device, on the
 *            host).
 * Memory:    weights are uploaded once in their GGUF types; the KV cache is
 *            float32 in the CPU backend's layout (sl_backend_kv_block_bytes
 *            gives its size). cfg->n_kv_blocks == 0 asks the backend to size
 *            the cache from free device memory after weights and scratch,
 *            keeping a reserve; the chosen count is in b->cfg.n_kv_blocks
 *            and the bytes in b->kv_bytes (the effective configuration).
 * Errors:    creation fills err naming what did not fit or is missing
 *            (no device, weights, scratch, KV cache with the MiB asked and
 *            free); a failed step returns SL_EBACKEND after logging the CUDA
 *            call with file:line. After a sticky CUDA error (a kernel fault)
 *            every later step fails too: the worker must exit and be
 *            respawned (the master reaps it first). */
#ifndef SL_CUDA_BACKEND_H
#define SL_CUDA_BACKEND_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* File name of the library, looked up next to the executable (see
 * kernels/backend.c for the search order and $SLUICE_CUDA_LIB). */
#define SL_CUDA_BACKEND_LIB "libsluice_cuda.so"
/* The one symbol the library exports. */
#define SL_CUDA_BACKEND_SYMBOL "sl_cuda_backend_create"

/* Same contract as sl_backend_create() for device "cuda", except that
 * cfg->n_kv_blocks may be 0 (size from free memory, above). Returns SL_OK;
 * SL_EUNSUPPORTED when there is no usable CUDA device or the model needs
 * something this backend lacks (a tensor type, head_dim > 256); SL_ENOMEM
 * when something does not fit (err names it); SL_EBACKEND for another CUDA
 * failure. On failure *out is NULL and nothing stays allocated. */
sl_status sl_cuda_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out,
                                 char err[SL_ERR_LEN]);

typedef sl_status (*sl_cuda_backend_create_fn)(const sl_model *m, const sl_backend_config *cfg,
                                               sl_backend **out, char err[SL_ERR_LEN]);

#ifdef __cplusplus
}
#endif

#endif
