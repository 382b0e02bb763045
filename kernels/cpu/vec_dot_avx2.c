/* kernels/cpu/vec_dot_avx2.c: AVX2+FMA+F16C weight-row dot products.
 * Compiled with -mavx2 -mfma -mf16c; called only after vec_dot.c has seen
 * the CPU support them. Runs in the CPU backend's threads.
 * Algorithm: the row is walked in chunks of 256 elements (one K-quant
 * super-block, eight Q8_0/Q4_0 blocks, or 256 plain floats). Each chunk is
 * decoded once into a 1 KiB float buffer w = d*q - dmin (the min folded in
 * by one FMA per 8 weights while decoding, which costs what a per-sub-block
 * activation sum would and leaves 1 FMA per 8 weights per vector), then
 * every vector of the group takes 4 independent FMA chains over it.
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

/* 8 unsigned / signed bytes -> 8 floats */
static inline __m256 u8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
static inline __m256 i8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

/* 32 unsigned codes -> w[0..32) = q*ds - dm */
static inline void put32_u8_min(__m256i q, __m256 ds, __m256 dm, float *w)
{
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_store_ps(w + 0, _mm256_fmsub_ps(u8x8_ps(lo), ds, dm));
    _mm256_store_ps(w + 8, _mm256_fmsub_ps(u8x8_ps(_mm_srli_si128(lo, 8)), ds, dm));
    _mm256_store_ps(w + 16, _mm256_fmsub_ps(u8x8_ps(hi), ds, dm));
    _mm256_store_ps(w + 24, _mm256_fmsub_ps(u8x8_ps(_mm_srli_si128(hi, 8)), ds, dm));
}

/* 16 signed codes -> w[0..16) = q*ds */
static inline void put16_i8(__m128i q, __m256 ds, float *w)
{
    _mm256_store_ps(w + 0, _mm256_mul_ps(i8x8_ps(q), ds));
    _mm256_store_ps(w + 8, _mm256_mul_ps(i8x8_ps(_mm_srli_si128(q, 8)), ds));
}

static void decode_q8_0(const sl_block_q8_0 *b, int nblk, float *w)
{
    for (int i = 0; i < nblk; i++, w += 32) {
        __m256 d = _mm256_set1_ps(sl_fp16_to_fp32(b[i].d));
        put16_i8(_mm_loadu_si128((const __m128i *)b[i].qs), d, w);
        put16_i8(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)), d, w + 16);
    }
}

static void decode_q4_0(const sl_block_q4_0 *b, int nblk, float *w)
{
    const __m128i m4 = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
    for (int i = 0; i < nblk; i++, w += 32) {
        __m256 d = _mm256_set1_ps(sl_fp16_to_fp32(b[i].d));
        __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);
        put16_i8(lo, d, w);
        put16_i8(hi, d, w + 16);
    }
}

/* Q4_K and Q5_K (qh != NULL): sub-block s = 2c (low nibbles of chunk c) or
 * 2c+1 (high nibbles); Q5_K's bit 4 of element 32s+l is bit s of qh[l]. */
static void decode_k4(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
                      const uint8_t *qh, float *w)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
    float d = sl_fp16_to_fp32(hd), dmin = sl_fp16_to_fp32(hdmin);
    __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        for (int half = 0; half < 2; half++) {
            int s = 2 * c + half;
            uint8_t sc, m;
            sl_quant_get_scale_min_k4(s, scales, &sc, &m);
            __m256i v = _mm256_and_si256(half ? _mm256_srli_epi16(q, 4) : q, m4);
            if (qh) {
                __m256i bit = _mm256_set1_epi8((char)(1 << s));
                __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
                v = _mm256_or_si256(v, _mm256_and_si256(set, b4));
            }
            put32_u8_min(v, _mm256_set1_ps(d * (float)sc), _mm256_set1_ps(dmin * (float)m),
                         w + 32 * s);
        }
    }
}

static void decode_q6_K(const sl_block_q6_K *b, float *w)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const __m256i off = _mm256_set1_epi8(32);
    float d = sl_fp16_to_fp32(b->d);
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
        for (int k = 0; k < 4; k++) {
            __m256i v = _mm256_sub_epi8(q[k], off);
            int s = 8 * h + 2 * k;   /* 16-element sub-blocks: two per 32 codes */
            float *y = w + 128 * h + 32 * k;
            put16_i8(_mm256_castsi256_si128(v), _mm256_set1_ps(d * (float)b->scales[s]), y);
            put16_i8(_mm256_extracti128_si256(v, 1), _mm256_set1_ps(d * (float)b->scales[s + 1]), y + 16);
        }
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

/* Four independent FMA chains over w[0..len) . x[0..len); the element
 * order and chain assignment depend only on len. */
static inline void dot_chunk(const float *w, const float *x, int len, __m256 a[4], float *tail)
{
    int i = 0;
    for (; i + 32 <= len; i += 32) {
        a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a[0]);
        a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a[1]);
        a[2] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a[2]);
        a[3] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a[3]);
    }
    for (; i + 8 <= len; i += 8)
        a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a[0]);
    for (; i < len; i++)
        *tail += w[i] * x[i];
}

static inline float hsum(const __m256 a[4], float tail)
{
    __m256 s = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v) + tail;
}

void sl_vec_dot_multi_avx2(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                           float *out, int64_t n)
{
    assert(sl_ggml_type_supported(type) && n % sl_ggml_block_elems(type) == 0);
    _Alignas(32) float w[CHUNK];
    int64_t nc = (n + CHUNK - 1) / CHUNK;
    for (int j0 = 0; j0 < m; j0 += GROUP) {
        int mt = m - j0 < GROUP ? m - j0 : GROUP;
        __m256 acc[GROUP][4];
        float tail[GROUP];
        for (int j = 0; j < mt; j++) {
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = _mm256_setzero_ps();
            tail[j] = 0.0f;
        }
        for (int64_t c = 0; c < nc; c++) {
            const float *wc;
            int len = decode_chunk(type, w_row, c, n, w, &wc);
            for (int j = 0; j < mt; j++)
                dot_chunk(wc, x + (int64_t)(j0 + j) * ldx + c * CHUNK, len, acc[j], &tail[j]);
        }
        for (int j = 0; j < mt; j++)
            out[j0 + j] = hsum(acc[j], tail[j]);
    }
}
