/* tests/unit/kernels/sample_batch_test.c: kernels/cpu/sample_batch.c. A
 * step's rows drawn on a pool of threads give, row by row, what the
 * reference sampler gives on that row alone: the same tokens and records
 * whatever the thread count, a ban applied first, -1 where no token was
 * asked. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/sample_batch.h"
#include "kernels/cpu/sampler.h"

#define V 300
#define N 9

static void fill_row(float *row, int i)
{
    for (int v = 0; v < V; v++)
        row[v] = sinf(0.11f * (float)v * (float)(i + 1)) * 4.0f + cosf((float)(v ^ i));
}

/* Request i: a mix of greedy, sampled, penalised, banned and logprob rows;
 * every third row asks nothing. */
static void make_reqs(sl_sampling_params *p, sl_sample_req *r, sl_logprob_record *rec, const int32_t *hist,
                      const int32_t *ban)
{
    for (int i = 0; i < N; i++) {
        sl_sampling_params_default(&p[i]);
        p[i].temperature = i % 4 == 0 ? 0.0f : 0.6f + 0.2f * (float)(i % 4);
        p[i].seed = 500 + (uint64_t)i;
        p[i].top_k = i % 2 ? 20 : 0;
        p[i].repetition_penalty = i == 4 ? 1.5f : 1.0f;
        p[i].n_logprobs = i % 2 ? 3 : -1;
        r[i] = (sl_sample_req){.params = i % 3 == 2 ? NULL : &p[i], .history = hist, .n_history = 6,
                               .draw_index = (uint64_t)(i * 7), .ban = i == 1 ? ban : NULL, .n_ban = i == 1 ? 2 : 0,
                               .record = &rec[i]};
    }
}

static void draw_on(int threads, int32_t *tok, sl_logprob_record *rec)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, N, NULL, threads, &sb), SL_OK);
    float *rows = sl_sample_batch_rows(sb);
    for (int i = 0; i < N; i++)
        fill_row(rows + (size_t)i * V, i);
    static const int32_t hist[6] = {1, 2, 3, 3, 40, 41}, ban[2] = {7, 250};
    sl_sampling_params p[N];
    sl_sample_req r[N];
    make_reqs(p, r, rec, hist, ban);
    sl_sample_batch_draw(sb, r, N, tok);
    sl_sample_batch_destroy(sb);
}

Test(sample_batch, rows_drawn_on_threads_match_the_reference_row_by_row)
{
    int32_t tok1[N], tok4[N];
    sl_logprob_record rec1[N], rec4[N];
    memset(rec1, 0, sizeof rec1);
    memset(rec4, 0, sizeof rec4);
    draw_on(1, tok1, rec1);
    draw_on(4, tok4, rec4);
    cr_assert_arr_eq(tok1, tok4, sizeof tok1, "tokens depend on the thread count");

    static const int32_t hist[6] = {1, 2, 3, 3, 40, 41}, ban[2] = {7, 250};
    sl_sampling_params p[N];
    sl_sample_req r[N];
    sl_logprob_record unused[N];
    make_reqs(p, r, unused, hist, ban);
    sl_sampler_scratch *scr;
    cr_assert_eq(sl_sampler_scratch_create(V, &scr), SL_OK);
    for (int i = 0; i < N; i++) {
        if (!r[i].params) {
            cr_assert_eq(tok1[i], -1, "row %d asked nothing", i);
            continue;
        }
        float row[V];
        fill_row(row, i);
        for (int j = 0; j < r[i].n_ban; j++)
            row[r[i].ban[j]] = -INFINITY;
        int32_t want;
        sl_logprob_record ref;
        bool lp = p[i].n_logprobs >= 0;
        cr_assert_eq(sl_sampler_sample(&p[i], row, V, hist, 6, r[i].draw_index, scr, &want, lp ? &ref : NULL), SL_OK);
        cr_assert_eq(tok1[i], want, "row %d", i);
        if (r[i].n_ban)
            cr_assert(tok1[i] != 7 && tok1[i] != 250, "row %d drew a banned id", i);
        if (lp) {
            cr_assert_eq(rec1[i].token, ref.token);
            cr_assert_eq(rec1[i].logprob, ref.logprob);
            cr_assert_eq(rec1[i].n_top, ref.n_top);
            cr_assert_eq(rec4[i].token, ref.token);
            cr_assert_eq(rec4[i].logprob, ref.logprob);
        }
    }
    sl_sampler_scratch_destroy(scr);
}

Test(sample_batch, create_refuses_bad_sizes)
{
    sl_sample_batch *sb = (sl_sample_batch *)1;
    cr_assert_eq(sl_sample_batch_create(0, 4, NULL, 1, &sb), SL_EINVAL);
    cr_assert_null(sb);
    cr_assert_eq(sl_sample_batch_create(10, 0, NULL, 1, &sb), SL_EINVAL);
    cr_assert_eq(sl_sample_batch_create(10, 4, NULL, 0, &sb), SL_EINVAL);
    sl_sample_batch_destroy(NULL);
}
