/* tests/unit/kernels/vec_dot_test.c: kernels/cpu/vec_dot*.c. Each type and
 * several lengths against a float64 dot of the dequantized row, AVX2 against
 * portable, and the batched path bitwise equal to the single one on both
 * paths (the engine's batch-independence guarantee rests on it). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"
#include "tests/seeded.h"
#include "tests/seeded_blocks.h"

static const uint32_t types[] = {
    SL_GGML_TYPE_F32, SL_GGML_TYPE_F16, SL_GGML_TYPE_BF16, SL_GGML_TYPE_Q8_0,
    SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K,
    SL_GGML_TYPE_Q5_0, SL_GGML_TYPE_Q4_1, SL_GGML_TYPE_Q5_1, SL_GGML_TYPE_IQ4_NL,
    SL_GGML_TYPE_Q2_K, SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_IQ4_XS, SL_GGML_TYPE_IQ2_XXS, SL_GGML_TYPE_IQ2_XS,
    SL_GGML_TYPE_IQ2_S, SL_GGML_TYPE_IQ3_XXS, SL_GGML_TYPE_IQ3_S,
    SL_GGML_TYPE_Q8_1,
    /* after the others, which keep their seeds (77 + t, 500 + t) */
    SL_GGML_TYPE_IQ1_S, SL_GGML_TYPE_IQ1_M, SL_GGML_TYPE_TQ1_0, SL_GGML_TYPE_TQ2_0,
    SL_GGML_TYPE_MXFP4,
};
enum { NTYPES = sizeof types / sizeof types[0] };

/* Lengths: whole K-quant super-blocks, plus odd ones where the block allows
 * (a Q8_0 row of 96, a float row of 7 or 300 exercises every tail). */
static const int64_t lengths[] = {1, 7, 32, 96, 256, 300, 512, 2304, 4096};

typedef void (*multi_fn)(uint32_t, const void *, const float *, int64_t, int, float *, int64_t);

struct row {
    int64_t n;
    void *q;       /* quantized weights */
    float *w;      /* their dequantization */
    float *x;      /* MAXM vectors, stride ldx */
    int64_t ldx;
};
enum { MAXM = 40 };

static bool row_make(uint32_t type, int64_t n, uint64_t seed, struct row *r)
{
    if (n % sl_ggml_block_elems(type) != 0)
        return false;
    r->n = n;
    r->ldx = n + 13;   /* a stride that is not the length */
    float *src = malloc((size_t)n * sizeof(float));
    r->q = malloc(sl_ggml_row_bytes(type, (uint64_t)n));
    r->w = malloc((size_t)n * sizeof(float));
    r->x = malloc((size_t)(r->ldx * MAXM) * sizeof(float));
    cr_assert(src && r->q && r->w && r->x);
    sl_seeded_normal(src, n, seed);
    sl_seeded_normal(r->x, r->ldx * MAXM, seed + 1);
    if (sl_quant_iq_grid_type(type))   /* no quantizer: random blocks */
        sl_seeded_grid_row(type, r->q, n, seed);
    else
        cr_assert_eq(sl_quant_quantize_row(type, src, r->q, n), SL_OK);
    cr_assert_eq(sl_quant_dequantize_row(type, r->q, r->w, n), SL_OK);
    free(src);
    return true;
}

static void row_free(struct row *r)
{
    free(r->q);
    free(r->w);
    free(r->x);
}

/* float64 reference and the scale to judge an error by (sum |w x|). The
 * bound, 2e-6 of it, is float32 accumulation; the weights themselves are
 * the dequantizer's, except Q4_1/Q5_1 on AVX2, which forms d*q + m in one
 * FMA where the dequantizer rounds twice: half an ulp (3e-8) of d*q more. */
static double ref_dot(const struct row *r, const float *x, double *l1)
{
    double s = 0, a = 0;
    for (int64_t i = 0; i < r->n; i++) {
        s += (double)r->w[i] * x[i];
        a += fabs((double)r->w[i] * x[i]);
    }
    *l1 = a;
    return s;
}

static void check_against_reference(multi_fn fn, const char *isa)
{
    for (int t = 0; t < NTYPES; t++)
        for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
            struct row r;
            if (!row_make(types[t], lengths[k], 10 * t + k, &r))
                continue;
            for (int j = 0; j < 3; j++) {
                float got;
                fn(types[t], r.q, r.x + j * r.ldx, 0, 1, &got, r.n);
                double l1, want = ref_dot(&r, r.x + j * r.ldx, &l1);
                cr_assert(fabs(got - want) <= 2e-6 * l1 + 1e-30, "%s %s n=%ld: %.9g vs %.9g (l1 %g)",
                          isa, sl_ggml_type_name(types[t]), (long)r.n, got, want, l1);
            }
            row_free(&r);
        }
}

