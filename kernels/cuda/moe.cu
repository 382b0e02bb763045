/* kernels/cuda/moe.cu: the router's logits, routing, grouping and
 * combining of the MoE FFN (moe.cuh); the expert matmul itself is
 * mmv_moe.cu.
 * Runs in the worker process, launched on the backend stream.
 *
 * Why these kernels are shaped for few rows: a 30B-A3B decode step spends
 * microseconds per layer in each of them, latency, not bandwidth (an H200
 * profile, 2026-12-02: the router on sl_cuda_matmul 9.8 us, 32 blocks of
 * 4 warps over 1 MB; routing 5.1 us then grouping 4.5 us, two dependent
 * single-block launches; the combine 10.8 us, one block walking the row).
 * So the router puts up to 8 warps on a row, a small step routes and
 * groups in one block, and the combine spreads a row over blocks of 128
 * columns with each thread's k loads issued before its adds; each keeps an
 * order that depends on the shapes only.
 *
 * Routing: one warp per token row. The softmax's maximum is exact in any
 * order; its sum is taken in double, per lane then by the warp's fixed
 * butterfly, so it differs from the CPU's sequential double sum by an
 * ulp-level amount at most; the top-k is k rounds of an argmax over the
 * untaken experts where a tie goes to the lower index, the CPU's rule.
 * Lane j keeps slot j, which is why k is at most a warp. gpt-oss's rule
 * (top-k of the logits, then a softmax over the k) is a second kernel of
 * the same shape.
 *
 * Grouping: one block. Per-expert counts by shared-memory atomics (integer
 * sums: the order does not matter), offsets by a warp's scan, then one warp
 * walks the pairs in increasing index 32 at a time; __match_any_sync finds
 * the lanes of one expert and a lane's rank among them fixes its place, so
 * pairs land in increasing index within their expert, deterministically.
 * It also lists the experts that got pairs, so the expert kernel's grid
 * needs only min(n_expert, T*k) expert slots (8, not 128, for one decode
 * row of a 30B-A3B).
 * Trade-off: that walk is serial over T*k / 32 chunks (a few microseconds
 * for a 2,048-row prefill step at k = 8), in exchange for a fixed grid.
 * Steps of up to 16 rows run routing and grouping as one block
 * (moe_route_group_one_block), the same code and so the same outputs. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.cuh"

#define ROUTE_ROWS 4       /* token rows (warps) per routing block */
#define GROUP_THREADS 512  /* the grouping block: one thread per expert at most */
#define FUSE_ROWS (GROUP_THREADS / SL_WARP)   /* steps of up to 16 rows route and group in one block */

/* ------------------------------------------------------------------------ */
/* routing                                                                  */

/* One warp routes the row l (n logits): its k slots into ids[0 .. k) and
 * w[0 .. k) (lane j writes slot j), p (n floats of shared memory) the
 * warp's scratch. Warp-synchronous: no block barrier. */
static __device__ __forceinline__ void route_row(const float *__restrict__ l, int n, int k, bool norm, float *p,
                                                 int lane, int32_t *ids, float *w)
{
    float mx = -INFINITY;
    for (int e = lane; e < n; e += SL_WARP)
        mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0.0;
    for (int e = lane; e < n; e += SL_WARP) {
        float v = expf(l[e] - mx);
        p[e] = v;
        sum += v;
    }
    sum = sl_warp_sum_double(sum);
    float inv = (float)(1.0 / sum);
    for (int e = lane; e < n; e += SL_WARP)
        p[e] = __fmul_rn(p[e], inv);
    __syncwarp();
    /* k rounds of argmax; a taken expert is marked -1 (below every probability) */
    float mine = 0.0f;
    int32_t mine_id = 0;
    double wsum = 0.0;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = n;
        for (int e = lane; e < n; e += SL_WARP) {   /* increasing e: a lane's first maximum wins */
            float v = p[e];
            if (v >= 0.0f && v > bv) {
                bv = v;
                bi = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi >= n) {   /* only with NaN logits: take the lowest untaken index, as the CPU's scan starts there */
            bi = 0;
            while (bi < n - 1 && p[bi] == -1.0f)
                bi++;
            bv = p[bi];
        }
        if (lane == j) {
            mine = bv;
            mine_id = bi;
        }
        wsum += (double)bv;
        __syncwarp();
        if (lane == bi % SL_WARP)
            p[bi] = -1.0f;
        __syncwarp();
    }
    if (lane < k) {
        if (norm) {
            float s = (float)wsum < 6.103515625e-5f ? 6.103515625e-5f : (float)wsum;
            mine = __fdiv_rn(mine, s);
        }
        ids[lane] = mine_id;
        w[lane] = mine;
    }
}

