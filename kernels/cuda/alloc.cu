/* kernels/cuda/alloc.cu: device and pinned allocation with fault injection
 * by countdown (alloc.cuh). Runs in the process that creates a backend.
 * Trade-off: one process-wide countdown instead of one per backend: creation
 * is single-threaded, and a test arms it for exactly one creation. */
#include "kernels/cuda/alloc.cuh"

static int countdown;   /* 0: off */

void sl_cuda_alloc_fail_after(int n)
{
    countdown = n > 0 ? n : 0;
}

static bool fires(void)
{
    return countdown > 0 && --countdown == 0;
}

cudaError_t sl_cuda_dev_malloc(void **p, size_t bytes)
{
    if (fires()) {
        *p = NULL;
        return cudaErrorMemoryAllocation;
    }
    return cudaMalloc(p, bytes);
}

cudaError_t sl_cuda_pinned_malloc(void **p, size_t bytes)
{
    if (fires()) {
        *p = NULL;
        return cudaErrorMemoryAllocation;
    }
    return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}
