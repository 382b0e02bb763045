/* tests/unit/kernels/sampler_test.c: kernels/cpu/sampler.c against a plain
 * float64 reference written here (full sort, no shortcuts). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sampler.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state;

static double rnd(void)   /* xorshift64*: test data only */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

static void fill_logits(float *l, int32_t n, double scale, uint64_t seed)
{
    rng_state = seed * 2654435761u + 1;
    for (int32_t i = 0; i < n; i++) l[i] = (float)((rnd() * 2.0 - 1.0) * scale);
}

static sl_sampling_params params(void)
{
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.seed = 1234;
    return p;
}

/* One draw on a copy of `l` (the sampler edits its row). */
static int32_t draw(const sl_sampling_params *p, const float *l, int32_t n,
                    const int32_t *hist, int32_t n_hist, uint64_t di, sl_sampler_scratch *s,
                    float *work, sl_logprob_record *rec)
{
    memcpy(work, l, (size_t)n * sizeof *l);
    int32_t tok = -7;
    cr_assert_eq(sl_sampler_sample(p, work, n, hist, n_hist, di, s, &tok, rec), SL_OK);
    cr_assert(tok >= 0 && tok < n);
    return tok;
}

static const float *sort_keys;

static int ref_cmp(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_keys[i] != sort_keys[j]) return sort_keys[i] > sort_keys[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* The expected distribution, straight from the definition. */
static void ref_probs(const sl_sampling_params *p, const float *l, int32_t n, double *out)
{
    int32_t *idx = malloc((size_t)n * sizeof *idx);
    double *w = malloc((size_t)n * sizeof *w);
    for (int32_t i = 0; i < n; i++) idx[i] = i;
    sort_keys = l;
    qsort(idx, (size_t)n, sizeof *idx, ref_cmp);
    int32_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double z = 0;
    for (int32_t i = 0; i < k; i++) {
        w[i] = exp(((double)l[idx[i]] - l[idx[0]]) / p->temperature);
        z += w[i];
    }
    if (p->top_p < 1) {
        double cum = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += w[i];
            if (cum >= p->top_p * z) { k = i + 1; break; }
        }
    }
    int32_t m = 0;
    for (int32_t i = 0; i < k; i++)
        if (w[i] >= p->min_p * w[0]) { w[m] = w[i]; idx[m] = idx[i]; m++; }
    double kept = 0;
    for (int32_t i = 0; i < m; i++) kept += w[i];
    memset(out, 0, (size_t)n * sizeof *out);
    for (int32_t i = 0; i < m; i++) out[idx[i]] = w[i] / kept;
    free(idx);
    free(w);
}

/* 20k draws (draw_index 0..N-1) against ref_probs: every token within 5
 * sigma (+1 for tiny counts), and tokens with probability 0 never drawn. */
static void check_distribution(const sl_sampling_params *p, const float *l, int32_t n)
{
    enum { N = 20000 };
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(n, &s), SL_OK);
    float *work = malloc((size_t)n * sizeof *work);
    double *expect = malloc((size_t)n * sizeof *expect);
    uint32_t *seen = calloc((size_t)n, sizeof *seen);
    ref_probs(p, l, n, expect);
    for (uint64_t d = 0; d < N; d++) seen[draw(p, l, n, NULL, 0, d, s, work, NULL)]++;
    double chi2 = 0;
    int32_t support = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = expect[i] * N;
        if (expect[i] == 0) {
            cr_assert_eq(seen[i], 0, "token %d has p=0 but was drawn %u times", i, seen[i]);
            continue;
        }
        support++;
        double sd = sqrt(e * (1 - expect[i]));
        cr_assert(fabs(seen[i] - e) <= 5 * sd + 1, "token %d: seen %u expected %.1f", i, seen[i], e);
        chi2 += (seen[i] - e) * (seen[i] - e) / e;
    }
    /* chi-square with support-1 dof: mean dof, sd sqrt(2 dof); 6 sd is a loose bound */
    double dof = support > 1 ? support - 1 : 1;
    cr_assert(chi2 <= dof + 6 * sqrt(2 * dof) + 10, "chi2 %.1f for %d dof", chi2, (int)dof);
    free(seen);
    free(expect);
    free(work);
    sl_sampler_scratch_destroy(s);
}

