/* kernels/cuda/attention.cu: causal attention over the paged KV cache
 * (whole history, or a sliding window of it),
 * one block per (token row, kv head, split): the block serves every query
 * head of its GQA group ("attention_gqa_tiles"); and the merge of a split
 * row's partials ("attention_merge_splits").
 *
 * A block walks its position range in tiles of 32 positions: the tile's K
 * and V rows are copied to shared memory asynchronously (cp.async, two
 * buffers: the next tile is in flight while this one computes), so each
 * K/V row is read once per group instead of once per query head. Warp w
 * owns query heads w, w+4, ... of the group; for a tile it scores all 32
 * positions at once (a lane per position, the dot product in d order),
 * then updates its online softmax state (running max m, denominator l,
 * output o with a lane per head element) over the tile's positions in
 * order. No score matrix is ever stored, and every operation runs in an
 * order fixed by (position, head_dim), so a row's output is the same alone
 * or in any batch.
 *
 * Sliding window (window w > 0): a row at position p walks (p - w, p] only,
 * as if its history began at p - w + 1: the split rule and the ranges below
 * apply to that span's length and are offset by its start, so a windowed
 * row costs at most w positions whatever the context. Scores are
 * soft-capped (cap * tanh(s / cap)) when the launch has a cap.
 *
 * K/V types (paged.cuh): the kernels are instantiated per stored type.
 * f32 rows are copied straight into the float tiles. f16 and q8_0 rows'
 * stored bytes are copied the same way (cp.async, two buffers) into raw
 * buffers, then converted once per tile into one pair of float32 tiles
 * (exact for f16, d * q for q8_0) that the same compute loop reads (f16:
 * each thread converts the chunks it copied, so no barrier is added; q8_0:
 * after a second barrier, a group's scale coming in another thread's
 * chunk), and after the conversion the f32 kernel's
 * arithmetic, so every type is batch invariant the same way and accumulates
 * in float32. The raw buffers take fewer bytes than f32's second pair of
 * float tiles, so no type needs more shared memory than f32.
 *
 * Split-K: a launch with gridDim.y = S > 1 cuts a row of context ctx into
 * n = min(splits(ctx), S) ranges of ceil(ctx / n) positions rounded up to a
 * multiple of the tile (the last one shorter; every range is non-empty, see
 * sl_cuda_attention_range). Block y = s >= n exits at once. A row with n == 1 runs exactly
 * the unsplit code, so short rows are bitwise unchanged by the split
 * launch. A split block writes its unnormalised state (m, l, o) per head to
 * scratch slot (row, head, s); attention_merge_splits merges slots 0..n-1
 * in that order. n depends only on the row's own position, so the result
 * is batch invariant.
 *
 * Merge by a second small kernel rather than "the last block to finish
 * merges" (an atomic counter per (row, head)): it costs one more launch
 * per layer, only on steps that split, and carries no state between steps
 * (a counter left behind by an aborted step would corrupt a later one).
 *
 * Trade-off: one row per block, so the prefill rows of one sequence each
 * read their own prefix (a shared tile of rows would read it once); and a
 * lone short decode row has only n_head_kv blocks (the split rule keeps
 * contexts up to 1,024 whole). Tried and measured on an H200 for that
 * case (1B shape, ~140 positions, ncu), before the HD instantiation:
 * splitting at 64 positions (16 blocks, then the merge) 13.6 us per layer,
 * 8 tiles in flight per block instead of 2 16.3 us, against 13.7 us: a
 * block's time went to its warps' instructions per tile, not to the
 * copies, which is what HD and the shared-memory weights cut (8.1 us). */
#include <cuda_pipeline.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"

#define AW 4                     /* warps per block */
#define AT (AW * SL_WARP)        /* threads per block */
#define TILE SL_CUDA_ATTN_TILE    /* positions per tile: one per lane when scoring */
#define HPW 4                    /* query heads per warp, at most */
#define HB (AW * HPW)            /* query heads per block, at most (larger groups take several blocks) */
#define PER_LANE (SL_CUDA_ATTN_MAX_HEAD_DIM / SL_WARP)

