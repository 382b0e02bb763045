/* tools/mmvq-emulate/emulate.cpp: runs the integer small-batch matmul's
 * own source (kernels/cuda/mmvq.cu up to its host launchers, cut out by
 * run.sh) on the host through mock.h and checks it as
 * kernels/cuda/selftest_mmvq.cu does on the GPU:
 *   - the quantizer's codes, scales and block sums against the CPU
 *     backend's sl_act_quantize_row, bit for bit (ties of magnitude with
 *     both signs, zero, NaN and inf blocks, a Q8_0 row that ends mid-warp);
 *   - per weight type (Q4_K, Q5_K, Q6_K, Q8_0) and row length (one, two and
 *     four warps a row): the result against a float64 dot of the same
 *     quantized activations (1e-5 of the sum of |terms|), against the CPU's
 *     sl_vec_dot_q8_multi_portable on the same codes (the same bound), and
 *     against float64 of the float activations within the rounding of the
 *     activations; T in {1,2,3,5,8,13} and each row alone giving the bits
 *     of the 13-row batch; the q/k/v launch and the gate+up+SwiGLU launch
 *     giving the bits of single launches.
 * Prints one line per case; exit 0 when all pass. */
#include "mock.h"

#include <functional>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define _Static_assert static_assert   /* the C headers' size checks, in C++ */
extern "C" {
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"
}

thread_local uint3 threadIdx, blockIdx;
pthread_barrier_t emu_block_bar, emu_warp_bar[EMU_MAX_WARPS];
uint64_t emu_xchg[EMU_MAX_WARPS][32];
float4 emu_dyn_shared[EMU_DYN_SHARED_BYTES / 16];

#include "mmvq_kernels.inc"   /* kernels/cuda/mmvq.cu up to the launchers */

struct emu_thread {
    const std::function<void()> *body;
    unsigned tid, gx, gy;
};

static pthread_barrier_t emu_next_block;   /* every thread of the launch, between blocks */

static void *emu_main(void *p)
{
    emu_thread *e = (emu_thread *)p;
    threadIdx = make_uint3(e->tid, 0, 0);
    for (unsigned by = 0; by < e->gy; by++)
        for (unsigned bx = 0; bx < e->gx; bx++) {
            blockIdx = make_uint3(bx, by, 0);
            (*e->body)();
            pthread_barrier_wait(&emu_next_block);
        }
    return NULL;
}

