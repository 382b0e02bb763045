/* tools/kernellab/kernellab.c: the CPU matmul loop of kernels/cpu/forward.c
 * on one weight matrix, one thread, its two ways of handing rows to the
 * 8-bit dot kernels: A, one weight row per sl_vec_dot_act_multi call (the
 * kernels' one-row path), and B, four rows per sl_vec_dot_act_rows call (the
 * register tiles the engine runs in prefill). Prints Gmac/s of each, best
 * of R repetitions taken alternately (A, B, A, B...), and whether every
 * output is bitwise the same both ways (exit 1 if not).
 *
 *   kernellab [--type Q8_0] [--rows 2048] [--cols 2048] [--tokens 64] [--reps 5] [--isa-ab]
 *
 * --isa-ab: A the AVX2 kernels, B the AVX-512 ones (vec_dot_q8_avx512.c),
 * both four weight rows per call, on a CPU with AVX-512 VNNI.
 *
 * Weights: N(0,1)-like values quantized to the type (the weight rows'
 * bytes are real blocks); activations: the same, rounded to the type's
 * 8-bit format. As forward.c: tasks of 16 weight rows, each over all
 * tokens in tiles of 16. Time is the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so other jobs on a shared machine count less
 * (they still share its caches). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"

enum { TASK_ROWS = 16, TOKEN_TILE = 16, ROWS_PER_CALL = 4 };

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A sum of three uniforms: roughly normal, enough for timing. */
static void fill(float *x, int64_t n, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++) {
        double v = 0;
        for (int k = 0; k < 3; k++) {
            *s = *s * 6364136223846793005ull + 1442695040888963407ull;
            v += (double)(*s >> 11) * 0x1p-53 - 0.5;
        }
        x[i] = (float)(v * 2.0);
    }
}

static int type_of(const char *name, uint32_t *type)
{
    for (uint32_t t = 0; t < SL_GGML_TYPE_COUNT; t++) {
        const char *n = sl_ggml_type_name(t);
        if (n && strcmp(n, name) == 0 && sl_ggml_type_supported(t) && sl_ggml_block_elems(t) >= 32) {
            *type = t;
            return 0;
        }
    }
    return -1;
}

typedef void (*rows_fn)(uint32_t, const void *, size_t, int, const void *, size_t, int, float *, int64_t);

/* One pass over the matrix: y (tokens x rows) = W x; rows_call 1 (A) or 4
 * (B), through the dispatcher, or 4 through `direct` when it is set. */
static void pass(uint32_t type, enum sl_act_format f, const char *w, size_t rb, int64_t rows, int64_t cols,
                 const char *xa, size_t lda, int64_t tokens, int rows_call, rows_fn direct, float *y)
{
    float tmp[ROWS_PER_CALL * TOKEN_TILE];
    for (int64_t r0 = 0; r0 < rows; r0 += TASK_ROWS) {
        int64_t r1 = r0 + TASK_ROWS < rows ? r0 + TASK_ROWS : rows;
        for (int64_t t0 = 0; t0 < tokens; t0 += TOKEN_TILE) {
            int mt = (int)(tokens - t0 < TOKEN_TILE ? tokens - t0 : TOKEN_TILE);
            for (int64_t r = r0; r < r1; r += rows_call) {
                int nr = (int)(r1 - r < rows_call ? r1 - r : rows_call);
                if (direct)
                    direct(type, w + r * rb, rb, nr, xa + t0 * lda, lda, mt, tmp, cols);
                else if (rows_call == 1)
                    sl_vec_dot_act_multi(type, f, w + r * rb, xa + t0 * lda, lda, mt, tmp, cols);
                else
                    sl_vec_dot_act_rows(type, f, w + r * rb, rb, nr, xa + t0 * lda, lda, mt, tmp, cols);
                for (int i = 0; i < nr; i++)
                    for (int t = 0; t < mt; t++)
                        y[(t0 + t) * rows + r + i] = tmp[i * mt + t];
            }
        }
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: kernellab [--type NAME] [--rows R] [--cols N] [--tokens T] [--reps K] [--isa-ab]\n"
                    "  NAME a quantized GGUF type (Q8_0, Q4_K...); R, T, K in 1..65536, N a multiple of\n"
                    "  the type's block size, R * N at most 2^28; --isa-ab: A the AVX2 kernels, B the\n"
                    "  AVX-512 ones, both four rows per call (on a CPU with AVX-512 VNNI)\n");
    return 2;
}