static __global__ void __launch_bounds__(ROUTE_ROWS * SL_WARP)
moe_route_warp_per_row(const float *__restrict__ logits, int64_t T, int n, int k, bool norm, int32_t *__restrict__ ids,
                       float *__restrict__ w)
{
    __shared__ float prob[ROUTE_ROWS][SL_CUDA_MOE_MAX_EXPERTS];
    int lane = threadIdx.x % SL_WARP, wr = threadIdx.x / SL_WARP;
    int64_t t = (int64_t)blockIdx.x * ROUTE_ROWS + wr;
    if (t >= T)
        return;   /* no block barrier below: warps are independent */
    route_row(logits + t * n, n, k, norm, prob[wr], lane, ids + t * k, w + t * k);
}

/* gpt-oss's routing (sl_cpu_moe_route_topk_softmax): k rounds of an argmax
 * over the untaken logits themselves, then a softmax over the k chosen.
 * The order of "larger" is the CPU scan's: a NaN ranks below every number
 * (never replaces one), equal values go to the lower index. */
static __device__ __forceinline__ bool route_above(float a, float b)
{
    return !isnan(a) && (isnan(b) || a > b);
}

/* One warp routes the row l gpt-oss's way, as route_row; tk (n bytes of
 * shared memory) the warp's scratch. */
static __device__ __forceinline__ void route_topk_row(const float *__restrict__ l, int n, int k, unsigned char *tk,
                                                      int lane, int32_t *ids, float *w)
{
    for (int e = lane; e < n; e += SL_WARP)
        tk[e] = 0;
    __syncwarp();
    float mine = 0.0f;
    int32_t mine_id = 0;
    for (int j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = n;   /* none yet */
        for (int e = lane; e < n; e += SL_WARP) {   /* increasing e: a lane's first maximum wins */
            float v = l[e];
            if (!tk[e] && (bi == n || route_above(v, bv))) {
                bv = v;
                bi = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            bool same = (isnan(ov) && isnan(bv)) || ov == bv;
            if (oi < n && (bi == n || route_above(ov, bv) || (same && oi < bi))) {
                bv = ov;
                bi = oi;
            }
        }
        /* k <= n: an untaken expert always exists, so bi < n */
        if (lane == j) {
            mine = bv;
            mine_id = bi;
        }
        __syncwarp();
        if (lane == bi % SL_WARP)
            tk[bi] = 1;
        __syncwarp();
    }
    /* softmax over the k, the largest first: the CPU's float exps summed in
     * double in slot order (every lane adds the same values the same way) */
    float mx = __shfl_sync(0xffffffffu, mine, 0);
    float ex = lane < k ? expf(mine - mx) : 0.0f;
    double sum = 0.0;
    for (int j = 0; j < k; j++)
        sum += (double)__shfl_sync(0xffffffffu, ex, j);
    float inv = (float)(1.0 / sum);
    if (lane < k) {
        ids[lane] = mine_id;
        w[lane] = __fmul_rn(ex, inv);
    }
}

static __global__ void __launch_bounds__(ROUTE_ROWS * SL_WARP)
moe_route_topk_softmax_warp_per_row(const float *__restrict__ logits, int64_t T, int n, int k,
                                    int32_t *__restrict__ ids, float *__restrict__ w)
{
    __shared__ unsigned char taken[ROUTE_ROWS][SL_CUDA_MOE_MAX_EXPERTS];
    int lane = threadIdx.x % SL_WARP, wr = threadIdx.x / SL_WARP;
    int64_t t = (int64_t)blockIdx.x * ROUTE_ROWS + wr;
    if (t >= T)
        return;   /* no block barrier below: warps are independent */
    route_topk_row(logits + t * n, n, k, taken[wr], lane, ids + t * k, w + t * k);
}

/* ------------------------------------------------------------------------ */
/* grouping                                                                 */

/* The whole block (GROUP_THREADS threads) groups the R pairs of ids; cnt
 * and fill (n ints each) are shared scratch. Ends with warp 0 alone: no
 * block barrier may follow. */
static __device__ __forceinline__ void group_pairs(const int32_t *ids, int R, int n, int *cnt, int *fill,
                                                   int32_t *__restrict__ off, int32_t *__restrict__ pairs,
                                                   int32_t *__restrict__ used)
{
    int tid = threadIdx.x, lane = tid % SL_WARP;
    for (int e = tid; e < n; e += GROUP_THREADS)
        cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < R; i += GROUP_THREADS)
        atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (tid >= SL_WARP)
        return;   /* warp 0 alone from here */
    /* exclusive scan: lane l sums experts [l*per, (l+1)*per), then the warp scans the lane sums */
    constexpr int per = SL_CUDA_MOE_MAX_EXPERTS / SL_WARP;
    int e0 = lane * per, s = 0;
    for (int e = e0; e < e0 + per && e < n; e++)
        s += cnt[e];
    int incl = s;
#pragma unroll
    for (int o = 1; o < SL_WARP; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += v;
    }
    int acc = incl - s;
    for (int e = e0; e < e0 + per && e < n; e++) {
        fill[e] = acc;
        off[e] = acc;
        acc += cnt[e];
    }
    if (lane == SL_WARP - 1)
        off[n] = incl;
    /* the experts with pairs, in increasing index: the same scan over nonzero counts */
    int u = 0;
    for (int e = e0; e < e0 + per && e < n; e++)
        u += cnt[e] > 0;
    int uincl = u;
#pragma unroll
    for (int o = 1; o < SL_WARP; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, uincl, o);
        if (lane >= o)
            uincl += v;
    }
    int at = uincl - u;
    for (int e = e0; e < e0 + per && e < n; e++)
        if (cnt[e] > 0)
            used[1 + at++] = e;
    if (lane == SL_WARP - 1)
        used[0] = uincl;
    __syncwarp();
    for (int base = 0; base < R; base += SL_WARP) {
        int i = base + lane;
        int e = i < R ? ids[i] : -1;
        unsigned same = __match_any_sync(0xffffffffu, e);
        int rank = __popc(same & ((1u << lane) - 1u));
        if (i < R)
            pairs[fill[e] + rank] = i;
        __syncwarp();
        if (i < R && rank == 0)
            fill[e] += __popc(same);
        __syncwarp();
    }
}

