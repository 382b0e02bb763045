/* kernels/cpu/vec_dot.c: the portable (C17, any CPU) weight-row dot products
 * and the run-time choice between them and the AVX2 ones.
 * Runs in the CPU backend's threads. This is the readable reference the AVX2
 * path is tested against, so it favours clarity over speed.
 * Trade-off: each block is first decoded into integer codes plus per
 * sub-block scale and min (once per group of vectors), and the dot product
 * works on sub-block sums: sum(w*x) = d*sum(q*x) - dmin*sum(x), so a K-quant
 * min costs one multiply per sub-block instead of one per element. */
#include "kernels/cpu/vec_dot.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/vec_dot_int.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"

/* A decoded block: `nsub` sub-blocks of `sub` elements; element k is
 * ds[k/sub]*q[k] - dm[k/sub]. Floats hold the codes exactly (|q| < 2^24);
 * for F32/F16/BF16 the "codes" are the weights themselves with ds = 1. */
struct decoded {
    int n, sub, nsub;
    bool has_min;
    float q[SL_QK_K];
    float ds[SL_QK_K / 16];
    float dm[SL_QK_K / 16];
};

enum { CHUNK_PLAIN = 256, GROUP = 32 };

/* Decodes block `b` of a row (for plain float types, the 256-element chunk
 * starting at element 256*b, shortened to what remains of n). */
static void decode_block(uint32_t type, const void *w, int64_t b, int64_t n, struct decoded *d)
{
    d->has_min = false;
    switch (type) {
    case SL_GGML_TYPE_F32: case SL_GGML_TYPE_F16: case SL_GGML_TYPE_BF16: {
        int64_t start = b * CHUNK_PLAIN;
        int len = (int)(n - start < CHUNK_PLAIN ? n - start : CHUNK_PLAIN);
        d->n = d->sub = len;
        d->nsub = 1;
        d->ds[0] = 1.0f;
        if (type == SL_GGML_TYPE_F32)
            memcpy(d->q, (const float *)w + start, (size_t)len * sizeof(float));
        else if (type == SL_GGML_TYPE_F16)
            for (int i = 0; i < len; i++)
                d->q[i] = sl_fp16_to_fp32(((const uint16_t *)w)[start + i]);
        else
            for (int i = 0; i < len; i++)
                d->q[i] = sl_bf16_to_fp32(((const uint16_t *)w)[start + i]);
        break;
    }
    case SL_GGML_TYPE_Q8_0: case SL_GGML_TYPE_Q4_0: case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K:
    case SL_GGML_TYPE_Q6_K:
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4: {
        /* the integer unpacking the 8- and 16-bit activation paths use
         * (vec_dot_int.h), then in float: codes, d*sc and dmin*m are exact
         * conversions and one product each, as if decoded here directly */
        sl_qblock u;
        sl_vec_dot_unpack(type, w, b, &u);
        d->n = u.n;
        d->sub = u.sub;
        d->nsub = u.n / u.sub;
        d->has_min = type == SL_GGML_TYPE_Q4_K || type == SL_GGML_TYPE_Q5_K;
        for (int s = 0; s < d->nsub; s++) {
            d->ds[s] = u.d * (float)u.sc[s];
            if (d->has_min)
                d->dm[s] = u.dmin * (float)u.mn[s];
        }
        if (sl_vec_dot_block_min(type)) {   /* Q4_1/Q5_1: x = d*q + m, so dm = -m (exact) */
            d->has_min = true;
            d->dm[0] = -u.m;
        }
        for (int i = 0; i < u.n; i++)
            d->q[i] = (float)u.q[i];
        break;
    }
    default:
        assert(!"vec_dot: unsupported type");
    }
}

/* The block's contribution to one dot product. Four partial sums per
 * sub-block give the CPU independent add chains; their order is fixed. */
static float block_dot(const struct decoded *d, const float *x)
{
    float total = 0.0f;
    for (int s = 0; s < d->nsub; s++) {
        const float *q = d->q + s * d->sub, *xs = x + s * d->sub;
        float p[4] = {0, 0, 0, 0}, sx[4] = {0, 0, 0, 0};
        int i = 0;
        for (; i + 4 <= d->sub; i += 4)
            for (int k = 0; k < 4; k++) {
                p[k] += q[i + k] * xs[i + k];
                sx[k] += xs[i + k];
            }
        for (; i < d->sub; i++) {    /* tail of a short F32/F16/BF16 chunk */
            p[0] += q[i] * xs[i];
            sx[0] += xs[i];
        }
        float sq = (p[0] + p[1]) + (p[2] + p[3]);
        total += d->ds[s] * sq;
        if (d->has_min)
            total -= d->dm[s] * ((sx[0] + sx[1]) + (sx[2] + sx[3]));
    }
    return total;
}

void sl_vec_dot_multi_portable(uint32_t type, const void *w_row, const float *x, int64_t ldx,
                               int m, float *out, int64_t n)
{
    assert(sl_ggml_type_supported(type) && n % sl_ggml_block_elems(type) == 0);
    if (sl_quant_klow_type(type)) {   /* Q2_K, Q3_K, IQ4_XS: vec_dot_klow.c */
        sl_vec_dot_klow_f32_portable(type, w_row, x, ldx, m, out, n);
        return;
    }
    int64_t be = sl_ggml_block_elems(type) == 1 ? CHUNK_PLAIN : sl_ggml_block_elems(type);
    int64_t nb = (n + be - 1) / be;
    struct decoded d;
    for (int j0 = 0; j0 < m; j0 += GROUP) {
        int mt = m - j0 < GROUP ? m - j0 : GROUP;
        float acc[GROUP] = {0};
        for (int64_t b = 0; b < nb; b++) {
            decode_block(type, w_row, b, n, &d);
            for (int j = 0; j < mt; j++)
                acc[j] += block_dot(&d, x + (int64_t)(j0 + j) * ldx + b * be);
        }
        for (int j = 0; j < mt; j++)
            out[j0 + j] = acc[j];
    }
}