/* Bytes of a stored row of hd values of type kt (paged.cuh). */
static __host__ __device__ __forceinline__ int64_t row_bytes_of(int kt, int hd)
{
    return kt == SL_KV_TYPE_F32 ? (int64_t)hd * 4 : kt == SL_KV_TYPE_F16 ? (int64_t)hd * 2
                                                                          : (int64_t)hd / 32 * SL_KV_Q8_0_BYTES;
}

/* Shared memory of a block, in bytes, for K/V of type kt. f32: two K
 * tiles (rows padded by 4 so a lane per position reads float4s without
 * bank conflicts), two V tiles, and the group's q rows. f16/q8_0: one
 * float32 K tile and one V tile (what the compute loop reads), two
 * buffers of the stored bytes of a K and a V tile (the copies in flight),
 * then the q rows. The q rows come last so a launch can trim the unused
 * heads' rows off the end. */
static __host__ __device__ __forceinline__ int64_t smem_bytes(int kt, int hd)
{
    int64_t q = (int64_t)HB * hd * 4;
    if (kt == SL_KV_TYPE_F32)
        return (2 * (int64_t)TILE * (hd + 4) + 2 * (int64_t)TILE * hd) * 4 + q;
    return ((int64_t)TILE * (hd + 4) + (int64_t)TILE * hd) * 4 + 4 * (int64_t)TILE * row_bytes_of(kt, hd) + q;
}

template <int KT>
static __device__ __forceinline__ int64_t row_bytes(int hd)
{
    return row_bytes_of(KT, hd);
}

/* Four values [d, d + 4) of a stored row, as floats (exact for f16; d * q
 * rounded once for q8_0, as model/quant.c dequantizes). d is a multiple of
 * 4, so the four share one q8_0 group. */
template <int KT>
static __device__ __forceinline__ float4 load4(const uint8_t *row, int d)
{
    if (KT == SL_KV_TYPE_F16) {
        /* hd % 4 == 0: a row is 8-byte aligned, and so is every 4th value */
        uint2 w = *(const uint2 *)(row + 2 * d);
        float2 a = __half22float2(*(const __half2 *)&w.x), b = __half22float2(*(const __half2 *)&w.y);
        return make_float4(a.x, a.y, b.x, b.y);
    }
    const uint8_t *blk = row + (d / 32) * SL_KV_Q8_0_BYTES;
    float sc = __half2float(*(const __half *)blk);
    const int8_t *qs = (const int8_t *)blk + 2 + d % 32;   /* 2-byte aligned only */
    return make_float4(__fmul_rn(sc, (float)qs[0]), __fmul_rn(sc, (float)qs[1]), __fmul_rn(sc, (float)qs[2]),
                       __fmul_rn(sc, (float)qs[3]));
}

/* Queues the copy of positions [pt, pt + np) of kv head kvh; kp[] gets
 * each position's K row first. f32: straight into a K/V pair of float32
 * tiles (sK, sV), asynchronously (cp.async). f16/q8_0: the stored bytes
 * into a raw pair (raw: K rows, then V rows, row_bytes apart),
 * asynchronously in the widest chunks the rows' alignment allows (16 bytes
 * for f16 at head_dim % 8 == 0; q8_0 rows are 4-byte aligned when
 * head_dim % 64 == 0), else (q8_0 at head_dim 96, 160, ...: rows 2-byte
 * aligned) by plain 2-byte copies; convert_tile() turns them into floats. */
