/* kernels/cuda/gemm_moe.cu: see gemm_moe.cuh.
 * Block: 4 warps, GM_BN = 64 weight rows (16 a warp) x GM_BM = 32 pairs,
 * per K step of GM_BK = 64 columns: each thread decodes one 32-element unit
 * of each matrix (gate, and up when fused) into shared memory as float16,
 * the block converts its pairs' 32 x 64 activations, then each warp runs
 * 4 x 2 wmma products per matrix. The epilogue goes through shared memory
 * so that consecutive threads write consecutive outputs of a pair's row.
 * Trade-off: wmma with fragments loaded from shared memory and the decode
 * not overlapped with the products (no cp.async pipeline, no wgmma): far
 * from the tensor cores' peak, but every weight is decoded once per tile of
 * 32 pairs instead of once per 8, and the products run on tensor cores. */
#include <mma.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm_moe.cuh"
#include "kernels/cuda/matmul_unit.cuh"

using namespace nvcuda;

#define GM_BM SL_CUDA_MOE_GEMM_BM
#define GM_BN 64
#define GM_BK 64
#define GM_THREADS 128
#define GM_LDH (GM_BK + 8)   /* halves per shared row: 16 bytes of padding against bank conflicts */
#define GM_LDC (GM_BM + 4)   /* floats per accumulator row in shared memory */
static_assert(GM_BN == 16 * (GM_THREADS / SL_WARP), "a warp owns 16 weight rows");
static_assert(GM_BK % UNIT == 0 && GM_BK % 16 == 0 && GM_BM % 16 == 0, "tile shapes");

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> gm_frag_a;   /* weight rows */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> gm_frag_b;   /* pairs' rows, as columns */
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> gm_frag_c;

struct gm_args {
    const uint8_t *W[2];     /* expert 0's matrix of w, of up (NULL without) */
    size_t row_bytes;
    int64_t ne0, ne1;
    const float *B[2];       /* gpt-oss: bias rows of w, of up (expert e's at e * ne1), or NULL */
    bool oai;                /* gpt-oss's clamped SwiGLU instead of SiLU (with up) */
    const int32_t *off, *pairs, *tiles;
    int in_div;
    const float *x;
    int64_t ldx;
    const float *scale;
    float *y;
    int64_t ldy;
};

static __global__ void gm_tiles(const int32_t *__restrict__ off, const int32_t *__restrict__ used,
                                int32_t *__restrict__ tiles)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    int32_t n = 0, nu = used[0];
    for (int32_t j = 0; j < nu; j++) {
        int32_t e = used[1 + j];
        for (int32_t s = off[e]; s < off[e + 1]; s += GM_BM) {
            tiles[1 + 2 * n] = e;
            tiles[2 + 2 * n] = s;
            n++;
        }
    }
    tiles[0] = n;
}

/* gemm.cu's to_f16_rows rule: s = 2^e with amax / s <= 2^14, NaN and inf rows keep 1 */
static __global__ void __launch_bounds__(256)
gm_scales(const float *__restrict__ x, int64_t ldx, int64_t n, float *__restrict__ scale)
{
    __shared__ float part[256 / SL_WARP];
    const float *xr = x + (int64_t)blockIdx.x * ldx;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += 256)
        m = fmaxf(m, fabsf(xr[i]));
    m = sl_warp_max(m);
    if (threadIdx.x % SL_WARP == 0)
        part[threadIdx.x / SL_WARP] = m;
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    float amax = part[0];
    for (int k = 1; k < 256 / SL_WARP; k++)
        amax = fmaxf(amax, part[k]);
    float s = 1.0f;
    if (amax > 16384.0f && amax <= 3.0e38f)
        s = exp2f(ceilf(log2f(amax / 16384.0f)));
    scale[blockIdx.x] = s;
}

