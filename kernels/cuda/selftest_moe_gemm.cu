/* kernels/cuda/selftest_moe_gemm.cu: the self-test's checks of the
 * tensor-core expert matmul (gemm_moe.cuh) against the small-batch one
 * (moe.cuh sl_cuda_mmv_experts_biased) on the same routed problem: the
 * fused gate/up (with SiLU, or gpt-oss's biases and clamped SwiGLU) and the
 * down over the small-batch gate/up's output, so each is judged alone.
 * Pass: relative L2 over all outputs within 3e-3 (float16 inputs, float32
 * sums), every output written, a row with values past 2^14 (the scaled
 * conversion) within the same bound, and token 0's outputs the same bits
 * computed alone (T = 1) as within the batch. Timing lines on the 30B-A3B
 * shape (128 experts, top 8, n_embd 2048, n_ff_exp 768, Q4_K).
 * Where: host code of libsluice_cuda.so's self-test, called by
 *        selftest_moe.cu's sl_cuda_selftest_moe. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_moe.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/random_blocks.cuh"
#include "kernels/cuda/selftest_moe_step.cuh"
#include "kernels/cuda/selftest_util.cuh"

static double rel_l2_all(const float *a, const float *ref, int64_t n, int64_t *unwritten)
{
    double num = 0, den = 0;
    *unwritten = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i])) {
            (*unwritten)++;
            continue;
        }
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* the tensor-core path for T rows: tiles, scales, gate/up into h, down from hin into y */
static sl_status run_gemm(cudaStream_t st, const sl_cuda_weight *g, const sl_cuda_weight *u,
                          const sl_cuda_weight *d, const float *bg, const float *bu, const float *bd, bool oai, int n,
                          int k, int64_t T, const float *x, const int32_t *off, const int32_t *pairs,
                          const int32_t *used, int32_t *tiles, float *scale, float *h, const float *hin, float *y)
{
    int64_t E = g->ne0, F = g->ne1, R = T * k;
    sl_status rc = sl_cuda_moe_gemm_tiles(off, used, tiles, st);
    if (rc == SL_OK)
        rc = sl_cuda_moe_gemm_scales(x, E, E, T, scale, st);
    if (rc == SL_OK)
        rc = sl_cuda_moe_gemm(g, u, bg, bu, oai, n, off, pairs, tiles, R, k, x, E, scale, h, F, st);
    if (rc == SL_OK)
        rc = sl_cuda_moe_gemm_scales(hin, F, F, R, scale, st);
    if (rc == SL_OK)
        rc = sl_cuda_moe_gemm(d, NULL, bd, NULL, false, n, off, pairs, tiles, R, 1, hin, F, scale, y, E, st);
    return rc;
}

static sl_status run_small(cudaStream_t st, const sl_cuda_weight *g, const sl_cuda_weight *u,
                           const sl_cuda_weight *d, const float *bg, const float *bu, const float *bd, bool oai, int n,
                           int k, int64_t T, const float *x, const int32_t *off, const int32_t *pairs,
                           const int32_t *used, float *h, float *y)
{
    int64_t E = g->ne0, F = g->ne1, R = T * k;
    sl_status rc = sl_cuda_mmv_experts_biased(g, u, bg, bu, oai, n, off, pairs, used, R, T, k, x, E, h, F, st);
    if (rc == SL_OK)
        rc = sl_cuda_mmv_experts_biased(d, NULL, bd, NULL, false, n, off, pairs, used, R, T, 1, h, F, y, E, st);
    return rc;
}

static float time_ms(cudaStream_t st, int reps, sl_status (*f)(void *), void *ctx)
{
    cudaEvent_t a, b;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess)
        return ms;
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return ms;
    }
    bool ok = f(ctx) == SL_OK && cudaEventRecord(a, st) == cudaSuccess;
    for (int i = 0; ok && i < reps; i++)
        ok = f(ctx) == SL_OK;
    if (ok && cudaEventRecord(b, st) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
        cudaEventElapsedTime(&ms, a, b) == cudaSuccess)
        ms /= reps;
    else
        ms = -1.0f;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