template <int HD, int KT>
static __device__ __forceinline__ void stage_tile(const sl_cuda_kv &kv, const sl_cuda_batch &b, int layer,
                                                  int32_t table, int kvh, int32_t pt, int np, float *sK, float *sV,
                                                  uint8_t *raw, const uint8_t **kp)
{
    const int hd = HD ? HD : kv.head_dim, q4 = hd / 4;
    const int64_t rb = row_bytes<KT>(hd);
    if (threadIdx.x < np)
        kp[threadIdx.x] = sl_kv_slot(kv, b, layer, 0, table, pt + (int32_t)threadIdx.x, kvh, rb);
    __syncthreads();
    int64_t v_off = sl_kv_v_offset(kv, rb);
    if (KT == SL_KV_TYPE_F32) {
        for (int c = threadIdx.x; c < np * q4; c += AT) {
            int pl = c / q4, d = (c - pl * q4) * 4;
            const float *src = (const float *)kp[pl] + d;
            __pipeline_memcpy_async(sK + pl * (hd + 4) + d, src, 16);
            __pipeline_memcpy_async(sV + pl * hd + d, (const float *)((const uint8_t *)src + v_off), 16);
        }
        __pipeline_commit();
        return;
    }
    uint8_t *rawV = raw + TILE * rb;
#define RAW_COPY(CH)                                                                          \
    do {                                                                                      \
        const int nc = (int)(rb / (CH));                                                      \
        for (int c = threadIdx.x; c < np * nc; c += AT) {                                     \
            int pl = c / nc, off = (c - pl * nc) * (CH);                                      \
            __pipeline_memcpy_async(raw + pl * rb + off, kp[pl] + off, CH);                   \
            __pipeline_memcpy_async(rawV + pl * rb + off, kp[pl] + v_off + off, CH);          \
        }                                                                                     \
        __pipeline_commit();                                                                  \
    } while (0)
    if (rb % 16 == 0) {
        RAW_COPY(16);
    } else if (rb % 8 == 0) {
        RAW_COPY(8);
    } else if (rb % 4 == 0) {
        RAW_COPY(4);
    } else {
        const int nc = (int)(rb / 2);
        for (int c = threadIdx.x; c < np * nc; c += AT) {
            int pl = c / nc, off = (c - pl * nc) * 2;
            *(uint16_t *)(raw + pl * rb + off) = *(const uint16_t *)(kp[pl] + off);
            *(uint16_t *)(rawV + pl * rb + off) = *(const uint16_t *)(kp[pl] + v_off + off);
        }
    }
#undef RAW_COPY
}

/* q8_0: the np staged rows of a raw K/V pair, converted to the float32
 * tiles the compute loop reads, once all of the block's copies have landed
 * (a value's scale may have come in another thread's chunk). Each value
 * converts the same way whatever the batch, so rows stay batch invariant. */
template <int HD, int KT>
static __device__ __forceinline__ void convert_tile(int hd, int np, const uint8_t *raw, float *sK, float *sV)
{
    const int q4 = hd / 4;
    const int64_t rb = row_bytes<KT>(hd);
    const uint8_t *rawV = raw + TILE * rb;
    for (int c = threadIdx.x; c < np * q4; c += AT) {
        int pl = c / q4, d = (c - pl * q4) * 4;
        *(float4 *)(sK + pl * (hd + 4) + d) = load4<KT>(raw + pl * rb, d);
        *(float4 *)(sV + pl * hd + d) = load4<KT>(rawV + pl * rb, d);
    }
}

/* f16: each thread converts the chunks it copied itself (stage_tile's
 * mapping of chunks to threads, 16 or 8 bytes), which its own wait makes
 * visible to it: no barrier between the copies landing and the conversion,
 * so an f16 tile costs the f32 tile's barriers. */
template <int HD>
static __device__ __forceinline__ void convert_own_f16(int hd, int np, const uint8_t *raw, float *sK, float *sV)
{
    const int64_t rb = (int64_t)hd * 2;
    const uint8_t *rawV = raw + TILE * rb;
    const int ch = rb % 16 == 0 ? 16 : 8, nc = (int)(rb / ch);
    for (int c = threadIdx.x; c < np * nc; c += AT) {
        int pl = c / nc, off = (c - pl * nc) * ch, d = off / 2;
        for (int j = 0; j < ch / 8; j++) {
            *(float4 *)(sK + pl * (hd + 4) + d + 4 * j) = load4<SL_KV_TYPE_F16>(raw + pl * rb, d + 4 * j);
            *(float4 *)(sV + pl * hd + d + 4 * j) = load4<SL_KV_TYPE_F16>(rawV + pl * rb, d + 4 * j);
        }
    }
}

/* SPLIT false: the plain launch (gridDim.y 1, part unused). SPLIT true:
 * part is the split scratch, (T, n_head, gridDim.y, 2 + head_dim). Both run
 * the same operations in the same order for a row with one split.
 * HD: head_dim known at compile time (64, 128, 256), or 0 for any other, read
 * from kv. Same arithmetic either way; a fixed HD drops the predicated
 * lanes past head_dim (at 64, 6 of every 8 per-lane slots) and the loop
 * overhead, which is most of a lone decode row's time (ncu at HD 0,
 * head_dim 64: the SMs issuing for the whole kernel, 21.9 of 31.2 active
 * lanes not predicated off). */
