/* tools/moe-emulate/emulate.cpp: runs the MoE kernels' own source
 * (kernels/cuda/moe.cu up to its launchers, mmv_moe.cu's expert kernel, cut
 * out by run.sh) on the host through mock.h, and checks them as
 * kernels/cuda/selftest_moe.cu does on the GPU: routing and grouping
 * against the CPU's rule (exact ids and pair order, tied logits included),
 * the expert FFN (route, group, fused gate/up, down, combine) against a
 * float64 reference for Q8_0, Q4_K and Q6_K experts, one row alone giving
 * its batched bits (and another pass size), the staged activation rows
 * giving the global path's bits; the fused routing-and-grouping block
 * (steps of up to 16 rows) giving the two kernels' ids, weights and lists
 * bit for bit; the column-spread combine giving the bits of the
 * one-block-per-row kernel's arithmetic (a host copy of it), with and
 * without a shared expert; the float32 router against float64, its rows
 * alone and its scalar loads giving its batched bits; gpt-oss's routing against the CPU's sl_cpu_moe_route_topk_softmax
 * (ids exact with tied and NaN logits) and its expert FFN (MXFP4 and Q8_0
 * experts, expert biases, the clamped SwiGLU taken from the CPU's
 * sl_cpu_swiglu_oai) against the float64 reference. Prints one line per
 * case; exit 0 when all pass. */
#include "mock.h"

#include <functional>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

extern "C" {
#include "kernels/cpu/ops.h"
}

thread_local uint3 threadIdx, blockIdx;
pthread_barrier_t emu_block_bar, emu_warp_bar[EMU_MAX_WARPS];
uint64_t emu_xchg[EMU_MAX_WARPS][32];
float4 emu_dyn_shared[EMU_DYN_SHARED_BYTES / 16];

#include "moe_kernels.inc"       /* kernels/cuda/moe.cu up to the launchers */
#include "mmv_moe_kernel.inc"    /* kernels/cuda/mmv_moe.cu's kernel */

struct emu_thread {
    const std::function<void()> *body;
    unsigned tid, gx, gy;
};

static pthread_barrier_t emu_next_block;   /* every thread of the launch, between blocks */

/* one thread of every block in turn: blocks run one after another */
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

/* the grid (gx, gy) of blocks of `threads` threads: `threads` pthreads for the launch */
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
            fprintf(stderr, "moe-emulate: pthread_create failed\n");
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

/* the CPU backend's own routing (kernels/cpu/ops.c, linked in by run.sh) */
static void route_ref(const float *l, int n, int k, bool norm, int32_t *ids, float *w)
{
    std::vector<float> p((size_t)n);
    sl_cpu_moe_route(l, n, k, norm, p.data(), ids, w);
}

static void route_dev(const float *l, int64_t T, int n, int k, bool norm, int32_t *ids, float *w)
{
    emu_launch((unsigned)((T + ROUTE_ROWS - 1) / ROUTE_ROWS), 1, ROUTE_ROWS * SL_WARP,
               [&] { moe_route_warp_per_row(l, T, n, k, norm, ids, w); });
}

/* gpt-oss's: top-k of the logits, then softmax over the k */
static void route_topk_dev(const float *l, int64_t T, int n, int k, int32_t *ids, float *w)
{
    emu_launch((unsigned)((T + ROUTE_ROWS - 1) / ROUTE_ROWS), 1, ROUTE_ROWS * SL_WARP,
               [&] { moe_route_topk_softmax_warp_per_row(l, T, n, k, ids, w); });
}

static void group_dev(const int32_t *ids, int64_t R, int n, int32_t *off, int32_t *pairs, int32_t *used)
{
    emu_launch(1, 1, GROUP_THREADS, [&] { moe_group_one_block(ids, (int)R, n, off, pairs, used); });
}

/* routing and grouping in one block (T <= FUSE_ROWS), as sl_cuda_moe_route_group launches it */
static void route_group_dev(const float *l, int64_t T, int n, int k, bool topk, bool norm, int32_t *ids, float *w,
                            int32_t *off, int32_t *pairs, int32_t *used)
{
    if (topk)
        emu_launch(1, 1, GROUP_THREADS,
                   [&] { moe_route_group_one_block<true>(l, (int)T, n, k, false, ids, w, off, pairs, used); });
    else
        emu_launch(1, 1, GROUP_THREADS,
                   [&] { moe_route_group_one_block<false>(l, (int)T, n, k, norm, ids, w, off, pairs, used); });
}

