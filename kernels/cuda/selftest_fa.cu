/* kernels/cuda/selftest_fa.cu: the flash-attention kernel (attention_fa.cuh)
 * checked on the GPU machine through the exported sl_cuda_selftest_fa()
 * (tools/cudacheck --ops). Each case is one step over a random f16 paged
 * cache (layer 1 of 2, block tables in shuffled order, block sizes that do
 * and do not divide the 64-position K/V tile): a prompt chunk of sequence
 * A starting at any position (mid-block, mid-tile), a chunk of sequence B
 * and, in most cases, a decode row of sequence C, grouped as forward.cu
 * groups them. Per case, one line:
 *   - FA against a float64 reference computed from the stored (f16) K/V
 *     and q rounded to f16 as the kernel rounds it: what remains is the
 *     rounding of each weight P to f16 (2^-11 relative) and float32
 *     accumulation, bound 4e-3 relative L2 over the step's outputs;
 *   - FA against attention.cu's kernel (float q): adds q's rounding, which
 *     moves a score by up to 2^-11 * scale * sum_i |q_i k_i|; bound 2e-2;
 *   - invariance: the same rows computed again as other steps (A in chunks
 *     of 29 rows, its first rows one by one, B and C alone) give the same
 *     bits row for row.
 * Exercised: head_dim 64/128/256, GQA 1, 2, 3, 4, 8, windows, soft caps,
 * contexts of 1, 63, 64, 65, 1000 and 5000 positions. After the total, when
 * every case passed, one timing line (not a check): a 512-row chunk at the
 * end of a 16K context, FA against the split kernel (SLUICE_CUDA_FA_TIMING=0
 * skips it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention_fa.cuh"
#include "kernels/cuda/selftest_kv.cuh"

typedef struct {
    int hd, nh, nkv, bs;
    float scale, softcap;
    int32_t window;
    int32_t a_ctx, a_start;   /* sequence A: rows for positions [a_start, a_ctx) */
    int32_t b_ctx, b_start;   /* sequence B likewise */
    int32_t c_ctx;            /* > 0: one decode row of sequence C at position c_ctx - 1 */
} fa_case;

enum { N_LAYER = 2, LAYER = 1, CHUNK = 29, ONE_BY_ONE = 5 };

static float fa_uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) - 0.5f;
}

static double fa_rel_l2(const float *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The step under test and the device buffers it runs in. */
typedef struct {
    const fa_case *c;
    int32_t T, nb;                 /* rows, cache blocks */
    int32_t *pos, *tab, *blocks;   /* host: (T), (T), the three tables concatenated */
    int32_t n_tab;
    uint8_t *dkv;
    float *dq, *dout, *dpart;
    int32_t *dmeta;
    int64_t part_n;
} fa_step;

/* Row index of (layer, K/V, position p, kv head h) for a table at blocks[tab0]. */
static int64_t fa_row(const fa_step *s, int isv, int32_t tab0, int32_t p, int h)
{
    const fa_case *c = s->c;
    int64_t blk = s->blocks[tab0 + p / c->bs];
    return (((int64_t)LAYER * 2 + isv) * s->nb + blk) * c->nkv * c->bs + (int64_t)h * c->bs + p % c->bs;
}

/* float64 attention of row t, head h, with q rounded to f16 (q16) or not */
static void fa_reference(const fa_step *s, const float *kv, const float *q, int t, int h, int q16, double *out,
                         double *sc)
{
    const fa_case *c = s->c;
    int hd = c->hd, kvh = h / (c->nh / c->nkv);
    int32_t pos = s->pos[t], lo = sl_cuda_attention_window_start(pos, c->window);
    const float *qr = q + ((int64_t)t * c->nh + h) * hd;
    double mx = -1e300, sum = 0;
    for (int32_t p = lo; p <= pos; p++) {
        const float *k = kv + fa_row(s, 0, s->tab[t], p, kvh) * hd;
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)(q16 ? __half2float(__float2half_rn(qr[i])) : qr[i]) * k[i];
        d *= c->scale;
        if (c->softcap > 0)
            d = c->softcap * tanh(d / c->softcap);
        sc[p - lo] = d;
        mx = d > mx ? d : mx;
    }
    for (int32_t p = lo; p <= pos; p++)
        sum += (sc[p - lo] = exp(sc[p - lo] - mx));
    for (int i = 0; i < hd; i++)
        out[i] = 0;
    for (int32_t p = lo; p <= pos; p++) {
        const float *v = kv + fa_row(s, 1, s->tab[t], p, kvh) * hd;
        for (int i = 0; i < hd; i++)
            out[i] += sc[p - lo] / sum * v[i];
    }
}

