/* tests/unit/kernels/moe_route_test.c: MoE routing (sl_cpu_moe_route):
 * top-k in decreasing order, ties to the lower expert index, softmax
 * weights with and without renormalisation, NaN logits; gpt-oss's
 * top-k-then-softmax routing and its clamped SwiGLU; the routing margin
 * a check tool reads (moe_watch.h). */
#include <criterion/criterion.h>
#include <math.h>

#include "kernels/cpu/moe_watch.h"
#include "kernels/cpu/ops.h"

static float scratch[16];

Test(moe_route, top_k_in_decreasing_order)
{
    const float logits[6] = {0.1f, 2.0f, -1.0f, 3.0f, 0.5f, 2.5f};
    int32_t ids[3];
    float w[3];
    sl_cpu_moe_route(logits, 6, 3, false, scratch, ids, w);
    cr_assert_eq(ids[0], 3);
    cr_assert_eq(ids[1], 5);
    cr_assert_eq(ids[2], 1);
    cr_assert(w[0] > w[1] && w[1] > w[2]);
}

Test(moe_route, weights_are_softmax_over_all_experts_unless_renormalised)
{
    const float logits[4] = {1.0f, 0.0f, 2.0f, -1.0f};
    double z = exp(1.0) + exp(0.0) + exp(2.0) + exp(-1.0);
    int32_t ids[2];
    float w[2];
    sl_cpu_moe_route(logits, 4, 2, false, scratch, ids, w);
    cr_assert_eq(ids[0], 2);
    cr_assert_eq(ids[1], 0);
    cr_assert_float_eq(w[0], exp(2.0) / z, 1e-6);
    cr_assert_float_eq(w[1], exp(1.0) / z, 1e-6);
    sl_cpu_moe_route(logits, 4, 2, true, scratch, ids, w);   /* = softmax over the chosen two */
    cr_assert_float_eq(w[0], exp(2.0) / (exp(2.0) + exp(1.0)), 1e-6);
    cr_assert_float_eq(w[0] + w[1], 1.0f, 1e-6);
}

Test(moe_route, ties_go_to_the_lower_expert_index)
{
    const float logits[5] = {1.0f, 2.0f, 2.0f, 1.0f, 2.0f};
    int32_t ids[4];
    float w[4];
    sl_cpu_moe_route(logits, 5, 4, true, scratch, ids, w);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 2);
    cr_assert_eq(ids[2], 4);
    cr_assert_eq(ids[3], 0);
    const float flat[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    sl_cpu_moe_route(flat, 4, 2, true, scratch, ids, w);
    cr_assert_eq(ids[0], 0);
    cr_assert_eq(ids[1], 1);
    cr_assert_float_eq(w[0], 0.5f, 1e-7);
}

Test(moe_route, all_experts_when_k_is_n)
{
    const float logits[3] = {-5.0f, 7.0f, 1.0f};
    int32_t ids[3];
    float w[3];
    sl_cpu_moe_route(logits, 3, 3, true, scratch, ids, w);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 2);
    cr_assert_eq(ids[2], 0);
    cr_assert_float_eq(w[0] + w[1] + w[2], 1.0f, 1e-6);
}

Test(moe_route, nan_logits_still_pick_distinct_experts)
{
    const float logits[4] = {NAN, 1.0f, NAN, 0.0f};
    int32_t ids[4];
    float w[4];
    sl_cpu_moe_route(logits, 4, 4, true, scratch, ids, w);
    int seen = 0;
    for (int j = 0; j < 4; j++) {
        cr_assert(ids[j] >= 0 && ids[j] < 4);
        seen |= 1 << ids[j];
    }
    cr_assert_eq(seen, 0xf);
}

Test(moe_route, negligible_experts_get_finite_weights)
{
    /* probabilities that underflow to 0 are chosen last and stay finite
     * after renormalising (the 6.1e-5 floor on the sum is llama.cpp's guard;
     * softmax gating never reaches it: the top k of n sum to at least k/n) */
    const float logits[3] = {0.0f, -200.0f, -200.0f};
    int32_t ids[2];
    float w[2];
    sl_cpu_moe_route(logits, 3, 2, true, scratch, ids, w);
    cr_assert_eq(ids[0], 0);
    cr_assert(isfinite(w[1]));
}

