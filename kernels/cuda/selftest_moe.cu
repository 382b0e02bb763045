/* kernels/cuda/selftest_moe.cu: the MoE kernels (moe.cuh) against host
 * references on the GPU machine, through the exported
 * sl_cuda_selftest_moe() (tools/cudacheck --ops, after the other
 * self-tests): routing (expert ids exact, ties included, weights to 1e-6),
 * grouping (offsets, pair order and the experts in use exact), and the whole FFN (route,
 * group, fused gate/up, down, combine) per expert type against a float64
 * reference on the dequantized weights, plus one row computed alone giving
 * the bits it gave in the batch; gpt-oss's routing against the CPU's
 * sl_cpu_moe_route_topk_softmax and its FFN (expert biases, the CPU's
 * sl_cpu_swiglu_oai in the reference); and the expert matmuls with their
 * activation rows staged in shared memory giving the bits of the global
 * path, on Qwen3-30B-A3B's shape.
 * Kept apart from selftest.cu so each file has one subject. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/random_blocks.cuh"
#include "kernels/cuda/selftest_moe_step.cuh"
#include "kernels/cuda/selftest_util.cuh"

extern "C" {
#include "kernels/cpu/ops.h"   /* compiled into the library for this check */
}

/* Routing and grouping of T rows over n experts. coarse: logits on a grid
 * of 1/4 so that many tie. Returns 1 on a mismatch. */