/* the fused block against the two kernels' outputs: ids, weights and lists bit for bit */
static bool fused_same(const float *l, int64_t T, int n, int k, bool topk, bool norm, const std::vector<int32_t> &ids,
                       const std::vector<float> &w, const std::vector<int32_t> &off, const std::vector<int32_t> &pairs,
                       const std::vector<int32_t> &used)
{
    int64_t R = T * k;
    std::vector<int32_t> fids((size_t)R, -1), foff((size_t)n + 1, -1), fpairs((size_t)R, -1), fused((size_t)n + 1, 0);
    std::vector<float> fw((size_t)R, -1.0f);
    route_group_dev(l, T, n, k, topk, norm, fids.data(), fw.data(), foff.data(), fpairs.data(), fused.data());
    return fids == ids && memcmp(fw.data(), w.data(), (size_t)R * 4) == 0 && foff == off && fpairs == pairs &&
           fused == used;
}

static int check_route(int64_t T, int n, int k, bool norm, bool coarse)
{
    int64_t R = T * k;
    std::vector<float> l((size_t)(T * n)), w((size_t)R), gw((size_t)R);
    std::vector<int32_t> ids((size_t)R), gids((size_t)R), off((size_t)n + 1), goff((size_t)n + 1), pairs((size_t)R),
        gpairs((size_t)R), used((size_t)n + 1), gused((size_t)n + 1);
    for (auto &v : l)
        v = coarse ? floorf(uniform() * 8.0f) / 4.0f : 4.0f * uniform();
    for (int64_t t = 0; t < T; t++)
        route_ref(&l[t * n], n, k, norm, &ids[t * k], &w[t * k]);
    for (int64_t i = 0; i < R; i++)
        off[ids[i] + 1]++;
    for (int e = 0; e < n; e++) {
        if (off[e + 1] > 0)
            used[1 + used[0]++] = e;
        off[e + 1] += off[e];
    }
    std::vector<int32_t> fill(off.begin(), off.end() - 1);
    for (int64_t i = 0; i < R; i++)
        pairs[fill[ids[i]]++] = (int32_t)i;
    route_dev(l.data(), T, n, k, norm, gids.data(), gw.data());
    group_dev(gids.data(), R, n, goff.data(), gpairs.data(), gused.data());
    double werr = 0;
    for (int64_t i = 0; i < R; i++)
        werr = fmax(werr, fabs((double)gw[i] - w[i]) / (fabs((double)w[i]) + 1e-30));
    bool ids_ok = gids == ids, groups_ok = goff == off && gpairs == pairs && gused == used;
    bool fused_ok = T > FUSE_ROWS || fused_same(l.data(), T, n, k, false, norm, gids, gw, goff, gpairs, gused);
    int bad = !ids_ok || !groups_ok || werr > 1e-6 || !fused_ok;
    printf("route+group T %lld, %d experts, top %d%s%s: ids %s, groups %s, weights max rel err %.1e%s  %s\n",
           (long long)T, n, k, norm ? ", renormalised" : "", coarse ? ", tied logits" : "", ids_ok ? "exact" : "DIFFER",
           groups_ok ? "exact" : "DIFFER", werr,
           T > FUSE_ROWS ? "" : fused_ok ? ", fused block the same bits" : ", fused block DIFFERS", bad ? "FAIL" : "ok");
    return bad;
}

/* gpt-oss's routing against the CPU backend's sl_cpu_moe_route_topk_softmax:
 * ids exact (tied logits: the lower index; NaN logits: below every number),
 * weights to 1e-6. */
