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
    } else if (f == SL_ACT_Q8_1) {
        const sl_block_q8_1 *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = sl_fp16_to_fp32(b[i / 32].d) * b[i / 32].qs[i % 32];
    } else {
        const sl_block_q8_K *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = b[i / 256].d * b[i / 256].qs[i % 256];
    }
}

/* Q4_1/Q5_1 against Q8_1: the format's block sum is s (fp16), not the sum
 * of the dequantized codes, so the exact value of the dot the format
 * defines adds m_b * (s_b - d_b * sum(q_b)) per block to the dequantized
 * operands' dot. 0 for the other types. *mins_l1 (if not NULL) gets
 * sum_b |m_b * s_b|, the size of the min terms. */
static double q8_1_sum_term(uint32_t type, const void *w, const void *a, int64_t n, double *mins_l1)
{
    if (mins_l1)
        *mins_l1 = 0.0;
    if (type != SL_GGML_TYPE_Q4_1 && type != SL_GGML_TYPE_Q5_1)
        return 0.0;
    const sl_block_q8_1 *x = a;
    double t = 0.0;
    for (int64_t b = 0; b < n / 32; b++) {
        uint16_t hm = type == SL_GGML_TYPE_Q4_1 ? ((const sl_block_q4_1 *)w)[b].m : ((const sl_block_q5_1 *)w)[b].m;
        double m = sl_fp16_to_fp32(hm), s = sl_fp16_to_fp32(x[b].s);
        int sum = 0;
        for (int i = 0; i < 32; i++)
            sum += x[b].qs[i];
        t += m * (s - (double)sl_fp16_to_fp32(x[b].d) * sum);
        if (mins_l1)
            *mins_l1 += fabs(m * s);
    }
    return t;
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
    sl_block_q8_0 y[3];   /* 2 blocks and their float scales (act_quant.h) */
    cr_assert_leq(sl_act_row_bytes(SL_ACT_Q8_0, 64), sizeof y);
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

Test(act_quant, q8_0_row_ends_with_its_scales_as_floats)
{
    /* odd block counts leave the blocks' end 2 bytes off a float boundary */
    for (int64_t n = 32; n <= 352; n += 32) {
        float x[352];
        _Alignas(4) char y[512];
        sl_seeded_normal(x, n, (uint64_t)n);
        x[3] = 0.0f;
        if (n == 64)
            for (int i = 32; i < 64; i++)
                x[i] = 0.0f;   /* an all-zero block: d = 0 */
        int64_t nb = n / 32;
        size_t blocks = (size_t)nb * sizeof(sl_block_q8_0);
        cr_assert_eq(sl_act_row_bytes(SL_ACT_Q8_0, n), (blocks + 3) / 4 * 4 + (size_t)nb * sizeof(float));
        memset(y, 0x5A, sizeof y);
        sl_act_quantize_row(SL_ACT_Q8_0, x, y, n);
        const sl_block_q8_0 *b = (const sl_block_q8_0 *)y;
        const float *s = sl_act_q8_0_scales(y, n);
        cr_assert_eq((const char *)s - y, (ptrdiff_t)((blocks + 3) / 4 * 4));
        for (int64_t i = 0; i < nb; i++)
            cr_expect_eq(s[i], sl_fp16_to_fp32(b[i].d), "n %lld block %lld", (long long)n, (long long)i);
        for (size_t i = sl_act_row_bytes(SL_ACT_Q8_0, n); i < sizeof y; i++)
            cr_expect_eq(y[i], 0x5A, "n %lld wrote byte %zu past the row", (long long)n, i);
    }
}

Test(act_quant, q8_1_is_q8_0_plus_ggml_sum)
{
    float x[64];
    sl_seeded_normal(x, 64, 6);
    for (int i = 32; i < 64; i++)
        x[i] = 0.0f;
    sl_block_q8_1 y[2];
    sl_block_q8_0 y0[3];
    sl_act_quantize_row(SL_ACT_Q8_1, x, y, 64);
    sl_act_quantize_row(SL_ACT_Q8_0, x, y0, 64);
    cr_expect_eq(sl_act_row_bytes(SL_ACT_Q8_1, 64), 2 * sizeof(sl_block_q8_1));
    for (int b = 0; b < 2; b++) {
        cr_expect_eq(y[b].d, y0[b].d);
        cr_expect(memcmp(y[b].qs, y0[b].qs, 32) == 0);
        float amax = 0;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
            sum += y[b].qs[i];
        }
        cr_expect_eq(y[b].s, sl_fp32_to_fp16(amax / 127.0f * (float)sum));
    }
    cr_expect_eq(y[1].s, 0);
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
    sl_block_q8_0 y0[9];
    sl_act_quantize_row(SL_ACT_Q8_K, x, &yk, 256);
    sl_act_quantize_row(SL_ACT_Q8_0, x, y0, 256);
    for (int i = 0; i < 256; i++)
        cr_expect(yk.qs[i] >= -128 && y0[i / 32].qs[i % 32] >= -127);
}

