/* kernels/cuda/selftest_kv.cu: the K/V writer for each storage type
 * (paged.cuh), checked on the GPU machine through the exported
 * sl_cuda_selftest_kv() (tools/cudacheck --ops, after the attention
 * checks): sl_cuda_qkv_post writes 40 rows of k and v over a shuffled block
 * table, and every stored row must be byte for byte what model/quant.c
 * encodes from the same floats (f16: the host's round to nearest even,
 * ties, subnormals and overflow included; q8_0: its scale and codes), each
 * dequantized q8_0 value within half a step of its input (d/2, plus
 * |q| * |d - half(d)| for the scale's own rounding), and the rows not
 * written untouched. Then the shapes the kernels refuse: q8_0 at a head_dim
 * that is not a multiple of 32, and an unresolved (AUTO) type.
 * Kept apart from selftest.cu so each file has one subject. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/qkv_post.cuh"
#include "kernels/cuda/selftest_kv.cuh"

enum { BS = 16, NB = 5, T = 40, NH = 2, NKV = 2 };

static float uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Row values: groups of 32 at scales 1e-3 .. 1e3, an all-zero group, and in
 * the first row float16's edge cases (ties either way, the largest finite,
 * overflow, subnormals, values that round to zero), finite ones only for
 * q8_0, whose scale an infinity would break. */
static void fill(float *x, int64_t n_rows, int hd, sl_kv_type kt, uint64_t *seed)
{
    static const float edges[] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, -(2.0f + 0x1p-10f), 65504.0f, 65519.0f,
                                  65520.0f, -70000.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 3e-5f, -0.0f};
    for (int64_t r = 0; r < n_rows; r++)
        for (int i = 0; i < hd; i++) {
            int g = (int)((r * hd + i) / 32);
            float scale = g % 8 == 5 ? 0.0f : powf(10.0f, (float)(g % 7 - 3));
            x[r * hd + i] = uniform(seed) * scale;
        }
    int n_edges = (int)(sizeof edges / sizeof edges[0]);
    for (int i = 0; kt == SL_KV_TYPE_F16 && i < n_edges && i < hd; i++)
        x[i] = edges[i];
}

