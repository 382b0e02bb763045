/* tests/unit/kernels/vec_dot_rows_test.c: sl_vec_dot_act_rows (several
 * weight rows against the same activation rows; on AVX2 the Q8_0/Q4_0
 * register tiles of vec_dot_q8_avx2.c) gives each (weight row, activation
 * row) pair bitwise what sl_vec_dot_act_multi gives it one pair at a time,
 * for every quantized type, row count and batch size: the matmul may group
 * its rows freely without touching a token's logits. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "tests/unit/kernels/act_rows.h"

enum { NR = 9, M = ACT_ROWS_MAXM };   /* 9 weight rows: two tiles of 4 and a leftover row */

/* NR weight rows of `type` (seeds seed..seed+NR-1) in one matrix, row_bytes
 * apart, and the activation rows of the first (format f). */
typedef struct {
    act_rows r[NR];
    size_t row_bytes;
    char *w;
} rows_fixture;

static void fixture_make(uint32_t type, int64_t n, enum sl_act_format f, uint64_t seed, rows_fixture *fx)
{
    fx->row_bytes = sl_ggml_row_bytes(type, (uint64_t)n);
    fx->w = malloc(fx->row_bytes * NR);
    cr_assert(fx->w);
    for (int i = 0; i < NR; i++) {
        act_rows_make(type, n, f, seed + 2 * (uint64_t)i, &fx->r[i]);
        memcpy(fx->w + (size_t)i * fx->row_bytes, fx->r[i].q, fx->row_bytes);
    }
}

static void fixture_free(rows_fixture *fx)
{
    for (int i = 0; i < NR; i++)
        act_rows_free(&fx->r[i]);
    free(fx->w);
}

/* Every nr and m below against the pairs one at a time; xa/ldxa the
 * activation rows as the kernel takes them. */
static void check_rows(uint32_t type, enum sl_act_format f, const rows_fixture *fx, const void *xa, size_t ldxa,
                       int64_t n)
{
    static float single[NR][M], out[NR * M];
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < M; j++)
            sl_vec_dot_act_multi(type, f, fx->w + (size_t)i * fx->row_bytes, (const char *)xa + (size_t)j * ldxa,
                                 ldxa, 1, &single[i][j], n);
    static const int nrs[] = {1, 3, 4, 5, 8, NR};
    static const int ms[] = {1, 2, 3, 4, 5, 15, 16, 17, 32, 33, M};
    for (size_t a = 0; a < sizeof nrs / sizeof nrs[0]; a++)
        for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++) {
            int nr = nrs[a], m = ms[b];
            memset(out, 0, sizeof out);
            sl_vec_dot_act_rows(type, f, fx->w, fx->row_bytes, nr, xa, ldxa, m, out, n);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < m; j++)
                    cr_assert(memcmp(&out[i * m + j], &single[i][j], sizeof(float)) == 0,
                              "%s %s n=%ld nr=%d m=%d row %d act %d: %a vs %a", sl_vec_dot_isa(),
                              sl_ggml_type_name(type), (long)n, nr, m, i, j, out[i * m + j], single[i][j]);
        }
}

Test(vec_dot_rows, each_pair_bitwise_its_one_pair_dot)
{
    /* 160: five 32-blocks; 1184: 37 (a full stage of 32 and a short one,
     * whose tail is not a multiple of 8); 2304: 72 */
    static const int64_t ns[] = {160, 1184, 2304};
    for (int t = 0; t < ACT_ROWS_NQ; t++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            uint32_t type = act_rows_qtypes[t];
            if (ns[k] % sl_ggml_block_elems(type) != 0)
                continue;
            enum sl_act_format f = sl_act_format_of_type(type);
            rows_fixture fx;
            fixture_make(type, ns[k], f, 900 + 40 * (uint64_t)t, &fx);
            check_rows(type, f, &fx, fx.r[0].a, fx.r[0].lda, ns[k]);
            fixture_free(&fx);
        }
}

Test(vec_dot_rows, float_activations_take_the_row_by_row_path)
{
    rows_fixture fx;
    fixture_make(SL_GGML_TYPE_Q8_0, 256, SL_ACT_Q8_0, 7, &fx);
    check_rows(SL_GGML_TYPE_Q8_0, SL_ACT_F32, &fx, fx.r[0].x, 256 * sizeof(float), 256);
    fixture_free(&fx);
}

Test(vec_dot_rows, no_activation_rows_write_nothing)
{
    rows_fixture fx;
    fixture_make(SL_GGML_TYPE_Q8_0, 256, SL_ACT_Q8_0, 7, &fx);
    float out[1] = {42.0f};
    sl_vec_dot_act_rows(SL_GGML_TYPE_Q8_0, SL_ACT_Q8_0, fx.w, fx.row_bytes, NR, fx.r[0].a, fx.r[0].lda, 0, out, 256);
    cr_assert_eq(out[0], 42.0f);
    fixture_free(&fx);
}
