/* kernels/cpu/vec_dot_q16_avx2.c: AVX2 dot products of quantized weight rows
 * with 16-bit activations (Q16_0 / Q16_K rows, act_quant.h).
 * Compiled with -mavx2 -mfma -mf16c; called only after vec_dot.c has seen
 * the CPU support them. Runs in the CPU backend's threads.
 * Algorithm: the row is walked in chunks (four Q8_0/Q4_0 blocks, or one
 * K-quant super-block). A chunk is staged once for all activation rows of
 * the group (1 in decode, up to 32 in prefill): codes widened to int16 and,
 * for the K-quants, multiplied by their sub-block scale (|sc * q| <= 4096
 * for Q6_K, 1953 for Q5_K: int16, exact). Each row then takes vpmaddwd of
 * the staged codes with its int16 codes (pairs of products summed to int32)
 * and integer adds; the block totals are exact integers, equal to the
 * portable ones (vec_dot_q16.c), and go through the same float tails
 * (vec_dot_int.h) in the same order, so the two paths agree bit for bit.
 * Overflow (activation codes |qa| <= 32767, never -32768):
 *   Q8_0/Q4_0: a block's int32 lanes hold at most 32 products of
 *     |qw| <= 128: 32 * 128 * 32767 < 2^27.
 *   K-quants: one vpmaddwd lane <= 2 * 4096 * 32767 = 268,427,264; each of
 *     the two accumulators takes 8 of them (16 vectors of 16 codes per
 *     super-block, alternating): <= 2,147,418,112 < 2^31 - 1 = 2,147,483,647.
 *     Their 16 lanes are summed in int64. The mins term, m * bsums, is at
 *     most 63 * 32 * 32767 per lane and 8 lanes: < 2^30.
 * Trade-off: every 16 codes need a widening to int16 (and for the K-quants a
 * scale multiply) that the 8-bit kernel's vpmaddubsw does not, and the
 * activation rows are twice the bytes: K-quant prefill runs at ~0.55x the
 * 8-bit kernel's; decode, bound by reading the same weight bytes, at
 * ~0.8x (docs/CPU-ACTIVATIONS.md). Staged values that a vector reloads are written
 * as whole vectors: four scalar stores read back as one vector stall store
 * forwarding, which once cost Q8_0 prefill 2.5x. */
#include <assert.h>
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/vec_dot.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "kernels/cpu/vec_dot_int.h"
#include "model/ggml_types.h"
#include "model/quant.h"

enum { GROUP = 32 };

/* A staged chunk: c16 the int16 codes (K-quants: times their sub-block
 * scale) in element order; Q8_0/Q4_0: dw the block scales (0 past nblk);
 * K-quants: mins (Q4_K/Q5_K sub-block mins as int32), d and dmin. */
struct staged {
    _Alignas(32) int16_t c16[SL_QK_K];
    _Alignas(32) int32_t mins[8];
    __m256d dw;   /* Q8_0/Q4_0 block scales as doubles, one vector store (a
                   * store-forwarding stall when it was four float stores) */
    float d, dmin;
    int nblk;
};

/* ======================================================================
 * Staging
 * ====================================================================== */

static inline void stage_q8_0(const sl_block_q8_0 *b, int nblk, struct staged *st)
{
    float d[4];
    for (int i = 0; i < 4; i++) {
        if (i >= nblk) {   /* zeros, never read; they keep the compiler sure c16 is set */
            d[i] = 0.0f;
            _mm256_store_si256((__m256i *)(st->c16 + 32 * i), _mm256_setzero_si256());
            _mm256_store_si256((__m256i *)(st->c16 + 32 * i + 16), _mm256_setzero_si256());
            continue;
        }
        d[i] = _cvtsh_ss(b[i].d);
        _mm256_store_si256((__m256i *)(st->c16 + 32 * i), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].qs)));
        _mm256_store_si256((__m256i *)(st->c16 + 32 * i + 16),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b[i].qs + 16))));
    }
    st->dw = _mm256_cvtps_pd(_mm_set_ps(d[3], d[2], d[1], d[0]));
    st->nblk = nblk;
}

