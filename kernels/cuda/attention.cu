/* kernels/cuda/attention.cu: one 16-warp block per (token row, query head)
 * with online softmax ("attention_paged_online_softmax"); its split-K
 * variant, one block per (row, head, split) ("..._split"); and the merge
 * of a split row's partials ("attention_merge_splits").
 *
 * Warp w walks positions p0+w, p0+w+16, ... of its block's range [p0, p1);
 * a lane holds head elements lane, lane+32, ... of q and of its running
 * output, so a score is one butterfly sum and no score matrix is ever
 * stored. Each warp keeps its own running max m, denominator l and output;
 * the 16 are merged at the end in warp order. (16 warps rather than 8: a
 * decode row's positions are walked in half the dependent steps; 32 would
 * spill registers.) Every step is in an order fixed by (pos, head_dim), so
 * a row's output is the same alone or batched.
 *
 * Split-K: a launch with gridDim.y = S > 1 cuts a row of context ctx into
 * n = min(splits(ctx), S) ranges of ceil(ctx / n) positions rounded up to
 * a multiple of the 16 warps (the last one shorter; every range is
 * non-empty, see range_of). Block y = s >= n exits at once. A block of a
 * row with n == 1 walks [0, ctx) and writes its output exactly as the
 * unsplit launch does (one body, attention_rows, with the same operations
 * in the same order), so short rows are bitwise unchanged by the split
 * launch. A block of a split row writes its unnormalised state (M, L,
 * acc[head_dim]) to scratch slot (row, head, s); attention_merge_splits
 * then merges slots 0..n-1 in that order. n depends only on the row's own
 * position and S only picks scratch addresses, so the result is batch
 * invariant.
 *
 * Merge by a second small kernel rather than "the last block to finish
 * merges" (an atomic counter per (row, head)): it costs one more launch
 * per layer, only on steps that split (whose attention is long anyway),
 * and in exchange carries no state between steps (a counter left behind
 * by an aborted step would silently corrupt a later one), needs no
 * __threadfence or atomics, and keeps the short-row path free of them.
 *
 * Trade-off: simple and exact-order, but each position costs a warp two
 * dependent global loads (block id, then K and V); the next position's are
 * issued before the current one computes, yet small batches stay latency
 * bound here. The speed round's remaining remedies: lanes over positions
 * for the scores, shared K/V tiles for the prefill rows of one sequence,
 * GQA groups sharing one read of K/V. */
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"

#define WARPS 16  /* positions walked in parallel per (row, head); merged in warp order */
#define PER_LANE (SL_CUDA_ATTN_MAX_HEAD_DIM / SL_WARP)

/* Position p's key and value rows for this lane (elements lane, lane+32,
 * ...; zeros past head_dim). V sits n_blocks blocks after K in the layer. */
static __device__ __forceinline__ void load_kv(const sl_cuda_kv &kv, const sl_cuda_batch &b, int layer, int32_t table,
                                               int32_t p, int kvh, int lane, float (&kr)[PER_LANE],
                                               float (&vr)[PER_LANE])
{
    const float *kp = sl_kv_slot(kv, b, layer, 0, table, p, kvh);
    const float *vp = kp + kv.n_blocks * kv.block_floats;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + SL_WARP * i;
        kr[i] = d < kv.head_dim ? kp[d] : 0.0f;
        vr[i] = d < kv.head_dim ? vp[d] : 0.0f;
    }
}

/* Positions [*p0, *p1) of split s of n for a row of context ctx. Non-empty
 * for every s < n: with chunk = roundup16(ceil(ctx / n)) < ctx / n + 16,
 * (n - 1) * chunk < ctx as long as ctx > 16 n (n - 1), and any n the
 * kernel uses has ctx > (n - 1) * SPLIT_MIN >= 16 n (n - 1) (n <= 64). */
static __device__ __forceinline__ void range_of(int32_t ctx, int n, int s, int32_t *p0, int32_t *p1)
{
    int32_t chunk = (ctx + n - 1) / n;
    chunk = (chunk + WARPS - 1) / WARPS * WARPS;
    *p0 = s * chunk;
    *p1 = ctx - *p0 < chunk ? ctx : *p0 + chunk;
}

