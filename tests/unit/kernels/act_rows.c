/* tests/unit/kernels/act_rows.c: see act_rows.h. */
#include "tests/unit/kernels/act_rows.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"
#include "tests/seeded.h"
#include "tests/seeded_blocks.h"

const uint32_t act_rows_qtypes[ACT_ROWS_NQ] = {
    SL_GGML_TYPE_Q8_0, SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K,
    SL_GGML_TYPE_Q5_0, SL_GGML_TYPE_Q4_1, SL_GGML_TYPE_Q5_1, SL_GGML_TYPE_IQ4_NL,
    SL_GGML_TYPE_Q2_K, SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_IQ4_XS, SL_GGML_TYPE_IQ2_XXS, SL_GGML_TYPE_IQ2_XS,
    SL_GGML_TYPE_IQ2_S, SL_GGML_TYPE_IQ3_XXS, SL_GGML_TYPE_IQ3_S,
    SL_GGML_TYPE_Q8_1,
    /* after the others, which keep their seeds (77 + t, 500 + t) */
    SL_GGML_TYPE_IQ1_S, SL_GGML_TYPE_IQ1_M, SL_GGML_TYPE_TQ1_0, SL_GGML_TYPE_TQ2_0,
    SL_GGML_TYPE_MXFP4,
};

void act_rows_make(uint32_t type, int64_t n, enum sl_act_format f, uint64_t seed, act_rows *r)
{
    enum { M = ACT_ROWS_MAXM };
    r->n = n;
    r->f = f;
    r->lda = (sl_act_row_bytes(f, n) + 7) / 4 * 4;
    float *src = malloc((size_t)n * sizeof(float));
    r->q = malloc(sl_ggml_row_bytes(type, (uint64_t)n));
    r->w = malloc((size_t)n * sizeof(float));
    r->a = malloc(r->lda * M);
    r->x = malloc((size_t)(n * M) * sizeof(float));
    cr_assert(src && r->q && r->w && r->a && r->x);
    sl_seeded_normal(src, n, seed);
    sl_seeded_normal(r->x, n * M, seed + 1);
    if (sl_quant_iq_grid_type(type))   /* no quantizer: random blocks */
        sl_seeded_grid_row(type, r->q, n, seed);
    else
        cr_assert_eq(sl_quant_quantize_row(type, src, r->q, n), SL_OK);
    cr_assert_eq(sl_quant_dequantize_row(type, r->q, r->w, n), SL_OK);
    for (int j = 0; j < M; j++)
        sl_act_quantize_row(f, r->x + j * n, r->a + j * r->lda, n);
    free(src);
}

void act_rows_free(act_rows *r)
{
    free(r->q);
    free(r->w);
    free(r->a);
    free(r->x);
}

void act_rows_check_multi_bitwise(act_rows_dot_fn fn, enum sl_act_format (*f_of)(uint32_t), const char *isa)
{
    enum { M = ACT_ROWS_MAXM };
    static const int64_t ns[] = {160, 256, 2304};   /* 160: five 32-blocks, a short last chunk */
    for (int t = 0; t < ACT_ROWS_NQ; t++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            uint32_t type = act_rows_qtypes[t];
            if (ns[k] % sl_ggml_block_elems(type) != 0)
                continue;
            act_rows r;
            act_rows_make(type, ns[k], f_of(type), 500 + t, &r);
            float single[M], multi[M];
            for (int j = 0; j < M; j++)
                fn(type, r.q, r.a + j * r.lda, 0, 1, &single[j], r.n);
            int ms[] = {1, 2, 3, 4, 5, 8, 9, 16, 31, 32, 33, M};
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                memset(multi, 0, sizeof multi);
                fn(type, r.q, r.a, r.lda, ms[mi], multi, r.n);
                for (int j = 0; j < ms[mi]; j++)
                    cr_assert(memcmp(&multi[j], &single[j], sizeof(float)) == 0,
                              "%s %s n=%ld m=%d j=%d: %a vs %a", isa, sl_ggml_type_name(type),
                              (long)r.n, ms[mi], j, multi[j], single[j]);
            }
            act_rows_free(&r);
        }
}
