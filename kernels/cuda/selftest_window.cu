/* kernels/cuda/selftest_window.cu: the attention options gemma needs,
 * checked against a float64 host reference on the GPU machine through the
 * exported sl_cuda_selftest_window() (tools/cudacheck --ops, after
 * sl_cuda_selftest): sliding windows (a row sees (p - window, p]), score
 * soft caps and a non-default scale, at head_dim 256 and 128, over a
 * block table in reversed order, with rows whose windowed span is split
 * (window 1,500, rows to position 2,099) and rows whose window is not;
 * each for every K/V type, against the dequantized stored values.
 * Kept apart from selftest.cu so each file has one subject; the trade-off is
 * a second small device set-up per --ops run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/selftest_kv.cuh"

enum { BS = 16, CTX = 2100, NB = (CTX + BS - 1) / BS };

/* positions of the rows: either side of each window edge, and deep in */
static const int32_t ROW_POS[] = {0, 5, 39, 40, 41, 777, 1023, 1024, 1499, 1500, 1501, 2099};
#define T ((int)(sizeof ROW_POS / sizeof ROW_POS[0]))

static float uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) - 0.5f;
}

static double rel_l2(const float *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* float64 attention of row t, head h, over positions (pos - window, pos] */
static void reference_row(const float *kv, const float *q, int HD, int NH, int NKV, const sl_cuda_attn_opts *o,
                          const int32_t *table, int t, int h, double *out, double *sc)
{
    int64_t block_floats = (int64_t)NKV * BS * HD;
    int kvh = h / (NH / NKV), pos = ROW_POS[t];
    int lo = o->window > 0 && pos + 1 > o->window ? pos + 1 - o->window : 0;
    double mx = -1e300, sum = 0;
    for (int p = lo; p <= pos; p++) {
        const float *k = kv + table[p / BS] * block_floats + ((int64_t)kvh * BS + p % BS) * HD;
        double s = 0;
        for (int i = 0; i < HD; i++)
            s += (double)q[((int64_t)t * NH + h) * HD + i] * k[i];
        s *= o->scale;
        if (o->softcap > 0)
            s = o->softcap * tanh(s / o->softcap);
        sc[p] = s;
        mx = s > mx ? s : mx;
    }
    for (int p = lo; p <= pos; p++)
        sum += (sc[p] = exp(sc[p] - mx));
    for (int i = 0; i < HD; i++) {
        double a = 0;
        for (int p = lo; p <= pos; p++)
            a += sc[p] / sum * kv[NB * block_floats + table[p / BS] * block_floats + ((int64_t)kvh * BS + p % BS) * HD + i];
        out[i] = a;
    }
}

static sl_cuda_attn_opts opts(float scale, float softcap, int32_t window)
{
    sl_cuda_attn_opts o = {scale, softcap, window, NULL};
    return o;
}

static int check_case(FILE *out, cudaStream_t st, sl_kv_type kt, int HD, int NH, int NKV, sl_cuda_attn_opts o)
{
    int64_t block_floats = (int64_t)NKV * BS * HD, kv_n = 2 * (int64_t)NB * block_floats;
    size_t kv_bytes = (size_t)(kv_n / HD * sl_kv_row_bytes(kt, HD));
    int64_t qn = (int64_t)T * NH * HD;
    int64_t part_n = sl_cuda_attention_scratch_floats(T, NH, HD, CTX);
    int32_t meta[2 * T + NB];
    float *kv = (float *)malloc((size_t)kv_n * 4), *q = (float *)malloc((size_t)qn * 4);
    float *res = (float *)malloc((size_t)qn * 4);
    uint8_t *kvb = (uint8_t *)malloc(kv_bytes), *dkv = NULL;
    double *ref = (double *)malloc((size_t)qn * sizeof(double)), *sc = (double *)malloc(CTX * sizeof(double));
    float *dq = NULL, *dout = NULL, *dpart = NULL;
    int32_t *dmeta = NULL;
    int bad = 1;
    if (!kv || !q || !res || !kvb || !ref || !sc || cudaMalloc((void **)&dkv, kv_bytes) != cudaSuccess ||
        cudaMalloc((void **)&dq, (size_t)qn * 4) != cudaSuccess ||
        cudaMalloc((void **)&dout, (size_t)qn * 4) != cudaSuccess ||
        cudaMalloc((void **)&dmeta, sizeof meta) != cudaSuccess ||
        (part_n > 0 && cudaMalloc((void **)&dpart, (size_t)part_n * 4) != cudaSuccess))
    {
        fprintf(out, "  attention window check: could not allocate  FAIL\n");
        goto done;
    }
    {
        uint64_t seed = 7;
        for (int64_t i = 0; i < kv_n; i++)
            kv[i] = uniform(&seed);
        if (st_kv_store(kt, kv, kv_n / HD, HD, kvb) < 0) {   /* kv: the values the kernel will read */
            fprintf(out, "  attention window check: %s K/V at head_dim %d refused  FAIL\n", st_kv_name(kt), HD);
            goto done;
        }
        for (int64_t i = 0; i < qn; i++)
            q[i] = uniform(&seed) * 8;   /* peaked scores: the cap and the window both matter */
        int32_t *pos = meta, *tab = meta + T, *blocks = meta + 2 * T;
        for (int b = 0; b < NB; b++)
            blocks[b] = NB - 1 - b;   /* one sequence, its blocks in reversed order */
        for (int t = 0; t < T; t++) {
            pos[t] = ROW_POS[t];
            tab[t] = 0;
        }
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                reference_row(kv, q, HD, NH, NKV, &o, blocks, t, h, ref + ((int64_t)t * NH + h) * HD, sc);
        if (cudaMemcpy(dkv, kvb, kv_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(dq, q, (size_t)qn * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(dmeta, meta, sizeof meta, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(out, "  attention window check: upload failed  FAIL\n");
            goto done;
        }
        sl_cuda_kv ckv = {dkv, NB, BS, NKV, HD, kt};
        sl_cuda_batch cb = {dmeta, dmeta + T, dmeta + 2 * T};
        if (sl_cuda_attention_layer(dout, dq, T, NH, &ckv, &cb, 0, CTX, &o, dpart, part_n, st) < 0 ||
            cudaMemcpyAsync(res, dout, (size_t)qn * 4, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
            cudaStreamSynchronize(st) != cudaSuccess) {
            fprintf(out, "  attention window check: launch or copy failed  FAIL\n");
            goto done;
        }
        double e = rel_l2(res, ref, qn);
        bad = !(e < 1e-5);
        fprintf(out, "  attention %s K/V, head_dim %d, %d/%d heads, window %d, cap %g, scale %g, %d rows to %d: rel L2 "
                "%.2e  %s\n", st_kv_name(kt), HD, NH, NKV, o.window, o.softcap, o.scale, T, CTX - 1, e,
                bad ? "FAIL" : "ok");
    }
done:
    cudaFree(dkv);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dpart);
    cudaFree(dmeta);
    free(kv);
    free(kvb);
    free(q);
    free(res);
    free(ref);
    free(sc);
    return bad;
}

/* Runs every case, one line each to `out`. Returns the number that failed,
 * or -1 when there is no usable device. */
extern "C" __attribute__((visibility("default"))) int sl_cuda_selftest_window(FILE *out)
{
    int n_dev = 0;
    cudaStream_t st;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreate(&st) != cudaSuccess)
        return -1;
    int bad = 0;
    for (sl_kv_type kt : {SL_KV_TYPE_F32, SL_KV_TYPE_F16, SL_KV_TYPE_Q8_0}) {
        /* gemma3-like: one kv head, head_dim 256, a window far below the context */
        bad += check_case(out, st, kt, 256, 4, 1, opts(0.0625f, 0.0f, 40));
        /* gemma2-like: soft cap, and a window past the split size (windowed rows split, offset by their start) */
        bad += check_case(out, st, kt, 256, 4, 1, opts(1.0f / 16.0f, 50.0f, 1500));
        bad += check_case(out, st, kt, 128, 8, 2, opts(0.1f, 30.0f, 1500));
        /* no window, capped: the whole history, split */
        bad += check_case(out, st, kt, 128, 8, 2, opts(1.0f / sqrtf(128.0f), 30.0f, 0));
    }
    cudaStreamDestroy(st);
    return bad;
}