template <bool SPLIT, int HD, int KT>
static __device__ __forceinline__ void attention_rows(float *__restrict__ out, const float *__restrict__ q,
                                                      int n_head, const sl_cuda_kv &kv, const sl_cuda_batch &b,
                                                      int layer, float scale, float softcap, int32_t window,
                                                      const float *__restrict__ sinks, float *__restrict__ part,
                                                      int hb, int n_hgroups, const int32_t *__restrict__ rows)
{
    extern __shared__ float4 smem4[];
    __shared__ const uint8_t *kp[2][TILE];
    __shared__ float sE[AW][TILE];   /* each warp's softmax weights of the tile */
    float *smem = (float *)smem4;
    constexpr int PL = HD ? HD / SL_WARP : PER_LANE;   /* head elements per lane */
    const int hd = HD ? HD : kv.head_dim, ldk = hd + 4;
    /* f32: buffer i: K at smem + i * TILE * ldk, V at sV0 + i * TILE * hd.
     * f16/q8_0: one float K tile at smem, V at sV0; raw buffer i at raw + i * 2 * TILE * rb */
    constexpr bool CONV = KT != SL_KV_TYPE_F32;
    constexpr int NBUF = CONV ? 1 : 2;   /* float tile pairs */
    const int64_t rb = row_bytes<KT>(hd);
    float *sV0 = smem + NBUF * TILE * ldk;
    uint8_t *raw = (uint8_t *)(sV0 + NBUF * TILE * hd);
    float *sQ = CONV ? (float *)(raw + 4 * TILE * rb) : (float *)raw;

    int64_t blk = blockIdx.x;
    int hg = (int)(blk % n_hgroups);
    blk /= n_hgroups;
    int kvh = (int)(blk % kv.n_head_kv);
    int64_t t = blk / kv.n_head_kv;
    if (rows)   /* a launch over some of the step's rows */
        t = rows[t];
    int G = n_head / kv.n_head_kv;
    int h0 = kvh * G + hg * hb;
    int nh = G - hg * hb < hb ? G - hg * hb : hb;
    int warp = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    int32_t pos = b.tok_pos[t], table = b.tok_table[t];
    int32_t lo = sl_cuda_attention_window_start(pos, window);   /* the row sees [lo, pos] */
    int32_t p0 = lo, p1 = pos + 1;
    int n = 1, s = (int)blockIdx.y;
    if (SPLIT) {
        n = sl_cuda_attention_splits(p1 - lo);
        n = n < (int)gridDim.y ? n : (int)gridDim.y;
        if (s >= n)
            return;   /* a shorter row of the step: fewer splits */
        if (n > 1) {
            sl_cuda_attention_range(p1 - lo, n, s, &p0, &p1);
            p0 += lo;
            p1 += lo;
        }
    }
    const float *qh = q + (t * n_head + h0) * hd;   /* the group's heads are contiguous */
    for (int i = threadIdx.x; i < nh * hd; i += AT)
        sQ[i] = qh[i];

    float m[HPW], l[HPW], o[HPW][PL];
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < PL; i++)
            o[j][i] = 0.0f;
    }
    stage_tile<HD, KT>(kv, b, layer, table, kvh, p0, p1 - p0 < TILE ? p1 - p0 : TILE, smem, sV0, raw, kp[0]);
    int buf = 0;
    for (int32_t pt = p0; pt < p1; pt += TILE, buf ^= 1) {
        int np = p1 - pt < TILE ? p1 - pt : TILE;
        int32_t nxt = pt + TILE;
        if (nxt < p1) {
            stage_tile<HD, KT>(kv, b, layer, table, kvh, nxt, p1 - nxt < TILE ? p1 - nxt : TILE,
                               smem + (CONV ? 0 : buf ^ 1) * TILE * ldk, sV0 + (CONV ? 0 : buf ^ 1) * TILE * hd,
                               raw + (buf ^ 1) * 2 * TILE * rb, kp[buf ^ 1]);
            __pipeline_wait_prior(1);   /* this tile's copies are done, the next one's may fly */
        } else {
            __pipeline_wait_prior(0);
        }
        if (KT == SL_KV_TYPE_F16)   /* the float tiles were last read before the previous barrier */
            convert_own_f16<HD>(hd, np, raw + buf * 2 * TILE * rb, smem, sV0);
        __syncthreads();
        if (KT == SL_KV_TYPE_Q8_0) {
            convert_tile<HD, KT>(hd, np, raw + buf * 2 * TILE * rb, smem, sV0);
            __syncthreads();
        }
        const float *K = smem + (CONV ? 0 : buf) * TILE * ldk, *Vt = sV0 + (CONV ? 0 : buf) * TILE * hd;
#pragma unroll
        for (int j = 0; j < HPW; j++) {
            int g = warp + AW * j;
            if (g >= nh)
                continue;   /* uniform across the warp */
            float sc = -INFINITY;
            if (lane < np) {
                const float4 *kr = (const float4 *)(K + lane * ldk);
                const float4 *qg = (const float4 *)(sQ + g * hd);
                float acc = 0.0f;
                for (int d4 = 0; d4 < hd / 4; d4++) {
                    float4 k4 = kr[d4], q4 = qg[d4];
                    acc = fmaf(q4.x, k4.x, acc);
                    acc = fmaf(q4.y, k4.y, acc);
                    acc = fmaf(q4.z, k4.z, acc);
                    acc = fmaf(q4.w, k4.w, acc);
                }
                sc = __fmul_rn(acc, scale);
                if (softcap > 0.0f)
                    sc = __fmul_rn(softcap, tanhf(__fdiv_rn(sc, softcap)));
            }
            float tmax = sc;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
            float m_new = fmaxf(m[j], tmax);   /* finite: lane 0 always holds a position */
            float corr = expf(m[j] - m_new);    /* 0 on the first tile */
            float e = lane < np ? expf(sc - m_new) : 0.0f;
            l[j] = fmaf(l[j], corr, sl_warp_sum(e));
#pragma unroll
            for (int i = 0; i < PL; i++)
                o[j][i] = __fmul_rn(o[j][i], corr);
            /* the weights reach every lane through shared memory: a shuffle
             * per position would put its latency in the chain of each fma */
            sE[warp][lane] = e;
            __syncwarp();
#pragma unroll 8
            for (int p = 0; p < np; p++) {
                float ep = sE[warp][p];
                const float *vr = Vt + p * hd;
#pragma unroll
                for (int i = 0; i < PL; i++) {
                    int d = lane + SL_WARP * i;
                    if (HD || d < hd)
                        o[j][i] = fmaf(ep, vr[d], o[j][i]);
                }
            }
            __syncwarp();   /* sE is rewritten for the next head */
            m[j] = m_new;
        }
        __syncthreads();   /* the buffer is refilled two tiles on (f16/q8_0: the float tiles at the next) */
    }
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        int g = warp + AW * j;
        if (g >= nh)
            continue;
        int h = h0 + g;
        if (SPLIT && n > 1) {
            /* a split row: the unnormalised state goes to its slot for the merge */
            float *slot = part + ((t * n_head + h) * gridDim.y + s) * (int64_t)(hd + 2);
            if (lane == 0) {
                slot[0] = m[j];
                slot[1] = l[j];
            }
#pragma unroll
            for (int i = 0; i < PL; i++) {
                int d = lane + SL_WARP * i;
                if (HD || d < hd)
                    slot[2 + d] = o[j][i];
            }
        } else {
            float lj = l[j];
            if (sinks) {
                /* gpt-oss's sink: one more logit in the denominator, with no value */
                float sk = sinks[h], mn = fmaxf(m[j], sk), c = expf(m[j] - mn);
                lj = fmaf(lj, c, expf(sk - mn));
#pragma unroll
                for (int i = 0; i < PL; i++)
                    o[j][i] = __fmul_rn(o[j][i], c);
            }
            float inv = 1.0f / lj;
            float *oh = out + (t * n_head + h) * hd;
#pragma unroll
            for (int i = 0; i < PL; i++) {
                int d = lane + SL_WARP * i;
                if (HD || d < hd)
                    oh[d] = __fmul_rn(o[j][i], inv);
            }
        }
    }
}

