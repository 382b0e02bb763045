/* kernels/cuda/selftest_mmvq.cu: the integer small-batch matmul (mmvq.cuh)
 * against host references on the GPU machine, through the exported
 * sl_cuda_selftest_mmvq() (tools/cudacheck --ops, after the other
 * self-tests). Per weight type (Q4_K, Q5_K, Q6_K, Q8_0) and row length
 * (one, two and four warps a row):
 *   - the device quantizer's codes, scales and block sums against the CPU
 *     backend's sl_act_quantize_row, bit for bit (a row with ties of
 *     magnitude of both signs, a zero block and an inf block included);
 *   - the result against float64 of the same quantized activations (1e-5 of
 *     the sum of |terms|), against the CPU's sl_vec_dot_q8_multi_portable on
 *     its own codes (the same bound), and against float64 of the float
 *     activations within the activations' rounding (half a step per
 *     element; Q8_0 adds its fp16 scale);
 *   - T in {1,2,3,5,8,13}: the first T rows and each row alone give the
 *     bits of the 13-row batch; the q/k/v launch and the gate+up+SwiGLU
 *     launch give the bits of single launches and sl_cuda_swiglu.
 * Then one timing line per type at T=1 for 4096x4096 and 14336x4096
 * (rows x row length): the float kernel (sl_cuda_mmv) against the integer
 * path (quantize + sl_cuda_mmvq, and the matmul alone), in us a call and
 * GB/s of weights, to decide the default of SLUICE_CUDA_MMVQ.
 * tools/mmvq-emulate runs the same checks on the host without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/eltwise.cuh"
#include "kernels/cuda/mmv.cuh"
#include "kernels/cuda/mmvq.cuh"
#include "kernels/cuda/selftest_util.cuh"

#define _Static_assert static_assert   /* act_quant.h's C11 size checks, read as C++ */
extern "C" {
#include "kernels/cpu/act_quant.h"   /* compiled into the library for this check */
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
}
#undef _Static_assert

#define OK(call) CK((call) == SL_OK ? cudaSuccess : cudaErrorUnknown)

enum { T_MAX = 13 };

/* Host copies of the check's buffers (freed together). */
struct host_bufs {
    void *p[16];
    int n;
    void *alloc(size_t bytes)
    {
        void *q = calloc(1, bytes);
        p[n++] = q;
        return q;
    }
    ~host_bufs()
    {
        for (int i = 0; i < n; i++)
            free(p[i]);
    }
};

struct dev_bufs {
    void *p[16];
    int n;
    void *alloc(size_t bytes)
    {
        void *q = NULL;
        if (cudaMalloc(&q, bytes) != cudaSuccess)
            q = NULL;
        p[n++] = q;
        return q;
    }
    ~dev_bufs()
    {
        for (int i = 0; i < n; i++)
            cudaFree(p[i]);
    }
};

/* The quantizer, the accuracy, batch invariance and the fused launches for
 * `rows` random rows of n elements. Returns 1 on a failure. */
