/* kernels/cpu/vec_dot_klow_avx2.c: AVX2 dot products of Q2_K, Q3_K, IQ4_XS,
 * the grid formats (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S)
 * and the ternary TQ1_0, TQ2_0 with float32, Q8_K and Q16_K activation rows.
 * Compiled with -mavx2 -mfma -mf16c; called only after vec_dot.c has seen
 * the CPU support them. Runs in the CPU backend's threads.
 * Algorithm: each super-block is staged once for all activation rows of the
 * group: codes unpacked with byte shifts / masks (Q2_K, Q3_K), a vpshufb
 * table lookup (IQ4_XS), a vpgather of grid rows with the sign bits
 * spread by vpshufb (IQ2/IQ3) or the group's delta added (IQ1: 8*grid+-1),
 * widened to int16 and
 * multiplied by their sub-block scale (|sc*q| <= 32*127 = 4064 for IQ4_XS,
 * 31*62 = 1922 for IQ3_XXS, 135 for IQ1, 128 for Q3_K, 45 for Q2_K: int16,
 * exact), plus, for Q2_K, each element's sub-block min (<= 15). The ternary
 * formats store their codes -1..1 unscaled: TQ2_0 by shifts and masks,
 * TQ1_0's base-3 bytes by 16-bit multiplies (trit j of byte b is
 * ((b * 3^j) & 0xFF) * 3 >> 8).
 *   Q16_K: vpmaddwd of the staged codes with the row's int16 codes; the same
 *     overflow argument as vec_dot_q16_avx2.c's (lanes <= 2*4096*32767, 8 per
 *     accumulator); the mins term likewise (<= 2*15*32767 per lane, 16
 *     adds). Exact integers into sl_q16_termk: bitwise the portable result.
 *   Q8_K: the row's int8 codes widened to int16, then the same vpmaddwd;
 *     isum <= 256*4064*127 < 2^31; the mins from bsums (16 sums of 16). The
 *     float expression is the portable one, so again bitwise equal.
 *   float32: w = d*(sc*q) - dmin*m, each product exact (11-bit d, times a
 *     power of two for the grids, times a <= 12-bit integer), so w equals
 *     the reference dequantization; then
 *     8-wide FMAs into four chains.
 * Trade-off: widening the int8 activation codes costs the 8-bit path the
 * vpmaddubsw trick of the older kernels (~1.3x their prefill cost); one
 * staging serves all three paths and keeps this file small. */
#include <assert.h>
#include <immintrin.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/vec_dot_int.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant_klow.h"

/* A staged super-block: c16 = sc*q in element order; m16 the min of each
 * element's sub-block (Q2_K only, else unused); mn the 16 mins as int16. */
struct staged {
    _Alignas(32) int16_t c16[SL_QK_K];
    _Alignas(32) int16_t m16[SL_QK_K];
    _Alignas(32) int16_t mn[16];
    _Alignas(32) int16_t sc[16];   /* sub-block scales (Q2_K, Q3_K), one vector store */
    float d, dmin;
    int has_min;
};

/* Stores 32 int8 codes (elements k..k+31) as int16 times sc0 (first 16) and
 * sc1 (last 16). */
static inline void put32(struct staged *st, int k, __m256i codes, int sc0, int sc1)
{
    __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(codes));
    __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(codes, 1));
    _mm256_store_si256((__m256i *)(st->c16 + k), _mm256_mullo_epi16(lo, _mm256_set1_epi16((int16_t)sc0)));
    _mm256_store_si256((__m256i *)(st->c16 + k + 16), _mm256_mullo_epi16(hi, _mm256_set1_epi16((int16_t)sc1)));
}

/* Stores 32 int8 codes as int16 with no scale (the ternary formats). */
static inline void put32_unscaled(struct staged *st, int k, __m256i codes)
{
    _mm256_store_si256((__m256i *)(st->c16 + k), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(codes)));
    _mm256_store_si256((__m256i *)(st->c16 + k + 16), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(codes, 1)));
}

