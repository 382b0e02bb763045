/* kernels/cpu/q8_stage_avx2.h: private to the 8-bit dot kernels
 * (vec_dot_q8_avx2.c, vec_dot_q8_avx512.c): a weight chunk of 256 elements
 * staged for the integer multiply-adds, codes one byte each in element
 * order and the K-quant scales as int16 lanes, the layout both ISAs read
 * (the AVX-512 kernels load two 32-code groups and their two scale vectors
 * at once, which sit side by side here).
 * Who:       CPU backend threads; pure functions on the caller's struct.
 * Build:     files compiled with the AVX2 flags (avx2_util.h checks). */
#ifndef SL_Q8_STAGE_AVX2_H
#define SL_Q8_STAGE_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/avx2_util.h"
#include "model/quant.h"

enum { SL_Q8_CHUNK = 256 };

/* A staged chunk. K types: codes unsigned (Q4_K 0..15, Q5_K 0..31, Q6_K
 * 0..63, the -32 of Q6_K is applied through the activation's block sums);
 * scv[k] holds the scale of each int16 lane of group k (32 codes);
 * mins16 the Q4_K/Q5_K sub-block mins (each twice, one per 16 codes, to
 * pair with the bsums), sc16 the Q6_K scales. Q8_0/Q4_0: signed codes and one
 * float scale per 32-block. */
struct qstaged {
    _Alignas(64) uint8_t codes[SL_Q8_CHUNK];   /* 64: whole zmm loads */
    _Alignas(64) int16_t scv[8][16];
    _Alignas(32) int16_t mins16[16];
    _Alignas(32) int16_t sc16[16];
    float d, dmin;
    _Alignas(32) float bd[8];   /* Q8_0/Q4_0 block scales; 0 past nblk */
    int nblk;
};

/* ======================================================================
 * Staging
 * ====================================================================== */

static inline void sl_stage_q8_0(const sl_block_q8_0 *b, int nblk, struct qstaged *st)
{
    for (int i = nblk; i < 8; i++)
        st->bd[i] = 0.0f;
    for (int i = 0; i < nblk; i++) {
        st->bd[i] = _cvtsh_ss(b[i].d);
        _mm256_store_si256((__m256i *)(st->codes + 32 * i), _mm256_loadu_si256((const __m256i *)b[i].qs));
    }
    st->nblk = nblk;
}

static inline void sl_stage_q4_0(const sl_block_q4_0 *b, int nblk, struct qstaged *st)
{
    for (int i = nblk; i < 8; i++)
        st->bd[i] = 0.0f;
    for (int i = 0; i < nblk; i++) {
        st->bd[i] = _cvtsh_ss(b[i].d);
        __m128i lo, hi;
        sl_avx2_q4_0_codes(b[i].qs, &lo, &hi);
        _mm_store_si128((__m128i *)(st->codes + 32 * i), lo);
        _mm_store_si128((__m128i *)(st->codes + 32 * i + 16), hi);
    }
    st->nblk = nblk;
}

/* Q4_K (qh NULL) and Q5_K: see model/quant.h for the packing. */
static inline void sl_stage_k4(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
                            const uint8_t *qh, struct qstaged *st)
{
    uint32_t f[4];
    sl_avx2_k4_scale_words(scales, f);
    __m128i sc = _mm_set_epi32(0, 0, (int)f[1], (int)f[0]), mn = _mm_set_epi32(0, 0, (int)f[3], (int)f[2]);
    for (int k = 0; k < 8; k++)   /* group k = sub-block k: one scale for all 16 lanes */
        _mm256_store_si256((__m256i *)st->scv[k], _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sc, _mm_set1_epi8((char)k))));
    _mm256_store_si256((__m256i *)st->mins16, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn)));
    st->d = _cvtsh_ss(hd);
    st->dmin = _cvtsh_ss(hdmin);
    __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        sl_avx2_k4_codes(qs, qh != NULL, h, c, &lo, &hi);
        _mm256_store_si256((__m256i *)(st->codes + 64 * c), lo);
        _mm256_store_si256((__m256i *)(st->codes + 64 * c + 32), hi);
    }
}

static inline void sl_stage_q6_K(const sl_block_q6_K *b, struct qstaged *st)
{
    __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    for (int k = 0; k < 8; k++) {  /* group k = sub-blocks 2k (lanes 0-7) and 2k+1 (lanes 8-15) */
        __m128i sel = _mm_set_epi64x(0x0101010101010101ll * (2 * k + 1), 0x0101010101010101ll * (2 * k));
        _mm256_store_si256((__m256i *)st->scv[k], _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, sel)));
    }
    _mm256_store_si256((__m256i *)st->sc16, _mm256_cvtepi8_epi16(sc));
    st->d = _cvtsh_ss(b->d);
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        sl_avx2_q6_K_codes(b->ql, b->qh, h, q);
        for (int k = 0; k < 4; k++)
            _mm256_store_si256((__m256i *)(st->codes + 128 * h + 32 * k), q[k]);
    }
}

#endif