static int check_route_topk(int64_t T, int n, int k, bool coarse, bool nans)
{
    int64_t R = T * k;
    std::vector<float> l((size_t)(T * n)), w((size_t)R), gw((size_t)R), tmp((size_t)n);
    std::vector<int32_t> ids((size_t)R), gids((size_t)R);
    for (auto &v : l)
        v = coarse ? floorf(uniform() * 8.0f) / 4.0f : 4.0f * uniform();
    if (nans)   /* a few NaN logits in every row, and one row all NaN but k */
        for (int64_t t = 0; t < T; t++)
            for (int e = 0; e < n; e++)
                if ((e * 7 + t) % 5 == 0 || (t == 1 && e >= k))
                    l[t * n + e] = NAN;
    for (int64_t t = 0; t < T; t++)
        sl_cpu_moe_route_topk_softmax(&l[t * n], n, k, tmp.data(), &ids[t * k], &w[t * k]);
    route_topk_dev(l.data(), T, n, k, gids.data(), gw.data());
    bool fused_ok = true;
    if (T <= FUSE_ROWS) {   /* the fused block: these ids and weights, and the two kernels' grouping of them */
        std::vector<int32_t> off((size_t)n + 1), pairs((size_t)R), used((size_t)n + 1, 0);
        group_dev(gids.data(), R, n, off.data(), pairs.data(), used.data());
        fused_ok = fused_same(l.data(), T, n, k, true, false, gids, gw, off, pairs, used);
    }
    double werr = 0;
    bool wnan = false;
    for (int64_t i = 0; i < R; i++) {
        if (isnan(w[i]) || isnan(gw[i])) {
            wnan = wnan || isnan(w[i]) != isnan(gw[i]);
            continue;
        }
        werr = fmax(werr, fabs((double)gw[i] - w[i]) / (fabs((double)w[i]) + 1e-30));
    }
    bool ids_ok = gids == ids;
    int bad = !ids_ok || wnan || werr > 1e-6 || !fused_ok;
    printf("gpt-oss route T %lld, %d experts, top %d%s%s: ids %s, weights max rel err %.1e%s%s  %s\n", (long long)T, n,
           k, coarse ? ", tied logits" : "", nans ? ", NaN logits" : "", ids_ok ? "exact" : "DIFFER", werr,
           wnan ? ", NaN where the CPU has none" : "",
           T > FUSE_ROWS ? "" : fused_ok ? ", fused block the same bits" : ", fused block DIFFERS", bad ? "FAIL" : "ok");
    return bad;
}

/* STAGE: the activation rows staged in (emulated) dynamic shared memory,
 * as sl_cuda_mmv_experts launches by default; else the global path */
template <int TYPE, int NT, bool PAIR, bool STAGE>
static void experts_dev(const moe_mm &a, int slots)
{
    int wpr = warps_per_row(a.n);
    if (STAGE && (size_t)NT * a.n * 4 > sizeof emu_dyn_shared) {
        fprintf(stderr, "moe-emulate: %d rows of %d floats do not fit the dynamic shared buffer\n", NT, a.n);
        exit(2);
    }
    unsigned gx = (unsigned)((a.rows + moe_rows_per_block(wpr, STAGE) - 1) / moe_rows_per_block(wpr, STAGE));
    std::function<void()> body;
    if (wpr == 1)
        body = [&] { mmv_experts_warp_per_row<TYPE, NT, PAIR, 1, STAGE>(a); };
    else if (wpr == 2)
        body = [&] { mmv_experts_warp_per_row<TYPE, NT, PAIR, 2, STAGE>(a); };
    else
        body = [&] { mmv_experts_warp_per_row<TYPE, NT, PAIR, 4, STAGE>(a); };
    emu_launch(gx, (unsigned)slots, WARPS * SL_WARP, body);
}

struct experts {
    int n, k;
    int64_t E, F;
    size_t rbe, rbf;
    std::vector<uint8_t> qg, qu, qd;   /* (n * F) rows of E, twice; (n * E) rows of F */
    std::vector<float> g, u, d;        /* their dequantization */
    bool oss;                          /* gpt-oss: its routing, the biases below, the clamped SwiGLU */
    std::vector<float> bg, bu, bd;     /* (n, F) twice, (n, E) */
};

static void make(uint32_t type, int64_t rows, int64_t n, std::vector<uint8_t> &q, std::vector<float> &w)
{
    size_t rb = sl_ggml_row_bytes(type, (uint64_t)n);
    q.assign((size_t)rows * rb, 0);
    w.assign((size_t)(rows * n), 0.0f);
    for (auto &v : w)
        v = uniform();
    for (int64_t r = 0; r < rows; r++) {
        sl_quant_quantize_row(type, &w[r * n], &q[r * rb], n);
        sl_quant_dequantize_row(type, &q[r * rb], &w[r * n], n);
    }
}