template <int TYPE, bool PAIR>
static __global__ void __launch_bounds__(GM_THREADS) gm_experts(gm_args a)
{
    constexpr int NM = PAIR ? 2 : 1;
    __shared__ __align__(32) __half sW[NM][GM_BN * GM_LDH];
    __shared__ __align__(32) __half sX[GM_BM * GM_LDH];
    __shared__ __align__(32) float sC[NM][GM_BN * GM_LDC];
    __shared__ int32_t sQ[GM_BM];      /* the tile's pair indices, -1 past its end */
    __shared__ float sInv[GM_BM];      /* 1 / their rows' scale (exact: powers of two) */
    const int tile = blockIdx.y;
    if (tile >= a.tiles[0])
        return;
    const int32_t e = a.tiles[1 + 2 * tile], first = a.tiles[2 + 2 * tile];
    const int32_t np = min(GM_BM, a.off[e + 1] - first);
    const int64_t r0 = (int64_t)blockIdx.x * GM_BN;
    const int warp = threadIdx.x / SL_WARP;
    if (threadIdx.x < GM_BM) {
        int32_t q = threadIdx.x < np ? a.pairs[first + threadIdx.x] : -1;
        sQ[threadIdx.x] = q;
        sInv[threadIdx.x] = q >= 0 ? 1.0f / a.scale[q / a.in_div] : 0.0f;
    }
    __syncthreads();

    gm_frag_c acc[NM][GM_BM / 16];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < GM_BM / 16; j++)
            wmma::fill_fragment(acc[m][j], 0.0f);

    constexpr int UPK = GM_BK / UNIT;   /* units per row and K step */
    for (int64_t k0 = 0; k0 < a.ne0; k0 += GM_BK) {
        /* weights: GM_BN rows x UPK units per matrix, a unit a thread */
#pragma unroll
        for (int m = 0; m < NM; m++)
            for (int i = threadIdx.x; i < GM_BN * UPK; i += GM_THREADS) {
                int r = i / UPK, uu = i % UPK;
                int64_t row = r0 + r, u = k0 / UNIT + uu;
                __half *dst = &sW[m][r * GM_LDH + uu * UNIT];
                if (row < a.ne1 && u * UNIT < a.ne0) {
                    unit d;
                    decode_unit<TYPE>(a.W[m] + ((int64_t)e * a.ne1 + row) * a.row_bytes, u, a.ne0, d);
#pragma unroll
                    for (int k = 0; k < UNIT; k += 2) {
                        float v0 = u * UNIT + k < a.ne0 ? unit_elem(d, k) : 0.0f;
                        float v1 = u * UNIT + k + 1 < a.ne0 ? unit_elem(d, k + 1) : 0.0f;
                        *(__half2 *)(dst + k) = __floats2half2_rn(v0, v1);
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < UNIT; k += 2)
                        *(__half2 *)(dst + k) = __floats2half2_rn(0.0f, 0.0f);
                }
            }
        /* activations: the tile's pairs' rows, GM_BK columns, divided by their scale */
        for (int i = threadIdx.x; i < GM_BM * GM_BK; i += GM_THREADS) {
            int p = i / GM_BK, c = i % GM_BK;
            int32_t q = sQ[p];
            int64_t col = k0 + c;
            float v = 0.0f;
            if (q >= 0 && col < a.ne0)
                v = a.x[(int64_t)(q / a.in_div) * a.ldx + col] * sInv[p];
            sX[p * GM_LDH + c] = __float2half_rn(v);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GM_BK / 16; kk++) {
            gm_frag_b b[GM_BM / 16];
#pragma unroll
            for (int j = 0; j < GM_BM / 16; j++)
                wmma::load_matrix_sync(b[j], sX + j * 16 * GM_LDH + kk * 16, GM_LDH);
#pragma unroll
            for (int m = 0; m < NM; m++) {
                gm_frag_a fa;
                wmma::load_matrix_sync(fa, sW[m] + warp * 16 * GM_LDH + kk * 16, GM_LDH);
#pragma unroll
                for (int j = 0; j < GM_BM / 16; j++)
                    wmma::mma_sync(acc[m][j], fa, b[j], acc[m][j]);
            }
        }
        __syncthreads();   /* the tiles are refilled next step */
    }

#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int j = 0; j < GM_BM / 16; j++)
            wmma::store_matrix_sync(sC[m] + warp * 16 * GM_LDC + j * 16, acc[m][j], GM_LDC, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < GM_BN * GM_BM; i += GM_THREADS) {
        int r = i % GM_BN, p = i / GM_BN;   /* consecutive threads: consecutive outputs of one pair */
        int32_t q = sQ[p];
        int64_t row = r0 + r;
        if (q < 0 || row >= a.ne1)
            continue;
        float s = a.scale[q / a.in_div];
        float o = __fmul_rn(sC[0][r * GM_LDC + p], s);
        if (a.B[0])
            o = __fadd_rn(o, a.B[0][(size_t)e * a.ne1 + row]);
        if constexpr (PAIR) {
            float u = __fmul_rn(sC[1][r * GM_LDC + p], s);
            if (a.B[1])
                u = __fadd_rn(u, a.B[1][(size_t)e * a.ne1 + row]);
            if (a.oai) {   /* sl_cpu_swiglu_oai: alpha 1.702, limit 7, in its order (as mmv_moe.cu) */
                float g = o < 7.0f ? o : 7.0f, c = u < -7.0f ? -7.0f : u > 7.0f ? 7.0f : u;
                o = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(1.702f, -g)))), __fadd_rn(c, 1.0f));
            } else {       /* mmv.cu's fused SwiGLU */
                o = __fmul_rn(__fdiv_rn(o, __fadd_rn(1.0f, expf(-o))), u);
            }
        }
        a.y[(int64_t)q * a.ldy + row] = o;
    }
}

