/* kernels/cuda/selftest.cu: per-op checks of the CUDA kernels against host
 * references, run on the GPU machine through the exported
 * sl_cuda_selftest() (tools/cudacheck --ops). When the whole-model check in
 * cudacheck fails, this says which kernel is at fault (each kernel is
 * checked against the CPU by relative error, with a per-op tolerance).
 *
 *   matmul    every type, T = 1..19: rel L2 vs a float64 dot of the rows
 *             dequantized by model/quant.c (tol 1e-5), and each row of a
 *             T-row call bitwise equal to the same row computed alone; a
 *             type model/quant.c does not quantize gets random blocks
 *             (random_blocks.cuh), one it does not dequantize is read by
 *             the host side of sl_dev_dequant_elem (test_cuda_decode checks
 *             it against gguf's dequantizer)
 *   fused mmv the small-batch kernel's types: multi and swiglu launches
 *             bitwise equal to separate ones
 *   gemm      the tensor-core path, Q4_K, Q6_K and the eight formats added
 *             with Q5_0, 70 rows (two 64-row calls)
 *             with two rows of activations near 1e5 (past float16's range
 *             unless scaled): rel L2 vs float64 (tol 5e-3: float16 inputs),
 *             and rows computed alone bitwise equal to the same rows batched
 *   rmsnorm   vs float64 (tol 1e-6)
 *   attention paged, shuffled block table, causal rows of one sequence and a
 *             decode row of another, vs float64 softmax (tol 1e-5); this
 *             and the split-K check for each K/V type (f32, f16, q8_0), the
 *             reference computed from the dequantized stored values
 *             (selftest_kv.cuh), so the tolerance is float32's for all
 *   attention split-K, head_dim 64 and 128, GQA: rows at 5, 70, 1023 (one
 *   split)    split) and 1024, 1025, 3000, 9000, 17000 (2..16 splits, a
 *             partial last one) of a long and a short sequence, vs float64
 *             (tol 1e-5); each row alone (T=1) bitwise equal to the batch;
 *             the one-split rows through the plain launch bitwise equal to
 *             the same rows in the split launch
 * Runs on its own stream and allocations; reports one line per check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/eltwise.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/random_blocks.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/selftest_kv.cuh"
#include "kernels/cuda/selftest_util.cuh"

static double rel_l2(const float *g, const double *r, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)g[i] - r[i]) * ((double)g[i] - r[i]);
        den += r[i] * r[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Device buffers of one check, freed together. */
struct dev_bufs {
    void *p[8];
    int n;
    void *alloc(size_t bytes)
    {
        void *q = NULL;
        if (n < 8 && cudaMalloc(&q, bytes) == cudaSuccess)
            p[n++] = q;
        else
            q = NULL;
        return q;
    }
    ~dev_bufs()
    {
        for (int i = 0; i < n; i++)
            cudaFree(p[i]);
    }
};

#undef CK /* this file's checks return instead of jumping */
#define CK(call)                                                                     \
    do {                                                                             \
        if ((call) != cudaSuccess) {                                                 \
            fprintf(out, "  %s:%d: %s failed\n", __FILE__, __LINE__, #call);         \
            return 1;                                                                \
        }                                                                            \
    } while (0)

/* One row of n weights in `type`: w quantized by model/quant.c, or random
 * blocks where it does not quantize the type. */
static void quantize_or_random(uint32_t type, const float *w, uint8_t *wq, size_t rb, int64_t n, uint64_t *seed)
{
    if (sl_quant_quantize_row(type, w, wq, n) != SL_OK)
        sl_random_blocks_row(type, wq, rb, n, seed);
}

/* Quantizes the rows x n weights w into wq (rb bytes a row) and replaces w by
 * their dequantization, exactly what the GPU reads; then ref (T x rows) =
 * the float64 products of the T activation rows x with it. */
static void quantize_with_reference(uint32_t type, int64_t rows, int64_t n, size_t rb, float *w, uint8_t *wq,
                                    const float *x, int64_t T, double *ref)
{
    uint64_t seed = 1000 + type;
    for (int64_t r = 0; r < rows; r++) {
        quantize_or_random(type, w + r * n, wq + r * rb, rb, n, &seed);
        if (sl_quant_dequantize_row(type, wq + r * rb, w + r * n, n) != SL_OK)
            for (int64_t i = 0; i < n; i++)
                w[r * n + i] = sl_dev_dequant_elem(type, wq + r * rb, i);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++)
                s += (double)w[r * n + i] * x[t * n + i];
            ref[t * rows + r] = s;
        }
}

/* n 768: a partial step of the small-batch kernel; 4352 and 8448: long
 * rows that two and four warps share (mmv.cu's warps_per_row), each with a
 * partial last step; rows 67: a block's last row pair half empty. */