/* The maximum and the clamp are comparisons, not fmaxf/fminf calls: a
 * (quiet) NaN must still be ignored by the block's maximum, wherever it
 * sits, and round to -127 (fmaxf's answer), and an infinity still wins. */
Test(act_quant, nan_is_ignored_by_the_block_maximum_as_fmaxf_does)
{
    for (int at = 0; at < 32; at++) {
        float x[32];
        sl_seeded_normal(x, 32, 11);
        float amax = 0;
        for (int i = 0; i < 32; i++)
            if (i != at)
                amax = fmaxf(amax, fabsf(x[i]));
        x[at] = NAN;
        sl_block_q8_0 y[2];
        sl_act_quantize_row(SL_ACT_Q8_0, x, y, 32);
        cr_assert_eq(y[0].d, sl_fp32_to_fp16(amax / 127.0f), "NaN at %d", at);
        cr_assert_eq(y[0].qs[at], -127);
        for (int i = 0; i < 32; i++)
            if (i != at)
                cr_assert_eq(y[0].qs[i], (int8_t)rintf(x[i] * (127.0f / amax)), "NaN at %d, code %d", at, i);
    }
    float x[32] = {1.0f, INFINITY, -2.0f};
    sl_block_q8_0 y[2];
    sl_act_quantize_row(SL_ACT_Q8_0, x, y, 32);
    cr_assert_eq(y[0].d, sl_fp32_to_fp16(INFINITY));
    cr_assert_eq(y[0].qs[1], -127);   /* inf * 0 is NaN: the clamp's -127 */
    cr_assert_eq(y[0].qs[0], 0);
}

Test(act_quant, env_selects_the_float_path)
{
    setenv("SLUICE_CPU_ACT", "f32", 1);
    cr_expect(!sl_act_quant_on());
    cr_expect_eq(sl_act_format_of(SL_GGML_TYPE_Q4_K), SL_ACT_F32);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q4_K), SL_ACT_Q8_K);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q4_0), SL_ACT_Q8_0);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q5_0), SL_ACT_Q8_0);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q4_1), SL_ACT_Q8_1);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_Q5_1), SL_ACT_Q8_1);
    cr_expect_eq(sl_act_format_of_type(SL_GGML_TYPE_BF16), SL_ACT_BF16);
}

/* Against float64 of the dequantized operands (plus q8_1_sum_term: the
 * value the formats define): the integer part is exact, so only float
 * rounding of the block scales and sums remains, 2e-6 of sum |w x|. */
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
                double want = q8_1_sum_term(act_rows_qtypes[t], r.q, r.a + j * r.lda, r.n, NULL), l1 = 0;
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