static int check_writer(FILE *out, cudaStream_t st, sl_kv_type kt, int HD)
{
    const int64_t rb = sl_kv_row_bytes(kt, HD), rows = 2 * (int64_t)NB * NKV * BS;   /* one layer */
    const int64_t nq = (int64_t)T * NH * HD, nk = (int64_t)T * NKV * HD;
    const size_t cache_bytes = (size_t)(rows * rb);
    uint32_t g = st_kv_ggml_type(kt);
    uint64_t seed = 77 + (uint64_t)HD;
    float *k = (float *)malloc((size_t)nk * 4), *v = (float *)malloc((size_t)nk * 4), *deq = (float *)malloc((size_t)HD * 4);
    uint8_t *cache = (uint8_t *)malloc(cache_bytes), *want = (uint8_t *)malloc((size_t)rb);
    uint8_t *written = (uint8_t *)calloc((size_t)rows, 1);
    uint8_t *dcache = NULL;
    float *dq = NULL, *dk = NULL, *dv = NULL;
    int32_t *dmeta = NULL, meta[2 * T + NB];
    int bad = 1, byte_diff = 0, stray = 0;
    double worst = 0;   /* q8_0: |x - d q| over its bound, at most 1 */
    if (!k || !v || !deq || !cache || !want || !written || cudaMalloc((void **)&dcache, cache_bytes) != cudaSuccess ||
        cudaMalloc((void **)&dq, (size_t)nq * 4) != cudaSuccess || cudaMalloc((void **)&dk, (size_t)nk * 4) != cudaSuccess ||
        cudaMalloc((void **)&dv, (size_t)nk * 4) != cudaSuccess || cudaMalloc((void **)&dmeta, sizeof meta) != cudaSuccess) {
        fprintf(out, "  kv writer %s: could not allocate  FAIL\n", st_kv_name(kt));
        goto done;
    }
    {
        fill(k, (int64_t)T * NKV, HD, kt, &seed);
        fill(v, (int64_t)T * NKV, HD, kt, &seed);
        static const int32_t table[] = {3, 0, 4};   /* blocks of positions 0-15, 16-31, 32-39 */
        int32_t *pos = meta, *tab = meta + T, *blocks = meta + 2 * T;
        memcpy(blocks, table, sizeof table);
        for (int t = 0; t < T; t++) {
            pos[t] = t;
            tab[t] = 0;
        }
        if (cudaMemset(dq, 0, (size_t)nq * 4) != cudaSuccess || cudaMemset(dcache, 0, cache_bytes) != cudaSuccess ||
            cudaMemcpy(dk, k, (size_t)nk * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(dv, v, (size_t)nk * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(dmeta, meta, sizeof meta, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(out, "  kv writer %s: upload failed  FAIL\n", st_kv_name(kt));
            goto done;
        }
        /* no biases, norms or rope (n_rot 0): k and v go to the cache as given */
        sl_cuda_qkv_params p;
        memset(&p, 0, sizeof p);
        p.freq_scale = 1.0;
        p.mscale = 1.0;
        p.n_head = NH;
        p.eps = 1e-6f;
        sl_cuda_kv ckv = {dcache, NB, BS, NKV, HD, kt};
        sl_cuda_batch cb = {dmeta, dmeta + T, dmeta + 2 * T};
        if (sl_cuda_qkv_post(dq, dk, dv, T, &p, &ckv, &cb, 0, st) < 0 ||
            cudaMemcpyAsync(cache, dcache, cache_bytes, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
            cudaStreamSynchronize(st) != cudaSuccess) {
            fprintf(out, "  kv writer %s: launch or copy failed  FAIL\n", st_kv_name(kt));
            goto done;
        }
        for (int is_v = 0; is_v < 2; is_v++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NKV; h++) {
                    int64_t row = ((int64_t)is_v * NB + table[t / BS]) * NKV * BS + (int64_t)h * BS + t % BS;
                    const float *x = (is_v ? v : k) + ((int64_t)t * NKV + h) * HD;
                    const uint8_t *got = cache + row * rb;
                    written[row] = 1;
                    if (sl_quant_quantize_row(g, x, want, HD) != SL_OK) {
                        byte_diff++;
                        continue;
                    }
                    byte_diff += memcmp(got, want, (size_t)rb) != 0;
                    if (kt != SL_KV_TYPE_Q8_0 || sl_quant_dequantize_row(g, got, deq, HD) != SL_OK)
                        continue;
                    for (int i = 0; i < HD; i++) {
                        float amax = 0.0f;
                        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
                            amax = fmaxf(amax, fabsf(x[j]));
                        double d = (double)(amax / 127.0f);
                        double dh = (double)sl_fp16_to_fp32(*(const uint16_t *)(got + i / 32 * SL_KV_Q8_0_BYTES));
                        int q = ((const int8_t *)got)[i / 32 * SL_KV_Q8_0_BYTES + 2 + i % 32];
                        double bound = d / 2 + fabs((double)q) * fabs(d - dh), err = fabs((double)deq[i] - x[i]);
                        double r = bound > 0 ? err / bound : err > 0 ? INFINITY : 0;
                        worst = r > worst ? r : worst;
                    }
                }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; !written[r] && i < rb; i++)
                stray += cache[r * rb + i] != 0;
        bad = byte_diff != 0 || stray != 0 || !(worst <= 1.0 + 1e-6);
        fprintf(out, "  kv writer %s, head_dim %d, %d rows x %d kv heads: stored bytes %s model/quant.c's (%d rows "
                "differ)%s, rows not written %s", st_kv_name(kt), HD, T, NKV, byte_diff ? "DIFFER from" : "equal to",
                byte_diff, kt == SL_KV_TYPE_F16 ? " incl. ties, subnormals, overflow" : "",
                stray ? "CHANGED" : "untouched");
        if (kt == SL_KV_TYPE_Q8_0)
            fprintf(out, ", |x - d q| at most %.3f of its bound d/2 + |q| |d - half(d)|", worst);
        fprintf(out, "  %s\n", bad ? "FAIL" : "ok");
    }
done:
    cudaFree(dcache);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dmeta);
    free(k);
    free(v);
    free(deq);
    free(cache);
    free(want);
    free(written);
    return bad;
}

/* The kernels refuse a cache they cannot read: SL_EINVAL before any launch
 * (no device memory is touched, so NULL pointers are fine). */
static int check_refused(FILE *out, cudaStream_t st)
{
    sl_cuda_qkv_params p;
    memset(&p, 0, sizeof p);
    p.n_head = 2;
    int32_t dummy[1] = {0};
    sl_cuda_batch cb = {dummy, dummy, dummy};
    struct {
        sl_kv_type t;
        int hd;
    } cases[] = {{SL_KV_TYPE_Q8_0, 48}, {SL_KV_TYPE_Q8_0, 100}, {SL_KV_TYPE_AUTO, 64}, {(sl_kv_type)9, 64}};
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_cuda_kv ckv = {NULL, 1, BS, 1, cases[i].hd, cases[i].t};
        bad += sl_cuda_qkv_post(NULL, NULL, NULL, 1, &p, &ckv, &cb, 0, st) != SL_EINVAL;
        bad += sl_cuda_attention(NULL, NULL, 1, 2, &ckv, &cb, 0, 1, NULL, 0, st) != SL_EINVAL;
    }
    fprintf(out, "  kv types refused (q8_0 at head_dim 48 and 100, auto, out of range) by the writer and attention: "
            "%s  %s\n", bad ? "NOT all" : "all SL_EINVAL", bad ? "FAIL" : "ok");
    return bad != 0;
}

/* Runs every check, one line each to `out`. Returns the number that failed,
 * or -1 when there is no usable device. */
extern "C" __attribute__((visibility("default"))) int sl_cuda_selftest_kv(FILE *out)
{
    int n_dev = 0;
    cudaStream_t st;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreate(&st) != cudaSuccess)
        return -1;
    int bad = 0;
    for (sl_kv_type kt : {SL_KV_TYPE_F32, SL_KV_TYPE_F16, SL_KV_TYPE_Q8_0})
        for (int hd : {64, 128, 96})
            bad += check_writer(out, st, kt, hd);
    bad += check_refused(out, st);
    cudaStreamDestroy(st);
    return bad;
}