static __global__ void __launch_bounds__(GROUP_THREADS)
moe_group_one_block(const int32_t *__restrict__ ids, int R, int n, int32_t *__restrict__ off,
                    int32_t *__restrict__ pairs, int32_t *__restrict__ used)
{
    __shared__ int cnt[SL_CUDA_MOE_MAX_EXPERTS];
    __shared__ int fill[SL_CUDA_MOE_MAX_EXPERTS];
    group_pairs(ids, R, n, cnt, fill, off, pairs, used);
}

/* Routing and grouping of a small step in one block: warp t routes row t
 * (route_row or route_topk_row, so the same ids and weights as the two
 * kernels), the block copies the ids to shared memory, then groups them
 * (group_pairs, the same lists). One launch instead of two dependent
 * single-block ones, for T <= FUSE_ROWS. The ids are read back from
 * shared memory, not from global: a load through the read-only cache
 * might not see this kernel's own stores. */
template <bool TOPK>
static __global__ void __launch_bounds__(GROUP_THREADS)
moe_route_group_one_block(const float *__restrict__ logits, int T, int n, int k, bool norm, int32_t *__restrict__ ids,
                          float *__restrict__ w, int32_t *__restrict__ off, int32_t *__restrict__ pairs,
                          int32_t *__restrict__ used)
{
    __shared__ float prob[FUSE_ROWS][SL_CUDA_MOE_MAX_EXPERTS];   /* TOPK: the taken flags, as bytes */
    __shared__ int32_t sids[FUSE_ROWS * SL_CUDA_MOE_MAX_USED];
    __shared__ int cnt[SL_CUDA_MOE_MAX_EXPERTS];
    __shared__ int fill[SL_CUDA_MOE_MAX_EXPERTS];
    int lane = threadIdx.x % SL_WARP, t = threadIdx.x / SL_WARP;
    if (t < T) {
        if constexpr (TOPK)
            route_topk_row(logits + (int64_t)t * n, n, k, (unsigned char *)prob[t], lane, sids + t * k, w + t * k);
        else
            route_row(logits + (int64_t)t * n, n, k, norm, prob[t], lane, sids + t * k, w + t * k);
        __syncwarp();
        if (lane < k)
            ids[t * k + lane] = sids[t * k + lane];
    }
    __syncthreads();   /* every row's ids in sids */
    group_pairs(sids, T * k, n, cnt, fill, off, pairs, used);
}

