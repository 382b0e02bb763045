/* kernels/cpu/vec_dot_avx2.c: AVX2+FMA+F16C weight-row dot products.
 * Compiled with -mavx2 -mfma -mf16c; called only after vec_dot.c has seen
 * the CPU support them. Runs in the CPU backend's threads.
 * Algorithm: the row is walked in chunks of 256 elements (one K-quant
 * super-block, eight Q8_0/Q4_0 blocks, or 256 plain floats). Each chunk is
 * decoded once into a 1 KiB float buffer w = d*q - dmin (the min folded in
 * by one FMA per 8 weights while decoding, which costs what a per-sub-block
 * activation sum would and leaves 1 FMA per 8 weights per vector), then
 * every vector of the group takes 8 independent FMA chains over it.
 * Trade-off: for one vector (decode) the buffer costs a store and a reload
 * per 8 weights, which the load/store ports absorb; the arithmetic ports
 * (convert + 2 FMA per 8 weights) bound the speed. An int8-activation
 * variant (maddubs) would halve that, at the cost of 1e-3-level error. */
#include "kernels/cpu/vec_dot.h"

#include <assert.h>
#include <immintrin.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant.h"

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

/* 8 signed bytes at p -> w[0..8) = q*ds, via the magic add; nds = -MAGIC_F*ds */
static inline void put8_i8(const int8_t *p, __m256 ds, __m256 nds, float *w)
{
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256 f = _mm256_castsi256_ps(_mm256_add_epi32(v, _mm256_set1_epi32(MAGIC_BITS)));
    _mm256_store_ps(w, _mm256_fmadd_ps(f, ds, nds));
}

static void decode_q8_0(const sl_block_q8_0 *b, int nblk, float *w)
{
    for (int i = 0; i < nblk; i++, w += 32) {
        float d = _cvtsh_ss(b[i].d);
        __m256 ds = _mm256_set1_ps(d), nds = _mm256_set1_ps(-MAGIC_F * d);
        for (int k = 0; k < 4; k++)
            put8_i8(b[i].qs + 8 * k, ds, nds, w + 8 * k);
    }
}

static void decode_q4_0(const sl_block_q4_0 *b, int nblk, float *w)
{
    const __m128i m4 = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
    _Alignas(32) int8_t codes[32];
    for (int i = 0; i < nblk; i++, w += 32) {
        float d = _cvtsh_ss(b[i].d);
        __m256 ds = _mm256_set1_ps(d), nds = _mm256_set1_ps(-MAGIC_F * d);
        __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        _mm_store_si128((__m128i *)codes, _mm_sub_epi8(_mm_and_si128(q, m4), eight));
        _mm_store_si128((__m128i *)(codes + 16),
                        _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight));
        for (int k = 0; k < 4; k++)
            put8_i8(codes + 8 * k, ds, nds, w + 8 * k);
    }
}

/* Q4_K and Q5_K (qh != NULL): sub-block s = 2c (low nibbles of chunk c) or
 * 2c+1 (high nibbles); Q5_K's bit 4 of element 32s+l is bit s of qh[l].
 * The min needs w = q*ds - dm: convert + one fmsub (same p0/p1 cost as the
 * magic add + fma + sub, and one rounding instead of two). */
static void decode_k4(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
                      const uint8_t *qh, float *w)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
    _Alignas(32) uint8_t codes[SL_QK_K];
    _Alignas(32) float dsv[8], dmv[8];
    /* the 16 six-bit fields at once, as three little-endian words (bytes
     * 0-3 low scales, 4-7 low mins, 8-11 high nibbles; top bits of bytes
     * 0-7 are bits 4-5 of the high ones; see sl_quant_get_scale_min_k4) */
    uint32_t u[3];
    memcpy(u, scales, 12);
    uint32_t sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
    uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo)));
    __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo)));
    _mm256_store_ps(dsv, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)), scf));
    _mm256_store_ps(dmv, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hdmin)), mnf));
    __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh) {
            __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(2 << (2 * c)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bl), bl), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bh), bh), b4));
        }
        _mm256_store_si256((__m256i *)(codes + 64 * c), lo);
        _mm256_store_si256((__m256i *)(codes + 64 * c + 32), hi);
    }
    for (int s = 0; s < 8; s++) {
        __m256 ds = _mm256_broadcast_ss(&dsv[s]), dm = _mm256_broadcast_ss(&dmv[s]);
        for (int k = 0; k < 4; k++) {
            const uint8_t *p = codes + 32 * s + 8 * k;
            __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
            _mm256_store_ps(w + 32 * s + 8 * k, _mm256_fmsub_ps(f, ds, dm));
        }
    }
}