static int check_type(FILE *out, cudaStream_t st, uint32_t type, int64_t n, int64_t rows)
{
    int bad = 0;
    uint64_t seed = 91 + type * 7 + (uint64_t)n;
    const int64_t T = T_MAX;
    int fmt = sl_cuda_q8_format(type), bn = fmt == SL_CUDA_Q8_K ? 256 : 32;
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n), ldq = sl_cuda_q8_row_bytes(n);
    enum sl_act_format cf = fmt == SL_CUDA_Q8_K ? SL_ACT_Q8_K : SL_ACT_Q8_0;
    size_t cb = sl_act_row_bytes(cf, n), ybytes = (size_t)(T * rows) * 4;
    host_bufs h = {};
    dev_bufs d = {};
    uint8_t *w = (uint8_t *)h.alloc(2 * rb * rows), *xq = (uint8_t *)h.alloc(T * ldq), *cx = (uint8_t *)h.alloc(T * cb);
    float *wf = (float *)h.alloc((size_t)(rows * n) * 4), *x = (float *)h.alloc((size_t)(T * n) * 4);
    float *tmp = (float *)h.alloc((size_t)n * 4), *cpu = (float *)h.alloc(T * 4);
    float *y = (float *)h.alloc(ybytes), *y2 = (float *)h.alloc(ybytes), *yu = (float *)h.alloc(ybytes);
    uint8_t *dw = (uint8_t *)d.alloc(2 * rb * rows), *dq = (uint8_t *)d.alloc(T * ldq);
    float *dx = (float *)d.alloc((size_t)(T * n) * 4), *dy = (float *)d.alloc(ybytes), *dy2 = (float *)d.alloc(ybytes);
    float *du = (float *)d.alloc(ybytes);
    int qbad = 0, inv = 0, fused = 0;
    double worst_q = 0, worst_cpu = 0, worst_f = 0;
    sl_cuda_weight cw = {type, n, rows, rb, NULL, false, NULL}, cu = cw;
    if (!w || !xq || !cx || !wf || !x || !tmp || !cpu || !y || !y2 || !yu || !dw || !dq || !dx || !dy || !dy2 || !du) {
        fprintf(out, "  mmvq %s: out of memory\n", sl_ggml_type_name(type));
        return 1;
    }
    for (int64_t r = 0; r < 2 * rows; r++) {   /* rows of W, then of U (the up matrix) */
        for (int64_t i = 0; i < n; i++)
            tmp[i] = uniform(&seed) * (1.0f + (float)(i % 7));
        sl_quant_quantize_row(type, tmp, w + r * rb, n);
        if (r < rows)
            sl_quant_dequantize_row(type, w + r * rb, wf + r * n, n);
    }
    for (int64_t i = 0; i < T * n; i++)
        x[i] = uniform(&seed) * (i % 97 == 0 ? 20.0f : 1.0f);
    x[n + 5] = -7.5f;   /* row 1: a tie of magnitude, both signs, then a zero block and an inf block */
    x[n + bn - 3] = 7.5f;
    memset(x + n + bn, 0, (size_t)bn * 4);
    if (3 * bn <= n)
        x[n + 2 * bn + 1] = INFINITY;
    cw.data = dw;
    cu.data = dw + rb * rows;
    CK(cudaMemcpy(dw, w, 2 * rb * rows, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, (size_t)(T * n) * 4, cudaMemcpyHostToDevice));
    OK(sl_cuda_q8_quantize(fmt, dx, n, n, T, dq, st));
    OK(sl_cuda_mmvq(&cw, dq, T, dy, rows, st));
    CK(cudaMemcpyAsync(xq, dq, T * ldq, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(y, dy, ybytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));

    for (int64_t t = 0; t < T; t++) {   /* the codes, bit for bit */
        uint8_t *c = cx + t * cb;
        const uint8_t *row = xq + t * ldq;
        sl_act_quantize_row(cf, x + t * n, c, n);
        for (int64_t b = 0; b < n / bn; b++) {
            const int8_t *qs;
            float cd;
            if (fmt == SL_CUDA_Q8_K) {
                const sl_block_q8_K *k = (const sl_block_q8_K *)c + b;
                qs = k->qs;
                cd = k->d;
                qbad += memcmp((const int16_t *)(row + n + n / 8) + 16 * b, k->bsums, 32) != 0;
            } else {
                qs = ((const sl_block_q8_0 *)c)[b].qs;
                cd = sl_act_q8_0_scales(c, n)[b];
            }
            qbad += memcmp(row + b * bn, qs, (size_t)bn) != 0 || memcmp(row + n + 4 * b, &cd, 4) != 0;
        }
    }
    for (int64_t r = 0; r < rows; r++) {   /* the accuracy */
        sl_vec_dot_q8_multi_portable(type, w + r * rb, cx, cb, (int)T, cpu, n);
        for (int64_t t = 0; t < T; t++) {
            const uint8_t *row = xq + t * ldq;
            double sq = 0, aq = 0, sf = 0, af = 0, qb = 0;
            for (int64_t i = 0; i < n; i++) {
                double wv = wf[r * n + i], da = ((const float *)(row + n))[i / bn];
                double xa = da * (int8_t)row[i], xf = x[t * n + i];
                sq += wv * xa;
                aq += fabs(wv * xa);
                sf += wv * xf;
                af += fabs(wv * xf);
                qb += fabs(wv * da) * (fmt == SL_CUDA_Q8_K ? 0.51 : 0.6);
            }
            double v = y[t * rows + r];
            worst_q = fmax(worst_q, fabs(v - sq) / (aq + 1e-30));
            worst_cpu = fmax(worst_cpu, fabs(v - cpu[t]) / (aq + 1e-30));
            if (isfinite(sf))   /* row 1's inf block */
                worst_f = fmax(worst_f, fabs(v - sf) / (qb + 1e-5 * af + 1e-30));
        }
    }
    for (int64_t tt : {1, 2, 3, 5, 8}) {   /* batch invariance */
        OK(sl_cuda_mmvq(&cw, dq, tt, dy2, rows, st));
        CK(cudaMemcpyAsync(y2, dy2, (size_t)(tt * rows) * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        inv += memcmp(y2, y, (size_t)(tt * rows) * 4) != 0;
    }
    for (int64_t t = 0; t < T; t++) {
        OK(sl_cuda_mmvq(&cw, dq + t * ldq, 1, dy2, rows, st));
        CK(cudaMemcpyAsync(y2, dy2, (size_t)rows * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        inv += memcmp(y2, y + t * rows, (size_t)rows * 4) != 0;
    }
    {   /* q/k/v: W's rows in three segments; gate+up+SwiGLU against two launches */
        int64_t a = rows / 2, b = rows / 2 + rows / 4;
        sl_cuda_weight s3[3] = {cw, cw, cw};
        int64_t at[4] = {0, a, b, rows};
        const sl_cuda_weight *p3[3] = {&s3[0], &s3[1], &s3[2]};
        float *y3[3];
        int64_t ld3[3] = {rows, rows, rows};
        for (int i = 0; i < 3; i++) {
            s3[i].data = dw + at[i] * rb;
            s3[i].ne1 = at[i + 1] - at[i];
            y3[i] = dy2 + at[i];
        }
        OK(sl_cuda_mmvq_multi(p3, y3, ld3, 3, dq, T, st));
        CK(cudaMemcpyAsync(y2, dy2, ybytes, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        fused += memcmp(y2, y, ybytes) != 0;
        OK(sl_cuda_mmvq(&cu, dq, T, du, rows, st));
        CK(cudaMemcpyAsync(dy2, dy, ybytes, cudaMemcpyDeviceToDevice, st));
        OK(sl_cuda_swiglu(dy2, du, T * rows, st));
        OK(sl_cuda_mmvq_swiglu(&cw, &cu, dq, T, du, rows, st));
        CK(cudaMemcpyAsync(y2, dy2, ybytes, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(yu, du, ybytes, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        fused += memcmp(y2, yu, ybytes) != 0;
    }
    bad = qbad != 0 || worst_q > 1e-5 || worst_cpu > 1e-5 || worst_f > 1.0 || inv != 0 || fused != 0;
    fprintf(out,
            "  mmvq %-4s n=%lld rows=%lld: codes %s, vs same codes %.1e, vs cpu %.1e, vs float %.2f of bound, "
            "T-invariant %s, fused %s  %s\n",
            sl_ggml_type_name(type), (long long)n, (long long)rows, qbad ? "DIFFER" : "exact", worst_q, worst_cpu,
            worst_f, inv ? "NO" : "yes", fused ? "NO" : "yes", bad ? "FAIL" : "ok");
done:
    return bad;
}

/* us per call of `f` over `iters` calls after a warm-up, timed by events */
template <class F>
static float time_us(cudaStream_t st, int iters, F f)
{
    cudaEvent_t a, b;
    float ms = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess)
        return -1.0f;
    for (int i = 0; i < 10; i++)
        f();
    cudaEventRecord(a, st);
    for (int i = 0; i < iters; i++)
        f();
    cudaEventRecord(b, st);
    if (cudaEventSynchronize(b) == cudaSuccess && cudaGetLastError() == cudaSuccess)
        cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms < 0 ? -1.0f : ms * 1000.0f / (float)iters;
}

/* One line: T=1, rows x n, float kernel against the integer path. */
static int time_type(FILE *out, cudaStream_t st, uint32_t type, int64_t rows, int64_t n)
{
    int bad = 0;
    uint64_t seed = 5 + type;
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n), wbytes = rb * (size_t)rows;
    dev_bufs d = {};
    uint8_t *dw = (uint8_t *)d.alloc(wbytes), *dq = (uint8_t *)d.alloc(sl_cuda_q8_row_bytes(n));
    float *dx = (float *)d.alloc((size_t)n * 4), *dy = (float *)d.alloc((size_t)rows * 4);
    uint8_t *w = (uint8_t *)malloc(wbytes);
    float *x = (float *)malloc((size_t)n * 4);
    sl_cuda_weight cw = {type, n, rows, rb, dw, false, NULL};
    int fmt = sl_cuda_q8_format(type);
    float tf, tq, tm;
    double gb = (double)wbytes * 1e-3;   /* bytes / us -> GB/s */
    if (!dw || !dq || !dx || !dy || !w || !x) {
        fprintf(out, "  mmvq timing %s: out of memory\n", sl_ggml_type_name(type));
        bad = 1;
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = uniform(&seed);
    for (int64_t r = 0; r < rows; r++)   /* one quantized row repeated: the bytes, not their values, set the time */
        sl_quant_quantize_row(type, x, w + r * rb, n);
    CK(cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, (size_t)n * 4, cudaMemcpyHostToDevice));
    tf = time_us(st, 200, [&] { sl_cuda_mmv(&cw, dx, n, 1, dy, rows, st); });
    tq = time_us(st, 200, [&] {
        sl_cuda_q8_quantize(fmt, dx, n, n, 1, dq, st);
        sl_cuda_mmvq(&cw, dq, 1, dy, rows, st);
    });
    tm = time_us(st, 200, [&] { sl_cuda_mmvq(&cw, dq, 1, dy, rows, st); });
    bad = tf < 0 || tq < 0 || tm < 0;
    fprintf(out,
            "  mmvq timing %-4s %lldx%lld T=1: float %.1f us (%.0f GB/s), integer %.1f us with its quantize, "
            "%.1f us matmul alone (%.0f GB/s)  %s\n",
            sl_ggml_type_name(type), (long long)rows, (long long)n, tf, gb / tf, tq, tm, gb / tm, bad ? "FAIL" : "ok");
done:
    free(w);
    free(x);
    return bad;
}

/* Runs every check, one line each to `out`. Returns the number that failed,
 * or -1 when there is no usable device. */
extern "C" __attribute__((visibility("default"))) int sl_cuda_selftest_mmvq(FILE *out)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || cudaSetDevice(0) != cudaSuccess) {
        fprintf(out, "  no usable CUDA device\n");
        return -1;
    }
    cudaStream_t st;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
        return -1;
    int fails = 0;
    const uint32_t types[] = {SL_GGML_TYPE_Q4_K, SL_GGML_TYPE_Q5_K, SL_GGML_TYPE_Q6_K, SL_GGML_TYPE_Q8_0};
    for (uint32_t type : types)
        for (int64_t n : {768, 4352, 8448})   /* one, two and four warps a row */
            fails += check_type(out, st, type, n, 67);
    fails += check_type(out, st, SL_GGML_TYPE_Q8_0, 352, 9);   /* a Q8_0 row that ends mid-step */
    for (uint32_t type : types) {
        fails += time_type(out, st, type, 4096, 4096);
        fails += time_type(out, st, type, 14336, 4096);
    }
    cudaStreamDestroy(st);
    return fails;
}