static inline void stage_q4_0(const sl_block_q4_0 *b, int nblk, struct staged *st)
{
    float d[4];
    for (int i = 0; i < 4; i++) {
        if (i >= nblk) {   /* zeros, never read; they keep the compiler sure c16 is set */
            d[i] = 0.0f;
            _mm256_store_si256((__m256i *)(st->c16 + 32 * i), _mm256_setzero_si256());
            _mm256_store_si256((__m256i *)(st->c16 + 32 * i + 16), _mm256_setzero_si256());
            continue;
        }
        d[i] = _cvtsh_ss(b[i].d);
        __m128i lo, hi;
        sl_avx2_q4_0_codes(b[i].qs, &lo, &hi);
        _mm256_store_si256((__m256i *)(st->c16 + 32 * i), _mm256_cvtepi8_epi16(lo));
        _mm256_store_si256((__m256i *)(st->c16 + 32 * i + 16), _mm256_cvtepi8_epi16(hi));
    }
    st->dw = _mm256_cvtps_pd(_mm_set_ps(d[3], d[2], d[1], d[0]));
    st->nblk = nblk;
}

/* 32 unsigned codes of sub-block k times its scale sc, as two int16 vectors. */
static inline void put_scaled32(struct staged *st, int k, __m256i codes, int sc)
{
    __m256i s = _mm256_set1_epi16((short)sc);
    _mm256_store_si256((__m256i *)(st->c16 + 32 * k),
                       _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(codes)), s));
    _mm256_store_si256((__m256i *)(st->c16 + 32 * k + 16),
                       _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(codes, 1)), s));
}

/* Q4_K (qh NULL) and Q5_K: see model/quant.h for the packing. */
static inline void stage_k4(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
                            const uint8_t *qh, struct staged *st)
{
    uint32_t f[4];
    sl_avx2_k4_scale_words(scales, f);
    uint8_t sm[8];   /* scales 0-7 */
    memcpy(sm, f, 8);
    /* mins from registers: an 8-byte reload of two 4-byte stores would stall store forwarding */
    _mm256_store_si256((__m256i *)st->mins, _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)f[3], (int)f[2])));
    st->d = _cvtsh_ss(hd);
    st->dmin = _cvtsh_ss(hdmin);
    __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        sl_avx2_k4_codes(qs, qh != NULL, h, c, &lo, &hi);
        put_scaled32(st, 2 * c, lo, sm[2 * c]);
        put_scaled32(st, 2 * c + 1, hi, sm[2 * c + 1]);
    }
}

/* Q6_K: codes 0..63 minus 32, times the signed 8-bit scale of their 16. */
static inline void stage_q6_K(const sl_block_q6_K *b, struct staged *st)
{
    const __m256i off = _mm256_set1_epi16(32);
    st->d = _cvtsh_ss(b->d);
    st->dmin = 0.0f;
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        sl_avx2_q6_K_codes(b->ql, b->qh, h, q);
        for (int g = 0; g < 4; g++)   /* 32 codes = sub-blocks s and s+1 */
            for (int half = 0; half < 2; half++) {
                int s = 8 * h + 2 * g + half;
                __m128i c8 = half ? _mm256_extracti128_si256(q[g], 1) : _mm256_castsi256_si128(q[g]);
                __m256i c = _mm256_sub_epi16(_mm256_cvtepu8_epi16(c8), off);
                _mm256_store_si256((__m256i *)(st->c16 + 16 * s),
                                   _mm256_mullo_epi16(c, _mm256_set1_epi16(b->scales[s])));
            }
    }
}

/* ======================================================================
 * Per-row dot of one staged chunk
 * ====================================================================== */

