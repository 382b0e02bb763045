/* kernels/cpu/vec_dot_q8_avx2.c: AVX2 dot products of quantized weight rows
 * with 8-bit activations (Q8_0 / Q8_K rows, act_quant.h).
 * Compiled with -mavx2 -mfma -mf16c; called only after vec_dot.c has seen
 * the CPU support them. Runs in the CPU backend's threads.
 * Algorithm: the row is walked in chunks of 256 elements (one K-quant
 * super-block, or up to eight Q8_0/Q4_0 blocks). A chunk is first staged:
 * codes unpacked to one byte each, and for K-quants the integer scales laid
 * out as the 16-lane int16 vectors the multiply-add wants. Then each
 * activation row of the group (1 in decode, up to 32 in prefill; four at a
 * time share each code and scale load) runs the same per-row operations on
 * the staged chunk:
 *   vpmaddubsw (u8 code x s8 activation, pairs summed to int16: at most
 *   2*63*127, no saturation), vpmaddwd by the sub-block scales (int32),
 *   integer adds over the chunk, then one float FMA per block.
 * Q8_0/Q4_0 codes are signed, so the unsigned operand is |w| and the sign
 * moves to the activation (vpsignb), as ggml does. In prefill their rows
 * come four at a time (sl_vec_dot_q8_rows_avx2) and run as register tiles
 * of 4 weight rows x 2 activation rows, 64 blocks staged per row: each
 * activation block is loaded once per four weight rows, each weight block
 * once per two activation rows, and the eight accumulators stay in
 * registers (the per-pair steps unchanged, so the same bits). K-quant
 * rows take the same 4 x 2 tiles over each staged super-block (rowsk_tile).
 * The integer sums equal the portable ones (vec_dot_q8.c) exactly; the float
 * sums may differ in order. A row's result never depends on the group
 * size or on the tile it ran in: same per-pair operations in the same
 * order (tested bitwise).
 * Trade-off: staging costs a store and a reload per 32 codes even for one
 * row; in exchange decode and prefill share one kernel, which is what
 * makes the batch-invariance argument a one-liner. Speed against llama.cpp
 * and what is left: docs/PERF.md, "CPU engine". */
#include <assert.h>
#include <immintrin.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/vec_dot.h"
#include "kernels/cpu/vec_dot_int.h"
#include "kernels/cpu/vec_dot_klow.h"
#include "model/ggml_types.h"
#include "model/quant.h"

enum { CHUNK = 256, GROUP = 32 };

/* A staged chunk. K types: codes unsigned (Q4_K 0..15, Q5_K 0..31, Q6_K
 * 0..63, the -32 of Q6_K is applied through the activation's block sums);
 * scv[k] holds the scale of each int16 lane of group k (32 codes);
 * mins16 the Q4_K/Q5_K sub-block mins (each twice, one per 16 codes, to
 * pair with the bsums), sc16 the Q6_K scales. Q8_0/Q4_0: signed codes and one
 * float scale per 32-block. */
struct qstaged {
    _Alignas(32) uint8_t codes[CHUNK];
    _Alignas(32) int16_t scv[8][16];
    _Alignas(32) int16_t mins16[16];
    _Alignas(32) int16_t sc16[16];
    float d, dmin;
    _Alignas(32) float bd[8];   /* Q8_0/Q4_0 block scales; 0 past nblk */
    int nblk;
};

/* ======================================================================
 * Staging
 * ====================================================================== */

static inline void stage_q8_0(const sl_block_q8_0 *b, int nblk, struct qstaged *st)
{
    for (int i = nblk; i < 8; i++)
        st->bd[i] = 0.0f;
    for (int i = 0; i < nblk; i++) {
        st->bd[i] = _cvtsh_ss(b[i].d);
        _mm256_store_si256((__m256i *)(st->codes + 32 * i), _mm256_loadu_si256((const __m256i *)b[i].qs));
    }
    st->nblk = nblk;
}

