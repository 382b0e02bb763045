/* tools/cudacheck/sampling.c: the device sampler (kernels/cuda/sample.cu)
 * against the reference sampler (kernels/cpu/sampler.c) on the same rows.
 *
 * Rows: a small (1,000) and a Llama-3 (128,256) vocabulary, each with four
 * shapes: flat, one peaked token, coarse values full of ties, and a row with
 * -inf and NaN entries. Cases: greedy, temperature, top-k, top-p, min-p and
 * their mixes, a tiny temperature, penalties over a history, logit bias with
 * duplicates and a ban, held-back tokens, logprobs. Each case is drawn
 * --draws times (draw_index 0..N-1) in one launch, every row its own copy.
 * Passes when:
 *   - greedy picks the same token always;
 *   - sampled tokens agree but for at most one draw per case (the samplers
 *     add in different orders, so a draw whose uniform lands within
 *     rounding of a boundary may go either way; expected ~1e-7 per draw);
 *   - logprob records agree: same ids, values within 1e-5;
 *   - a row drawn alone gives the token it got in a batch;
 *   - with allow bitmaps (grammar masks) on two rows of three, mixed with
 *     unmasked rows in one launch (greedy, seeded, top-k, top-p with
 *     logprobs, a +100 bias on a masked-out token; masks of many tokens, of
 *     three, and of none): no masked row draws a token outside its mask, a
 *     row with nothing allowed draws -1, and tokens and records agree with
 *     the reference as above.
 * It also prints the kernel's time for 1, 64 and 256 rows of 128,256 at the
 * default parameters (temperature 1). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sampler.h"
#include "kernels/backend.h"
#include "tools/cudacheck/cudacheck.h"

typedef int (*sample_rows_fn)(const float *logits, int32_t n_rows, int32_t n_vocab, const sl_sample_req *reqs,
                              int32_t *tokens, double *kernel_ms);

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double gauss(uint64_t *s)
{
    double u = ((double)(rng_next(s) >> 11) + 0.5) * 0x1.0p-53, v = (double)(rng_next(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

enum { SHAPE_FLAT, SHAPE_PEAKED, SHAPE_TIES, SHAPE_SPECIAL, SHAPES };
static const char *const shape_name[SHAPES] = {"flat", "peaked", "ties", "-inf/NaN"};

static void make_row(float *row, int32_t V, int shape, uint64_t seed)
{
    uint64_t s = seed;
    for (int32_t i = 0; i < V; i++) {
        double g = gauss(&s);
        switch (shape) {
        case SHAPE_FLAT: row[i] = (float)g; break;
        case SHAPE_PEAKED: row[i] = (float)(2.0 * g); break;
        case SHAPE_TIES: row[i] = (float)(round(4.0 * g) * 0.5); break;
        default: {
            uint64_t r = rng_next(&s) % 1000;
            row[i] = r < 10 ? -INFINITY : r < 12 ? NAN : (float)(3.0 * g);
        }
        }
    }
    if (shape == SHAPE_PEAKED)
        row[V / 3] += 15.0f;
}

typedef struct {
    const char *name;
    sl_sampling_params p;
    int history, ban;    /* pass a history / ban two tokens */
} sample_case;

#define N_CASES 14