Test(moe_route, topk_softmax_softmaxes_the_chosen_logits)
{
    const float logits[5] = {-3.0f, 1.5f, -0.5f, 4.0f, -2.0f};   /* negative logits: no sentinel may clash */
    int32_t ids[3];
    float w[3];
    sl_cpu_moe_route_topk_softmax(logits, 5, 3, scratch, ids, w);
    cr_assert_eq(ids[0], 3);
    cr_assert_eq(ids[1], 1);
    cr_assert_eq(ids[2], 2);
    double z = exp(4.0) + exp(1.5) + exp(-0.5);
    cr_assert_float_eq(w[0], exp(4.0) / z, 1e-6);
    cr_assert_float_eq(w[1], exp(1.5) / z, 1e-6);
    cr_assert_float_eq(w[2], exp(-0.5) / z, 1e-6);
}

Test(moe_route, topk_softmax_ties_and_nan)
{
    const float tie[4] = {-1.0f, -1.0f, -5.0f, -1.0f};
    int32_t ids[3];
    float w[3];
    sl_cpu_moe_route_topk_softmax(tie, 4, 3, scratch, ids, w);
    cr_assert_eq(ids[0], 0);
    cr_assert_eq(ids[1], 1);
    cr_assert_eq(ids[2], 3);
    cr_assert_float_eq(w[0], 1.0f / 3.0f, 1e-6);
    const float nan_first[4] = {NAN, 2.0f, NAN, 1.0f};
    sl_cpu_moe_route_topk_softmax(nan_first, 4, 2, scratch, ids, w);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 3);
    const float all_nan[3] = {NAN, NAN, NAN};
    sl_cpu_moe_route_topk_softmax(all_nan, 3, 3, scratch, ids, w);
    cr_assert(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
}

Test(moe_route, swiglu_oai_clamps_gate_above_and_up_both_ways)
{
    const float gate[5] = {1.0f, 9.0f, -30.0f, 7.0f, 0.0f};
    const float up[5] = {0.5f, 0.0f, 1.0f, 12.0f, -9.0f};
    float out[5];
    sl_cpu_swiglu_oai(out, gate, up, 5);
    double sig = 1.0 / (1.0 + exp(-1.702));
    cr_assert_float_eq(out[0], 1.0 * sig * 1.5, 1e-6);
    double s7 = 7.0 / (1.0 + exp(-1.702 * 7.0));
    cr_assert_float_eq(out[1], s7 * 1.0, 1e-5);          /* gate 9 -> 7 */
    cr_assert_float_eq(out[2], -30.0 / (1.0 + exp(1.702 * 30.0)) * 2.0, 1e-20);   /* no lower clamp */
    cr_assert_float_eq(out[3], s7 * 8.0, 1e-5);          /* up 12 -> 7 */
    cr_assert_float_eq(out[4], 0.0f, 0);                 /* up -9 -> -7: (y + 1) = -6, x = 0 */
}

/* kernels/cpu/moe_watch.h: the gap a check tool reads */
Test(moe_route, margin_is_the_gap_after_the_kth_largest)
{
    const float logits[6] = {0.1f, 2.0f, -1.0f, 3.0f, NAN, 2.5f};
    cr_assert_float_eq(sl_cpu_moe_margin(logits, 6, 1), 0.5f, 1e-7);   /* 3.0 - 2.5 */
    cr_assert_float_eq(sl_cpu_moe_margin(logits, 6, 2), 0.5f, 1e-7);   /* 2.5 - 2.0 */
    cr_assert_float_eq(sl_cpu_moe_margin(logits, 6, 3), 1.9f, 1e-6);   /* 2.0 - 0.1 */
    cr_assert(isinf(sl_cpu_moe_margin(logits, 6, 6)));                 /* no choice made */
    const float tied[3] = {1.0f, 1.0f, 0.0f};
    cr_assert_eq(sl_cpu_moe_margin(tied, 3, 1), 0.0f);
}
