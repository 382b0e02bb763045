/* kernels/cpu/sampler.c: the reference sampler, run on the host by the CPU
 * backend's forward_sample and by sl_backend_forward_sample's default for a
 * backend without one; the CUDA checks compare the device sampler with it.
 * Runs in the worker process (and `sluice generate`, the tools), on whichever
 * thread owns the scratch.
 * Trade-off: the vocabulary is never sorted. Top-k is a heap selection;
 * top-p over the whole row builds a histogram of probability mass and sorts
 * only the one bucket where the nucleus ends, so the kept set is exact but
 * unordered (the draw needs no order, only a fixed one for determinism). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sampler.h"

/* A candidate token: x is its logit, later (logit - max) / temperature; p is
 * exp(x), the unnormalised probability. */
typedef struct {
    float x;
    float p;
    int32_t id;
} cand;

struct sl_sampler_scratch {
    int32_t n_vocab;
    cand *cand;        /* (n_vocab) candidates of the current row */
    float *prob;       /* (n_vocab) exp((logit - max) / T) by token id */
    float *raw;        /* (n_vocab) raw row kept for the chosen token's logprob */
    float *kept;       /* (n_vocab) the final candidates' weights by token id, 0 elsewhere */
    uint32_t *count;   /* (n_vocab) penalty counts; all zero between calls */
};

sl_status sl_sampler_scratch_create(int32_t n_vocab, sl_sampler_scratch **out)
{
    *out = NULL;
    if (n_vocab <= 0) return SL_EINVAL;
    sl_sampler_scratch *s = calloc(1, sizeof *s);
    if (!s) return SL_ENOMEM;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->raw = malloc((size_t)n_vocab * sizeof *s->raw);
    s->kept = calloc((size_t)n_vocab, sizeof *s->kept);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->cand || !s->prob || !s->raw || !s->kept || !s->count) {
        sl_sampler_scratch_destroy(s);
        return SL_ENOMEM;
    }
    *out = s;
    return SL_OK;
}

void sl_sampler_scratch_destroy(sl_sampler_scratch *s)
{
    if (!s) return;
    free(s->cand);
    free(s->prob);
    free(s->raw);
    free(s->kept);
    free(s->count);
    free(s);
}

/* ---------------------------------------------------------------- order */

/* The one total order used everywhere: higher x first, then lower id. */
static int better(cand a, cand b)
{
    return a.x > b.x || (a.x == b.x && a.id < b.id);
}

static int cand_cmp_desc(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (better(*a, *b)) return -1;
    if (better(*b, *a)) return 1;
    return 0;
}

/* Max of a row. Eight running maxima: gcc will not turn `a > b ? a : b`
 * into vector max without -ffinite-math-only, but independent chains still
 * overlap (about 3x on a 150k row). NaN-free rows only (the entry point
 * clears NaN first). */
static float row_max(const float *l, int32_t n)
{
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = l[0];
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = l[i + k] > m[k] ? l[i + k] : m[k];
    for (; i < n; i++) m[0] = l[i] > m[0] ? l[i] : m[0];
    for (int k = 1; k < 8; k++) m[0] = m[k] > m[0] ? m[k] : m[0];
    return m[0];
}

/* The lowest id holding the row's max. */
static int32_t argmax(const float *l, int32_t n)
{
    float v = row_max(l, n);
    for (int32_t i = 0; i < n; i++)
        if (l[i] == v) return i;
    return 0;   /* not reached on a NaN-free row */
}

