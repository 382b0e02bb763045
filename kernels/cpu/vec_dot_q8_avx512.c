/* kernels/cpu/vec_dot_q8_avx512.c: 8-bit dot products on AVX-512 with
 * VNNI for the types that carry most weights, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K,
 * Q6_K: one weight row with one activation row (decode), and prefill's
 * register tiles of four weight rows. Everything else (other types, more
 * than GROUP activation rows) goes to the AVX2 kernels (vec_dot_q8_avx2.c,
 * vec_dot_legacy_avx2.c).
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni on top of the
 * AVX2 flags; called only after vec_dot.c has seen the CPU (and the OS)
 * support them. Runs in the CPU backend's threads.
 * Bits: every result is bitwise the AVX2 kernels'. The integer sums are
 * exact whatever the instructions, and each int32 lane sums the same
 * elements as its AVX2 lane (lane l of a 32-code group: codes 4l..4l+3; a
 * 512-bit register holds two groups, whose halves are added at the end of
 * the super-block). The float steps are the AVX2 ones in the same order:
 * sl_avx2_q8k_tail per K-quant super-block, ggml's per-block FMA for the
 * 32-element types. So a model's logits do not depend on which of the two
 * ISAs ran (tests/unit/kernels/vec_dot_avx512_test.c checks it).
 * What it saves against AVX2: one row needs no staging store and reload of
 * the codes; K-quants unpack 64 codes per instruction and need three
 * 512-bit multiplies per 128 codes (six 256-bit halves) where AVX2 needs
 * eight 256-bit ones (pair16); the 32-element types take vpdpbusd for
 * maddubs + madd, and Q5_0's fifth bits are one mask blend (AVX2: a
 * shuffle, an or and a compare). On a CPU that
 * runs 512-bit operations as two 256-bit halves (Zen 4) the multiplies are
 * what bounds the tiles, so what counts is fewer multiplies, not wider
 * ones: 512-bit tiles with AVX2's multiplies measured no faster. Figures:
 * docs/PERF.md, "CPU engine". */
#include <assert.h>
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/vec_dot.h"
#include "model/ggml_types.h"
#include "model/quant.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512VNNI__)
#error "vec_dot_q8_avx512.c: build with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (kernels/CMakeLists.txt)"
#endif

/* The eight int32 lanes of both 256-bit halves added: two 32-code groups'
 * sums lane by lane, as AVX2 adds its per-group vectors. */
static inline __m256i halves_sum(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* A 512-bit vector of int16 lanes: lo in the low half, hi in the high half. */
static inline __m512i halves16(short lo, short hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(lo)), _mm256_set1_epi16(hi), 1);
}

/* The multiply by the sub-block scales, with fewer multiplies than
 * vpmaddubsw + vpmaddwd (per 128 codes three 512-bit ones against four):
 * vpdpbusd first sums the codes times activations by fours into int32 lanes (|sum| <= 4 * 63 * 128 < 2^15), two such vectors
 * go into the low and high int16 halves of each lane (pair16), and one
 * vpmaddwd / vpdpwssd multiplies both by their scales and adds them. Lane
 * l still sums codes 4l..4l+3 of every group, as in AVX2. */
static inline __m512i pair16(__m512i lo, __m512i hi)
{
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, lo, _mm512_slli_epi32(hi, 16));
}

/* Byte-shuffle indices that make int16 lanes of the scale bytes: in the
 * low 256 bits (a, b) per int32 lane, in the high 256 bits (c, d); index
 * byte 0x80 writes the zero high bytes. */
