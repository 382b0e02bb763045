/* kernels/cpu/act_quant.c: activation rows rounded to the format a weight
 * type is dotted with (see act_quant.h): llama.cpp's 8-bit ones by default,
 * 16-bit ones with SLUICE_CPU_ACT=q16. Runs in the CPU backend's threads.
 * Plain C on purpose: one code path on every ISA, so the AVX2 and portable
 * dot kernels see the same integer codes and differ only in float sums.
 * Cost: a few ns per element, once per matmul input row; the matmul it feeds
 * reads thousands of weights per element. */
#include "kernels/cpu/act_quant.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ggml_types.h"

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static enum sl_act_mode mode = SL_ACT_MODE_Q8;

static void env_read(void)
{
    const char *e = getenv("SLUICE_CPU_ACT");
    if (e && strcmp(e, "f32") == 0)
        mode = SL_ACT_MODE_F32;
    else if (e && strcmp(e, "q16") == 0)
        mode = SL_ACT_MODE_Q16;
    else if (e && *e && strcmp(e, "q8") != 0)   /* a typo must not pass for a choice */
        fprintf(stderr, "sluice: SLUICE_CPU_ACT=%s is not q8, q16 or f32: using q8\n", e);
}

enum sl_act_mode sl_act_mode(void)
{
    pthread_once(&env_once, env_read);
    return mode;
}

bool sl_act_quant_on(void)
{
    return sl_act_mode() != SL_ACT_MODE_F32;
}

enum sl_act_format sl_act_format_of_type(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_F16: return SL_ACT_F16;
    case SL_GGML_TYPE_BF16: return SL_ACT_BF16;
    case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q8_0: return SL_ACT_Q8_0;
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_MXFP4: return SL_ACT_Q8_0;
    case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: return SL_ACT_Q8_1;
    case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K: case SL_GGML_TYPE_Q6_K: return SL_ACT_Q8_K;
    case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_IQ2_XXS: case SL_GGML_TYPE_IQ2_XS: case SL_GGML_TYPE_IQ2_S:
    case SL_GGML_TYPE_IQ3_XXS: case SL_GGML_TYPE_IQ3_S: case SL_GGML_TYPE_IQ1_S: case SL_GGML_TYPE_IQ1_M:
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0:
        return SL_ACT_Q8_K;
    default: return SL_ACT_F32;
    }
}

enum sl_act_format sl_act_format_of_mode(enum sl_act_mode m, uint32_t type)
{
    switch (m) {
    case SL_ACT_MODE_Q8: return sl_act_format_of_type(type);
    case SL_ACT_MODE_F32: return SL_ACT_F32;
    case SL_ACT_MODE_Q16: break;
    }
    switch (sl_act_format_of_type(type)) {
    case SL_ACT_Q8_0: case SL_ACT_Q8_1: return SL_ACT_Q16_0;
    case SL_ACT_Q8_K: return SL_ACT_Q16_K;
    /* F16/BF16 weights: float32 rows. fp16-rounded inputs cost ~1e-4 of
     * the logits (the bound itself) and buy nothing: the float kernel
     * reads float32 either way. */
    default: return SL_ACT_F32;
    }
}

enum sl_act_format sl_act_format_of(uint32_t type)
{
    return sl_act_format_of_mode(sl_act_mode(), type);
}

size_t sl_act_row_bytes(enum sl_act_format f, int64_t n)
{
    switch (f) {
    case SL_ACT_Q8_0:   /* the blocks, then their scales as floats (sl_act_q8_0_scales) */
        return ((size_t)(n / SL_QK8_0) * sizeof(sl_block_q8_0) + 3) / 4 * 4 + (size_t)(n / SL_QK8_0) * sizeof(float);
    case SL_ACT_Q8_1: return (size_t)(n / SL_QK_LEGACY) * sizeof(sl_block_q8_1);
    case SL_ACT_Q8_K: return (size_t)(n / SL_QK_K) * sizeof(sl_block_q8_K);
    case SL_ACT_Q16_0: return (size_t)(n / SL_QK8_0) * sizeof(sl_block_q16_0);
    case SL_ACT_Q16_K: return (size_t)(n / SL_QK_K) * sizeof(sl_block_q16_K);
    default: return (size_t)n * sizeof(float);
    }
}

/* fmaxf(amax, fabsf(x)) and fminf(fmaxf(v, -lim), lim), NaN handling
 * included (a NaN x leaves amax; a NaN v gives -lim; amax is never NaN),
 * written as comparisons: GCC compiles these to maxss/minss, where fmaxf
 * and fminf stay libm calls per element without -ffinite-math-only (they
 * were 2.6% of Q8_0 prefill at one thread). The same codes as the libm
 * calls for every input but a signaling NaN, which glibc's fmaxf turns
 * into a NaN amax (restarting the block's maximum) and these ignore as
 * any NaN; arithmetic never makes one (checked over 20000 rows of random
 * bit patterns, infinities and subnormals, all five formats). */
static inline float amax_with(float amax, float x)
{
    float a = fabsf(x);
    return a > amax ? a : amax;
}

static inline float clamp_code(float v, float lim)
{
    v = v > -lim ? v : -lim;
    return v < lim ? v : lim;
}

static void quantize_q8_0(const float *x, sl_block_q8_0 *y, int64_t n)
{
    for (int64_t b = 0; b < n / SL_QK8_0; b++, x += SL_QK8_0) {
        float amax = 0.0f;
        for (int i = 0; i < SL_QK8_0; i++)
            amax = amax_with(amax, x[i]);
        /* ggml's x86 quantize_row_q8_0 (what llama.cpp runs here), not its
         * reference one: id = 127/amax, not 1/d, and round half to even */
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = sl_fp32_to_fp16(d);
        for (int i = 0; i < SL_QK8_0; i++)   /* the clamp only tames NaN/inf */
            y[b].qs[i] = (int8_t)rintf(clamp_code(x[i] * id, 127.0f));
    }
}