/* ---------------------------------------------------------------- greedy */

Test(sampler, greedy_is_argmax)
{
    enum { V = 5000 };
    float *l = malloc(V * sizeof *l), *w = malloc(V * sizeof *w);
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    sl_sampling_params p = params();
    p.temperature = 0;
    for (uint64_t seed = 1; seed < 20; seed++) {
        fill_logits(l, V, 10, seed);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++) if (l[i] > l[best]) best = i;
        cr_assert_eq(draw(&p, l, V, NULL, 0, seed, s, w, NULL), best);
    }
    sl_sampler_scratch_destroy(s);
    free(l);
    free(w);
}

Test(sampler, greedy_ties_pick_lowest_id)
{
    float l[6] = { 1, 3, 2, 3, -INFINITY, 3 }, w[6];
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(6, &s), SL_OK);
    sl_sampling_params p = params();
    p.temperature = 0;
    cr_assert_eq(draw(&p, l, 6, NULL, 0, 0, s, w, NULL), 1);
    sl_sampler_scratch_destroy(s);
}

Test(sampler, top_k_1_equals_greedy)
{
    enum { V = 3000 };
    float l[V], w[V];
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    sl_sampling_params p = params(), g = params();
    p.top_k = 1;
    p.temperature = 1.5f;
    g.temperature = 0;
    for (uint64_t d = 0; d < 50; d++) {
        fill_logits(l, V, 3, d + 100);
        l[d * 7] = l[d * 7 + 1] = 5.0f;   /* a tie at the top too */
        cr_assert_eq(draw(&p, l, V, NULL, 0, d, s, w, NULL), draw(&g, l, V, NULL, 0, d, s, w, NULL));
        cr_assert_eq(draw(&g, l, V, NULL, 0, d, s, w, NULL), (int32_t)(d * 7));
    }
    sl_sampler_scratch_destroy(s);
}

Test(sampler, degenerate_rows_fall_back_to_argmax)
{
    float l[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY }, w[4];
    float nan_row[4] = { NAN, 1.0f, NAN, 0.5f };
    float inf_row[4] = { 0.0f, INFINITY, 2.0f, INFINITY };
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(4, &s), SL_OK);
    sl_sampling_params p = params();
    p.top_p = 0.5f;
    cr_assert_eq(draw(&p, l, 4, NULL, 0, 3, s, w, NULL), 0);
    cr_assert_eq(draw(&p, inf_row, 4, NULL, 0, 3, s, w, NULL), 1);
    for (uint64_t d = 0; d < 100; d++) {
        int32_t t = draw(&p, nan_row, 4, NULL, 0, d, s, w, NULL);
        cr_assert(t == 1 || t == 3);
    }
    sl_sampler_scratch_destroy(s);
}

/* ---------------------------------------------------------------- randomness */

Test(sampler, same_seed_and_index_same_token)
{
    enum { V = 1000 };
    float l[V], w[V];
    fill_logits(l, V, 1, 7);
    sl_sampler_scratch *s, *s2;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    cr_assert_eq(sl_sampler_scratch_create(V + 50, &s2), SL_OK);
    sl_sampling_params p = params();
    p.top_p = 0.95f;
    int32_t first[64];
    int distinct = 0;
    for (uint64_t d = 0; d < 64; d++) first[d] = draw(&p, l, V, NULL, 0, d, s, w, NULL);
    for (uint64_t d = 64; d-- > 0;) {   /* other order, other scratch: same tokens */
        cr_assert_eq(draw(&p, l, V, NULL, 0, d, s2, w, NULL), first[d]);
        for (uint64_t e = 0; e < d; e++) if (first[e] == first[d]) goto dup;
        distinct++;
    dup:;
    }
    cr_assert_gt(distinct, 40, "draw_index should vary the token (%d distinct)", distinct);
    sl_sampling_params q = p;
    q.seed = 99;
    int differ = 0;
    for (uint64_t d = 0; d < 64; d++) differ += draw(&q, l, V, NULL, 0, d, s, w, NULL) != first[d];
    cr_assert_gt(differ, 40);
    sl_sampler_scratch_destroy(s);
    sl_sampler_scratch_destroy(s2);
}

