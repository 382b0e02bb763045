/* tests/unit/kernels/vec_dot_q16_test.c: the 16-bit activation formats
 * (kernels/cpu/act_quant.c) and their dots (kernels/cpu/vec_dot_q16*.c):
 * the quantizer against its definition, the dots against a float64 dot of
 * the dequantized weights and codes, AVX2 bitwise equal to portable, the
 * batched path bitwise equal to the single one, the int32 bounds at the
 * extreme codes, and the SLUICE_CPU_ACT modes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"
#include "tests/seeded.h"
#include "tests/unit/kernels/act_rows.h"

static enum sl_act_format f16of(uint32_t type)
{
    return sl_act_format_of_mode(SL_ACT_MODE_Q16, type);
}

/* Dequantizes one Q16 activation row into out (n doubles, exact). */
static void act_dequant(enum sl_act_format f, const void *a, double *out, int64_t n)
{
    if (f == SL_ACT_Q16_0) {
        const sl_block_q16_0 *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = (double)b[i / 32].d * b[i / 32].qs[i % 32];
    } else {
        const sl_block_q16_K *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = (double)b[i / 256].d * b[i / 256].qs[i % 256];
    }
}

/* Weights of `type` with 16-bit activations (Q16_0 or Q16_K). */
static void qrow_make(uint32_t type, int64_t n, uint64_t seed, act_rows *r)
{
    act_rows_make(type, n, f16of(type), seed, r);
}

/* ======================================================================
 * The quantizer
 * ====================================================================== */

static void check_block16(const float *x, const int16_t *qs, float d, int bn)
{
    float amax = 0;
    for (int i = 0; i < bn; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    cr_assert(memcmp(&d, &(float){amax / 32767.0f}, sizeof d) == 0, "d %a amax %a", d, amax);
    for (int i = 0; i < bn; i++) {
        float want = d > 0 ? rintf(x[i] / d) : 0.0f;
        cr_assert_eq(qs[i], (int16_t)want, "i=%d x=%a d=%a: %d vs %g", i, x[i], d, qs[i], want);
        cr_assert(qs[i] >= -32767 && qs[i] <= 32767);
    }
}

Test(act_quant16, q16_0_is_nearest_even_of_x_over_d)
{
    float x[96];
    sl_seeded_normal(x, 96, 5);
    for (int i = 64; i < 96; i++)
        x[i] = 0.0f;   /* an all-zero block: d = 0, codes 0 */
    x[3] = 1.0f;
    x[4] = 1.0f / 65534.0f;   /* with amax 1, exactly 0.5 of a step: rounds to even, 0 */
    sl_block_q16_0 y[3];
    sl_act_quantize_row(SL_ACT_Q16_0, x, y, 96);
    for (int b = 0; b < 3; b++) {
        check_block16(x + 32 * b, y[b].qs, y[b].d, 32);
        int32_t s = 0;
        for (int i = 0; i < 32; i++)
            s += y[b].qs[i];
        cr_assert_eq(y[b].sum, s);   /* the Q4_1/Q5_1 min term's sum */
    }
    cr_expect_eq(y[2].d, 0.0f);
    cr_expect_eq(sl_act_row_bytes(SL_ACT_Q16_0, 96), 3 * sizeof(sl_block_q16_0));
}

Test(act_quant16, q16_K_codes_and_sums)
{
    float x[768];
    sl_seeded_normal(x, 768, 9);
    for (int i = 512; i < 768; i++)
        x[i] = 0.0f;
    sl_block_q16_K y[3];
    sl_act_quantize_row(SL_ACT_Q16_K, x, y, 768);
    for (int b = 0; b < 3; b++) {
        check_block16(x + 256 * b, y[b].qs, y[b].d, 256);
        for (int k = 0; k < 8; k++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i++)
                s += y[b].qs[32 * k + i];
            cr_assert_eq(y[b].bsums[k], s);
        }
    }
    cr_expect_eq(y[2].d, 0.0f);
    /* the extreme value maps to +-32767: the step is amax/32767 */
    int16_t mx = 0;
    for (int i = 0; i < 256; i++)
        mx = abs(y[0].qs[i]) > mx ? (int16_t)abs(y[0].qs[i]) : mx;
    cr_expect_eq(mx, 32767);
}