/* Min-heap on the order above (root = worst kept) for top-k selection. */
static void heap_sift_down(cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = 2 * i + 2;
        if (l < n && better(h[w], h[l])) w = l;
        if (r < n && better(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

/* Writes the k best tokens of l[0..n) to c[0..k), sorted best first.
 * O(n log k), and for a typical row most tokens lose the first comparison. */
static void select_top_k(const float *l, int32_t n, int32_t k, cand *c)
{
    for (int32_t i = 0; i < k; i++) c[i] = (cand){ l[i], 0.0f, i };
    for (int32_t i = k / 2 - 1; i >= 0; i--) heap_sift_down(c, k, i);
    for (int32_t i = k; i < n; i++) {
        cand x = { l[i], 0.0f, i };
        if (better(x, c[0])) {
            c[0] = x;
            heap_sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp_desc);
}

/* ---------------------------------------------------------------- top-p without a full sort */

/* Buckets of 1/8 nat of x = (logit - max) / T; the last one takes
 * everything below -31.9 (p < 1.4e-14 of the top token). Bucket order is
 * the sort order: a lower bucket holds strictly larger x. */
#define NUCLEUS_BUCKETS 256
#define NUCLEUS_PER_NAT 8.0f

static int32_t nucleus_bucket(float x)
{
    float d = -NUCLEUS_PER_NAT * x;   /* x <= 0, so d >= 0; +inf for -inf logits */
    return d < (float)(NUCLEUS_BUCKETS - 1) ? (int32_t)d : NUCLEUS_BUCKETS - 1;
}

/* Top-p over the whole row. `mass` is the histogram of prob[] by bucket
 * (built in the softmax pass), `target` the mass to reach. Buckets above the
 * crossing bucket are kept whole and unsorted, buckets below it dropped, and
 * only the crossing bucket is sorted to find the exact cut. The kept set,
 * written to c, is exactly the smallest sorted prefix with mass >= target,
 * though not in sorted order (the draw needs none). Returns its size. */
static int32_t nucleus_cut(const float *l, const float *prob, int32_t n, float lmax, float temp,
                           const double *mass, double target, cand *c)
{
    double above = 0.0;   /* mass of the buckets kept whole */
    int32_t cut = NUCLEUS_BUCKETS - 1;
    for (int32_t b = 0; b < NUCLEUS_BUCKETS; b++) {
        if (above + mass[b] >= target) { cut = b; break; }
        above += mass[b];
    }
    /* x is recomputed by the very expression of the softmax pass, so each
     * token lands in the bucket its mass was counted in. */
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        float x = (l[i] - lmax) / temp;
        if (nucleus_bucket(x) <= cut) c[m++] = (cand){ x, prob[i], i };
    }
    int32_t lo = 0;   /* whole buckets to the front: a fixed swap partition */
    for (int32_t i = 0; i < m; i++) {
        if (nucleus_bucket(c[i].x) < cut) {
            cand t = c[lo]; c[lo] = c[i]; c[i] = t;
            lo++;
        }
    }
    qsort(c + lo, (size_t)(m - lo), sizeof *c, cand_cmp_desc);
    double cum = above;
    for (int32_t i = lo; i < m; i++) {
        cum += c[i].p;
        if (cum >= target) return i + 1;
    }
    return m;   /* rounding left the set a hair short of target: keep it all */
}

/* ---------------------------------------------------------------- steps */

/* log sum exp of the row in double. Non-finite when the max is (all -inf,
 * or a +inf logit); logprob_of handles those. */
static double log_normaliser(const float *l, int32_t n)
{
    float m = row_max(l, n);
    if (!isfinite(m)) return m;
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += exp((double)l[i] - (double)m);
    return (double)m + log(s);
}

static float logprob_of(float v, double log_z)
{
    if (isfinite(log_z)) return (float)((double)v - log_z);
    return (double)v == log_z ? 0.0f : -INFINITY;   /* degenerate row: all mass on the max */
}

/* Top-n of the raw row by an insertion list: n <= 20, one pass, ids
 * ascending so an equal value never displaces a lower id. */
static void logprob_top(const float *l, int32_t n_vocab, int32_t n_top, double log_z,
                        sl_logprob_record *r)
{
    cand top[SL_TOP_LOGPROBS_MAX];
    int32_t used = 0;
    for (int32_t i = 0; i < n_vocab && n_top > 0; i++) {
        cand x = { l[i], 0.0f, i };
        if (used == n_top && !better(x, top[used - 1])) continue;
        int32_t j = used < n_top ? used++ : n_top - 1;
        while (j > 0 && better(x, top[j - 1])) { top[j] = top[j - 1]; j--; }
        top[j] = x;
    }
    r->n_top = used;
    for (int32_t i = 0; i < used; i++) {
        r->top[i].token = top[i].id;
        r->top[i].logprob = logprob_of(top[i].x, log_z);
    }
}

static void apply_logit_bias(const sl_sampling_params *p, float *l, int32_t n_vocab)
{
    int32_t n = p->n_logit_bias;
    if (n > SL_LOGIT_BIAS_MAX) n = SL_LOGIT_BIAS_MAX;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = p->logit_bias[i].token;
        float b = p->logit_bias[i].bias;
        if (t >= 0 && t < n_vocab && isfinite(b)) l[t] += b;   /* inf bias + -inf logit = NaN */
    }
}

/* Two passes over the window: count, then penalise each distinct token once
 * and zero its count again, so `count` is all zero between calls and no
 * pass ever touches the whole vocabulary. */
static void apply_penalties(const sl_sampling_params *p, float *l, int32_t n_vocab,
                            const int32_t *hist, int32_t n_hist, uint32_t *count)
{
    /* Unvalidated values that could flip signs or make NaN are ignored. */
    float r = p->repetition_penalty;
    float pres = isfinite(p->presence_penalty) ? p->presence_penalty : 0.0f;
    float freq = isfinite(p->frequency_penalty) ? p->frequency_penalty : 0.0f;
    int use_r = r > 0.0f && r != 1.0f && isfinite(r);
    if (!use_r && pres == 0.0f && freq == 0.0f) return;
    if (p->penalty_last_n == 0 || !hist || n_hist <= 0) return;
    int32_t start = (p->penalty_last_n < 0 || p->penalty_last_n >= n_hist)
                        ? 0 : n_hist - p->penalty_last_n;
    for (int32_t i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t >= 0 && t < n_vocab) count[t]++;
    }
    for (int32_t i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t < 0 || t >= n_vocab || count[t] == 0) continue;
        float v = l[t];
        if (use_r) v = v > 0.0f ? v / r : v * r;
        v -= pres + (float)count[t] * freq;
        l[t] = v;
        count[t] = 0;
    }
}