/* Each thread its own scratch: the same inputs give the same tokens. */
enum { THREAD_V = 20000, THREAD_DRAWS = 50 };

static void *thread_draws(void *arg)
{
    int32_t *out = arg;
    float *l = malloc(THREAD_V * sizeof *l), *w = malloc(THREAD_V * sizeof *w);
    for (int32_t i = 0; i < THREAD_V; i++) l[i] = (float)((i * 7919) % 1000) * 0.01f;
    sl_sampler_scratch *s;
    if (sl_sampler_scratch_create(THREAD_V, &s) != SL_OK) abort();
    sl_sampling_params p;
    sl_sampling_params_default(&p);
    p.seed = 5;
    p.top_p = 0.9f;
    p.frequency_penalty = 0.5f;
    int32_t h[3] = { 1, 2, 3 };
    for (uint64_t d = 0; d < THREAD_DRAWS; d++) {
        memcpy(w, l, THREAD_V * sizeof *l);
        if (sl_sampler_sample(&p, w, THREAD_V, h, 3, d, s, &out[d], NULL) != SL_OK) abort();
    }
    sl_sampler_scratch_destroy(s);
    free(l);
    free(w);
    return NULL;
}

Test(sampler, threads_agree)
{
    int32_t a[THREAD_DRAWS], b[THREAD_DRAWS];
    pthread_t ta, tb;
    cr_assert_eq(pthread_create(&ta, NULL, thread_draws, a), 0);
    cr_assert_eq(pthread_create(&tb, NULL, thread_draws, b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_assert_arr_eq(a, b, sizeof a);
}

Test(sampler, uniform_in_unit_interval)
{
    double sum = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        double u = sl_sampling_uniform(42, i);
        cr_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    cr_assert(fabs(sum / 10000 - 0.5) < 0.02);
    cr_assert_eq(sl_sampling_uniform(42, 5), sl_sampling_uniform(42, 5));
    cr_assert_neq(sl_sampling_uniform(42, 5), sl_sampling_uniform(43, 5));
}

/* ---------------------------------------------------------------- distributions */

Test(sampler, distribution_plain_softmax)
{
    float l[40];
    fill_logits(l, 40, 2, 11);
    sl_sampling_params p = params();
    check_distribution(&p, l, 40);
    p.temperature = 0.6f;
    check_distribution(&p, l, 40);
    p.temperature = 2.5f;
    check_distribution(&p, l, 40);
}

Test(sampler, distribution_top_k)
{
    float l[300];
    fill_logits(l, 300, 3, 12);
    sl_sampling_params p = params();
    p.top_k = 12;
    p.temperature = 0.8f;
    check_distribution(&p, l, 300);
}

Test(sampler, distribution_top_p_whole_vocab)
{
    enum { V = 1000 };
    float l[V];
    fill_logits(l, V, 8, 13);   /* spread over many half-nat buckets */
    sl_sampling_params p = params();
    p.top_p = 0.9f;
    check_distribution(&p, l, V);
    p.top_p = 0.3f;
    p.temperature = 0.7f;
    check_distribution(&p, l, V);
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    check_distribution(&p, l, V);
}

/* Ten equal logits: the nucleus of 0.35 is 4 tokens, and ties go to the
 * lower ids, so exactly tokens 0..3 (the cut falls inside one bucket). */
Test(sampler, top_p_cut_inside_ties_keeps_lowest_ids)
{
    float l[10] = { 0 }, w[10];
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(10, &s), SL_OK);
    sl_sampling_params p = params();
    p.top_p = 0.35f;
    uint32_t seen[10] = { 0 };
    for (uint64_t d = 0; d < 2000; d++) seen[draw(&p, l, 10, NULL, 0, d, s, w, NULL)]++;
    for (int i = 0; i < 10; i++) {
        if (i < 4) cr_assert_gt(seen[i], 400, "token %d seen %u", i, seen[i]);
        else cr_assert_eq(seen[i], 0, "token %d seen %u", i, seen[i]);
    }
    sl_sampler_scratch_destroy(s);
}

Test(sampler, distribution_min_p)
{
    float l[200];
    fill_logits(l, 200, 4, 14);
    sl_sampling_params p = params();
    p.min_p = 0.05f;
    check_distribution(&p, l, 200);
}

Test(sampler, distribution_all_filters)
{
    float l[500];
    fill_logits(l, 500, 5, 15);
    sl_sampling_params p = params();
    p.temperature = 1.3f;
    p.top_k = 60;
    p.top_p = 0.85f;
    p.min_p = 0.02f;
    check_distribution(&p, l, 500);
}

/* A 150k row, the qwen3 case: top-p over the whole vocabulary only ever
 * returns nucleus members. */
Test(sampler, top_p_large_vocab_stays_in_nucleus)
{
    enum { V = 151936 };
    float *l = malloc(V * sizeof *l), *w = malloc(V * sizeof *w);
    double *e = malloc(V * sizeof *e);
    fill_logits(l, V, 6, 16);
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    sl_sampling_params p = params();
    p.top_p = 0.8f;
    ref_probs(&p, l, V, e);
    for (uint64_t d = 0; d < 40; d++) {
        int32_t t = draw(&p, l, V, NULL, 0, d, s, w, NULL);
        cr_assert_gt(e[t], 0.0, "token %d outside the nucleus", t);
    }
    sl_sampler_scratch_destroy(s);
    free(l);
    free(w);
    free(e);
}

/* ---------------------------------------------------------------- penalties and bias */

static void penalised(const sl_sampling_params *p, const int32_t *hist, int32_t n_hist,
                      float out[5])
{
    const float base[5] = { 2.0f, -1.0f, 0.5f, 3.0f, 1.0f };
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(5, &s), SL_OK);
    memcpy(out, base, sizeof base);
    int32_t tok;
    sl_sampling_params g = *p;
    g.temperature = 0;
    cr_assert_eq(sl_sampler_sample(&g, out, 5, hist, n_hist, 0, s, &tok, NULL), SL_OK);
    sl_sampler_scratch_destroy(s);
}

