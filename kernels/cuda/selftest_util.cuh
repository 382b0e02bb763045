/* kernels/cuda/selftest_util.cuh: what the kernel self-tests (selftest*.cu)
 * share: one seeded generator, so each test's inputs are reproducible from
 * its seed alone, and the check macro that ends a test on a failed CUDA call.
 * Where: host code of libsluice_cuda.so's self-test files only. */
#ifndef SL_CUDA_SELFTEST_UTIL_CUH
#define SL_CUDA_SELFTEST_UTIL_CUH

#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda/random_blocks.cuh"

/* the next 64 random bits of the stream *s: random_blocks.cuh's splitmix64 */
static inline uint64_t rng_next(uint64_t *s)
{
    return sl_random_blocks_next(s);
}

/* uniform in [-1, 1) */
static inline float uniform(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* A failed CUDA call: say where on `out`, set `bad` and jump to the test's
 * `done` label (which frees what the test holds). */
#define CK(call)                                                                     \
    do {                                                                             \
        if ((call) != cudaSuccess) {                                                 \
            fprintf(out, "  %s:%d: %s failed\n", __FILE__, __LINE__, #call);         \
            bad = 1;                                                                 \
            goto done;                                                               \
        }                                                                            \
    } while (0)

#endif