Test(act_quant16, non_finite_input_gives_in_range_codes)
{
    float x[256];
    sl_seeded_normal(x, 256, 3);
    x[7] = NAN;
    sl_block_q16_K y;
    sl_act_quantize_row(SL_ACT_Q16_K, x, &y, 256);
    for (int i = 0; i < 256; i++)
        cr_assert(y.qs[i] >= -32767 && y.qs[i] <= 32767);
    x[7] = INFINITY;
    sl_act_quantize_row(SL_ACT_Q16_K, x, &y, 256);
    cr_expect_eq(y.d, 0.0f);
}

Test(act_quant16, modes_map_types)
{
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_Q4_0), SL_ACT_Q16_0);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_Q8_0), SL_ACT_Q16_0);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_Q6_K), SL_ACT_Q16_K);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_Q5_0), SL_ACT_Q16_0);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_Q4_1), SL_ACT_Q16_0);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_F16), SL_ACT_F32);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q16, SL_GGML_TYPE_BF16), SL_ACT_F32);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q8, SL_GGML_TYPE_Q4_K), SL_ACT_Q8_K);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_Q8, SL_GGML_TYPE_F16), SL_ACT_F16);
    cr_expect_eq(sl_act_format_of_mode(SL_ACT_MODE_F32, SL_GGML_TYPE_Q4_K), SL_ACT_F32);
}

Test(act_quant16, default_mode_is_q8)
{
    unsetenv("SLUICE_CPU_ACT");
    cr_expect_eq(sl_act_mode(), SL_ACT_MODE_Q8);
    cr_expect(sl_act_quant_on());
    cr_expect_eq(sl_act_format_of(SL_GGML_TYPE_Q4_K), SL_ACT_Q8_K);
    cr_expect_eq(sl_act_format_of(SL_GGML_TYPE_Q4_0), SL_ACT_Q8_0);
}

Test(act_quant16, env_q16_selects_16bit_codes)
{
    setenv("SLUICE_CPU_ACT", "q16", 1);
    cr_expect_eq(sl_act_mode(), SL_ACT_MODE_Q16);
    cr_expect(sl_act_quant_on());
    cr_expect_eq(sl_act_format_of(SL_GGML_TYPE_Q4_K), SL_ACT_Q16_K);
    cr_expect_eq(sl_act_format_of(SL_GGML_TYPE_Q4_0), SL_ACT_Q16_0);
}

Test(act_quant16, unknown_mode_falls_back_to_the_default)
{
    setenv("SLUICE_CPU_ACT", "q4", 1);
    cr_expect_eq(sl_act_mode(), SL_ACT_MODE_Q8);
}

/* ======================================================================
 * The dots
 * ====================================================================== */

/* The integer sums are exact and the tail is double, so the result is the
 * float64 dot of the dequantized operands rounded to float, up to the
 * weights' own float dequantization (Q6_K's d*sc*q can take 25 bits). */
static void check_reference(act_rows_dot_fn fn, const char *isa)
{
    static const int64_t ns[] = {32, 160, 256, 512, 2304, 4096};
    double *xa = malloc(4096 * sizeof(double));
    for (int t = 0; t < ACT_ROWS_NQ; t++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            if (ns[k] % sl_ggml_block_elems(act_rows_qtypes[t]) != 0)
                continue;
            act_rows r;
            qrow_make(act_rows_qtypes[t], ns[k], 100 * t + k, &r);
            for (int j = 0; j < 4; j++) {
                float got;
                fn(act_rows_qtypes[t], r.q, r.a + j * r.lda, 0, 1, &got, r.n);
                act_dequant(r.f, r.a + j * r.lda, xa, r.n);
                double want = 0, l1 = 0;
                for (int64_t i = 0; i < r.n; i++) {
                    want += (double)r.w[i] * xa[i];
                    l1 += fabs((double)r.w[i] * xa[i]);
                }
                double tol = 2.0 * ldexp(1.0, ilogb(want) - 23) + 1e-7 * l1;
                cr_assert(fabs(got - want) <= tol, "%s %s n=%ld: %.9g vs %.9g (l1 %g)", isa,
                          sl_ggml_type_name(act_rows_qtypes[t]), (long)r.n, got, want, l1);
            }
            act_rows_free(&r);
        }
    free(xa);
}

Test(vec_dot_q16, portable_matches_float64_of_dequantized_operands)
{
    check_reference(sl_vec_dot_q16_multi_portable, "portable");
}

Test(vec_dot_q16, avx2_matches_float64_of_dequantized_operands)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    check_reference(sl_vec_dot_q16_multi_avx2, "avx2");
}

/* 16-bit codes: within ~1e-4 of the float activation dot, ~100x closer
 * than the 8-bit ones. */