static inline void stage_q4_0(const sl_block_q4_0 *b, int nblk, struct qstaged *st)
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
static inline void stage_k4(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
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

static inline void stage_q6_K(const sl_block_q6_K *b, struct qstaged *st)
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

/* ======================================================================
 * Per-row dot of one staged chunk
 * ====================================================================== */

/* One row's running sums: 8 float lanes, one FMA per block (plus one for
 * the K4 min terms). Q8_0 follows ggml's AVX2 vec_dot exactly (a Q8_0
 * model gives llama.cpp's logits bit for bit). The K-quants do not try:
 * llama.cpp runs repacked Q4_K kernels, and matching its Q6_K lanes (an
 * extra maddubs per 32 codes) did not give its bits either. So they take
 * the cheaper and more accurate way: Q6_K's -32 through the activation's
 * block sums (one madd per super-block), K4 min terms folded per block
 * (the two parts nearly cancel; cancelling early is ~10x more accurate
 * than ggml's separate sum). Accuracy matters because with 8-bit
 * activations a 1e-7 difference can round one code the other way
 * downstream (test_forward.py measures this).
 * kind: 4 = Q4_K, 5 = Q5_K, 6 = Q6_K, a constant at every call. */
struct racc {
    __m256 acc;
};

/* The float part of a super-block, shared by kdot and kdot4 so a row gets
 * the same operations whichever of them runs it (sl_avx2_q8k_tail, which
 * the AVX-512 kernels run too). */
static inline struct racc ktail(const struct qstaged *st, const sl_block_q8_K *a, int kind, __m256i sumi,
                                struct racc r)
{
    r.acc = sl_avx2_q8k_tail(kind, sumi, _mm256_load_si256((const __m256i *)st->sc16),
                             _mm256_load_si256((const __m256i *)st->mins16), st->d, st->dmin, a->d, a->bsums, r.acc);
    return r;
}

/* The integer sums of one 32-code group k: q * x, pairs summed (at most
 * 2*63*127, no int16 saturation), times the group's scales. */
static inline __m256i kgroup(const struct qstaged *st, int k, __m256i codes, __m256i x, int kind)
{
    (void)kind;
    return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, x), _mm256_load_si256((const __m256i *)st->scv[k]));
}

static inline struct racc kdot(const struct qstaged *st, const sl_block_q8_K *a, int kind, struct racc r)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int k = 0; k < 8; k += 2) {   /* two integer chains */
        s0 = _mm256_add_epi32(s0, kgroup(st, k, _mm256_load_si256((const __m256i *)(st->codes + 32 * k)),
                                         _mm256_loadu_si256((const __m256i *)(a->qs + 32 * k)), kind));
        s1 = _mm256_add_epi32(s1, kgroup(st, k + 1, _mm256_load_si256((const __m256i *)(st->codes + 32 * k + 32)),
                                         _mm256_loadu_si256((const __m256i *)(a->qs + 32 * k + 32)), kind));
    }
    return ktail(st, a, kind, _mm256_add_epi32(s0, s1), r);
}

/* kdot for four activation rows: each code and scale load serves four rows
 * (prefill). Integer sums are exact in any order, and the float part is
 * ktail, so each row's result is bitwise kdot's. */
static inline void kdot4(const struct qstaged *st, const sl_block_q8_K *const a[4], int kind, struct racc r[4])
{
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256(), s2 = _mm256_setzero_si256(),
            s3 = _mm256_setzero_si256();
    const int8_t *x0 = a[0]->qs, *x1 = a[1]->qs, *x2 = a[2]->qs, *x3 = a[3]->qs;
    /* not unrolled: fully unrolled, GCC computes all 32 products first and
     * spills them (measured 8% slower) */
#pragma GCC unroll 1
    for (int k = 0; k < 8; k++) {
        __m256i c = _mm256_load_si256((const __m256i *)(st->codes + 32 * k));
        __m256i sc = _mm256_load_si256((const __m256i *)st->scv[k]);
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(c, _mm256_loadu_si256((const __m256i *)(x0 + 32 * k))), sc));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(c, _mm256_loadu_si256((const __m256i *)(x1 + 32 * k))), sc));
        s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_maddubs_epi16(c, _mm256_loadu_si256((const __m256i *)(x2 + 32 * k))), sc));
        s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_maddubs_epi16(c, _mm256_loadu_si256((const __m256i *)(x3 + 32 * k))), sc));
    }
    r[0] = ktail(st, a[0], kind, s0, r[0]);
    r[1] = ktail(st, a[1], kind, s1, r[1]);
    r[2] = ktail(st, a[2], kind, s2, r[2]);
    r[3] = ktail(st, a[3], kind, s3, r[3]);
}

