/* kernels/cpu/vec_dot_avx2.c: AVX2+FMA+F16C weight-row dot products.
 * Compiled with -mavx2 -mfma -mf16c; called only after vec_dot.c has seen
 * the CPU support them. Runs in the CPU backend's threads.
 * Algorithm: the row is walked in chunks of 256 elements (one K-quant
 * super-block, eight 32-element blocks, or 256 plain floats). A quantized
 * chunk is first staged (codes unpacked to bytes, scales to floats), then
 * turned into weights w = d*q - dmin, 8 at a time: the K-quant min is folded
 * in by one FMA per 8 weights, which costs what a per-sub-block activation
 * sum would cost for one vector and nothing per extra vector. Each vector
 * takes 8 independent FMA chains over the weights; vector element i always
 * feeds chain (i/8) % 8, so results do not depend on m.
 *   m = 1 (decode): weights go straight from registers into the chains.
 *   m > 1 (prefill): weights go to a 1 KiB buffer once per group of up to
 *   32 vectors, which then read it four at a time (one weight load, four
 *   FMAs).
 * Both compute the same operations, hence the same bits (tested).
 * Trade-off: with float activations ports 0/1 (convert, FMA) bound the
 * speed: ~3 uops per 8 Q4_K weights. The int8-activation kernels
 * (vec_dot_q8_avx2.c) about halve that and are the engine's default for
 * quantized weights; these serve F32/F16/BF16 weights and SLUICE_CPU_ACT=f32. */
#include "kernels/cpu/vec_dot.h"

#include <assert.h>
#include <immintrin.h>

#include "kernels/cpu/avx2_legacy.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant.h"
#include "model/quant_klow.h"

enum { CHUNK = 256, GROUP = 32 };

/* ======================================================================
 * Decoders: one chunk into w[0..len)
 * ====================================================================== */

/* Port budget (Intel): widening bytes to dwords (vpmovzx/sx) runs only on
 * port 5, converts and FMAs only on ports 0/1. So the decoders widen straight
 * from memory (codes are first staged in a 32-byte-aligned byte buffer),
 * broadcast scales from memory (a load, not a p5 shuffle), and, where codes
 * are signed and there is no min, replace convert+multiply by an integer add
 * of a magic exponent and one FMA:
 *   bits(0x4B400000 + q) = 1.5*2^23 + q   for |q| < 2^22, exactly, so
 *   fma(that, ds, -1.5*2^23*ds) = round(q*ds), the dequantizer's value,
 * provided 1.5*2^23*ds is exact: ds = fp16 * int8 has <= 19 significant
 * bits, and 3*ds needs 2 more, within float's 24. */
#define MAGIC_BITS 0x4B400000
#define MAGIC_F 12582912.0f   /* 1.5 * 2^23 */

/* A quantized chunk staged for decoding: byte codes in element order, and
 * for the 8-element vector k the pair (s, o) at index k >> shift:
 *   K4 types (Q4_K, Q5_K): unsigned codes, w = q*s - o  (s = d*sc, o = dmin*m)
 *   the others:            signed codes,   w = (MAGIC + q)*s + o  (o = -MAGIC*s)
 * Staging costs a few stores per chunk; it lets one chunk be consumed either
 * into the float buffer (batches) or straight into the FMA chains (m = 1)
 * with the same arithmetic, so both give the same bits. */
struct staged {
    _Alignas(32) uint8_t codes[CHUNK];
    _Alignas(32) float s[16];
    _Alignas(32) float o[16];
    int shift;
};

static void stage_q8_0(const sl_block_q8_0 *b, int nblk, struct staged *st)
{
    for (int i = 0; i < nblk; i++) {
        float d = _cvtsh_ss(b[i].d);
        st->s[i] = d;
        st->o[i] = -MAGIC_F * d;
        _mm256_store_si256((__m256i *)(st->codes + 32 * i), _mm256_loadu_si256((const __m256i *)b[i].qs));
    }
    st->shift = 2;
}