static inline void stage_q2_K(const sl_block_q2_K *b, struct staged *st)
{
    st->d = _cvtsh_ss(b->d);
    st->dmin = _cvtsh_ss(b->dmin);
    st->has_min = 1;
    __m128i raw = _mm_loadu_si128((const __m128i *)b->scales), nib = _mm_set1_epi8(0xF);
    _mm256_store_si256((__m256i *)st->sc, _mm256_cvtepu8_epi16(_mm_and_si128(raw, nib)));
    _mm256_store_si256((__m256i *)st->mn, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), nib)));
    const __m256i three = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            int k = 128 * h + 32 * j, s = k / 16;
            __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), three);
            put32(st, k, c, st->sc[s], st->sc[s + 1]);
            _mm256_store_si256((__m256i *)(st->m16 + k), _mm256_set1_epi16(st->mn[s]));
            _mm256_store_si256((__m256i *)(st->m16 + k + 16), _mm256_set1_epi16(st->mn[s + 1]));
        }
    }
}

static inline void stage_q3_K(const sl_block_q3_K *b, struct staged *st)
{
    st->d = _cvtsh_ss(b->d);
    st->dmin = 0.0f;
    st->has_min = 0;
    /* the 16 6-bit scales at once: low nibbles from bytes 0-7 (then their
     * high nibbles), bits 4-5 from bytes 8-11 shifted by 0, 2, 4, 6 */
    uint32_t hb;
    memcpy(&hb, b->scales + 8, 4);
    __m128i raw = _mm_loadl_epi64((const __m128i *)b->scales), nib = _mm_set1_epi8(0xF);
    __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(raw, nib), _mm_and_si128(_mm_srli_epi16(raw, 4), nib));
    __m128i hi = _mm_and_si128(_mm_set_epi32((int)(hb >> 6), (int)(hb >> 4), (int)(hb >> 2), (int)hb), _mm_set1_epi8(3));
    __m128i s8 = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    _mm256_store_si256((__m256i *)st->sc, _mm256_cvtepi8_epi16(s8));
    const int16_t *sc = st->sc;
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), zero = _mm256_setzero_si256();
    __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            int k = 128 * h + 32 * j, i = 4 * h + j;
            __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), three);
            /* hmask bit clear: q = low - 4 */
            __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, _mm256_set1_epi8((char)(1 << i))), zero);
            c = _mm256_sub_epi8(c, _mm256_and_si256(clear, four));
            put32(st, k, c, sc[k / 16], sc[k / 16 + 1]);
        }
    }
}

static inline void stage_iq4_xs(const sl_block_iq4_xs *b, struct staged *st)
{
    st->d = _cvtsh_ss(b->d);
    st->dmin = 0.0f;
    st->has_min = 0;
    const __m128i tbl = _mm_loadu_si128((const __m128i *)sl_quant_iq4_values);
    const __m128i nib = _mm_set1_epi8(0xF);
    for (int s = 0; s < 8; s++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(b->qs + 16 * s));
        __m128i lo = _mm_shuffle_epi8(tbl, _mm_and_si128(v, nib));
        __m128i hi = _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(v, 4), nib));
        int sc = sl_quant_iq4_xs_scale(b, s);
        put32(st, 32 * s, _mm256_set_m128i(hi, lo), sc, sc);
    }
}

/* 32 grid magnitudes g (int8) with the sign bits of s4 (bit j of byte k:
 * element 8k + j) applied: (g ^ neg) - neg. */
static inline __m256i iq_signed(__m256i g, uint32_t s4)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s4), spread);
    __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
    return _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg);
}

/* Four sign bytes from four 7-bit sign indices packed at bits 0, 7, 14, 21. */
static inline uint32_t iq_ksigns4(uint32_t aux)
{
    return (uint32_t)sl_quant_iq_ksigns[aux & 127] | ((uint32_t)sl_quant_iq_ksigns[(aux >> 7) & 127] << 8)
         | ((uint32_t)sl_quant_iq_ksigns[(aux >> 14) & 127] << 16)
         | ((uint32_t)sl_quant_iq_ksigns[(aux >> 21) & 127] << 24);
}