/* Q8_0/Q4_0 chunk (st->nblk blocks) with as many Q8_0 activation blocks.
 * da: the row's float scales (act_quant.h) from the chunk's first block.
 * The products dw * da are the float products ggml's per-block step forms,
 * so the bits are ggml's; formed eight at a time from float scales they
 * save an fp16 conversion, a scalar multiply and a broadcast per block and
 * weight row. */
/* One 32-block: |w| (unsigned operand) and w's sign moved onto x; pr the
 * block's dw * da. */
static inline __m256 block0(__m256i w, __m256i aw, const float *pr, const sl_block_q8_0 *a, __m256 acc)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)a->qs);
    __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
    __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_broadcast_ss(pr), s, acc);   /* ggml's order */
}

/* One row: the scalar product from the block's fp16 d, ggml's own step
 * (a vector of eight products measured 7% slower when one row shares
 * nothing); the same float value, so the same bits as dot0x4. */
static inline __m256 dot0(const struct qstaged *st, const sl_block_q8_0 *a, __m256 acc)
{
    for (int i = 0; i < st->nblk; i++) {
        __m256i w = _mm256_load_si256((const __m256i *)(st->codes + 32 * i));
        __m256i x = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(st->bd[i] * _cvtsh_ss(a[i].d)), s, acc);
    }
    return acc;
}

/* dot0 for four activation rows sharing each code and scale load (prefill);
 * per row the same block0 calls in the same order, so bitwise dot0's
 * results. The accumulators are locals: in acc[] the compiler stores them
 * after every block, since the int8 code loads may alias them (no
 * difference measured on its own, but no reason to pay the stores). */
static inline void dot0x4(const struct qstaged *st, const sl_block_q8_0 *const a[4], const float *const da[4],
                          __m256 acc[4])
{
    __m256 c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3];
    /* the chunk's 4 x 8 products dw * da first, eight per multiply, then
     * broadcast from memory (a load, not a vector operation): measured 4%
     * faster than one vector multiply per block and row */
    _Alignas(32) float pr[4][8];
    if (st->nblk == 8) {
        __m256 dw = _mm256_load_ps(st->bd);
        for (int j = 0; j < 4; j++)
            _mm256_store_ps(pr[j], _mm256_mul_ps(dw, _mm256_loadu_ps(da[j])));
    } else {   /* the row's last chunk: its scales end at da[j][nblk - 1] */
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < st->nblk; i++)
                pr[j][i] = st->bd[i] * da[j][i];
    }
    for (int i = 0; i < st->nblk; i++) {
        __m256i w = _mm256_load_si256((const __m256i *)(st->codes + 32 * i));
        __m256i aw = _mm256_sign_epi8(w, w);
        c0 = block0(w, aw, pr[0] + i, a[0] + i, c0);
        c1 = block0(w, aw, pr[1] + i, a[1] + i, c1);
        c2 = block0(w, aw, pr[2] + i, a[2] + i, c2);
        c3 = block0(w, aw, pr[3] + i, a[3] + i, c3);
    }
    acc[0] = c0;
    acc[1] = c1;
    acc[2] = c2;
    acc[3] = c3;
}