#define assert_row(got, a, b, c, d, e)                                                   \
    do {                                                                                 \
        const float want_[5] = { a, b, c, d, e };                                        \
        for (int i_ = 0; i_ < 5; i_++)                                                   \
            cr_assert_float_eq(got[i_], want_[i_], 1e-6, "logit %d: %g vs %g", i_,       \
                               (double)got[i_], (double)want_[i_]);                      \
    } while (0)

/* history: token 0 twice, 1 once, 3 three times, plus ids outside the vocab */
static const int32_t hist[] = { 0, 1, -5, 0, 3, 77, 3, 3 };
#define N_HIST ((int32_t)(sizeof hist / sizeof hist[0]))

Test(sampler, repetition_penalty_divides_positive_multiplies_negative)
{
    sl_sampling_params p = params();
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = -1;
    float r[5];
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 1.0f, -2.0f, 0.5f, 1.5f, 1.0f);   /* once per distinct token */
}

Test(sampler, presence_penalty_once_per_distinct_token)
{
    sl_sampling_params p = params();
    p.presence_penalty = 0.5f;
    p.penalty_last_n = -1;
    float r[5];
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 1.5f, -1.5f, 0.5f, 2.5f, 1.0f);
}

Test(sampler, frequency_penalty_times_count)
{
    sl_sampling_params p = params();
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = -1;
    float r[5];
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 1.5f, -1.25f, 0.5f, 2.25f, 1.0f);
}

