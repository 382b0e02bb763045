/* tools/quantdump/quantdump.c: dumps sluice's quantizer output for the
 * Python reference check, and benchmarks the vec_dot kernels.
 *
 *   quantdump DIR [N]        for each computed type T, writes DIR/T.src (N
 *                            seeded N(0,1) float32), DIR/T.q (our quantized
 *                            bytes), DIR/T.deq (our dequantized float32), and
 *                            prints the RMSE per type. N defaults to 4096.
 *                            The types read from random blocks (grid and
 *                            ternary) also get DIR/T.edge.q and .edge.deq:
 *                            N elements opening with the edge blocks of
 *                            tests/seeded_blocks.h.
 *   quantdump --bench [ROWS COLS [ITERS]]
 *                            GB/s of weights streamed by one thread through
 *                            sl_vec_dot over a ROWS x COLS matrix (default
 *                            2048 x 8192) per type and ISA, plus the batched
 *                            path with 8 vectors.
 * Trade-off: the benchmark quantizes 16 distinct rows and tiles them over
 * the matrix (quantizing 16M weights with the K-quant search takes seconds);
 * the memory traffic is the same. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    SL_GGML_TYPE_Q8_1,
    SL_GGML_TYPE_Q2_K, SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_IQ4_XS, SL_GGML_TYPE_TQ1_0, SL_GGML_TYPE_TQ2_0,
    /* no quantizer: seeded random blocks (T.src is then our decoding too) */
    SL_GGML_TYPE_IQ2_XXS, SL_GGML_TYPE_IQ2_XS, SL_GGML_TYPE_IQ2_S, SL_GGML_TYPE_IQ3_XXS, SL_GGML_TYPE_IQ3_S,
    SL_GGML_TYPE_IQ1_S, SL_GGML_TYPE_IQ1_M,
    SL_GGML_TYPE_MXFP4,   /* last, so the others keep their seeds */
};
enum { NTYPES = sizeof types / sizeof types[0] };

static int write_file(const char *dir, const char *name, const char *ext, const void *p, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t w = fwrite(p, 1, len, f);
    if (fclose(f) != 0 || w != len) {
        perror(path);
        return -1;
    }
    return 0;
}