/* the combine as sl_cuda_moe_combine launches it: (T, column blocks), the unroll bound from k */
static void combine_dev(float *out, const float *y, const float *w, int64_t T, int k, int64_t E, const float *sh,
                        const float *g)
{
    std::function<void()> body;
    if (k <= 2)
        body = [&] { moe_combine_cols_per_block<2>(out, y, w, k, E, sh, g); };
    else if (k <= 4)
        body = [&] { moe_combine_cols_per_block<4>(out, y, w, k, E, sh, g); };
    else if (k <= 8)
        body = [&] { moe_combine_cols_per_block<8>(out, y, w, k, E, sh, g); };
    else if (k <= 16)
        body = [&] { moe_combine_cols_per_block<16>(out, y, w, k, E, sh, g); };
    else
        body = [&] { moe_combine_cols_per_block<SL_CUDA_MOE_MAX_USED>(out, y, w, k, E, sh, g); };
    emu_launch((unsigned)T, (unsigned)((E + COMBINE_COLS - 1) / COMBINE_COLS), COMBINE_COLS, body);
}

/* the device FFN of T rows with NT pairs per pass, staged or not */
template <int TYPE, int NT, bool STAGE = true>
static void ffn_dev(experts &X, int64_t T, const float *x, const float *lg, std::vector<int32_t> &ids,
                    std::vector<float> &w, float *out)
{
    int64_t R = T * X.k;
    ids.assign((size_t)R, 0);
    w.assign((size_t)R, 0.0f);
    std::vector<int32_t> off((size_t)X.n + 1), pairs((size_t)R), used((size_t)X.n + 1);
    std::vector<float> h((size_t)(R * X.F)), y((size_t)(R * X.E));
    if (X.oss)
        route_topk_dev(lg, T, X.n, X.k, ids.data(), w.data());
    else
        route_dev(lg, T, X.n, X.k, true, ids.data(), w.data());
    group_dev(ids.data(), R, X.n, off.data(), pairs.data(), used.data());
    moe_mm a = {};
    a.W[0] = X.qg.data();
    a.W[1] = X.qu.data();
    a.expert_bytes = (size_t)X.F * X.rbe;
    a.row_bytes = X.rbe;
    a.n = (int)X.E;
    a.rows = (int)X.F;
    a.off = off.data();
    a.pairs = pairs.data();
    a.used = used.data();
    a.in_div = X.k;
    if (X.oss) {
        a.B[0] = X.bg.data();
        a.B[1] = X.bu.data();
        a.oai = true;
    }
    a.x = x;
    a.ldx = X.E;
    a.y = h.data();
    a.ldy = X.F;
    int slots = R < X.n ? (int)R : X.n;   /* as sl_cuda_mmv_experts launches */
    experts_dev<TYPE, NT, true, STAGE>(a, slots);
    moe_mm b = a;
    b.W[0] = X.qd.data();
    b.W[1] = NULL;
    b.expert_bytes = (size_t)X.E * X.rbf;
    b.row_bytes = X.rbf;
    b.n = (int)X.F;
    b.rows = (int)X.E;
    b.in_div = 1;
    b.B[0] = X.oss ? X.bd.data() : NULL;
    b.B[1] = NULL;
    b.oai = false;
    b.x = h.data();
    b.ldx = X.F;
    b.y = y.data();
    b.ldy = X.E;
    experts_dev<TYPE, NT, false, STAGE>(b, slots);
    combine_dev(out, y.data(), w.data(), T, X.k, X.E, NULL, NULL);
}