static void stage_q4_0(const sl_block_q4_0 *b, int nblk, struct staged *st)
{
    for (int i = 0; i < nblk; i++) {
        float d = _cvtsh_ss(b[i].d);
        st->s[i] = d;
        st->o[i] = -MAGIC_F * d;
        __m128i lo, hi;
        sl_avx2_q4_0_codes(b[i].qs, &lo, &hi);
        _mm_store_si128((__m128i *)(st->codes + 32 * i), lo);
        _mm_store_si128((__m128i *)(st->codes + 32 * i + 16), hi);
    }
    st->shift = 2;
}

/* Q4_K and Q5_K (qh != NULL): sub-block s = 2c (low nibbles of chunk c) or
 * 2c+1 (high nibbles); Q5_K's bit 4 of element 32s+l is bit s of qh[l].
 * The min needs w = q*ds - dm: convert + one fmsub (same p0/p1 cost as the
 * magic add + fma + sub, and one rounding instead of two). */
static inline void stage_k4(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
                            const uint8_t *qh, struct staged *st)
{
    uint32_t f[4];
    sl_avx2_k4_scale_words(scales, f);
    __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)f[1], (int)f[0])));
    __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)f[3], (int)f[2])));
    _mm256_store_ps(st->s, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)), scf));
    _mm256_store_ps(st->o, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hdmin)), mnf));
    __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        sl_avx2_k4_codes(qs, qh != NULL, h, c, &lo, &hi);
        _mm256_store_si256((__m256i *)(st->codes + 64 * c), lo);
        _mm256_store_si256((__m256i *)(st->codes + 64 * c + 32), hi);
    }
    st->shift = 2;
}

static void stage_q6_K(const sl_block_q6_K *b, struct staged *st)
{
    const __m256i off = _mm256_set1_epi8(32);
    __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d)), nmagic = _mm256_set1_ps(-MAGIC_F);
    for (int k = 0; k < 2; k++) {
        __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * k))));
        __m256 ds = _mm256_mul_ps(d, sc);
        _mm256_store_ps(st->s + 8 * k, ds);
        _mm256_store_ps(st->o + 8 * k, _mm256_mul_ps(nmagic, ds));
    }
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        sl_avx2_q6_K_codes(b->ql, b->qh, h, q);
        for (int k = 0; k < 4; k++)
            _mm256_store_si256((__m256i *)(st->codes + 128 * h + 32 * k), _mm256_sub_epi8(q[k], off));
    }
    st->shift = 1;   /* 16-element sub-blocks */
}

/* Weights of the 8 codes at p under the pair (s, o) of their sub-block. */
static inline __m256 staged_vec(const uint8_t *p, bool k4, __m256 s, __m256 o)
{
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    if (k4)
        return _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), s, o);
    __m256i v = _mm256_add_epi32(_mm256_cvtepi8_epi32(b), _mm256_set1_epi32(MAGIC_BITS));
    return _mm256_fmadd_ps(_mm256_castsi256_ps(v), s, o);
}

/* Staged chunk -> w[0..len). k4 and shift are compile-time constants at
 * every call; the pair is broadcast once per sub-block. */
static inline void staged_store(const struct staged *st, bool k4, int shift, int len, float *w)
{
    for (int g = 0; g < (len / 8) >> shift; g++) {
        __m256 s = _mm256_broadcast_ss(&st->s[g]), o = _mm256_broadcast_ss(&st->o[g]);
        for (int v = 0; v < (1 << shift); v++) {
            int k = (g << shift) + v;
            _mm256_store_ps(w + 8 * k, staged_vec(st->codes + 8 * k, k4, s, o));
        }
    }
}

/* Staging kinds: which staged_vec variant and pairs per vector. */
enum { STAGED_PLAIN = -1, STAGED_SIGNED = 0, STAGED_K4 = 1, STAGED_SIGNED16 = 2 };

/* The other 32-element types (avx2_legacy.h): signed codes staged as Q4_0's
 * (Q5_0, Q8_1, IQ4_NL's levels, MXFP4's doubled values: w = round(q*d), the dequantizer's value),
 * or unsigned ones as the K4 types' with s = d, o = -m (Q4_1, Q5_1:
 * w = q*d + m, one rounding). Returns the STAGED_* kind. */