Test(vec_dot_q16, close_to_the_float_activation_dot)
{
    for (int t = 0; t < ACT_ROWS_NQ; t++) {
        int64_t n = 4096;
        act_rows r;
        qrow_make(act_rows_qtypes[t], n, 7 + t, &r);
        const float *x = r.x;   /* the float rows the activations came from */
        for (int j = 0; j < 4; j++) {
            float q, f;
            sl_vec_dot_act_multi(act_rows_qtypes[t], r.f, r.q, r.a + j * r.lda, r.lda, 1, &q, r.n);
            sl_vec_dot_multi_portable(act_rows_qtypes[t], r.q, x + j * n, n, 1, &f, n);
            double l1 = 0;
            for (int64_t i = 0; i < n; i++)
                l1 += fabs((double)r.w[i] * x[j * n + i]);
            cr_assert(fabs((double)q - f) <= 1e-4 * l1, "%s: %g vs %g", sl_ggml_type_name(act_rows_qtypes[t]), q, f);
        }
        act_rows_free(&r);
    }
}

Test(vec_dot_q16, avx2_bitwise_equals_portable)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    static const int64_t ns[] = {32, 64, 96, 160, 256, 768, 2304, 4096};
    for (int t = 0; t < ACT_ROWS_NQ; t++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            if (ns[k] % sl_ggml_block_elems(act_rows_qtypes[t]) != 0)
                continue;
            act_rows r;
            qrow_make(act_rows_qtypes[t], ns[k], 77 + t + 10 * k, &r);
            float a[ACT_ROWS_MAXM], p[ACT_ROWS_MAXM];
            sl_vec_dot_q16_multi_avx2(act_rows_qtypes[t], r.q, r.a, r.lda, ACT_ROWS_MAXM, a, r.n);
            sl_vec_dot_q16_multi_portable(act_rows_qtypes[t], r.q, r.a, r.lda, ACT_ROWS_MAXM, p, r.n);
            for (int j = 0; j < ACT_ROWS_MAXM; j++)
                cr_assert(memcmp(&a[j], &p[j], sizeof(float)) == 0, "%s n=%ld j=%d: avx2 %a portable %a",
                          sl_ggml_type_name(act_rows_qtypes[t]), (long)r.n, j, a[j], p[j]);
            act_rows_free(&r);
        }
}

Test(vec_dot_q16, multi_bitwise_equals_single_portable)
{
    act_rows_check_multi_bitwise(sl_vec_dot_q16_multi_portable, f16of, "portable");
}

Test(vec_dot_q16, multi_bitwise_equals_single_avx2)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    act_rows_check_multi_bitwise(sl_vec_dot_q16_multi_avx2, f16of, "avx2");
}

/* The largest codes every type can hold against activations of 32767:
 * the int32 bounds in vec_dot_q16_avx2.c's note are tight for Q6_K (a
 * wrap would change the sign), and UBSan watches the portable sums. */
static void check_extreme(uint32_t type, const void *w, float xval, int64_t n)
{
    float x[512], wd[512];
    cr_assert(n <= 512);
    for (int64_t i = 0; i < n; i++)
        x[i] = xval;
    enum sl_act_format f = f16of(type);
    _Alignas(32) char a[2 * sizeof(sl_block_q16_K)];
    sl_act_quantize_row(f, x, a, n);
    cr_assert_eq(sl_quant_dequantize_row(type, w, wd, n), SL_OK);
    double xd[512], want = 0;
    act_dequant(f, a, xd, n);
    for (int64_t i = 0; i < n; i++)
        want += (double)wd[i] * xd[i];
    float got[2];
    sl_vec_dot_q16_multi_portable(type, w, a, 0, 1, &got[0], n);
    cr_assert(fabs(got[0] - want) <= 1e-6 * fabs(want), "portable %s: %.9g vs %.9g", sl_ggml_type_name(type),
              got[0], want);
    if (sl_vec_dot_avx2_available()) {
        sl_vec_dot_q16_multi_avx2(type, w, a, 0, 1, &got[1], n);
        cr_assert(memcmp(&got[0], &got[1], sizeof(float)) == 0, "avx2 %s: %a vs %a", sl_ggml_type_name(type),
                  got[1], got[0]);
    }
}