static int make_cases(sample_case *c, int32_t V)
{
    int n = 0;
    for (int i = 0; i < N_CASES; i++) {
        sl_sampling_params_default(&c[i].p);
        c[i].p.seed = 1234 + (uint64_t)i;
        c[i].history = c[i].ban = 0;
    }
    c[n].name = "greedy";
    c[n++].p.temperature = 0.0f;
    c[n].name = "greedy+logprobs 5";
    c[n].p.temperature = 0.0f;
    c[n++].p.n_logprobs = 5;
    c[n++].name = "temperature 1";
    c[n].name = "temperature 0.7, top-k 40";
    c[n].p.temperature = 0.7f;
    c[n++].p.top_k = 40;
    c[n].name = "top-p 0.9";
    c[n++].p.top_p = 0.9f;
    c[n].name = "top-p 0.5, min-p 0.05";
    c[n].p.top_p = 0.5f;
    c[n++].p.min_p = 0.05f;
    c[n].name = "top-k 1000, top-p 0.95, temperature 1.3";
    c[n].p.top_k = 1000;
    c[n].p.top_p = 0.95f;
    c[n++].p.temperature = 1.3f;
    c[n].name = "min-p 0.1";
    c[n++].p.min_p = 0.1f;
    c[n].name = "temperature 0.001";
    c[n++].p.temperature = 0.001f;
    c[n].name = "penalties (rep 1.3, presence 0.5, frequency 0.2, window 64)";
    c[n].p.repetition_penalty = 1.3f;
    c[n].p.presence_penalty = 0.5f;
    c[n].p.frequency_penalty = 0.2f;
    c[n++].history = 1;
    c[n].name = "penalties, whole history, greedy";
    c[n].p.temperature = 0.0f;
    c[n].p.repetition_penalty = 1.5f;
    c[n].p.penalty_last_n = -1;
    c[n++].history = 1;
    c[n].name = "logit bias (duplicates, a ban, a boost)";
    c[n].p.n_logit_bias = 4;
    c[n].p.logit_bias[0] = (sl_logit_bias){V / 3, -100.0f};
    c[n].p.logit_bias[1] = (sl_logit_bias){7, 3.0f};
    c[n].p.logit_bias[2] = (sl_logit_bias){7, 2.5f};
    c[n++].p.logit_bias[3] = (sl_logit_bias){V - 1, 6.0f};
    c[n].name = "held-back tokens, top-k 5";
    c[n].p.top_k = 5;
    c[n++].ban = 1;
    c[n].name = "temperature 0.8, top-k 20, logprobs 3";
    c[n].p.temperature = 0.8f;
    c[n].p.top_k = 20;
    c[n++].p.n_logprobs = 3;
    return n;
}

static int records_agree(const sl_logprob_record *a, const sl_logprob_record *b)
{
    if (a->token != b->token || a->n_top != b->n_top)
        return 0;
    if (!(fabsf(a->logprob - b->logprob) <= 1e-5f || a->logprob == b->logprob))
        return 0;
    for (int i = 0; i < a->n_top; i++)
        if (a->top[i].token != b->top[i].token ||
            !(fabsf(a->top[i].logprob - b->top[i].logprob) <= 1e-5f || a->top[i].logprob == b->top[i].logprob))
            return 0;
    return 1;
}

static int bit_set(const uint32_t *a, int32_t t) { return (int)(a[t / 32] >> (t % 32) & 1u); }

/* The allow-bitmap cases (the header's last point) on vocabulary V: rows,
 * work, reqs, rec_g and tok have room for `draws` rows. Returns failures. */