static inline int stage_legacy(uint32_t type, const void *row, int64_t c, int nblk, struct staged *st)
{
    bool min1 = sl_avx2_legacy_min(type);
    int bb = sl_avx2_legacy_bytes(type);
    for (int i = 0; i < nblk; i++) {
        float d, m;
        __m128i lo, hi;
        sl_avx2_legacy_block(type, (const char *)row + (c * (CHUNK / 32) + i) * bb, &lo, &hi, &d, &m);
        st->s[i] = d;
        st->o[i] = min1 ? -m : -MAGIC_F * d;
        _mm_store_si128((__m128i *)(st->codes + 32 * i), lo);
        _mm_store_si128((__m128i *)(st->codes + 32 * i + 16), hi);
    }
    st->shift = 2;
    return min1 ? STAGED_K4 : STAGED_SIGNED;
}

/* Stages chunk c of a quantized row; returns its STAGED_* kind
 * (STAGED_PLAIN for a float type, which is not staged). */
static inline int stage_chunk(uint32_t type, const void *row, int64_t c, int len, struct staged *st)
{
    switch (type) {
    case SL_GGML_TYPE_Q8_0:
        stage_q8_0((const sl_block_q8_0 *)row + c * (CHUNK / 32), len / 32, st);
        return STAGED_SIGNED;
    case SL_GGML_TYPE_Q4_0:
        stage_q4_0((const sl_block_q4_0 *)row + c * (CHUNK / 32), len / 32, st);
        return STAGED_SIGNED;
    case SL_GGML_TYPE_Q4_K: {
        const sl_block_q4_K *b = (const sl_block_q4_K *)row + c;
        stage_k4(b->d, b->dmin, b->scales, b->qs, NULL, st);
        return STAGED_K4;
    }
    case SL_GGML_TYPE_Q5_K: {
        const sl_block_q5_K *b = (const sl_block_q5_K *)row + c;
        stage_k4(b->d, b->dmin, b->scales, b->qs, b->qh, st);
        return STAGED_K4;
    }
    case SL_GGML_TYPE_Q6_K:
        stage_q6_K((const sl_block_q6_K *)row + c, st);
        return STAGED_SIGNED16;
    /* a constant type per call, so each inlines its own unpacking */
    case SL_GGML_TYPE_Q5_0: return stage_legacy(SL_GGML_TYPE_Q5_0, row, c, len / 32, st);
    case SL_GGML_TYPE_Q4_1: return stage_legacy(SL_GGML_TYPE_Q4_1, row, c, len / 32, st);
    case SL_GGML_TYPE_Q5_1: return stage_legacy(SL_GGML_TYPE_Q5_1, row, c, len / 32, st);
    case SL_GGML_TYPE_Q8_1: return stage_legacy(SL_GGML_TYPE_Q8_1, row, c, len / 32, st);
    case SL_GGML_TYPE_IQ4_NL: return stage_legacy(SL_GGML_TYPE_IQ4_NL, row, c, len / 32, st);
    case SL_GGML_TYPE_MXFP4: return stage_legacy(SL_GGML_TYPE_MXFP4, row, c, len / 32, st);
    }
    return STAGED_PLAIN;
}

/* Decodes chunk `c` of the row into w; returns its length (256 except the
 * last chunk of a plain row, or of a 32-element-block row with n % 256 != 0). For
 * F32 it points *wp at the row instead of copying. */