static inline uint32_t load32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 8 grid rows of 4 bytes (IQ3) or 4 rows of 8 bytes (IQ2) as 32 int8. */
static inline __m256i gather3(const uint8_t (*grid)[4], __m256i idx)
{
    return _mm256_i32gather_epi32((const int *)grid, idx, 4);
}

static inline __m256i gather2(const uint8_t (*grid)[8], __m128i idx)
{
    return _mm256_i32gather_epi64((const long long *)grid, idx, 8);
}

/* IQ1_S / IQ1_M: 4 grid rows (values -1..1) gathered as 32 int8, then
 * 8*g + delta, the delta +-1 of each group of 8 in its 64-bit lane. */
static inline __m256i iq1_codes(__m128i idx, __m256i delta)
{
    __m256i g = gather2((const uint8_t (*)[8])sl_quant_iq1s_grid, idx);
    g = _mm256_add_epi8(g, g);
    g = _mm256_add_epi8(g, g);
    return _mm256_add_epi8(_mm256_add_epi8(g, g), delta);
}

static inline long long iq1_delta8(unsigned negative)
{
    return negative ? -1LL : 0x0101010101010101LL;   /* eight int8 -1 or +1 */
}

/* The grid formats, 32 elements at a time: indices gathered from the grid
 * (one vpgather per 32 elements), signs spread from their bits. */
