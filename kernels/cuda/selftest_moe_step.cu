/* kernels/cuda/selftest_moe_step.cu: the self-test's checks of the MoE
 * step's small kernels (selftest_moe_step.cuh): the float32 router and the
 * combine against host references, and the time of each of the step's
 * small launches on the 30B-A3B shape, so that one GPU run shows what the
 * many-warp router, the fused routing and the column-spread combine buy.
 * Kept apart from selftest_moe.cu (routing, grouping, the experts and the
 * whole FFN) so each file has one subject. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/selftest_moe_step.cuh"
#include "kernels/cuda/selftest_util.cuh"

/* ------------------------------------------------------------------------ */
/* router                                                                   */

/* One router shape: rows x n float32 weights, T token rows. Returns 1 on a
 * failure. */
static int router_case(FILE *out, cudaStream_t st, int rows, int64_t n, int64_t T)
{
    int bad = 0;
    uint64_t seed = 31 + (uint64_t)rows * 7 + (uint64_t)n;
    int64_t lds = n + 1;   /* the scalar-load copy: rows no longer 16-byte aligned */
    float *w = (float *)malloc((size_t)(rows * n) * 4), *x = (float *)malloc((size_t)(T * n) * 4);
    float *xs = (float *)malloc((size_t)(T * lds) * 4);
    float *got = (float *)malloc((size_t)(T * rows) * 4), *one = (float *)malloc((size_t)(T * rows) * 4);
    float *sc = (float *)malloc((size_t)(T * rows) * 4);
    float *dw = NULL, *dx = NULL, *dxs = NULL, *dy = NULL;
    double worst = 0;
    bool alone = true, scalar = true;
    if (!w || !x || !xs || !got || !one || !sc) {
        fprintf(out, "  moe router: out of host memory\n");
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < rows * n; i++)
        w[i] = 0.1f * uniform(&seed);
    for (int64_t i = 0; i < T * n; i++)
        x[i] = uniform(&seed);
    for (int64_t t = 0; t < T; t++)
        memcpy(xs + t * lds, x + t * n, (size_t)n * 4);
    CK(cudaMalloc(&dw, (size_t)(rows * n) * 4));
    CK(cudaMalloc(&dx, (size_t)(T * n) * 4));
    CK(cudaMalloc(&dxs, (size_t)(T * lds) * 4));
    CK(cudaMalloc(&dy, (size_t)(T * rows) * 4));
    CK(cudaMemcpy(dw, w, (size_t)(rows * n) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dxs, xs, (size_t)(T * lds) * 4, cudaMemcpyHostToDevice));
    {
        sl_cuda_weight rw = {SL_GGML_TYPE_F32, n, rows, (size_t)n * 4, (const uint8_t *)dw, false, NULL};
        if (!sl_cuda_moe_router_supports(&rw) || sl_cuda_moe_router(&rw, dx, n, T, dy, rows, st) < 0) {
            fprintf(out, "  moe router %d x %lld: launch refused\n", rows, (long long)n);
            bad = 1;
            goto done;
        }
        CK(cudaMemcpy(got, dy, (size_t)(T * rows) * 4, cudaMemcpyDeviceToHost));
        /* each token row alone (other tile sizes), then the scalar loads */
        CK(cudaMemset(dy, 0xFF, (size_t)(T * rows) * 4));
        for (int64_t t = 0; t < T; t++)
            if (sl_cuda_moe_router(&rw, dx + t * n, n, 1, dy + t * rows, rows, st) < 0) {
                bad = 1;
                goto done;
            }
        CK(cudaMemcpy(one, dy, (size_t)(T * rows) * 4, cudaMemcpyDeviceToHost));
        if (sl_cuda_moe_router(&rw, dxs, lds, T, dy, rows, st) < 0) {
            bad = 1;
            goto done;
        }
        CK(cudaMemcpy(sc, dy, (size_t)(T * rows) * 4, cudaMemcpyDeviceToHost));
        CK(cudaGetLastError());
    }
    for (int64_t t = 0; t < T; t++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)w[(int64_t)r * n + i] * x[t * n + i];
                mag += fabs((double)w[(int64_t)r * n + i] * x[t * n + i]);
            }
            double e = fabs(got[t * rows + r] - ref) / (mag + 1e-30);
            worst = e > worst || e != e ? e : worst;
        }
    alone = memcmp(got, one, (size_t)(T * rows) * 4) == 0;
    scalar = memcmp(got, sc, (size_t)(T * rows) * 4) == 0;
    bad = !(worst <= 1e-5) || !alone || !scalar;
    fprintf(out, "  moe router f32 %d x %lld, T %lld: max err %.1e of sum |w x|, rows alone %s, scalar loads %s  %s\n",
            rows, (long long)n, (long long)T, worst, alone ? "same bits" : "DIFFER", scalar ? "same bits" : "DIFFER",
            bad ? "FAIL" : "ok");
done:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dxs);
    cudaFree(dy);
    free(w);
    free(x);
    free(xs);
    free(got);
    free(one);
    free(sc);
    return bad;
}

int st_moe_router(FILE *out, cudaStream_t st)
{
    int bad = 0;
    bad += router_case(out, st, 128, 2048, 37);   /* Qwen3-30B-A3B: 8 warps a row */
    bad += router_case(out, st, 32, 2880, 19);    /* gpt-oss-20b: a run ends inside a step */
    bad += router_case(out, st, 8, 4096, 9);      /* Mixtral */
    bad += router_case(out, st, 60, 1024, 12);    /* 4 warps a row */
    bad += router_case(out, st, 5, 99, 3);        /* one warp, scalar loads, a partial step */
    return bad;
}

/* ------------------------------------------------------------------------ */
/* combine                                                                  */

static int combine_case(FILE *out, cudaStream_t st, int64_t T, int k, int64_t E, bool shared)
{
    int bad = 0;
    uint64_t seed = 5 + (uint64_t)k;
    int64_t R = T * k;
    float *y = (float *)malloc((size_t)(R * E) * 4), *w = (float *)malloc((size_t)R * 4);
    float *sh = (float *)malloc((size_t)(T * E) * 4), *g = (float *)malloc((size_t)T * 4);
    float *got = (float *)malloc((size_t)(T * E) * 4);
    float *dy = NULL, *dw = NULL, *dsh = NULL, *dg = NULL, *dout = NULL;
    double worst = 0;
    int64_t differ = 0;
    if (!y || !w || !sh || !g || !got) {
        fprintf(out, "  moe combine: out of host memory\n");
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < R * E; i++)
        y[i] = uniform(&seed);
    for (int64_t i = 0; i < R; i++)
        w[i] = uniform(&seed);
    for (int64_t i = 0; i < T * E; i++)
        sh[i] = uniform(&seed);
    for (int64_t t = 0; t < T; t++)
        g[t] = 4.0f * uniform(&seed);
    CK(cudaMalloc(&dy, (size_t)(R * E) * 4));
    CK(cudaMalloc(&dw, (size_t)R * 4));
    CK(cudaMalloc(&dsh, (size_t)(T * E) * 4));
    CK(cudaMalloc(&dg, (size_t)T * 4));
    CK(cudaMalloc(&dout, (size_t)(T * E) * 4));
    CK(cudaMemcpy(dy, y, (size_t)(R * E) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, w, (size_t)R * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsh, sh, (size_t)(T * E) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, g, (size_t)T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xFF, (size_t)(T * E) * 4));
    if (sl_cuda_moe_combine(dout, dy, dw, T, k, E, shared ? dsh : NULL, shared ? dg : NULL, st) < 0) {
        fprintf(out, "  moe combine: launch refused\n");
        bad = 1;
        goto done;
    }
    CK(cudaMemcpy(got, dout, (size_t)(T * E) * 4, cudaMemcpyDeviceToHost));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < E; i++) {
            /* the old kernel's arithmetic, each product and sum rounded to float (volatile: no contraction) */
            volatile float o = w[t * k] * y[(t * k) * E + i];
            for (int s = 1; s < k; s++) {
                volatile float p = w[t * k + s] * y[(t * k + s) * E + i];
                o = o + p;
            }
            if (shared) {
                double r = (double)o + 1.0 / (1.0 + exp(-(double)g[t])) * sh[t * E + i];
                double e = fabs(got[t * E + i] - r);
                worst = e > worst || e != e ? e : worst;
            } else {
                float ov = o;
                differ += memcmp(&ov, &got[t * E + i], 4) != 0;
            }
        }
    bad = differ > 0 || !(worst <= 1e-6);
    if (shared)
        fprintf(out, "  moe combine T %lld, top %d, n_embd %lld, shared expert: max abs err %.1e  %s\n",
                (long long)T, k, (long long)E, worst, bad ? "FAIL" : "ok");
    else
        fprintf(out, "  moe combine T %lld, top %d, n_embd %lld: %s the one-block-per-row arithmetic  %s\n",
                (long long)T, k, (long long)E, differ ? "bits DIFFER from" : "same bits as", bad ? "FAIL" : "ok");
done:
    cudaFree(dy);
    cudaFree(dw);
    cudaFree(dsh);
    cudaFree(dg);
    cudaFree(dout);
    free(y);
    free(w);
    free(sh);
    free(g);
    free(got);
    return bad;
}

int st_moe_combine(FILE *out, cudaStream_t st)
{
    int bad = 0;
    bad += combine_case(out, st, 3, 1, 2085, false);
    bad += combine_case(out, st, 5, 2, 2085, false);
    bad += combine_case(out, st, 4, 8, 2048, false);   /* Qwen3-30B-A3B */
    bad += combine_case(out, st, 2, 32, 2085, false);  /* the most slots */
    bad += combine_case(out, st, 5, 4, 2085, true);    /* qwen2moe's shared expert */
    return bad;
}

