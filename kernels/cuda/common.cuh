/* kernels/cuda/common.cuh: what every CUDA kernel file of the backend shares:
 * the CUDA error check, half/bfloat16 scalars, warp reductions and the
 * element-wise decoders of the GGUF block formats (model/quant.h layouts).
 * Where:  compiled into libsluice_cuda.so (nvcc), header-inline so each
 *         kernel file gets its own copy to inline. The decoders are also
 *         host functions, so kernels/cuda/decode_test.cu checks them against
 *         model/quant.c on a machine without a GPU. */
#ifndef SL_CUDA_COMMON_CUH
#define SL_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "model/ggml_types.h"
#include "model/quant.h"
}

/* Checks a CUDA runtime call; on failure logs it once with file:line and
 * makes the enclosing function return SL_EBACKEND: a failed CUDA call is
 * not fatal, the scheduler fails the step's sequences and the process lives
 * on. */
#define SL_CUDA_CHECK(call)                                                                  \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "cuda: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(e_));                                                 \
            return SL_EBACKEND;                                                              \
        }                                                                                    \
    } while (0)

/* Kernel launches return nothing: a launcher checks the launch itself. */
#define SL_CUDA_CHECK_LAUNCH() SL_CUDA_CHECK(cudaGetLastError())

#define SL_WARP 32

#define SL_HD __host__ __device__ __forceinline__

/* `#pragma unroll` for code that the host compiler also sees */
#ifdef __CUDA_ARCH__
#define SL_UNROLL _Pragma("unroll")
#else
#define SL_UNROLL
#endif

static SL_HD float sl_dev_fp16(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

static SL_HD float sl_dev_bf16(uint16_t h)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)h << 16);
#else
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Butterfly sum: every lane ends with the same value, and the order of the
 * additions depends only on the lane layout, never on the data or the batch. */