Test(vec_dot, portable_matches_float64_reference)
{
    check_against_reference(sl_vec_dot_multi_portable, "portable");
}

Test(vec_dot, avx2_matches_float64_reference)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    check_against_reference(sl_vec_dot_multi_avx2, "avx2");
}

Test(vec_dot, avx2_close_to_portable)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    for (int t = 0; t < NTYPES; t++) {
        struct row r;
        if (!row_make(types[t], 4096, 77 + t, &r))
            continue;
        for (int j = 0; j < 8; j++) {
            float a, p;
            sl_vec_dot_multi_avx2(types[t], r.q, r.x + j * r.ldx, 0, 1, &a, r.n);
            sl_vec_dot_multi_portable(types[t], r.q, r.x + j * r.ldx, 0, 1, &p, r.n);
            double l1;
            ref_dot(&r, r.x + j * r.ldx, &l1);
            cr_assert(fabs((double)a - p) <= 2e-6 * l1, "%s: avx2 %.9g portable %.9g",
                      sl_ggml_type_name(types[t]), a, p);
        }
        row_free(&r);
    }
}

static void check_multi_bitwise(multi_fn fn, const char *isa)
{
    static const int64_t ns[] = {7, 256, 2304};
    for (int t = 0; t < NTYPES; t++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            struct row r;
            if (!row_make(types[t], ns[k], 500 + t, &r))
                continue;
            float single[MAXM], multi[MAXM];
            for (int j = 0; j < MAXM; j++)
                fn(types[t], r.q, r.x + j * r.ldx, 0, 1, &single[j], r.n);
            int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 31, 32, 33, MAXM};
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                memset(multi, 0, sizeof multi);
                fn(types[t], r.q, r.x, r.ldx, ms[mi], multi, r.n);
                for (int j = 0; j < ms[mi]; j++)
                    cr_assert(memcmp(&multi[j], &single[j], sizeof(float)) == 0,
                              "%s %s n=%ld m=%d j=%d: %a vs %a", isa, sl_ggml_type_name(types[t]),
                              (long)r.n, ms[mi], j, multi[j], single[j]);
            }
            row_free(&r);
        }
}

Test(vec_dot, multi_bitwise_equals_single_portable)
{
    check_multi_bitwise(sl_vec_dot_multi_portable, "portable");
}

Test(vec_dot, multi_bitwise_equals_single_avx2)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    check_multi_bitwise(sl_vec_dot_multi_avx2, "avx2");
}

/* The public entry points agree with each other through the dispatcher. */
Test(vec_dot, dispatch_single_equals_multi)
{
    const char *isa = sl_vec_dot_isa();
    cr_assert(strcmp(isa, "avx512") == 0 || strcmp(isa, "avx2") == 0 || strcmp(isa, "portable") == 0);
    if (sl_vec_dot_avx2_available() && !sl_vec_dot_avx512_available())
        cr_expect_str_eq(isa, getenv("SLUICE_CPU_ISA") ? isa : "avx2");
    struct row r;
    row_make(SL_GGML_TYPE_Q4_K, 512, 3, &r);
    float out[5];
    sl_vec_dot_multi(SL_GGML_TYPE_Q4_K, r.q, r.x, r.ldx, 5, out, r.n);
    for (int j = 0; j < 5; j++) {
        float s = sl_vec_dot(SL_GGML_TYPE_Q4_K, r.q, r.x + j * r.ldx, r.n);
        cr_expect(memcmp(&s, &out[j], sizeof s) == 0);
    }
    sl_vec_dot_multi(SL_GGML_TYPE_Q4_K, r.q, r.x, r.ldx, 0, out, r.n);  /* m = 0: no-op */
    row_free(&r);
}

/* Criterion runs each test in its own process, so the dispatcher has not
 * chosen yet when this one sets the variable. */
Test(vec_dot, env_forces_portable)
{
    setenv("SLUICE_CPU_ISA", "portable", 1);
    cr_expect_str_eq(sl_vec_dot_isa(), "portable");
}

Test(vec_dot, env_forces_avx2)
{
    setenv("SLUICE_CPU_ISA", "avx2", 1);
    cr_expect_str_eq(sl_vec_dot_isa(), sl_vec_dot_avx2_available() ? "avx2" : "portable");
}
