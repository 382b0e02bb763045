/* kernels/cpu/vec_dot_legacy_avx2.c: AVX2 dot products of Q5_0, Q4_1,
 * Q5_1, Q8_1, IQ4_NL and MXFP4 weight rows with quantized activations: 16-bit
 * Q16_0 rows (the default) and 8-bit Q8_0 / Q8_1 rows (SLUICE_CPU_ACT=q8).
 * Compiled with -mavx2 -mfma -mf16c; reached from the dispatch switches of
 * vec_dot_q16_avx2.c and vec_dot_q8_avx2.c. Runs in the CPU backend's
 * threads. (Float activations: vec_dot_avx2.c stages these blocks like
 * Q4_0's and the K4 types'.)
 * Both kernels stage a chunk of weight blocks once per group of up to 32
 * activation rows (codes from avx2_legacy.h), then run each row through it
 * with that row's own operations, so a row's result never depends on m.
 *   16-bit: as vec_dot_q16_avx2.c's Q4_0 kernel: four blocks per chunk,
 *     codes widened to int16, vpmaddwd with the activation codes, exact
 *     int32 block sums (|qw| <= 127, so <= 32 * 127 * 32767 < 2^27), then
 *     vec_dot_int.h's terms on four double lanes (lane b % 4), Q4_1/Q5_1
 *     adding m * da * sum(qa) (sl_q16_term1): bitwise the portable
 *     vec_dot_q16.c's results.
 *   8-bit: ggml's AVX2 vec_dots, operation for operation: per block one FMA
 *     of dw*da into 8 float lanes after vpmaddubsw/vpmaddwd (signed codes:
 *     |w| and w's sign moved onto x, as for Q4_0; Q4_1/Q5_1: unsigned codes
 *     against Q8_1 activations, plus m * s summed in a scalar); IQ4_NL
 *     and MXFP4 alternate two accumulators and take an odd last block in a
 *     scalar, as ggml's do (MXFP4: its doubled E2M1 values are the int8
 *     codes and d the halved E8M0 scale, ggml's kvalues_mxfp4 trick). vpmaddubsw pairs stay within int16: 2 * 128 * 127. */
#include <assert.h>
#include <immintrin.h>
#include <stdbool.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/avx2_legacy.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/vec_dot.h"
#include "kernels/cpu/vec_dot_int.h"
#include "model/ggml_types.h"
#include "model/quant.h"

enum { GROUP = 32, QK = SL_QK_LEGACY };

/* ======================================================================
 * 16-bit activations (Q16_0)
 * ====================================================================== */

struct staged16 {
    _Alignas(32) int16_t c16[4 * QK];
    __m256d dw, mw;   /* block scales and (Q4_1/Q5_1) mins, 0 past nblk */
};

static inline void stage16(uint32_t type, const char *w, int nblk, struct staged16 *st)
{
    float d[4] = {0, 0, 0, 0}, m[4] = {0, 0, 0, 0};
    int bb = sl_avx2_legacy_bytes(type);
    for (int i = 0; i < 4; i++) {
        __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128();   /* past nblk: zeros, never read */
        if (i < nblk)
            sl_avx2_legacy_block(type, w + i * bb, &lo, &hi, &d[i], &m[i]);
        /* codes are below 128 even when unsigned: a signed widening serves all */
        _mm256_store_si256((__m256i *)(st->c16 + QK * i), _mm256_cvtepi8_epi16(lo));
        _mm256_store_si256((__m256i *)(st->c16 + QK * i + 16), _mm256_cvtepi8_epi16(hi));
    }
    st->dw = _mm256_cvtps_pd(_mm_set_ps(d[3], d[2], d[1], d[0]));
    st->mw = _mm256_cvtps_pd(_mm_set_ps(m[3], m[2], m[1], m[0]));
}

/* Four blocks of one row: exact int32 sums, then sl_q16_term0 (or term1)
 * on four lanes, added to acc; every operation is the scalar one's. */
static inline __attribute__((always_inline)) __m256d dot16(const struct staged16 *st, const sl_block_q16_0 *a,
                                                           __m256d acc, int nblk, bool min1)
{
    __m256i v[4];
    for (int i = 0; i < 4; i++) {
        if (i >= nblk) {
            v[i] = _mm256_setzero_si256();
            continue;
        }
        __m256i p0 = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + QK * i)),
                                       _mm256_loadu_si256((const __m256i *)a[i].qs));
        __m256i p1 = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(st->c16 + QK * i + 16)),
                                       _mm256_loadu_si256((const __m256i *)(a[i].qs + 16)));
        v[i] = _mm256_add_epi32(p0, p1);
    }
    __m128 da = _mm_set_ps(nblk > 3 ? a[3].d : 0.0f, nblk > 2 ? a[2].d : 0.0f, nblk > 1 ? a[1].d : 0.0f, a[0].d);
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    __m256d dad = _mm256_cvtps_pd(da);
    __m256d s = _mm256_mul_pd(st->dw, dad);
    __m256d t = _mm256_mul_pd(s, _mm256_cvtepi32_pd(sums));
    if (min1) {
        __m128i asum = _mm_set_epi32(nblk > 3 ? a[3].sum : 0, nblk > 2 ? a[2].sum : 0, nblk > 1 ? a[1].sum : 0,
                                     a[0].sum);
        __m256d u = _mm256_mul_pd(st->mw, dad);
        __m256d mv = _mm256_mul_pd(u, _mm256_cvtepi32_pd(asum));
        t = _mm256_add_pd(t, mv);
    }
    return _mm256_add_pd(acc, t);
}