/* The register tile (prefill): TILE_R weight rows x JT activation rows,
 * each activation block loaded once for the TILE_R weight rows and each
 * weight block once for the JT activation rows, the accumulators in
 * registers across TILE_B blocks. Per (weight row, activation row) pair
 * the same block0 calls in the same block order as dot0x4, into the
 * pair's own accumulator, so bitwise dot0x4's (and dot0's) result.
 * 4 x 2: eight accumulators, the weight and activation codes and the
 * pair temporaries fit the 16 ymm registers (4 x 3 spilled four
 * accumulators and measured slower, 2 x 4 the same). 64 blocks staged per
 * pass (a 2048-wide row at once; 8-32 measured 1-3% slower); staging |w|
 * too, instead of one vpsignb per weight block and tile, gained 1%: not
 * kept. Kernel lab figures: docs/PERF.md, "CPU engine". */
enum { TILE_R = 4, TILE_J = 2, TILE_B = 64 };

/* TILE_R weight rows' blocks [b0, b0 + nblk), nblk <= TILE_B: signed codes
 * and float scales (as stage_q8_0 / stage_q4_0). */
struct tile_stage {
    _Alignas(32) uint8_t codes[TILE_R][TILE_B * 32];
    _Alignas(32) float bd[TILE_R][TILE_B];
    int nblk;
};

/* JT (a constant at each call, the loops unroll) activation rows a[j]
 * (blocks from the stage's first), da[j] their float scales. */
