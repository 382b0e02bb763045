/* tests/unit/gpu-worker/step_bound_test.c: gpu-worker/step_bound.c, the
 * heartbeat's step bound over the recent steps. */
#include <criterion/criterion.h>

#include "gpu-worker/step_bound.h"

#define MS 1000000ull

Test(step_bound, before_any_step_is_the_first_guess_or_the_floor)
{
    sl_step_bound b;
    sl_step_bound_init(&b, 30000 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 0), 30000 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 256), 30000 * MS);
    cr_assert_eq(sl_step_bound_p99(&b), 0);
    sl_step_bound_init(&b, 1 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 0), SL_STEP_BOUND_FLOOR_NS);
}

Test(step_bound, steady_steps_give_twice_their_p99)
{
    sl_step_bound b;
    sl_step_bound_init(&b, 30000 * MS);
    for (int i = 0; i < 300; i++)
        sl_step_bound_record(&b, (200 + (uint64_t)(i % 10)) * MS, 4);   /* 200..209 ms */
    cr_assert_eq(sl_step_bound_p99(&b), 209 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 0), 418 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 4), 418 * MS);
    /* short steps: the floor */
    sl_step_bound_init(&b, 30000 * MS);
    for (int i = 0; i < 10; i++)
        sl_step_bound_record(&b, 5 * MS, 1);
    cr_assert_eq(sl_step_bound_get(&b, 1), SL_STEP_BOUND_FLOOR_NS);
}

/* The case the old bound (8x the longest step ever) never recovered from. */
Test(step_bound, a_long_early_step_leaves_the_window_and_the_bound_comes_back_down)
{
    sl_step_bound b;
    sl_step_bound_init(&b, 30000 * MS);
    sl_step_bound_record(&b, 12000 * MS, 256);   /* a first prefill on a loaded machine */
    cr_assert_eq(sl_step_bound_get(&b, 0), 24000 * MS);
    sl_step_bound_record(&b, 300 * MS, 1);
    /* p99 of two steps is the longer one still */
    cr_assert_eq(sl_step_bound_get(&b, 0), 24000 * MS);
    for (int i = 0; i < 20; i++)
        sl_step_bound_record(&b, 300 * MS, 1);
    /* p99 of 22 steps is the 22nd: the long one still counts */
    cr_assert_eq(sl_step_bound_p99(&b), 12000 * MS);
    for (int i = 0; i < SL_STEP_BOUND_WINDOW; i++)
        sl_step_bound_record(&b, 300 * MS, 1);
    cr_assert_eq(sl_step_bound_p99(&b), 300 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 0), 600 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 1), 600 * MS);
}

Test(step_bound, p99_of_a_full_window_ignores_the_single_worst_step)
{
    sl_step_bound b;
    sl_step_bound_init(&b, 30000 * MS);
    for (int i = 0; i < SL_STEP_BOUND_WINDOW; i++)
        sl_step_bound_record(&b, (i == 50 ? 5000 : i == 60 ? 400 : 100) * MS, 8);
    cr_assert_eq(sl_step_bound_p99(&b), 400 * MS);
    /* ...but a step of the worst one's size still gets its cover through the
     * token term: it was the largest step (ties: the slowest), 8 tokens */
    cr_assert_eq(sl_step_bound_get(&b, 8), 10000 * MS);
}

Test(step_bound, a_bigger_step_than_recent_ones_scales_with_its_tokens)
{
    sl_step_bound b;
    sl_step_bound_init(&b, 30000 * MS);
    for (int i = 0; i < SL_STEP_BOUND_WINDOW; i++)
        sl_step_bound_record(&b, 200 * MS, 2);   /* decodes of two sequences */
    cr_assert_eq(sl_step_bound_get(&b, 0), 400 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 2), 400 * MS);
    /* a prefill chunk of 256 tokens next: 2 x 256 x 100 ms per token */
    cr_assert_eq(sl_step_bound_get(&b, 256), 51200 * MS);
    /* once a chunk ran, the per-token cost comes from it (here 4 ms) */
    sl_step_bound_record(&b, 1024 * MS, 256);
    cr_assert_eq(sl_step_bound_get(&b, 256), 2048 * MS);
    cr_assert_eq(sl_step_bound_get(&b, 2), 400 * MS);   /* p99 of the window: the decodes */
    /* a zero-token count never divides by zero */
    sl_step_bound_init(&b, 0);
    sl_step_bound_record(&b, 1 * MS, 0);
    cr_assert_eq(sl_step_bound_get(&b, 3), SL_STEP_BOUND_FLOOR_NS);
}
