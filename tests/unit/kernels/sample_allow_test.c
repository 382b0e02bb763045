/* tests/unit/kernels/sample_allow_test.c: the allow bitmap of sl_sample_req
 * (the grammar mask) on the host sampler: a masked row never draws a token the
 * bitmap leaves out, whatever the seed, bias or truncation; greedy takes the
 * best allowed token; a row with nothing allowed draws -1; rows without a
 * bitmap are unchanged. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/sample_batch.h"

#define V 100
#define W ((V + 31) / 32)

static void allow_set(uint32_t *a, int32_t t) { a[t / 32] |= 1u << (t % 32); }
static bool allowed(const uint32_t *a, int32_t t) { return a[t / 32] >> (t % 32) & 1u; }

/* Logits rising with the id, so the unmasked favourite is V - 1. */
static void fill(float *row)
{
    for (int v = 0; v < V; v++)
        row[v] = 0.05f * (float)v;
}

static int32_t draw_one(sl_sample_batch *sb, const sl_sampling_params *p, const uint32_t *allow, uint64_t draw,
                        sl_logprob_record *rec)
{
    fill(sl_sample_batch_rows(sb));
    sl_sample_req r = {.params = p, .draw_index = draw, .allow = allow, .record = rec};
    int32_t tok = -2;
    sl_sample_batch_draw(sb, &r, 1, &tok);
    return tok;
}

Test(sample_allow, sampled_draws_stay_inside_the_mask_for_every_seed)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, 1, NULL, 1, &sb), SL_OK);
    uint32_t allow[W] = {0};
    const int32_t ok[] = {3, 17, 31, 32, 64, 90};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        allow_set(allow, ok[i]);
    sl_sampling_params p;
    for (int variant = 0; variant < 4; variant++) {
        sl_sampling_params_default(&p);
        p.temperature = 1.5f;
        p.top_k = variant == 1 ? 3 : 0;
        p.top_p = variant == 2 ? 0.5f : 1.0f;
        p.min_p = variant == 3 ? 0.2f : 0.0f;
        int seen[V] = {0};
        for (uint64_t seed = 0; seed < 400; seed++) {
            p.seed = seed;
            int32_t t = draw_one(sb, &p, allow, seed % 7, NULL);
            cr_assert(t >= 0 && t < V && allowed(allow, t), "variant %d seed %llu drew %d", variant,
                      (unsigned long long)seed, t);
            seen[t]++;
        }
        if (variant == 0)
            cr_assert(seen[3] > 0 && seen[90] > 0, "the whole allowed set is reachable");
    }
    sl_sample_batch_destroy(sb);
}

Test(sample_allow, greedy_takes_the_best_allowed_token)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, 1, NULL, 1, &sb), SL_OK);
    uint32_t allow[W] = {0};
    allow_set(allow, 5);
    allow_set(allow, 40);
    allow_set(allow, 41);
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.temperature = 0.0f;
    cr_assert_eq(draw_one(sb, &p, allow, 0, NULL), 41);
    cr_assert_eq(draw_one(sb, &p, NULL, 0, NULL), V - 1, "no bitmap: every token");
    sl_sample_batch_destroy(sb);
}

Test(sample_allow, a_large_bias_does_not_resurrect_a_masked_token)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, 1, NULL, 1, &sb), SL_OK);
    uint32_t allow[W] = {0};
    allow_set(allow, 10);
    allow_set(allow, 11);
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.n_logit_bias = 2;
    p.logit_bias[0].token = 50;
    p.logit_bias[0].bias = 100.0f;
    p.logit_bias[1].token = 10;
    p.logit_bias[1].bias = 5.0f;
    p.temperature = 0.0f;
    cr_assert_eq(draw_one(sb, &p, allow, 0, NULL), 10, "the bias still ranks the allowed tokens");
    p.temperature = 1.0f;
    p.repetition_penalty = 1.3f;
    for (uint64_t seed = 0; seed < 100; seed++) {
        p.seed = seed;
        int32_t t = draw_one(sb, &p, allow, 0, NULL);
        cr_assert(t == 10 || t == 11, "seed %llu drew %d", (unsigned long long)seed, t);
    }
    sl_sample_batch_destroy(sb);
}

Test(sample_allow, nothing_allowed_draws_minus_one)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, 1, NULL, 1, &sb), SL_OK);
    uint32_t none[W] = {0};
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.temperature = 0.0f;
    cr_assert_eq(draw_one(sb, &p, none, 0, NULL), -1);
    p.temperature = 0.8f;
    p.n_logprobs = 2;
    sl_logprob_record rec;
    memset(&rec, 0x55, sizeof rec);
    cr_assert_eq(draw_one(sb, &p, none, 3, &rec), -1);
    cr_assert_eq(rec.token, -1, "the record says no token was drawn");

    /* the only allowed token banned too: nothing left */
    uint32_t one[W] = {0};
    allow_set(one, 7);
    fill(sl_sample_batch_rows(sb));
    const int32_t ban[1] = {7};
    sl_sample_req r = {.params = &p, .allow = one, .ban = ban, .n_ban = 1, .record = &rec};
    int32_t tok = 0;
    sl_sample_batch_draw(sb, &r, 1, &tok);
    cr_assert_eq(tok, -1);
    sl_sample_batch_destroy(sb);
}

Test(sample_allow, logprobs_of_a_masked_row_cover_allowed_tokens_only)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, 1, NULL, 1, &sb), SL_OK);
    uint32_t allow[W] = {0};
    allow_set(allow, 20);
    allow_set(allow, 30);
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.temperature = 0.0f;
    p.n_logprobs = 5;
    sl_logprob_record rec;
    memset(&rec, 0, sizeof rec);
    cr_assert_eq(draw_one(sb, &p, allow, 0, &rec), 30);
    cr_assert_eq(rec.token, 30);
    cr_assert(rec.logprob < 0.0f && rec.logprob > -1.0f, "renormalised over the two allowed tokens: %f",
              (double)rec.logprob);
    for (int32_t k = 0; k < rec.n_top; k++)
        cr_assert(rec.top[k].token == 20 || rec.top[k].token == 30 || !isfinite(rec.top[k].logprob),
                  "alternative %d is %d", k, rec.top[k].token);
    sl_sample_batch_destroy(sb);
}

Test(sample_allow, masked_and_unmasked_rows_in_one_batch)
{
    sl_sample_batch *sb;
    cr_assert_eq(sl_sample_batch_create(V, 3, NULL, 2, &sb), SL_OK);
    float *rows = sl_sample_batch_rows(sb);
    for (int i = 0; i < 3; i++)
        fill(rows + (size_t)i * V);
    uint32_t allow[W] = {0};
    allow_set(allow, 2);
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.temperature = 0.0f;
    sl_sample_req r[3] = {{.params = &p, .allow = allow}, {.params = &p}, {.params = &p, .allow = allow}};
    int32_t tok[3];
    sl_sample_batch_draw(sb, r, 3, tok);
    cr_assert(tok[0] == 2 && tok[1] == V - 1 && tok[2] == 2);
    sl_sample_batch_destroy(sb);
}