template <int HD, int KT>
static __global__ void __launch_bounds__(AT)
attention_gqa_tiles(float *__restrict__ out, const float *__restrict__ q, int n_head, sl_cuda_kv kv,
                    sl_cuda_batch b, int layer, float scale, float softcap, int32_t window,
                    const float *__restrict__ sinks, int hb, int n_hgroups, const int32_t *__restrict__ rows)
{
    attention_rows<false, HD, KT>(out, q, n_head, kv, b, layer, scale, softcap, window, sinks, NULL, hb, n_hgroups,
                                  rows);
}

template <int HD, int KT>
static __global__ void __launch_bounds__(AT)
attention_gqa_tiles_split(float *__restrict__ out, const float *__restrict__ q, int n_head, sl_cuda_kv kv,
                          sl_cuda_batch b, int layer, float scale, float softcap, int32_t window,
                          const float *__restrict__ sinks, float *__restrict__ part, int hb, int n_hgroups,
                          const int32_t *__restrict__ rows)
{
    attention_rows<true, HD, KT>(out, q, n_head, kv, b, layer, scale, softcap, window, sinks, part, hb, n_hgroups,
                                 rows);
}

#define MERGE_THREADS 128

/* One block per (row, head): out = sum_s acc_s e^(M_s - M) / sum_s L_s
 * e^(M_s - M) over the row's n splits, in split order. Rows with n == 1
 * were written by the split kernel: their blocks exit. S: the launch's
 * splits per (row, head), the scratch stride; window: the launch's (n
 * counts the span the row walked). sinks (gpt-oss): head h's logit joins
 * M and adds e^(sink - M) to the denominator, first. */
