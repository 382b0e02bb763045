/* tests/unit/kernels/vec_dot_q8_test.c: kernels/cpu/act_quant.c and
 * kernels/cpu/vec_dot_q8*.c. The activation formats against their
 * definitions (ggml's rules), the 8-bit dots against a float64 dot of the
 * dequantized weights and dequantized activations, AVX2 against portable,
 * and the batched path bitwise equal to the single one on both paths. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "tests/seeded.h"
#include "tests/unit/kernels/act_rows.h"

/* Dequantizes one activation row of format f into out (n floats). */
static void act_dequant(enum sl_act_format f, const void *a, float *out, int64_t n)
{
    if (f == SL_ACT_Q8_0) {
        const sl_block_q8_0 *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = sl_fp16_to_fp32(b[i / 32].d) * b[i / 32].qs[i % 32];
    } else {
        const sl_block_q8_K *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = b[i / 256].d * b[i / 256].qs[i % 256];
    }
}

/* Weights of `type` with 8-bit activations (Q8_0 or Q8_K, as the engine pairs them). */
static void qrow_make(uint32_t type, int64_t n, uint64_t seed, act_rows *r)
{
    act_rows_make(type, n, sl_act_format_of_type(type), seed, r);
}

Test(act_quant, q8_0_follows_ggml_x86_rule)
{
    float x[64];
    sl_seeded_normal(x, 64, 5);
    x[40] = 0.0f;
    sl_block_q8_0 y[2];
    sl_act_quantize_row(SL_ACT_Q8_0, x, y, 64);
    for (int b = 0; b < 2; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
        cr_expect_eq(y[b].d, sl_fp32_to_fp16(amax / 127.0f));
        for (int i = 0; i < 32; i++)
            cr_expect_eq(y[b].qs[i], (int8_t)rintf(x[32 * b + i] * (127.0f / amax)));
    }
    float z[32] = {0};
    sl_act_quantize_row(SL_ACT_Q8_0, z, y, 32);
    cr_expect_eq(y[0].d, 0);
    for (int i = 0; i < 32; i++)
        cr_expect_eq(y[0].qs[i], 0);
}

Test(act_quant, q8_K_largest_magnitude_maps_to_minus_127)
{
    float x[512];
    sl_seeded_normal(x, 512, 9);
    x[17] = -9.0f;    /* block 0: negative extreme */
    x[300] = 7.0f;    /* block 1: positive extreme */
    sl_block_q8_K y[2];
    sl_act_quantize_row(SL_ACT_Q8_K, x, y, 512);
    cr_expect_eq(y[0].qs[17], -127);
    cr_expect_eq(y[1].qs[300 - 256], -127);
    cr_expect(fabsf(y[0].d - 9.0f / 127.0f) < 1e-7f && fabsf(y[1].d + 7.0f / 127.0f) < 1e-7f);
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += y[b].qs[16 * k + i];
            cr_expect_eq(y[b].bsums[k], s);
        }
    for (int i = 0; i < 256; i++) {   /* |x - d q| <= d/2 */
        cr_expect(fabsf(x[i] - y[0].d * y[0].qs[i]) <= fabsf(y[0].d) * 0.5001f);
        cr_expect(y[0].qs[i] <= 127 && y[0].qs[i] >= -127);
    }
    float z[256] = {0};
    sl_act_quantize_row(SL_ACT_Q8_K, z, y, 256);
    cr_expect_eq(y[0].d, 0.0f);
}

Test(act_quant, float_formats_round_like_the_scalar_converters)
{
    float x[300], y[300];
    sl_seeded_normal(x, 300, 11);
    sl_act_quantize_row(SL_ACT_F16, x, y, 300);
    for (int i = 0; i < 300; i++)
        cr_expect_eq(y[i], sl_fp16_to_fp32(sl_fp32_to_fp16(x[i])));
    sl_act_quantize_row(SL_ACT_BF16, x, y, 300);
    for (int i = 0; i < 300; i++)
        cr_expect_eq(y[i], sl_bf16_to_fp32(sl_fp32_to_bf16(x[i])));
    sl_act_quantize_row(SL_ACT_F32, x, y, 300);
    cr_expect(memcmp(x, y, sizeof x) == 0);
}

Test(act_quant, nonfinite_inputs_give_in_range_codes)
{
    float x[256];
    sl_seeded_normal(x, 256, 3);
    x[5] = NAN;
    x[6] = INFINITY;
    sl_block_q8_K yk;
    sl_block_q8_0 y0[8];
    sl_act_quantize_row(SL_ACT_Q8_K, x, &yk, 256);
    sl_act_quantize_row(SL_ACT_Q8_0, x, y0, 256);
    for (int i = 0; i < 256; i++)
        cr_expect(yk.qs[i] >= -128 && y0[i / 32].qs[i % 32] >= -127);
}