static inline void stage_iq_grid(uint32_t type, const void *w_row, int64_t c, struct staged *st)
{
    st->dmin = 0.0f;
    st->has_min = 0;
    switch (type) {
    case SL_GGML_TYPE_IQ1_S: {
        const sl_block_iq1_s *b = (const sl_block_iq1_s *)w_row + c;
        st->d = _cvtsh_ss(b->d) * 0.125f;
        /* (qh >> 3l & 7) << 8 for l = 0..3 is (qh << 8 >> 3l) & 0x700 */
        const __m128i shifts = _mm_setr_epi32(0, 3, 6, 9), high = _mm_set1_epi32(0x700);
        for (int ib = 0; ib < 8; ib++) {
            unsigned qh = b->qh[ib];
            __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)(qh << 8)), shifts), high);
            __m128i lo = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load32(b->qs + 4 * ib)));
            int sc = 2 * (int)((qh >> 12) & 7) + 1;
            put32(st, 32 * ib, iq1_codes(_mm_or_si128(lo, hi), _mm256_set1_epi64x(iq1_delta8(qh & 0x8000))), sc, sc);
        }
        return;
    }
    case SL_GGML_TYPE_IQ1_M: {
        const sl_block_iq1_m *b = (const sl_block_iq1_m *)w_row + c;
        uint16_t hd = (uint16_t)((b->scales[0] >> 12) | ((b->scales[1] >> 8) & 0x00F0)
                                 | ((b->scales[2] >> 4) & 0x0F00) | (b->scales[3] & 0xF000));
        st->d = _cvtsh_ss(hd) * 0.125f;
        /* group 4ib + l: nibble l of h = qh[2ib] | qh[2ib + 1] << 8 */
        const __m128i shifts = _mm_setr_epi32(0, 4, 8, 12), high = _mm_set1_epi32(0x700);
        for (int ib = 0; ib < 8; ib++) {
            unsigned h = (unsigned)b->qh[2 * ib] | ((unsigned)b->qh[2 * ib + 1] << 8);
            __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)(h << 8)), shifts), high);
            __m128i lo = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load32(b->qs + 4 * ib)));
            __m256i delta = _mm256_setr_epi64x(iq1_delta8(h & 0x8), iq1_delta8(h & 0x80), iq1_delta8(h & 0x800),
                                               iq1_delta8(h & 0x8000));
            int k = 2 * ib;   /* the two scales of 16 */
            int sc0 = 2 * ((b->scales[k / 4] >> (3 * (k % 4))) & 7) + 1;
            int sc1 = 2 * ((b->scales[(k + 1) / 4] >> (3 * ((k + 1) % 4))) & 7) + 1;
            put32(st, 32 * ib, iq1_codes(_mm_or_si128(lo, hi), delta), sc0, sc1);
        }
        return;
    }
    case SL_GGML_TYPE_IQ3_S: {
        const sl_block_iq3_s *b = (const sl_block_iq3_s *)w_row + c;
        st->d = _cvtsh_ss(b->d);
        const __m256i shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), one = _mm256_set1_epi32(1);
        for (int ib = 0; ib < 8; ib++) {
            __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * ib)));
            __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->qh[ib]), shifts), one);
            __m256i g = gather3(sl_quant_iq3s_grid, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)));
            int sc = 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
            put32(st, 32 * ib, iq_signed(g, load32(b->signs + 4 * ib)), sc, sc);
        }
        return;
    }
    case SL_GGML_TYPE_IQ3_XXS: {
        const sl_block_iq3_xxs *b = (const sl_block_iq3_xxs *)w_row + c;
        st->d = _cvtsh_ss(b->d) * 0.25f;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = load32(b->scales_signs + 4 * ib);
            __m256i g = gather3(sl_quant_iq3xxs_grid,
                                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * ib))));
            int sc = 2 * (int)(aux >> 28) + 1;
            put32(st, 32 * ib, iq_signed(g, iq_ksigns4(aux)), sc, sc);
        }
        return;
    }
    case SL_GGML_TYPE_IQ2_XXS: {
        const sl_block_iq2_xxs *b = (const sl_block_iq2_xxs *)w_row + c;
        st->d = _cvtsh_ss(b->d) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t idx = load32(b->qs + 4 * ib), aux = load32(b->qs + 4 * ib + 2);
            __m256i g = gather2(sl_quant_iq2xxs_grid, _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)idx)));
            int sc = 2 * (int)(aux >> 28) + 1;
            put32(st, 32 * ib, iq_signed(g, iq_ksigns4(aux)), sc, sc);
        }
        return;
    }
    case SL_GGML_TYPE_IQ2_XS: {
        const sl_block_iq2_xs *b = (const sl_block_iq2_xs *)w_row + c;
        st->d = _cvtsh_ss(b->d) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t *q = b->qs + 4 * ib;
            __m128i v = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)q));
            __m256i g = gather2(sl_quant_iq2xs_grid, _mm_and_si128(v, _mm_set1_epi32(511)));
            uint32_t s4 = (uint32_t)sl_quant_iq_ksigns[q[0] >> 9] | ((uint32_t)sl_quant_iq_ksigns[q[1] >> 9] << 8)
                        | ((uint32_t)sl_quant_iq_ksigns[q[2] >> 9] << 16)
                        | ((uint32_t)sl_quant_iq_ksigns[q[3] >> 9] << 24);
            put32(st, 32 * ib, iq_signed(g, s4), 2 * (b->scales[ib] & 0xF) + 1, 2 * (b->scales[ib] >> 4) + 1);
        }
        return;
    }
    case SL_GGML_TYPE_IQ2_S: {
        const sl_block_iq2_s *b = (const sl_block_iq2_s *)w_row + c;
        st->d = _cvtsh_ss(b->d) * 0.125f;
        const __m128i shifts = _mm_setr_epi32(8, 6, 4, 2), three = _mm_set1_epi32(0x300);
        for (int ib = 0; ib < 8; ib++) {
            /* (qh >> 2j & 3) << 8 for j = 0..3 is (qh << (8 - 2j)) & 0x300 */
            __m128i hi = _mm_and_si128(_mm_sllv_epi32(_mm_set1_epi32(b->qh[ib]), shifts), three);
            __m128i lo = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load32(b->qs + 4 * ib)));
            __m256i g = gather2(sl_quant_iq2s_grid, _mm_or_si128(lo, hi));
            put32(st, 32 * ib, iq_signed(g, load32(b->signs + 4 * ib)), 2 * (b->scales[ib] & 0xF) + 1,
                  2 * (b->scales[ib] >> 4) + 1);
        }
        return;
    }
    }
    assert(!"vec_dot_klow_avx2: not a grid format");
}