static int int_arg(const char *s, long *v)
{
    char *end;
    *v = strtol(s, &end, 10);
    return *s && !*end && *v >= 1 && *v <= 65536 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *tname = "Q8_0";
    long rows = 2048, cols = 2048, tokens = 64, reps = 5;
    bool isa_ab = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa-ab")) {
            isa_ab = true;
            continue;
        }
        long *dst = !strcmp(argv[i], "--rows") ? &rows : !strcmp(argv[i], "--cols") ? &cols
                  : !strcmp(argv[i], "--tokens") ? &tokens : !strcmp(argv[i], "--reps") ? &reps : NULL;
        if (i + 1 >= argc)
            return usage();
        if (!strcmp(argv[i], "--type"))
            tname = argv[++i];
        else if (!dst || int_arg(argv[++i], dst) < 0)
            return usage();
    }
    if (isa_ab && !sl_vec_dot_avx512_available()) {
        fprintf(stderr, "kernellab: --isa-ab needs a CPU with AVX-512 VNNI\n");
        return 2;
    }
    uint32_t type;
    if (type_of(tname, &type) < 0) {
        fprintf(stderr, "kernellab: %s is not a quantized type\n", tname);
        return usage();
    }
    if (cols % sl_ggml_block_elems(type) != 0 || (int64_t)rows * cols > (1ll << 28))
        return usage();
    enum sl_act_format f = sl_act_format_of_type(type);
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)cols);
    size_t lda = (sl_act_row_bytes(f, cols) + 31) / 32 * 32;
    char *w = malloc(rb * (size_t)rows), *xa = aligned_alloc(32, lda * (size_t)tokens);
    float *x = malloc((size_t)cols * sizeof *x);
    float *y[2] = {malloc((size_t)(rows * tokens) * sizeof(float)), malloc((size_t)(rows * tokens) * sizeof(float))};
    if (!w || !xa || !x || !y[0] || !y[1]) {
        fprintf(stderr, "kernellab: out of memory\n");
        return 1;
    }
    uint64_t s = 42;
    for (long r = 0; r < rows; r++) {
        fill(x, cols, &s);
        if (sl_quant_quantize_row(type, x, w + (size_t)r * rb, cols) != SL_OK) {
            fprintf(stderr, "kernellab: no quantizer for %s here\n", tname);
            return 2;
        }
    }
    for (long t = 0; t < tokens; t++) {
        fill(x, cols, &s);
        sl_act_quantize_row(f, x, xa + (size_t)t * lda, cols);
    }
    double best[2] = {1e30, 1e30};
    for (long k = 0; k < reps; k++)
        for (int v = 0; v < 2; v++) {
            double t0 = cpu_s();
            rows_fn direct = !isa_ab ? NULL : v ? sl_vec_dot_q8_rows_avx512 : sl_vec_dot_q8_rows_avx2;
            pass(type, f, w, rb, rows, cols, xa, lda, tokens, v ? ROWS_PER_CALL : isa_ab ? ROWS_PER_CALL : 1, direct,
                 y[v]);
            double dt = cpu_s() - t0;
            best[v] = dt < best[v] ? dt : best[v];
        }
    double macs = (double)rows * cols * tokens;
    bool same = memcmp(y[0], y[1], (size_t)(rows * tokens) * sizeof(float)) == 0;
    printf("kernellab %s %ld x %ld, %ld tokens, isa %s, best of %ld: A (%s) %.1f Gmac/s, "
           "B (%s) %.1f Gmac/s, B/A %.3f, outputs %s\n",
           tname, rows, cols, tokens, isa_ab ? "avx2 vs avx512" : sl_vec_dot_isa(), reps,
           isa_ab ? "avx2" : "row by row", macs / best[0] * 1e-9, isa_ab ? "avx512" : "4-row tiles",
           macs / best[1] * 1e-9, best[0] / best[1], same ? "bitwise equal" : "DIFFER");
    free(w);
    free(xa);
    free(x);
    free(y[0]);
    free(y[1]);
    return same ? 0 : 1;
}
