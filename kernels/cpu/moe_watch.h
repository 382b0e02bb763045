/* kernels/cpu/moe_watch.h: lets a check tool see how close each MoE
 * routing decision of the CPU backend was. For every token row a MoE layer
 * routes, the margin is the gap between its k-th and (k+1)-th largest
 * router logits (after gpt-oss's bias): below the rounding of another
 * backend's router input, that backend may pick another expert for the row
 * and be right to within its own rounding (tools/cudacheck excludes such
 * rows from its worst-row figure and says so).
 * Where: set by tools/cudacheck; called from kernels/cpu/forward.c's moe_ffn
 *        on the thread that runs the forward pass. Unset (the default), no
 *        margin is computed. Not for the server: process-wide, not locked. */
#ifndef SL_CPU_MOE_WATCH_H
#define SL_CPU_MOE_WATCH_H

#include <stdint.h>

/* row: the step's token row (0 .. T-1, in the order of the batch's tokens). */
typedef void (*sl_cpu_moe_watch_fn)(void *ctx, int64_t row, float margin);

/* Calls fn for every routed row from now on; fn NULL stops. */
void sl_cpu_moe_watch(sl_cpu_moe_watch_fn fn, void *ctx);

/* The gap between the k-th and the (k+1)-th largest of the n logits; +inf
 * where no choice is made (k >= n) or n passes SL_MOE_MAX_EXPERTS. NaNs
 * rank below numbers. */
float sl_cpu_moe_margin(const float *logits, int n, int k);

/* The watcher, or NULL (forward.c reads it once per layer). */
sl_cpu_moe_watch_fn sl_cpu_moe_watcher(void **ctx);

#endif