Test(sampler, penalties_combine_and_respect_window)
{
    sl_sampling_params p = params();
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = -1;
    float r[5];
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 0.0f, -2.75f, 0.5f, 0.25f, 1.0f);
    p.penalty_last_n = 3;   /* window {77, 3, 3}: token 3 twice */
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 2.0f, -1.0f, 0.5f, 0.5f, 1.0f);
    p.penalty_last_n = 0;
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 2.0f, -1.0f, 0.5f, 3.0f, 1.0f);
    p.penalty_last_n = 1000;   /* longer than the history: all of it */
    penalised(&p, hist, N_HIST, r);
    assert_row(r, 0.0f, -2.75f, 0.5f, 0.25f, 1.0f);
}

Test(sampler, penalty_counts_do_not_leak_between_calls)
{
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(5, &s), SL_OK);
    sl_sampling_params p = params();
    p.temperature = 0;
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = -1;
    for (int k = 0; k < 3; k++) {
        float r[5] = { 2.0f, -1.0f, 0.5f, 3.0f, 1.0f };
        int32_t tok;
        cr_assert_eq(sl_sampler_sample(&p, r, 5, hist, N_HIST, 0, s, &tok, NULL), SL_OK);
        assert_row(r, 0.0f, -2.0f, 0.5f, 0.0f, 1.0f);
        cr_assert_eq(tok, 4);
    }
    sl_sampler_scratch_destroy(s);
}

Test(sampler, logit_bias_bans_and_forces)
{
    enum { V = 50 };
    float l[V], w[V];
    fill_logits(l, V, 2, 17);
    l[7] = 5.0f;   /* the clear favourite */
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    sl_sampling_params p = params();
    p.n_logit_bias = 1;
    p.logit_bias[0] = (sl_logit_bias){ 7, -100.0f };
    for (uint64_t d = 0; d < 2000; d++) cr_assert_neq(draw(&p, l, V, NULL, 0, d, s, w, NULL), 7);
    p.temperature = 0;
    cr_assert_neq(draw(&p, l, V, NULL, 0, 0, s, w, NULL), 7);
    p.temperature = 1;
    p.n_logit_bias = 2;
    p.logit_bias[1] = (sl_logit_bias){ 30, 100.0f };
    for (uint64_t d = 0; d < 2000; d++) cr_assert_eq(draw(&p, l, V, NULL, 0, d, s, w, NULL), 30);
    sl_sampler_scratch_destroy(s);
}

/* ---------------------------------------------------------------- logprobs */

Test(sampler, logprobs_match_float64_log_softmax)
{
    enum { V = 4000 };
    float l[V], w[V];
    fill_logits(l, V, 12, 18);
    l[10] = l[11] = 20.0f;   /* a tie inside the top-n: lower id first */
    double m = -INFINITY, z = 0;
    for (int32_t i = 0; i < V; i++) m = fmax(m, l[i]);
    for (int32_t i = 0; i < V; i++) z += exp((double)l[i] - m);
    double log_z = m + log(z);
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(V, &s), SL_OK);
    sl_sampling_params p = params();
    p.n_logprobs = 5;
    p.temperature = 0.9f;
    p.repetition_penalty = 1.3f;   /* the record ignores bias and penalties */
    p.n_logit_bias = 1;
    p.logit_bias[0] = (sl_logit_bias){ 3, 50.0f };
    int32_t h[] = { 10, 11, 12 };
    for (uint64_t d = 0; d < 20; d++) {
        sl_logprob_record rec;
        memset(&rec, 0xff, sizeof rec);
        int32_t t = draw(&p, l, V, h, 3, d, s, w, &rec);
        cr_assert_eq(rec.token, t);
        cr_assert_float_eq(rec.logprob, l[t] - log_z, 1e-5);
        cr_assert_eq(rec.n_top, 5);
        cr_assert_eq(rec.top[0].token, 10);
        cr_assert_eq(rec.top[1].token, 11);
        for (int32_t k = 0; k < 5; k++) {
            int32_t id = rec.top[k].token;
            cr_assert_float_eq(rec.top[k].logprob, l[id] - log_z, 1e-5);
            if (k) cr_assert(rec.top[k].logprob <= rec.top[k - 1].logprob);
        }
        /* nothing outside the list beats its last entry */
        for (int32_t i = 0; i < V; i++) {
            int in = 0;
            for (int32_t k = 0; k < 5; k++) in |= rec.top[k].token == i;
            if (!in) cr_assert(l[i] <= l[rec.top[4].token]);
        }
    }
    sl_sampler_scratch_destroy(s);
}

