/* kernels/cuda/attention_fa.cu: tensor-core flash attention for prompt rows
 * over the f16 paged KV cache ("attention_fa_tiles"), one block per (query
 * group, kv head); attention_fa.cuh states the tiling and the guarantee.
 *
 * A block is 4 warps; warp w owns query rows 16w..16w+15 of the 64 (row r
 * is position r / G of the group, query head r % G of the kv head's GQA
 * group; rows past the group are padding: q zero, fully masked, never
 * written). Per K/V tile of 64 positions:
 *   1. S (16 x 64) = Q_w K^T with nvcuda::wmma 16x16x16 (f16 in, f32 out),
 *      stored to the warp's score tile in shared memory;
 *   2. two lanes per row apply scale, soft cap and the row's mask (causal
 *      and window), and update the row's running max m and sum l (of the
 *      float32 weights, as FlashAttention does: the f16 rounding of P then
 *      stays a 2^-11 relative error per weight); the weights P = exp(s - m)
 *      are rounded to f16 and written over the row's scores;
 *   3. the output accumulators (16 x head_dim in wmma fragments, kept in
 *      registers) are rescaled by each row's exp(m_old - m_new), then
 *      O += P V.
 * The rescale needs to know which row each accumulator element holds,
 * which the wmma API leaves opaque: each warp loads a 16 x 16 matrix whose
 * element (r, c) is r into an accumulator fragment once, so element i of
 * any fragment of that type is row rowmap[i] (load and mma use one layout
 * per fragment type). No mma.sync layout is assumed.
 *
 * Masks and empty tiles: a score a row does not see is -inf before the
 * max. A row whose tile is wholly masked keeps m (or -inf, with factor 1
 * instead of exp(-inf - -inf) = NaN), adds 0 to l and multiplies O by 1:
 * bitwise a no-op, which is why walking extra tiles (another row of the
 * group sees them) does not change a row's bits. K/V positions outside
 * the group's visible span [first row's window start, last row] are not
 * read (the block table may not cover them) and stored as zeros, so no
 * NaN of a stale slot meets a zero weight.
 *
 * Sinks (gpt-oss): a row's head logit joins its max and denominator after
 * the last tile, folded into the row's final multiplier (no extra pass).
 *
 * Copies: K/V tiles go to shared memory with cp.async, two buffers (the
 * next tile in flight while this one computes), 16 bytes per copy (f16
 * rows of head_dim % 8 == 0 are 16-byte aligned).
 *
 * Trade-off: wmma with every fragment loaded from shared memory (no
 * ldmatrix/mma.sync, no wgmma): slower than a Hopper-tuned kernel, but
 * its correctness rests on the documented API only. Blocks are launched
 * longest-first (the last group of a chunk sees the most positions). No
 * split over positions: a group walks its whole span in one block, which
 * suits prompt chunks (many groups per step); decode rows, which would be
 * one long-walking block each, stay with attention.cu's split kernel
 * (forward.cu sends them there, also beside a prompt chunk). */
#include <cuda_pipeline.h>
#include <mma.h>

#include "kernels/cuda/attention_fa.cuh"
#include "kernels/cuda/common.cuh"

using namespace nvcuda;

#define FW SL_CUDA_FA_WARPS          /* warps per block */
#define FT (FW * SL_WARP)          /* threads per block */
#define BM SL_CUDA_FA_ROWS         /* query rows per block */
#define BN SL_CUDA_FA_TILE         /* K/V positions per tile */
/* floats per score row: a multiple of 4 (wmma), and 8 past the tile so the
 * float4 reads of step 2 (lane pair columns interleaved by 4) hit 8 rows'
 * distinct banks */
#define LDS (BN + 8)
#define LDP (2 * LDS)              /* halves per weight row, written over its score row */
static_assert(BM == FW * 16, "a warp owns 16 query rows");

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> frag_bt;   /* K^T */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> frag_b;    /* V */
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* halves per Q/K/V row in shared memory: 16 bytes of padding against bank conflicts */
static __host__ __device__ __forceinline__ int ldh(int hd)
{
    return hd + 8;
}

/* Queues positions [kt, kt + BN) of kv head kvh into sK/sV: those in
 * [vlo, vhi) by cp.async from the cache, the others as zeros. kp: the
 * block's pointer slots for this buffer. */