/* One draw from unnormalised weights by token id: the first id whose
 * running sum, in id order, passes u * total (renormalising folded in).
 * Id order is the one order every implementation can reproduce (the device
 * sampler walks the row the same way), whatever order the filters found
 * the candidates in. */
static int32_t draw_weighted_row(const float *prob, int32_t n, double total, double u)
{
    double target = u * total, cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (prob[i] <= 0.0f) continue;
        cum += prob[i];
        last = i;
        if (cum > target) return i;
    }
    return last;   /* u * total rounded up to the full sum */
}

/* Draws from candidates c[0..n) (any order): scatters their weights into
 * the zeroed by-id array `kept`, draws in id order, and zeroes it again. */
static int32_t draw_candidates(const cand *c, int32_t n, int32_t n_vocab, float *kept, double u)
{
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) kept[c[i].id] = c[i].p;
    for (int32_t i = 0; i < n_vocab; i++) total += kept[i];
    int32_t tok = draw_weighted_row(kept, n_vocab, total, u);
    for (int32_t i = 0; i < n; i++) kept[c[i].id] = 0.0f;
    return tok;
}

/* Step 6 of the header; the row already carries bias and penalties.
 * Softmax numerators are exp((l - max) / T): shifted before dividing so a
 * tiny temperature gives 0 / T = 0 and -d / T = -inf, never NaN (a multiply
 * by 1/T would make 0 * inf). The max token's numerator is exactly 1. */