/* Four Q16_0 blocks: exact int32 sums [S0..S3] (blocks past nblk: 0), then
 * the terms of vec_dot_int.h, lane i = block b0 + i, added to acc. nblk is
 * a constant 4 for all but a row's last chunk, so the branches vanish and
 * nothing goes through memory. */
static inline __attribute__((always_inline)) __m256d dot0(const struct staged *st, const sl_block_q16_0 *a,
                                                          __m256d acc, int nblk)
{
    __m256i v[4];
    for (int i = 0; i < 4; i++) {
        if (i >= nblk) {
            v[i] = _mm256_setzero_si256();
            continue;
        }
        __m256i p0 = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + 32 * i)),
                                       _mm256_loadu_si256((const __m256i *)a[i].qs));
        __m256i p1 = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + 32 * i + 16)),
                                       _mm256_loadu_si256((const __m256i *)(a[i].qs + 16)));
        v[i] = _mm256_add_epi32(p0, p1);
    }
    __m128 da = _mm_set_ps(nblk > 3 ? a[3].d : 0.0f, nblk > 2 ? a[2].d : 0.0f, nblk > 1 ? a[1].d : 0.0f, a[0].d);
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    /* sl_q16_term0 on four lanes: the product of the scales is exact, then
     * one rounding; a separate add (never fused: see vec_dot_int.h) */
    __m256d s = _mm256_mul_pd(st->dw, _mm256_cvtps_pd(da));
    __m256d t = _mm256_mul_pd(s, _mm256_cvtepi32_pd(sums));
    return _mm256_add_pd(acc, t);
}

/* One Q16_K super-block: exact isum and msum, then sl_q16_termk. */
static inline double dotk(const struct staged *st, const sl_block_q16_K *a, bool k4)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int i = 0; i < SL_QK_K; i += 32) {   /* 8 vpmaddwd per accumulator: see the overflow note */
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + i)),
                                                    _mm256_loadu_si256((const __m256i *)(a->qs + i))));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + i + 16)),
                                                    _mm256_loadu_si256((const __m256i *)(a->qs + i + 16))));
    }
    __m256i w = _mm256_add_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(s0)),
                                                  _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s0, 1))),
                                 _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(s1)),
                                                  _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s1, 1))));
    __m128i w2 = _mm_add_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    int64_t isum = _mm_cvtsi128_si64(w2) + _mm_extract_epi64(w2, 1);
    int32_t msum = 0;
    if (k4) {
        __m256i p = _mm256_mullo_epi32(_mm256_load_si256((const __m256i *)st->mins),
                                       _mm256_loadu_si256((const __m256i *)a->bsums));
        __m128i q = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(1, 0, 3, 2)));
        q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1)));
        msum = _mm_cvtsi128_si32(q);
    }
    return sl_q16_termk(st->d, st->dmin, a->d, isum, msum);
}

/* ======================================================================
 * Rows
 * ====================================================================== */

/* mt (<= GROUP) activation rows through a Q8_0/Q4_0 weight row. */
static inline __attribute__((always_inline)) void rows0(bool q4, const void *w_row, const char *xa, size_t ldxa,
                                                        int mt, float *out, int64_t n)
{
    struct staged st;
    __m256d acc[GROUP];
    for (int j = 0; j < mt; j++)
        acc[j] = _mm256_setzero_pd();
    int64_t nb = n / SL_QK8_0;
    size_t bb = q4 ? sizeof(sl_block_q4_0) : sizeof(sl_block_q8_0);
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
        int nblk = (int)(nb - b0 < 4 ? nb - b0 : 4);
        sl_avx2_prefetch_weights((const char *)w_row + b0 * bb, (int)(nblk * bb));
        if (q4)
            stage_q4_0((const sl_block_q4_0 *)w_row + b0, nblk, &st);
        else
            stage_q8_0((const sl_block_q8_0 *)w_row + b0, nblk, &st);
        if (nblk == 4)
            for (int j = 0; j < mt; j++)
                acc[j] = dot0(&st, (const sl_block_q16_0 *)(xa + (size_t)j * ldxa) + b0, acc[j], 4);
        else
            for (int j = 0; j < mt; j++)
                acc[j] = dot0(&st, (const sl_block_q16_0 *)(xa + (size_t)j * ldxa) + b0, acc[j], nblk);
    }
    for (int j = 0; j < mt; j++) {
        _Alignas(32) double lanes[4];
        _mm256_store_pd(lanes, acc[j]);
        out[j] = sl_q16_lanes_sum(lanes);
    }
}