static __global__ void __launch_bounds__(MERGE_THREADS)
attention_merge_splits(float *__restrict__ out, const float *__restrict__ part, int n_head, int hd,
                       const int32_t *__restrict__ tok_pos, int S, int32_t window, const float *__restrict__ sinks,
                       const int32_t *__restrict__ rows)
{
    int64_t t = blockIdx.x / n_head;
    if (rows)
        t = rows[t];
    int h = (int)(blockIdx.x % n_head);
    int32_t pos = tok_pos[t];
    int n = sl_cuda_attention_splits((int64_t)pos + 1 - sl_cuda_attention_window_start(pos, window));
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
    float L = 0.0f;
    if (sinks) {
        M = fmaxf(M, sinks[h]);
        L = expf(sinks[h] - M);
    }
    float f[SL_CUDA_ATTN_SPLIT_MAX];
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

/* Above 48 KiB of shared memory (head_dim > 64) a kernel must opt in. */
static bool prepared;

sl_status sl_cuda_attention_prepare(void)
{
    if (prepared)
        return SL_OK;
    int bytes = (int)smem_bytes(SL_KV_TYPE_F32, SL_CUDA_ATTN_MAX_HEAD_DIM);   /* the most of any type */
#define ALLOW(K) SL_CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))
#define ALLOW_TYPE(KT)                              \
    do {                                            \
        ALLOW((attention_gqa_tiles<0, KT>));        \
        ALLOW((attention_gqa_tiles<64, KT>));       \
        ALLOW((attention_gqa_tiles<128, KT>));      \
        ALLOW((attention_gqa_tiles<256, KT>));      \
        ALLOW((attention_gqa_tiles_split<0, KT>));  \
        ALLOW((attention_gqa_tiles_split<64, KT>)); \
        ALLOW((attention_gqa_tiles_split<128, KT>));\
        ALLOW((attention_gqa_tiles_split<256, KT>));\
    } while (0)
    ALLOW_TYPE(SL_KV_TYPE_F32);
    ALLOW_TYPE(SL_KV_TYPE_F16);
    ALLOW_TYPE(SL_KV_TYPE_Q8_0);
#undef ALLOW_TYPE
#undef ALLOW
    prepared = true;
    return SL_OK;
}

#define TRY_PREPARE()                                \
    do {                                             \
        if (sl_cuda_attention_prepare() < 0)         \
            return SL_EBACKEND;                      \
    } while (0)

sl_status sl_cuda_attention(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                            const sl_cuda_batch *batch, int layer, int64_t n_ctx, float *scratch,
                            int64_t scratch_floats, cudaStream_t stream)
{
    sl_cuda_attn_opts o = {1.0f / sqrtf((float)kv->head_dim), 0.0f, 0, NULL};
    return sl_cuda_attention_layer(out, q, T, n_head, kv, batch, layer, n_ctx, &o, scratch, scratch_floats, stream);
}

sl_status sl_cuda_attention_layer(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                                  const sl_cuda_batch *batch, int layer, int64_t n_ctx, const sl_cuda_attn_opts *opts,
                                  float *scratch, int64_t scratch_floats, cudaStream_t stream)
{
    return sl_cuda_attention_layer_rows(out, q, T, NULL, T, n_head, kv, batch, layer, n_ctx, opts, scratch,
                                        scratch_floats, stream);
}

sl_status sl_cuda_attention_layer_rows(float *out, const float *q, int64_t T, const int32_t *rows, int64_t n_rows,
                                       int n_head, const sl_cuda_kv *kv, const sl_cuda_batch *batch, int layer,
                                       int64_t n_ctx, const sl_cuda_attn_opts *opts, float *scratch,
                                       int64_t scratch_floats, cudaStream_t stream)
{
    if (T < 1 || n_rows < 1)
        return SL_OK;
    if (n_rows > T || (!rows && n_rows != T))
        return SL_EINVAL;
    int hd = kv->head_dim;
    if (hd > SL_CUDA_ATTN_MAX_HEAD_DIM || hd % 4 != 0 || kv->n_head_kv < 1 || n_head % kv->n_head_kv != 0 ||
        T * n_head > 0x7fffffff || opts->window < 0 || !(opts->softcap >= 0.0f) ||
        sl_kv_row_bytes(kv->type, hd) == 0)
        return SL_EINVAL;
    /* a windowed layer's rows walk at most `window` positions: its splits follow that span */
    if (opts->window > 0 && n_ctx > opts->window)
        n_ctx = opts->window;
    /* a group of G query heads takes ceil(G / HB) blocks of at most HB heads each */
    int G = n_head / kv->n_head_kv, n_hgroups = (G + HB - 1) / HB, hb = (G + n_hgroups - 1) / n_hgroups;
    int64_t blocks = n_rows * kv->n_head_kv * n_hgroups;
    size_t smem = (size_t)(smem_bytes(kv->type, hd) - (int64_t)(HB - hb) * hd * 4);   /* q rows: hb of HB */
    TRY_PREPARE();
    float scale = opts->scale, softcap = opts->softcap;
    int32_t window = opts->window;
    const float *sinks = opts->sinks;
    int S = sl_cuda_attention_launch_splits(n_ctx);
    if (S > 1 && (!scratch || scratch_floats / S / (hd + 2) < T * n_head))
        return SL_EINVAL;
    dim3 grid((unsigned)blocks, (unsigned)S);
#define LAUNCH(HD, KT)                                                                                            \
    do {                                                                                                          \
        if (S == 1)   /* no row splits: the plain launch */                                                      \
            attention_gqa_tiles<HD, KT><<<grid, AT, smem, stream>>>(out, q, n_head, *kv, *batch, layer, scale,    \
                                                                     softcap, window, sinks, hb, n_hgroups, rows);\
        else                                                                                                      \
            attention_gqa_tiles_split<HD, KT><<<grid, AT, smem, stream>>>(out, q, n_head, *kv, *batch, layer,     \
                                                                           scale, softcap, window, sinks, scratch,\
                                                                           hb, n_hgroups, rows);                  \
    } while (0)
#define LAUNCH_HD(KT)                          \
    do {                                       \
        switch (hd) {                          \
        case 64: LAUNCH(64, KT); break;        \
        case 128: LAUNCH(128, KT); break;      \
        case 256: LAUNCH(256, KT); break;      \
        default: LAUNCH(0, KT); break;         \
        }                                      \
    } while (0)
    switch (kv->type) {
    case SL_KV_TYPE_F16: LAUNCH_HD(SL_KV_TYPE_F16); break;
    case SL_KV_TYPE_Q8_0: LAUNCH_HD(SL_KV_TYPE_Q8_0); break;
    default: LAUNCH_HD(SL_KV_TYPE_F32); break;
    }
#undef LAUNCH_HD
#undef LAUNCH
    SL_CUDA_CHECK_LAUNCH();
    if (S == 1)
        return SL_OK;
    attention_merge_splits<<<(unsigned)(n_rows * n_head), MERGE_THREADS, 0, stream>>>(out, scratch, n_head, hd,
                                                                                      batch->tok_pos, S, window,
                                                                                      sinks, rows);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