/* ------------------------------------------------------------------------ */
/* combine                                                                  */

#define COMBINE_COLS 128   /* columns of a row per block, a thread each */

/* Block (t, c) sums columns c*COMBINE_COLS .. of row t: thread i loads the
 * k weights and k expert outputs of its column first (KMAX bounds the
 * unrolled loads; slots past k are not read), then adds them in slot order
 * with the same roundings as ever: w[0] y[0], + w[s] y[s], + g sh. A row
 * spread over E / 128 blocks instead of one block walking it, and k loads in
 * flight per thread instead of one: a decode row is 16 blocks at n_embd
 * 2,048, not one. */
template <int KMAX>
static __global__ void __launch_bounds__(COMBINE_COLS)
moe_combine_cols_per_block(float *__restrict__ out, const float *__restrict__ y, const float *__restrict__ w, int k,
                           int64_t E, const float *__restrict__ sh, const float *__restrict__ sh_gate)
{
    int64_t t = blockIdx.x, i = (int64_t)blockIdx.y * COMBINE_COLS + threadIdx.x;
    if (i >= E)
        return;
    const float *wt = w + t * k, *yt = y + t * k * E + i;
    float wv[KMAX], yv[KMAX];
#pragma unroll
    for (int s = 0; s < KMAX; s++) {
        wv[s] = s < k ? wt[s] : 0.0f;
        yv[s] = s < k ? yt[(int64_t)s * E] : 0.0f;
    }
    float hv = sh ? sh[t * E + i] : 0.0f, hg = sh ? sh_gate[t] : 0.0f;
    float o = __fmul_rn(wv[0], yv[0]);
#pragma unroll
    for (int s = 1; s < KMAX; s++)
        if (s < k)
            o = __fadd_rn(o, __fmul_rn(wv[s], yv[s]));
    if (sh) {
        float g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-hg)));
        o = __fadd_rn(o, __fmul_rn(g, hv));
    }
    out[t * E + i] = o;
}

/* ------------------------------------------------------------------------ */
/* router logits                                                            */

#define ROUTER_WARPS 8              /* warps per 256-thread block */
#define ROUTER_STEP (SL_WARP * 4)   /* elements of a row a warp covers per step: a float4 a lane */

/* Warps sharing one router row, from its length alone: up to 8, each with
 * at least two steps (2,048: 8 warps of 256 elements). */
static __host__ __device__ __forceinline__ int router_warps_per_row(int64_t n)
{
    int64_t steps = (n + ROUTER_STEP - 1) / ROUTER_STEP;
    return steps >= 16 ? 8 : steps >= 8 ? 4 : steps >= 4 ? 2 : 1;
}

/* y[t*ldy + r] = dot(W row r, x row t) for float32 W (rows x n): WPR warps
 * share row r, warp p taking the p-th contiguous run of 128-element steps;
 * lane l takes elements 4l .. 4l+3 of each step, in increasing index, one
 * fmaf chain per token; then the warp's butterfly, then the runs' sums
 * added in run order by the row's first warp. The order depends on n only
 * (not T, the tile or VEC, which changes only the width of the loads), so
 * a token's logits are the same bits alone or batched. NT token rows per
 * block (grid.y walks the tiles) read each weight once per tile. */