/* the grid (gx, gy) of blocks of `threads` threads, one block at a time */
static void emu_launch(unsigned gx, unsigned gy, int threads, const std::function<void()> &body)
{
    pthread_barrier_init(&emu_block_bar, NULL, (unsigned)threads);
    pthread_barrier_init(&emu_next_block, NULL, (unsigned)threads);
    for (int w = 0; w < threads / 32; w++)
        pthread_barrier_init(&emu_warp_bar[w], NULL, 32);
    std::vector<pthread_t> th((size_t)threads);
    std::vector<emu_thread> et((size_t)threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    for (int i = 0; i < threads; i++) {
        et[i] = {&body, (unsigned)i, gx, gy};
        if (pthread_create(&th[i], &attr, emu_main, &et[i]) != 0) {
            fprintf(stderr, "mmvq-emulate: pthread_create failed\n");
            exit(2);
        }
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&attr);
    pthread_barrier_destroy(&emu_block_bar);
    pthread_barrier_destroy(&emu_next_block);
    for (int w = 0; w < threads / 32; w++)
        pthread_barrier_destroy(&emu_warp_bar[w]);
}

static uint64_t rng = 12345;
static float uniform()
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* 16-byte aligned bytes */
struct abuf {
    std::vector<float4> v;
    explicit abuf(size_t bytes) : v((bytes + 15) / 16) { memset(v.data(), 0, v.size() * 16); }
    uint8_t *p() { return (uint8_t *)v.data(); }
};

/* sl_cuda_q8_quantize's launch, through the emulator */
static void quantize_dev(int fmt, const float *x, int64_t ldx, int n, int T, uint8_t *xq)
{
    int64_t chunks = (n + 255) / 256, ldq = (int64_t)sl_cuda_q8_row_bytes(n);
    unsigned gx = (unsigned)((chunks + WARPS - 1) / WARPS);
    if (fmt == SL_CUDA_Q8_K)
        emu_launch(gx, (unsigned)T, WARPS * SL_WARP, [&] { q8_quantize_rows<true>(x, ldx, n, xq, ldq); });
    else
        emu_launch(gx, (unsigned)T, WARPS * SL_WARP, [&] { q8_quantize_rows<false>(x, ldx, n, xq, ldq); });
}

/* mmvq.cu's launch rule (pass size from T, warps per row from n) */
template <int TYPE, bool PAIR, int WPR>
static void mmvq_nt(const mmvq_segs &sg, size_t rb, int n, const uint8_t *xq, int T, int64_t rows)
{
    int nt = T >= 8 ? 8 : T >= 4 ? 4 : T >= 2 ? 2 : 1;
    int64_t ldq = (int64_t)sl_cuda_q8_row_bytes(n);
    unsigned gx = (unsigned)((rows + WARPS / WPR - 1) / (WARPS / WPR)), gy = (unsigned)((T + nt - 1) / nt);
    std::function<void()> f;
    switch (nt) {
    case 1: f = [&] { mmvq_warp_per_row<TYPE, 1, PAIR, WPR>(sg, rb, n, xq, ldq, T); }; break;
    case 2: f = [&] { mmvq_warp_per_row<TYPE, 2, PAIR, WPR>(sg, rb, n, xq, ldq, T); }; break;
    case 4: f = [&] { mmvq_warp_per_row<TYPE, 4, PAIR, WPR>(sg, rb, n, xq, ldq, T); }; break;
    default: f = [&] { mmvq_warp_per_row<TYPE, 8, PAIR, WPR>(sg, rb, n, xq, ldq, T); }; break;
    }
    emu_launch(gx, gy, WARPS * SL_WARP, f);
}

template <int TYPE>
static void mmvq_dev(const mmvq_segs &sg, bool pair, size_t rb, int n, const uint8_t *xq, int T)
{
    int64_t rows = 0;
    for (int i = 0; i < (pair ? 1 : sg.n_seg); i++)
        rows += sg.rows[i];
#define W(P, R) mmvq_nt<TYPE, P, R>(sg, rb, n, xq, T, rows)
    switch (warps_per_row(n)) {
    case 1: pair ? W(true, 1) : W(false, 1); break;
    case 2: pair ? W(true, 2) : W(false, 2); break;
    default: pair ? W(true, 4) : W(false, 4); break;
    }
#undef W
}

static int failures = 0;

static void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures += !ok;
}

/* The quantizer against the CPU's, bit for bit, on T rows of n. */
static void check_quant(int fmt, int n, int T)
{
    int64_t ldx = n + 4, ldq = (int64_t)sl_cuda_q8_row_bytes(n);
    std::vector<float> x((size_t)(T * ldx));
    for (auto &v : x)
        v = uniform() * 3.0f;
    int bn = fmt == SL_CUDA_Q8_K ? 256 : 32;
    if (T > 1) {   /* row 1: block 0 ties +-a in two lanes, block 1 zeros, block 2 a NaN, block 3 an inf */
        float *r = &x[(size_t)ldx];
        r[5] = -7.5f;
        r[bn - 3] = 7.5f;
        for (int i = 0; i < bn && bn + i < n; i++)
            r[bn + i] = 0.0f;
        if (3 * bn < n)
            r[2 * bn + 9] = NAN;
        if (4 * bn <= n)
            r[3 * bn + 1] = INFINITY;
    }
    if (T > 2)   /* row 2: tiny values; block 1 subnormal, where -127/v overflows to -inf */
        for (int i = 0; i < n; i++)
            x[(size_t)(2 * ldx + i)] *= i >= bn && i < 2 * bn ? 1e-39f : 1e-30f;
    abuf dq((size_t)(T * ldq));
    quantize_dev(fmt, x.data(), ldx, n, T, dq.p());
    enum sl_act_format cf = fmt == SL_CUDA_Q8_K ? SL_ACT_Q8_K : SL_ACT_Q8_0;
    std::vector<uint8_t> cq(sl_act_row_bytes(cf, n));
    int bad = 0;
    for (int t = 0; t < T; t++) {
        sl_act_quantize_row(cf, &x[(size_t)(t * ldx)], cq.data(), n);
        const uint8_t *row = dq.p() + t * ldq;
        for (int b = 0; b < n / bn; b++) {
            const int8_t *cqs;
            float cd;
            if (fmt == SL_CUDA_Q8_K) {
                const sl_block_q8_K *k = (const sl_block_q8_K *)cq.data() + b;
                cqs = k->qs;
                cd = k->d;
                for (int s = 0; s < 16; s++)
                    bad += ((const int16_t *)(row + n + n / 8))[16 * b + s] != k->bsums[s];
            } else {
                cqs = ((const sl_block_q8_0 *)cq.data())[b].qs;
                cd = sl_act_q8_0_scales(cq.data(), n)[b];
            }
            bad += memcmp(row + b * bn, cqs, (size_t)bn) != 0;
            bad += memcmp(row + n + 4 * b, &cd, 4) != 0;
        }
    }
    report(bad == 0, "quantize %s n=%d T=%d: codes, scales%s as act_quant.c (%d mismatches)",
           fmt == SL_CUDA_Q8_K ? "Q8_K" : "Q8_0", n, T, fmt == SL_CUDA_Q8_K ? ", block sums" : "", bad);
}