static inline __attribute__((always_inline)) void rows16(uint32_t type, const void *w_row, const char *xa,
                                                         size_t ldxa, int mt, float *out, int64_t n)
{
    bool min1 = sl_avx2_legacy_min(type);
    int bb = sl_avx2_legacy_bytes(type);
    struct staged16 st;
    __m256d acc[GROUP];
    for (int j = 0; j < mt; j++)
        acc[j] = _mm256_setzero_pd();
    int64_t nb = n / QK;
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
        int nblk = (int)(nb - b0 < 4 ? nb - b0 : 4);
        const char *w = (const char *)w_row + b0 * bb;
        sl_avx2_prefetch_weights(w, nblk * bb);
        stage16(type, w, nblk, &st);
        if (nblk == 4)
            for (int j = 0; j < mt; j++)
                acc[j] = dot16(&st, (const sl_block_q16_0 *)(xa + (size_t)j * ldxa) + b0, acc[j], 4, min1);
        else
            for (int j = 0; j < mt; j++)
                acc[j] = dot16(&st, (const sl_block_q16_0 *)(xa + (size_t)j * ldxa) + b0, acc[j], nblk, min1);
    }
    for (int j = 0; j < mt; j++) {
        _Alignas(32) double lanes[4];
        _mm256_store_pd(lanes, acc[j]);
        out[j] = sl_q16_lanes_sum(lanes);
    }
}

/* ======================================================================
 * 8-bit activations (Q8_0, or Q8_1 for Q4_1/Q5_1)
 * ====================================================================== */

struct staged8 {
    _Alignas(32) uint8_t codes[8 * QK];
    float d[8], m[8];
    int nblk;
};

static inline void stage8(uint32_t type, const char *w, int nblk, struct staged8 *st)
{
    int bb = sl_avx2_legacy_bytes(type);
    for (int i = 0; i < nblk; i++) {
        if (type == SL_GGML_TYPE_Q5_0) {
            const sl_block_q5_0 *b = (const sl_block_q5_0 *)(w + i * bb);
            st->d[i] = _cvtsh_ss(b->d);
            st->m[i] = 0.0f;
            _mm256_store_si256((__m256i *)(st->codes + QK * i), sl_avx2_q5_0_codes(b));
            continue;
        }
        __m128i lo, hi;
        sl_avx2_legacy_block(type, w + i * bb, &lo, &hi, &st->d[i], &st->m[i]);
        /* one 32-byte store: the rows reload it as one vector, and a load
         * spanning two stores would stall store forwarding */
        _mm256_store_si256((__m256i *)(st->codes + QK * i), _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
    }
    st->nblk = nblk;
}

/* One row's state: float lanes (IQ4_NL: two, for even and odd blocks) and
 * the scalar sum of the Q4_1/Q5_1 min terms. */
struct row8 {
    __m256 acc, acc2;
    float summs;
};

/* Block i of the staged chunk against activation block a (Q8_0 or Q8_1:
 * the codes sit at a different offset), as ggml's per-block step. Q8_0
 * rows: da points at the block's float scale (act_quant.h), and dw * da is
 * formed from two broadcasts in one vector multiply, the same float
 * product as ggml's scalar one (vec_dot_q8_avx2.c's block0 says why). */
static inline __m256 block8(const struct staged8 *st, int i, const void *a, const float *da, uint32_t type,
                            __m256 acc)
{
    __m256i w = _mm256_load_si256((const __m256i *)(st->codes + QK * i));
    if (sl_avx2_legacy_min(type)) {   /* unsigned codes against Q8_1 */
        const sl_block_q8_1 *x = a;
        __m256i p = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)x->qs));
        __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        return _mm256_fmadd_ps(_mm256_set1_ps(st->d[i] * _cvtsh_ss(x->d)), s, acc);
    }
    const sl_block_q8_0 *x = a;
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x->qs), w));
    __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(st->d + i), _mm256_broadcast_ss(da)), s, acc);
}