Test(sampler, logprobs_counts_are_clamped)
{
    float l[8], w[8];
    fill_logits(l, 8, 1, 19);
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(8, &s), SL_OK);
    sl_sampling_params p = params();
    sl_logprob_record rec;
    p.n_logprobs = 0;
    draw(&p, l, 8, NULL, 0, 0, s, w, &rec);
    cr_assert_eq(rec.n_top, 0);
    p.n_logprobs = 20;
    draw(&p, l, 8, NULL, 0, 0, s, w, &rec);
    cr_assert_eq(rec.n_top, 8);
    p.n_logprobs = 500;   /* unvalidated: clamped, never overflows top[] */
    draw(&p, l, 8, NULL, 0, 0, s, w, &rec);
    cr_assert_eq(rec.n_top, 8);
    sl_sampler_scratch_destroy(s);
}

/* ---------------------------------------------------------------- errors */

Test(sampler, bad_arguments_are_einval)
{
    float l[8] = { 0 };
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(0, &s), SL_EINVAL);
    cr_assert_null(s);
    cr_assert_eq(sl_sampler_scratch_create(8, &s), SL_OK);
    sl_sampling_params p = params();
    int32_t tok = 5;
    cr_assert_eq(sl_sampler_sample(&p, l, 9, NULL, 0, 0, s, &tok, NULL), SL_EINVAL);
    cr_assert_eq(tok, -1);
    cr_assert_eq(sl_sampler_sample(&p, l, 0, NULL, 0, 0, s, &tok, NULL), SL_EINVAL);
    p.n_logprobs = 2;
    cr_assert_eq(sl_sampler_sample(&p, l, 8, NULL, 0, 0, s, &tok, NULL), SL_EINVAL);
    sl_sampler_scratch_destroy(s);
    sl_sampler_scratch_destroy(NULL);
}

Test(sampler, unvalidated_params_stay_in_bounds)
{
    float l[16], w[16];
    fill_logits(l, 16, 2, 20);
    sl_sampler_scratch *s;
    cr_assert_eq(sl_sampler_scratch_create(16, &s), SL_OK);
    sl_sampling_params p = params();
    p.n_logit_bias = 100000;
    p.logit_bias[0] = (sl_logit_bias){ 999, 5.0f };
    p.top_k = -3;
    p.top_p = NAN;
    p.min_p = 7.0f;
    p.repetition_penalty = -1.0f;
    p.penalty_last_n = -20;
    int32_t h[] = { 1, 2, 40, -1 };
    draw(&p, l, 16, h, 4, 0, s, w, NULL);
    p.temperature = NAN;
    draw(&p, l, 16, h, 4, 0, s, w, NULL);
    p.temperature = 1;
    p.top_k = 4;
    p.n_logit_bias = 2;
    p.logit_bias[1] = (sl_logit_bias){ 3, INFINITY };
    p.presence_penalty = NAN;
    l[5] = -INFINITY;
    p.logit_bias[0] = (sl_logit_bias){ 5, -INFINITY };
    draw(&p, l, 16, h, 4, 0, s, w, NULL);
    p.temperature = INFINITY;
    draw(&p, l, 16, h, 4, 0, s, w, NULL);
    p.temperature = 1e-30f;
    p.min_p = 0;
    int32_t best = 0;
    for (int32_t i = 1; i < 16; i++) if (l[i] > l[best]) best = i;
    p.n_logit_bias = 0;
    p.repetition_penalty = 1;
    cr_assert_eq(draw(&p, l, 16, NULL, 0, 0, s, w, NULL), best);
    sl_sampler_scratch_destroy(s);
}
