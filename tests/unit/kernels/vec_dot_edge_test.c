/* tests/unit/kernels/vec_dot_edge_test.c: the grid (IQ1/IQ2/IQ3) and ternary
 * (TQ1_0/TQ2_0) weight types on rows of edge blocks (tests/seeded_blocks.h:
 * d of +-0, subnormal, +-65504 over all-zero, all-one and alternating
 * bytes), on every activation path (float32, Q8_K, Q16_K), portable and
 * AVX2: within the paths' bounds of float64 over the dequantized operands,
 * no overflow or NaN, and the 16-bit AVX2 dot bitwise the portable one.
 * The random-block rows of the same types are in the vec_dot*_test.c
 * tables; these are the blocks no quantizer writes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "tests/seeded.h"
#include "tests/seeded_blocks.h"

static const uint32_t types[] = {
    SL_GGML_TYPE_IQ1_S, SL_GGML_TYPE_IQ1_M, SL_GGML_TYPE_IQ2_XXS, SL_GGML_TYPE_IQ2_XS, SL_GGML_TYPE_IQ2_S,
    SL_GGML_TYPE_IQ3_XXS, SL_GGML_TYPE_IQ3_S, SL_GGML_TYPE_TQ1_0, SL_GGML_TYPE_TQ2_0,
};
enum { NTYPES = sizeof types / sizeof types[0], N = 256 * 48, M = 3 };

/* One activation row of format f (Q8_K or Q16_K) dequantized, exact in double. */
static void act_dequant(enum sl_act_format f, const void *a, double *out)
{
    for (int64_t i = 0; i < N; i++) {
        if (f == SL_ACT_Q8_K) {
            const sl_block_q8_K *b = (const sl_block_q8_K *)a + i / 256;
            out[i] = (double)b->d * b->qs[i % 256];
        } else {
            const sl_block_q16_K *b = (const sl_block_q16_K *)a + i / 256;
            out[i] = (double)b->d * b->qs[i % 256];
        }
    }
}

typedef void (*act_fn)(uint32_t, const void *, const void *, size_t, int, float *, int64_t);
typedef void (*f32_fn)(uint32_t, const void *, const float *, int64_t, int, float *, int64_t);

struct edge_row {
    void *q;
    float *w, *x;
    double *xd;
};

static void edge_row_make(uint32_t type, uint64_t seed, struct edge_row *r)
{
    r->q = malloc(sl_ggml_row_bytes(type, N));
    r->w = malloc(N * sizeof(float));
    r->x = malloc(M * N * sizeof(float));
    r->xd = malloc(N * sizeof(double));
    cr_assert(r->q && r->w && r->x && r->xd);
    sl_seeded_edge_row(type, r->q, N, seed);
    cr_assert_eq(sl_quant_dequantize_row(type, r->q, r->w, N), SL_OK);
    sl_seeded_normal(r->x, M * N, seed + 1);
}

static void edge_row_free(struct edge_row *r)
{
    free(r->q);
    free(r->w);
    free(r->x);
    free(r->xd);
}

/* |got - want| within `rel` of sum |w x| (float rounding of block terms). */
static void expect_near(const char *what, uint32_t type, float got, const float *w, const double *x, double rel)
{
    double want = 0, l1 = 0;
    for (int64_t i = 0; i < N; i++) {
        want += (double)w[i] * x[i];
        l1 += fabs((double)w[i] * x[i]);
    }
    cr_assert(isfinite(got) && l1 > 1e4, "%s %s: %g (l1 %g)", what, sl_ggml_type_name(type), got, l1);
    cr_assert(fabs(got - want) <= rel * l1, "%s %s: %.9g vs %.9g (l1 %g)", what, sl_ggml_type_name(type), got,
              want, l1);
}

static void check_float_path(f32_fn fn, const char *isa)
{
    for (int t = 0; t < NTYPES; t++) {
        struct edge_row r;
        edge_row_make(types[t], 40 + (uint64_t)t, &r);
        float out[M];
        fn(types[t], r.q, r.x, N, M, out, N);
        for (int j = 0; j < M; j++) {
            for (int64_t i = 0; i < N; i++)
                r.xd[i] = r.x[j * N + i];
            expect_near(isa, types[t], out[j], r.w, r.xd, 2e-6);
        }
        edge_row_free(&r);
    }
}

/* The quantized-activation paths; the 16-bit one's AVX2 result must also
 * be bitwise the portable one. */
static void check_act_path(enum sl_act_mode mode, act_fn portable, act_fn avx2, const char *what)
{
    for (int t = 0; t < NTYPES; t++) {
        struct edge_row r;
        edge_row_make(types[t], 60 + (uint64_t)t, &r);
        enum sl_act_format f = sl_act_format_of_mode(mode, types[t]);
        size_t lda = sl_act_row_bytes(f, N);
        char *a = aligned_alloc(64, (M * lda + 63) / 64 * 64);
        cr_assert(a);
        for (int j = 0; j < M; j++)
            sl_act_quantize_row(f, r.x + j * N, a + j * lda, N);
        float p[M], v[M];
        portable(types[t], r.q, a, lda, M, p, N);
        for (int j = 0; j < M; j++) {
            act_dequant(f, a + j * lda, r.xd);
            expect_near(what, types[t], p[j], r.w, r.xd, 2e-6);
        }
        if (sl_vec_dot_avx2_available()) {
            avx2(types[t], r.q, a, lda, M, v, N);
            for (int j = 0; j < M; j++) {
                act_dequant(f, a + j * lda, r.xd);
                expect_near(what, types[t], v[j], r.w, r.xd, 2e-6);
                if (mode == SL_ACT_MODE_Q16)
                    cr_assert(memcmp(&v[j], &p[j], sizeof(float)) == 0, "%s %s: avx2 %a portable %a", what,
                              sl_ggml_type_name(types[t]), v[j], p[j]);
            }
        }
        free(a);
        edge_row_free(&r);
    }
}

Test(vec_dot_edge, float_path_portable)
{
    check_float_path(sl_vec_dot_multi_portable, "f32 portable");
}

Test(vec_dot_edge, float_path_avx2)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    check_float_path(sl_vec_dot_multi_avx2, "f32 avx2");
}

Test(vec_dot_edge, q8_path)
{
    check_act_path(SL_ACT_MODE_Q8, sl_vec_dot_q8_multi_portable, sl_vec_dot_q8_multi_avx2, "q8");
}

Test(vec_dot_edge, q16_path_and_avx2_bitwise)
{
    check_act_path(SL_ACT_MODE_Q16, sl_vec_dot_q16_multi_portable, sl_vec_dot_q16_multi_avx2, "q16");
}
