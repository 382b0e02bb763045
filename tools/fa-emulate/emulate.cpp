/* tools/fa-emulate/emulate.cpp: runs kernels/cuda/attention_fa.cu's kernel
 * on the host (mock.h) over paged f16 caches and checks it as
 * kernels/cuda/selftest_fa.cu does on the GPU: against a float64 reference
 * with q rounded to f16 (bound 4e-3 relative L2), bitwise across chunkings
 * (A in chunks of 29 rows, its first rows one by one, B and C alone), and
 * no NaN although every cache slot past a sequence's end holds NaN (the
 * kernel must not read it, or must zero it). Cases are small (a block is
 * 128 threads on however many cores there are). Built and run by run.sh;
 * argument N runs case N only (all 11: about 3.5 minutes on 2 shared
 * cores, case 5 the longest; cases 7-10 add gpt-oss's attention sinks, 9
 * and 10 on the later chunks of an 1,100-token prompt, the 8-position
 * window of tiny-gpt-oss and full attention: 8 s and 49 s).
 * Exit 0 when all pass. */
#include "mock.h"
#include <stdio.h>
#include <stdlib.h>
#include <vector>
thread_local emu_dim threadIdx, blockIdx;
emu_dim gridDim;
pthread_barrier_t emu_block_bar, emu_warp_bar[4];
float emu_shfl_f[4][32]; int emu_shfl_i[4][32];
alignas(128) static unsigned char emu_dyn_smem[200 * 1024];
#include "fa_kernel.inc"   /* the kernel, cut out of attention_fa.cu by run.sh */

struct launch { int hd; float *out; const float *q; int n_head; sl_cuda_kv kv; sl_cuda_batch b; const int32_t *groups;
                int64_t ng; int layer; float scale, cap; int32_t window; const float *sinks; };