template <int NT, int WPR, bool VEC>
static __global__ void __launch_bounds__(ROUTER_WARPS * SL_WARP)
moe_router_f32_warps_per_row(const float *__restrict__ W, int64_t n, int rows, const float *__restrict__ x,
                             int64_t ldx, int64_t T, float *__restrict__ y, int64_t ldy)
{
    __shared__ float red[WPR > 1 ? ROUTER_WARPS : 1][NT];
    int lane = threadIdx.x % SL_WARP, warp = threadIdx.x / SL_WARP, part = warp % WPR;
    int r = blockIdx.x * (ROUTER_WARPS / WPR) + warp / WPR;
    int64_t t0 = (int64_t)blockIdx.y * NT;
    int nt = T - t0 < NT ? (int)(T - t0) : NT;
    bool live = r < rows;
    int64_t steps = (n + ROUTER_STEP - 1) / ROUTER_STEP, per = (steps + WPR - 1) / WPR;
    int64_t s0 = part * per, s1 = s0 + per < steps ? s0 + per : steps;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    if (live) {
        const float *wr = W + (int64_t)r * n;
        for (int64_t s = s0; s < s1; s++) {
            int64_t i = s * ROUTER_STEP + 4 * lane;
            if constexpr (VEC) {   /* n % 4 == 0: a float4 lies wholly inside the row or wholly past it */
                if (i >= n)
                    continue;
                float4 wv = *(const float4 *)(wr + i);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= nt)
                        break;
                    float4 xv = *(const float4 *)(x + (t0 + t) * ldx + i);
                    acc[t] = fmaf(wv.x, xv.x, acc[t]);
                    acc[t] = fmaf(wv.y, xv.y, acc[t]);
                    acc[t] = fmaf(wv.z, xv.z, acc[t]);
                    acc[t] = fmaf(wv.w, xv.w, acc[t]);
                }
            } else {
                for (int j = 0; j < 4; j++) {
                    if (i + j >= n)
                        break;
                    float wj = wr[i + j];
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        if (t < nt)
                            acc[t] = fmaf(wj, x[(t0 + t) * ldx + i + j], acc[t]);
                }
            }
        }
    }
    float v[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        v[t] = sl_warp_sum(acc[t]);
    if constexpr (WPR > 1) {
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < NT; t++)
                red[warp][t] = v[t];
        __syncthreads();
        if (part == 0)
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int p = 1; p < WPR; p++)
                    v[t] = __fadd_rn(v[t], red[warp + p][t]);
    }
    if (part != 0 || !live || lane != 0)
        return;
#pragma unroll
    for (int t = 0; t < NT; t++)
        if (t < nt)
            y[(t0 + t) * ldy + r] = v[t];
}

/* ------------------------------------------------------------------------ */
/* launchers (tools/moe-emulate runs the file up to here on the host)       */