/* Runs FA over rows [r0, r0 + n) of the step as a step of their own (their
 * q rows, positions and tables), writing their outputs to res + r0 rows.
 * Returns 0 or -1. */
static int fa_run(fa_step *s, cudaStream_t st, const float *q, int32_t r0, int32_t n, float *res)
{
    const fa_case *c = s->c;
    int64_t row = (int64_t)c->nh * c->hd;
    int32_t *meta = (int32_t *)malloc((size_t)(2 * n + s->n_tab + 2 * n) * sizeof(int32_t));
    if (!meta)
        return -1;
    int32_t *pos = meta, *tab = meta + n, *blocks = meta + 2 * n, *groups = blocks + s->n_tab;
    memcpy(pos, s->pos + r0, (size_t)n * 4);
    memcpy(tab, s->tab + r0, (size_t)n * 4);
    memcpy(blocks, s->blocks, (size_t)s->n_tab * 4);
    int64_t ng = sl_cuda_fa_groups(pos, tab, n, sl_cuda_fa_group_positions(c->nh / c->nkv), groups);
    sl_cuda_kv kv = {s->dkv, s->nb, c->bs, c->nkv, c->hd, SL_KV_TYPE_F16};
    sl_cuda_batch b = {s->dmeta, s->dmeta + n, s->dmeta + 2 * n};
    sl_cuda_attn_opts o = {c->scale, c->softcap, c->window, NULL};
    int rc = cudaMemcpy(s->dmeta, meta, (size_t)(2 * n + s->n_tab + 2 * ng) * 4, cudaMemcpyHostToDevice) ==
                     cudaSuccess &&
                 cudaMemcpy(s->dq, q + r0 * row, (size_t)(n * row) * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                 sl_cuda_attention_fa(s->dout, s->dq, n, c->nh, &kv, &b, s->dmeta + 2 * n + s->n_tab, ng, LAYER,
                                      &o, st) == SL_OK &&
                 cudaMemcpyAsync(res + r0 * row, s->dout, (size_t)(n * row) * 4, cudaMemcpyDeviceToHost, st) ==
                     cudaSuccess &&
                 cudaStreamSynchronize(st) == cudaSuccess
             ? 0
             : -1;
    free(meta);
    return rc;
}

/* attention.cu's kernel over the whole step, the same metadata layout;
 * with row >= 0, over that row alone through a row map
 * (sl_cuda_attention_layer_rows, as forward.cu sends a flash-attention
 * step's decode rows), the others' outputs left as they were */
static int fa_run_split(fa_step *s, cudaStream_t st, const float *q, float *res, int32_t row_only)
{
    const fa_case *c = s->c;
    int32_t n = s->T;
    int64_t row = (int64_t)c->nh * c->hd;
    int32_t *meta = (int32_t *)malloc((size_t)(2 * n + s->n_tab + 1) * sizeof(int32_t));
    if (!meta)
        return -1;
    memcpy(meta, s->pos, (size_t)n * 4);
    memcpy(meta + n, s->tab, (size_t)n * 4);
    memcpy(meta + 2 * n, s->blocks, (size_t)s->n_tab * 4);
    meta[2 * n + s->n_tab] = row_only;
    int32_t ctx = 0;
    for (int32_t t = 0; t < n; t++)
        ctx = s->pos[t] + 1 > ctx ? s->pos[t] + 1 : ctx;
    sl_cuda_kv kv = {s->dkv, s->nb, c->bs, c->nkv, c->hd, SL_KV_TYPE_F16};
    sl_cuda_batch b = {s->dmeta, s->dmeta + n, s->dmeta + 2 * n};
    sl_cuda_attn_opts o = {c->scale, c->softcap, c->window, NULL};
    const int32_t *rows = row_only >= 0 ? s->dmeta + 2 * n + s->n_tab : NULL;
    int rc = cudaMemcpy(s->dmeta, meta, (size_t)(2 * n + s->n_tab + 1) * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemcpy(s->dq, q, (size_t)(n * row) * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemcpy(s->dout, res, (size_t)(n * row) * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                 sl_cuda_attention_layer_rows(s->dout, s->dq, n, rows, rows ? 1 : n, c->nh, &kv, &b, LAYER, ctx, &o,
                                              s->dpart, s->part_n, st) == SL_OK &&
                 cudaMemcpyAsync(res, s->dout, (size_t)(n * row) * 4, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
                 cudaStreamSynchronize(st) == cudaSuccess
             ? 0
             : -1;
    free(meta);
    return rc;
}

static int fa_check(FILE *out, cudaStream_t st, const fa_case *c)
{
    fa_step s;
    memset(&s, 0, sizeof s);
    s.c = c;
    int32_t na = c->a_ctx - c->a_start, nbr = c->b_ctx - c->b_start, nc = c->c_ctx > 0 ? 1 : 0;
    s.T = na + nbr + nc;
    int32_t ba = (c->a_ctx + c->bs - 1) / c->bs, bb = (c->b_ctx + c->bs - 1) / c->bs;
    int32_t bc = nc ? (c->c_ctx + c->bs - 1) / c->bs : 0;
    s.nb = s.n_tab = ba + bb + bc;
    int64_t row = (int64_t)c->nh * c->hd, qn = (int64_t)s.T * row;
    int64_t kv_rows = (int64_t)N_LAYER * 2 * s.nb * c->nkv * c->bs;
    size_t kv_bytes = (size_t)(kv_rows * sl_kv_row_bytes(SL_KV_TYPE_F16, c->hd));
    int32_t max_ctx = c->a_ctx > c->b_ctx ? c->a_ctx : c->b_ctx;
    max_ctx = c->c_ctx > max_ctx ? c->c_ctx : max_ctx;
    s.part_n = sl_cuda_attention_scratch_floats(s.T, c->nh, c->hd, max_ctx);
    float *kv = (float *)malloc((size_t)(kv_rows * c->hd) * 4), *q = (float *)malloc((size_t)qn * 4);
    float *res = (float *)malloc((size_t)qn * 4), *res2 = (float *)malloc((size_t)qn * 4);
    float *res_split = (float *)malloc((size_t)qn * 4);
    double *ref = (double *)malloc((size_t)qn * sizeof(double)), *ref16 = (double *)malloc((size_t)qn * sizeof(double));
    double *sc = (double *)malloc((size_t)max_ctx * sizeof(double));
    uint8_t *kvb = (uint8_t *)malloc(kv_bytes);
    s.pos = (int32_t *)malloc((size_t)s.T * 4);
    s.tab = (int32_t *)malloc((size_t)s.T * 4);
    s.blocks = (int32_t *)malloc((size_t)s.n_tab * 4);
    int bad = 1;
    char what[160];
    snprintf(what, sizeof what, "head_dim %d, %d/%d heads, block %d, window %d, cap %g; A [%d,%d) B [%d,%d) C %d",
             c->hd, c->nh, c->nkv, c->bs, c->window, c->softcap, c->a_start, c->a_ctx, c->b_start, c->b_ctx,
             c->c_ctx);
    if (!kv || !q || !res || !res2 || !res_split || !ref || !ref16 || !sc || !kvb || !s.pos || !s.tab || !s.blocks ||
        cudaMalloc((void **)&s.dkv, kv_bytes) != cudaSuccess ||
        cudaMalloc((void **)&s.dq, (size_t)qn * 4) != cudaSuccess ||
        cudaMalloc((void **)&s.dout, (size_t)qn * 4) != cudaSuccess ||
        cudaMalloc((void **)&s.dmeta, (size_t)(4 * s.T + s.n_tab + 1) * 4) != cudaSuccess ||
        (s.part_n > 0 && cudaMalloc((void **)&s.dpart, (size_t)s.part_n * 4) != cudaSuccess)) {
        fprintf(out, "  flash attention %s: could not allocate  FAIL\n", what);
        goto done;
    }
    {
        uint64_t seed = 11u + (uint64_t)c->hd * 7 + (uint64_t)c->a_ctx;
        for (int64_t i = 0; i < kv_rows * c->hd; i++)
            kv[i] = fa_uniform(&seed);
        if (st_kv_store(SL_KV_TYPE_F16, kv, kv_rows, c->hd, kvb) < 0) {
            fprintf(out, "  flash attention %s: f16 K/V refused  FAIL\n", what);
            goto done;
        }
        for (int64_t i = 0; i < qn; i++)
            q[i] = fa_uniform(&seed) * 8;   /* peaked scores: masks, windows and caps all matter */
        /* physical blocks in a shuffled order (a stride coprime to the count) */
        int32_t stride = 7;
        for (;;) {   /* the first odd stride from 7 coprime to the count */
            int32_t x = s.nb, y = stride;
            while (y) {
                int32_t r = x % y;
                x = y;
                y = r;
            }
            if (x == 1)
                break;
            stride += 2;
        }
        for (int32_t i = 0; i < s.nb; i++)
            s.blocks[i] = (int32_t)(((int64_t)i * stride + 3) % s.nb);
        int32_t t = 0;
        for (int32_t p = c->a_start; p < c->a_ctx; p++, t++) {
            s.pos[t] = p;
            s.tab[t] = 0;
        }
        for (int32_t p = c->b_start; p < c->b_ctx; p++, t++) {
            s.pos[t] = p;
            s.tab[t] = ba;
        }
        if (nc) {
            s.pos[t] = c->c_ctx - 1;
            s.tab[t] = ba + bb;
        }
        for (t = 0; t < s.T; t++)
            for (int h = 0; h < c->nh; h++) {
                fa_reference(&s, kv, q, t, h, 1, ref16 + ((int64_t)t * c->nh + h) * c->hd, sc);
                fa_reference(&s, kv, q, t, h, 0, ref + ((int64_t)t * c->nh + h) * c->hd, sc);
            }
        if (cudaMemcpy(s.dkv, kvb, kv_bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(out, "  flash attention %s: upload failed  FAIL\n", what);
            goto done;
        }
        /* the whole step, then the same rows as other steps */
        int rc = fa_run(&s, st, q, 0, s.T, res);
        memset(res_split, 0, (size_t)qn * 4);
        rc = rc < 0 ? rc : fa_run_split(&s, st, q, res_split, -1);
        /* the decode row through a row map: its split-kernel bits, the other rows untouched */
        int mapped = 1;
        if (rc == 0 && nc) {
            memcpy(res2, res_split, (size_t)qn * 4);
            for (int64_t i = (int64_t)(s.T - 1) * row; i < qn; i++)
                res2[i] = 0.0f;
            rc = fa_run_split(&s, st, q, res2, s.T - 1);
            mapped = rc == 0 && memcmp(res2, res_split, (size_t)qn * 4) == 0;
        }
        for (int32_t r0 = 0; rc == 0 && r0 < na; r0 += CHUNK)
            rc = fa_run(&s, st, q, r0, na - r0 < CHUNK ? na - r0 : CHUNK, res2);
        if (rc == 0 && nbr > 0)
            rc = fa_run(&s, st, q, na, nbr, res2);
        if (rc == 0 && nc)
            rc = fa_run(&s, st, q, na + nbr, 1, res2);
        int same = rc == 0 && memcmp(res, res2, (size_t)qn * 4) == 0;
        for (int32_t r = 0; rc == 0 && r < na && r < ONE_BY_ONE; r++)
            rc = fa_run(&s, st, q, r, 1, res2);
        same = same && rc == 0 && memcmp(res, res2, (size_t)qn * 4) == 0;
        if (rc < 0) {
            cudaGetLastError();
            fprintf(out, "  flash attention %s: launch or copy failed  FAIL\n", what);
            goto done;
        }
        double e16 = fa_rel_l2(res, ref16, qn), e = fa_rel_l2(res, ref, qn);
        double es = 0, den = 0;
        for (int64_t i = 0; i < qn; i++) {
            es += ((double)res[i] - res_split[i]) * ((double)res[i] - res_split[i]);
            den += (double)res_split[i] * res_split[i];
        }
        es = den > 0 ? sqrt(es / den) : sqrt(es);
        double esr = fa_rel_l2(res_split, ref, qn);
        bad = !(e16 < 4e-3) || !(es < 2e-2) || !(esr < 1e-5) || !same || !mapped;
        fprintf(out, "  flash attention %s, %d rows: vs float64 (q f16) %.2e (bound 4e-3), vs float64 %.2e, vs split "
                "kernel %.2e (bound 2e-2; split kernel vs float64 %.2e), other chunkings %s%s  %s\n",
                what, s.T, e16, e, es, esr, same ? "bitwise identical" : "DIFFER",
                !nc ? "" : mapped ? ", decode row by row map identical" : ", decode row by row map DIFFERS",
                bad ? "FAIL" : "PASS");
    }
done:
    cudaFree(s.dkv);
    cudaFree(s.dq);
    cudaFree(s.dout);
    cudaFree(s.dpart);
    cudaFree(s.dmeta);
    free(kv);
    free(q);
    free(res);
    free(res2);
    free(res_split);
    free(ref);
    free(ref16);
    free(sc);
    free(kvb);
    free(s.pos);
    free(s.tab);
    free(s.blocks);
    return bad;
}

/* The host's grouping rule on a step of two chunks and a decode row. */
static int fa_check_groups(FILE *out)
{
    const int32_t pos[] = {5, 6, 7, 8, 9, 16, 17, 0, 1, 2, 3, 40};
    const int32_t tab[] = {0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 20};
    const int32_t want[] = {0, 3, 3, 5, 5, 7, 7, 11, 11, 12};   /* qp 8: 5..7 | 8,9 | 16,17 | 0..3 | 40 */
    int32_t got[24];
    int64_t n = sl_cuda_fa_groups(pos, tab, 12, 8, got);
    int bad = n != 5 || memcmp(got, want, sizeof want) != 0;
    fprintf(out, "  flash attention grouping: %lld groups  %s\n", (long long)n, bad ? "FAIL" : "PASS");
    return bad;
}

/* Not a check: the time of one prompt chunk's attention at the end of a
 * long context, FA against the split kernel, a first look at the kernel's
 * speed wherever the self-test runs (an 8B shape: 32 query heads, 8 kv heads, head_dim
 * 128, blocks of 16 positions; 512 rows at positions 15,872..16,383).
 * Prints one line; returns 0, or -1 when it could not run (not counted). */
static int fa_timing(FILE *out, cudaStream_t st)
{
    enum { NH = 32, NKV = 8, HD = 128, BS = 16, CTX = 16384, ROWS = 512, REPS = 5 };
    const int32_t nb = CTX / BS;
    size_t kv_bytes = (size_t)2 * nb * NKV * BS * HD * 2;   /* one layer, K and V, f16 */
    int64_t qn = (int64_t)ROWS * NH * HD, part_n = sl_cuda_attention_scratch_floats(ROWS, NH, HD, CTX);
    int32_t *meta = (int32_t *)malloc((size_t)(2 * ROWS + nb + 2 * ROWS) * 4);
    __half *kvh = (__half *)malloc(kv_bytes);
    float *q = (float *)malloc((size_t)qn * 4);
    uint8_t *dkv = NULL;
    float *dq = NULL, *dout = NULL, *dpart = NULL;
    int32_t *dmeta = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1;
    if (!meta || !kvh || !q || cudaMalloc((void **)&dkv, kv_bytes) != cudaSuccess ||
        cudaMalloc((void **)&dq, (size_t)qn * 4) != cudaSuccess ||
        cudaMalloc((void **)&dout, (size_t)qn * 4) != cudaSuccess ||
        cudaMalloc((void **)&dpart, (size_t)part_n * 4) != cudaSuccess ||
        cudaMalloc((void **)&dmeta, (size_t)(2 * ROWS + nb + 2 * ROWS) * 4) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        goto done;
    {
        uint64_t seed = 5;
        for (size_t i = 0; i < kv_bytes / 2; i++)
            kvh[i] = __float2half_rn(fa_uniform(&seed));
        for (int64_t i = 0; i < qn; i++)
            q[i] = fa_uniform(&seed) * 8;
        int32_t *pos = meta, *tab = meta + ROWS, *blocks = meta + 2 * ROWS, *groups = blocks + nb;
        for (int32_t t = 0; t < ROWS; t++) {
            pos[t] = CTX - ROWS + t;
            tab[t] = 0;
        }
        for (int32_t i = 0; i < nb; i++)
            blocks[i] = i;
        int64_t ng = sl_cuda_fa_groups(pos, tab, ROWS, sl_cuda_fa_group_positions(NH / NKV), groups);
        if (cudaMemcpy(dkv, kvh, kv_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(dq, q, (size_t)qn * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(dmeta, meta, (size_t)(2 * ROWS + nb + 2 * ng) * 4, cudaMemcpyHostToDevice) != cudaSuccess)
            goto done;
        sl_cuda_kv kv = {dkv, nb, BS, NKV, HD, SL_KV_TYPE_F16};
        sl_cuda_batch b = {dmeta, dmeta + ROWS, dmeta + 2 * ROWS};
        sl_cuda_attn_opts o = {1.0f / sqrtf((float)HD), 0.0f, 0, NULL};
        float ms[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            for (int r = 0; r <= REPS; r++) {   /* the first run warms up */
                if (r == 1 && cudaEventRecord(e0, st) != cudaSuccess)
                    goto done;
                sl_status s = k == 0 ? sl_cuda_attention_fa(dout, dq, ROWS, NH, &kv, &b, dmeta + 2 * ROWS + nb, ng,
                                                             0, &o, st)
                                     : sl_cuda_attention_layer(dout, dq, ROWS, NH, &kv, &b, 0, CTX, &o, dpart, part_n,
                                                               st);
                if (s != SL_OK)
                    goto done;
            }
            if (cudaEventRecord(e1, st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&ms[k], e0, e1) != cudaSuccess)
                goto done;
            ms[k] /= REPS;
        }
        /* 2 matmuls of 2 flops per multiply-add, over each row's context */
        double flops = 4.0 * NH * HD * ROWS * (CTX - ROWS / 2.0);
        fprintf(out, "  flash attention timing (not a check): 8B shape, %d rows at positions %d..%d: FA %.3f ms "
                "(%.0f TFLOP/s), split kernel %.3f ms (%.0f TFLOP/s)\n", ROWS, CTX - ROWS, CTX - 1, ms[0],
                flops / (ms[0] * 1e-3) / 1e12, ms[1], flops / (ms[1] * 1e-3) / 1e12);
        rc = 0;
    }
done:
    if (rc < 0) {
        cudaGetLastError();
        fprintf(out, "  flash attention timing: could not run\n");
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(dkv);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dpart);
    cudaFree(dmeta);
    free(meta);
    free(kvh);
    free(q);
    return rc;
}

/* Runs every case, one line each to `out`, then a total. Returns the
 * number that failed, or -1 when there is no usable device. */
extern "C" __attribute__((visibility("default"))) int sl_cuda_selftest_fa(FILE *out)
{
    int n_dev = 0;
    cudaStream_t st;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreate(&st) != cudaSuccess)
        return -1;
    const float r128 = 1.0f / sqrtf(128.0f), r64 = 0.125f;
    static const fa_case cases[] = {
        /* hd  nh nkv  bs  scale  cap  win   A ctx, start   B ctx, start   C */
        {128, 32, 8, 16, r128, 0.0f, 0, 65, 0, 64, 0, 1000},        /* 8B shape: 64/65 positions, a decode row */
        {128, 8, 1, 40, r128, 0.0f, 0, 1000, 123, 63, 0, 1},        /* GQA 8, mid-block chunk, a context of 1 */
        {64, 4, 4, 48, r64, 0.0f, 0, 5000, 4795, 1, 0, 300},        /* GQA 1, 5,000 positions */
        {256, 4, 2, 16, 0.0625f, 50.0f, 0, 1000, 900, 65, 20, 0},   /* gemma2-like soft cap */
        {256, 8, 2, 24, 0.0625f, 0.0f, 40, 2100, 1990, 100, 0, 500},   /* gemma3-like window */
        {128, 8, 2, 16, 0.1f, 30.0f, 1500, 5000, 4900, 1600, 1490, 3000},   /* window past a tile, capped */
        {64, 16, 2, 24, r64, 0.0f, 100, 1000, 0, 70, 10, 2},        /* GQA 8 at 64, a whole prompt windowed */
        {128, 2, 2, 16, r128, 0.0f, 0, 64, 63, 129, 64, 0},         /* one-row chunk at a tile edge */
        {128, 6, 2, 40, r128, 0.0f, 0, 500, 17, 90, 45, 64},        /* GQA 3: 21 positions per group */
    };
    int bad = 0, n = (int)(sizeof cases / sizeof cases[0]);
    bad += fa_check_groups(out);
    for (int i = 0; i < n; i++)
        bad += fa_check(out, st, &cases[i]);
    fprintf(out, "flash attention: %d of %d checks passed  %s\n", n + 1 - bad, n + 1, bad ? "FAIL" : "PASS");
    /* no timing under a sanitizer, where it means nothing and takes minutes:
     * tools/gpu-check.sh sets SLUICE_CUDA_FA_TIMING=0 there; an injected
     * tool (CUDA_INJECTION64_PATH, how Nsight tools attach) skips it too */
    const char *tm = getenv("SLUICE_CUDA_FA_TIMING");
    if (bad == 0 && !(tm && !strcmp(tm, "0")) && !getenv("CUDA_INJECTION64_PATH"))
        fa_timing(out, st);
    cudaStreamDestroy(st);
    return bad;
}