Test(act_quant, env_selects_the_float_path)
{
    setenv("SLUICE_CPU_ACT", "f32", 1);
    cr_expect(!sl_act_quant_on());
    cr_expect_eq(sl_act_format_of(SL_GGML_TYPE_Q4_K), SL_ACT_F32);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q4_K), SL_ACT_Q8_K);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q4_0), SL_ACT_Q8_0);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_BF16), SL_ACT_BF16);
}

/* Against float64 of the dequantized operands: the integer part is exact,
 * so only float rounding of the block scales and sums remains. */
static void check_reference(act_rows_dot_fn fn, const char *isa)
{
    static const int64_t ns[] = {96, 160, 256, 512, 2304, 4096};
    float *xa = malloc(4096 * sizeof(float));
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
                cr_assert(fabs(got - want) <= 2e-6 * l1, "%s %s n=%ld: %.9g vs %.9g (l1 %g)", isa,
                          sl_ggml_type_name(act_rows_qtypes[t]), (long)r.n, got, want, l1);
            }
            act_rows_free(&r);
        }
    free(xa);
}

Test(vec_dot_q8, portable_matches_float64_of_dequantized_operands)
{
    check_reference(sl_vec_dot_q8_multi_portable, "portable");
}

Test(vec_dot_q8, avx2_matches_float64_of_dequantized_operands)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    check_reference(sl_vec_dot_q8_multi_avx2, "avx2");
}

/* The 8-bit activations are llama.cpp's trade: within ~1% of the float dot. */
Test(vec_dot_q8, close_to_the_float_activation_dot)
{
    for (int t = 0; t < ACT_ROWS_NQ; t++) {
        act_rows r;
        qrow_make(act_rows_qtypes[t], 4096, 7 + t, &r);
        for (int j = 0; j < 4; j++) {
            float q, f;
            sl_vec_dot_act_multi(act_rows_qtypes[t], r.f, r.q, r.a + j * r.lda, r.lda, 1, &q, r.n);
            sl_vec_dot_multi_portable(act_rows_qtypes[t], r.q, r.x + j * r.n, r.n, 1, &f, r.n);
            double l1 = 0;
            for (int64_t i = 0; i < r.n; i++)
                l1 += fabs((double)r.w[i] * r.x[j * r.n + i]);
            cr_assert(fabs((double)q - f) <= 1e-2 * l1, "%s: %g vs %g", sl_ggml_type_name(act_rows_qtypes[t]), q, f);
        }
        act_rows_free(&r);
    }
}

Test(vec_dot_q8, multi_bitwise_equals_single_portable)
{
    act_rows_check_multi_bitwise(sl_vec_dot_q8_multi_portable, sl_act_format_of_type, "portable");
}

Test(vec_dot_q8, multi_bitwise_equals_single_avx2)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    act_rows_check_multi_bitwise(sl_vec_dot_q8_multi_avx2, sl_act_format_of_type, "avx2");
}

/* The integer sums are the same on both paths; only float order differs. */
Test(vec_dot_q8, avx2_close_to_portable)
{
    if (!sl_vec_dot_avx2_available())
        cr_skip_test("no AVX2/FMA/F16C");
    for (int t = 0; t < ACT_ROWS_NQ; t++) {
        act_rows r;
        qrow_make(act_rows_qtypes[t], 4096, 77 + t, &r);
        for (int j = 0; j < 8; j++) {
            float a, p;
            sl_vec_dot_q8_multi_avx2(act_rows_qtypes[t], r.q, r.a + j * r.lda, 0, 1, &a, r.n);
            sl_vec_dot_q8_multi_portable(act_rows_qtypes[t], r.q, r.a + j * r.lda, 0, 1, &p, r.n);
            cr_assert(fabs((double)a - p) <= 1e-5 * (fabs((double)p) + 1.0), "%s: avx2 %.9g portable %.9g",
                      sl_ggml_type_name(act_rows_qtypes[t]), a, p);
        }
        act_rows_free(&r);
    }
}

/* Float formats go through the float kernels on the rounded rows. */
Test(vec_dot_q8, float_formats_dispatch_to_the_float_kernel)
{
    float w[256], x[256], out, want;
    sl_seeded_normal(w, 256, 1);
    sl_seeded_normal(x, 256, 2);
    uint16_t h[256];
    for (int i = 0; i < 256; i++)
        h[i] = sl_fp32_to_fp16(w[i]);
    sl_act_quantize_row(SL_ACT_F16, x, x, 256);
    sl_vec_dot_act_multi(SL_GGML_TYPE_F16, SL_ACT_F16, h, x, sizeof x, 1, &out, 256);
    want = sl_vec_dot(SL_GGML_TYPE_F16, h, x, 256);
    cr_expect(memcmp(&out, &want, sizeof out) == 0);
}