static int check_masks(sample_rows_fn sample_rows, int32_t V, int draws, float *base, float *rows, float *work,
                       sl_sample_req *reqs, sl_logprob_record *rec_g, int32_t *tok, sl_sampler_scratch *scr)
{
    int32_t words = (V + 31) / 32;
    uint32_t *masks = calloc((size_t)3 * (size_t)words, sizeof *masks);
    if (!masks)
        return 1;
    uint32_t *many = masks, *three = masks + words, *none = masks + 2 * words;
    for (int32_t t = 0; t < V; t += 7)
        many[t / 32] |= 1u << (t % 32);
    many[(V - 1) / 32] |= 1u << ((V - 1) % 32);
    const int32_t three_ids[3] = {5, V / 2, V - 2};
    for (int k = 0; k < 3; k++)
        three[three_ids[k] / 32] |= 1u << (three_ids[k] % 32);
    enum { N_MCASES = 5 };
    sl_sampling_params mp[N_MCASES];
    const char *mname[N_MCASES] = {"greedy", "temperature 1", "temperature 0.7, top-k 40",
                                   "+100 bias on a masked-out token", "top-p 0.9, logprobs 3"};
    for (int i = 0; i < N_MCASES; i++) {
        sl_sampling_params_default(&mp[i]);
        mp[i].seed = 77 + (uint64_t)i;
    }
    mp[0].temperature = 0.0f;
    mp[2].temperature = 0.7f;
    mp[2].top_k = 40;
    mp[3].n_logit_bias = 1;
    mp[3].logit_bias[0] = (sl_logit_bias){1, 100.0f};   /* 1 is in no mask */
    mp[4].top_p = 0.9f;
    mp[4].n_logprobs = 3;
    const uint32_t *mask_of[3] = {many, three, none};
    const char *mask_name[3] = {"every 7th", "three", "none"};
    int fails = 0;
    make_row(base, V, SHAPE_FLAT, 41);
    for (int mi = 0; mi < 3; mi++)
        for (int ci = 0; ci < N_MCASES; ci++) {
            for (int d = 0; d < draws; d++) {
                memcpy(rows + (size_t)d * V, base, (size_t)V * sizeof *rows);
                reqs[d] = (sl_sample_req){.params = &mp[ci], .draw_index = (uint64_t)d,
                                          .allow = d % 3 ? mask_of[mi] : NULL, .record = &rec_g[d]};
            }
            double ms = 0.0;
            if (sample_rows(rows, draws, V, reqs, tok, &ms) < 0) {
                free(masks);
                return -1000;
            }
            int differ = 0, rec_bad = 0, outside = 0;
            for (int d = 0; d < draws; d++) {
                memcpy(work, base, (size_t)V * sizeof *work);
                int32_t t = -1;
                sl_logprob_record rec_c;
                int any = 1;
                if (reqs[d].allow) {
                    any = 0;
                    for (int32_t v = 0; v < V; v++) {
                        if (!bit_set(reqs[d].allow, v))
                            work[v] = -INFINITY;
                        any |= work[v] > -INFINITY;
                    }
                }
                if (any)
                    sl_sampler_sample(&mp[ci], work, V, NULL, 0, (uint64_t)d, scr, &t, &rec_c);
                if (reqs[d].allow)
                    outside += mi == 2 ? tok[d] != -1 : tok[d] < 0 || tok[d] >= V || !bit_set(reqs[d].allow, tok[d]);
                else
                    outside += tok[d] < 0 || tok[d] >= V;
                differ += tok[d] != t;
                if (mp[ci].n_logprobs >= 0 && tok[d] == t && t >= 0)
                    rec_bad += !records_agree(&rec_g[d], &rec_c);
            }
            int greedy = mp[ci].temperature == 0.0f;
            int bad = outside || rec_bad || (greedy ? differ > 0 : differ > 1);
            fails += bad;
            if (bad || differ)
                printf("  V %6d mask %-9s %-34s: %d outside, %d/%d tokens differ, %d records differ  %s\n", V,
                       mask_name[mi], mname[ci], outside, differ, draws, rec_bad, bad ? "FAIL" : "ok");
        }
    printf("  V %6d allow bitmaps: %d cases checked\n", V, 3 * N_MCASES);
    free(masks);
    return fails;
}