static inline __attribute__((always_inline)) void dot0_tile(const struct tile_stage *ts, const sl_block_q8_0 *const a[],
                                                            const float *const da[], int JT,
                                                            __m256 acc[TILE_R][GROUP], int j0)
{
    __m256 c[TILE_R][TILE_J];
    _Alignas(32) float pr[TILE_R][TILE_J][TILE_B];
    int nblk = ts->nblk;
#pragma GCC unroll 4
    for (int r = 0; r < TILE_R; r++) {
#pragma GCC unroll 4
        for (int j = 0; j < JT; j++) {
            c[r][j] = acc[r][j0 + j];
            sl_avx2_scale_products(ts->bd[r], da[j], nblk, pr[r][j]);
        }
    }
    for (int i = 0; i < nblk; i++) {
#pragma GCC unroll 4
        for (int r = 0; r < TILE_R; r++) {
            __m256i w = _mm256_load_si256((const __m256i *)(ts->codes[r] + 32 * i));
            __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
            for (int j = 0; j < JT; j++)
                c[r][j] = block0(w, aw, pr[r][j] + i, a[j] + i, c[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < TILE_R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < JT; j++)
            acc[r][j0 + j] = c[r][j];
}

/* ======================================================================
 * Rows
 * ====================================================================== */

/* mt (<= GROUP) activation rows through a Q8_0/Q4_0 weight row. */
static inline __attribute__((always_inline)) void rows0(bool q4, const void *w_row, const char *xa, size_t ldxa,
                                                        int mt, float *out, int64_t n)
{
    struct qstaged st;
    __m256 acc[GROUP];
    for (int j = 0; j < mt; j++)
        acc[j] = _mm256_setzero_ps();
    int64_t nb = n / 32;
    size_t bb = q4 ? sizeof(sl_block_q4_0) : sizeof(sl_block_q8_0);
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        int nblk = (int)(nb - b0 < 8 ? nb - b0 : 8);
        sl_avx2_prefetch_weights((const char *)w_row + b0 * bb, (int)(nblk * bb));
        if (q4)
            stage_q4_0((const sl_block_q4_0 *)w_row + b0, nblk, &st);
        else
            stage_q8_0((const sl_block_q8_0 *)w_row + b0, nblk, &st);
        int j = 0;
        for (; j + 4 <= mt; j += 4) {
            const sl_block_q8_0 *a4[4];
            const float *d4[4];
            for (int i = 0; i < 4; i++) {
                a4[i] = (const sl_block_q8_0 *)(xa + (size_t)(j + i) * ldxa) + b0;
                d4[i] = sl_act_q8_0_scales(xa + (size_t)(j + i) * ldxa, n) + b0;
            }
            dot0x4(&st, a4, d4, acc + j);
        }
        for (; j < mt; j++)
            acc[j] = dot0(&st, (const sl_block_q8_0 *)(xa + (size_t)j * ldxa) + b0, acc[j]);
    }
    for (int j = 0; j < mt; j++)
        out[j] = sl_avx2_hsum_ps(acc[j]);
}

/* rows0 for TILE_R weight rows (row_bytes apart) at once: out[r * mt + j].
 * Activation rows in tiles of TILE_J, the last mt % TILE_J one at a time
 * (the same per-pair steps). */
static void rows0_tile(bool q4, const char *w, size_t row_bytes, const char *xa, size_t ldxa, int mt, float *out,
                       int64_t n)
{
    struct tile_stage ts;
    __m256 acc[TILE_R][GROUP];
    for (int r = 0; r < TILE_R; r++)
        for (int j = 0; j < mt; j++)
            acc[r][j] = _mm256_setzero_ps();
    int64_t nb = n / 32;
    size_t bb = q4 ? sizeof(sl_block_q4_0) : sizeof(sl_block_q8_0);
    for (int64_t b0 = 0; b0 < nb; b0 += TILE_B) {
        int nblk = (int)(nb - b0 < TILE_B ? nb - b0 : TILE_B);
        ts.nblk = nblk;
        for (int r = 0; r < TILE_R; r++) {
            const char *row = w + (size_t)r * row_bytes;
            sl_avx2_prefetch_weights(row + b0 * bb, (int)(nblk * bb));
            for (int i = 0; i < nblk; i++) {
                if (q4) {
                    const sl_block_q4_0 *b = (const sl_block_q4_0 *)row + b0 + i;
                    __m128i lo, hi;
                    sl_avx2_q4_0_codes(b->qs, &lo, &hi);
                    _mm_store_si128((__m128i *)(ts.codes[r] + 32 * i), lo);
                    _mm_store_si128((__m128i *)(ts.codes[r] + 32 * i + 16), hi);
                    ts.bd[r][i] = _cvtsh_ss(b->d);
                } else {
                    const sl_block_q8_0 *b = (const sl_block_q8_0 *)row + b0 + i;
                    _mm256_store_si256((__m256i *)(ts.codes[r] + 32 * i), _mm256_loadu_si256((const __m256i *)b->qs));
                    ts.bd[r][i] = _cvtsh_ss(b->d);
                }
            }
        }
        const sl_block_q8_0 *aj[TILE_J];
        const float *dj[TILE_J];
        int j = 0;
        for (; j + TILE_J <= mt; j += TILE_J) {
            for (int i = 0; i < TILE_J; i++) {
                aj[i] = (const sl_block_q8_0 *)(xa + (size_t)(j + i) * ldxa) + b0;
                dj[i] = sl_act_q8_0_scales(xa + (size_t)(j + i) * ldxa, n) + b0;
            }
            dot0_tile(&ts, aj, dj, TILE_J, acc, j);
        }
        for (; j < mt; j++) {
            aj[0] = (const sl_block_q8_0 *)(xa + (size_t)j * ldxa) + b0;
            dj[0] = sl_act_q8_0_scales(xa + (size_t)j * ldxa, n) + b0;
            dot0_tile(&ts, aj, dj, 1, acc, j);
        }
    }
    for (int r = 0; r < TILE_R; r++)
        for (int j = 0; j < mt; j++)
            out[r * mt + j] = sl_avx2_hsum_ps(acc[r][j]);
}

/* mt (<= GROUP) activation rows through a K-quant weight row; kind is a
 * constant at each call, so its branches vanish. */
static inline __attribute__((always_inline)) void rowsk(int kind, const void *w_row, const char *xa, size_t ldxa,
                                                        int mt, float *out, int64_t n)
{
    struct qstaged st;
    struct racc acc[GROUP];
    for (int j = 0; j < mt; j++)
        acc[j] = (struct racc){_mm256_setzero_ps()};
    int bb = kind == 4 ? (int)sizeof(sl_block_q4_K) : kind == 5 ? (int)sizeof(sl_block_q5_K) : (int)sizeof(sl_block_q6_K);
    for (int64_t c = 0; c < n / CHUNK; c++) {
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
        int j = 0;
        for (; j + 4 <= mt; j += 4) {
            const sl_block_q8_K *a4[4];
            for (int i = 0; i < 4; i++)
                a4[i] = (const sl_block_q8_K *)(xa + (size_t)(j + i) * ldxa) + c;
            kdot4(&st, a4, kind, acc + j);
        }
        for (; j < mt; j++)
            acc[j] = kdot(&st, (const sl_block_q8_K *)(xa + (size_t)j * ldxa) + c, kind, acc[j]);
    }
    for (int j = 0; j < mt; j++)
        out[j] = sl_avx2_hsum_ps(acc[j].acc);
}

/* rowsk for TILE_R weight rows at once: out[r * mt + j]. Pairs of
 * activation rows share each staged code and scale load of the four
 * weight rows, and each activation load serves the four; per pair the
 * integer sums are kdot4's (exact in any order) and the float part is
 * ktail, so each result is bitwise kdot4's. The last mt % 2 rows: kdot.
 * Kernel lab (one 2048 x 2048 matrix, 64 tokens): Q4_K +8%, Q6_K +7%,
 * Q5_K +1-4% over rowsk one weight row at a time (where an earlier
 * two-weight-row loop without the register tile measured slower). */
static inline __attribute__((always_inline)) void rowsk_tile(int kind, const char *w, size_t row_bytes, const char *xa,
                                                             size_t ldxa, int mt, float *out, int64_t n)
{
    struct qstaged st[TILE_R];
    struct racc acc[TILE_R][GROUP];
    for (int r = 0; r < TILE_R; r++)
        for (int j = 0; j < mt; j++)
            acc[r][j] = (struct racc){_mm256_setzero_ps()};
    int bb = kind == 4 ? (int)sizeof(sl_block_q4_K) : kind == 5 ? (int)sizeof(sl_block_q5_K) : (int)sizeof(sl_block_q6_K);
    for (int64_t c = 0; c < n / CHUNK; c++) {
        for (int r = 0; r < TILE_R; r++) {
            const char *row = w + (size_t)r * row_bytes;
            sl_avx2_prefetch_weights(row + c * bb, bb);
            if (kind == 4) {
                const sl_block_q4_K *b = (const sl_block_q4_K *)row + c;
                stage_k4(b->d, b->dmin, b->scales, b->qs, NULL, &st[r]);
            } else if (kind == 5) {
                const sl_block_q5_K *b = (const sl_block_q5_K *)row + c;
                stage_k4(b->d, b->dmin, b->scales, b->qs, b->qh, &st[r]);
            } else {
                stage_q6_K((const sl_block_q6_K *)row + c, &st[r]);
            }
        }
        int j = 0;
        for (; j + 2 <= mt; j += 2) {
            const sl_block_q8_K *a0 = (const sl_block_q8_K *)(xa + (size_t)j * ldxa) + c;
            const sl_block_q8_K *a1 = (const sl_block_q8_K *)(xa + (size_t)(j + 1) * ldxa) + c;
            __m256i s[TILE_R][2];
            for (int r = 0; r < TILE_R; r++)
                s[r][0] = s[r][1] = _mm256_setzero_si256();
            /* two groups per iteration: 2-4% faster than kdot4's rolled
             * loop here (eight integer accumulators, no spills) */
#pragma GCC unroll 2
            for (int k = 0; k < 8; k++) {
                __m256i x0 = _mm256_loadu_si256((const __m256i *)(a0->qs + 32 * k));
                __m256i x1 = _mm256_loadu_si256((const __m256i *)(a1->qs + 32 * k));
#pragma GCC unroll 4
                for (int r = 0; r < TILE_R; r++) {
                    __m256i cd = _mm256_load_si256((const __m256i *)(st[r].codes + 32 * k));
                    __m256i sc = _mm256_load_si256((const __m256i *)st[r].scv[k]);
                    s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(cd, x0), sc));
                    s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(cd, x1), sc));
                }
            }
            for (int r = 0; r < TILE_R; r++) {
                acc[r][j] = ktail(&st[r], a0, kind, s[r][0], acc[r][j]);
                acc[r][j + 1] = ktail(&st[r], a1, kind, s[r][1], acc[r][j + 1]);
            }
        }
        for (; j < mt; j++)
            for (int r = 0; r < TILE_R; r++)
                acc[r][j] = kdot(&st[r], (const sl_block_q8_K *)(xa + (size_t)j * ldxa) + c, kind, acc[r][j]);
    }
    for (int r = 0; r < TILE_R; r++)
        for (int j = 0; j < mt; j++)
            out[r * mt + j] = sl_avx2_hsum_ps(acc[r][j].acc);
}