/* block8 for a signed-code block against Q8_0 with the product dw * da
 * given (rows8x4). */
static inline __m256 block8p(__m256i w, __m256i aw, float pr, const sl_block_q8_0 *x, __m256 acc)
{
    __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x->qs), w));
    __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_set1_ps(pr), s, acc);
}

/* Four Q8_0 rows (not IQ4_NL's two lanes, not Q8_1) through the chunk's
 * blocks 0..nblk-1, sharing each code load: per row block8's operations on
 * the same values in the same order as the one-row loop, so the same bits.
 * Accumulators in locals (in memory they are stored after every block: the
 * int8 loads may alias them). With the float activation scales, against
 * the one-row loop it replaced: 24.3 -> 27.6 Gmac/s (Q5_0, 64 tokens). */
static inline void rows8x4(const struct staged8 *st, int nblk, const char *const a[4], const float *const da[4],
                           struct row8 r[4])
{
    __m256 c0 = r[0].acc, c1 = r[1].acc, c2 = r[2].acc, c3 = r[3].acc;
    size_t ab = sizeof(sl_block_q8_0);
    /* the 4 x nblk products dw * da first (the same floats as block8's),
     * eight per multiply, then broadcast from memory */
    _Alignas(32) float pr[4][8];
    if (nblk == 8) {
        __m256 dw = _mm256_loadu_ps(st->d);
        for (int j = 0; j < 4; j++)
            _mm256_store_ps(pr[j], _mm256_mul_ps(dw, _mm256_loadu_ps(da[j])));
    } else {
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < nblk; i++)
                pr[j][i] = st->d[i] * da[j][i];
    }
    for (int i = 0; i < nblk; i++) {
        __m256i w = _mm256_load_si256((const __m256i *)(st->codes + QK * i));
        __m256i aw = _mm256_sign_epi8(w, w);
        c0 = block8p(w, aw, pr[0][i], (const sl_block_q8_0 *)(a[0] + i * ab), c0);
        c1 = block8p(w, aw, pr[1][i], (const sl_block_q8_0 *)(a[1] + i * ab), c1);
        c2 = block8p(w, aw, pr[2][i], (const sl_block_q8_0 *)(a[2] + i * ab), c2);
        c3 = block8p(w, aw, pr[3][i], (const sl_block_q8_0 *)(a[3] + i * ab), c3);
    }
    r[0].acc = c0;
    r[1].acc = c1;
    r[2].acc = c2;
    r[3].acc = c3;
}

/* IQ4_NL's odd last block, ggml's scalar tail: d * (float)sum(q * qa). */
static inline float tail8(const struct staged8 *st, int i, const sl_block_q8_0 *a)
{
    const int8_t *w = (const int8_t *)st->codes + QK * i;
    int sumi = 0;
    for (int l = 0; l < QK; l++)
        sumi += w[l] * a->qs[l];
    return (_cvtsh_ss(a->d) * st->d[i]) * (float)sumi;
}

/* One Q5_0 row (decode): each block's codes go from registers straight
 * into ggml's per-block step, with no staging store and reload (the
 * decode of these files is bound by the kernel, not by memory). The same
 * operations on the same values as block8, so the same bits as rows8. */
static inline float row8_q5_0(const void *w_row, const char *xa, int64_t n)
{
    const sl_block_q5_0 *w = w_row;
    const sl_block_q8_0 *a = (const sl_block_q8_0 *)xa;
    const float *da = sl_act_q8_0_scales(xa, n);
    __m256 acc = _mm256_setzero_ps();
    int64_t nb = n / QK;
    for (int64_t b = 0; b < nb; b++) {
        if ((b & 7) == 0)
            sl_avx2_prefetch_weights((const char *)(w + b), (int)((nb - b < 8 ? nb - b : 8) * sizeof *w));
        __m256i c = sl_avx2_q5_0_codes(w + b);
        __m256i x = _mm256_loadu_si256((const __m256i *)a[b].qs);
        __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(x, c));
        __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(w[b].d) * da[b]), s, acc);
    }
    return sl_avx2_hsum_ps(acc);
}