template <int HD>
static __device__ __forceinline__ void fa_stage(const sl_cuda_kv &kv, const sl_cuda_batch &b, int layer,
                                                int32_t table, int kvh, int32_t kt, int32_t vlo, int32_t vhi,
                                                __half *sK, __half *sV, const uint8_t **kp)
{
    constexpr int NC = HD / 8;   /* 16-byte chunks per row */
    const int64_t rb = (int64_t)HD * 2;
    if (threadIdx.x < BN) {
        int32_t p = kt + (int32_t)threadIdx.x;
        kp[threadIdx.x] = p >= vlo && p < vhi ? sl_kv_slot(kv, b, layer, 0, table, p, kvh, rb) : NULL;
    }
    __syncthreads();
    const int64_t v_off = sl_kv_v_offset(kv, rb);
    for (int c = threadIdx.x; c < BN * NC; c += FT) {
        int pl = c / NC, off = (c - pl * NC) * 8;
        __half *dk = sK + pl * ldh(HD) + off, *dv = sV + pl * ldh(HD) + off;
        const uint8_t *src = kp[pl];
        if (src) {
            __pipeline_memcpy_async(dk, src + off * 2, 16);
            __pipeline_memcpy_async(dv, src + v_off + off * 2, 16);
        } else {
            *(uint4 *)dk = make_uint4(0, 0, 0, 0);
            *(uint4 *)dv = make_uint4(0, 0, 0, 0);
        }
    }
    __pipeline_commit();
}

template <int HD>
static __global__ void __launch_bounds__(FT)
attention_fa_tiles(float *__restrict__ out, const float *__restrict__ q, int n_head, sl_cuda_kv kv, sl_cuda_batch b,
                   const int32_t *__restrict__ groups, int64_t n_groups, int layer, float scale, float softcap,
                   int32_t window, const float *__restrict__ sinks)
{
    extern __shared__ __align__(128) unsigned char fa_smem[];
    __shared__ const uint8_t *kp[2][BN];
    __shared__ float sCorr[FW][16];   /* each row's factor of this tile, then its 1 / l */
    constexpr int LH = HD + 8, NF = HD / 16;
    __half *sQ = (__half *)fa_smem;
    __half *sK0 = sQ + BM * LH;            /* buffers 0, 1 */
    __half *sV0 = sK0 + 2 * BN * LH;       /* buffers 0, 1 */
    float *sS = (float *)(sV0 + 2 * BN * LH);

    const int warp = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    const int64_t gi = n_groups - 1 - blockIdx.x;   /* longest first */
    const int kvh = blockIdx.y, G = n_head / kv.n_head_kv, qp = sl_cuda_fa_group_positions(G);
    const int32_t t0 = groups[2 * gi], nrows = groups[2 * gi + 1] - t0;
    const int32_t pos0 = b.tok_pos[t0], table = b.tok_table[t0], pmax = pos0 + nrows - 1;
    const int32_t lo0 = sl_cuda_attention_window_start(pos0, window);   /* the group's first visible position */

    /* Q rows as f16; padding rows zero */
    for (int c = threadIdx.x; c < BM * (HD / 4); c += FT) {
        int r = c / (HD / 4), d = (c - r * (HD / 4)) * 4, qi = r / G;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < qp * G && qi < nrows)
            v = *(const float4 *)(q + ((int64_t)(t0 + qi) * n_head + kvh * G + r % G) * HD + d);
        __half2 *dst = (__half2 *)(sQ + r * LH + d);
        dst[0] = __floats2half2_rn(v.x, v.y);
        dst[1] = __floats2half2_rn(v.z, v.w);
    }

    /* the row this lane scores (two lanes per row, 32 columns each) */
    float *sSw = sS + warp * 16 * LDS;
    const int rl = lane >> 1, c4 = (lane & 1) * 4;
    const int rr = warp * 16 + rl, rq = rr / G;
    const bool rvalid = rr < qp * G && rq < nrows;
    const int32_t rpos = pos0 + rq, rlo = sl_cuda_attention_window_start(rpos, window);
    /* the span the warp's rows see, for skipping tiles none of them sees */
    int32_t whi = rvalid ? rpos : -1, wlo = rvalid ? rlo : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, o));
        wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, o));
    }

    /* rowmap[i]: the row of element i of an accumulator fragment */
    frag_c o[NF], acc[BN / 16];
    int rowmap[frag_c::num_elements];
    for (int i = lane; i < 16 * 16; i += SL_WARP)
        sSw[(i / 16) * LDS + i % 16] = (float)(i / 16);
    __syncwarp();
    wmma::load_matrix_sync(acc[0], sSw, LDS, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < frag_c::num_elements; i++)
        rowmap[i] = (int)acc[0].x[i];