static int32_t sample_tempered(const sl_sampling_params *p, const float *l, int32_t n,
                               uint64_t draw_index, sl_sampler_scratch *s)
{
    cand *c = s->cand;
    float temp = p->temperature;
    double u = sl_sampling_uniform(p->seed, draw_index);
    int32_t nc;

    if (p->top_k > 0 && p->top_k < n) {
        /* top-k: k candidates, sorted, so top-p is a prefix walk */
        nc = p->top_k;
        select_top_k(l, n, nc, c);
        float lmax = c[0].x;
        if (!isfinite(lmax)) return argmax(l, n);   /* all -inf, or +inf: no softmax */
        double z = 0.0;
        for (int32_t i = 0; i < nc; i++) {
            c[i].x = (c[i].x - lmax) / temp;
            c[i].p = expf(c[i].x);
            z += c[i].p;
        }
        if (p->top_p < 1.0f) {
            double target = (double)p->top_p * z, cum = 0.0;
            for (int32_t i = 0; i < nc; i++) {
                cum += c[i].p;
                if (cum >= target) { nc = i + 1; break; }
            }   /* no break: rounding left the set a hair short; keep it all */
        }
    } else {
        /* whole row: one fused softmax pass into prob[], then filters
         * materialise only the candidates they keep */
        float *prob = s->prob;
        float lmax = row_max(l, n);
        if (!isfinite(lmax)) return argmax(l, n);
        double z = 0.0;
        if (p->top_p < 1.0f) {
            double mass[NUCLEUS_BUCKETS] = { 0 };
            for (int32_t i = 0; i < n; i++) {
                float x = (l[i] - lmax) / temp;
                prob[i] = expf(x);
                z += prob[i];
                mass[nucleus_bucket(x)] += prob[i];
            }
            nc = nucleus_cut(l, prob, n, lmax, temp, mass, (double)p->top_p * z, c);
        } else {
            for (int32_t i = 0; i < n; i++) {
                prob[i] = expf((l[i] - lmax) / temp);
                z += prob[i];
            }
            if (!(p->min_p > 0.0f)) return draw_weighted_row(prob, n, z, u);
            /* min-p alone: p_max is exactly 1, so keep p >= min_p (at
             * most 1, so the max token stays even when min_p is not validated) */
            float thr = p->min_p < 1.0f ? p->min_p : 1.0f;
            nc = 0;
            for (int32_t i = 0; i < n; i++)
                if (prob[i] >= thr) c[nc++] = (cand){ 0.0f, prob[i], i };
        }
    }

    if (p->min_p > 0.0f) {
        float pmax = 0.0f;
        int32_t imax = 0;
        for (int32_t i = 0; i < nc; i++) if (c[i].p > pmax) { pmax = c[i].p; imax = i; }
        float thr = p->min_p * pmax;
        cand top = c[imax];
        int32_t m = 0;
        for (int32_t i = 0; i < nc; i++) if (c[i].p >= thr) c[m++] = c[i];
        if (m == 0) { c[0] = top; m = 1; }   /* min_p > 1 (unvalidated) keeps the top */
        nc = m;
    }
    return draw_candidates(c, nc, n, s->kept, u);
}

/* ---------------------------------------------------------------- entry */

sl_status sl_sampler_sample(const sl_sampling_params *p, float *logits, int32_t n_vocab,
                            const int32_t *history, int32_t n_history, uint64_t draw_index,
                            sl_sampler_scratch *s, int32_t *token, sl_logprob_record *record)
{
    if (token) *token = -1;
    if (!p || !logits || !s || !token) return SL_EINVAL;
    if (n_vocab <= 0 || n_vocab > s->n_vocab) return SL_EINVAL;
    int want_lp = p->n_logprobs >= 0;
    if (want_lp && !record) return SL_EINVAL;

    for (int32_t i = 0; i < n_vocab; i++)   /* branch-free form: gcc vectorises it */
        logits[i] = isnan(logits[i]) ? -INFINITY : logits[i];

    double log_z = 0.0;
    if (want_lp) {
        int32_t n_top = p->n_logprobs > SL_TOP_LOGPROBS_MAX ? SL_TOP_LOGPROBS_MAX : p->n_logprobs;
        if (n_top > n_vocab) n_top = n_vocab;
        log_z = log_normaliser(logits, n_vocab);
        logprob_top(logits, n_vocab, n_top, log_z, record);
        memcpy(s->raw, logits, (size_t)n_vocab * sizeof *logits);
    }

    apply_logit_bias(p, logits, n_vocab);
    apply_penalties(p, logits, n_vocab, history, n_history, s->count);

    /* Greedy also for a NaN, negative or infinite temperature (unvalidated
     * params), which keeps NaN out of every later comparison. */
    int32_t tok = p->temperature > 0.0f && isfinite(p->temperature)
                      ? sample_tempered(p, logits, n_vocab, draw_index, s)
                      : argmax(logits, n_vocab);

    if (want_lp) {
        record->token = tok;
        record->logprob = logprob_of(s->raw[tok], log_z);
    }
    *token = tok;
    return SL_OK;
}

sl_status sl_sampler_logprob_record(float *logits, int32_t n_vocab, int32_t token, int32_t n_top,
                                    sl_logprob_record *record)
{
    if (!logits || !record || n_vocab <= 0 || token < 0 || token >= n_vocab) return SL_EINVAL;
    for (int32_t i = 0; i < n_vocab; i++)   /* as the entry point: NaN never reaches a comparison */
        logits[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    if (n_top > SL_TOP_LOGPROBS_MAX) n_top = SL_TOP_LOGPROBS_MAX;
    if (n_top > n_vocab) n_top = n_vocab;
    if (n_top < 0) n_top = 0;
    double log_z = log_normaliser(logits, n_vocab);
    logprob_top(logits, n_vocab, n_top, log_z, record);
    record->token = token;
    record->logprob = logprob_of(logits[token], log_z);
    return SL_OK;
}