static int decode_chunk(uint32_t type, const void *row, int64_t c, int64_t n, float *w,
                        const float **wp)
{
    int64_t start = c * CHUNK;
    int len = (int)(n - start < CHUNK ? n - start : CHUNK);
    *wp = w;
    switch (type) {
    case SL_GGML_TYPE_F32:
        *wp = (const float *)row + start;
        break;
    case SL_GGML_TYPE_F16: {
        const uint16_t *h = (const uint16_t *)row + start;
        int i = 0;
        for (; i + 8 <= len; i += 8)
            _mm256_store_ps(w + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        for (; i < len; i++)
            w[i] = sl_fp16_to_fp32(h[i]);
        break;
    }
    case SL_GGML_TYPE_BF16: {
        const uint16_t *h = (const uint16_t *)row + start;
        int i = 0;
        for (; i + 8 <= len; i += 8) {
            __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
            _mm256_store_ps(w + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        }
        for (; i < len; i++)
            w[i] = sl_bf16_to_fp32(h[i]);
        break;
    }
    default: {
        struct staged st;
        switch (stage_chunk(type, row, c, len, &st)) {
        case STAGED_K4: staged_store(&st, true, 2, len, w); break;
        case STAGED_SIGNED: staged_store(&st, false, 2, len, w); break;
        case STAGED_SIGNED16: staged_store(&st, false, 1, len, w); break;
        default: assert(!"vec_dot_avx2: unsupported type");
        }
        break;
    }
    }
    return len;
}

/* ======================================================================
 * Dot products over decoded chunks
 * ====================================================================== */

/* One dot product's running state: 8 FMA chains (FMA latency 4 x 2 ports)
 * and a scalar for the tail of a plain row whose length is not a multiple
 * of 8. */
struct acc {
    __m256 a[8];
    float tail;
};

/* Adds w[0..len) . x[0..len) into *acc; the element order and the chain
 * each element feeds depend only on len, never on the caller's m. */
static inline void dot_chunk(const float *w, const float *x, int len, struct acc *acc)
{
    /* locals, not acc->a[]: __m256 may alias float, so chains kept in
     * memory would be stored and reloaded around every load of w and x */
    __m256 a0 = acc->a[0], a1 = acc->a[1], a2 = acc->a[2], a3 = acc->a[3];
    __m256 a4 = acc->a[4], a5 = acc->a[5], a6 = acc->a[6], a7 = acc->a[7];
    int i = 0;
    for (; i + 64 <= len; i += 64) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
        a4 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 32), _mm256_loadu_ps(x + i + 32), a4);
        a5 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 40), _mm256_loadu_ps(x + i + 40), a5);
        a6 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 48), _mm256_loadu_ps(x + i + 48), a6);
        a7 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 56), _mm256_loadu_ps(x + i + 56), a7);
    }
    for (; i + 8 <= len; i += 8)    /* a Q8_0/Q4_0 or plain row's last chunk */
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float t = acc->tail;
    for (; i < len; i++)
        t += w[i] * x[i];
    acc->tail = t;
    acc->a[0] = a0; acc->a[1] = a1; acc->a[2] = a2; acc->a[3] = a3;
    acc->a[4] = a4; acc->a[5] = a5; acc->a[6] = a6; acc->a[7] = a7;
}

/* dot_chunk for one vector over a full staged chunk, without the float
 * buffer: the same weights (staged_vec) feed the same chains in the same
 * order, so the result is bitwise that of decode_chunk + dot_chunk, minus a
 * store and a reload per 8 weights. */
static inline void staged_dot(const struct staged *st, bool k4, int shift, const float *x,
                              struct acc *acc)
{
    __m256 a[8];
    for (int v = 0; v < 8; v++)
        a[v] = acc->a[v];
    for (int c = 0; c < CHUNK / 64; c++) {
        const float *xc = x + 64 * c;
        /* fully unrolled (constant bounds): a[] stays in registers */
        for (int g = 0; g < 8 >> shift; g++) {
            int sg = ((8 * c) >> shift) + g;
            __m256 s = _mm256_broadcast_ss(&st->s[sg]), o = _mm256_broadcast_ss(&st->o[sg]);
            for (int v = 0; v < (1 << shift); v++) {
                int k = (g << shift) + v;
                a[k] = _mm256_fmadd_ps(staged_vec(st->codes + 64 * c + 8 * k, k4, s, o),
                                       _mm256_loadu_ps(xc + 8 * k), a[k]);
            }
        }
    }
    for (int v = 0; v < 8; v++)
        acc->a[v] = a[v];
}

/* dot_chunk for four vectors over one full chunk, sharing each weight load
 * (1.25 loads per FMA instead of 2). Their 32 chains do not fit the 16 ymm
 * registers, so chains go two at a time (0-1, 2-3, ...); each chain still
 * takes its elements in dot_chunk's order, so the bits are the same. */
