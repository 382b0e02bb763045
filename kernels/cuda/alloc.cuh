/* kernels/cuda/alloc.cuh: device and pinned host allocation with fault
 * injection, for the CUDA backend's creation and its staging growth.
 * Who:    one thread per process creates backends (the worker's, or a
 *         tool's), so the countdown is a plain static.
 * Errors: the CUDA status of the allocation; cudaErrorMemoryAllocation with
 *         *p = NULL when the countdown fires. */
#ifndef SL_CUDA_ALLOC_CUH
#define SL_CUDA_ALLOC_CUH

#include <cuda_runtime.h>
#include <stddef.h>

/* Arms the countdown: the nth allocation from now fails as out of memory
 * (n <= 0: off). Backend creation arms it from SLUICE_CUDA_FAIL_ALLOC and
 * disarms it when it returns, so a test (cudacheck --faults) can sweep n and
 * check that each failure is a clean error that leaks nothing; steps never
 * count. */
void sl_cuda_alloc_fail_after(int n);

/* cudaMalloc, counted. */
cudaError_t sl_cuda_dev_malloc(void **p, size_t bytes);

/* cudaHostAlloc (default flags), counted. */
cudaError_t sl_cuda_pinned_malloc(void **p, size_t bytes);

#endif
