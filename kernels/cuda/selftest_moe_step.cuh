/* kernels/cuda/selftest_moe_step.cuh: the self-test's checks of the MoE
 * step's small kernels (selftest_moe_step.cu): the float32 router, the
 * combine, and per-kernel timings on Qwen3-30B-A3B's shape.
 * Where:  host code of the self-tests in libsluice_cuda.so, called by
 *         selftest_moe.cu's sl_cuda_selftest_moe on its stream.
 * Output: one line a case to `out`, ending "ok" or "FAIL".
 * Errors: each returns the number of cases that failed (a CUDA call that
 *         fails counts as one); the timings fail nothing. */
#ifndef SL_CUDA_SELFTEST_MOE_STEP_CUH
#define SL_CUDA_SELFTEST_MOE_STEP_CUH

#include <cuda_runtime.h>
#include <stdio.h>

/* sl_cuda_moe_router against float64 (each logit within 1e-5 of the sum of
 * its |w x| terms), each token row alone giving its batched bits, the
 * scalar-load path giving the float4 path's bits; 30B-A3B's, gpt-oss-20b's,
 * Mixtral's and a short odd row's shapes. */
int st_moe_router(FILE *out, cudaStream_t st);

/* sl_cuda_moe_combine against a host copy of the one-block-per-row
 * kernel's arithmetic (w[0] y[0], + w[s] y[s] in slot order: the same bits
 * exactly), for k 1, 2, 8 and 32 and a row of 2,085 (a partial last
 * block); with a shared expert within 1e-6 (the host's expf is not the
 * device's). */
int st_moe_combine(FILE *out, cudaStream_t st);

/* Times (informational, one line each) on the 30B-A3B shape (128 experts,
 * top 8, n_embd 2,048) at T = 1 and 64: the router (sl_cuda_moe_router
 * against sl_cuda_matmul, which it replaces), routing + grouping
 * (sl_cuda_moe_route_group against the two kernels) and the combine.
 * Returns 1 when a launch failed. */
int st_moe_step_timing(FILE *out, cudaStream_t st);

/* The tensor-core expert matmul (gemm_moe.cuh) against the small-batch one
 * on the same routed problems (selftest_moe_gemm.cu): eight weight types,
 * partial tiles, gpt-oss's biases and activation, a row past 2^14, token 0
 * alone the same bits as in its batch; timings of both on the 30B-A3B
 * shape at T = 64 and 512. Returns the number of cases that failed. */
int st_moe_gemm(FILE *out, cudaStream_t st);

#endif