static inline void dot_chunk4(const float *w, const float *const x[4], struct acc *const acc[4])
{
    for (int h = 0; h < 8; h += 2) {
        __m256 a0 = acc[0]->a[h], b0 = acc[0]->a[h + 1], a1 = acc[1]->a[h], b1 = acc[1]->a[h + 1];
        __m256 a2 = acc[2]->a[h], b2 = acc[2]->a[h + 1], a3 = acc[3]->a[h], b3 = acc[3]->a[h + 1];
        for (int i = 8 * h; i < CHUNK; i += 64) {
            __m256 wa = _mm256_loadu_ps(w + i), wb = _mm256_loadu_ps(w + i + 8);
            a0 = _mm256_fmadd_ps(wa, _mm256_loadu_ps(x[0] + i), a0);
            b0 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(x[0] + i + 8), b0);
            a1 = _mm256_fmadd_ps(wa, _mm256_loadu_ps(x[1] + i), a1);
            b1 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(x[1] + i + 8), b1);
            a2 = _mm256_fmadd_ps(wa, _mm256_loadu_ps(x[2] + i), a2);
            b2 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(x[2] + i + 8), b2);
            a3 = _mm256_fmadd_ps(wa, _mm256_loadu_ps(x[3] + i), a3);
            b3 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(x[3] + i + 8), b3);
        }
        acc[0]->a[h] = a0; acc[0]->a[h + 1] = b0; acc[1]->a[h] = a1; acc[1]->a[h + 1] = b1;
        acc[2]->a[h] = a2; acc[2]->a[h + 1] = b2; acc[3]->a[h] = a3; acc[3]->a[h + 1] = b3;
    }
}

static inline float hsum(const struct acc *acc)
{
    const __m256 *a = acc->a;
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
                             _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
    return sl_avx2_hsum_ps(s) + acc->tail;
}

/* mt (<= GROUP) vectors through the whole row. Inlined twice: with mt = 1
 * (decode: the chains live in registers across chunks, and full quantized
 * chunks skip the float buffer) and generic. */
static inline __attribute__((always_inline)) void dot_group(uint32_t type, const void *w_row,
                                                            const float *x, int64_t ldx, int mt,
                                                            float *out, int64_t n)
{
    _Alignas(32) float w[CHUNK];
    struct acc acc[GROUP];
    int64_t nc = (n + CHUNK - 1) / CHUNK;
    for (int j = 0; j < mt; j++)
        acc[j] = (struct acc){.tail = 0.0f};
    for (int64_t c = 0; c < nc; c++) {
        if (mt == 1 && n - c * CHUNK >= CHUNK) {
            struct staged st;
            int kind = stage_chunk(type, w_row, c, CHUNK, &st);
            if (kind == STAGED_K4) {
                staged_dot(&st, true, 2, x + c * CHUNK, &acc[0]);
                continue;
            } else if (kind == STAGED_SIGNED) {
                staged_dot(&st, false, 2, x + c * CHUNK, &acc[0]);
                continue;
            } else if (kind == STAGED_SIGNED16) {
                staged_dot(&st, false, 1, x + c * CHUNK, &acc[0]);
                continue;
            }
        }
        const float *wc;
        int len = decode_chunk(type, w_row, c, n, w, &wc);
        int j = 0;
        if (len == CHUNK)
            for (; j + 4 <= mt; j += 4) {
                const float *xs[4];
                struct acc *as[4];
                for (int k = 0; k < 4; k++) {
                    xs[k] = x + (int64_t)(j + k) * ldx + c * CHUNK;
                    as[k] = &acc[j + k];
                }
                dot_chunk4(wc, xs, as);
            }
        for (; j < mt; j++)
            dot_chunk(wc, x + (int64_t)j * ldx + c * CHUNK, len, &acc[j]);
    }
    for (int j = 0; j < mt; j++)
        out[j] = hsum(&acc[j]);
}

void sl_vec_dot_multi_avx2(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                           float *out, int64_t n)
{
    assert(sl_ggml_type_supported(type) && n % sl_ggml_block_elems(type) == 0);
    if (sl_quant_klow_type(type)) {   /* Q2_K, Q3_K, IQ4_XS: vec_dot_klow_avx2.c */
        sl_vec_dot_klow_f32_avx2(type, w_row, x, ldx, m, out, n);
        return;
    }
    if (m == 1) {
        dot_group(type, w_row, x, ldx, 1, out, n);
        return;
    }
    for (int j0 = 0; j0 < m; j0 += GROUP)
        dot_group(type, w_row, x + (int64_t)j0 * ldx, ldx, m - j0 < GROUP ? m - j0 : GROUP, out + j0, n);
}
