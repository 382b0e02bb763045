/* kernels/cuda/moe.cuh: the mixture-of-experts FFN's kernels on the device:
 * the float32 router's logits, routing (softmax, top-k, optional
 * renormalisation; fused with the grouping for small steps), grouping the routed
 * (row, slot) pairs by expert, the grouped expert matmul (mmv_moe.cu) and
 * the per-row combine. The CUDA twin of kernels/cpu/forward.c's moe_ffn
 * and kernels/cpu/ops.c's sl_cpu_moe_route.
 * Where:     libsluice_cuda.so, launched by forward.cu on the backend stream
 *            (and by selftest_moe.cu).
 * Graphs:    every launch's grid depends on host-known sizes only (rows T,
 *            n_expert, k); what the routing chose stays on the device, so a
 *            decode step holding these launches replays as a CUDA graph.
 * Guarantee: a row's routing, its k expert outputs and its sum depend on
 *            that row only, each computed in a fixed order (the expert
 *            kernel's dot products are mmv.cu's), so the engine's batch
 *            invariance holds for MoE layers too. Tensor-core steps take
 *            gemm_moe.cuh's expert kernel instead (the same contract, float16
 *            inputs), as the dense matmuls take gemm.cuh's.
 * Errors:    SL_OK; SL_EINVAL for sizes outside the limits below or a weight
 *            the expert kernel does not take; SL_EBACKEND when a launch
 *            failed (logged). Launches only, async on `stream`. */
#ifndef SL_CUDA_MOE_CUH
#define SL_CUDA_MOE_CUH

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/matmul.cuh"
#include "shared/status.h"

#define SL_CUDA_MOE_MAX_EXPERTS 512   /* router outputs a row's softmax holds (model.h's limit too) */
#define SL_CUDA_MOE_MAX_USED 32       /* experts per token: one warp lane holds each chosen slot */
#define SL_CUDA_MOE_STAGE_MIN_T 8     /* steps of this many token rows or more stage the experts' inputs */

/* Per row t < T of logits (T, n_expert): softmax over the n_expert values,
 * the k largest probabilities (a tie goes to the lower expert index, as
 * sl_cpu_moe_route), with norm divided by their sum (at least 2^-14).
 * OUT ids (T, k): expert of each slot, slots in decreasing weight;
 * OUT w (T, k): its weight. */
sl_status sl_cuda_moe_route(const float *logits, int64_t T, int n_expert, int k, bool norm, int32_t *ids, float *w,
                            cudaStream_t stream);

/* gpt-oss's routing, per row t < T of logits (T, n_expert) (the router
 * bias already added): the k largest logits (a tie goes to the lower
 * index, a NaN ranks below every number, as
 * sl_cpu_moe_route_topk_softmax), then a softmax over those k.
 * OUT ids, w as sl_cuda_moe_route. */
sl_status sl_cuda_moe_route_topk_softmax(const float *logits, int64_t T, int n_expert, int k, int32_t *ids, float *w,
                                         cudaStream_t stream);

/* Groups the R = T*k routed pairs i = t*k + slot by expert: OUT off
 * (n_expert + 1): expert e's pairs are pairs[off[e] .. off[e+1]); OUT pairs
 * (R): the pair indices, within an expert in increasing i (by row, then
 * slot), so the grouping is the same whatever order the device runs in;
 * OUT used (n_expert + 1): used[0] = the number of experts with pairs,
 * used[1 ..] those experts in increasing index. */
sl_status sl_cuda_moe_group(const int32_t *ids, int64_t R, int n_expert, int32_t *off, int32_t *pairs,
                            int32_t *used, cudaStream_t stream);

/* Routing, then grouping, of T rows of logits: sl_cuda_moe_route (or with
 * topk_softmax sl_cuda_moe_route_topk_softmax, norm ignored), then
 * sl_cuda_moe_group over R = T*k, with the same outputs bit for bit. For
 * T <= 16 one single-block launch does both (a warp routes each row, then
 * the block groups); above, the two kernels. */
sl_status sl_cuda_moe_route_group(const float *logits, int64_t T, int n_expert, int k, bool topk_softmax, bool norm,
                                  int32_t *ids, float *w, int32_t *off, int32_t *pairs, int32_t *used,
                                  cudaStream_t stream);

/* True when sl_cuda_moe_router computes w: float32, rows packed. */
bool sl_cuda_moe_router_supports(const sl_cuda_weight *w);