template <int TYPE>
static int check_ffn(const char *name, int64_t T, int n, int k, int64_t E, int64_t F, bool oss = false)
{
    experts X;
    X.oss = oss;
    X.n = n;
    X.k = k;
    X.E = E;
    X.F = F;
    X.rbe = sl_ggml_row_bytes(TYPE, (uint64_t)E);
    X.rbf = sl_ggml_row_bytes(TYPE, (uint64_t)F);
    make(TYPE, (int64_t)n * F, E, X.qg, X.g);
    make(TYPE, (int64_t)n * F, E, X.qu, X.u);
    make(TYPE, (int64_t)n * E, F, X.qd, X.d);
    if (oss) {
        X.bg.resize((size_t)(n * F));
        X.bu.resize((size_t)(n * F));
        X.bd.resize((size_t)(n * E));
        for (auto *bv : {&X.bg, &X.bu, &X.bd})
            for (auto &v : *bv)
                v = 2.0f * uniform();
    }
    std::vector<float> x((size_t)(T * E)), lg((size_t)(T * n)), out((size_t)(T * E)), alone((size_t)E), w, w1;
    std::vector<int32_t> ids, ids1;
    for (auto &v : x)
        v = uniform();
    for (auto &v : lg)
        v = 3.0f * uniform();
    ffn_dev<TYPE, 4>(X, T, x.data(), lg.data(), ids, w, out.data());
    int64_t t1 = T / 2;
    ffn_dev<TYPE, 1>(X, 1, &x[t1 * E], &lg[t1 * n], ids1, w1, alone.data());
    bool same = memcmp(alone.data(), &out[t1 * E], (size_t)E * 4) == 0;
    /* the global path (SLUICE_CUDA_MOE_STAGE=0): the same bits for every row */
    std::vector<float> glob((size_t)(T * E));
    std::vector<int32_t> idsg;
    std::vector<float> wg;
    ffn_dev<TYPE, 4, false>(X, T, x.data(), lg.data(), idsg, wg, glob.data());
    bool same_g = memcmp(glob.data(), out.data(), (size_t)(T * E) * 4) == 0;
    double num = 0, den = 0;
    std::vector<double> hh((size_t)F);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i0 = 0; i0 < 1; i0++) {
            std::vector<double> ref((size_t)E, 0.0);
            for (int s = 0; s < k; s++) {
                int e = ids[t * k + s];
                for (int64_t f = 0; f < F; f++) {
                    double a = 0, b = 0;
                    for (int64_t i = 0; i < E; i++) {
                        a += (double)X.g[((int64_t)e * F + f) * E + i] * x[t * E + i];
                        b += (double)X.u[((int64_t)e * F + f) * E + i] * x[t * E + i];
                    }
                    if (oss) {
                        /* the biases, then the CPU backend's own clamped SwiGLU on the floats */
                        float ga = (float)a + X.bg[(size_t)e * F + f], ub = (float)b + X.bu[(size_t)e * F + f], o;
                        sl_cpu_swiglu_oai(&o, &ga, &ub, 1);
                        hh[f] = o;
                    } else {
                        hh[f] = a / (1.0 + exp(-a)) * b;
                    }
                }
                for (int64_t i = 0; i < E; i++) {
                    double yv = oss ? (double)X.bd[(size_t)e * E + i] : 0.0;
                    for (int64_t f = 0; f < F; f++)
                        yv += (double)X.d[((int64_t)e * E + i) * F + f] * hh[f];
                    ref[i] += (double)w[t * k + s] * yv;
                }
            }
            for (int64_t i = 0; i < E; i++) {
                num += (out[t * E + i] - ref[i]) * (out[t * E + i] - ref[i]);
                den += ref[i] * ref[i];
            }
        }
    double err = sqrt(num / den);
    int bad = err > 2e-5 || !same || !same_g;
    printf("ffn %-5s%s T %lld, %d experts, top %d, n_embd %lld, n_ff_exp %lld: rel err %.1e, row alone %s, "
           "unstaged %s  %s\n", name, oss ? " gpt-oss (top-k softmax, biases, clamped SwiGLU)" : "", (long long)T, n, k,
           (long long)E, (long long)F, err, same ? "same bits" : "DIFFERS", same_g ? "same bits" : "DIFFERS",
           bad ? "FAIL" : "ok");
    return bad;
}

/* The combine against the arithmetic of the one-block-per-row kernel it
 * replaced (a block walked a row's columns, each thread summing slots in
 * order: w[0] y[0], + w[s] y[s], + sigmoid(g) sh), with the same roundings
 * on the host: every output the same bits; with a shared expert also
 * against float64. */