static float swiglu_ref(float o, float u) { return __fmul_rn(__fdiv_rn(o, __fadd_rn(1.0f, expf(-o))), u); }

template <int TYPE>
static void check_dot(const char *name, int n, int rows)
{
    const int T = 13;
    int fmt = sl_cuda_q8_format(TYPE);
    size_t rb = sl_ggml_row_bytes(TYPE, (uint64_t)n);
    int64_t ldq = (int64_t)sl_cuda_q8_row_bytes(n);
    abuf W(rb * rows), U(rb * rows);
    std::vector<float> wf((size_t)rows * n), uf((size_t)rows * n), tmp((size_t)n);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < n; i++)
            tmp[i] = uniform() * (1.0f + (float)(i % 7));
        sl_quant_quantize_row(TYPE, tmp.data(), W.p() + r * rb, n);
        sl_quant_dequantize_row(TYPE, W.p() + r * rb, &wf[(size_t)r * n], n);
        for (int i = 0; i < n; i++)
            tmp[i] = uniform();
        sl_quant_quantize_row(TYPE, tmp.data(), U.p() + r * rb, n);
    }
    std::vector<float> x((size_t)T * n);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = uniform() * (i % 97 == 0 ? 20.0f : 1.0f);
    abuf xq((size_t)(T * ldq));
    quantize_dev(fmt, x.data(), n, n, T, xq.p());

    mmvq_segs one = {};
    one.n_seg = 1;
    one.W[0] = W.p();
    one.rows[0] = rows;
    one.ldy[0] = rows;
    std::vector<float> y13((size_t)T * rows);
    one.y[0] = y13.data();
    mmvq_dev<TYPE>(one, false, rb, n, xq.p(), T);

    /* accuracy: float64 on the same codes, the CPU's dot on its own codes, float64 on x */
    enum sl_act_format cf = fmt == SL_CUDA_Q8_K ? SL_ACT_Q8_K : SL_ACT_Q8_0;
    size_t cb = sl_act_row_bytes(cf, n);
    std::vector<uint8_t> cx(cb * T);
    for (int t = 0; t < T; t++)
        sl_act_quantize_row(cf, &x[(size_t)t * n], cx.data() + t * cb, n);
    int bn = fmt == SL_CUDA_Q8_K ? 256 : 32;
    double worst_q = 0, worst_cpu = 0, worst_f = 0;
    std::vector<float> cpu((size_t)T);
    for (int r = 0; r < rows; r++) {
        sl_vec_dot_q8_multi_portable(TYPE, W.p() + r * rb, cx.data(), cb, T, cpu.data(), n);
        for (int t = 0; t < T; t++) {
            const uint8_t *row = xq.p() + t * ldq;
            double sq = 0, aq = 0, sf = 0, af = 0, qbound = 0;
            for (int i = 0; i < n; i++) {
                double w = wf[(size_t)r * n + i], da = ((const float *)(row + n))[i / bn];
                double xa = da * (int8_t)row[i], xf = x[(size_t)t * n + i];
                sq += w * xa;
                aq += fabs(w * xa);
                sf += w * xf;
                af += fabs(w * xf);
                qbound += fabs(w * da) * (fmt == SL_CUDA_Q8_K ? 0.51 : 0.6);   /* half a step; Q8_0: plus fp16(d) */
            }
            double y = y13[(size_t)t * rows + r];
            worst_q = fmax(worst_q, fabs(y - sq) / (aq + 1e-30));
            worst_cpu = fmax(worst_cpu, fabs(y - cpu[t]) / (aq + 1e-30));
            worst_f = fmax(worst_f, fabs(y - sf) / (qbound + 1e-5 * af + 1e-30));
        }
    }
    report(worst_q <= 1e-5, "%s n=%d rows=%d: vs float64 of the same codes, worst %.2e of sum|terms| (bound 1e-5)",
           name, n, rows, worst_q);
    report(worst_cpu <= 1e-5, "%s n=%d: vs the CPU's vec_dot_q8 on its codes, worst %.2e of sum|terms|", name, n,
           worst_cpu);
    report(worst_f <= 1.0, "%s n=%d: vs float64 of the float activations, worst %.2f of the rounding bound", name, n,
           worst_f);

    /* batch invariance: the first T rows, and each row alone */
    int bad = 0;
    const int Ts[] = {1, 2, 3, 5, 8};
    std::vector<float> yt((size_t)T * rows);
    for (int T2 : Ts) {
        one.y[0] = yt.data();
        mmvq_dev<TYPE>(one, false, rb, n, xq.p(), T2);
        bad += memcmp(yt.data(), y13.data(), (size_t)T2 * rows * 4) != 0;
    }
    for (int t = 0; t < T; t++) {
        one.y[0] = yt.data();
        mmvq_dev<TYPE>(one, false, rb, n, xq.p() + t * ldq, 1);
        bad += memcmp(yt.data(), &y13[(size_t)t * rows], (size_t)rows * 4) != 0;
    }
    report(bad == 0, "%s n=%d: T in {1,2,3,5,8} and each row alone give the 13-row bits (%d differ)", name, n, bad);

    /* q/k/v: three segments of W's rows in one launch */
    int a = rows / 2, b = rows / 2 + rows / 4;
    std::vector<float> ym((size_t)T * rows);
    mmvq_segs m3 = {};
    m3.n_seg = 3;
    int starts[4] = {0, a, b, rows};
    for (int s = 0; s < 3; s++) {
        m3.W[s] = W.p() + starts[s] * rb;
        m3.rows[s] = starts[s + 1] - starts[s];
        m3.y[s] = ym.data() + starts[s];
        m3.ldy[s] = rows;
    }
    mmvq_dev<TYPE>(m3, false, rb, n, xq.p(), T);
    report(memcmp(ym.data(), y13.data(), ym.size() * 4) == 0, "%s n=%d: the q/k/v launch gives the single bits", name,
           n);

    /* gate+up+SwiGLU */
    std::vector<float> yu((size_t)T * rows), yp((size_t)T * rows);
    one.W[0] = U.p();
    one.y[0] = yu.data();
    mmvq_dev<TYPE>(one, false, rb, n, xq.p(), T);
    mmvq_segs pr = {};
    pr.n_seg = 2;
    pr.W[0] = W.p();
    pr.W[1] = U.p();
    pr.rows[0] = pr.rows[1] = rows;
    pr.y[0] = pr.y[1] = yp.data();
    pr.ldy[0] = pr.ldy[1] = rows;
    mmvq_dev<TYPE>(pr, true, rb, n, xq.p(), T);
    bad = 0;
    for (size_t i = 0; i < yp.size(); i++) {
        float e = swiglu_ref(y13[i], yu[i]);
        bad += memcmp(&e, &yp[i], 4) != 0;
    }
    report(bad == 0, "%s n=%d: the gate+up+SwiGLU launch gives silu(gate)*up of single launches (%d differ)", name, n,
           bad);
}

int main()
{
    check_quant(SL_CUDA_Q8_K, 1024, 3);
    check_quant(SL_CUDA_Q8_K, 2304, 2);
    check_quant(SL_CUDA_Q8_0, 352, 3);   /* 11 blocks: the last warp's lanes 24-31 hold nothing */
    check_quant(SL_CUDA_Q8_0, 4096, 2);
    const int shapes[][2] = {{768, 20}, {4096, 12}, {8192, 8}};   /* one, two and four warps a row */
    for (auto &s : shapes) {
        check_dot<SL_GGML_TYPE_Q4_K>("Q4_K", s[0], s[1]);
        check_dot<SL_GGML_TYPE_Q5_K>("Q5_K", s[0], s[1]);
        check_dot<SL_GGML_TYPE_Q6_K>("Q6_K", s[0], s[1]);
        check_dot<SL_GGML_TYPE_Q8_0>("Q8_0", s[0], s[1]);
    }
    check_dot<SL_GGML_TYPE_Q8_0>("Q8_0", 352, 9);   /* a row that ends mid-step */
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
