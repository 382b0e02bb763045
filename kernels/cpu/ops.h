/* kernels/cpu/ops.h: the element-wise and row operations of the forward
 * pass on the CPU, in plain C (the readable reference). Each is a pure
 * function of its inputs: no state, no allocation. */
#ifndef SL_CPU_OPS_H
#define SL_CPU_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* y = x / sqrt(mean(x^2) + eps) * w  (w may be NULL: no scale). y may be x. */
void sl_cpu_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* Rotates the first n_rot dims of each of n_heads heads (head_dim apart) by
 * the angles whose cos/sin are given per pair (n_rot/2 each). neox: pairs are
 * (i, i + n_rot/2), else (2i, 2i+1). */
void sl_cpu_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_t, const float *sin_t,
                 int neox);

/* out[i] = silu(gate[i]) * up[i] */
void sl_cpu_swiglu(float *out, const float *gate, const float *up, int64_t n);

/* out[i] = gelu(gate[i]) * up[i], GELU's tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void sl_cpu_geglu_tanh(float *out, const float *gate, const float *up, int64_t n);

/* x[i] = cap * tanh(x[i] / cap): soft-capping of scores or logits (cap > 0) */
void sl_cpu_softcap(float *x, int64_t n, float cap);

/* x[i] *= s: granite's residual and logit scales */
void sl_cpu_scale(float *x, int64_t n, float s);

/* y[i] += x[i] */
void sl_cpu_add(float *y, const float *x, int64_t n);

/* Mixture-of-experts routing of one token, as llama.cpp's build_moe_ffn
 * with softmax gating: p = softmax(logits[0..n)) (float, max subtracted,
 * summed in double), then the k largest p in decreasing order into
 * ids[0..k) and their p into w[0..k); equal p go to the lower expert index
 * first, so the choice is a pure function of the logits. norm: w divided
 * by their sum, floored at 6.103515625e-5 (llama.cpp's guard against 0).
 * NaN logits still pick k distinct experts (the lowest indices).
 * scratch: n floats. 1 <= k <= n. */
void sl_cpu_moe_route(const float *logits, int n, int k, bool norm, float *scratch, int32_t *ids, float *w);

/* gpt-oss's routing (llama.cpp's SOFTMAX_WEIGHT gating): the k largest
 * logits in decreasing order into ids[0..k) (equal logits: the lower index
 * first; NaN logits are never preferred and still give k distinct experts),
 * then w[0..k) = softmax of those k logits (max subtracted, summed in
 * double, as sl_cpu_moe_route). scratch: n floats. 1 <= k <= n. */
void sl_cpu_moe_route_topk_softmax(const float *logits, int n, int k, float *scratch, int32_t *ids, float *w);

/* gpt-oss's clamped SwiGLU: with x = min(gate[i], 7) and y = clamp(up[i],
 * -7, 7), out[i] = x / (1 + exp(-1.702 x)) * (y + 1) (ggml's swiglu_oai,
 * operation for operation; out may alias gate). */
void sl_cpu_swiglu_oai(float *out, const float *gate, const float *up, int64_t n);

#endif