/* ======================================================================
 * Run-time dispatch
 * ====================================================================== */

typedef void (*multi_fn)(uint32_t, const void *, const float *, int64_t, int, float *, int64_t);
typedef void (*q8_fn)(uint32_t, const void *, const void *, size_t, int, float *, int64_t);

typedef void (*q8_rows_fn)(uint32_t, const void *, size_t, int, const void *, size_t, int, float *, int64_t);

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static multi_fn isa_multi = sl_vec_dot_multi_portable;
static q8_fn isa_q8 = sl_vec_dot_q8_multi_portable;
static q8_fn isa_q16 = sl_vec_dot_q16_multi_portable;
static q8_rows_fn isa_q8_rows;   /* the 8-bit formats' several-row kernel; NULL: row by row */
static const char *isa_name = "portable";

bool sl_vec_dot_avx2_available(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* f16c from cpuid directly: clang 14's __builtin_cpu_supports does not
     * know "f16c" (the fuzz build uses clang) */
    unsigned int a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return false;
#endif
}

bool sl_vec_dot_avx512_available(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (!sl_vec_dot_avx2_available())
        return false;
    /* cpuid leaf 7: AVX512F (ebx 16), BW (ebx 30), VL (ebx 31), VNNI (ecx
     * 11); and the OS must save the opmask and zmm state (XCR0 bits 1, 2,
     * 5, 6, 7), which cpuid alone does not say */
    unsigned int a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    bool cpu = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) && (c & (1u << 11));
    unsigned int lo = 0, hi = 0;
    if (cpu && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE))
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return cpu && (lo & 0xE6u) == 0xE6u;
#else
    return false;
#endif
}

static void isa_choose(void)
{
    const char *env = getenv("SLUICE_CPU_ISA");
    if (env && strcmp(env, "portable") == 0)
        return;
    if (sl_vec_dot_avx2_available()) {
        isa_multi = sl_vec_dot_multi_avx2;
        isa_q8 = sl_vec_dot_q8_multi_avx2;
        isa_q16 = sl_vec_dot_q16_multi_avx2;
        isa_q8_rows = sl_vec_dot_q8_rows_avx2;
        isa_name = "avx2";
    }
    if (!(env && strcmp(env, "avx2") == 0) && sl_vec_dot_avx512_available()) {
        isa_q8 = sl_vec_dot_q8_multi_avx512;
        isa_q8_rows = sl_vec_dot_q8_rows_avx512;
        isa_name = "avx512";
    }
}

const char *sl_vec_dot_isa(void)
{
    pthread_once(&isa_once, isa_choose);
    return isa_name;
}

void sl_vec_dot_multi(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                      float *out, int64_t n)
{
    pthread_once(&isa_once, isa_choose);
    isa_multi(type, w_row, x, ldx, m, out, n);
}

float sl_vec_dot(uint32_t type, const void *w_row, const float *x, int64_t n)
{
    /* one vector through the batched path: bitwise equality by construction */
    float r;
    pthread_once(&isa_once, isa_choose);
    isa_multi(type, w_row, x, 0, 1, &r, n);
    return r;
}

void sl_vec_dot_act_multi(uint32_t type, enum sl_act_format f, const void *w_row, const void *xa, size_t ldxa,
                          int m, float *out, int64_t n)
{
    pthread_once(&isa_once, isa_choose);
    if (f == SL_ACT_Q8_0 || f == SL_ACT_Q8_1 || f == SL_ACT_Q8_K) {
        assert(f == sl_act_format_of_type(type));
        isa_q8(type, w_row, xa, ldxa, m, out, n);
    } else if (f == SL_ACT_Q16_0 || f == SL_ACT_Q16_K) {
        assert(f == sl_act_format_of_mode(SL_ACT_MODE_Q16, type));
        isa_q16(type, w_row, xa, ldxa, m, out, n);
    } else {
        assert(ldxa % sizeof(float) == 0);
        isa_multi(type, w_row, xa, (int64_t)(ldxa / sizeof(float)), m, out, n);
    }
}

void sl_vec_dot_act_rows(uint32_t type, enum sl_act_format f, const void *w, size_t row_bytes, int nr,
                         const void *xa, size_t ldxa, int m, float *out, int64_t n)
{
    pthread_once(&isa_once, isa_choose);
    if (m <= 0)
        return;
    if (isa_q8_rows && f == sl_act_format_of_type(type) &&
        (f == SL_ACT_Q8_0 || f == SL_ACT_Q8_1 || f == SL_ACT_Q8_K)) {
        isa_q8_rows(type, w, row_bytes, nr, xa, ldxa, m, out, n);
        return;
    }
    for (int r = 0; r < nr; r++)
        sl_vec_dot_act_multi(type, f, (const char *)w + (size_t)r * row_bytes, xa, ldxa, m, out + (size_t)r * m, n);
}