/* The body of both launches. SPLIT false: the plain launch (gridDim.y 1,
 * part unused), compiled without the split bookkeeping. SPLIT true: part is
 * the split scratch, (T, n_head, gridDim.y, 2 + head_dim). Both run the
 * same floating-point operations in the same order for a row with one
 * split (selftest.cu checks the bits). */
template <bool SPLIT>
static __device__ __forceinline__ void attention_rows(float *__restrict__ out, const float *__restrict__ q,
                                                      int n_head, const sl_cuda_kv &kv, const sl_cuda_batch &b,
                                                      int layer, float scale, float *__restrict__ part)
{
    __shared__ float sm_m[WARPS], sm_l[WARPS];
    __shared__ float sm_o[WARPS][SL_CUDA_ATTN_MAX_HEAD_DIM];
    int64_t t = blockIdx.x / n_head;
    int h = (int)(blockIdx.x % n_head), hd = kv.head_dim;
    int kvh = h / (n_head / kv.n_head_kv);
    int warp = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    int32_t pos = b.tok_pos[t], table = b.tok_table[t];
    int32_t p0 = 0, p1 = pos + 1;
    int n = 1, s = (int)blockIdx.y;
    if (SPLIT) {
        n = sl_cuda_attention_splits(p1);
        n = n < (int)gridDim.y ? n : (int)gridDim.y;
        if (s >= n)
            return;   /* a shorter row of the step: fewer splits */
        if (n > 1)
            range_of(pos + 1, n, s, &p0, &p1);
    }
    const float *qh = q + (t * n_head + h) * hd;

    float qr[PER_LANE], o[PER_LANE], kc[PER_LANE], vc[PER_LANE], kn[PER_LANE], vn[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + SL_WARP * i;
        qr[i] = d < hd ? qh[d] : 0.0f;
        o[i] = kc[i] = vc[i] = kn[i] = vn[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    if (p0 + warp < p1)
        load_kv(kv, b, layer, table, p0 + warp, kvh, lane, kc, vc);
    for (int32_t p = p0 + warp; p < p1; p += WARPS) {
        /* the next position's rows are in flight while this one computes */
        if (p + WARPS < p1)
            load_kv(kv, b, layer, table, p + WARPS, kvh, lane, kn, vn);
        float sc = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + SL_WARP * i;
            if (d < hd)
                sc = fmaf(qr[i], kc[i], sc);
        }
        sc = __fmul_rn(sl_warp_sum(sc), scale);
        float m_new = fmaxf(m, sc);
        float corr = expf(m - m_new), e = expf(sc - m_new);   /* corr = 0 on the first position */
        l = fmaf(l, corr, e);
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + SL_WARP * i;
            if (d < hd)
                o[i] = fmaf(e, vc[i], __fmul_rn(o[i], corr));
            kc[i] = kn[i];
            vc[i] = vn[i];
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + SL_WARP * i;
        if (d < hd)
            sm_o[warp][d] = o[i];
    }
    __syncthreads();
    /* merge the warps in a fixed order; warp 0 always saw position p0, so M is finite */
    float M = sm_m[0];
#pragma unroll
    for (int w = 1; w < WARPS; w++)
        M = fmaxf(M, sm_m[w]);
    float f[WARPS], L = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
        f[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - M) : 0.0f;
        L = fmaf(sm_l[w], f[w], L);
    }
    if (SPLIT && n > 1) {
        /* a split row: the unnormalised state goes to its slot for the merge */
        float *slot = part + ((t * n_head + h) * gridDim.y + s) * (int64_t)(hd + 2);
        if (threadIdx.x == 0) {
            slot[0] = M;
            slot[1] = L;
        }
        for (int d = threadIdx.x; d < hd; d += WARPS * SL_WARP) {
            float acc = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; w++)
                acc = fmaf(sm_o[w][d], f[w], acc);
            slot[2 + d] = acc;
        }
        return;
    }
    float inv = 1.0f / L;
    float *oh = out + (t * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += WARPS * SL_WARP) {
        float acc = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; w++)
            acc = fmaf(sm_o[w][d], f[w], acc);
        oh[d] = __fmul_rn(acc, inv);
    }
}

/* Register budgets, as ptxas gives them on sm_90: the plain kernel 72
 * registers without spills, as before the split existed; the split one
 * with the default bound stops at 64 and spills its range bookkeeping,
 * with a minimum of 1 block per SM it takes 80 and spills nothing. Both
 * hold one 512-thread block per SM. */