sl_status sl_cuda_moe_route(const float *logits, int64_t T, int n_expert, int k, bool norm, int32_t *ids, float *w,
                            cudaStream_t stream)
{
    if (T < 1 || T > (1 << 24) || n_expert < 1 || n_expert > SL_CUDA_MOE_MAX_EXPERTS || k < 1 ||
        k > SL_CUDA_MOE_MAX_USED || k > n_expert)
        return SL_EINVAL;
    unsigned blocks = (unsigned)((T + ROUTE_ROWS - 1) / ROUTE_ROWS);
    moe_route_warp_per_row<<<blocks, ROUTE_ROWS * SL_WARP, 0, stream>>>(logits, T, n_expert, k, norm, ids, w);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_moe_route_topk_softmax(const float *logits, int64_t T, int n_expert, int k, int32_t *ids, float *w,
                                         cudaStream_t stream)
{
    if (T < 1 || T > (1 << 24) || n_expert < 1 || n_expert > SL_CUDA_MOE_MAX_EXPERTS || k < 1 ||
        k > SL_CUDA_MOE_MAX_USED || k > n_expert)
        return SL_EINVAL;
    unsigned blocks = (unsigned)((T + ROUTE_ROWS - 1) / ROUTE_ROWS);
    moe_route_topk_softmax_warp_per_row<<<blocks, ROUTE_ROWS * SL_WARP, 0, stream>>>(logits, T, n_expert, k, ids, w);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_moe_group(const int32_t *ids, int64_t R, int n_expert, int32_t *off, int32_t *pairs,
                            int32_t *used, cudaStream_t stream)
{
    if (R < 1 || R > (1 << 28) || n_expert < 1 || n_expert > SL_CUDA_MOE_MAX_EXPERTS)
        return SL_EINVAL;
    moe_group_one_block<<<1, GROUP_THREADS, 0, stream>>>(ids, (int)R, n_expert, off, pairs, used);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_moe_combine(float *out, const float *y, const float *w, int64_t T, int k, int64_t E,
                              const float *sh, const float *sh_gate, cudaStream_t stream)
{
    int64_t cb = (E + COMBINE_COLS - 1) / COMBINE_COLS;
    if (T < 1 || T > (1 << 24) || k < 1 || k > SL_CUDA_MOE_MAX_USED || E < 1 || cb > 65535)
        return SL_EINVAL;
    dim3 grid((unsigned)T, (unsigned)cb);
    /* the smallest unroll bound that holds k: a speed choice, the sums are the same */
#define GO(KM) moe_combine_cols_per_block<KM><<<grid, COMBINE_COLS, 0, stream>>>(out, y, w, k, E, sh, sh_gate)
    if (k <= 2)
        GO(2);
    else if (k <= 4)
        GO(4);
    else if (k <= 8)
        GO(8);
    else if (k <= 16)
        GO(16);
    else
        GO(SL_CUDA_MOE_MAX_USED);
#undef GO
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_moe_route_group(const float *logits, int64_t T, int n_expert, int k, bool topk_softmax, bool norm,
                                  int32_t *ids, float *w, int32_t *off, int32_t *pairs, int32_t *used,
                                  cudaStream_t stream)
{
    if (T < 1 || T > (1 << 24) || n_expert < 1 || n_expert > SL_CUDA_MOE_MAX_EXPERTS || k < 1 ||
        k > SL_CUDA_MOE_MAX_USED || k > n_expert)
        return SL_EINVAL;
    if (T > FUSE_ROWS) {
        sl_status rc = topk_softmax ? sl_cuda_moe_route_topk_softmax(logits, T, n_expert, k, ids, w, stream)
                                    : sl_cuda_moe_route(logits, T, n_expert, k, norm, ids, w, stream);
        return rc < 0 ? rc : sl_cuda_moe_group(ids, T * k, n_expert, off, pairs, used, stream);
    }
    if (topk_softmax)
        moe_route_group_one_block<true><<<1, GROUP_THREADS, 0, stream>>>(logits, (int)T, n_expert, k, false, ids, w,
                                                                         off, pairs, used);
    else
        moe_route_group_one_block<false><<<1, GROUP_THREADS, 0, stream>>>(logits, (int)T, n_expert, k, norm, ids, w,
                                                                          off, pairs, used);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

bool sl_cuda_moe_router_supports(const sl_cuda_weight *w)
{
    return w->type == SL_GGML_TYPE_F32 && w->ne0 >= 1 && w->ne1 >= 1 && w->ne1 < (1 << 30) &&
           w->row_bytes == (size_t)w->ne0 * 4;
}

template <int NT, int WPR>
static void router_launch(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                          bool vec, cudaStream_t st)
{
    dim3 grid((unsigned)((w->ne1 + ROUTER_WARPS / WPR - 1) / (ROUTER_WARPS / WPR)), (unsigned)((T + NT - 1) / NT));
    const float *W = (const float *)w->data;
    if (vec)
        moe_router_f32_warps_per_row<NT, WPR, true><<<grid, ROUTER_WARPS * SL_WARP, 0, st>>>(W, w->ne0, (int)w->ne1, x,
                                                                                          ldx, T, y, ldy);
    else
        moe_router_f32_warps_per_row<NT, WPR, false><<<grid, ROUTER_WARPS * SL_WARP, 0, st>>>(W, w->ne0, (int)w->ne1,
                                                                                           x, ldx, T, y, ldy);
}

template <int NT>
static void router_launch_wpr(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                              bool vec, cudaStream_t st)
{
    switch (router_warps_per_row(w->ne0)) {
    case 1: router_launch<NT, 1>(w, x, ldx, T, y, ldy, vec, st); break;
    case 2: router_launch<NT, 2>(w, x, ldx, T, y, ldy, vec, st); break;
    case 4: router_launch<NT, 4>(w, x, ldx, T, y, ldy, vec, st); break;
    default: router_launch<NT, 8>(w, x, ldx, T, y, ldy, vec, st); break;
    }
}

sl_status sl_cuda_moe_router(const sl_cuda_weight *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                             cudaStream_t stream)
{
    if (!sl_cuda_moe_router_supports(w) || T < 1 || ldx < w->ne0 || ldy < w->ne1 || (T + 7) / 8 > 65535)
        return SL_EINVAL;
    /* float4 loads where every row and token row starts 16-byte aligned: the same arithmetic either way */
    bool vec = w->ne0 % 4 == 0 && ldx % 4 == 0 && (((uintptr_t)w->data | (uintptr_t)x) & 15) == 0;
    /* token rows per tile from T: speed only, a token's sums do not depend on it */
    if (T >= 8)
        router_launch_wpr<8>(w, x, ldx, T, y, ldy, vec, stream);
    else if (T >= 4)
        router_launch_wpr<4>(w, x, ldx, T, y, ldy, vec, stream);
    else if (T >= 2)
        router_launch_wpr<2>(w, x, ldx, T, y, ldy, vec, stream);
    else
        router_launch_wpr<1>(w, x, ldx, T, y, ldy, vec, stream);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