struct gemm_case {
    cudaStream_t st;
    const sl_cuda_weight *g, *u, *d;
    const float *bg, *bu, *bd;
    bool oai;
    int n, k;
    int64_t T;
    const float *x;
    const int32_t *off, *pairs, *used;
    int32_t *tiles;
    float *scale, *h, *hin, *y;
};

static sl_status time_gemm(void *p)
{
    gemm_case *c = (gemm_case *)p;
    return run_gemm(c->st, c->g, c->u, c->d, c->bg, c->bu, c->bd, c->oai, c->n, c->k, c->T, c->x, c->off, c->pairs,
                    c->used, c->tiles, c->scale, c->h, c->hin, c->y);
}

static sl_status time_small(void *p)
{
    gemm_case *c = (gemm_case *)p;
    return run_small(c->st, c->g, c->u, c->d, c->bg, c->bu, c->bd, c->oai, c->n, c->k, c->T, c->x, c->off, c->pairs,
                     c->used, c->h, c->y);
}

/* One case: n experts of type, top k, rows E -> F -> E, T token rows (token
 * 3's activations scaled past 2^14 when T > 3); oai: gpt-oss's biases and
 * activation; timing: print both paths' times. Returns 1 on failure. */
static int check_gemm(FILE *out, cudaStream_t st, uint32_t type, int64_t T, int n, int k, int64_t E, int64_t F,
                      bool oai, bool timing)
{
    int bad = 0;
    uint64_t seed = 4242 + type * 131 + (uint64_t)T;
    int64_t R = T * k, ntile = 1 + 2 * sl_cuda_moe_gemm_max_tiles(R, n);
    size_t rbe = sl_ggml_row_bytes(type, (uint64_t)E), rbf = sl_ggml_row_bytes(type, (uint64_t)F);
    size_t gu_bytes = (size_t)n * F * rbe, d_bytes = (size_t)n * E * rbf;
    uint8_t *q = (uint8_t *)malloc(gu_bytes > d_bytes ? gu_bytes : d_bytes);
    float *x = (float *)malloc((size_t)(T * E) * 4), *lg = (float *)malloc((size_t)(T * n) * 4);
    float *bias = (float *)malloc((size_t)(n * (F > E ? F : E)) * 4);
    float *hr = (float *)malloc((size_t)(R * F) * 4), *ht = (float *)malloc((size_t)(R * F) * 4);
    float *yr = (float *)malloc((size_t)(R * E) * 4), *yt = (float *)malloc((size_t)(R * E) * 4);
    float *h1 = (float *)malloc((size_t)(k * F) * 4), *y1 = (float *)malloc((size_t)(k * E) * 4);
    uint8_t *dqg = NULL, *dqu = NULL, *dqd = NULL;
    float *dx = NULL, *dlog = NULL, *dw = NULL, *dhr = NULL, *dht = NULL, *dyr = NULL, *dyt = NULL, *dscale = NULL;
    float *dbg = NULL, *dbu = NULL, *dbd = NULL;
    int32_t *dids = NULL, *doff = NULL, *dpairs = NULL, *dused = NULL, *dtiles = NULL;
    double eh = -1, ey = -1;
    int64_t un_h = 0, un_y = 0;
    bool same_alone = false;
    float ms_gemm = -1, ms_small = -1;
    if (!q || !x || !lg || !bias || !hr || !ht || !yr || !yt || !h1 || !y1) {
        fprintf(out, "  moe gemm: out of host memory\n");
        bad = 1;
        goto done;
    }
    CK(cudaMalloc(&dqg, gu_bytes));
    CK(cudaMalloc(&dqu, gu_bytes));
    CK(cudaMalloc(&dqd, d_bytes));
    for (int m = 0; m < 3; m++) {
        size_t rb = m < 2 ? rbe : rbf, rows = m < 2 ? (size_t)n * F : (size_t)n * E;
        for (size_t r = 0; r < rows; r++)
            sl_random_blocks_row(type, q + r * rb, rb, m < 2 ? E : F, &seed);
        CK(cudaMemcpy(m == 0 ? dqg : m == 1 ? dqu : dqd, q, rows * rb, cudaMemcpyHostToDevice));
    }
    for (int64_t i = 0; i < T * E; i++)
        x[i] = 0.05f * uniform(&seed) * (T > 3 && i / E == 3 ? 1.0e6f : 1.0f);   /* token 3: past 2^14 */
    for (int64_t i = 0; i < T * n; i++)
        lg[i] = 3.0f * uniform(&seed);
    CK(cudaMalloc(&dx, (size_t)(T * E) * 4));
    CK(cudaMalloc(&dlog, (size_t)(T * n) * 4));
    CK(cudaMalloc(&dw, (size_t)R * 4));
    CK(cudaMalloc(&dids, (size_t)R * 4));
    CK(cudaMalloc(&doff, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dpairs, (size_t)R * 4));
    CK(cudaMalloc(&dused, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dtiles, (size_t)ntile * 4));
    CK(cudaMalloc(&dscale, (size_t)R * 4));
    CK(cudaMalloc(&dhr, (size_t)(R * F) * 4));
    CK(cudaMalloc(&dht, (size_t)(R * F) * 4));
    CK(cudaMalloc(&dyr, (size_t)(R * E) * 4));
    CK(cudaMalloc(&dyt, (size_t)(R * E) * 4));
    CK(cudaMemcpy(dx, x, (size_t)(T * E) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dlog, lg, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    if (oai) {
        for (int m = 0; m < 3; m++) {
            int64_t rows = m < 2 ? F : E;
            float **dst = m == 0 ? &dbg : m == 1 ? &dbu : &dbd;
            for (int64_t i = 0; i < n * rows; i++)
                bias[i] = 0.5f * uniform(&seed);
            CK(cudaMalloc(dst, (size_t)(n * rows) * 4));
            CK(cudaMemcpy(*dst, bias, (size_t)(n * rows) * 4, cudaMemcpyHostToDevice));
        }
    }
    {
        sl_cuda_weight g = {type, E, F, rbe, dqg, false, NULL}, u = {type, E, F, rbe, dqu, false, NULL};
        sl_cuda_weight d = {type, F, E, rbf, dqd, false, NULL};
        bool norm = !oai;
        /* the batch: reference, then the tensor-core path (down over the reference's h) */
        if (sl_cuda_moe_route_group(dlog, T, n, k, oai, norm, dids, dw, doff, dpairs, dused, st) < 0 ||
            run_small(st, &g, &u, &d, dbg, dbu, dbd, oai, n, k, T, dx, doff, dpairs, dused, dhr, dyr) < 0) {
            fprintf(out, "  moe gemm: reference launch refused\n");
            bad = 1;
            goto done;
        }
        CK(cudaMemset(dht, 0xFF, (size_t)(R * F) * 4));   /* NaN bits: an output never written shows */
        CK(cudaMemset(dyt, 0xFF, (size_t)(R * E) * 4));
        if (run_gemm(st, &g, &u, &d, dbg, dbu, dbd, oai, n, k, T, dx, doff, dpairs, dused, dtiles, dscale, dht, dhr,
                     dyt) < 0) {
            fprintf(out, "  moe gemm: launch refused\n");
            bad = 1;
            goto done;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        CK(cudaMemcpy(hr, dhr, (size_t)(R * F) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ht, dht, (size_t)(R * F) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(yr, dyr, (size_t)(R * E) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(yt, dyt, (size_t)(R * E) * 4, cudaMemcpyDeviceToHost));
        eh = rel_l2_all(ht, hr, R * F, &un_h);
        ey = rel_l2_all(yt, yr, R * E, &un_y);
        /* token 0 alone: its k pairs are pairs 0 .. k-1 in both runs */
        CK(cudaMemset(dht, 0xFF, (size_t)(k * F) * 4));
        CK(cudaMemset(dyt, 0xFF, (size_t)(k * E) * 4));
        if (sl_cuda_moe_route_group(dlog, 1, n, k, oai, norm, dids, dw, doff, dpairs, dused, st) < 0 ||
            run_gemm(st, &g, &u, &d, dbg, dbu, dbd, oai, n, k, 1, dx, doff, dpairs, dused, dtiles, dscale, dht, dhr,
                     dyt) < 0) {
            fprintf(out, "  moe gemm: launch refused (alone)\n");
            bad = 1;
            goto done;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(h1, dht, (size_t)(k * F) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(y1, dyt, (size_t)(k * E) * 4, cudaMemcpyDeviceToHost));
        same_alone = memcmp(h1, ht, (size_t)(k * F) * 4) == 0 && memcmp(y1, yt, (size_t)(k * E) * 4) == 0;
        if (timing) {
            if (sl_cuda_moe_route_group(dlog, T, n, k, oai, norm, dids, dw, doff, dpairs, dused, st) < 0)
                bad = 1;
            gemm_case c = {st, &g, &u, &d, dbg, dbu, dbd, oai, n, k, T, dx, doff, dpairs, dused, dtiles, dscale,
                           dht, dhr, dyt};
            ms_gemm = time_ms(st, 20, time_gemm, &c);
            c.h = dhr;
            c.y = dyr;
            ms_small = time_ms(st, 20, time_small, &c);
        }
    }
    {
        bool fail = !(eh <= 3e-3) || !(ey <= 3e-3) || un_h || un_y || !same_alone || (timing && ms_gemm < 0);
        bad += fail;
        fprintf(out, "  moe gemm %s T %lld, %d experts, top %d, %lld -> %lld%s: gate/up rel L2 %.2e, down %.2e%s, "
                "token 0 alone %s", sl_ggml_type_name(type), (long long)T, n, k, (long long)E, (long long)F,
                oai ? " (gpt-oss biases, clamped SwiGLU)" : "", eh, ey, un_h || un_y ? ", outputs left unwritten" : "",
                same_alone ? "same bits" : "DIFFERS");
        if (timing)
            fprintf(out, "; experts %.3f ms tensor cores, %.3f ms small-batch", ms_gemm, ms_small);
        fprintf(out, "  %s\n", fail ? "FAIL" : "ok");
    }
done:
    cudaFree(dqg);
    cudaFree(dqu);
    cudaFree(dqd);
    cudaFree(dx);
    cudaFree(dlog);
    cudaFree(dw);
    cudaFree(dids);
    cudaFree(doff);
    cudaFree(dpairs);
    cudaFree(dused);
    cudaFree(dtiles);
    cudaFree(dscale);
    cudaFree(dhr);
    cudaFree(dht);
    cudaFree(dyr);
    cudaFree(dyt);
    cudaFree(dbg);
    cudaFree(dbu);
    cudaFree(dbd);
    free(q);
    free(x);
    free(lg);
    free(bias);
    free(hr);
    free(ht);
    free(yr);
    free(yt);
    free(h1);
    free(y1);
    return bad;
}

int st_moe_gemm(FILE *out, cudaStream_t st)
{
    int bad = 0;
    static const uint32_t types[] = {SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K, SL_GGML_TYPE_Q8_0,
                                     SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_IQ4_XS, SL_GGML_TYPE_MXFP4};
    for (uint32_t ty : types)
        bad += check_gemm(out, st, ty, 37, 16, 4, 256, 512, false, false);
    bad += check_gemm(out, st, SL_GGML_TYPE_Q8_0, 70, 8, 2, 288, 96, false, false);   /* partial K steps and row tiles */
    bad += check_gemm(out, st, SL_GGML_TYPE_MXFP4, 37, 16, 4, 256, 256, true, false); /* gpt-oss */
    bad += check_gemm(out, st, SL_GGML_TYPE_Q8_0, 37, 16, 4, 256, 256, true, false);
    bad += check_gemm(out, st, SL_GGML_TYPE_Q4_K, 64, 128, 8, 2048, 768, false, true);    /* 30B-A3B, batch 64 */
    bad += check_gemm(out, st, SL_GGML_TYPE_Q4_K, 512, 128, 8, 2048, 768, false, true);   /* a prefill chunk */
    return bad;
}