bool sl_cuda_moe_gemm_supports(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K: case SL_GGML_TYPE_Q6_K: case SL_GGML_TYPE_Q8_0:
    case SL_GGML_TYPE_Q8_1: case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q5_1:
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

bool sl_cuda_moe_gemm_enabled(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("SLUICE_CUDA_MOE_GEMM");
        on = !(e && strcmp(e, "0") == 0);
    }
    return on != 0;
}

sl_status sl_cuda_moe_gemm_tiles(const int32_t *off, const int32_t *used, int32_t *tiles, cudaStream_t stream)
{
    gm_tiles<<<1, 32, 0, stream>>>(off, used, tiles);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_moe_gemm_scales(const float *x, int64_t ldx, int64_t n, int64_t rows, float *scale,
                                  cudaStream_t stream)
{
    if (rows < 1 || rows > 0x7fffffff || n < 1 || ldx < n)
        return rows == 0 ? SL_OK : SL_EINVAL;
    gm_scales<<<(unsigned)rows, 256, 0, stream>>>(x, ldx, n, scale);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

sl_status sl_cuda_moe_gemm(const sl_cuda_weight *w, const sl_cuda_weight *up, const float *bias,
                           const float *up_bias, bool swiglu_oai, int n_expert, const int32_t *off,
                           const int32_t *pairs, const int32_t *tiles, int64_t R, int in_div, const float *x,
                           int64_t ldx, const float *scale, float *y, int64_t ldy, cudaStream_t stream)
{
    if (!sl_cuda_moe_gemm_supports(w->type) || w->ne0 % UNIT != 0 || R < 1 || in_div < 1 || ldx < w->ne0 ||
        ldy < w->ne1 || n_expert < 1 || (up_bias && (!up || !bias)) || (swiglu_oai && !up) ||
        (up && (up->type != w->type || up->ne0 != w->ne0 || up->ne1 != w->ne1)))
        return SL_EINVAL;
    int64_t max_tiles = sl_cuda_moe_gemm_max_tiles(R, n_expert);
    if (max_tiles > 65535)
        return SL_EINVAL;
    gm_args a = {};
    a.W[0] = w->data;
    a.W[1] = up ? up->data : NULL;
    a.row_bytes = w->row_bytes;
    a.ne0 = w->ne0;
    a.ne1 = w->ne1;
    a.B[0] = bias;
    a.B[1] = up_bias;
    a.oai = swiglu_oai;
    a.off = off;
    a.pairs = pairs;
    a.tiles = tiles;
    a.in_div = in_div;
    a.x = x;
    a.ldx = ldx;
    a.scale = scale;
    a.y = y;
    a.ldy = ldy;
    dim3 grid((unsigned)((w->ne1 + GM_BN - 1) / GM_BN), (unsigned)max_tiles);
#define GM(TY)                                                                   \
    do {                                                                         \
        if (up)                                                                  \
            gm_experts<TY, true><<<grid, GM_THREADS, 0, stream>>>(a);            \
        else                                                                     \
            gm_experts<TY, false><<<grid, GM_THREADS, 0, stream>>>(a);           \
    } while (0)
    switch (w->type) {
    case SL_GGML_TYPE_Q4_K: GM(SL_GGML_TYPE_Q4_K); break;
    case SL_GGML_TYPE_Q5_K: GM(SL_GGML_TYPE_Q5_K); break;
    case SL_GGML_TYPE_Q6_K: GM(SL_GGML_TYPE_Q6_K); break;
    case SL_GGML_TYPE_Q8_0: GM(SL_GGML_TYPE_Q8_0); break;
    case SL_GGML_TYPE_Q8_1: GM(SL_GGML_TYPE_Q8_1); break;
    case SL_GGML_TYPE_Q2_K: GM(SL_GGML_TYPE_Q2_K); break;
    case SL_GGML_TYPE_Q3_K: GM(SL_GGML_TYPE_Q3_K); break;
    case SL_GGML_TYPE_IQ4_XS: GM(SL_GGML_TYPE_IQ4_XS); break;
    case SL_GGML_TYPE_Q4_0: GM(SL_GGML_TYPE_Q4_0); break;
    case SL_GGML_TYPE_Q4_1: GM(SL_GGML_TYPE_Q4_1); break;
    case SL_GGML_TYPE_Q5_0: GM(SL_GGML_TYPE_Q5_0); break;
    case SL_GGML_TYPE_Q5_1: GM(SL_GGML_TYPE_Q5_1); break;
    case SL_GGML_TYPE_IQ4_NL: GM(SL_GGML_TYPE_IQ4_NL); break;
    case SL_GGML_TYPE_MXFP4: GM(SL_GGML_TYPE_MXFP4); break;
    default: return SL_EINVAL;
    }
#undef GM
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}
