/* tests/unit/kernels/logprob_record_test.c: sl_sampler_logprob_record (a
 * given token's record from a raw row, the worker's prompt logprobs) against
 * a float64 log-softmax and a full sort written here, and against the record
 * sl_sampler_sample gives the token it draws. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sampler.h"

static void fill(float *l, int32_t n, uint64_t seed)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int32_t i = 0; i < n; i++) {
        z ^= z >> 12;
        z ^= z << 25;
        z ^= z >> 27;
        l[i] = (float)((double)((z * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53 * 24.0 - 12.0);
    }
}

static double ref_log_z(const float *l, int32_t n)
{
    double m = -INFINITY, z = 0;
    for (int32_t i = 0; i < n; i++) m = fmax(m, l[i]);
    for (int32_t i = 0; i < n; i++) z += exp((double)l[i] - m);
    return m + log(z);
}

/* Within float rounding of the float64 value: 1e-6 relative (an ulp at 32 is 4e-6). */
static int close_to(float got, double want)
{
    return fabs((double)got - want) <= 1e-6 * fmax(1.0, fabs(want));
}

typedef struct { float x; int32_t id; } ent;

static int ent_cmp(const void *pa, const void *pb)
{
    const ent *a = pa, *b = pb;
    if (a->x != b->x) return a->x > b->x ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

Test(logprob_record, matches_float64_log_softmax_and_a_full_sort)
{
    enum { V = 3000 };
    float l[V];
    ent e[V];
    for (uint64_t seed = 1; seed <= 5; seed++) {
        fill(l, V, seed);
        l[100] = l[7] = 30.0f;   /* a tie at the top: lower id first */
        double log_z = ref_log_z(l, V);
        for (int32_t i = 0; i < V; i++) e[i] = (ent){ l[i], i };
        qsort(e, V, sizeof *e, ent_cmp);
        for (int32_t n_top = 0; n_top <= SL_TOP_LOGPROBS_MAX; n_top += 4) {
            int32_t tok = (int32_t)(seed * 331 % V);
            sl_logprob_record r;
            memset(&r, 0xff, sizeof r);
            cr_assert_eq(sl_sampler_logprob_record(l, V, tok, n_top, &r), SL_OK);
            cr_assert_eq(r.token, tok);
            cr_assert(close_to(r.logprob, (double)l[tok] - log_z));
            cr_assert_eq(r.n_top, n_top);
            for (int32_t k = 0; k < n_top; k++) {
                cr_assert_eq(r.top[k].token, e[k].id, "seed %llu rank %d", (unsigned long long)seed, k);
                cr_assert(close_to(r.top[k].logprob, (double)e[k].x - log_z));
            }
        }
    }
}

/* The same row gives a drawn token the very record a given one gets, bit
 * for bit: generated and prompt logprobs are one computation. */
Test(logprob_record, equals_the_samplers_record_for_the_drawn_token)
{
    enum { V = 2000 };
    float l[V], w[V];
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.n_logprobs = 5;
    p.temperature = 0.8f;
    for (uint64_t d = 0; d < 10; d++) {
        fill(l, V, 40 + d);
        memcpy(w, l, sizeof l);
        int32_t tok;
        sl_logprob_record a, b;
        cr_assert_eq(sl_sampler_sample(&p, w, V, NULL, 0, d, s, &tok, &a), SL_OK);
        cr_assert_eq(sl_sampler_logprob_record(l, V, tok, 5, &b), SL_OK);
        cr_assert_eq(a.token, b.token);
        cr_assert_eq(memcmp(&a.logprob, &b.logprob, sizeof a.logprob), 0);
        cr_assert_eq(a.n_top, b.n_top);
        cr_assert_eq(memcmp(a.top, b.top, (size_t)a.n_top * sizeof a.top[0]), 0);
    }
    sl_sampler_scratch_destroy(s);
}

Test(logprob_record, nan_is_minus_infinity_and_counts_are_clamped)
{
    float l[6] = { 1.0f, NAN, 3.0f, 2.0f, NAN, 0.0f };
    sl_logprob_record r;
    cr_assert_eq(sl_sampler_logprob_record(l, 6, 1, 500, &r), SL_OK);
    cr_assert(isinf(l[1]) && l[1] < 0);
    cr_assert_eq(r.n_top, 6);
    cr_assert(isinf(r.logprob) && r.logprob < 0, "a NaN logit has probability 0");
    cr_assert_eq(r.top[0].token, 2);
    cr_assert_eq(r.top[1].token, 3);
    cr_assert_eq(sl_sampler_logprob_record(l, 6, 2, -3, &r), SL_OK);
    cr_assert_eq(r.n_top, 0);
}

Test(logprob_record, bad_arguments_are_einval)
{
    float l[4] = { 0 };
    sl_logprob_record r;
    r.token = 77;
    cr_assert_eq(sl_sampler_logprob_record(l, 4, 4, 1, &r), SL_EINVAL);
    cr_assert_eq(sl_sampler_logprob_record(l, 4, -1, 1, &r), SL_EINVAL);
    cr_assert_eq(sl_sampler_logprob_record(l, 0, 0, 1, &r), SL_EINVAL);
    cr_assert_eq(sl_sampler_logprob_record(NULL, 4, 0, 1, &r), SL_EINVAL);
    cr_assert_eq(sl_sampler_logprob_record(l, 4, 0, 1, NULL), SL_EINVAL);
    cr_assert_eq(r.token, 77, "the record is untouched on failure");
}