/* ------------------------------------------------------------------------ */
/* timings                                                                  */

/* Milliseconds per call of f (which launches on st), over reps after one
 * warm-up call; -1 when a launch or an event failed. */
template <class F>
static float time_ms(cudaStream_t st, F f)
{
    const int reps = 50;
    cudaEvent_t a, b;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess)
        return ms;
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return ms;
    }
    bool ok = f() >= 0 && cudaEventRecord(a, st) == cudaSuccess;
    for (int i = 0; ok && i < reps; i++)
        ok = f() >= 0;
    if (ok && cudaEventRecord(b, st) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
        cudaEventElapsedTime(&ms, a, b) == cudaSuccess)
        ms /= reps;
    else
        ms = -1.0f;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

int st_moe_step_timing(FILE *out, cudaStream_t st)
{
    const int n = 128, k = 8;
    const int64_t E = 2048, Tmax = 64, Rmax = Tmax * k;
    static const int64_t Ts[] = {1, 64};
    int bad = 0;
    uint64_t seed = 99;
    float *h = (float *)malloc((size_t)(Tmax * E) * 4 > (size_t)n * E * 4 ? (size_t)(Tmax * E) * 4 : (size_t)n * E * 4);
    float *dw = NULL, *dx = NULL, *dlog = NULL, *dwt = NULL, *dy = NULL, *dout = NULL;
    int32_t *dids = NULL, *doff = NULL, *dpairs = NULL, *dused = NULL;
    if (!h) {
        fprintf(out, "  moe step timing: out of host memory\n");
        return 1;
    }
    CK(cudaMalloc(&dw, (size_t)n * E * 4));
    CK(cudaMalloc(&dx, (size_t)(Tmax * E) * 4));
    CK(cudaMalloc(&dlog, (size_t)(Tmax * n) * 4));
    CK(cudaMalloc(&dwt, (size_t)Rmax * 4));
    CK(cudaMalloc(&dy, (size_t)(Rmax * E) * 4));
    CK(cudaMalloc(&dout, (size_t)(Tmax * E) * 4));
    CK(cudaMalloc(&dids, (size_t)Rmax * 4));
    CK(cudaMalloc(&doff, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dpairs, (size_t)Rmax * 4));
    CK(cudaMalloc(&dused, ((size_t)n + 1) * 4));
    for (int64_t i = 0; i < (int64_t)n * E; i++)
        h[i] = 0.05f * uniform(&seed);
    CK(cudaMemcpy(dw, h, (size_t)n * E * 4, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < Tmax * E; i++)
        h[i] = uniform(&seed);
    CK(cudaMemcpy(dx, h, (size_t)(Tmax * E) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dy, 0, (size_t)(Rmax * E) * 4));
    for (int64_t T : Ts) {
        sl_cuda_weight rw = {SL_GGML_TYPE_F32, E, n, (size_t)E * 4, (const uint8_t *)dw, false, NULL};
        int64_t R = T * k;
        float r_new = time_ms(st, [&] { return (int)sl_cuda_moe_router(&rw, dx, E, T, dlog, n, st); });
        float r_old = time_ms(st, [&] { return (int)sl_cuda_matmul(&rw, dx, E, T, dlog, n, st); });
        /* the logits the routing below reads: the router's */
        if (sl_cuda_moe_router(&rw, dx, E, T, dlog, n, st) < 0)
            bad = 1;
        float g_new = time_ms(st, [&] {
            return (int)sl_cuda_moe_route_group(dlog, T, n, k, false, true, dids, dwt, doff, dpairs, dused, st);
        });
        float g_old = time_ms(st, [&] {
            sl_status rc = sl_cuda_moe_route(dlog, T, n, k, true, dids, dwt, st);
            return (int)(rc < 0 ? rc : sl_cuda_moe_group(dids, R, n, doff, dpairs, dused, st));
        });
        float c = time_ms(st, [&] { return (int)sl_cuda_moe_combine(dout, dy, dwt, T, k, E, NULL, NULL, st); });
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        if (r_new < 0 || r_old < 0 || g_new < 0 || g_old < 0 || c < 0)
            bad = 1;
        fprintf(out, "  moe step timing T %lld, 128 experts, top 8, n_embd 2048: router %.4f ms (sl_cuda_matmul "
                "%.4f), route+group %.4f ms%s (two kernels %.4f), combine %.4f ms%s\n", (long long)T, r_new, r_old,
                g_new, T <= 16 ? " fused" : "", g_old, c, bad ? "  FAIL (a launch failed)" : "");
    }
done:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dlog);
    cudaFree(dwt);
    cudaFree(dy);
    cudaFree(dout);
    cudaFree(dids);
    cudaFree(doff);
    cudaFree(dpairs);
    cudaFree(dused);
    free(h);
    return bad;
}