static inline void stage_tq2_0(const sl_block_tq2_0 *b, struct staged *st)
{
    st->d = _cvtsh_ss(b->d);
    st->dmin = 0.0f;
    st->has_min = 0;
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int j = 0; j < 4; j++)
            put32_unscaled(st, 128 * h + 32 * j,
                           _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 2 * j), three), one));
    }
}

/* Trit j of 16 bytes b (uint16 lanes), minus 1, with pow = 3^j per lane. */
static inline __m256i tq1_trits(__m256i b, __m256i pow)
{
    __m256i t = _mm256_and_si256(_mm256_mullo_epi16(b, pow), _mm256_set1_epi16(0xFF));
    return _mm256_sub_epi16(_mm256_srli_epi16(_mm256_mullo_epi16(t, _mm256_set1_epi16(3)), 8),
                            _mm256_set1_epi16(1));
}

static inline void stage_tq1_0(const sl_block_tq1_0 *b, struct staged *st)
{
    static const int16_t pow3[5] = {1, 3, 9, 27, 81};
    st->d = _cvtsh_ss(b->d);
    st->dmin = 0.0f;
    st->has_min = 0;
    __m256i q0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->qs));
    __m256i q1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16)));
    __m256i q2 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 32)));
    for (int j = 0; j < 5; j++) {
        __m256i p = _mm256_set1_epi16(pow3[j]);
        _mm256_store_si256((__m256i *)(st->c16 + 32 * j), tq1_trits(q0, p));
        _mm256_store_si256((__m256i *)(st->c16 + 32 * j + 16), tq1_trits(q1, p));
        _mm256_store_si256((__m256i *)(st->c16 + 160 + 16 * j), tq1_trits(q2, p));
    }
    /* element 240 + 4j + m: trit j of qh[m] (lanes repeat qh[0..3]) */
    __m256i h = _mm256_cvtepu8_epi16(_mm_set1_epi32((int)load32(b->qh)));
    __m256i p = _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
    _mm256_store_si256((__m256i *)(st->c16 + 240), tq1_trits(h, p));
}

static inline void stage(uint32_t type, const void *w_row, int64_t c, struct staged *st)
{
    switch (type) {
    case SL_GGML_TYPE_Q2_K: stage_q2_K((const sl_block_q2_K *)w_row + c, st); break;
    case SL_GGML_TYPE_Q3_K: stage_q3_K((const sl_block_q3_K *)w_row + c, st); break;
    case SL_GGML_TYPE_IQ4_XS: stage_iq4_xs((const sl_block_iq4_xs *)w_row + c, st); break;
    case SL_GGML_TYPE_TQ2_0: stage_tq2_0((const sl_block_tq2_0 *)w_row + c, st); break;
    case SL_GGML_TYPE_TQ1_0: stage_tq1_0((const sl_block_tq1_0 *)w_row + c, st); break;
    default: stage_iq_grid(type, w_row, c, st); break;
    }
}

static inline int64_t hsum_epi32_to_64(__m256i s0, __m256i s1)
{
    __m256i w = _mm256_add_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(s0)),
                                                  _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s0, 1))),
                                 _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(s1)),
                                                  _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s1, 1))));
    __m128i w2 = _mm_add_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    return _mm_cvtsi128_si64(w2) + _mm_extract_epi64(w2, 1);
}

static inline int32_t hsum_epi32(__m256i p)
{
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(1, 0, 3, 2)));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(q);
}

/* ======================================================================
 * Q16_K
 * ====================================================================== */