static int check_matmul(FILE *out, cudaStream_t st, uint32_t type, int64_t n)
{
    const int64_t rows = 67, T = 19;
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n);
    uint64_t seed = 42 + type;
    float *w = (float *)malloc((size_t)(rows * n) * sizeof(float)), *x = (float *)malloc((size_t)(T * n) * 4);
    float *y = (float *)malloc((size_t)(T * rows) * 4), *y1 = (float *)malloc((size_t)rows * 4);
    uint8_t *wq = (uint8_t *)malloc(rb * (size_t)rows);
    double *ref = (double *)malloc((size_t)(T * rows) * sizeof(double));
    int bad = 0;
    dev_bufs d = {};
    uint8_t *dw = (uint8_t *)d.alloc(rb * (size_t)rows);
    float *dx = (float *)d.alloc((size_t)(T * n) * 4), *dy = (float *)d.alloc((size_t)(T * rows) * 4);
    if (!w || !x || !y || !y1 || !wq || !ref || !dw || !dx || !dy) {
        fprintf(out, "  matmul %s: out of memory\n", sl_ggml_type_name(type));
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < rows * n; i++)
        w[i] = uniform(&seed);
    for (int64_t i = 0; i < T * n; i++)
        x[i] = uniform(&seed);
    quantize_with_reference(type, rows, n, rb, w, wq, x, T, ref);
    {
        sl_cuda_weight cw = {type, n, rows, rb, dw, false, NULL};
        CK(cudaMemcpy(dw, wq, rb * (size_t)rows, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dx, x, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
        double worst = 0;
        int diff = 0;
        for (int64_t tt = 1; tt <= T; tt += 6) {
            if (sl_cuda_matmul(&cw, dx, n, tt, dy, rows, st) < 0) {
                bad = 1;
                break;
            }
            CK(cudaMemcpyAsync(y, dy, (size_t)(tt * rows) * 4, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            double e = rel_l2(y, ref, tt * rows);
            worst = e > worst ? e : worst;
            /* the last row, computed alone, must match bit for bit */
            if (sl_cuda_matmul(&cw, dx + (tt - 1) * n, n, 1, dy, rows, st) < 0) {
                bad = 1;
                break;
            }
            CK(cudaMemcpyAsync(y1, dy, (size_t)rows * 4, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            diff += memcmp(y1, y + (tt - 1) * rows, (size_t)rows * 4) != 0;
        }
        bad |= worst > 1e-5 || diff != 0;
        fprintf(out, "  matmul %-5s n=%lld rows=%lld T=1..%lld: rel L2 %.2e, alone == batched: %s  %s\n",
                sl_ggml_type_name(type), (long long)n, (long long)rows, (long long)T, worst, diff ? "NO" : "yes",
                bad ? "FAIL" : "ok");
    }
done:
    free(w);
    free(x);
    free(y);
    free(y1);
    free(wq);
    free(ref);
    return bad;
}

/* The fused small-batch launches against separate ones, bit for bit:
 * sl_cuda_mmv_swiglu == sl_cuda_mmv(gate), sl_cuda_mmv(up), sl_cuda_swiglu;
 * sl_cuda_mmv_multi over three matrices == three sl_cuda_mmv calls. */
static int check_mmv_fused(FILE *out, cudaStream_t st, uint32_t type, int64_t n)
{
    const int64_t rows = 67, T = 9;
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n);
    uint64_t seed = 7 + type;
    size_t wbytes = rb * (size_t)rows * 3;
    float *w = (float *)malloc((size_t)n * sizeof(float)), *x = (float *)malloc((size_t)(T * n) * 4);
    uint8_t *wq = (uint8_t *)malloc(wbytes);
    float *ha = (float *)malloc((size_t)(T * rows) * 4 * 3), *hb = (float *)malloc((size_t)(T * rows) * 4 * 3);
    int bad = 0, diff = 0;
    dev_bufs d = {};
    uint8_t *dw = (uint8_t *)d.alloc(wbytes);
    float *dx = (float *)d.alloc((size_t)(T * n) * 4);
    float *da = (float *)d.alloc((size_t)(T * rows) * 4 * 3), *db = (float *)d.alloc((size_t)(T * rows) * 4 * 3);
    if (!w || !x || !wq || !ha || !hb || !dw || !dx || !da || !db) {
        fprintf(out, "  fused mmv %s: out of memory\n", sl_ggml_type_name(type));
        bad = 1;
        goto done;
    }
    for (int64_t r = 0; r < rows * 3; r++) {
        for (int64_t i = 0; i < n; i++)
            w[i] = uniform(&seed);
        quantize_or_random(type, w, wq + r * rb, rb, n, &seed);
    }
    for (int64_t i = 0; i < T * n; i++)
        x[i] = uniform(&seed);
    CK(cudaMemcpy(dw, wq, wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    for (int64_t tt = 1; tt <= T; tt += 4) {
        sl_cuda_weight cw[3];
        for (int i = 0; i < 3; i++)
            cw[i] = sl_cuda_weight{type, n, rows, rb, dw + (size_t)i * rb * rows, false, NULL};
        const sl_cuda_weight *pw[3] = {&cw[0], &cw[1], &cw[2]};
        float *ya[3] = {da, da + tt * rows, da + 2 * tt * rows};
        int64_t ld[3] = {rows, rows, rows};
        size_t nbytes = (size_t)(tt * rows) * 4;
        bool ok = sl_cuda_mmv_multi(pw, ya, ld, 3, dx, n, tt, st) == SL_OK;
        for (int i = 0; i < 3; i++)
            ok = ok && sl_cuda_mmv(&cw[i], dx, n, tt, db + i * tt * rows, rows, st) == SL_OK;
        ok = ok && cudaMemcpyAsync(ha, da, 3 * nbytes, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaMemcpyAsync(hb, db, 3 * nbytes, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        diff += !ok || memcmp(ha, hb, 3 * nbytes) != 0;
        ok = sl_cuda_mmv_swiglu(&cw[0], &cw[1], dx, n, tt, da, rows, st) == SL_OK &&
             sl_cuda_swiglu(db, db + tt * rows, tt * rows, st) == SL_OK &&
             cudaMemcpyAsync(ha, da, nbytes, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaMemcpyAsync(hb, db, nbytes, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        diff += !ok || memcmp(ha, hb, nbytes) != 0;
    }
    bad = diff != 0;
    fprintf(out, "  fused mmv %-5s n=%lld rows=%lld T=1..%lld: multi and swiglu == separate: %s  %s\n",
            sl_ggml_type_name(type), (long long)n, (long long)rows, (long long)T, diff ? "NO" : "yes",
            bad ? "FAIL" : "ok");
done:
    free(w);
    free(x);
    free(wq);
    free(ha);
    free(hb);
    return bad;
}

static int check_gemm(FILE *out, cudaStream_t st, uint32_t type)
{
    const int64_t n = 512, rows = 67, T = 70;
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n);
    uint64_t seed = 99 + type;
    float *w = (float *)malloc((size_t)(rows * n) * sizeof(float)), *x = (float *)malloc((size_t)(T * n) * 4);
    float *y = (float *)malloc((size_t)(T * rows) * 4), *y1 = (float *)malloc((size_t)rows * 4);
    uint8_t *wq = (uint8_t *)malloc(rb * (size_t)rows);
    double *ref = (double *)malloc((size_t)(T * rows) * sizeof(double));
    int bad = 0, diff = 0;
    double worst = 0, worst_big = 0;
    sl_cuda_gemm *g = NULL, *gs = NULL;
    char err[256];
    dev_bufs d = {};
    int64_t Tp = (T + SL_GEMM_COLS_MAX - 1) / SL_GEMM_COLS_MAX * SL_GEMM_COLS_MAX;
    double worst_st = 0;
    int diff_st = 0;
    float *ys = (float *)malloc((size_t)(T * rows) * 4);
    uint8_t *dw = (uint8_t *)d.alloc(rb * (size_t)rows);
    __half *dh = (__half *)d.alloc((size_t)(rows * n) * sizeof(__half));
    float *dx = (float *)d.alloc((size_t)(T * n) * 4), *dy = (float *)d.alloc((size_t)(Tp * rows) * 4);
    /* gs streams the matrix through a 20-row slab: 4 slabs for 67 rows, the last short */
    if (!w || !x || !y || !y1 || !ys || !wq || !ref || !dw || !dh || !dx || !dy ||
        sl_cuda_gemm_create(st, Tp * n, Tp, 0, &g, err, sizeof err) != SL_OK ||
        sl_cuda_gemm_create(st, Tp * n, Tp, 20 * n, &gs, err, sizeof err) != SL_OK) {
        fprintf(out, "  gemm %s: setup failed\n", sl_ggml_type_name(type));
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < rows * n; i++)
        w[i] = uniform(&seed);
    for (int64_t i = 0; i < T * n; i++)
        x[i] = uniform(&seed);
    for (int64_t i = 0; i < n; i++) {   /* outlier rows: float16 alone would overflow */
        x[5 * n + i] *= 1.0e5f;
        x[40 * n + i] *= 3.0e4f;
    }
    quantize_with_reference(type, rows, n, rb, w, wq, x, T, ref);
    {
        sl_cuda_weight cw = {type, n, rows, rb, dw, true, dh};
        CK(cudaMemcpy(dw, wq, rb * (size_t)rows, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dx, x, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
        if (sl_cuda_gemm_dequant(&cw, dh, st) != SL_OK || sl_cuda_gemm_matmul(g, &cw, dh, dx, n, T, dy, rows) != SL_OK) {
            bad = 1;
            goto done;
        }
        CK(cudaMemcpyAsync(y, dy, (size_t)(T * rows) * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        worst = rel_l2(y, ref, T * rows);
        double b1 = rel_l2(y + 5 * rows, ref + 5 * rows, rows), b2 = rel_l2(y + 40 * rows, ref + 40 * rows, rows);
        worst_big = b1 > b2 ? b1 : b2;
        static const int64_t alone[] = {0, 5, 40, 63, 64, 69};
        for (size_t k = 0; k < sizeof alone / sizeof alone[0]; k++) {
            int64_t t = alone[k];
            if (sl_cuda_gemm_matmul(g, &cw, dh, dx + t * n, n, 1, dy, rows) != SL_OK) {
                bad = 1;
                goto done;
            }
            CK(cudaMemcpyAsync(y1, dy, (size_t)rows * 4, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            diff += memcmp(y1, y + t * rows, (size_t)rows * 4) != 0;
        }
        /* streamed: no resident copy, the same bound, and a row alone gives its batched bits */
        if (sl_cuda_gemm_matmul(gs, &cw, NULL, dx, n, T, dy, rows) != SL_OK) {
            bad = 1;
            goto done;
        }
        CK(cudaMemcpyAsync(ys, dy, (size_t)(T * rows) * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        worst_st = rel_l2(ys, ref, T * rows);
        for (size_t k = 0; k < sizeof alone / sizeof alone[0]; k++) {
            int64_t t = alone[k];
            if (sl_cuda_gemm_matmul(gs, &cw, NULL, dx + t * n, n, 1, dy, rows) != SL_OK) {
                bad = 1;
                goto done;
            }
            CK(cudaMemcpyAsync(y1, dy, (size_t)rows * 4, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            diff_st += memcmp(y1, ys + t * rows, (size_t)rows * 4) != 0;
        }
    }
    bad |= !(worst <= 5e-3) || !(worst_big <= 5e-3) || diff != 0 || !(worst_st <= 5e-3) || diff_st != 0;
    fprintf(out, "  gemm   %-5s n=%lld rows=%lld T=%lld (rows near 1e5): rel L2 %.2e (outlier rows %.2e), alone == batched: %s; "
            "streamed in 20-row slabs: rel L2 %.2e, alone == batched: %s, == resident: %s  %s\n",
            sl_ggml_type_name(type), (long long)n, (long long)rows, (long long)T, worst, worst_big,
            diff ? "NO" : "yes", worst_st, diff_st ? "NO" : "yes",
            memcmp(ys, y, (size_t)(T * rows) * 4) ? "no (another cuBLAS kernel)" : "bitwise",
            bad ? "FAIL" : "ok");
done:
    sl_cuda_gemm_destroy(g);
    sl_cuda_gemm_destroy(gs);
    free(ys);
    free(w);
    free(x);
    free(y);
    free(y1);
    free(wq);
    free(ref);
    return bad;
}

/* RMSNorm and the fused residual add + RMSNorm; n 1000 takes one pass of
 * the kernel's registers, 5000 two. */
static int check_rmsnorm(FILE *out, cudaStream_t st, int64_t n)
{
    const int64_t rows = 5;
    uint64_t seed = 7;
    size_t xb = (size_t)(rows * n) * sizeof(float);
    float *x = (float *)malloc(xb), *dl = (float *)malloc(xb), *w = (float *)malloc((size_t)n * sizeof(float));
    float *y = (float *)malloc(xb), *xs = (float *)malloc(xb);
    double *ref = (double *)malloc((size_t)(rows * n) * sizeof(double));
    double *ref_add = (double *)malloc((size_t)(rows * n) * sizeof(double));
    dev_bufs d = {};
    float *dx = (float *)d.alloc(xb), *dd = (float *)d.alloc(xb), *dw = (float *)d.alloc((size_t)n * sizeof(float));
    float *dy = (float *)d.alloc(xb);
    double e = 1, e_add = 1;
    int sum_diff = 1;
    if (!x || !dl || !w || !y || !xs || !ref || !ref_add || !dx || !dd || !dw || !dy)
        goto done;
    for (int64_t i = 0; i < rows * n; i++) {
        x[i] = uniform(&seed) * 3;
        dl[i] = uniform(&seed);
    }
    for (int64_t i = 0; i < n; i++)
        w[i] = uniform(&seed);
    for (int64_t r = 0; r < rows; r++)
        for (int add = 0; add < 2; add++) {
            double ss = 0;
            for (int64_t i = 0; i < n; i++) {
                double v = add ? (double)(x[r * n + i] + dl[r * n + i]) : (double)x[r * n + i];
                ss += v * v;
            }
            double sc = 1.0 / sqrt(ss / n + 1e-5);
            for (int64_t i = 0; i < n; i++) {
                double v = add ? (double)(x[r * n + i] + dl[r * n + i]) : (double)x[r * n + i];
                (add ? ref_add : ref)[r * n + i] = v * sc * w[i];
            }
        }
    CK(cudaMemcpy(dx, x, xb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dd, dl, xb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, w, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    if (sl_cuda_rmsnorm(dy, dx, NULL, dw, rows, n, 1e-5f, st) < 0)
        goto done;
    CK(cudaMemcpyAsync(y, dy, xb, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    e = rel_l2(y, ref, rows * n);
    if (sl_cuda_add_rmsnorm(dx, dd, dy, dw, rows, n, 1e-5f, st) < 0)
        goto done;
    CK(cudaMemcpyAsync(y, dy, xb, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(xs, dx, xb, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    e_add = rel_l2(y, ref_add, rows * n);
    sum_diff = 0;
    for (int64_t i = 0; i < rows * n; i++)
        sum_diff += xs[i] != x[i] + dl[i];   /* the residual stream keeps the float sum */
done:
    free(x);
    free(dl);
    free(w);
    free(y);
    free(xs);
    free(ref);
    free(ref_add);
    bool bad = e > 1e-6 || e_add > 1e-6 || sum_diff != 0;
    fprintf(out, "  rmsnorm n=%lld rows=%lld: rel L2 %.2e, with residual add %.2e, sums %s  %s\n", (long long)n,
            (long long)rows, e, e_add, sum_diff ? "WRONG" : "exact", bad ? "FAIL" : "ok");
    return bad;
}

/* Two sequences over a shuffled block table: A has rows at positions
 * 0..PA-1 (a prefill chunk, causal), B one decode row at position PB-1.
 * NH query heads over NKV kv heads: groups of 2, 4, and 18 (two blocks of
 * 9 heads, spread unevenly over the warps). */
static int check_attention(FILE *out, cudaStream_t st, sl_kv_type kt, int HD, int NH, int NKV)
{
    enum { BS = 16, NB = 12, PA = 37, PB = 70 };
    const int T = PA + 1, bpa = (PA + BS - 1) / BS, bpb = (PB + BS - 1) / BS;
    uint64_t seed = 99;
    int64_t block_floats = (int64_t)NKV * BS * HD, kv_n = 2 * NB * block_floats;   /* one layer */
    size_t kv_bytes = (size_t)(kv_n / HD * sl_kv_row_bytes(kt, HD));
    float *kv = (float *)malloc((size_t)kv_n * 4), *q = (float *)malloc((size_t)T * NH * HD * 4);
    float *o = (float *)malloc((size_t)T * NH * HD * 4);
    uint8_t *kvb = (uint8_t *)malloc(kv_bytes);
    double *ref = (double *)malloc((size_t)T * NH * HD * sizeof(double));
    int32_t meta[3 * (PA + 1) + NB];
    int bad = 0;
    dev_bufs d = {};
    uint8_t *dkv = (uint8_t *)d.alloc(kv_bytes);
    float *dq = (float *)d.alloc((size_t)T * NH * HD * 4);
    float *dout = (float *)d.alloc((size_t)T * NH * HD * 4);
    int32_t *dmeta = (int32_t *)d.alloc(sizeof meta);
    if (!kv || !q || !o || !kvb || !ref || !dkv || !dq || !dout || !dmeta) {
        bad = 1;
        goto done;
    }
    {
        for (int64_t i = 0; i < kv_n; i++)
            kv[i] = uniform(&seed);
        if (st_kv_store(kt, kv, kv_n / HD, HD, kvb) < 0) {   /* kv: the values the kernel will read */
            bad = 1;
            goto done;
        }
        for (int64_t i = 0; i < (int64_t)T * NH * HD; i++)
            q[i] = uniform(&seed) * 2;
        /* tables: A uses blocks 11, 3, 7; B uses 0, 5, 9, 2, 8 (shuffled, disjoint) */
        static const int32_t ta[] = {11, 3, 7}, tb[] = {0, 5, 9, 2, 8};
        int32_t *pos = meta, *tab = meta + T, *blocks = meta + 2 * T;
        memcpy(blocks, ta, sizeof ta);
        memcpy(blocks + bpa, tb, sizeof tb);
        for (int t = 0; t < T; t++) {
            pos[t] = t < PA ? t : PB - 1;
            tab[t] = t < PA ? 0 : bpa;
        }
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                int kvh = h / (NH / NKV);
                const int32_t *tbl = blocks + tab[t];
                double sc[PB], mx = -1e300, sum = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    const float *k = kv + tbl[p / BS] * block_floats + ((int64_t)kvh * BS + p % BS) * HD;
                    double s = 0;
                    for (int i = 0; i < HD; i++)
                        s += (double)q[((int64_t)t * NH + h) * HD + i] * k[i];
                    sc[p] = s / sqrt((double)HD);
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                for (int p = 0; p <= pos[t]; p++)
                    sum += (sc[p] = exp(sc[p] - mx));
                for (int i = 0; i < HD; i++) {
                    double a = 0;
                    for (int p = 0; p <= pos[t]; p++)
                        a += sc[p] / sum *
                             kv[NB * block_floats + tbl[p / BS] * block_floats + ((int64_t)kvh * BS + p % BS) * HD + i];
                    ref[((int64_t)t * NH + h) * HD + i] = a;
                }
            }
        (void)bpb;
        CK(cudaMemcpy(dkv, kvb, kv_bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dq, q, (size_t)T * NH * HD * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dmeta, meta, sizeof meta, cudaMemcpyHostToDevice));
        sl_cuda_kv ckv = {dkv, NB, BS, NKV, HD, kt};
        sl_cuda_batch cb = {dmeta, dmeta + T, dmeta + 2 * T};
        if (sl_cuda_attention(dout, dq, T, NH, &ckv, &cb, 0, PB, NULL, 0, st) < 0) {
            bad = 1;
            goto done;
        }
        CK(cudaMemcpyAsync(o, dout, (size_t)T * NH * HD * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        double e = rel_l2(o, ref, (int64_t)T * NH * HD);
        bad = e > 1e-5;
        fprintf(out, "  attention %s K/V, head_dim %d, %d/%d heads, %d prefill rows + 1 decode row at %d: rel L2 %.2e  "
                "%s\n", st_kv_name(kt), HD, NH, NKV, PA, PB - 1, e, bad ? "FAIL" : "ok");
    }
done:
    free(kv);
    free(kvb);
    free(q);
    free(o);
    free(ref);
    return bad;
}

/* Split-K attention over long contexts. Sequence A (ctx 17001) and B
 * (ctx 71) over one shuffled block table; rows (short ones first, so rows
 * 0..NS-1 form a batch of their own):
 *   B@5, B@70, A@1023 (1 split), A@1024, A@1025 (2), A@3000 (3), A@9000 (9),
 *   A@17000 (16: capped). */
static int check_attention_split(FILE *out, cudaStream_t st, sl_kv_type kt, int HD, bool sinks = false)
{
    enum { NH = 4, NKV = 2, BS = 16, T = 8, NS = 3, CA = 17001, CB = 71 };
    static const int32_t row_pos[T] = {5, 70, 1023, 1024, 1025, 3000, 9000, 17000};
    static const int row_seq[T] = {1, 1, 0, 0, 0, 0, 0, 0};   /* 0: A, 1: B */
    const int bpa = (CA + BS - 1) / BS, bpb = (CB + BS - 1) / BS, NB = bpa + bpb;
    const int64_t qn = (int64_t)T * NH * HD, block_floats = (int64_t)NKV * BS * HD;
    const int64_t kv_n = 2 * (int64_t)NB * block_floats;   /* one layer */
    const int64_t part_n = (int64_t)T * NH * SL_CUDA_ATTN_SPLIT_MAX * (HD + 2);
    const int64_t meta_n = 2 * T + NB;
    const size_t kv_bytes = (size_t)(kv_n / HD * sl_kv_row_bytes(kt, HD));
    uint64_t seed = 1234 + (uint64_t)HD;
    float *kv = (float *)malloc((size_t)kv_n * 4), *q = (float *)malloc((size_t)qn * 4);
    uint8_t *kvb = (uint8_t *)malloc(kv_bytes);
    float *o = (float *)malloc((size_t)qn * 4), *o1 = (float *)malloc((size_t)qn * 4);
    double *ref = (double *)malloc((size_t)qn * sizeof(double)), *sc = (double *)malloc((size_t)CA * sizeof(double));
    int32_t *meta = (int32_t *)malloc((size_t)meta_n * 4);
    int bad = 0, diff_alone = 0, diff_plain = 0;
    double e = 0;
    dev_bufs d = {};
    uint8_t *dkv = (uint8_t *)d.alloc(kv_bytes);
    float *dq = (float *)d.alloc((size_t)qn * 4);
    float *dout = (float *)d.alloc((size_t)qn * 4), *dout1 = (float *)d.alloc((size_t)qn * 4);
    float *dpart = (float *)d.alloc((size_t)part_n * 4);
    int32_t *dmeta = (int32_t *)d.alloc((size_t)meta_n * 4);
    /* sinks (gpt-oss): a logit per head in each softmax's denominator, joined
     * at the end of an unsplit row or in the merge of a split one */
    float sk[NH];
    float *dsk = (float *)d.alloc(sizeof sk);
    sl_cuda_attn_opts ao = {1.0f / sqrtf((float)HD), 0.0f, 0, sinks ? dsk : NULL};
    if (!kv || !kvb || !q || !o || !o1 || !ref || !sc || !meta || !dkv || !dq || !dout || !dout1 || !dpart || !dmeta ||
        !dsk) {
        fprintf(out, "  attention split-K %s K/V, head_dim %d: setup failed\n", st_kv_name(kt), HD);
        bad = 1;
        goto done;
    }
    {
        for (int64_t i = 0; i < kv_n; i++)
            kv[i] = uniform(&seed);
        if (st_kv_store(kt, kv, kv_n / HD, HD, kvb) < 0) {   /* kv: the values the kernel will read */
            bad = 1;
            goto done;
        }
        for (int64_t i = 0; i < qn; i++)
            q[i] = uniform(&seed) * 2;
        for (int h = 0; h < NH; h++)
            sk[h] = uniform(&seed) * 4;
        /* tables: a random permutation of the NB blocks, A's first */
        int32_t *pos = meta, *tab = meta + T, *blocks = meta + 2 * T;
        for (int i = 0; i < NB; i++)
            blocks[i] = i;
        for (int i = NB - 1; i > 0; i--) {
            int j = (int)(rng_next(&seed) % (uint64_t)(i + 1));
            int32_t x = blocks[i];
            blocks[i] = blocks[j];
            blocks[j] = x;
        }
        for (int t = 0; t < T; t++) {
            pos[t] = row_pos[t];
            tab[t] = row_seq[t] ? bpa : 0;
        }
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                int kvh = h / (NH / NKV);
                const int32_t *tbl = blocks + tab[t];
                const float *qh = q + ((int64_t)t * NH + h) * HD;
                double mx = -1e300, sum = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    const float *k = kv + tbl[p / BS] * block_floats + ((int64_t)kvh * BS + p % BS) * HD;
                    double s = 0;
                    for (int i = 0; i < HD; i++)
                        s += (double)qh[i] * k[i];
                    sc[p] = s / sqrt((double)HD);
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                if (sinks) {
                    mx = sk[h] > mx ? sk[h] : mx;
                    sum = exp(sk[h] - mx);
                }
                for (int p = 0; p <= pos[t]; p++)
                    sum += (sc[p] = exp(sc[p] - mx));
                double *r = ref + ((int64_t)t * NH + h) * HD;
                for (int i = 0; i < HD; i++)
                    r[i] = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    const float *v = kv + ((int64_t)NB + tbl[p / BS]) * block_floats + ((int64_t)kvh * BS + p % BS) * HD;
                    double w = sc[p] / sum;
                    for (int i = 0; i < HD; i++)
                        r[i] += w * v[i];
                }
            }
        CK(cudaMemcpy(dkv, kvb, kv_bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dq, q, (size_t)qn * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dmeta, meta, (size_t)meta_n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsk, sk, sizeof sk, cudaMemcpyHostToDevice));
        sl_cuda_kv ckv = {dkv, NB, BS, NKV, HD, kt};
        const int64_t rq = (int64_t)NH * HD;   /* floats of one row */

        /* (a) the whole batch through the split launch, vs float64 */
        sl_cuda_batch cb = {dmeta, dmeta + T, dmeta + 2 * T};
        if (sl_cuda_attention_layer(dout, dq, T, NH, &ckv, &cb, 0, CA, &ao, dpart, part_n, st) < 0) {
            bad = 1;
            goto done;
        }
        CK(cudaMemcpyAsync(o, dout, (size_t)qn * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        e = rel_l2(o, ref, qn);
        for (int t = 0; t < T; t++) {   /* the worst row too: a long row's error must not hide in the sum */
            double et = rel_l2(o + t * rq, ref + t * rq, rq);
            e = et > e ? et : e;
        }

        /* (b) each row alone, its own context as the step's: bitwise equal */
        CK(cudaMemset(dout1, 0xff, (size_t)qn * 4));
        for (int t = 0; t < T; t++) {
            sl_cuda_batch c1 = {dmeta + t, dmeta + T + t, dmeta + 2 * T};
            if (sl_cuda_attention_layer(dout1 + t * rq, dq + t * rq, 1, NH, &ckv, &c1, 0, row_pos[t] + 1, &ao, dpart,
                                        part_n, st) < 0) {
                bad = 1;
                goto done;
            }
        }
        CK(cudaMemcpyAsync(o1, dout1, (size_t)qn * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        for (int t = 0; t < T; t++)
            diff_alone += memcmp(o1 + t * rq, o + t * rq, (size_t)rq * 4) != 0;

        /* (c) the one-split rows as a batch of their own: the plain launch
         * (n_ctx 1024 never splits, no scratch), bitwise equal */
        CK(cudaMemset(dout1, 0xff, (size_t)qn * 4));
        if (sl_cuda_attention_layer(dout1, dq, NS, NH, &ckv, &cb, 0, row_pos[NS - 1] + 1, &ao, NULL, 0, st) < 0) {
            bad = 1;
            goto done;
        }
        CK(cudaMemcpyAsync(o1, dout1, (size_t)(NS * rq) * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        diff_plain = memcmp(o1, o, (size_t)(NS * rq) * 4) != 0;

        /* too little scratch is refused, not overrun */
        if (sl_cuda_attention_layer(dout1, dq, T, NH, &ckv, &cb, 0, CA, &ao, dpart, part_n - 1, st) != SL_EINVAL)
            bad = 1;
    }
    bad |= !(e <= 1e-5) || diff_alone != 0 || diff_plain != 0;
    fprintf(out, "  attention split-K %s K/V, head_dim %d, %d/%d heads%s, rows at 5..17000 (1..16 splits): rel L2 %.2e, "
            "alone == batched: %s, plain == split launch: %s  %s\n", st_kv_name(kt),
            HD, NH, NKV, sinks ? ", sinks" : "", e, diff_alone ? "NO" : "yes", diff_plain ? "NO" : "yes", bad ? "FAIL" : "ok");
done:
    free(kv);
    free(kvb);
    free(q);
    free(o);
    free(o1);
    free(ref);
    free(sc);
    free(meta);
    return bad;
}

/* Runs every check, one line each to `out`. Returns the number that failed,
 * or -1 when there is no usable device. Initialises CUDA. */
extern "C" __attribute__((visibility("default"))) int sl_cuda_selftest(FILE *out)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || cudaSetDevice(0) != cudaSuccess) {
        fprintf(out, "  no usable CUDA device\n");
        return -1;
    }
    cudaStream_t st;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
        return -1;
    static const uint32_t types[] = {SL_GGML_TYPE_F32,  SL_GGML_TYPE_F16,  SL_GGML_TYPE_BF16, SL_GGML_TYPE_Q8_0,
                                     SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K,
                                     SL_GGML_TYPE_Q5_0, SL_GGML_TYPE_Q4_1, SL_GGML_TYPE_Q5_1, SL_GGML_TYPE_Q3_K,
                                     SL_GGML_TYPE_Q2_K, SL_GGML_TYPE_IQ4_XS, SL_GGML_TYPE_IQ4_NL, SL_GGML_TYPE_Q8_1,
                                     SL_GGML_TYPE_MXFP4};
    int fails = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        fails += check_matmul(out, st, types[i], 768);
    /* the small-batch kernel's types: long rows (shared by 2 and 4 warps) and the fused launches */
    for (uint32_t type : {SL_GGML_TYPE_Q8_0, SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K, SL_GGML_TYPE_Q5_0,
                          SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q4_1, SL_GGML_TYPE_Q5_1, SL_GGML_TYPE_IQ4_XS,
                          SL_GGML_TYPE_IQ4_NL, SL_GGML_TYPE_Q8_1, SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_Q2_K,
                          SL_GGML_TYPE_MXFP4}) {
        for (int64_t n : {4352, 8448})
            fails += check_matmul(out, st, type, n);
        for (int64_t n : {768, 4352})
            fails += check_mmv_fused(out, st, type, n);
    }
    for (uint32_t type : {SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q6_K, SL_GGML_TYPE_Q5_0, SL_GGML_TYPE_Q4_1, SL_GGML_TYPE_Q5_1,
                          SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_Q2_K, SL_GGML_TYPE_IQ4_XS, SL_GGML_TYPE_IQ4_NL,
                          SL_GGML_TYPE_Q8_1, SL_GGML_TYPE_MXFP4})
        fails += check_gemm(out, st, type);
    fails += check_rmsnorm(out, st, 1000);
    fails += check_rmsnorm(out, st, 5000);
    for (sl_kv_type kt : {SL_KV_TYPE_F32, SL_KV_TYPE_F16, SL_KV_TYPE_Q8_0}) {
        fails += check_attention(out, st, kt, 64, 4, 2);
        fails += check_attention(out, st, kt, 128, 32, 8);
        fails += check_attention(out, st, kt, 64, 36, 2);
        fails += check_attention(out, st, kt, 256, 8, 8);
        fails += check_attention(out, st, kt, 96, 4, 2);   /* no fixed-HD kernel; q8_0 rows 2-byte aligned */
        fails += check_attention_split(out, st, kt, 64);
        fails += check_attention_split(out, st, kt, 128);
        fails += check_attention_split(out, st, kt, 64, true);   /* gpt-oss's sinks */
    }
    cudaStreamDestroy(st);
    return fails;
}