static __global__ void __launch_bounds__(WARPS * SL_WARP)
attention_paged_online_softmax(float *__restrict__ out, const float *__restrict__ q, int n_head, sl_cuda_kv kv,
                               sl_cuda_batch b, int layer, float scale)
{
    attention_rows<false>(out, q, n_head, kv, b, layer, scale, NULL);
}

static __global__ void __launch_bounds__(WARPS * SL_WARP, 1)
attention_paged_online_softmax_split(float *__restrict__ out, const float *__restrict__ q, int n_head,
                                     sl_cuda_kv kv, sl_cuda_batch b, int layer, float scale,
                                     float *__restrict__ part)
{
    attention_rows<true>(out, q, n_head, kv, b, layer, scale, part);
}

#define MERGE_THREADS 128

/* One block per (row, head): out = sum_s acc_s e^(M_s - M) / sum_s L_s
 * e^(M_s - M) over the row's n splits, in split order. Rows with n == 1
 * were written by the split kernel: their blocks exit. S: the launch's
 * splits per (row, head), the scratch stride. */
static __global__ void __launch_bounds__(MERGE_THREADS)
attention_merge_splits(float *__restrict__ out, const float *__restrict__ part, int n_head, int hd,
                       const int32_t *__restrict__ tok_pos, int S)
{
    int64_t t = blockIdx.x / n_head;
    int h = (int)(blockIdx.x % n_head);
    int n = sl_cuda_attention_splits((int64_t)tok_pos[t] + 1);
    n = n < S ? n : S;
    if (n == 1)
        return;
    int64_t stride = hd + 2;
    const float *base = part + (t * n_head + h) * S * stride;
    float M = base[0];
#pragma unroll
    for (int s = 1; s < SL_CUDA_ATTN_SPLIT_MAX; s++)
        if (s < n)
            M = fmaxf(M, base[s * stride]);
    float f[SL_CUDA_ATTN_SPLIT_MAX], L = 0.0f;
#pragma unroll
    for (int s = 0; s < SL_CUDA_ATTN_SPLIT_MAX; s++) {
        float ls = s < n ? base[s * stride + 1] : 0.0f;
        f[s] = ls > 0.0f ? expf(base[s * stride] - M) : 0.0f;   /* every range is non-empty: ls >= 1 */
        L = fmaf(ls, f[s], L);
    }
    float inv = 1.0f / L;
    float *oh = out + (t * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += MERGE_THREADS) {
        float acc = 0.0f;
#pragma unroll
        for (int s = 0; s < SL_CUDA_ATTN_SPLIT_MAX; s++)
            if (s < n)
                acc = fmaf(base[s * stride + 2 + d], f[s], acc);
        oh[d] = __fmul_rn(acc, inv);
    }
}

sl_status sl_cuda_attention(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                            const sl_cuda_batch *batch, int layer, int64_t n_ctx, float *scratch,
                            int64_t scratch_floats, cudaStream_t stream)
{
    if (T < 1)
        return SL_OK;
    if (kv->head_dim > SL_CUDA_ATTN_MAX_HEAD_DIM || kv->n_head_kv < 1 || n_head % kv->n_head_kv != 0 ||
        T * n_head > 0x7fffffff)
        return SL_EINVAL;
    float scale = 1.0f / sqrtf((float)kv->head_dim);
    int S = sl_cuda_attention_splits(n_ctx);
    if (S == 1) {
        /* no row splits: the plain launch, one block per (row, head) */
        attention_paged_online_softmax<<<(unsigned)(T * n_head), WARPS * SL_WARP, 0, stream>>>(
            out, q, n_head, *kv, *batch, layer, scale);
        SL_CUDA_CHECK_LAUNCH();
        return SL_OK;
    }
    if (!scratch || scratch_floats / S / (kv->head_dim + 2) < T * n_head)
        return SL_EINVAL;
    dim3 grid((unsigned)(T * n_head), (unsigned)S);
    attention_paged_online_softmax_split<<<grid, WARPS * SL_WARP, 0, stream>>>(out, q, n_head, *kv, *batch, layer,
                                                                                scale, scratch);
    SL_CUDA_CHECK_LAUNCH();
    attention_merge_splits<<<(unsigned)(T * n_head), MERGE_THREADS, 0, stream>>>(out, scratch, n_head,
                                                                                 kv->head_dim, batch->tok_pos, S);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