/* The router's logits y[t*ldy + r] = dot(w row r, x[t*ldx ..]) for t < T,
 * r < w->ne1: up to 8 warps share a row (router_warps_per_row, from ne0
 * alone) so that 128 rows of 2,048 are 1,024 warps, not 128; the order of
 * the sums depends on ne0 only, never on T (not the order of
 * sl_cuda_matmul, so logits differ from its by rounding). SL_EINVAL when
 * !sl_cuda_moe_router_supports(w), T < 1 or past 524,280, ldx < ne0 or
 * ldy < ne1. */
sl_status sl_cuda_moe_router(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                             cudaStream_t stream);

/* True when sl_cuda_mmv_experts computes experts of this type (the
 * small-batch kernel's types: Q4_K, Q5_K, Q6_K, Q8_0, Q8_1, Q2_K, Q3_K,
 * IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4). */
bool sl_cuda_mmv_experts_supports(uint32_t type);

/* The experts of one 3-D tensor over their routed rows, one launch: w is
 * expert 0's matrix (ne0 -> ne1), expert e's starting e * ne1 * row_bytes
 * further. For every expert e and every pair q in pairs[off[e] ..
 * off[e+1]): y[q * ldy + r] = dot(row r of expert e, x[(q / in_div) * ldx
 * ..]). With up (same type and shape as w): y = silu(x w^T) * (x up^T),
 * mmv.cu's fused SwiGLU. in_div = k reads a token's row for each of its
 * slots (gate and up), in_div = 1 the slot's own row (down). R = T*k: the
 * pairs there are (it picks the rows per pass); T, the step's token rows,
 * picks the staged kernel (T >= SL_CUDA_MOE_STAGE_MIN_T) or the global one,
 * the same bits either way (sl_cuda_mmv_experts_stage; SL_EINVAL for T
 * outside 1 .. R); off, pairs and used as
 * sl_cuda_moe_group wrote them. The grid covers (min(n_expert, R) expert
 * slots, blocks of weight rows); slot j serves expert used[1 + j], and a
 * slot past used[0] exits at once. */
sl_status sl_cuda_mmv_experts(const sl_cuda_weight *w, const sl_cuda_weight *up, int n_expert, const int32_t *off,
                              const int32_t *pairs, const int32_t *used, int64_t R, int64_t T, int in_div,
                              const float *x, int64_t ldx, float *y, int64_t ldy, cudaStream_t stream);

/* Whether sl_cuda_mmv_experts stages each pass's activation rows in shared
 * memory or reads them from global memory in every warp: mode 1 always
 * staged, 0 always global, -1 by the rule (staged for T >=
 * SL_CUDA_MOE_STAGE_MIN_T). Until the first call the mode comes from
 * SLUICE_CUDA_MOE_STAGE (1 or 0; unset or other: -1), read once.
 * The outputs are the same bits either way; this is for A/B runs in one
 * process (the selftest). Returns the mode it replaces. Not thread-safe:
 * call between launches. */
int sl_cuda_mmv_experts_stage(int mode);

/* sl_cuda_mmv_experts with gpt-oss's additions: bias (n_expert, w->ne1),
 * or NULL, adds expert e's row e to each of its outputs (with up: to the
 * gate's, and up_bias, needing bias, to the up's) before the activation;
 * swiglu_oai (needs up) takes sl_cpu_swiglu_oai's clamped SwiGLU instead
 * of SiLU. SL_EINVAL also for up_bias without bias and up, or swiglu_oai
 * without up. */
sl_status sl_cuda_mmv_experts_biased(const sl_cuda_weight *w, const sl_cuda_weight *up, const float *bias,
                                     const float *up_bias, bool swiglu_oai, int n_expert, const int32_t *off,
                                     const int32_t *pairs, const int32_t *used, int64_t R, int64_t T, int in_div,
                                     const float *x, int64_t ldx, float *y, int64_t ldy, cudaStream_t stream);

/* out[t*E + i] = sum over slots s in order of w[t*k+s] * y[(t*k+s)*E + i],
 * then with sh (qwen2moe's shared expert, (T, E)) plus sigmoid(sh_gate[t])
 * * sh[t*E + i]: moe_sum_task's order. sh NULL: no shared expert. */
sl_status sl_cuda_moe_combine(float *out, const float *y, const float *w, int64_t T, int k, int64_t E,
                              const float *sh, const float *sh_gate, cudaStream_t stream);

#endif
