/* kernels/cuda/moe.cu: routing, grouping and combining of the MoE FFN
 * (moe.cuh); the expert matmul itself is mmv_moe.cu.
 * Runs in the worker process, launched on the backend stream.
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
 * for a 2,048-row prefill step at k = 8), in exchange for a fixed grid. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.cuh"

#define ROUTE_ROWS 4       /* token rows (warps) per routing block */
#define GROUP_THREADS 512  /* the grouping block: one thread per expert at most */

/* ------------------------------------------------------------------------ */
/* routing                                                                  */

static __global__ void __launch_bounds__(ROUTE_ROWS * SL_WARP)
moe_route_warp_per_row(const float *__restrict__ logits, int64_t T, int n, int k, bool norm, int32_t *__restrict__ ids,
                       float *__restrict__ w)
{
    __shared__ float prob[ROUTE_ROWS][SL_CUDA_MOE_MAX_EXPERTS];
    int lane = threadIdx.x % SL_WARP, wr = threadIdx.x / SL_WARP;
    int64_t t = (int64_t)blockIdx.x * ROUTE_ROWS + wr;
    if (t >= T)
        return;   /* no block barrier below: warps are independent */
    const float *l = logits + t * n;
    float *p = prob[wr];
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
        ids[t * k + lane] = mine_id;
        w[t * k + lane] = mine;
    }
}

/* gpt-oss's routing (sl_cpu_moe_route_topk_softmax): k rounds of an argmax
 * over the untaken logits themselves, then a softmax over the k chosen.
 * The order of "larger" is the CPU scan's: a NaN ranks below every number
 * (never replaces one), equal values go to the lower index. */
static __device__ __forceinline__ bool route_above(float a, float b)
{
    return !isnan(a) && (isnan(b) || a > b);
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
    const float *l = logits + t * n;
    unsigned char *tk = taken[wr];
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
        ids[t * k + lane] = mine_id;
        w[t * k + lane] = __fmul_rn(ex, inv);
    }
}

/* ------------------------------------------------------------------------ */
/* grouping                                                                 */

static __global__ void __launch_bounds__(GROUP_THREADS)
moe_group_one_block(const int32_t *__restrict__ ids, int R, int n, int32_t *__restrict__ off,
                    int32_t *__restrict__ pairs, int32_t *__restrict__ used)
{
    __shared__ int cnt[SL_CUDA_MOE_MAX_EXPERTS];
    __shared__ int fill[SL_CUDA_MOE_MAX_EXPERTS];
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

/* ------------------------------------------------------------------------ */
/* combine                                                                  */

#define COMBINE_THREADS 256

static __global__ void __launch_bounds__(COMBINE_THREADS)
moe_combine_row_per_block(float *__restrict__ out, const float *__restrict__ y, const float *__restrict__ w, int k,
                          int64_t E, const float *__restrict__ sh, const float *__restrict__ sh_gate)
{
    int64_t t = blockIdx.x;
    const float *wt = w + t * k, *yt = y + t * k * E;
    float g = 0.0f;
    if (sh)
        g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-sh_gate[t])));
    for (int64_t i = threadIdx.x; i < E; i += COMBINE_THREADS) {
        float o = __fmul_rn(wt[0], yt[i]);
        for (int s = 1; s < k; s++)
            o = __fadd_rn(o, __fmul_rn(wt[s], yt[s * E + i]));
        if (sh)
            o = __fadd_rn(o, __fmul_rn(g, sh[t * E + i]));
        out[t * E + i] = o;
    }
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
    if (T < 1 || T > (1 << 24) || k < 1 || k > SL_CUDA_MOE_MAX_USED || E < 1)
        return SL_EINVAL;
    moe_combine_row_per_block<<<(unsigned)T, COMBINE_THREADS, 0, stream>>>(out, y, w, k, E, sh, sh_gate);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