Test(vec_dot_q16, extreme_codes_do_not_overflow)
{
    sl_block_q6_K q6[2];
    memset(q6, 0, sizeof q6);   /* codes 0: q - 32 = -32 */
    for (int b = 0; b < 2; b++) {
        q6[b].d = sl_fp32_to_fp16(1.0f);
        for (int s = 0; s < 16; s++)
            q6[b].scales[s] = -128;
    }
    check_extreme(SL_GGML_TYPE_Q6_K, q6, -1.0f, 512);
    check_extreme(SL_GGML_TYPE_Q6_K, q6, 1.0f, 512);

    sl_block_q5_K q5[2];
    memset(q5, 0xFF, sizeof q5);   /* codes 31, scales and mins 63 */
    for (int b = 0; b < 2; b++)
        q5[b].d = q5[b].dmin = sl_fp32_to_fp16(1.0f);
    check_extreme(SL_GGML_TYPE_Q5_K, q5, 1.0f, 512);

    sl_block_q8_0 q8[8];
    for (int b = 0; b < 8; b++) {
        q8[b].d = sl_fp32_to_fp16(1.0f);
        memset(q8[b].qs, 0x80, sizeof q8[b].qs);   /* -128 */
    }
    check_extreme(SL_GGML_TYPE_Q8_0, q8, -1.0f, 256);

    sl_block_q5_1 q51[8];
    memset(q51, 0xFF, sizeof q51);   /* codes 31 */
    for (int b = 0; b < 8; b++) {
        q51[b].d = sl_fp32_to_fp16(1.0f);
        q51[b].m = sl_fp32_to_fp16(-1000.0f);
    }
    check_extreme(SL_GGML_TYPE_Q5_1, q51, 1.0f, 256);
    check_extreme(SL_GGML_TYPE_Q5_1, q51, -1.0f, 256);

    sl_block_iq4_nl nl[8];
    memset(nl, 0, sizeof nl);   /* level 0: -127, the largest code of the 32-element types */
    for (int b = 0; b < 8; b++)
        nl[b].d = sl_fp32_to_fp16(1.0f);
    check_extreme(SL_GGML_TYPE_IQ4_NL, nl, 1.0f, 256);
    /* MXFP4: code 15 (-12, doubled -6) in every element, the E8M0 exponent
     * at both ends of the range a finite row keeps (2^-128, and 2^100) */
    sl_block_mxfp4 mx[8];
    memset(mx, 0xFF, sizeof mx);
    for (int b = 0; b < 8; b++)
        mx[b].e = b % 2 ? 0 : 228;
    check_extreme(SL_GGML_TYPE_MXFP4, mx, 1.0f, 256);
    check_extreme(SL_GGML_TYPE_MXFP4, mx, -1.0f, 256);
    /* IQ4_XS: level -127 under scale -32 gives sc*q = 4064, the largest
     * staged value of the low-bit kernels (vec_dot_klow_avx2.c's note) */
    sl_block_iq4_xs iq4[2];
    memset(iq4, 0, sizeof iq4);
    for (int b = 0; b < 2; b++)
        iq4[b].d = sl_fp32_to_fp16(1.0f);
    check_extreme(SL_GGML_TYPE_IQ4_XS, iq4, 1.0f, 512);
    check_extreme(SL_GGML_TYPE_IQ4_XS, iq4, -1.0f, 512);

    sl_block_q3_K q3[2];
    memset(q3, 0, sizeof q3);      /* codes -4, scales -32 */
    for (int b = 0; b < 2; b++)
        q3[b].d = sl_fp32_to_fp16(1.0f);
    check_extreme(SL_GGML_TYPE_Q3_K, q3, 1.0f, 512);

    sl_block_q2_K q2[2];
    memset(q2, 0xFF, sizeof q2);   /* codes 3, scales and mins 15 */
    for (int b = 0; b < 2; b++)
        q2[b].d = q2[b].dmin = sl_fp32_to_fp16(1.0f);
    q2[1].dmin = sl_fp32_to_fp16(2.0f);   /* mins outweigh scales: negative weights */
    check_extreme(SL_GGML_TYPE_Q2_K, q2, 1.0f, 512);
    check_extreme(SL_GGML_TYPE_Q2_K, q2, -1.0f, 512);

    sl_block_q8_1 q81[8];   /* a file may hold -128 too */
    for (int b = 0; b < 8; b++) {
        q81[b].d = q81[b].s = sl_fp32_to_fp16(1.0f);
        memset(q81[b].qs, 0x80, sizeof q81[b].qs);
    }
    check_extreme(SL_GGML_TYPE_Q8_1, q81, -1.0f, 256);
}