static inline __attribute__((always_inline)) void rows8(uint32_t type, const void *w_row, const char *xa,
                                                        size_t ldxa, int mt, float *out, int64_t n)
{
    if (type == SL_GGML_TYPE_Q5_0 && mt == 1) {
        out[0] = row8_q5_0(w_row, xa, n);
        return;
    }
    bool min1 = sl_avx2_legacy_min(type), two = type == SL_GGML_TYPE_IQ4_NL || type == SL_GGML_TYPE_MXFP4;
    int bb = sl_avx2_legacy_bytes(type);
    size_t ab = min1 ? sizeof(sl_block_q8_1) : sizeof(sl_block_q8_0);
    struct staged8 st;
    struct row8 r[GROUP];
    for (int j = 0; j < mt; j++)
        r[j] = (struct row8){_mm256_setzero_ps(), _mm256_setzero_ps(), 0.0f};
    int64_t nb = n / QK;
    float tail[GROUP] = {0};
    bool odd_tail = two && nb % 2 == 1;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        int nblk = (int)(nb - b0 < 8 ? nb - b0 : 8);
        const char *w = (const char *)w_row + b0 * bb;
        sl_avx2_prefetch_weights(w, nblk * bb);
        stage8(type, w, nblk, &st);
        /* chunks start at even blocks, so the block parity is i's */
        int paired = odd_tail && b0 + nblk == nb ? nblk - 1 : nblk;
        int j = 0;
        if (!min1 && !two)
            for (; j + 4 <= mt; j += 4) {
                const char *a4[4];
                const float *d4[4];
                for (int k = 0; k < 4; k++) {
                    a4[k] = xa + (size_t)(j + k) * ldxa + (size_t)b0 * ab;
                    d4[k] = sl_act_q8_0_scales(xa + (size_t)(j + k) * ldxa, n) + b0;
                }
                rows8x4(&st, nblk, a4, d4, r + j);
            }
        for (; j < mt; j++) {
            const char *a = xa + (size_t)j * ldxa + (size_t)b0 * ab;
            const float *da = min1 ? NULL : sl_act_q8_0_scales(xa + (size_t)j * ldxa, n) + b0;
            for (int i = 0; i < paired; i++) {
                if (two && (i & 1))
                    r[j].acc2 = block8(&st, i, a + i * ab, min1 ? NULL : da + i, type, r[j].acc2);
                else
                    r[j].acc = block8(&st, i, a + i * ab, min1 ? NULL : da + i, type, r[j].acc);
                if (min1)
                    r[j].summs += st.m[i] * _cvtsh_ss(((const sl_block_q8_1 *)(a + i * ab))->s);
            }
            if (paired < nblk)
                tail[j] = tail8(&st, paired, (const sl_block_q8_0 *)(a + paired * ab));
        }
    }
    for (int j = 0; j < mt; j++) {
        if (two) {
            float s = sl_avx2_hsum_ps(_mm256_add_ps(r[j].acc, r[j].acc2));
            out[j] = odd_tail ? s + tail[j] : s;
        } else {
            out[j] = min1 ? sl_avx2_hsum_ps(r[j].acc) + r[j].summs : sl_avx2_hsum_ps(r[j].acc);
        }
    }
}

/* ======================================================================
 * Entry points (per group of at most GROUP rows, from the dispatchers)
 * ====================================================================== */

/* Inlined twice per type: mt = 1 (decode: the accumulators stay in
 * registers) and generic; type constant in each. */
#define SL_LEGACY_CASES(ROWS)                                                                          \
    switch (type) {                                                                                     \
    case SL_GGML_TYPE_Q5_0: ROWS(SL_GGML_TYPE_Q5_0, w_row, xa, ldxa, mt, out, n); break;               \
    case SL_GGML_TYPE_Q4_1: ROWS(SL_GGML_TYPE_Q4_1, w_row, xa, ldxa, mt, out, n); break;               \
    case SL_GGML_TYPE_Q5_1: ROWS(SL_GGML_TYPE_Q5_1, w_row, xa, ldxa, mt, out, n); break;               \
    case SL_GGML_TYPE_Q8_1: ROWS(SL_GGML_TYPE_Q8_1, w_row, xa, ldxa, mt, out, n); break;               \
    case SL_GGML_TYPE_IQ4_NL: ROWS(SL_GGML_TYPE_IQ4_NL, w_row, xa, ldxa, mt, out, n); break;           \
    case SL_GGML_TYPE_MXFP4: ROWS(SL_GGML_TYPE_MXFP4, w_row, xa, ldxa, mt, out, n); break;             \
    default: assert(!"vec_dot_legacy_avx2: not a legacy 32-element type");                             \
    }

void sl_vec_dot_legacy_q16_avx2(uint32_t type, const void *w_row, const char *xa, size_t ldxa, int mt, float *out,
                                int64_t n)
{
    assert(mt >= 1 && mt <= GROUP && n % QK == 0);
    if (mt == 1) {
        SL_LEGACY_CASES(rows16)
        return;
    }
    SL_LEGACY_CASES(rows16)
}

void sl_vec_dot_legacy_q8_avx2(uint32_t type, const void *w_row, const char *xa, size_t ldxa, int mt, float *out,
                               int64_t n)
{
    assert(mt >= 1 && mt <= GROUP && n % QK == 0);
    if (mt == 1) {
        SL_LEGACY_CASES(rows8)
        return;
    }
    SL_LEGACY_CASES(rows8)
}