static inline __m512i scale_pairs(int a, int b, int c, int d)
{
    __m256i lo = _mm256_set1_epi32((int)(0x80008000u | (unsigned)a | (unsigned)b << 16));
    __m256i hi = _mm256_set1_epi32((int)(0x80008000u | (unsigned)c | (unsigned)d << 16));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* ---- Q4_K / Q5_K / Q6_K ---------------------------------------------------
 * A super-block staged in registers (one row) or on the stack (the tiles):
 * codes[v] its elements 64v..64v+63 in order, sp the scale pairs for
 * pair16(t0, t1) and pair16(t2, t3), and what sl_avx2_q8k_tail reads. */
struct kstage {
    __m512i codes[4];
    __m512i sp[2];
    __m256i sc16, mins16;
    float d, dmin;
};

/* Q4_K (q5 false) and Q5_K. Chunk p of 32 qs bytes holds sub-blocks 2p
 * (low nibbles) and 2p+1 (high): the chunk goes to both halves of a
 * register, the high half shifted by 4. The scales: byte shuffles of the
 * eight 6-bit scales into int16 lanes. */
static inline void stage_k4(bool q5, const char *blk, struct kstage *st)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), b4 = _mm512_set1_epi8(0x10);
    uint16_t hd, hdmin;
    const uint8_t *scales, *qs, *qh = NULL;
    if (q5) {
        const sl_block_q5_K *b = (const sl_block_q5_K *)blk;
        hd = b->d, hdmin = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
    } else {
        const sl_block_q4_K *b = (const sl_block_q4_K *)blk;
        hd = b->d, hdmin = b->dmin, scales = b->scales, qs = b->qs;
    }
    uint32_t f[4];
    sl_avx2_k4_scale_words(scales, f);
    __m512i sc = _mm512_broadcast_i32x4(_mm_set_epi32(0, 0, (int)f[1], (int)f[0]));
    __m128i mn = _mm_set_epi32(0, 0, (int)f[3], (int)f[2]);
    __m512i h = q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh)) : _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * p)));
        __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, halves16(0, 4)), m4);
        if (q5) {   /* bit 2p of qh[l] for sub-block 2p, bit 2p+1 for 2p+1 */
            __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * p))),
                                              _mm256_set1_epi8((char)(2 << (2 * p))), 1);
            codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(h, bits), codes, b4);
        }
        st->codes[p] = codes;
    }
    /* codes[p] lanes 0-7: sub-block 2p, 8-15: 2p+1; pairs (0, 1) and (2, 3)
     * take scales (sc0, sc2 | sc1, sc3) and (sc4, sc6 | sc5, sc7) */
    st->sp[0] = _mm512_shuffle_epi8(sc, scale_pairs(0, 2, 1, 3));
    st->sp[1] = _mm512_shuffle_epi8(sc, scale_pairs(4, 6, 5, 7));
    st->mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    st->sc16 = _mm256_setzero_si256();
    st->d = _cvtsh_ss(hd);
    st->dmin = _cvtsh_ss(hdmin);
}

/* vpermw indices of the scale pairs of codes[v], codes[v+1] (v = base / 4):
 * int16 lane 2i takes scale base + i/4, lane 2i+1 base + 4 + i/4. */
static inline __m512i q6_pairs(int base)
{
    return _mm512_set_epi16(base + 7, base + 3, base + 7, base + 3, base + 7, base + 3, base + 7, base + 3,
                            base + 6, base + 2, base + 6, base + 2, base + 6, base + 2, base + 6, base + 2,
                            base + 5, base + 1, base + 5, base + 1, base + 5, base + 1, base + 5, base + 1,
                            base + 4, base + 0, base + 4, base + 0, base + 4, base + 0, base + 4, base + 0);
}

/* Q6_K. Half hf's 64 ql bytes are [ql0 | ql1]: their low nibbles are
 * elements 0-63 of the half, the high ones 64-127; qh's bits are shifted
 * per half (4 and 2, then 0 and -2) as sl_avx2_q6_K_codes does for each
 * group. The scales, one per 16 codes, go to int16 lanes by a permute. */