static launch L;
static void *worker(void *arg) {
  threadIdx.x = (unsigned)(uintptr_t)arg; threadIdx.y = threadIdx.z = 0;
  for (unsigned y = 0; y < gridDim.y; y++) for (unsigned x = 0; x < gridDim.x; x++) {
    blockIdx.x = x; blockIdx.y = y;
    if (L.hd == 64) attention_fa_tiles<64>(L.out, L.q, L.n_head, L.kv, L.b, L.groups, L.ng, L.layer, L.scale, L.cap, L.window, L.sinks);
    else if (L.hd == 128) attention_fa_tiles<128>(L.out, L.q, L.n_head, L.kv, L.b, L.groups, L.ng, L.layer, L.scale, L.cap, L.window, L.sinks);
    else attention_fa_tiles<256>(L.out, L.q, L.n_head, L.kv, L.b, L.groups, L.ng, L.layer, L.scale, L.cap, L.window, L.sinks);
    __syncthreads();
  }
  return NULL;
}
static void run_emu() {
  gridDim.x = (unsigned)L.ng; gridDim.y = (unsigned)L.kv.n_head_kv; gridDim.z = 1;
  pthread_t th[128];
  for (int i = 0; i < 128; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
  for (int i = 0; i < 128; i++) pthread_join(th[i], NULL);
}
static float uni(uint64_t *s) { *s = *s * 6364136223846793005ull + 1442695040888963407ull; return (float)((*s >> 40) * (1.0 / 16777216.0)) - 0.5f; }

/* sinks: gpt-oss's per-head logits (one more term in each softmax's denominator) */
struct Case { int hd, nh, nkv, bs; float scale, cap; int32_t window; int32_t a_ctx, a_start, b_ctx, b_start, c_ctx; bool sinks; };
static int run_case(const Case &c) {
  int32_t na = c.a_ctx - c.a_start, nbr = c.b_ctx - c.b_start, nc = c.c_ctx > 0;
  int32_t T = na + nbr + nc, ba = (c.a_ctx + c.bs - 1) / c.bs, bb = (c.b_ctx + c.bs - 1) / c.bs, bc = nc ? (c.c_ctx + c.bs - 1) / c.bs : 0;
  int32_t nb = ba + bb + bc; int NL = 2, LAYER = 1;
  int64_t rows = (int64_t)NL * 2 * nb * c.nkv * c.bs;
  std::vector<__half> kvh(rows * c.hd); std::vector<float> kvf(rows * c.hd);
  uint64_t seed = 3 + c.hd;
  for (size_t i = 0; i < kvh.size(); i++) { kvh[i] = __float2half_rn(uni(&seed)); kvf[i] = __half2float(kvh[i]); }
  std::vector<float> q((size_t)T * c.nh * c.hd);
  for (auto &v : q) v = uni(&seed) * 8;
  std::vector<float> sk(c.nh);
  for (auto &v : sk) v = uni(&seed) * 4;   /* of the order of the scores: neither nothing nor everything */
  std::vector<int32_t> pos(T), tab(T), blocks(nb);
  int stride = 7; while (std::__gcd(stride, (int)nb) != 1) stride += 2;
  for (int i = 0; i < nb; i++) blocks[i] = (int32_t)(((int64_t)i * stride + 3) % nb);
  int t = 0;
  for (int p = c.a_start; p < c.a_ctx; p++, t++) { pos[t] = p; tab[t] = 0; }
  for (int p = c.b_start; p < c.b_ctx; p++, t++) { pos[t] = p; tab[t] = ba; }
  if (nc) { pos[t] = c.c_ctx - 1; tab[t] = ba + bb; }
  /* every slot past a sequence's end holds NaN */
  auto slot = [&](int isv, int32_t tb, int32_t p, int h) { int64_t blk = blocks[tb + p / c.bs];
    return (((int64_t)LAYER * 2 + isv) * nb + blk) * c.nkv * c.bs + (int64_t)h * c.bs + p % c.bs; };
  struct S { int32_t tb, ctx; } seqs[3] = {{0, c.a_ctx}, {ba, c.b_ctx}, {ba + bb, c.c_ctx}};
  int nseq = nc ? 3 : 2;
  for (int s = 0; s < nseq; s++) {
    int32_t nblk = (seqs[s].ctx + c.bs - 1) / c.bs;
    for (int32_t p = seqs[s].ctx; p < nblk * c.bs; p++) for (int h = 0; h < c.nkv; h++) for (int isv = 0; isv < 2; isv++)
      for (int d = 0; d < c.hd; d++) kvh[slot(isv, seqs[s].tb, p, h) * c.hd + d] = __float2half_rn(NAN);
  }
  sl_cuda_kv kv = {(uint8_t *)kvh.data(), nb, c.bs, c.nkv, c.hd, SL_KV_TYPE_F16};
  int G = c.nh / c.nkv, qp = sl_cuda_fa_group_positions(G);
  auto fa = [&](int32_t r0, int32_t n, std::vector<float> &out) {
    std::vector<int32_t> gr(2 * n);
    int64_t ng = sl_cuda_fa_groups(pos.data() + r0, tab.data() + r0, n, qp, gr.data());
    sl_cuda_batch b = {pos.data() + r0, tab.data() + r0, blocks.data()};
    L = {c.hd, out.data() + (int64_t)r0 * c.nh * c.hd, q.data() + (int64_t)r0 * c.nh * c.hd, c.nh, kv, b, gr.data(), ng, LAYER, c.scale, c.cap, c.window,
         c.sinks ? sk.data() : NULL};
    run_emu();
  };
  std::vector<float> res((size_t)T * c.nh * c.hd, -7.0f), res2(res.size(), -7.0f);
  fa(0, T, res);
  for (int32_t r0 = 0; r0 < na; r0 += 29) fa(r0, std::min(29, na - r0), res2);
  if (nbr) fa(na, nbr, res2);
  if (nc) fa(na + nbr, 1, res2);
  bool same = memcmp(res.data(), res2.data(), res.size() * 4) == 0;
  for (int r = 0; r < std::min(na, 3); r++) fa(r, 1, res2);
  same = same && memcmp(res.data(), res2.data(), res.size() * 4) == 0;
  double num = 0, den = 0; int nan = 0;
  for (int t2 = 0; t2 < T; t2++) for (int h = 0; h < c.nh; h++) {
    int kvh_ = h / G; int32_t p_ = pos[t2], lo = sl_cuda_attention_window_start(p_, c.window);
    std::vector<double> sc(p_ + 1); double mx = -1e300, sum = 0;
    const float *qr = q.data() + ((int64_t)t2 * c.nh + h) * c.hd;
    for (int32_t p = lo; p <= p_; p++) { double d = 0; const float *k = kvf.data() + slot(0, tab[t2], p, kvh_) * c.hd;
      for (int i = 0; i < c.hd; i++) d += (double)__half2float(__float2half_rn(qr[i])) * k[i];
      d *= c.scale; if (c.cap > 0) d = c.cap * tanh(d / c.cap); sc[p] = d; mx = std::max(mx, d); }
    if (c.sinks) { mx = std::max(mx, (double)sk[h]); sum = exp(sk[h] - mx); }
    for (int32_t p = lo; p <= p_; p++) sum += (sc[p] = exp(sc[p] - mx));
    for (int i = 0; i < c.hd; i++) { double a = 0;
      for (int32_t p = lo; p <= p_; p++) a += sc[p] / sum * kvf[slot(1, tab[t2], p, kvh_) * c.hd + i];
      float g = res[((int64_t)t2 * c.nh + h) * c.hd + i]; if (!(g == g)) nan++;
      num += (g - a) * (g - a); den += a * a; }
  }
  double e = sqrt(num / den);
  bool ok = e < 4e-3 && same && nan == 0;
  printf("hd %d nh %d/%d bs %d win %d cap %g%s A[%d,%d) B[%d,%d) C %d: rel %.2e nan %d chunkings %s  %s\n", c.hd, c.nh, c.nkv,
         c.bs, c.window, c.cap, c.sinks ? " sinks" : "", c.a_start, c.a_ctx, c.b_start, c.b_ctx, c.c_ctx, e, nan, same ? "same" : "DIFFER", ok ? "PASS" : "FAIL");
  return !ok;
}
int main(int argc, char **argv) {
  pthread_barrier_init(&emu_block_bar, NULL, 128);
  for (int w = 0; w < 4; w++) pthread_barrier_init(&emu_warp_bar[w], NULL, 32);
  Case cs[] = {
    {64, 8, 2, 16, 0.125f, 0, 0, 65, 0, 64, 0, 100},
    {128, 2, 2, 40, 0.088f, 0, 0, 130, 61, 63, 0, 1},
    {64, 6, 2, 24, 0.125f, 0, 0, 200, 17, 30, 5, 64},
    {256, 4, 2, 16, 0.0625f, 50.0f, 0, 150, 100, 65, 20, 0},
    {128, 8, 1, 24, 0.1f, 30.0f, 40, 300, 200, 100, 0, 150},
    {128, 32, 8, 16, 0.0884f, 0, 0, 1000, 900, 70, 3, 700},
    {128, 8, 2, 16, 0.1f, 30.0f, 150, 1000, 930, 64, 0, 0},
    {64, 8, 2, 16, 0.125f, 0, 8, 100, 0, 40, 7, 30, true},   /* gpt-oss: sinks, an 8-position window (tiny-gpt-oss) */
    {64, 16, 2, 16, 0.125f, 0, 0, 130, 61, 63, 0, 1, true},  /* sinks, whole history, 8 query heads a kv head */
    {64, 8, 2, 16, 0.125f, 0, 8, 1100, 844, 512, 256, 0, true},  /* tiny-gpt-oss's later chunks of a long prompt */
    {64, 8, 2, 16, 0.125f, 0, 0, 1100, 844, 512, 256, 0, true},  /* the same on its full-attention layers */
  };
  int which = argc > 1 ? atoi(argv[1]) : -1, bad = 0;
  for (int i = 0; i < (int)(sizeof cs / sizeof cs[0]); i++) if (which < 0 || which == i) bad += run_case(cs[i]);
  printf("%s\n", bad ? "FAIL" : "all PASS");
  return bad;
}