/* The integer sums are the same on both paths; only float order differs.
 * Q4_1/Q5_1: the AVX2 kernel sums the min terms m*s apart from the lanes
 * (ggml's order: bitwise llama.cpp), the portable one per block, so the
 * two differ by float32 rounding of terms as large as sum |m s|, which the
 * result's cancellation hides: 1e-6 of that size on top. */
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
            double mins_l1;
            q8_1_sum_term(act_rows_qtypes[t], r.q, r.a + j * r.lda, r.n, &mins_l1);
            cr_assert(fabs((double)a - p) <= 1e-5 * (fabs((double)p) + 1.0) + 1e-6 * mins_l1,
                      "%s: avx2 %.9g portable %.9g", sl_ggml_type_name(act_rows_qtypes[t]), a, p);
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

/* Q5_0 rows of edge blocks through the 8-bit kernels (the AVX2 one builds
 * the codes from 256-bit bit tricks, and runs one row without staging):
 * every qh pattern x nibble pattern, d = 1, against activations of +-127
 * codes. Both kernels give the exact integer dot (it is small enough to be
 * exact in float), and the AVX2 one the same bits for m = 1, 4 and 5. */
Test(vec_dot_q8, q5_0_edge_codes_exact_on_both_paths)
{
    static const uint32_t qh[] = {0x00000000u, 0xFFFFFFFFu, 0xAAAAAAAAu, 0x55555555u, 0x80000001u, 0x0000FFFFu};
    static const uint8_t qs[] = {0x00, 0xFF, 0x0F, 0xF0, 0x5A};
    enum { NB = 6 * 5, N = NB * 32, M = 5 };
    sl_block_q5_0 w[NB];
    for (int b = 0; b < NB; b++) {
        w[b].d = sl_fp32_to_fp16(1.0f);
        memcpy(w[b].qh, &qh[b / 5], 4);
        memset(w[b].qs, qs[b % 5], 16);
    }
    size_t lda = (sl_act_row_bytes(SL_ACT_Q8_0, N) + 3) / 4 * 4;
    char *a = aligned_alloc(32, (lda * M + 31) / 32 * 32);   /* C17: size a multiple of the alignment */
    float x[N];
    for (int j = 0; j < M; j++) {
        for (int i = 0; i < N; i++)
            x[i] = ((i * 7 + j) % 3 == 0) ? -1.0f : 1.0f;   /* codes +-127 */
        sl_act_quantize_row(SL_ACT_Q8_0, x, a + j * lda, N);
    }
    for (int j = 0; j < M; j++) {
        const sl_block_q8_0 *xa = (const sl_block_q8_0 *)(a + j * lda);
        double want = 0;
        for (int b = 0; b < NB; b++) {
            int sumi = 0;
            for (int l = 0; l < 32; l++) {
                int nib = l < 16 ? (qs[b % 5] & 0xF) : (qs[b % 5] >> 4);
                int q = nib + 16 * (int)((qh[b / 5] >> l) & 1) - 16;
                sumi += q * xa[b].qs[l];
            }
            want += (double)sl_fp16_to_fp32(xa[b].d) * sumi;
        }
        float got;
        sl_vec_dot_q8_multi_portable(SL_GGML_TYPE_Q5_0, w, a + j * lda, lda, 1, &got, N);
        cr_expect(fabs(got - want) <= 1e-6 * fabs(want) + 1e-6, "portable row %d: %.9g vs %.9g", j, got, want);
        if (!sl_vec_dot_avx2_available())
            continue;
        sl_vec_dot_q8_multi_avx2(SL_GGML_TYPE_Q5_0, w, a + j * lda, lda, 1, &got, N);
        cr_expect(fabs(got - want) <= 1e-6 * fabs(want) + 1e-6, "avx2 row %d: %.9g vs %.9g", j, got, want);
        for (int m = 4; m <= 5; m++) {
            float multi[M];
            sl_vec_dot_q8_multi_avx2(SL_GGML_TYPE_Q5_0, w, a, lda, m, multi, N);
            if (j < m)
                cr_expect(memcmp(&multi[j], &got, sizeof got) == 0, "avx2 m=%d row %d: %a vs %a", m, j, multi[j], got);
        }
    }
    free(a);
}
