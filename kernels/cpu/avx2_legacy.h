/* kernels/cpu/avx2_legacy.h: private to the AVX2 dot kernels: one 32-element
 * weight block of Q5_0, Q4_1, Q5_1, Q8_1 or IQ4_NL unpacked into 32 byte
 * codes in element order, with its float scale and min. The float path
 * (vec_dot_avx2.c) and the 8/16-bit paths (vec_dot_legacy_avx2.c) stage
 * from here, as avx2_util.h serves Q4_0 and the K-quants.
 * Who:       CPU backend threads; pure static inline functions.
 * Build:     only in files compiled with -mavx2 -mfma -mf16c.
 * Codes:     signed for Q5_0 (q - 16), IQ4_NL (the level, -127..113) and
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
    default: return (int)sizeof(sl_block_iq4_nl);
    }
}

/* The 32 nibbles of Q4_0-packed qs: bytes 0-15 the low nibbles (elements
 * 0-15), bytes 16-31 the high ones. */
static inline __m256i sl_avx2_nibbles32(const uint8_t qs[16])
{
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* 0x10 in byte l where bit l of the little-endian uint32 qh is set, else 0:
 * each byte takes qh's byte l/8 (in-lane shuffle of the broadcast word) and
 * keeps its own bit. */
static inline __m256i sl_avx2_high_bits32(const uint8_t qh[4])
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i pick = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), pick);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* Block blk of `type`: its 32 codes (see the header note), scale *d and min
 * *m (0 for the types without one). type is a constant at every call. */
static inline __m256i sl_avx2_legacy_block(uint32_t type, const void *blk, float *d, float *m)
{
    *m = 0.0f;
    switch (type) {
    case SL_GGML_TYPE_Q5_0: {
        const sl_block_q5_0 *b = blk;
        *d = _cvtsh_ss(b->d);
        __m256i q = _mm256_or_si256(sl_avx2_nibbles32(b->qs), sl_avx2_high_bits32(b->qh));
        return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    }
    case SL_GGML_TYPE_Q4_1: {
        const sl_block_q4_1 *b = blk;
        *d = _cvtsh_ss(b->d);
        *m = _cvtsh_ss(b->m);
        return sl_avx2_nibbles32(b->qs);
    }
    case SL_GGML_TYPE_Q5_1: {
        const sl_block_q5_1 *b = blk;
        *d = _cvtsh_ss(b->d);
        *m = _cvtsh_ss(b->m);
        return _mm256_or_si256(sl_avx2_nibbles32(b->qs), sl_avx2_high_bits32(b->qh));
    }
    case SL_GGML_TYPE_Q8_1: {
        const sl_block_q8_1 *b = blk;
        *d = _cvtsh_ss(b->d);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    default: {   /* IQ4_NL: each nibble indexes the 16 levels (one in-lane byte shuffle) */
        const sl_block_iq4_nl *b = blk;
        *d = _cvtsh_ss(b->d);
        __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)sl_iq4nl_values));
        return _mm256_shuffle_epi8(levels, sl_avx2_nibbles32(b->qs));
    }
    }
}

#endif