/* Q8_0's codes and fp16 d, plus s = fp16(d * sum) from the float d (ggml's
 * x86 quantize_row_q8_1, which llama.cpp pairs with Q4_1/Q5_1 weights). */
static void quantize_q8_1(const float *x, sl_block_q8_1 *y, int64_t n)
{
    for (int64_t b = 0; b < n / SL_QK_LEGACY; b++, x += SL_QK_LEGACY) {
        float amax = 0.0f;
        for (int i = 0; i < SL_QK_LEGACY; i++)
            amax = amax_with(amax, x[i]);
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < SL_QK_LEGACY; i++) {
            y[b].qs[i] = (int8_t)rintf(clamp_code(x[i] * id, 127.0f));
            sum += y[b].qs[i];
        }
        y[b].d = sl_fp32_to_fp16(d);
        y[b].s = sl_fp32_to_fp16(d * (float)sum);
    }
}

/* ggml's nearest_int: round to nearest even through the float adder
 * (|v| <= 127 here, far inside the trick's 2^22 range). */
static inline int nearest_int(float v)
{
    float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static void quantize_q8_K(const float *x, sl_block_q8_K *y, int64_t n)
{
    for (int64_t b = 0; b < n / SL_QK_K; b++, x += SL_QK_K) {
        float amax = 0.0f, vmax = 0.0f;
        for (int i = 0; i < SL_QK_K; i++)
            if (fabsf(x[i]) > amax) {
                amax = fabsf(x[i]);
                vmax = x[i];
            }
        if (!(amax > 0.0f) || !isfinite(amax)) {   /* zero (or NaN/inf) block */
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float iscale = -127.0f / vmax;
        for (int i = 0; i < SL_QK_K; i++) {
            int v = nearest_int(iscale * x[i]);
            y[b].qs[i] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
        }
        for (int k = 0; k < SL_QK_K / 16; k++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += y[b].qs[16 * k + i];
            y[b].bsums[k] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

/* One 16-bit block of bn elements: codes to qs, returns d. x / d, not
 * x * (1/d): the rule the header states, with one rounding fewer. */
static float quantize16(const float *x, int16_t *qs, int bn)
{
    float amax = 0.0f;
    for (int i = 0; i < bn; i++)
        amax = amax_with(amax, x[i]);
    float d = amax / 32767.0f;
    if (!(d > 0.0f) || !isfinite(amax)) {   /* zero, NaN/inf, or d underflowed */
        memset(qs, 0, (size_t)bn * sizeof *qs);
        return 0.0f;
    }
    for (int i = 0; i < bn; i++)   /* the clamp tames NaN and amax/d's last ulp */
        qs[i] = (int16_t)rintf(clamp_code(x[i] / d, 32767.0f));
    return d;
}

static void quantize_q16_0(const float *x, sl_block_q16_0 *y, int64_t n)
{
    for (int64_t b = 0; b < n / SL_QK8_0; b++, x += SL_QK8_0) {
        memset(&y[b], 0, sizeof y[b]);
        y[b].d = quantize16(x, y[b].qs, SL_QK8_0);
        for (int i = 0; i < SL_QK8_0; i++)
            y[b].sum += y[b].qs[i];
    }
}

static void quantize_q16_K(const float *x, sl_block_q16_K *y, int64_t n)
{
    for (int64_t b = 0; b < n / SL_QK_K; b++, x += SL_QK_K) {
        memset(&y[b], 0, sizeof y[b]);
        y[b].d = quantize16(x, y[b].qs, SL_QK_K);
        for (int k = 0; k < SL_QK_K / 32; k++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i++)
                s += y[b].qs[32 * k + i];
            y[b].bsums[k] = s;
        }
    }
}

void sl_act_quantize_row(enum sl_act_format f, const float *x, void *dst, int64_t n)
{
    float *o = dst;
    switch (f) {
    case SL_ACT_Q8_0:
        assert(n % SL_QK8_0 == 0);
        quantize_q8_0(x, dst, n);
        {
            const sl_block_q8_0 *y = dst;
            float *s = (float *)sl_act_q8_0_scales(dst, n);
            for (int64_t b = 0; b < n / SL_QK8_0; b++)
                s[b] = sl_fp16_to_fp32(y[b].d);
        }
        break;
    case SL_ACT_Q8_K:
        assert(n % SL_QK_K == 0);
        quantize_q8_K(x, dst, n);
        break;
    case SL_ACT_Q8_1:
        assert(n % SL_QK_LEGACY == 0);
        quantize_q8_1(x, dst, n);
        break;
    case SL_ACT_Q16_0:
        assert(n % SL_QK8_0 == 0);
        quantize_q16_0(x, dst, n);
        break;
    case SL_ACT_Q16_K:
        assert(n % SL_QK_K == 0);
        quantize_q16_K(x, dst, n);
        break;
    case SL_ACT_F16:
        for (int64_t i = 0; i < n; i++)
            o[i] = sl_fp16_to_fp32(sl_fp32_to_fp16(x[i]));
        break;
    case SL_ACT_BF16:
        for (int64_t i = 0; i < n; i++)
            o[i] = sl_bf16_to_fp32(sl_fp32_to_bf16(x[i]));
        break;
    case SL_ACT_F32:
        if (o != x)
            memcpy(o, x, (size_t)n * sizeof *x);
        break;
    }
}
