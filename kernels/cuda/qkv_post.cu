/* kernels/cuda/qkv_post.cu: one warp per (token row, head), the heads being
 * n_head q heads, then n_head_kv k heads, then n_head_kv v heads
 * ("qkv_post_head_per_warp"). The rope angle is computed in double from the
 * position, like the CPU's table, then rounded to float sin/cos. Lanes own
 * elements lane, lane+32, ... for the bias and the norm; the rope mixes
 * elements of other lanes, hence the __syncwarp() fences. K and V are
 * stored as the cache's type (paged.cuh): float32 as is, float16 rounded to
 * nearest even, q8_0 per group of 32 values of the row by one warp-wide
 * maximum, so a row's stored bytes depend on its values alone. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/qkv_post.cuh"

static __global__ void __launch_bounds__(SL_WARP)
qkv_post_head_per_warp(float *q, float *k, float *v, sl_cuda_qkv_params p, sl_cuda_kv kv, sl_cuda_batch b, int layer)
{
    int64_t t = blockIdx.x;
    int j = blockIdx.y, lane = threadIdx.x, hd = kv.head_dim, nkv = kv.n_head_kv;
    int kind = j < p.n_head ? 0 : j < p.n_head + nkv ? 1 : 2;   /* q, k, v */
    int h = kind == 0 ? j : kind == 1 ? j - p.n_head : j - p.n_head - nkv;
    float *vec;
    const float *bias, *norm;
    if (kind == 0) {
        vec = q + t * p.n_head * hd + (int64_t)h * hd;
        bias = p.bq ? p.bq + (int64_t)h * hd : NULL;
        norm = p.q_norm;
    } else {
        vec = (kind == 1 ? k : v) + t * nkv * hd + (int64_t)h * hd;
        const float *bb = kind == 1 ? p.bk : p.bv;
        bias = bb ? bb + (int64_t)h * hd : NULL;
        norm = kind == 1 ? p.k_norm : NULL;
    }
    if (bias)
        for (int i = lane; i < hd; i += SL_WARP)
            vec[i] = __fadd_rn(vec[i], bias[i]);
    if (norm) {
        double ss = 0.0;
        for (int i = lane; i < hd; i += SL_WARP)
            ss += (double)vec[i] * vec[i];
        ss = sl_warp_sum_double(ss);
        float scale = (float)(1.0 / sqrt(ss / (double)hd + (double)p.eps));
        for (int i = lane; i < hd; i += SL_WARP)
            vec[i] = __fmul_rn(__fmul_rn(vec[i], scale), norm[i]);
    }
    int32_t pos = b.tok_pos[t];
    if (kind != 2) {
        __syncwarp();
        int half = p.n_rot / 2;
        for (int i = lane; i < half; i += SL_WARP) {
            double theta = (double)pos * p.freq_scale * p.inv_freq[i], sd, cd;
            sincos(theta, &sd, &cd);
            float c = (float)(p.mscale * cd), s = (float)(p.mscale * sd);
            int a = p.neox ? i : 2 * i, bi = p.neox ? i + half : 2 * i + 1;
            float x0 = vec[a], x1 = vec[bi];
            vec[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            vec[bi] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        }
    }
    if (kind != 0) {
        __syncwarp();
        uint8_t *dst = sl_kv_slot(kv, b, layer, kind == 2, b.tok_table[t], pos, h, sl_kv_row_bytes(kv.type, hd));
        if (kv.type == SL_KV_TYPE_F32) {
            for (int i = lane; i < hd; i += SL_WARP)
                ((float *)dst)[i] = vec[i];
        } else if (kv.type == SL_KV_TYPE_F16) {
            for (int i = lane; i < hd; i += SL_WARP)
                ((__half *)dst)[i] = __float2half_rn(vec[i]);
        } else {
            /* q8_0: a group of 32 values per pass, lane i holding value i
             * (the lane's own element: no fence needed); model/quant.c's
             * arithmetic step for step, so the bytes equal the host's */
            for (int g = 0; g < hd / SL_KV_Q8_0_GROUP; g++) {
                float x = vec[g * SL_KV_Q8_0_GROUP + lane], amax = fabsf(x);
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
                float d = __fdiv_rn(amax, 127.0f);
                float id = d != 0.0f ? __frcp_rn(d) : 0.0f;
                float r = __fmul_rn(x, id);
                int qv = !(r >= -127.0f) ? -127 : r >= 127.0f ? 127 : __float2int_rn(r);
                uint8_t *blk = dst + (int64_t)g * SL_KV_Q8_0_BYTES;
                if (lane == 0)
                    *(__half *)blk = __float2half_rn(d);
                ((int8_t *)blk)[2 + lane] = (int8_t)qv;
            }
        }
    }
}

sl_status sl_cuda_qkv_post(float *q, float *k, float *v, int64_t T, const sl_cuda_qkv_params *p,
                           const sl_cuda_kv *kv, const sl_cuda_batch *batch, int layer, cudaStream_t stream)
{
    if (T < 1)
        return SL_OK;
    if (kv->head_dim > 1024 || p->n_rot > kv->head_dim || T > 0x7fffffff ||
        sl_kv_row_bytes(kv->type, kv->head_dim) == 0)
        return SL_EINVAL;
    dim3 grid((unsigned)T, (unsigned)(p->n_head + 2 * kv->n_head_kv));
    qkv_post_head_per_warp<<<grid, SL_WARP, 0, stream>>>(q, k, v, *p, *kv, *batch, layer);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