/* Inlined twice: mt = 1 (decode: accumulators stay in registers) and generic. */
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
    case SL_GGML_TYPE_IQ4_NL: case SL_GGML_TYPE_MXFP4: sl_vec_dot_legacy_q8_avx2(type, w_row, xa, ldxa, mt, out, n); break;
    case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_IQ2_XXS: case SL_GGML_TYPE_IQ2_XS: case SL_GGML_TYPE_IQ2_S:
    case SL_GGML_TYPE_IQ3_XXS: case SL_GGML_TYPE_IQ3_S: case SL_GGML_TYPE_IQ1_S: case SL_GGML_TYPE_IQ1_M:
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0:
        sl_vec_dot_klow_q8_avx2(type, w_row, xa, ldxa, mt, out, n); break;
    default: assert(!"vec_dot_q8_avx2: unsupported type");
    }
}

void sl_vec_dot_q8_multi_avx2(uint32_t type, const void *w_row, const void *xa, size_t ldxa, int m,
                              float *out, int64_t n)
{
    assert(sl_act_format_of_type(type) == SL_ACT_Q8_0 || sl_act_format_of_type(type) == SL_ACT_Q8_1 ||
           sl_act_format_of_type(type) == SL_ACT_Q8_K);
    assert(n % sl_ggml_block_elems(type) == 0);
    if (m == 1) {
        dot_group(type, w_row, xa, ldxa, 1, out, n);
        return;
    }
    for (int j0 = 0; j0 < m; j0 += GROUP)
        dot_group(type, w_row, (const char *)xa + (size_t)j0 * ldxa, ldxa, m - j0 < GROUP ? m - j0 : GROUP,
                  out + j0, n);
}