static inline void stage_q6(const sl_block_q6_K *b, struct kstage *st)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int hf = 0; hf < 2; hf++) {
        __m512i ql = _mm512_loadu_si512(b->ql + 64 * hf);
        __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * hf)));
        st->codes[2 * hf] =
            _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, halves16(4, 2)), m30));
        st->codes[2 * hf + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                _mm512_and_si512(_mm512_srlv_epi16(hb, halves16(0, 2)), m30));
    }
    st->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    /* int32 lane i of codes[v]'s sums: elements 64v + 4i.., scale 4v + i/4 */
    st->sp[0] = _mm512_permutexvar_epi16(q6_pairs(0), _mm512_castsi256_si512(st->sc16));
    st->sp[1] = _mm512_permutexvar_epi16(q6_pairs(8), _mm512_castsi256_si512(st->sc16));
    st->mins16 = _mm256_setzero_si256();
    st->d = _cvtsh_ss(b->d);
    st->dmin = 0.0f;
}

static inline void stage_k(int kind, const char *blk, struct kstage *st)
{
    if (kind == 6)
        stage_q6((const sl_block_q6_K *)blk, st);
    else
        stage_k4(kind == 5, blk, st);
}

/* One staged super-block times one activation block, into acc: the same
 * function for one row and in the tiles, so both give the same bits. */
static inline __m256 kdot(const struct kstage *st, const sl_block_q8_K *x, int kind, __m256 acc)
{
    __m512i t[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++)
        t[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), st->codes[v], _mm512_loadu_si512(x->qs + 64 * v));
    __m512i s = _mm512_madd_epi16(pair16(t[0], t[1]), st->sp[0]);
    s = _mm512_dpwssd_epi32(s, pair16(t[2], t[3]), st->sp[1]);
    return sl_avx2_q8k_tail(kind, halves_sum(s), st->sc16, st->mins16, st->d, st->dmin, x->d, x->bsums, acc);
}

static inline size_t kblock_bytes(int kind)
{
    return kind == 4 ? sizeof(sl_block_q4_K) : kind == 5 ? sizeof(sl_block_q5_K) : sizeof(sl_block_q6_K);
}

static inline __m256 k_row(int kind, const void *w_row, const sl_block_q8_K *a, int64_t nsb)
{
    size_t bb = kblock_bytes(kind);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < nsb; c++) {
        const char *blk = (const char *)w_row + (size_t)c * bb;
        sl_avx2_prefetch_weights(blk, (int)bb);
        struct kstage st;
        stage_k(kind, blk, &st);
        acc = kdot(&st, a + c, kind, acc);
    }
    return acc;
}

/* ---- Q5_0 -----------------------------------------------------------------
 * The fifth bits are a 32-bit mask as they stand (bit j: element j), so a
 * blend places them: nibble where the bit is set, nibble - 16 (0xF0 | q)
 * where not. Then vec_dot_legacy_avx2.c's row8_q5_0 step, block by block. */
static inline __m256i q5_0_codes(const sl_block_q5_0 *b)
{
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xF));
    uint32_t h;
    memcpy(&h, b->qh, 4);
    return _mm256_mask_blend_epi8(_cvtu32_mask32(h), _mm256_or_si256(nib, _mm256_set1_epi8((char)0xF0)), nib);
}

static inline __m256 q5_0_row(const sl_block_q5_0 *w, const sl_block_q8_0 *a, const float *da, int64_t nb)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if ((b & 7) == 0)
            sl_avx2_prefetch_weights((const char *)(w + b), (int)((nb - b < 8 ? nb - b : 8) * sizeof *w));
        __m256i c = q5_0_codes(w + b);
        __m256i x = _mm256_loadu_si256((const __m256i *)a[b].qs);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(c, c), _mm256_sign_epi8(x, c));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(w[b].d) * da[b]), _mm256_cvtepi32_ps(p), acc);
    }
    return acc;
}

/* ---- Q8_0 / Q4_0 ----------------------------------------------------------
 * ggml's per-block step, the one vec_dot_q8_avx2.c's dot0 runs: the sign
 * of w moved onto x, |w| * x summed by fours (vpdpbusd: maddubs + madd
 * without the int16 pair sums, which never saturate here: 2*128*127 fits),
 * then one FMA per block by dw * da, in block order. */