/* mt (<= GROUP) activation rows through a K-quant weight row; kind (4, 5,
 * 6 for Q4_K, Q5_K, Q6_K) is a constant at each call. */
static inline __attribute__((always_inline)) void rowsk(int kind, const void *w_row, const char *xa, size_t ldxa,
                                                        int mt, float *out, int64_t n)
{
    struct staged st;
    double acc[GROUP];
    for (int j = 0; j < mt; j++)
        acc[j] = 0.0;
    int bb = kind == 4 ? (int)sizeof(sl_block_q4_K) : kind == 5 ? (int)sizeof(sl_block_q5_K) : (int)sizeof(sl_block_q6_K);
    for (int64_t c = 0; c < n / SL_QK_K; c++) {
        sl_avx2_prefetch_weights((const char *)w_row + c * bb, bb);
        if (kind == 4) {
            const sl_block_q4_K *b = (const sl_block_q4_K *)w_row + c;
            stage_k4(b->d, b->dmin, b->scales, b->qs, NULL, &st);
        } else if (kind == 5) {
            const sl_block_q5_K *b = (const sl_block_q5_K *)w_row + c;
            stage_k4(b->d, b->dmin, b->scales, b->qs, b->qh, &st);
        } else {
            stage_q6_K((const sl_block_q6_K *)w_row + c, &st);
        }
        for (int j = 0; j < mt; j++)
            acc[j] += dotk(&st, (const sl_block_q16_K *)(xa + (size_t)j * ldxa) + c, kind != 6);
    }
    for (int j = 0; j < mt; j++)
        out[j] = (float)acc[j];
}

static inline __attribute__((always_inline)) void dot_group(uint32_t type, const void *w_row, const char *xa,
                                                            size_t ldxa, int mt, float *out, int64_t n)
{
    switch (type) {
    case SL_GGML_TYPE_Q8_0: rows0(false, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q4_0: rows0(true, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q4_K: rowsk(4, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q5_K: rowsk(5, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q6_K: rowsk(6, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_Q8_1:
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4: sl_vec_dot_legacy_q16_avx2(type, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_IQ2_XXS: case SL_GGML_TYPE_IQ2_XS: case SL_GGML_TYPE_IQ2_S:
    case SL_GGML_TYPE_IQ3_XXS: case SL_GGML_TYPE_IQ3_S: case SL_GGML_TYPE_IQ1_S: case SL_GGML_TYPE_IQ1_M:
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0:
        sl_vec_dot_klow_q16_avx2(type, w_row, xa, ldxa, mt, out, n); break;
    default: assert(!"vec_dot_q16_avx2: unsupported type");
    }
}

void sl_vec_dot_q16_multi_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                               float *out, int64_t n)
{
    assert(n % sl_ggml_block_elems(type) == 0);
    if (m == 1) {   /* decode: inlined separately so the accumulators stay in registers */
        dot_group(type, w_row, xa, ldxa, 1, out, n);
        return;
    }
    for (int j0 = 0; j0 < m; j0 += GROUP)
        dot_group(type, w_row, (const char *)xa + (size_t)j0 * ldxa, ldxa, m - j0 < GROUP ? m - j0 : GROUP,
                  out + j0, n);
}