#pragma unroll
    for (int f = 0; f < NF; f++)
        wmma::fill_fragment(o[f], 0.0f);
    float m = -INFINITY, l = 0.0f;

    const int32_t kt0 = lo0 / BN * BN;
    fa_stage<HD>(kv, b, layer, table, kvh, kt0, lo0, pmax + 1, sK0, sV0, kp[0]);
    int buf = 0;
    for (int32_t kt = kt0; kt <= pmax; kt += BN, buf ^= 1) {
        if (kt + BN <= pmax) {
            fa_stage<HD>(kv, b, layer, table, kvh, kt + BN, lo0, pmax + 1, sK0 + (buf ^ 1) * BN * LH,
                         sV0 + (buf ^ 1) * BN * LH, kp[buf ^ 1]);
            __pipeline_wait_prior(1);   /* this tile's copies are done, the next one's may fly */
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();
        const __half *K = sK0 + buf * BN * LH, *V = sV0 + buf * BN * LH;
        /* a tile none of the warp's rows sees is a no-op for them: skip it (warp-uniform) */
        if (kt <= whi && kt + BN > wlo) {
            /* 1. S = Q_w K^T */
#pragma unroll
            for (int j = 0; j < BN / 16; j++)
                wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
            for (int k = 0; k < NF; k++) {
                frag_a a;
                wmma::load_matrix_sync(a, sQ + warp * 16 * LH + k * 16, LH);
#pragma unroll
                for (int j = 0; j < BN / 16; j++) {
                    frag_bt bt;
                    wmma::load_matrix_sync(bt, K + j * 16 * LH + k * 16, LH);
                    wmma::mma_sync(acc[j], a, bt, acc[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < BN / 16; j++)
                wmma::store_matrix_sync(sSw + j * 16, acc[j], LDS, wmma::mem_row_major);
            __syncwarp();

            /* 2. the row's masked scores, its running max and sum, its f16 weights
             * (this lane: columns 8i + c4 .. 8i + c4 + 3) */
            float s[BN / 2], mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < BN / 8; i++) {
                float4 v4 = *(const float4 *)(sSw + rl * LDS + 8 * i + c4);
                float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int32_t p = kt + 8 * i + c4 + j;
                    float v = -INFINITY;
                    if (rvalid && p >= rlo && p <= rpos) {
                        v = __fmul_rn(vv[j], scale);
                        if (softcap > 0.0f)
                            v = __fmul_rn(softcap, tanhf(__fdiv_rn(v, softcap)));
                    }
                    s[4 * i + j] = v;
                    mx = fmaxf(mx, v);
                }
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            float m_new = fmaxf(m, mx);
            /* an unchanged max gives factor 1 exactly (no ex2 rounding: a tile the row
             * does not see must be a no-op); a row that has seen nothing yet keeps
             * -inf, factor 1 and weights 0 */
            float corr = m == m_new ? 1.0f : __expf(m - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < BN / 2; c++) {
                s[c] = m_new == -INFINITY ? 0.0f : __expf(s[c] - m_new);
                sum += s[c];
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);   /* a + b == b + a: both lanes agree */
            l = fmaf(l, corr, sum);
            m = m_new;
            __syncwarp();   /* every score is read before the weights overwrite them */
            __half *prow = (__half *)(sSw + rl * LDS);
#pragma unroll
            for (int i = 0; i < BN / 8; i++) {
                /* one conversion instruction per pair */
                __half2 w[2] = {__floats2half2_rn(s[4 * i], s[4 * i + 1]),
                                __floats2half2_rn(s[4 * i + 2], s[4 * i + 3])};
                uint2 u;
                memcpy(&u, w, sizeof u);
                *(uint2 *)(prow + 8 * i + c4) = u;
            }
            if ((lane & 1) == 0)
                sCorr[warp][rl] = corr;
            __syncwarp();

            /* 3. O = O * corr + P V */
            float cr[frag_c::num_elements];
#pragma unroll
            for (int i = 0; i < frag_c::num_elements; i++)
                cr[i] = sCorr[warp][rowmap[i]];
            frag_a pa[BN / 16];
#pragma unroll
            for (int k = 0; k < BN / 16; k++)
                wmma::load_matrix_sync(pa[k], (const __half *)sSw + k * 16, LDP);
#pragma unroll
            for (int f = 0; f < NF; f++) {
#pragma unroll
                for (int i = 0; i < frag_c::num_elements; i++)
                    o[f].x[i] = __fmul_rn(o[f].x[i], cr[i]);
#pragma unroll
                for (int k = 0; k < BN / 16; k++) {
                    frag_b vb;
                    wmma::load_matrix_sync(vb, V + k * 16 * LH + f * 16, LH);
                    wmma::mma_sync(o[f], pa[k], vb, o[f]);
                }
            }
            __syncwarp();   /* the score tile is rewritten by the next tile */
        }
        __syncthreads();   /* the buffer is refilled two tiles on */
    }

    /* O / l, through shared memory (the K/V buffers are free now) */
    float *sO = (float *)sK0 + warp * 16 * (HD + 4);
#pragma unroll
    for (int f = 0; f < NF; f++)
        wmma::store_matrix_sync(sO + f * 16, o[f], HD + 4, wmma::mem_row_major);
    float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    if (sinks && rvalid) {
        /* gpt-oss's sink: the head's logit joins the row's max and adds its
         * weight to the denominator only; O's factor for the new max goes
         * into the same per-row multiplier */
        float sk = sinks[kvh * G + rr % G], mn = fmaxf(m, sk);
        float c = expf(m - mn);
        inv_l = __fdiv_rn(c, fmaf(l, c, expf(sk - mn)));
    }
    if ((lane & 1) == 0)
        sCorr[warp][rl] = inv_l;
    __syncwarp();
    for (int r = 0; r < 16; r++) {
        int row = warp * 16 + r, qi = row / G;
        if (row >= qp * G || qi >= nrows)
            continue;   /* uniform across the warp */
        float inv = sCorr[warp][r];
        float *dst = out + ((int64_t)(t0 + qi) * n_head + kvh * G + row % G) * HD;
        for (int d = lane; d < HD; d += SL_WARP)
            dst[d] = __fmul_rn(sO[r * (HD + 4) + d], inv);
    }
}

static bool fa_prepared;

sl_status sl_cuda_attention_fa_prepare(void)
{
    if (fa_prepared)
        return SL_OK;
    SL_CUDA_CHECK(cudaFuncSetAttribute(attention_fa_tiles<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sl_cuda_fa_smem_bytes(64)));
    SL_CUDA_CHECK(cudaFuncSetAttribute(attention_fa_tiles<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sl_cuda_fa_smem_bytes(128)));
    SL_CUDA_CHECK(cudaFuncSetAttribute(attention_fa_tiles<256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sl_cuda_fa_smem_bytes(256)));
    fa_prepared = true;
    return SL_OK;
}

sl_status sl_cuda_attention_fa(float *out, const float *q, int64_t T, int n_head, const sl_cuda_kv *kv,
                               const sl_cuda_batch *batch, const int32_t *groups, int64_t n_groups, int layer,
                               const sl_cuda_attn_opts *opts, cudaStream_t stream)
{
    if (T < 1 || n_groups == 0)
        return SL_OK;
    if (!sl_cuda_fa_supported(kv, n_head) || n_groups < 0 || n_groups > T || !groups || opts->window < 0 ||
        !(opts->softcap >= 0.0f) || kv->n_head_kv > 65535)
        return SL_EINVAL;
    if (sl_cuda_attention_fa_prepare() < 0)
        return SL_EBACKEND;
    int hd = kv->head_dim;
    size_t smem = (size_t)sl_cuda_fa_smem_bytes(hd);
    dim3 grid((unsigned)n_groups, (unsigned)kv->n_head_kv);
#define LAUNCH(HD)                                                                                              \
    attention_fa_tiles<HD><<<grid, FT, smem, stream>>>(out, q, n_head, *kv, *batch, groups, n_groups, layer,   \
                                                       opts->scale, opts->softcap, opts->window, opts->sinks)
    switch (hd) {
    case 64: LAUNCH(64); break;
    case 128: LAUNCH(128); break;
    default: LAUNCH(256); break;
    }
#undef LAUNCH
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
