/* kernels/cuda/split_rule_test.cu: host-side check of the attention split
 * rule (attention.cuh), runnable without a GPU (ctest test_cuda_split_rule
 * in a SLUICE_CUDA build). For every context 1..70,000:
 *   - 1 <= splits(ctx) <= launch_splits(ctx) <= SPLIT_MAX, and
 *     launch_splits never decreases, so a launch sized for a step's longest
 *     context has a slot for every split of every shorter row;
 *   - the splits' ranges are non-empty, whole tiles but the last, in order,
 *     and cover [0, ctx) exactly;
 *   - a row that fits one chunk is not split.
 * Exit 0 when all hold. */
#include <stdio.h>

#include "kernels/cuda/attention.cuh"

int main(void)
{
    int fails = 0, prev_launch = 0;
    for (int32_t ctx = 1; ctx <= 70000 && fails < 10; ctx++) {
        int n = sl_cuda_attention_splits(ctx), S = sl_cuda_attention_launch_splits(ctx);
        bool ok = n >= 1 && n <= S && S <= SL_CUDA_ATTN_SPLIT_MAX && S >= prev_launch &&
                  (ctx > SL_CUDA_ATTN_SPLIT_CHUNK_MIN || n == 1);
        int32_t next = 0;
        for (int s = 0; s < n && ok; s++) {
            int32_t p0, p1;
            sl_cuda_attention_range(ctx, n, s, &p0, &p1);
            ok = p0 == next && p1 > p0 && (p1 == ctx || (p1 - p0) % SL_CUDA_ATTN_TILE == 0);
            next = p1;
        }
        ok = ok && next == ctx;
        if (!ok) {
            printf("split rule: context %d: %d splits, launch %d (previous %d)\n", (int)ctx, n, S, prev_launch);
            fails++;
        }
        prev_launch = S;
    }
    printf("split_rule_test: %s\n", fails ? "FAIL" : "all ok");
    return fails != 0;
}
