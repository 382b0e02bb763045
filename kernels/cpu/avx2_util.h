/* kernels/cpu/avx2_util.h: private to the AVX2 dot kernels (vec_dot_avx2.c,
 * vec_dot_q8_avx2.c, vec_dot_q16_avx2.c): the unpacking of weight blocks
 * into byte codes, the K-quant scale decoding, the horizontal sum and the
 * weight prefetch that all three do the same way.
 * Who:       CPU backend threads; pure functions, no state.
 * Build:     only for files compiled with -mavx2 -mfma -mf16c (the *_avx2.c
 *            glob in kernels/CMakeLists.txt), which the check below enforces;
 *            everything is static inline so that each kernel keeps its hot
 *            loops in one function, as when these lines stood in each file.
 * Each helper returns the codes in registers and leaves how they are staged
 * (bytes, scaled int16, floats) to its caller: that is where the kernels
 * differ. Packing of the blocks: model/quant.h. */
#ifndef SL_AVX2_UTIL_H
#define SL_AVX2_UTIL_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "avx2_util.h: include only from *_avx2.c files (built with -mavx2 -mfma -mf16c)"
#endif

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Sum of the 8 lanes of s: halves, then pairs, then the last two. The same
 * order wherever a kernel reduces, so a row's bits do not depend on which
 * kernel file reduced it. */
static inline float sl_avx2_hsum_ps(__m256 s)
{
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* Software prefetch of the weight bytes SL_AVX2_PREFETCH_AHEAD past the
 * `bytes` at p (the chunk being staged), running into the next row (the
 * matmul walks rows in order): at one thread decode waits on weight loads,
 * and the hardware prefetcher alone got 5.5 of the 9.7 GB/s the 2-core
 * development machine reads. Both defaults may be set with -D to tune. */
#ifndef SL_AVX2_PREFETCH_AHEAD
#define SL_AVX2_PREFETCH_AHEAD 1024
#endif
#ifndef SL_AVX2_PREFETCH_HINT
#define SL_AVX2_PREFETCH_HINT _MM_HINT_T0
#endif

static inline void sl_avx2_prefetch_weights(const char *p, int bytes)
{
    for (int o = 0; o < bytes; o += 64)
        _mm_prefetch(p + SL_AVX2_PREFETCH_AHEAD + o, SL_AVX2_PREFETCH_HINT);
}

/* Q4_0: the 32 signed codes (nibble - 8) of one block's qs, elements 0-15
 * in *lo (low nibbles) and 16-31 in *hi (high nibbles). */
static inline void sl_avx2_q4_0_codes(const uint8_t qs[16], __m128i *lo, __m128i *hi)
{
    const __m128i m4 = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    *lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);
    *hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);
}

/* Q4_K/Q5_K: the 16 six-bit fields of the 12 scale bytes at once
 * (sl_quant_get_scale_min_k4's rule: bytes 0-3 low scales, 4-7 low mins,
 * 8-11 high nibbles; the top two bits of bytes 0-7 are bits 4-5 of the high
 * ones), as little-endian words of four bytes each:
 *   f[0] scales 0-3, f[1] scales 4-7, f[2] mins 0-3, f[3] mins 4-7. */
static inline void sl_avx2_k4_scale_words(const uint8_t scales[12], uint32_t f[4])
{
    uint32_t u[3];
    memcpy(u, scales, 12);
    f[0] = u[0] & 0x3f3f3f3fu;
    f[1] = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    f[2] = u[1] & 0x3f3f3f3fu;
    f[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
}

/* Q4_K/Q5_K: the unsigned codes of elements 64c..64c+63, sub-block 2c
 * (low nibbles) in *lo and 2c+1 (high nibbles) in *hi. For Q5_K (q5) h is
 * the block's 32 qh bytes, loaded once per block by the caller: bit 4 of
 * element 32s+l is bit s of qh[l]. q5 is a constant at every call. */
static inline void sl_avx2_k4_codes(const uint8_t *qs, bool q5, __m256i h, int c, __m256i *lo, __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
    __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    __m256i l = _mm256_and_si256(q, m4), u = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (q5) {
        __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(2 << (2 * c)));
        l = _mm256_or_si256(l, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bl), bl), b4));
        u = _mm256_or_si256(u, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bh), bh), b4));
    }
    *lo = l;
    *hi = u;
}

/* Q6_K: the unsigned codes 0..63 (the -32 is the caller's) of half hf
 * (elements 128hf..128hf+127) of the block with these ql and qh, as four
 * vectors of 32 codes in element order. */
static inline void sl_avx2_q6_K_codes(const uint8_t *ql, const uint8_t *qh, int hf, __m256i q[4])
{
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    __m256i ql0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * hf));
    __m256i ql1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * hf + 32));
    __m256i h = _mm256_loadu_si256((const __m256i *)(qh + 32 * hf));
    q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(h, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}

/* pr[i] = dw[i] * da[i] for 0 <= i < nblk: the products of weight and
 * activation block scales that ggml's per-block step of the 32-element
 * types forms, eight per multiply (the same float products, so the same
 * bits), for the register tiles to broadcast from memory. da's scales end
 * at da[nblk - 1] (a row's last blocks), so the tail goes one by one. */
static inline void sl_avx2_scale_products(const float *dw, const float *da, int nblk, float *pr)
{
    int i8 = nblk / 8 * 8;
    for (int i = 0; i < i8; i += 8)
        _mm256_storeu_ps(pr + i, _mm256_mul_ps(_mm256_loadu_ps(dw + i), _mm256_loadu_ps(da + i)));
    for (int i = i8; i < nblk; i++)
        pr[i] = dw[i] * da[i];
}

/* The float part of one K-quant super-block's dot with an 8-bit (Q8_K)
 * activation block (ad its scale, bsums its 16 sums of 16 codes): sumi,
 * the exact integer sums sc*q*x of its eight int32 lanes, becomes
 * d*ad*sumi in acc, less the min terms. kind 4/5 (Q4_K, Q5_K): lane s of
 * the min terms is mins16[2s]*bsums[2s] + mins16[2s+1]*bsums[2s+1] (each
 * sub-block min twice), folded per block. kind 6 (Q6_K): the -32 of its
 * codes as 32 * sum_s sc16[s]*bsums[s], exact, taken from sumi. Every 8-bit
 * K-quant kernel (AVX2 and AVX-512) ends a super-block here, so a row's
 * float sums are the same operations in the same order in all of them. */
static inline __m256 sl_avx2_q8k_tail(int kind, __m256i sumi, __m256i sc16, __m256i mins16, float d, float dmin,
                                      float ad, const int16_t bsums[16], __m256 acc)
{
    if (kind == 6) {
        __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)bsums));
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(ad * d), _mm256_cvtepi32_ps(sumi), acc);
    if (kind != 6) {
        __m256i prod = _mm256_madd_epi16(mins16, _mm256_loadu_si256((const __m256i *)bsums));
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * ad), _mm256_cvtepi32_ps(prod), acc);
    }
    return acc;
}

#endif