static int dump(const char *dir, int64_t n)
{
    float *src = malloc((size_t)n * sizeof(float)), *deq = malloc((size_t)n * sizeof(float));
    void *q = malloc((size_t)n * sizeof(float));
    int rc = 0;
    if (!src || !deq || !q) {
        fprintf(stderr, "quantdump: out of memory\n");
        rc = 1;
        goto out;
    }
    for (int t = 0; t < NTYPES && rc == 0; t++) {
        const char *name = sl_ggml_type_name(types[t]);
        size_t qbytes = sl_ggml_row_bytes(types[t], (uint64_t)n);
        bool grid = sl_quant_iq_grid_type(types[t]);
        sl_seeded_normal(src, n, 1234 + (uint64_t)t);
        if (grid && qbytes != 0)
            sl_seeded_grid_row(types[t], q, n, 1234 + (uint64_t)t);
        if (qbytes == 0 || (!grid && sl_quant_quantize_row(types[t], src, q, n) < 0)
            || sl_quant_dequantize_row(types[t], q, deq, n) < 0) {
            fprintf(stderr, "quantdump: %s: n=%" PRId64 " is not a whole number of blocks\n", name, n);
            rc = 1;
            break;
        }
        if (grid)
            memcpy(src, deq, (size_t)n * sizeof(float));
        double se = 0;
        for (int64_t i = 0; i < n; i++)
            se += ((double)deq[i] - src[i]) * ((double)deq[i] - src[i]);
        if (grid)
            printf("%-5s random blocks, n=%" PRId64 "\n", name, n);
        else
            printf("%-5s rmse %.6f (N(0,1), n=%" PRId64 ")\n", name, sqrt(se / (double)n), n);
        if (write_file(dir, name, "src", src, (size_t)n * 4) || write_file(dir, name, "q", q, qbytes)
            || write_file(dir, name, "deq", deq, (size_t)n * 4))
            rc = 1;
        if (rc == 0 && (grid || sl_quant_tq_type(types[t]))) {
            sl_seeded_edge_row(types[t], q, n, 4321 + (uint64_t)t);
            if (sl_quant_dequantize_row(types[t], q, deq, n) < 0 || write_file(dir, name, "edge.q", q, qbytes)
                || write_file(dir, name, "edge.deq", deq, (size_t)n * 4))
                rc = 1;
        }
        if (rc == 0 && types[t] == SL_GGML_TYPE_MXFP4) {
            /* every E8M0 exponent (block b has e = b % 256) over random
             * codes: the quantizer writes only the exponents of its data */
            uint64_t seed = 4321 + (uint64_t)t;
            sl_block_mxfp4 *b = q;
            for (int64_t i = 0; i < n / 32; i++) {
                b[i].e = (uint8_t)(i % 256);
                for (int l = 0; l < 16; l++)
                    b[i].qs[l] = (uint8_t)(sl_seeded_next(&seed) >> 56);
            }
            if (sl_quant_dequantize_row(types[t], q, deq, n) < 0 || write_file(dir, name, "edge.q", q, qbytes)
                || write_file(dir, name, "edge.deq", deq, (size_t)n * 4))
                rc = 1;
        }
    }
out:
    free(src);
    free(deq);
    free(q);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef void (*multi_fn)(uint32_t, const void *, const float *, int64_t, int, float *, int64_t);

static int bench(int64_t rows, int64_t cols, int iters)
{
    enum { DISTINCT = 16, MB = 8 };
    float *src = malloc((size_t)(DISTINCT * cols) * sizeof(float));
    float *x = aligned_alloc(64, (size_t)(MB * cols) * sizeof(float));
    float *out = malloc((size_t)(rows * MB) * sizeof(float));
    uint8_t *mat = malloc((size_t)(rows * cols) * sizeof(float));
    if (!src || !x || !out || !mat) {
        fprintf(stderr, "quantdump: out of memory\n");
        return 1;
    }
    sl_seeded_normal(src, DISTINCT * cols, 7);
    sl_seeded_normal(x, MB * cols, 8);
    printf("vec_dot bench: %" PRId64 " x %" PRId64 ", 1 thread, best of %d; dispatch isa: %s\n",
           rows, cols, iters, sl_vec_dot_isa());
    printf("%-5s %-8s %10s %12s %14s\n", "type", "isa", "GB/s", "Gelem/s", "m=8 Gelem*vec/s");
    struct { const char *name; multi_fn fn; } isas[] = {
        {"portable", sl_vec_dot_multi_portable}, {"avx2", sl_vec_dot_multi_avx2},
    };
    int nisa = sl_vec_dot_avx2_available() ? 2 : 1;
    for (int t = 0; t < NTYPES; t++) {
        size_t rb = sl_ggml_row_bytes(types[t], (uint64_t)cols);
        if (rb == 0)
            continue;
        for (int r = 0; r < DISTINCT; r++)
            if (sl_quant_iq_grid_type(types[t]))
                sl_seeded_grid_row(types[t], mat + (size_t)r * rb, cols, 7 + (uint64_t)r);
            else
                sl_quant_quantize_row(types[t], src + r * cols, mat + (size_t)r * rb, cols);
        for (int64_t r = DISTINCT; r < rows; r++)
            memcpy(mat + (size_t)r * rb, mat + (size_t)(r % DISTINCT) * rb, rb);
        for (int k = 0; k < nisa; k++) {
            double best1 = 1e30, best8 = 1e30;
            int it = k == 0 ? (iters + 3) / 4 : iters;   /* the portable path is slow */
            for (int i = 0; i < it; i++) {
                double t0 = now_s();
                for (int64_t r = 0; r < rows; r++)
                    isas[k].fn(types[t], mat + (size_t)r * rb, x, cols, 1, out + r, cols);
                double t1 = now_s();
                for (int64_t r = 0; r < rows; r++)
                    isas[k].fn(types[t], mat + (size_t)r * rb, x, cols, MB, out + r * MB, cols);
                double t2 = now_s();
                best1 = fmin(best1, t1 - t0);
                best8 = fmin(best8, t2 - t1);
            }
            double elems = (double)rows * (double)cols;
            printf("%-5s %-8s %10.2f %12.2f %14.2f\n", sl_ggml_type_name(types[t]), isas[k].name,
                   (double)rb * (double)rows / best1 * 1e-9, elems / best1 * 1e-9,
                   elems * MB / best8 * 1e-9);
            fflush(stdout);
        }
    }
    free(src);
    free(x);
    free(out);
    free(mat);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
        int64_t rows = argc >= 4 ? atoll(argv[2]) : 2048, cols = argc >= 4 ? atoll(argv[3]) : 8192;
        int iters = argc >= 5 ? atoi(argv[4]) : 5;
        if (rows <= 0 || cols <= 0 || cols % 256 != 0 || iters <= 0) {
            fprintf(stderr, "quantdump: --bench ROWS COLS [ITERS]: COLS a multiple of 256\n");
            return 2;
        }
        return bench(rows, cols, iters);
    }
    if (argc < 2 || argc > 3 || argv[1][0] == '-') {
        fprintf(stderr, "usage: quantdump DIR [N] | quantdump --bench [ROWS COLS [ITERS]]\n");
        return 2;
    }
    int64_t n = argc == 3 ? atoll(argv[2]) : 4096;
    if (n <= 0 || n % 256 != 0) {
        fprintf(stderr, "quantdump: N must be a positive multiple of 256\n");
        return 2;
    }
    return dump(argv[1], n);
}
