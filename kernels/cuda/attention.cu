/* kernels/cuda/attention.cu: one 16-warp block per (token row, query head)
 * with online softmax ("attention_paged_online_softmax").
 *
 * Warp w walks positions w, w+16, w+32, ... of [0, pos]; a lane holds head
 * elements lane, lane+32, ... of q and of its running output, so a score is
 * one butterfly sum and no score matrix is ever stored. Each warp keeps its
 * own running max m, denominator l and output; the 16 are merged at the
 * end in warp order. (16 warps rather than 8: a decode row's positions are
 * walked in half the dependent steps; 32 would spill registers.) Every
 * step is in an order fixed by (pos, head_dim), so a row's output is the
 * same alone or batched.
 *
 * Trade-off: simple and exact-order, but each position costs a warp two
 * dependent global loads (block id, then K and V); the next position's are
 * issued before the current one computes, yet small batches stay latency
 * bound here. The speed round's remedies: lanes over positions for the
 * scores, split-K over long contexts (flash-decoding), shared K/V tiles for
 * the prefill rows of one sequence, GQA groups sharing one read of K/V. */
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

static __global__ void __launch_bounds__(WARPS * SL_WARP)
attention_paged_online_softmax(float *__restrict__ out, const float *__restrict__ q, int n_head, sl_cuda_kv kv,
                               sl_cuda_batch b, int layer, float scale)
{
    __shared__ float sm_m[WARPS], sm_l[WARPS];
    __shared__ float sm_o[WARPS][SL_CUDA_ATTN_MAX_HEAD_DIM];
    int64_t t = blockIdx.x / n_head;
    int h = (int)(blockIdx.x % n_head), hd = kv.head_dim;
    int kvh = h / (n_head / kv.n_head_kv);
    int warp = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    int32_t pos = b.tok_pos[t], table = b.tok_table[t];
    const float *qh = q + (t * n_head + h) * hd;

    float qr[PER_LANE], o[PER_LANE], kc[PER_LANE], vc[PER_LANE], kn[PER_LANE], vn[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        int d = lane + SL_WARP * i;
        qr[i] = d < hd ? qh[d] : 0.0f;
        o[i] = kc[i] = vc[i] = kn[i] = vn[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    if (warp <= pos)
        load_kv(kv, b, layer, table, warp, kvh, lane, kc, vc);
    for (int32_t p = warp; p <= pos; p += WARPS) {
        /* the next position's rows are in flight while this one computes */
        if (p + WARPS <= pos)
            load_kv(kv, b, layer, table, p + WARPS, kvh, lane, kn, vn);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            int d = lane + SL_WARP * i;
            if (d < hd)
                s = fmaf(qr[i], kc[i], s);
        }
        s = __fmul_rn(sl_warp_sum(s), scale);
        float m_new = fmaxf(m, s);
        float corr = expf(m - m_new), e = expf(s - m_new);   /* corr = 0 on the first position */
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
    /* merge the warps in a fixed order; warp 0 always saw position 0, so M is finite */
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

sl_status sl_cuda_attention(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                            const sl_cuda_batch *batch, int layer, cudaStream_t stream)
{
    if (T < 1)
        return SL_OK;
    if (kv->head_dim > SL_CUDA_ATTN_MAX_HEAD_DIM || kv->n_head_kv < 1 || n_head % kv->n_head_kv != 0 ||
        T * n_head > 0x7fffffff)
        return SL_EINVAL;
    float scale = 1.0f / sqrtf((float)kv->head_dim);
    attention_paged_online_softmax<<<(unsigned)(T * n_head), WARPS * SL_WARP, 0, stream>>>(
        out, q, n_head, *kv, *batch, layer, scale);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