static inline double dot16(const struct staged *st, const sl_block_q16_K *a)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256(), ms = _mm256_setzero_si256();
    for (int i = 0; i < SL_QK_K; i += 32) {
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(a->qs + i));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(a->qs + i + 16));
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + i)), a0));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + i + 16)), a1));
        if (st->has_min) {
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->m16 + i)), a0));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->m16 + i + 16)), a1));
        }
    }
    int64_t isum = hsum_epi32_to_64(s0, s1);
    int32_t msum = st->has_min ? hsum_epi32(ms) : 0;
    return sl_q16_termk(st->d, st->dmin, a->d, isum, msum);
}

/* Inlined per (type, m == 1 or not), so the staging switch and the mins
 * branch fold away and decode keeps its accumulator in a register. */
static inline __attribute__((always_inline)) void rows16(uint32_t type, const void *w_row, const void *xa,
                                                         size_t ldxa, int m, float *out, int64_t n)
{
    struct staged st;
    double acc[32];
    int bb = (int)sl_ggml_block_bytes(type);
    for (int j = 0; j < m; j++)
        acc[j] = 0.0;
    for (int64_t c = 0; c < n / SL_QK_K; c++) {
        sl_avx2_prefetch_weights((const char *)w_row + c * bb, bb);
        stage(type, w_row, c, &st);
        st.has_min = type == SL_GGML_TYPE_Q2_K;
        for (int j = 0; j < m; j++)
            acc[j] += dot16(&st, (const sl_block_q16_K *)((const char *)xa + (size_t)j * ldxa) + c);
    }
    for (int j = 0; j < m; j++)
        out[j] = (float)acc[j];
}

#define SL_KLOW_DISPATCH(ROWS)                                                             \
    switch (type) {                                                                        \
    case SL_GGML_TYPE_Q2_K: ROWS(SL_GGML_TYPE_Q2_K); break;                                \
    case SL_GGML_TYPE_Q3_K: ROWS(SL_GGML_TYPE_Q3_K); break;                                \
    case SL_GGML_TYPE_IQ4_XS: ROWS(SL_GGML_TYPE_IQ4_XS); break;                            \
    case SL_GGML_TYPE_IQ2_XXS: ROWS(SL_GGML_TYPE_IQ2_XXS); break;                          \
    case SL_GGML_TYPE_IQ2_XS: ROWS(SL_GGML_TYPE_IQ2_XS); break;                            \
    case SL_GGML_TYPE_IQ2_S: ROWS(SL_GGML_TYPE_IQ2_S); break;                              \
    case SL_GGML_TYPE_IQ3_XXS: ROWS(SL_GGML_TYPE_IQ3_XXS); break;                          \
    case SL_GGML_TYPE_IQ1_S: ROWS(SL_GGML_TYPE_IQ1_S); break;                              \
    case SL_GGML_TYPE_IQ1_M: ROWS(SL_GGML_TYPE_IQ1_M); break;                              \
    case SL_GGML_TYPE_TQ1_0: ROWS(SL_GGML_TYPE_TQ1_0); break;                              \
    case SL_GGML_TYPE_TQ2_0: ROWS(SL_GGML_TYPE_TQ2_0); break;                              \
    default: ROWS(SL_GGML_TYPE_IQ3_S); break;                                              \
    }

void sl_vec_dot_klow_q16_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                              float *out, int64_t n)
{
    assert(sl_quant_klow_type(type) && n % SL_QK_K == 0 && m <= 32);
#define ROWS16(T) (m == 1 ? rows16(T, w_row, xa, ldxa, 1, out, n) : rows16(T, w_row, xa, ldxa, m, out, n))
    SL_KLOW_DISPATCH(ROWS16)
#undef ROWS16
}

/* ======================================================================
 * Q8_K
 * ====================================================================== */

static inline float dot8(const struct staged *st, const sl_block_q8_K *a)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int i = 0; i < SL_QK_K; i += 32) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + i));
        __m256i a0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
        __m256i a1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + i)), a0));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + i + 16)), a1));
    }
    int32_t isum = hsum_epi32(_mm256_add_epi32(s0, s1));
    float r = st->d * a->d * (float)isum;
    if (st->has_min) {
        __m256i p = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)st->mn),
                                      _mm256_loadu_si256((const __m256i *)a->bsums));
        r -= st->dmin * a->d * (float)hsum_epi32(p);
    }
    return r;
}

