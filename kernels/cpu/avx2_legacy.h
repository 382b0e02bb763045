/* kernels/cpu/avx2_legacy.h: private to the AVX2 dot kernels: one 32-element
 * weight block of Q5_0, Q4_1, Q5_1, Q8_1, IQ4_NL or MXFP4 unpacked into 32 byte
 * codes in element order, with its float scale and min. The float path
 * (vec_dot_avx2.c) and the 8/16-bit paths (vec_dot_legacy_avx2.c) stage
 * from here, as avx2_util.h serves Q4_0 and the K-quants.
 * Who:       CPU backend threads; pure static inline functions.
 * Build:     only in files compiled with -mavx2 -mfma -mf16c.
 * Codes:     signed for Q5_0 (q - 16), IQ4_NL (the level, -127..113), MXFP4 (the doubled
 *            E2M1 value, -12..12) and
 *            Q8_1; unsigned 0..15 / 0..31 for Q4_1 / Q5_1, whose weights are
 *            d*q + m (sl_avx2_legacy_min). Packing: model/quant.h. */
#ifndef SL_AVX2_LEGACY_H
#define SL_AVX2_LEGACY_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "avx2_legacy.h: include only from *_avx2.c files (built with -mavx2 -mfma -mf16c)"
#endif

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/quant.h"

static inline bool sl_avx2_legacy_min(uint32_t type)
{
    return type == SL_GGML_TYPE_Q4_1 || type == SL_GGML_TYPE_Q5_1;
}

/* Bytes per block (a constant wherever type is). */
static inline int sl_avx2_legacy_bytes(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_Q5_0: return (int)sizeof(sl_block_q5_0);
    case SL_GGML_TYPE_Q4_1: return (int)sizeof(sl_block_q4_1);
    case SL_GGML_TYPE_Q5_1: return (int)sizeof(sl_block_q5_1);
    case SL_GGML_TYPE_Q8_1: return (int)sizeof(sl_block_q8_1);
    case SL_GGML_TYPE_MXFP4: return (int)sizeof(sl_block_mxfp4);
    default: return (int)sizeof(sl_block_iq4_nl);
    }
}

/* The 32 nibbles of Q4_0-packed qs: *lo the low nibbles (elements 0-15),
 * *hi the high ones (elements 16-31). Halves, not one 256-bit vector: the
 * 16-bit kernels widen each half, and a join and split would cost two more
 * shuffles per block. */
static inline void sl_avx2_nibbles(const uint8_t qs[16], __m128i *lo, __m128i *hi)
{
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    *lo = _mm_and_si128(q, m4);
    *hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
}

/* 0x10 in byte l of the element's half where bit l of the little-endian
 * uint32 qh is set, else 0: each byte takes qh's byte l/8 (one in-register
 * shuffle per half) and keeps its own bit. */
static inline void sl_avx2_high_bits(const uint8_t qh[4], __m128i *lo, __m128i *hi)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    __m128i v = _mm_cvtsi32_si128((int)h);
    const __m128i bit = _mm_set1_epi64x((long long)0x8040201008040201ull), b4 = _mm_set1_epi8(0x10);
    __m128i l = _mm_shuffle_epi8(v, _mm_set_epi64x(0x0101010101010101ll, 0));
    __m128i u = _mm_shuffle_epi8(v, _mm_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll));
    *lo = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(l, bit), bit), b4);
    *hi = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(u, bit), bit), b4);
}

/* Q5_0's 32 codes (q - 16, signed) as one vector in element order, from
 * 256-bit operations: the nibbles, and for each byte its bit of qh (qh's
 * byte l/8 shuffled in, OR-ed with every bit but bit l%8, so all ones
 * exactly where the bit is set); q - 16 is the nibble where the bit is set
 * and the nibble | 0xF0 where it is not. About half the operations of the
 * two halves sl_avx2_legacy_block builds, which the 8-bit decode of Q5_0
 * files (most of the bytes of the common Q4_K_M files of small models) is
 * bound by. */
static inline __m256i sl_avx2_q5_0_codes(const sl_block_q5_0 *b)
{
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xF));
    uint32_t h;
    memcpy(&h, b->qh, 4);
    __m256i hv = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                     _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                                        0x0303030303030303ll));
    hv = _mm256_cmpeq_epi8(_mm256_or_si256(hv, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell)), _mm256_set1_epi8(-1));
    return _mm256_or_si256(nib, _mm256_andnot_si256(hv, _mm256_set1_epi8((char)0xF0)));
}

/* Block blk of `type`: its 32 codes (see the header note) as two halves,
 * elements 0-15 in *lo and 16-31 in *hi, its scale *d and min *m (0 for the
 * types without one). type is a constant at every call. */
static inline void sl_avx2_legacy_block(uint32_t type, const void *blk, __m128i *lo, __m128i *hi, float *d,
                                        float *m)
{
    __m128i bl, bh;
    *m = 0.0f;
    switch (type) {
    case SL_GGML_TYPE_Q5_0: {
        const sl_block_q5_0 *b = blk;
        const __m128i sixteen = _mm_set1_epi8(16);
        *d = _cvtsh_ss(b->d);
        sl_avx2_nibbles(b->qs, lo, hi);
        sl_avx2_high_bits(b->qh, &bl, &bh);
        *lo = _mm_sub_epi8(_mm_or_si128(*lo, bl), sixteen);
        *hi = _mm_sub_epi8(_mm_or_si128(*hi, bh), sixteen);
        break;
    }
    case SL_GGML_TYPE_Q4_1: {
        const sl_block_q4_1 *b = blk;
        *d = _cvtsh_ss(b->d);
        *m = _cvtsh_ss(b->m);
        sl_avx2_nibbles(b->qs, lo, hi);
        break;
    }
    case SL_GGML_TYPE_Q5_1: {
        const sl_block_q5_1 *b = blk;
        *d = _cvtsh_ss(b->d);
        *m = _cvtsh_ss(b->m);
        sl_avx2_nibbles(b->qs, lo, hi);
        sl_avx2_high_bits(b->qh, &bl, &bh);
        *lo = _mm_or_si128(*lo, bl);
        *hi = _mm_or_si128(*hi, bh);
        break;
    }
    case SL_GGML_TYPE_Q8_1: {
        const sl_block_q8_1 *b = blk;
        *d = _cvtsh_ss(b->d);
        *lo = _mm_loadu_si128((const __m128i *)b->qs);
        *hi = _mm_loadu_si128((const __m128i *)(b->qs + 16));
        break;
    }
    case SL_GGML_TYPE_MXFP4: {   /* as IQ4_NL, with the doubled E2M1 values and the halved E8M0 scale */
        const sl_block_mxfp4 *b = blk;
        const __m128i levels = _mm_loadu_si128((const __m128i *)sl_mxfp4_values);
        *d = sl_e8m0_half(b->e);
        sl_avx2_nibbles(b->qs, &bl, &bh);
        *lo = _mm_shuffle_epi8(levels, bl);
        *hi = _mm_shuffle_epi8(levels, bh);
        break;
    }
    default: {   /* IQ4_NL: each nibble indexes the 16 levels (one byte shuffle per half) */
        const sl_block_iq4_nl *b = blk;
        const __m128i levels = _mm_loadu_si128((const __m128i *)sl_iq4nl_values);
        *d = _cvtsh_ss(b->d);
        sl_avx2_nibbles(b->qs, &bl, &bh);
        *lo = _mm_shuffle_epi8(levels, bl);
        *hi = _mm_shuffle_epi8(levels, bh);
        break;
    }
    }
}

#endif