/* Q8_0/Q4_0 and the K-quants (Q4_K, Q5_K, Q6_K) in register tiles of
 * TILE_R weight rows; the rows left over, decode (m = 1), m > GROUP and
 * the other types row by row. */
void sl_vec_dot_q8_rows_avx2(uint32_t type, const void *w, size_t row_bytes, int nr, const void *xa, size_t ldxa,
                             int m, float *out, int64_t n)
{
    int r = 0;
    bool q4 = type == SL_GGML_TYPE_Q4_0;
    if ((type == SL_GGML_TYPE_Q8_0 || q4) && m >= TILE_J && m <= GROUP)
        for (; r + TILE_R <= nr; r += TILE_R)
            rows0_tile(q4, (const char *)w + (size_t)r * row_bytes, row_bytes, xa, ldxa, m, out + (size_t)r * m, n);
    int kind = type == SL_GGML_TYPE_Q4_K ? 4 : type == SL_GGML_TYPE_Q5_K ? 5 : type == SL_GGML_TYPE_Q6_K ? 6 : 0;
    if (kind && m >= 2 && m <= GROUP)
        for (; r + TILE_R <= nr; r += TILE_R) {
            const char *wr = (const char *)w + (size_t)r * row_bytes;
            float *o = out + (size_t)r * m;
            if (kind == 4)
                rowsk_tile(4, wr, row_bytes, (const char *)xa, ldxa, m, o, n);
            else if (kind == 5)
                rowsk_tile(5, wr, row_bytes, (const char *)xa, ldxa, m, o, n);
            else
                rowsk_tile(6, wr, row_bytes, (const char *)xa, ldxa, m, o, n);
        }
    for (; r < nr; r++)
        sl_vec_dot_q8_multi_avx2(type, (const char *)w + (size_t)r * row_bytes, xa, ldxa, m, out + (size_t)r * m, n);
}
