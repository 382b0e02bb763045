/* kernels/cuda/selftest_kv.cuh: what the attention self-tests share for the
 * K/V storage types (paged.cuh): the host's encoding of a cache's rows, by
 * model/quant.c, and their names. A check fills its cache with floats,
 * stores them as the type under test here, and computes its float64
 * reference from the dequantized values that now replace them, so the
 * reference sees exactly what the kernel reads and the tolerance stays
 * the float32 one.
 * Where: host code of the self-tests in libsluice_cuda.so. */
#ifndef SL_CUDA_SELFTEST_KV_CUH
#define SL_CUDA_SELFTEST_KV_CUH

#include <stdint.h>
#include <string.h>

#include "kernels/cuda/common.cuh"   /* model/quant.h, with C linkage */
#include "kernels/cuda/paged.cuh"

static inline const char *st_kv_name(sl_kv_type t)
{
    return t == SL_KV_TYPE_F32 ? "f32" : t == SL_KV_TYPE_F16 ? "f16" : t == SL_KV_TYPE_Q8_0 ? "q8_0" : "?";
}

/* The ggml type whose row encoding a stored row of `t` is. */
static inline uint32_t st_kv_ggml_type(sl_kv_type t)
{
    return t == SL_KV_TYPE_F16 ? SL_GGML_TYPE_F16 : t == SL_KV_TYPE_Q8_0 ? SL_GGML_TYPE_Q8_0 : SL_GGML_TYPE_F32;
}

/* Encodes n_rows rows of hd floats of kv into bytes (n_rows *
 * sl_kv_row_bytes(t, hd) of them), then overwrites kv with the decoded
 * values. Returns 0, or -1 when model/quant.c refuses (bad hd). */
static inline int st_kv_store(sl_kv_type t, float *kv, int64_t n_rows, int hd, uint8_t *bytes)
{
    int64_t rb = sl_kv_row_bytes(t, hd);
    uint32_t g = st_kv_ggml_type(t);
    if (rb == 0)
        return -1;
    for (int64_t r = 0; r < n_rows; r++) {
        float *x = kv + r * hd;
        uint8_t *dst = bytes + r * rb;
        if (sl_quant_quantize_row(g, x, dst, hd) != SL_OK || sl_quant_dequantize_row(g, dst, x, hd) != SL_OK)
            return -1;
    }
    return 0;
}

#endif
