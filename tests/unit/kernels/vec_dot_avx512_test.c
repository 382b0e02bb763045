/* tests/unit/kernels/vec_dot_avx512_test.c: the AVX-512 8-bit kernels
 * (vec_dot_q8_avx512.c) give bitwise the AVX2 kernels' results, for every
 * quantized type (the ones they do not take pass through), row count and
 * batch size, on quantizer-made rows and on rows of arbitrary bytes (every
 * code pattern a file may hold, such as Q8_0's -128). Skipped on a CPU
 * without AVX-512 VNNI. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "tests/unit/kernels/act_rows.h"

enum { NR = 9, M = ACT_ROWS_MAXM };

static void skip_without_avx512(void)
{
    if (!sl_vec_dot_avx512_available())
        cr_skip_test("no AVX-512 VNNI on this CPU");
}

/* The same call through both ISAs: multi (one weight row) and rows (nr). */
static void check_both(uint32_t type, const char *w, size_t row_bytes, const char *xa, size_t ldxa, int64_t n,
                       const char *what)
{
    static float a[NR * M], b[NR * M];
    static const int nrs[] = {1, 4, 5, NR};
    static const int ms[] = {1, 2, 3, 5, 17, 33, M};
    for (size_t i = 0; i < sizeof nrs / sizeof nrs[0]; i++)
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
            int nr = nrs[i], m = ms[k];
            memset(a, 0, sizeof a);
            memset(b, 0xff, sizeof b);
            sl_vec_dot_q8_rows_avx2(type, w, row_bytes, nr, xa, ldxa, m, a, n);
            sl_vec_dot_q8_rows_avx512(type, w, row_bytes, nr, xa, ldxa, m, b, n);
            for (int j = 0; j < nr * m; j++)
                cr_assert(memcmp(&a[j], &b[j], sizeof(float)) == 0, "%s %s n=%ld nr=%d m=%d out %d: avx2 %a, avx512 %a",
                          what, sl_ggml_type_name(type), (long)n, nr, m, j, a[j], b[j]);
            memset(b, 0xff, sizeof b);
            sl_vec_dot_q8_multi_avx512(type, w, xa, ldxa, m, b, n);
            for (int j = 0; j < m; j++)
                cr_assert(memcmp(&a[j], &b[j], sizeof(float)) == 0, "%s %s n=%ld m=%d multi %d: avx2 %a, avx512 %a",
                          what, sl_ggml_type_name(type), (long)n, m, j, a[j], b[j]);
        }
}

/* NR weight rows of `type` in one matrix; act_rows gives the activations. */
static char *weights(uint32_t type, int64_t n, uint64_t seed, act_rows r[NR], size_t *row_bytes)
{
    *row_bytes = sl_ggml_row_bytes(type, (uint64_t)n);
    char *w = malloc(*row_bytes * NR);
    cr_assert(w);
    for (int i = 0; i < NR; i++) {
        act_rows_make(type, n, sl_act_format_of_type(type), seed + 2 * (uint64_t)i, &r[i]);
        memcpy(w + (size_t)i * *row_bytes, r[i].q, *row_bytes);
    }
    return w;
}

Test(vec_dot_avx512, bitwise_the_avx2_kernels, .init = skip_without_avx512)
{
    /* 256 one super-block; 1184 (37 32-blocks, a tail not a multiple of 8);
     * 2304: nine super-blocks */
    static const int64_t ns[] = {256, 1184, 2304};
    for (int t = 0; t < ACT_ROWS_NQ; t++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            uint32_t type = act_rows_qtypes[t];
            if (ns[k] % sl_ggml_block_elems(type) != 0)
                continue;
            act_rows r[NR];
            size_t rb;
            char *w = weights(type, ns[k], 500 + 30 * (uint64_t)t, r, &rb);
            check_both(type, w, rb, r[0].a, r[0].lda, ns[k], "quantized");
            for (int i = 0; i < NR; i++)
                act_rows_free(&r[i]);
            free(w);
        }
}

/* Every byte of the blocks random but the fp16 scales, which stay finite
 * (small powers of two), so no code pattern is left out. */
static void scramble(uint32_t type, char *w, size_t bytes, uint64_t seed)
{
    for (size_t i = 0; i < bytes; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (char)(seed >> 56);
    }
    size_t bb = sl_ggml_block_bytes(type);
    uint16_t one = 0x3c00, half = 0x3800;   /* fp16 1.0 and 0.5 */
    for (size_t b = 0; b + bb <= bytes; b += bb) {
        char *blk = w + b;
        switch (type) {
        case SL_GGML_TYPE_Q8_0: memcpy(blk, &one, 2); break;
        case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q5_0: memcpy(blk, &half, 2); break;
        case SL_GGML_TYPE_Q4_K: memcpy(blk + offsetof(sl_block_q4_K, d), &one, 2);
                                memcpy(blk + offsetof(sl_block_q4_K, dmin), &half, 2); break;
        case SL_GGML_TYPE_Q5_K: memcpy(blk + offsetof(sl_block_q5_K, d), &one, 2);
                                memcpy(blk + offsetof(sl_block_q5_K, dmin), &half, 2); break;
        case SL_GGML_TYPE_Q6_K: memcpy(blk + offsetof(sl_block_q6_K, d), &half, 2); break;
        default: break;
        }
    }
}

Test(vec_dot_avx512, bitwise_the_avx2_kernels_on_arbitrary_codes, .init = skip_without_avx512)
{
    static const uint32_t types[] = {SL_GGML_TYPE_Q8_0, SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q5_0,
                                     SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K};
    const int64_t n = 1024;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        act_rows r[NR];
        size_t rb;
        char *w = weights(types[t], n, 70 + (uint64_t)t, r, &rb);
        scramble(types[t], w, rb * NR, 1234 + t);
        check_both(types[t], w, rb, r[0].a, r[0].lda, n, "arbitrary");
        for (int i = 0; i < NR; i++)
            act_rows_free(&r[i]);
        free(w);
    }
}

Test(vec_dot_avx512, chosen_when_the_cpu_has_it_unless_told_avx2)
{
    const char *isa = sl_vec_dot_isa();
    const char *env = getenv("SLUICE_CPU_ISA");
    if (!env)
        cr_expect_str_eq(isa, sl_vec_dot_avx512_available() ? "avx512"
                              : sl_vec_dot_avx2_available() ? "avx2" : "portable");
}