static __device__ __forceinline__ float sl_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double sl_warp_sum_double(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float sl_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static SL_HD uint16_t sl_dev_u16(const uint8_t *p)
{
    return *(const uint16_t *)p;   /* every fp16 field of a GGUF block is 2-byte aligned */
}

/* Scale and min of sub-block j of a Q4_K/Q5_K `scales` array: the device
 * twin of sl_quant_get_scale_min_k4. */
static SL_HD void sl_dev_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* a * b and a + b rounded once each: on the device, kept from being fused
 * into one fmaf, so a dequantized value d * q + m has the host's bits. */
static SL_HD float sl_dev_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

static SL_HD float sl_dev_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* The IQ4_NL / IQ4_XS non-linear grid (gguf's kvalues), entry q (0-15),
 * from two packed words: no table in memory, so host and device share it. */
#define SL_IQ4NL_LO 0xF6EADDCFBFAD9881ull   /* entries 0-7, byte k = entry k */
#define SL_IQ4NL_HI 0x7159453526190D01ull   /* entries 8-15 */
static SL_HD int sl_dev_iq4nl(int q)
{
    return (int)(int8_t)(uint8_t)(((q & 8) ? SL_IQ4NL_HI : SL_IQ4NL_LO) >> (8 * (q & 7)));
}

/* MXFP4's 16 E2M1 values doubled (model/quant.h sl_mxfp4_values: code 8,
 * E2M1's -0, is 0), packed as the IQ4_NL grid is. */
#define SL_MXFP4_LO 0x0C08060403020100ull   /* codes 0-7: 0 1 2 3 4 6 8 12 */
#define SL_MXFP4_HI 0xF4F8FAFCFDFEFF00ull   /* codes 8-15: 0 -1 -2 -3 -4 -6 -8 -12 */
static SL_HD int sl_dev_mxfp4(int q)
{
    return (int)(int8_t)(uint8_t)(((q & 8) ? SL_MXFP4_HI : SL_MXFP4_LO) >> (8 * (q & 7)));
}

/* sl_e8m0_half (model/quant.h): half of the E8M0 scale 2^(e-127), exact */
static SL_HD float sl_dev_e8m0_half(uint8_t e)
{
    uint32_t u = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Scale j (0-15) of a Q3_K block's 12 `scales` bytes: 4 low bits in bytes
 * 0-7, 2 high bits in bytes 8-11, minus 32. */
static SL_HD int sl_dev_scale_q3_k(const uint8_t *sc, int j)
{
    int lo = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
    int hi = (sc[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Scale of sub-block j (0-7) of an IQ4_XS block b: 4 low bits in scales_l,
 * 2 high bits in the 16-bit scales_h, minus 32. */
static SL_HD int sl_dev_scale_iq4_xs(const uint8_t *b, int j)
{
    int lo = (b[4 + j / 2] >> (4 * (j & 1))) & 0xF;
    int hi = (sl_dev_u16(b + 2) >> (2 * j)) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Element i of a row of `type` (any type sl_cuda_matmul_supports). Slow
 * (one element at a time): for embedding lookups, not for matmuls. */
static inline __host__ __device__ float sl_dev_dequant_elem(uint32_t type, const uint8_t *row, int64_t i)
{
    switch (type) {
    case SL_GGML_TYPE_F32:
        return ((const float *)row)[i];
    case SL_GGML_TYPE_F16:
        return sl_dev_fp16(((const uint16_t *)row)[i]);
    case SL_GGML_TYPE_BF16:
        return sl_dev_bf16(((const uint16_t *)row)[i]);
    case SL_GGML_TYPE_Q8_0: {
        const uint8_t *b = row + (i / SL_QK8_0) * sizeof(sl_block_q8_0);
        return sl_dev_fp16(sl_dev_u16(b)) * (float)((const int8_t *)(b + 2))[i % SL_QK8_0];
    }
    case SL_GGML_TYPE_Q4_0: {
        const uint8_t *b = row + (i / SL_QK4_0) * sizeof(sl_block_q4_0);
        int k = (int)(i % SL_QK4_0);
        int q = k < 16 ? (b[2 + k] & 0xF) : (b[2 + k - 16] >> 4);
        return sl_dev_fp16(sl_dev_u16(b)) * (float)(q - 8);
    }
    case SL_GGML_TYPE_Q4_K:
    case SL_GGML_TYPE_Q5_K: {
        bool q5 = type == SL_GGML_TYPE_Q5_K;
        size_t bb = q5 ? sizeof(sl_block_q5_K) : sizeof(sl_block_q4_K);
        const uint8_t *b = row + (i / SL_QK_K) * bb;
        int k = (int)(i % SL_QK_K), s = k / 32, l = k % 32, sc, m;
        sl_dev_scale_min_k4(s, b + 4, &sc, &m);
        const uint8_t *qs = b + 4 + SL_K_SCALE_SIZE + (q5 ? SL_QK_K / 8 : 0);
        int q = (qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 0xF;
        if (q5)
            q |= ((b[4 + SL_K_SCALE_SIZE + l] >> s) & 1) << 4;
        return sl_dev_fp16(sl_dev_u16(b)) * (float)sc * (float)q - sl_dev_fp16(sl_dev_u16(b + 2)) * (float)m;
    }
    case SL_GGML_TYPE_Q6_K: {
        const uint8_t *b = row + (i / SL_QK_K) * sizeof(sl_block_q6_K);
        int k = (int)(i % SL_QK_K), h = k / 128, r = k % 128, qq = r / 32, l = r % 32;
        const uint8_t *ql = b + 64 * h, *qh = b + SL_QK_K / 2 + 32 * h;
        const int8_t *scales = (const int8_t *)(b + SL_QK_K / 2 + SL_QK_K / 4);
        int lo = (ql[l + 32 * (qq & 1)] >> (4 * (qq >> 1))) & 0xF;
        int q = (lo | (((qh[l] >> (2 * qq)) & 3) << 4)) - 32;
        return sl_dev_fp16(sl_dev_u16(b + SL_QK_K / 2 + SL_QK_K / 4 + SL_QK_K / 16)) * (float)scales[k / 16] *
               (float)q;
    }
    case SL_GGML_TYPE_Q4_1:
    case SL_GGML_TYPE_Q5_0:
    case SL_GGML_TYPE_Q5_1:
    case SL_GGML_TYPE_IQ4_NL: {
        /* 32-element blocks: d, [m], [qh: bit k = bit 4 of q_k], 16 bytes of
         * nibbles (element k < 16: low nibble of byte k, else high of k-16) */
        bool has_m = type == SL_GGML_TYPE_Q4_1 || type == SL_GGML_TYPE_Q5_1;
        bool has_h = type == SL_GGML_TYPE_Q5_0 || type == SL_GGML_TYPE_Q5_1;
        size_t bb = 2 + (has_m ? 2 : 0) + (has_h ? 4 : 0) + 16;
        const uint8_t *b = row + (i / 32) * bb, *qs = b + bb - 16;
        int k = (int)(i % 32);
        int q = k < 16 ? (qs[k] & 0xF) : (qs[k - 16] >> 4);
        float d = sl_dev_fp16(sl_dev_u16(b));
        if (type == SL_GGML_TYPE_IQ4_NL)
            return sl_dev_mul(d, (float)sl_dev_iq4nl(q));
        if (has_h) {
            const uint8_t *qh = b + (has_m ? 4 : 2);
            q |= ((qh[k / 8] >> (k % 8)) & 1) << 4;
        }
        if (type == SL_GGML_TYPE_Q5_0)
            return sl_dev_mul(d, (float)(q - 16));
        return sl_dev_add(sl_dev_mul(d, (float)q), sl_dev_fp16(sl_dev_u16(b + 2)));
    }
    case SL_GGML_TYPE_Q8_1: {
        const uint8_t *b = row + (i / 32) * 36;   /* d, s (fp16), 32 int8 */
        return sl_dev_mul(sl_dev_fp16(sl_dev_u16(b)), (float)((const int8_t *)(b + 4))[i % 32]);
    }
    case SL_GGML_TYPE_Q2_K: {
        /* scales[16] (low nibble scale, high nibble min), qs[64], d, dmin */
        const uint8_t *b = row + (i / SL_QK_K) * 84;
        int k = (int)(i % SL_QK_K), g = k / 128, s = (k % 128) / 32, l = k % 32;
        int q = (b[16 + 32 * g + l] >> (2 * s)) & 3, sc = b[k / 16];
        float dl = sl_dev_mul(sl_dev_fp16(sl_dev_u16(b + 80)), (float)(sc & 0xF));
        float ml = sl_dev_mul(sl_dev_fp16(sl_dev_u16(b + 82)), (float)(sc >> 4));
        return sl_dev_add(sl_dev_mul(dl, (float)q), -ml);
    }
    case SL_GGML_TYPE_Q3_K: {
        /* hmask[32], qs[64], scales[12], d; q = 2 low bits - (high bit ? 0 : 4) */
        const uint8_t *b = row + (i / SL_QK_K) * 110;
        int k = (int)(i % SL_QK_K), j = k / 32, l = k % 32;
        int q = ((b[32 + 32 * (j / 4) + l] >> (2 * (j % 4))) & 3) - (((b[l] >> j) & 1) ? 0 : 4);
        float dl = sl_dev_mul(sl_dev_fp16(sl_dev_u16(b + 108)), (float)sl_dev_scale_q3_k(b + 96, k / 16));
        return sl_dev_mul(dl, (float)q);
    }
    case SL_GGML_TYPE_IQ4_XS: {
        /* d, scales_h (16 bits), scales_l[4], qs[128]: 8 sub-blocks of 32 */
        const uint8_t *b = row + (i / SL_QK_K) * 136;
        int k = (int)(i % SL_QK_K), j = k / 32, l = k % 32;
        const uint8_t *qs = b + 8 + 16 * j;
        int q = l < 16 ? (qs[l] & 0xF) : (qs[l - 16] >> 4);
        float dl = sl_dev_mul(sl_dev_fp16(sl_dev_u16(b)), (float)sl_dev_scale_iq4_xs(b, j));
        return sl_dev_mul(dl, (float)sl_dev_iq4nl(q));
    }
    case SL_GGML_TYPE_MXFP4: {
        /* e (E8M0), 16 bytes of nibbles in Q4_0's packing */
        const uint8_t *b = row + (i / 32) * 17;
        int k = (int)(i % 32), q = k < 16 ? (b[1 + k] & 0xF) : (b[1 + k - 16] >> 4);
        return sl_dev_mul(sl_dev_e8m0_half(b[0]), (float)sl_dev_mxfp4(q));
    }
    default:
        return 0.0f;
    }
}

#endif