static void decode_q6_K(const sl_block_q6_K *b, float *w)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const __m256i off = _mm256_set1_epi8(32);
    _Alignas(32) int8_t codes[SL_QK_K];
    _Alignas(32) float dsv[16], ndsv[16];
    __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d)), nmagic = _mm256_set1_ps(-MAGIC_F);
    for (int k = 0; k < 2; k++) {
        __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * k))));
        __m256 ds = _mm256_mul_ps(d, sc);
        _mm256_store_ps(dsv + 8 * k, ds);
        _mm256_store_ps(ndsv + 8 * k, _mm256_mul_ps(nmagic, ds));
    }
    for (int h = 0; h < 2; h++) {
        __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
        };
        for (int k = 0; k < 4; k++)
            _mm256_store_si256((__m256i *)(codes + 128 * h + 32 * k), _mm256_sub_epi8(q[k], off));
    }
    for (int s = 0; s < 16; s++) {   /* 16-element sub-blocks */
        __m256 ds = _mm256_broadcast_ss(&dsv[s]), nds = _mm256_broadcast_ss(&ndsv[s]);
        put8_i8(codes + 16 * s, ds, nds, w + 16 * s);
        put8_i8(codes + 16 * s + 8, ds, nds, w + 16 * s + 8);
    }
}

/* Decodes chunk `c` of the row into w; returns its length (256 except the
 * last chunk of a plain row, or of a Q8_0/Q4_0 row with n % 256 != 0). For
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
    case SL_GGML_TYPE_Q8_0:
        decode_q8_0((const sl_block_q8_0 *)row + start / 32, len / 32, w);
        break;
    case SL_GGML_TYPE_Q4_0:
        decode_q4_0((const sl_block_q4_0 *)row + start / 32, len / 32, w);
        break;
    case SL_GGML_TYPE_Q4_K: {
        const sl_block_q4_K *b = (const sl_block_q4_K *)row + c;
        decode_k4(b->d, b->dmin, b->scales, b->qs, NULL, w);
        break;
    }
    case SL_GGML_TYPE_Q5_K: {
        const sl_block_q5_K *b = (const sl_block_q5_K *)row + c;
        decode_k4(b->d, b->dmin, b->scales, b->qs, b->qh, w);
        break;
    }
    case SL_GGML_TYPE_Q6_K:
        decode_q6_K((const sl_block_q6_K *)row + c, w);
        break;
    default:
        assert(!"vec_dot_avx2: unsupported type");
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

static inline float hsum(const struct acc *acc)
{
    const __m256 *a = acc->a;
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
                             _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v) + acc->tail;
}

/* mt (<= GROUP) vectors through the whole row. Inlined twice: with mt = 1
 * (decode; the chains then live in registers across chunks) and generic. */
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
        const float *wc;
        int len = decode_chunk(type, w_row, c, n, w, &wc);
        for (int j = 0; j < mt; j++)
            dot_chunk(wc, x + (int64_t)j * ldx + c * CHUNK, len, &acc[j]);
    }
    for (int j = 0; j < mt; j++)
        out[j] = hsum(&acc[j]);
}

void sl_vec_dot_multi_avx2(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                           float *out, int64_t n)
{
    assert(sl_ggml_type_supported(type) && n % sl_ggml_block_elems(type) == 0);
    if (m == 1) {
        dot_group(type, w_row, x, ldx, 1, out, n);
        return;
    }
    for (int j0 = 0; j0 < m; j0 += GROUP)
        dot_group(type, w_row, x + (int64_t)j0 * ldx, ldx, m - j0 < GROUP ? m - j0 : GROUP, out + j0, n);
}