static int check_combine(int64_t T, int k, int64_t E, bool shared)
{
    std::vector<float> y((size_t)(T * k * E)), w((size_t)(T * k)), sh((size_t)(T * E)), g((size_t)T),
        out((size_t)(T * E), -1.0f), old((size_t)(T * E));
    for (auto &v : y)
        v = uniform();
    for (auto &v : w)
        v = uniform();
    for (auto &v : sh)
        v = uniform();
    for (auto &v : g)
        v = 4.0f * uniform();
    combine_dev(out.data(), y.data(), w.data(), T, k, E, shared ? sh.data() : NULL, shared ? g.data() : NULL);
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        float gs = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g[t])));
        for (int64_t i = 0; i < E; i++) {
            float o = __fmul_rn(w[t * k], y[(t * k) * E + i]);
            for (int s = 1; s < k; s++)
                o = __fadd_rn(o, __fmul_rn(w[t * k + s], y[(t * k + s) * E + i]));
            if (shared)
                o = __fadd_rn(o, __fmul_rn(gs, sh[t * E + i]));
            old[t * E + i] = o;
            double r = 0;
            for (int s = 0; s < k; s++)
                r += (double)w[t * k + s] * y[(t * k + s) * E + i];
            if (shared)
                r += 1.0 / (1.0 + exp(-(double)g[t])) * sh[t * E + i];
            worst = fmax(worst, fabs(out[t * E + i] - r));
        }
    }
    bool same = memcmp(out.data(), old.data(), (size_t)(T * E) * 4) == 0;
    int bad = !same || worst > 1e-5;
    printf("combine T %lld, top %d, n_embd %lld%s: %s the one-block-per-row arithmetic, max abs err %.1e  %s\n",
           (long long)T, k, (long long)E, shared ? ", shared expert" : "", same ? "same bits as" : "bits DIFFER from",
           worst, bad ? "FAIL" : "ok");
    return bad;
}

/* the router as sl_cuda_moe_router launches it (NT from T, WPR from n) */
template <int NT, bool VEC>
static void router_dev_nt(const float *W, int64_t n, int rows, const float *x, int64_t ldx, int64_t T, float *y,
                          int64_t ldy)
{
    int wpr = router_warps_per_row(n);
    std::function<void()> body;
    if (wpr == 1)
        body = [&] { moe_router_f32_warps_per_row<NT, 1, VEC>(W, n, rows, x, ldx, T, y, ldy); };
    else if (wpr == 2)
        body = [&] { moe_router_f32_warps_per_row<NT, 2, VEC>(W, n, rows, x, ldx, T, y, ldy); };
    else if (wpr == 4)
        body = [&] { moe_router_f32_warps_per_row<NT, 4, VEC>(W, n, rows, x, ldx, T, y, ldy); };
    else
        body = [&] { moe_router_f32_warps_per_row<NT, 8, VEC>(W, n, rows, x, ldx, T, y, ldy); };
    emu_launch((unsigned)((rows + ROUTER_WARPS / wpr - 1) / (ROUTER_WARPS / wpr)), (unsigned)((T + NT - 1) / NT),
               ROUTER_WARPS * SL_WARP, body);
}

template <bool VEC>
static void router_dev(const float *W, int64_t n, int rows, const float *x, int64_t ldx, int64_t T, float *y,
                       int64_t ldy)
{
    if (T >= 8)
        router_dev_nt<8, VEC>(W, n, rows, x, ldx, T, y, ldy);
    else if (T >= 4)
        router_dev_nt<4, VEC>(W, n, rows, x, ldx, T, y, ldy);
    else if (T >= 2)
        router_dev_nt<2, VEC>(W, n, rows, x, ldx, T, y, ldy);
    else
        router_dev_nt<1, VEC>(W, n, rows, x, ldx, T, y, ldy);
}

/* The float32 router: against float64 (within 1e-5 of the sum of |w x|),
 * three rows alone giving their batched bits, the scalar loads (rows
 * unaligned) giving the float4 loads' bits. */