static inline __attribute__((always_inline)) void rows8(uint32_t type, const void *w_row, const void *xa,
                                                        size_t ldxa, int m, float *out, int64_t n)
{
    struct staged st;
    float acc[32];
    int bb = (int)sl_ggml_block_bytes(type);
    for (int j = 0; j < m; j++)
        acc[j] = 0.0f;
    for (int64_t c = 0; c < n / SL_QK_K; c++) {
        sl_avx2_prefetch_weights((const char *)w_row + c * bb, bb);
        stage(type, w_row, c, &st);
        st.has_min = type == SL_GGML_TYPE_Q2_K;
        for (int j = 0; j < m; j++)
            acc[j] += dot8(&st, (const sl_block_q8_K *)((const char *)xa + (size_t)j * ldxa) + c);
    }
    for (int j = 0; j < m; j++)
        out[j] = acc[j];
}

void sl_vec_dot_klow_q8_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                             float *out, int64_t n)
{
    assert(sl_quant_klow_type(type) && n % SL_QK_K == 0 && m <= 32);
#define ROWS8(T) (m == 1 ? rows8(T, w_row, xa, ldxa, 1, out, n) : rows8(T, w_row, xa, ldxa, m, out, n))
    SL_KLOW_DISPATCH(ROWS8)
#undef ROWS8
}

/* ======================================================================
 * float32
 * ====================================================================== */

/* The staged block as floats w[256] (the reference dequantization). */
static inline void stage_floats(const struct staged *st, float *w)
{
    __m256 d = _mm256_set1_ps(st->d), dmin = _mm256_set1_ps(st->dmin);
    for (int i = 0; i < SL_QK_K; i += 8) {
        __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_load_si128((const __m128i *)(st->c16 + i))));
        __m256 v = _mm256_mul_ps(d, c);
        if (st->has_min) {
            __m256 mm = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_load_si128((const __m128i *)(st->m16 + i))));
            v = _mm256_sub_ps(v, _mm256_mul_ps(dmin, mm));
        }
        _mm256_store_ps(w + i, v);
    }
}

void sl_vec_dot_klow_f32_avx2(uint32_t type, const void *w_row, const float *x, int64_t ldx, int m,
                              float *out, int64_t n)
{
    assert(sl_quant_klow_type(type) && n % SL_QK_K == 0);
    struct staged st;
    _Alignas(32) float w[SL_QK_K];
    int bb = (int)sl_ggml_block_bytes(type);
    for (int j0 = 0; j0 < m; j0 += 32) {
        int mt = m - j0 < 32 ? m - j0 : 32;
        __m256 acc[32][2];
        for (int j = 0; j < mt; j++)
            acc[j][0] = acc[j][1] = _mm256_setzero_ps();
        for (int64_t c = 0; c < n / SL_QK_K; c++) {
            sl_avx2_prefetch_weights((const char *)w_row + c * bb, bb);
            stage(type, w_row, c, &st);
            stage_floats(&st, w);
            for (int j = 0; j < mt; j++) {
                const float *xs = x + (int64_t)(j0 + j) * ldx + c * SL_QK_K;
                __m256 a0 = acc[j][0], a1 = acc[j][1];
                for (int i = 0; i < SL_QK_K; i += 16) {
                    a0 = _mm256_fmadd_ps(_mm256_load_ps(w + i), _mm256_loadu_ps(xs + i), a0);
                    a1 = _mm256_fmadd_ps(_mm256_load_ps(w + i + 8), _mm256_loadu_ps(xs + i + 8), a1);
                }
                acc[j][0] = a0;
                acc[j][1] = a1;
            }
        }
        for (int j = 0; j < mt; j++)
            out[j0 + j] = sl_avx2_hsum_ps(_mm256_add_ps(acc[j][0], acc[j][1]));
    }
}