static int check_route(FILE *out, cudaStream_t st, int64_t T, int n, int k, bool norm, bool coarse)
{
    int bad = 0;
    uint64_t seed = 77 + (uint64_t)n * 131 + (uint64_t)k;
    int64_t R = T * k;
    float *l = (float *)malloc((size_t)(T * n) * sizeof(float)), *p = (float *)malloc((size_t)n * sizeof(float));
    int32_t *ids = (int32_t *)malloc((size_t)R * 4), *gids = (int32_t *)malloc((size_t)R * 4);
    float *w = (float *)malloc((size_t)R * 4), *gw = (float *)malloc((size_t)R * 4), *w2 = (float *)malloc((size_t)R * 4);
    int32_t *off = (int32_t *)calloc((size_t)n + 1, 4), *goff = (int32_t *)malloc(((size_t)n + 1) * 4);
    int32_t *pairs = (int32_t *)malloc((size_t)R * 4), *gpairs = (int32_t *)malloc((size_t)R * 4);
    int32_t *used = (int32_t *)calloc((size_t)n + 1, 4), *gused = (int32_t *)calloc((size_t)n + 1, 4);
    float *dl = NULL, *dw = NULL;
    int32_t *dids = NULL, *doff = NULL, *dpairs = NULL, *dused = NULL;
    double werr = 0;
    if (!l || !p || !ids || !gids || !w || !gw || !w2 || !off || !goff || !pairs || !gpairs || !used || !gused) {
        fprintf(out, "  moe route: out of host memory\n");
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < T * n; i++)
        l[i] = coarse ? floorf(uniform(&seed) * 8.0f) / 4.0f : 4.0f * uniform(&seed);
    for (int64_t t = 0; t < T; t++)
        /* the reference is the CPU backend's own routing (kernels/cpu/ops.c) */
        sl_cpu_moe_route(l + t * n, n, k, norm, p, ids + t * k, w + t * k);
    /* the grouping: a stable counting sort of the pairs by expert */
    for (int64_t i = 0; i < R; i++)
        off[ids[i] + 1]++;
    for (int e = 0; e < n; e++) {
        if (off[e + 1] > 0)
            used[1 + used[0]++] = e;
        off[e + 1] += off[e];
    }
    {
        int32_t *fill = (int32_t *)malloc((size_t)n * 4);
        if (!fill) {
            bad = 1;
            goto done;
        }
        memcpy(fill, off, (size_t)n * 4);
        for (int64_t i = 0; i < R; i++)
            pairs[fill[ids[i]]++] = (int32_t)i;
        free(fill);
    }
    CK(cudaMalloc(&dl, (size_t)(T * n) * 4));
    CK(cudaMalloc(&dw, (size_t)R * 4));
    CK(cudaMalloc(&dids, (size_t)R * 4));
    CK(cudaMalloc(&doff, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dpairs, (size_t)R * 4));
    CK(cudaMalloc(&dused, ((size_t)n + 1) * 4));
    CK(cudaMemset(dused, 0, ((size_t)n + 1) * 4));
    CK(cudaMemcpy(dl, l, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    /* pass 0: the two kernels; pass 1: sl_cuda_moe_route_group (one fused block for T <= 16) */
    for (int pass = 0; pass < 2; pass++) {
        CK(cudaMemset(dids, 0xFF, (size_t)R * 4));
        CK(cudaMemset(dw, 0xFF, (size_t)R * 4));
        CK(cudaMemset(dpairs, 0xFF, (size_t)R * 4));
        CK(cudaMemset(doff, 0xFF, ((size_t)n + 1) * 4));
        CK(cudaMemset(dused, 0, ((size_t)n + 1) * 4));
        sl_status rc = pass == 0 ? sl_cuda_moe_route(dl, T, n, k, norm, dids, dw, st)
                                 : sl_cuda_moe_route_group(dl, T, n, k, false, norm, dids, dw, doff, dpairs, dused, st);
        if (rc < 0 || (pass == 0 && sl_cuda_moe_group(dids, R, n, doff, dpairs, dused, st) < 0)) {
            fprintf(out, "  moe route: launch refused\n");
            bad = 1;
            goto done;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        CK(cudaMemcpy(gids, dids, (size_t)R * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gw, dw, (size_t)R * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(goff, doff, ((size_t)n + 1) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gpairs, dpairs, (size_t)R * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gused, dused, ((size_t)n + 1) * 4, cudaMemcpyDeviceToHost));
        werr = 0;
        for (int64_t i = 0; i < R; i++) {
            double d = fabs((double)gw[i] - w[i]) / (fabs((double)w[i]) + 1e-30);
            werr = d > werr || d != d ? d : werr;
        }
        if (pass == 0)   /* the fused pass must give these weights bit for bit */
            memcpy(w2, gw, (size_t)R * 4);
        bool ids_ok = memcmp(gids, ids, (size_t)R * 4) == 0;
        bool groups_ok = memcmp(goff, off, ((size_t)n + 1) * 4) == 0 && memcmp(gpairs, pairs, (size_t)R * 4) == 0 &&
                         memcmp(gused, used, ((size_t)n + 1) * 4) == 0;
        bool w_same = pass == 0 || memcmp(gw, w2, (size_t)R * 4) == 0;
        int fail = !ids_ok || !groups_ok || !(werr <= 1e-6) || !w_same;
        bad += fail;
        fprintf(out, "  moe route+group%s T %lld, %d experts, top %d%s%s: ids %s, groups %s, weights max rel err "
                "%.1e%s  %s\n", pass ? (T <= 16 ? " (fused)" : " (route_group, unfused)") : "", (long long)T, n, k,
                norm ? ", renormalised" : "", coarse ? ", tied logits" : "", ids_ok ? "exact" : "DIFFER",
                groups_ok ? "exact" : "DIFFER", werr, pass ? (w_same ? ", the two kernels' bits" : ", bits DIFFER") : "",
                fail ? "FAIL" : "ok");
    }
done:
    cudaFree(dl);
    cudaFree(dw);
    cudaFree(dids);
    cudaFree(doff);
    cudaFree(dpairs);
    cudaFree(dused);
    free(used);
    free(gused);
    free(w2);
    free(l);
    free(p);
    free(ids);
    free(gids);
    free(w);
    free(gw);
    free(off);
    free(goff);
    free(pairs);
    free(gpairs);
    return bad;
}

/* gpt-oss's routing (top-k of the logits, then softmax over the k) of T
 * rows against the CPU backend's sl_cpu_moe_route_topk_softmax: ids exact
 * (coarse: tied logits; nans: NaN logits, which rank below every number),
 * weights to 1e-6. Returns 1 on a mismatch. */
static int check_route_topk(FILE *out, cudaStream_t st, int64_t T, int n, int k, bool coarse, bool nans)
{
    int bad = 0;
    uint64_t seed = 91 + (uint64_t)n * 131 + (uint64_t)k;
    int64_t R = T * k;
    float *l = (float *)malloc((size_t)(T * n) * sizeof(float)), *p = (float *)malloc((size_t)n * sizeof(float));
    int32_t *ids = (int32_t *)malloc((size_t)R * 4), *gids = (int32_t *)malloc((size_t)R * 4);
    float *w = (float *)malloc((size_t)R * 4), *gw = (float *)malloc((size_t)R * 4);
    float *dl = NULL, *dw = NULL;
    int32_t *dids = NULL, *dg = NULL, *hoff = NULL;
    double werr = 0;
    bool wnan = false;
    if (!l || !p || !ids || !gids || !w || !gw) {
        fprintf(out, "  moe route top-k softmax: out of host memory\n");
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < T * n; i++)
        l[i] = coarse ? floorf(uniform(&seed) * 8.0f) / 4.0f : 4.0f * uniform(&seed);
    for (int64_t t = 0; nans && t < T; t++)
        for (int e = 0; e < n; e++)
            if ((e * 7 + t) % 5 == 0 || (t == 1 && e >= k))
                l[t * n + e] = NAN;
    for (int64_t t = 0; t < T; t++)
        sl_cpu_moe_route_topk_softmax(l + t * n, n, k, p, ids + t * k, w + t * k);
    CK(cudaMalloc(&dl, (size_t)(T * n) * 4));
    CK(cudaMalloc(&dw, (size_t)R * 4));
    CK(cudaMalloc(&dids, (size_t)R * 4));
    CK(cudaMemcpy(dl, l, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    if (sl_cuda_moe_route_topk_softmax(dl, T, n, k, dids, dw, st) < 0) {
        fprintf(out, "  moe route top-k softmax: launch refused\n");
        bad = 1;
        goto done;
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(gids, dids, (size_t)R * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gw, dw, (size_t)R * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < R; i++) {
        if (isnan(w[i]) || isnan(gw[i])) {
            wnan = wnan || isnan(w[i]) != isnan(gw[i]);
            continue;
        }
        double d = fabs((double)gw[i] - w[i]) / (fabs((double)w[i]) + 1e-30);
        werr = d > werr ? d : werr;
    }
    bad = memcmp(gids, ids, (size_t)R * 4) != 0 || wnan || werr > 1e-6;
    fprintf(out, "  moe route top-k softmax (gpt-oss) T %lld, %d experts, top %d%s%s: ids %s, weights max rel err "
            "%.1e%s  %s\n", (long long)T, n, k, coarse ? ", tied logits" : "", nans ? ", NaN logits" : "",
            memcmp(gids, ids, (size_t)R * 4) ? "DIFFER" : "exact", werr, wnan ? ", NaN where the CPU has none" : "",
            bad ? "FAIL" : "ok");
    /* sl_cuda_moe_route_group (one fused block for T <= 16): the same ids and weight bits, and the grouping of them */
    hoff = (int32_t *)malloc(((size_t)n + 1) * 4 * 4 + (size_t)R * 4 * 4 + (size_t)R * 4);
    if (!hoff) {
        bad = 1;
        goto done;
    }
    {
        int32_t *hused = hoff + n + 1, *goff = hused + n + 1, *gused = goff + n + 1, *hpairs = gused + n + 1;
        int32_t *gpairs = hpairs + R, *fids = gpairs + R;
        float *fw = (float *)(fids + R);
        memset(hoff, 0, ((size_t)n + 1) * 4 * 2);
        for (int64_t i = 0; i < R; i++)
            hoff[gids[i] + 1]++;
        for (int e = 0; e < n; e++) {
            if (hoff[e + 1] > 0)
                hused[1 + hused[0]++] = e;
            hoff[e + 1] += hoff[e];
        }
        memcpy(goff, hoff, (size_t)n * 4);   /* the fill pointers, for now */
        for (int64_t i = 0; i < R; i++)
            hpairs[goff[gids[i]]++] = (int32_t)i;
        CK(cudaMalloc(&dg, ((size_t)n + 1) * 8 + (size_t)R * 4));
        CK(cudaMemset(dg, 0, ((size_t)n + 1) * 8 + (size_t)R * 4));
        CK(cudaMemset(dids, 0xFF, (size_t)R * 4));
        CK(cudaMemset(dw, 0xFF, (size_t)R * 4));
        if (sl_cuda_moe_route_group(dl, T, n, k, true, false, dids, dw, dg, dg + 2 * (n + 1), dg + n + 1, st) < 0) {
            fprintf(out, "  moe route_group top-k softmax: launch refused\n");
            bad = 1;
            goto done;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        CK(cudaMemcpy(fids, dids, (size_t)R * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(fw, dw, (size_t)R * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(goff, dg, ((size_t)n + 1) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gused, dg + n + 1, ((size_t)n + 1) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gpairs, dg + 2 * (n + 1), (size_t)R * 4, cudaMemcpyDeviceToHost));
        bool same = memcmp(fids, gids, (size_t)R * 4) == 0 && memcmp(fw, gw, (size_t)R * 4) == 0;
        bool groups = memcmp(goff, hoff, ((size_t)n + 1) * 4) == 0 && memcmp(gused, hused, ((size_t)n + 1) * 4) == 0 &&
                      memcmp(gpairs, hpairs, (size_t)R * 4) == 0;
        bad += !same || !groups;
        fprintf(out, "  moe route_group%s top-k softmax (gpt-oss) T %lld, %d experts, top %d: ids and weights %s, "
                "groups %s  %s\n", T <= 16 ? " (fused)" : " (unfused)", (long long)T, n, k,
                same ? "the two kernels' bits" : "DIFFER", groups ? "exact" : "DIFFER", same && groups ? "ok" : "FAIL");
    }
done:
    cudaFree(dg);
    free(hoff);
    cudaFree(dl);
    cudaFree(dw);
    cudaFree(dids);
    free(l);
    free(p);
    free(ids);
    free(gids);
    free(w);
    free(gw);
    return bad;
}

/* rows matrices of n weights in `type` into wq, and their dequantization into w */
static void make_weights(uint32_t type, int64_t rows, int64_t n, float *w, uint8_t *wq, uint64_t *seed)
{
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            w[r * n + i] = uniform(seed);
        if (sl_quant_quantize_row(type, w + r * n, wq + r * rb, n) != SL_OK)
            sl_random_blocks_row(type, wq + r * rb, rb, n, seed);
        if (sl_quant_dequantize_row(type, wq + r * rb, w + r * n, n) != SL_OK)
            for (int64_t i = 0; i < n; i++)
                w[r * n + i] = sl_dev_dequant_elem(type, wq + r * rb, i);
    }
}

/* The device side of one FFN: route, group, experts, combine, into dout. */
static sl_status run_ffn(cudaStream_t st, const sl_cuda_weight *g, const sl_cuda_weight *u, const sl_cuda_weight *d,
                         int n, int k, int64_t T, const float *dx, const float *dlog, int32_t *dids, float *dw,
                         int32_t *doff, int32_t *dpairs, int32_t *dused, float *dh, float *dy, float *dout,
                         const float *const *db)
{
    int64_t E = g->ne0, F = g->ne1, R = T * k;
    /* db (gpt-oss): gate, up and down biases; its routing and clamped SwiGLU */
    sl_status rr = db ? sl_cuda_moe_route_topk_softmax(dlog, T, n, k, dids, dw, st)
                      : sl_cuda_moe_route(dlog, T, n, k, true, dids, dw, st);
    if (rr < 0 || sl_cuda_moe_group(dids, R, n, doff, dpairs, dused, st) < 0 ||
        sl_cuda_mmv_experts_biased(g, u, db ? db[0] : NULL, db ? db[1] : NULL, db != NULL, n, doff, dpairs, dused, R,
                                   T, k, dx, E, dh, F, st) < 0 ||
        sl_cuda_mmv_experts_biased(d, NULL, db ? db[2] : NULL, NULL, false, n, doff, dpairs, dused, R, T, 1, dh, F,
                                   dy, E, st) < 0 ||
        sl_cuda_moe_combine(dout, dy, dw, T, k, E, NULL, NULL, st) < 0)
        return SL_EINVAL;
    return SL_OK;
}

/* The MoE FFN of T rows (E wide, experts of hidden size F) with experts of
 * `type`, against float64 over the dequantized weights and the device's
 * own routing (routing is checked above). Returns 1 on a failure. */
static int check_ffn(FILE *out, cudaStream_t st, uint32_t type, int64_t T, int n, int k, int64_t E, int64_t F,
                     bool oss = false)
{
    int bad = 0;
    uint64_t seed = 4242 + type;
    size_t rbe = sl_ggml_row_bytes(type, (uint64_t)E), rbf = sl_ggml_row_bytes(type, (uint64_t)F);
    int64_t R = T * k, gu_rows = (int64_t)n * F, d_rows = (int64_t)n * E;
    float *wg = (float *)malloc((size_t)(gu_rows * E) * 4), *wu = (float *)malloc((size_t)(gu_rows * E) * 4);
    float *wd = (float *)malloc((size_t)(d_rows * F) * 4);
    uint8_t *qg = (uint8_t *)malloc((size_t)gu_rows * rbe), *qu = (uint8_t *)malloc((size_t)gu_rows * rbe);
    uint8_t *qd = (uint8_t *)malloc((size_t)d_rows * rbf);
    float *x = (float *)malloc((size_t)(T * E) * 4), *lg = (float *)malloc((size_t)(T * n) * 4);
    float *got = (float *)malloc((size_t)(T * E) * 4), *alone = (float *)malloc((size_t)E * 4);
    float *gw = (float *)malloc((size_t)R * 4);
    int32_t *gids = (int32_t *)malloc((size_t)R * 4);
    double *ref = (double *)malloc((size_t)(T * E) * 8), *hh = (double *)malloc((size_t)F * 8);
    /* gpt-oss: expert biases (n, F) for gate and up, (n, E) for down, on the host then the device */
    float *bias = (float *)malloc((size_t)(2 * gu_rows + d_rows) * 4), *dbias = NULL;
    const float *db[3] = {NULL, NULL, NULL};
    uint8_t *dqg = NULL, *dqu = NULL, *dqd = NULL;
    float *dx = NULL, *dlog = NULL, *dw = NULL, *dh = NULL, *dy = NULL, *dout = NULL;
    int32_t *dids = NULL, *doff = NULL, *dpairs = NULL, *dused = NULL;
    double num = 0, den = 0, err = 0;
    bool same = false;
    int64_t t1 = T / 2;   /* the row computed alone */
    if (!wg || !wu || !wd || !qg || !qu || !qd || !x || !lg || !got || !alone || !gw || !gids || !ref || !hh || !bias) {
        fprintf(out, "  moe ffn: out of host memory\n");
        bad = 1;
        goto done;
    }
    make_weights(type, gu_rows, E, wg, qg, &seed);
    make_weights(type, gu_rows, E, wu, qu, &seed);
    make_weights(type, d_rows, F, wd, qd, &seed);
    for (int64_t i = 0; i < T * E; i++)
        x[i] = uniform(&seed);
    for (int64_t i = 0; i < T * n; i++)
        lg[i] = 3.0f * uniform(&seed);
    for (int64_t i = 0; i < 2 * gu_rows + d_rows; i++)
        bias[i] = 2.0f * uniform(&seed);
    if (oss) {
        CK(cudaMalloc(&dbias, (size_t)(2 * gu_rows + d_rows) * 4));
        CK(cudaMemcpy(dbias, bias, (size_t)(2 * gu_rows + d_rows) * 4, cudaMemcpyHostToDevice));
        db[0] = dbias;
        db[1] = dbias + gu_rows;
        db[2] = dbias + 2 * gu_rows;
    }
    CK(cudaMalloc(&dqg, (size_t)gu_rows * rbe));
    CK(cudaMalloc(&dqu, (size_t)gu_rows * rbe));
    CK(cudaMalloc(&dqd, (size_t)d_rows * rbf));
    CK(cudaMalloc(&dx, (size_t)(T * E) * 4));
    CK(cudaMalloc(&dlog, (size_t)(T * n) * 4));
    CK(cudaMalloc(&dw, (size_t)R * 4));
    CK(cudaMalloc(&dids, (size_t)R * 4));
    CK(cudaMalloc(&doff, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dpairs, (size_t)R * 4));
    CK(cudaMalloc(&dused, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dh, (size_t)(R * F) * 4));
    CK(cudaMalloc(&dy, (size_t)(R * E) * 4));
    CK(cudaMalloc(&dout, (size_t)(T * E) * 4));
    CK(cudaMemcpy(dqg, qg, (size_t)gu_rows * rbe, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqu, qu, (size_t)gu_rows * rbe, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqd, qd, (size_t)d_rows * rbf, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, (size_t)(T * E) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dlog, lg, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    {
        sl_cuda_weight g = {type, E, F, rbe, dqg, false, NULL}, u = {type, E, F, rbe, dqu, false, NULL};
        sl_cuda_weight d = {type, F, E, rbf, dqd, false, NULL};
        if (run_ffn(st, &g, &u, &d, n, k, T, dx, dlog, dids, dw, doff, dpairs, dused, dh, dy, dout, oss ? db : NULL) < 0) {
            fprintf(out, "  moe ffn %s: launch refused\n", sl_ggml_type_name(type));
            bad = 1;
            goto done;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(got, dout, (size_t)(T * E) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gids, dids, (size_t)R * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gw, dw, (size_t)R * 4, cudaMemcpyDeviceToHost));
        /* row t1 alone: same bits expected */
        if (run_ffn(st, &g, &u, &d, n, k, 1, dx + t1 * E, dlog + t1 * n, dids, dw, doff, dpairs, dused, dh, dy, dout,
                    oss ? db : NULL) < 0) {
            bad = 1;
            goto done;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(alone, dout, (size_t)E * 4, cudaMemcpyDeviceToHost));
        same = memcmp(alone, got + t1 * E, (size_t)E * 4) == 0;
    }
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < E; i++)
            ref[t * E + i] = 0;
        for (int s = 0; s < k; s++) {
            int e = gids[t * k + s];
            for (int64_t f = 0; f < F; f++) {
                const float *rg = wg + ((int64_t)e * F + f) * E, *ru = wu + ((int64_t)e * F + f) * E;
                double a = 0, b = 0;
                for (int64_t i = 0; i < E; i++) {
                    a += (double)rg[i] * x[t * E + i];
                    b += (double)ru[i] * x[t * E + i];
                }
                if (oss) {   /* the biases, then the CPU backend's own clamped SwiGLU on the floats */
                    float ga = (float)a + bias[(int64_t)e * F + f], ub = (float)b + bias[gu_rows + (int64_t)e * F + f];
                    float o;
                    sl_cpu_swiglu_oai(&o, &ga, &ub, 1);
                    hh[f] = o;
                } else {
                    hh[f] = a / (1.0 + exp(-a)) * b;
                }
            }
            for (int64_t i = 0; i < E; i++) {
                const float *rd = wd + ((int64_t)e * E + i) * F;
                double y = oss ? (double)bias[2 * gu_rows + (int64_t)e * E + i] : 0.0;
                for (int64_t f = 0; f < F; f++)
                    y += (double)rd[f] * hh[f];
                ref[t * E + i] += (double)gw[t * k + s] * y;
            }
        }
    }
    for (int64_t i = 0; i < T * E; i++) {
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    err = den > 0 ? sqrt(num / den) : sqrt(num);
    bad = err > 2e-5 || !same;
    fprintf(out, "  moe ffn %-6s%s T %lld, %d experts, top %d, n_embd %lld, n_ff_exp %lld: rel err %.1e, row alone %s  "
            "%s\n", sl_ggml_type_name(type), oss ? " gpt-oss (top-k softmax, biases, clamped SwiGLU)" : "", (long long)T,
            n, k, (long long)E, (long long)F, err,
            same ? "same bits" : "DIFFERS", bad ? "FAIL" : "ok");
done:
    cudaFree(dbias);
    free(bias);
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
    cudaFree(dh);
    cudaFree(dy);
    cudaFree(dout);
    free(wg);
    free(wu);
    free(wd);
    free(qg);
    free(qu);
    free(qd);
    free(x);
    free(lg);
    free(got);
    free(alone);
    free(gw);
    free(gids);
    free(ref);
    free(hh);
    return bad;
}

/* Milliseconds a launch of the two expert matmuls takes, averaged over reps
 * (informational: the staged against the global path). */
static float time_experts(cudaStream_t st, const sl_cuda_weight *g, const sl_cuda_weight *u, const sl_cuda_weight *d,
                          int n, int k, int64_t T, const float *dx, const int32_t *doff, const int32_t *dpairs,
                          const int32_t *dused, float *dh, float *dy)
{
    const int reps = 20;
    cudaEvent_t a, b;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess)
        return ms;
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return ms;
    }
    int64_t R = T * k, E = g->ne0, F = g->ne1;
    bool ok = cudaEventRecord(a, st) == cudaSuccess;
    for (int i = 0; ok && i < reps; i++)
        ok = sl_cuda_mmv_experts(g, u, n, doff, dpairs, dused, R, T, k, dx, E, dh, F, st) == SL_OK &&
             sl_cuda_mmv_experts(d, NULL, n, doff, dpairs, dused, R, T, 1, dh, F, dy, E, st) == SL_OK;
    if (ok && cudaEventRecord(b, st) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
        cudaEventElapsedTime(&ms, a, b) == cudaSuccess)
        ms /= reps;
    else
        ms = -1.0f;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

/* The expert matmuls with their activation rows staged in shared memory
 * (SLUICE_CUDA_MOE_STAGE=1) against the global path (the default) on
 * Qwen3-30B-A3B's shape: 128 experts, top 8, n_embd 2048, n_ff_exp 768,
 * Q4_K experts of random blocks, at T = 1, 8, 16, 64 and 512 (one to four and
 * eight pairs per pass, the last above 48 KiB of shared memory). Every
 * output of both launches must be the same bits. Returns failures. */
static int check_stage(FILE *out, cudaStream_t st)
{
    const uint32_t type = SL_GGML_TYPE_Q4_K;
    const int n = 128, k = 8;
    const int64_t E = 2048, F = 768, Tmax = 512, Rmax = Tmax * k;
    static const int64_t Ts[] = {1, 8, 16, 64, 512};
    int bad = 0;
    uint64_t seed = 777;
    size_t rbe = sl_ggml_row_bytes(type, (uint64_t)E), rbf = sl_ggml_row_bytes(type, (uint64_t)F);
    size_t gu_bytes = (size_t)n * F * rbe, d_bytes = (size_t)n * E * rbf;
    int was = sl_cuda_mmv_experts_stage(1);
    uint8_t *q = (uint8_t *)malloc(gu_bytes > d_bytes ? gu_bytes : d_bytes);
    float *x = (float *)malloc((size_t)(Tmax * E) * 4), *lg = (float *)malloc((size_t)(Tmax * n) * 4);
    float *h[2] = {(float *)malloc((size_t)(Rmax * F) * 4), (float *)malloc((size_t)(Rmax * F) * 4)};
    float *o[2] = {(float *)malloc((size_t)(Tmax * E) * 4), (float *)malloc((size_t)(Tmax * E) * 4)};
    uint8_t *dqg = NULL, *dqu = NULL, *dqd = NULL;
    float *dx = NULL, *dlog = NULL, *dw = NULL, *dh = NULL, *dy = NULL, *dout = NULL;
    int32_t *dids = NULL, *doff = NULL, *dpairs = NULL, *dused = NULL;
    if (!q || !x || !lg || !h[0] || !h[1] || !o[0] || !o[1]) {
        fprintf(out, "  moe staged rows: out of host memory\n");
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
    for (int64_t i = 0; i < Tmax * E; i++)
        x[i] = 0.05f * uniform(&seed);   /* random scales reach 4 * 63 * 15: keep the sums finite */
    for (int64_t i = 0; i < Tmax * n; i++)
        lg[i] = 3.0f * uniform(&seed);
    CK(cudaMalloc(&dx, (size_t)(Tmax * E) * 4));
    CK(cudaMalloc(&dlog, (size_t)(Tmax * n) * 4));
    CK(cudaMalloc(&dw, (size_t)Rmax * 4));
    CK(cudaMalloc(&dids, (size_t)Rmax * 4));
    CK(cudaMalloc(&doff, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dpairs, (size_t)Rmax * 4));
    CK(cudaMalloc(&dused, ((size_t)n + 1) * 4));
    CK(cudaMalloc(&dh, (size_t)(Rmax * F) * 4));
    CK(cudaMalloc(&dy, (size_t)(Rmax * E) * 4));
    CK(cudaMalloc(&dout, (size_t)(Tmax * E) * 4));
    CK(cudaMemcpy(dx, x, (size_t)(Tmax * E) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dlog, lg, (size_t)(Tmax * n) * 4, cudaMemcpyHostToDevice));
    for (int64_t T : Ts) {
        sl_cuda_weight g = {type, E, F, rbe, dqg, false, NULL}, u = {type, E, F, rbe, dqu, false, NULL};
        sl_cuda_weight d = {type, F, E, rbf, dqd, false, NULL};
        float ms[2] = {-1.0f, -1.0f};
        int64_t R = T * k;
        for (int s = 0; s < 2; s++) {   /* s 0: staged, s 1: the global path */
            sl_cuda_mmv_experts_stage(s == 0 ? 1 : 0);
            CK(cudaMemset(dh, 0xFF, (size_t)(R * F) * 4));   /* NaN bits: an output never written shows */
            CK(cudaMemset(dout, 0xFF, (size_t)(T * E) * 4));
            if (run_ffn(st, &g, &u, &d, n, k, T, dx, dlog, dids, dw, doff, dpairs, dused, dh, dy, dout, NULL) < 0) {
                fprintf(out, "  moe staged rows: launch refused\n");
                bad = 1;
                goto done;
            }
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            CK(cudaMemcpy(h[s], dh, (size_t)(R * F) * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(o[s], dout, (size_t)(T * E) * 4, cudaMemcpyDeviceToHost));
            ms[s] = time_experts(st, &g, &u, &d, n, k, T, dx, doff, dpairs, dused, dh, dy);
        }
        bool same_h = memcmp(h[0], h[1], (size_t)(R * F) * 4) == 0;
        bool same_o = memcmp(o[0], o[1], (size_t)(T * E) * 4) == 0;
        int64_t nan_h = 0;
        for (int64_t i = 0; i < R * F; i++)
            nan_h += isnan(h[0][i]);
        bool fail = !same_h || !same_o || nan_h > 0;
        bad += fail;
        fprintf(out, "  moe staged rows Q4_K T %lld, 128 experts, top 8, n_embd 2048, n_ff_exp 768: gate/up %s, "
                "out %s%s; experts %.3f ms staged, %.3f ms global (the default here: %s)  %s\n", (long long)T,
                same_h ? "same bits" : "DIFFER", same_o ? "same bits" : "DIFFER",
                nan_h ? ", outputs left unwritten" : "", ms[0], ms[1], T >= SL_CUDA_MOE_STAGE_MIN_T ? "staged" : "global",
                fail ? "FAIL" : "ok");
    }
done:
    sl_cuda_mmv_experts_stage(was);
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
    cudaFree(dh);
    cudaFree(dy);
    cudaFree(dout);
    free(q);
    free(x);
    free(lg);
    free(h[0]);
    free(h[1]);
    free(o[0]);
    free(o[1]);
    return bad;
}

/* Runs every case, one line each to `out`. Returns the number that failed,
 * or -1 when there is no usable device. */
extern "C" __attribute__((visibility("default"))) int sl_cuda_selftest_moe(FILE *out)
{
    int n_dev = 0;
    cudaStream_t st;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreate(&st) != cudaSuccess)
        return -1;
    int bad = 0;
    bad += check_route(out, st, 64, 128, 8, true, false);     /* Qwen3-30B-A3B's routing */
    bad += check_route(out, st, 64, 128, 8, true, true);
    bad += check_route(out, st, 33, 60, 4, false, true);      /* Qwen1.5-MoE's, not renormalised */
    bad += check_route(out, st, 7, 8, 2, true, false);        /* Mixtral's */
    bad += check_route(out, st, 5, 512, 32, true, true);      /* the limits */
    bad += check_route(out, st, 2048, 128, 8, true, false);   /* a long prefill step */
    static const uint32_t types[] = {SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K, SL_GGML_TYPE_Q8_0,
                                     SL_GGML_TYPE_Q8_1, SL_GGML_TYPE_Q2_K, SL_GGML_TYPE_Q3_K, SL_GGML_TYPE_IQ4_XS,
                                     SL_GGML_TYPE_Q4_0, SL_GGML_TYPE_Q4_1, SL_GGML_TYPE_Q5_0, SL_GGML_TYPE_Q5_1,
                                     SL_GGML_TYPE_IQ4_NL, SL_GGML_TYPE_MXFP4};
    for (uint32_t ty : types)
        bad += check_ffn(out, st, ty, 37, 16, 4, 256, 256);
    /* down rows of 4,352: a row shared by two warps (mmv.cu's warps_per_row); ~10 pairs an expert: two passes */
    bad += check_ffn(out, st, SL_GGML_TYPE_Q4_K, 19, 4, 2, 256, 4352);
    bad += check_ffn(out, st, SL_GGML_TYPE_Q8_0, 19, 4, 2, 256, 4352);
    /* gpt-oss: its routing, and its FFN over MXFP4 (its files' type) and Q8_0 experts */
    bad += check_route_topk(out, st, 64, 32, 4, false, false);    /* gpt-oss-20b's */
    bad += check_route_topk(out, st, 64, 128, 4, true, false);    /* gpt-oss-120b's, tied logits */
    bad += check_route_topk(out, st, 9, 40, 5, false, true);      /* NaN logits */
    bad += check_route_topk(out, st, 5, 512, 32, true, false);    /* the limits */
    bad += check_route_topk(out, st, 2048, 32, 4, false, false);  /* a long prefill step */
    bad += check_ffn(out, st, SL_GGML_TYPE_MXFP4, 37, 16, 4, 256, 256, true);
    bad += check_ffn(out, st, SL_GGML_TYPE_Q8_0, 37, 16, 4, 256, 256, true);
    bad += check_ffn(out, st, SL_GGML_TYPE_MXFP4, 19, 4, 2, 2880, 256, true);   /* gate/up rows of gpt-oss-20b's 2,880 */
    bad += check_route(out, st, 1, 128, 8, true, false);      /* one decode row: routing and grouping fused */
    bad += check_route(out, st, 16, 128, 8, true, true);      /* the most rows the fused block takes */
    bad += check_route(out, st, 3, 512, 32, true, true);      /* fused, at the limits */
    bad += check_route_topk(out, st, 1, 32, 4, false, false); /* gpt-oss, fused */
    bad += check_route_topk(out, st, 16, 128, 4, true, false);
    bad += st_moe_router(out, st);    /* the float32 router: float64, rows alone, scalar loads */
    bad += st_moe_combine(out, st);   /* the combine: the one-block-per-row kernel's bits */
    bad += check_stage(out, st);   /* staged activation rows: the global path's bits */
    bad += st_moe_step_timing(out, st);
    bad += st_moe_gemm(out, st);      /* the tensor-core experts against the small-batch ones */
    cudaStreamDestroy(st);
    return bad;
}