static inline __m256 q0_row(bool q4, const void *w_row, const sl_block_q8_0 *a, int64_t nb)
{
    const size_t bb = q4 ? sizeof(sl_block_q4_0) : sizeof(sl_block_q8_0);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const char *blk = (const char *)w_row + (size_t)i * bb;
        if (i % 8 == 0)
            sl_avx2_prefetch_weights(blk, (int)(8 * bb));
        __m256i w;
        float dw;
        if (q4) {
            const sl_block_q4_0 *b = (const sl_block_q4_0 *)blk;
            __m128i lo, hi;
            sl_avx2_q4_0_codes(b->qs, &lo, &hi);
            w = _mm256_set_m128i(hi, lo);
            dw = _cvtsh_ss(b->d);
        } else {
            const sl_block_q8_0 *b = (const sl_block_q8_0 *)blk;
            w = _mm256_loadu_si256((const __m256i *)b->qs);
            dw = _cvtsh_ss(b->d);
        }
        __m256i x = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * _cvtsh_ss(a[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return acc;
}

/* ---- Q8_0 / Q4_0 / Q5_0 prefill tiles -------------------------------------
 * QT_R weight rows x JT (<= QT_J) activation rows over QT_B blocks staged
 * per weight row (signed codes and float scales, as vec_dot_q8_avx2.c's
 * tiles stage them). Per (weight row, activation row) pair the per-block
 * step of q0_row, in block order, into the pair's own accumulator, with the
 * products dw * da formed eight at a time beforehand (the same float
 * products): so bitwise the AVX2 tiles' and one-row results. Against AVX2
 * the step has one multiply-class operation fewer (vpdpbusd for vpmaddubsw
 * + vpmaddwd), which is what bounds these loops on a CPU whose vector
 * multiplies share two pipes, and the 32 ymm registers of AVX-512 hold a
 * 4 x 4 tile (AVX2: 4 x 2). */
enum { QT_R = 4, QT_J = 4, QT_B = 64, GROUP = 32 };

struct q0_stage {
    _Alignas(64) int8_t codes[QT_R][QT_B * 32];
    _Alignas(64) float bd[QT_R][QT_B];
    int nblk;
};

/* Block b of a Q8_0/Q4_0/Q5_0 row: its 32 signed codes and its scale. */
static inline __m256i q0_codes(uint32_t type, const char *row, int64_t b, float *d)
{
    if (type == SL_GGML_TYPE_Q8_0) {
        const sl_block_q8_0 *q = (const sl_block_q8_0 *)row + b;
        *d = _cvtsh_ss(q->d);
        return _mm256_loadu_si256((const __m256i *)q->qs);
    }
    if (type == SL_GGML_TYPE_Q4_0) {
        const sl_block_q4_0 *q = (const sl_block_q4_0 *)row + b;
        __m128i lo, hi;
        sl_avx2_q4_0_codes(q->qs, &lo, &hi);
        *d = _cvtsh_ss(q->d);
        return _mm256_set_m128i(hi, lo);
    }
    const sl_block_q5_0 *q = (const sl_block_q5_0 *)row + b;
    *d = _cvtsh_ss(q->d);
    return q5_0_codes(q);
}

static inline __attribute__((always_inline)) void q0_tile(const struct q0_stage *ts, const sl_block_q8_0 *const a[],
                                                          const float *const da[], int JT, __m256 acc[QT_R][GROUP],
                                                          int j0)
{
    __m256 c[QT_R][QT_J];
    _Alignas(32) float pr[QT_R][QT_J][QT_B];
    int nblk = ts->nblk;
#pragma GCC unroll 4
    for (int r = 0; r < QT_R; r++) {
#pragma GCC unroll 4
        for (int j = 0; j < JT; j++) {
            c[r][j] = acc[r][j0 + j];
            sl_avx2_scale_products(ts->bd[r], da[j], nblk, pr[r][j]);
        }
    }
    for (int i = 0; i < nblk; i++) {
        __m256i x[QT_J];
#pragma GCC unroll 4
        for (int j = 0; j < JT; j++)
            x[j] = _mm256_loadu_si256((const __m256i *)a[j][i].qs);
#pragma GCC unroll 4
        for (int r = 0; r < QT_R; r++) {
            __m256i w = _mm256_load_si256((const __m256i *)(ts->codes[r] + 32 * i));
            __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
            for (int j = 0; j < JT; j++) {
                __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x[j], w));
                c[r][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(pr[r][j] + i), _mm256_cvtepi32_ps(p), c[r][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < QT_R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < JT; j++)
            acc[r][j0 + j] = c[r][j];
}

/* QT_R weight rows (row_bytes apart) of a Q8_0/Q4_0/Q5_0 matrix against mt
 * (2..GROUP) activation rows: out[r * mt + j]. */
static void rows0_tile(uint32_t type, const char *w, size_t row_bytes, const char *xa, size_t ldxa, int mt,
                       float *out, int64_t n)
{
    struct q0_stage ts;
    __m256 acc[QT_R][GROUP];
    for (int r = 0; r < QT_R; r++)
        for (int j = 0; j < mt; j++)
            acc[r][j] = _mm256_setzero_ps();
    int64_t nb = n / 32;
    size_t bb = sl_ggml_block_bytes(type);
    for (int64_t b0 = 0; b0 < nb; b0 += QT_B) {
        int nblk = (int)(nb - b0 < QT_B ? nb - b0 : QT_B);
        ts.nblk = nblk;
        for (int r = 0; r < QT_R; r++) {
            const char *row = w + (size_t)r * row_bytes;
            sl_avx2_prefetch_weights(row + b0 * bb, (int)(nblk * bb));
            for (int i = 0; i < nblk; i++)
                _mm256_store_si256((__m256i *)(ts.codes[r] + 32 * i), q0_codes(type, row, b0 + i, &ts.bd[r][i]));
        }
        const sl_block_q8_0 *aj[QT_J];
        const float *dj[QT_J];
        int j = 0;
        for (; j < mt; j += QT_J) {
            int jt = mt - j < QT_J ? mt - j : QT_J;
            for (int i = 0; i < jt; i++) {
                aj[i] = (const sl_block_q8_0 *)(xa + (size_t)(j + i) * ldxa) + b0;
                dj[i] = sl_act_q8_0_scales(xa + (size_t)(j + i) * ldxa, n) + b0;
            }
            if (jt == 4)
                q0_tile(&ts, aj, dj, 4, acc, j);
            else if (jt == 3)
                q0_tile(&ts, aj, dj, 3, acc, j);
            else if (jt == 2)
                q0_tile(&ts, aj, dj, 2, acc, j);
            else
                q0_tile(&ts, aj, dj, 1, acc, j);
        }
    }
    for (int r = 0; r < QT_R; r++)
        for (int j = 0; j < mt; j++)
            out[(size_t)r * mt + j] = sl_avx2_hsum_ps(acc[r][j]);
}

/* KT_R K-quant weight rows (row_bytes apart) against mt (2..GROUP)
 * activation rows: out[r * mt + j]; each super-block of the KT_R rows is
 * staged once and serves every activation row, each activation block
 * serves the KT_R weight rows. kind a constant per call. */
enum { KT_R = 4 };

static inline __attribute__((always_inline)) void rowsk_tile(int kind, const char *w, size_t row_bytes,
                                                             const char *xa, size_t ldxa, int mt, float *out,
                                                             int64_t n)
{
    struct kstage st[KT_R];
    __m256 acc[KT_R][GROUP];
    for (int r = 0; r < KT_R; r++)
        for (int j = 0; j < mt; j++)
            acc[r][j] = _mm256_setzero_ps();
    size_t bb = kblock_bytes(kind);
    for (int64_t c = 0; c < n / SL_QK_K; c++) {
        for (int r = 0; r < KT_R; r++) {
            const char *blk = w + (size_t)r * row_bytes + (size_t)c * bb;
            sl_avx2_prefetch_weights(blk, (int)bb);
            stage_k(kind, blk, &st[r]);
        }
        for (int j = 0; j < mt; j++) {
            const sl_block_q8_K *x = (const sl_block_q8_K *)(xa + (size_t)j * ldxa) + c;
#pragma GCC unroll 4
            for (int r = 0; r < KT_R; r++)
                acc[r][j] = kdot(&st[r], x, kind, acc[r][j]);
        }
    }
    for (int r = 0; r < KT_R; r++)
        for (int j = 0; j < mt; j++)
            out[(size_t)r * mt + j] = sl_avx2_hsum_ps(acc[r][j]);
}

static inline bool row_type(uint32_t type)
{
    return type == SL_GGML_TYPE_Q8_0 || type == SL_GGML_TYPE_Q4_0 || type == SL_GGML_TYPE_Q5_0 ||
           type == SL_GGML_TYPE_Q4_K || type == SL_GGML_TYPE_Q5_K || type == SL_GGML_TYPE_Q6_K;
}

/* The one-row dot of a row_type type. */
static inline float row_dot(uint32_t type, const void *w_row, const void *xa, int64_t n)
{
    __m256 acc;
    switch (type) {
    case SL_GGML_TYPE_Q8_0: acc = q0_row(false, w_row, xa, n / 32); break;
    case SL_GGML_TYPE_Q4_0: acc = q0_row(true, w_row, xa, n / 32); break;
    case SL_GGML_TYPE_Q5_0: acc = q5_0_row(w_row, xa, sl_act_q8_0_scales(xa, n), n / 32); break;
    case SL_GGML_TYPE_Q4_K: acc = k_row(4, w_row, xa, n / SL_QK_K); break;
    case SL_GGML_TYPE_Q5_K: acc = k_row(5, w_row, xa, n / SL_QK_K); break;
    default: acc = k_row(6, w_row, xa, n / SL_QK_K); break;
    }
    return sl_avx2_hsum_ps(acc);
}

void sl_vec_dot_q8_multi_avx512(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m, float *out,
                                int64_t n)
{
    assert(n % sl_ggml_block_elems(type) == 0);
    if (m == 1 && row_type(type))
        *out = row_dot(type, w_row, xa, n);
    else
        sl_vec_dot_q8_multi_avx2(type, w_row, xa, ldxa, m, out, n);
}

void sl_vec_dot_q8_rows_avx512(uint32_t type, const void *w, size_t row_bytes, int nr, const void *xa, size_t ldxa,
                               int m, float *out, int64_t n)
{
    if (m == 1 && row_type(type)) {
        for (int r = 0; r < nr; r++)
            out[r] = row_dot(type, (const char *)w + (size_t)r * row_bytes, xa, n);
        return;
    }
    int r = 0;
    if ((type == SL_GGML_TYPE_Q8_0 || type == SL_GGML_TYPE_Q4_0 || type == SL_GGML_TYPE_Q5_0) && m >= 2 && m <= GROUP)
        for (; r + QT_R <= nr; r += QT_R)
            rows0_tile(type, (const char *)w + (size_t)r * row_bytes, row_bytes, xa, ldxa, m, out + (size_t)r * m, n);
    int kind = type == SL_GGML_TYPE_Q4_K ? 4 : type == SL_GGML_TYPE_Q5_K ? 5 : type == SL_GGML_TYPE_Q6_K ? 6 : 0;
    if (kind && m >= 2 && m <= GROUP)
        for (; r + KT_R <= nr; r += KT_R) {
            const char *wr = (const char *)w + (size_t)r * row_bytes;
            float *o = out + (size_t)r * m;
            if (kind == 4)
                rowsk_tile(4, wr, row_bytes, xa, ldxa, m, o, n);
            else if (kind == 5)
                rowsk_tile(5, wr, row_bytes, xa, ldxa, m, o, n);
            else
                rowsk_tile(6, wr, row_bytes, xa, ldxa, m, o, n);
        }
    if (r < nr)
        sl_vec_dot_q8_rows_avx2(type, (const char *)w + (size_t)r * row_bytes, row_bytes, nr - r, xa, ldxa, m,
                                out + (size_t)r * m, n);
}