int cudacheck_sampling(int draws)
{
    void *h = cudacheck_load_lib();
    if (!h)
        return -1;
    sample_rows_fn sample_rows;
    *(void **)&sample_rows = dlsym(h, "sl_cuda_sample_rows");
    if (!sample_rows) {
        fprintf(stderr, "cudacheck: the library lacks sl_cuda_sample_rows\n");
        return -1;
    }
    static const int32_t vocabs[2] = {1000, 128256};
    int n_max = draws > 256 ? draws : 256;
    float *base = malloc((size_t)128256 * sizeof *base);
    float *rows = malloc((size_t)n_max * 128256 * sizeof *rows);
    float *work = malloc((size_t)128256 * sizeof *work);
    sl_sample_req *reqs = calloc((size_t)n_max, sizeof *reqs);
    sl_logprob_record *rec_g = calloc((size_t)n_max, sizeof *rec_g), rec_c;
    int32_t *tok = malloc((size_t)n_max * sizeof *tok);
    int32_t hist[300];
    sample_case cases[N_CASES];
    sl_sampler_scratch *scr = NULL;
    int fails = 0;
    if (!base || !rows || !work || !reqs || !rec_g || !tok || sl_sampler_scratch_create(128256, &scr) < 0) {
        fprintf(stderr, "cudacheck: out of memory\n");
        fails = -1;
        goto done;
    }
    printf("device sampler vs the reference sampler, %d draws per case:\n", draws);
    for (int vi = 0; vi < 2; vi++) {
        int32_t V = vocabs[vi];
        int n_cases = make_cases(cases, V);
        uint64_t hs = 99;
        for (int i = 0; i < 300; i++)
            hist[i] = (int32_t)(rng_next(&hs) % 50);   /* repeats, so counts matter */
        int32_t ban[2] = {V / 3, 11};
        for (int shape = 0; shape < SHAPES; shape++) {
            make_row(base, V, shape, 7 + (uint64_t)shape);
            for (int ci = 0; ci < n_cases; ci++) {
                const sample_case *c = &cases[ci];
                for (int d = 0; d < draws; d++) {
                    memcpy(rows + (size_t)d * V, base, (size_t)V * sizeof *rows);
                    reqs[d] = (sl_sample_req){.params = &c->p, .history = c->history ? hist : NULL,
                                              .n_history = c->history ? 300 : 0, .draw_index = (uint64_t)d,
                                              .ban = c->ban ? ban : NULL, .n_ban = c->ban ? 2 : 0,
                                              .record = &rec_g[d]};
                }
                double ms = 0.0;
                if (sample_rows(rows, draws, V, reqs, tok, &ms) < 0) {
                    fails = -1;
                    goto done;
                }
                int differ = 0, rec_bad = 0, bad_tok = 0;
                for (int d = 0; d < draws; d++) {
                    memcpy(work, base, (size_t)V * sizeof *work);
                    for (int j = 0; j < reqs[d].n_ban; j++)
                        work[ban[j]] = -INFINITY;
                    int32_t t = -1;
                    sl_sampler_sample(&c->p, work, V, reqs[d].history, reqs[d].n_history, (uint64_t)d, scr, &t,
                                      &rec_c);
                    bad_tok += tok[d] < 0 || tok[d] >= V || (c->ban && (tok[d] == ban[0] || tok[d] == ban[1]));
                    differ += tok[d] != t;
                    if (c->p.n_logprobs >= 0 && tok[d] == t)
                        rec_bad += !records_agree(&rec_g[d], &rec_c);
                }
                int greedy = c->p.temperature == 0.0f;
                int bad = bad_tok || rec_bad || (greedy ? differ > 0 : differ > 1);
                fails += bad;
                if (bad || differ)
                    printf("  V %6d %-9s %-58s: %d/%d tokens differ, %d records differ  %s\n", V, shape_name[shape],
                           c->name, differ, draws, rec_bad, bad ? "FAIL" : "ok");
            }
            printf("  V %6d %-9s %d cases checked\n", V, shape_name[shape], n_cases);
        }
    }

    for (int vi = 0; vi < 2; vi++) {
        int f = check_masks(sample_rows, vocabs[vi], draws, base, rows, work, reqs, rec_g, tok, scr);
        if (f < 0) {
            fails = -1;
            goto done;
        }
        fails += f;
    }

    /* alone == batched, and the kernel's time at the default parameters */
    {
        int32_t V = 128256;
        sl_sampling_params p;
        sl_sampling_params_default(&p);
        p.seed = 5;
        make_row(base, V, SHAPE_FLAT, 3);
        static const int ns[3] = {1, 64, 256};
        int32_t batched[256];
        for (int k = 0; k < 3; k++) {
            int n = ns[k];
            for (int d = 0; d < n; d++) {
                memcpy(rows + (size_t)d * V, base, (size_t)V * sizeof *rows);
                reqs[d] = (sl_sample_req){.params = &p, .draw_index = (uint64_t)d};
            }
            double ms = 0.0, best = 1e30;
            for (int rep = 0; rep < 3; rep++) {   /* the first launch pays for loading the module */
                for (int d = 0; d < n; d++)
                    memcpy(rows + (size_t)d * V, base, (size_t)V * sizeof *rows);
                if (sample_rows(rows, n, V, reqs, tok, &ms) < 0) {
                    fails = -1;
                    goto done;
                }
                best = ms < best ? ms : best;
            }
            if (n == 256)
                memcpy(batched, tok, sizeof batched);
            printf("  timing: %3d rows of %d, temperature 1: %.1f us per launch\n", n, V, best * 1e3);
        }
        int differ = 0;
        for (int d = 0; d < 256; d += 37) {
            double ms;
            memcpy(rows, base, (size_t)V * sizeof *rows);
            reqs[0] = (sl_sample_req){.params = &p, .draw_index = (uint64_t)d};
            if (sample_rows(rows, 1, V, reqs, tok, &ms) < 0) {
                fails = -1;
                goto done;
            }
            differ += tok[0] != batched[d];
        }
        printf("  alone vs in a batch of 256: %d of 7 rows differ  %s\n", differ, differ ? "FAIL" : "ok");
        fails += differ > 0;
    }
    printf("result sampling %s\n", fails == 0 ? "PASS" : fails < 0 ? "could not run" : "FAIL");
done:
    sl_sampler_scratch_destroy(scr);
    free(base);
    free(rows);
    free(work);
    free(reqs);
    free(rec_g);
    free(tok);
    return fails;
}