static int check_router(int rows, int64_t n, int64_t T)
{
    int64_t lds = n + 1;
    std::vector<float> w((size_t)(rows * n)), x((size_t)(T * n)), xs((size_t)(T * lds)), got((size_t)(T * rows), -1.0f),
        sc((size_t)(T * rows), -1.0f), one((size_t)rows);
    for (auto &v : w)
        v = 0.1f * uniform();
    for (auto &v : x)
        v = uniform();
    for (int64_t t = 0; t < T; t++)
        memcpy(&xs[t * lds], &x[t * n], (size_t)n * 4);
    bool vec = n % 4 == 0;
    if (vec)
        router_dev<true>(w.data(), n, rows, x.data(), n, T, got.data(), rows);
    else
        router_dev<false>(w.data(), n, rows, x.data(), n, T, got.data(), rows);
    router_dev<false>(w.data(), n, rows, xs.data(), lds, T, sc.data(), rows);
    bool alone = true;
    for (int64_t t : {(int64_t)0, T / 2, T - 1}) {
        if (vec)
            router_dev<true>(w.data(), n, rows, &x[t * n], n, 1, one.data(), rows);
        else
            router_dev<false>(w.data(), n, rows, &x[t * n], n, 1, one.data(), rows);
        alone = alone && memcmp(one.data(), &got[t * rows], (size_t)rows * 4) == 0;
    }
    double worst = 0;
    for (int64_t t = 0; t < T; t++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)w[r * n + i] * x[t * n + i];
                mag += fabs((double)w[r * n + i] * x[t * n + i]);
            }
            worst = fmax(worst, fabs(got[t * rows + r] - ref) / (mag + 1e-30));
        }
    bool scalar = memcmp(sc.data(), got.data(), (size_t)(T * rows) * 4) == 0;
    int bad = !(worst <= 1e-5) || !alone || !scalar;
    printf("router f32 %d x %lld, T %lld (%d warps a row): max err %.1e of sum |w x|, rows alone %s, scalar loads %s  "
           "%s\n", rows, (long long)n, (long long)T, router_warps_per_row(n), worst, alone ? "same bits" : "DIFFER",
           scalar ? "same bits" : "DIFFER", bad ? "FAIL" : "ok");
    return bad;
}

int main()
{
    int bad = 0;
    bad += check_route(37, 128, 8, true, false);
    bad += check_route(37, 128, 8, true, true);
    bad += check_route(33, 60, 4, false, true);
    bad += check_route(7, 8, 2, true, false);
    bad += check_route(5, 512, 32, true, true);
    bad += check_route(100, 128, 8, true, false);
    bad += check_route(1, 128, 8, true, false);    /* fused routing and grouping */
    bad += check_route(16, 128, 8, true, true);
    bad += check_route(3, 512, 32, true, true);
    bad += check_combine(3, 1, 300, false);
    bad += check_combine(5, 2, 2085, false);
    bad += check_combine(2, 8, 2048, false);
    bad += check_combine(2, 32, 300, false);
    bad += check_combine(5, 3, 300, true);
    bad += check_router(128, 2048, 13);   /* Qwen3-30B-A3B: 8 warps a row */
    bad += check_router(32, 2880, 9);     /* gpt-oss-20b: a run ends inside a step */
    bad += check_router(12, 1024, 5);     /* 4 warps */
    bad += check_router(5, 99, 3);        /* one warp, scalar loads, a partial step */
    bad += check_ffn<SL_GGML_TYPE_Q8_0>("Q8_0", 13, 8, 2, 256, 256);
    bad += check_ffn<SL_GGML_TYPE_Q4_K>("Q4_K", 13, 8, 2, 256, 256);
    bad += check_ffn<SL_GGML_TYPE_Q6_K>("Q6_K", 5, 2, 1, 256, 4352);   /* down rows shared by two warps */
    /* gpt-oss: its routing (ties, NaNs), MXFP4 experts with biases and the clamped SwiGLU */
    bad += check_route_topk(37, 32, 4, false, false);   /* gpt-oss-20b's routing */
    bad += check_route_topk(37, 128, 4, true, false);   /* gpt-oss-120b's, tied logits */
    bad += check_route_topk(9, 40, 5, false, true);
    bad += check_route_topk(5, 512, 32, true, false);   /* the limits */
    bad += check_route_topk(1, 32, 4, false, false);    /* fused */
    bad += check_ffn<SL_GGML_TYPE_MXFP4>("MXFP4", 13, 8, 2, 256, 256, true);
    bad += check_ffn<SL_GGML_TYPE_Q8_0>("Q8_0", 7, 8, 2, 256, 256, true);
    bad += check_ffn<SL_GGML_TYPE_MXFP4>("MXFP4", 13, 8, 2, 256, 256);   /* the SiLU path over MXFP4 */
    printf("moe-emulate: %s\n", bad ? "FAIL" : "all passed");
    return bad ? 1 : 0;
}
