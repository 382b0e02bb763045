/* gpu-worker/sampler.c: the CPU reference sampler (worker and `sluice generate`).
 * Runs in the worker process, on whichever thread owns the scratch.
 * Trade-off: the vocabulary is never fully sorted unless top-p needs an order
 * over all of it; even then a histogram of probability mass first cuts the
 * row down to the few buckets that can hold the nucleus, so a peaked
 * 150k-entry row sorts a few hundred candidates, not 150k. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/sampler.h"

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
    float *raw;        /* (n_vocab) raw row kept for the chosen token's logprob */
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
    s->raw = malloc((size_t)n_vocab * sizeof *s->raw);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->cand || !s->raw || !s->count) {
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
    free(s->raw);
    free(s->count);
    free(s);
}

/* ---------------------------------------------------------------- random */

/* splitmix64's output function: a bijection with good avalanche, so
 * mix(seed ^ mix(i)) gives every (seed, i) its own well-spread word. */
static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sl_sampler_uniform(uint64_t seed, uint64_t draw_index)
{
    uint64_t z = mix64(seed ^ mix64(draw_index));
    return (double)(z >> 11) * 0x1.0p-53;   /* 53 random bits: exact in a double */
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

static int32_t argmax(const float *l, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;   /* strict: ties keep the lowest id */
    return best;
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

/* ---------------------------------------------------------------- top-p prefilter */

/* Buckets of half a nat of x = (logit - max) / T; the last one takes
 * everything below -31.5 (p < 2e-14 of the top token). */
#define NUCLEUS_BUCKETS 64

static int32_t nucleus_bucket(float x)
{
    float d = -2.0f * x;   /* x <= 0, so d >= 0; +inf for -inf logits */
    return d < (float)(NUCLEUS_BUCKETS - 1) ? (int32_t)d : NUCLEUS_BUCKETS - 1;
}

/* Keeps (unordered) only the candidates of the highest buckets whose mass
 * reaches `target`. Tokens of one bucket are never split, and bucket order
 * is the sort order, so the kept set is a prefix of the sorted row that
 * holds the nucleus. Returns the new count. */
static int32_t nucleus_prefilter(cand *c, int32_t n, double target)
{
    double mass[NUCLEUS_BUCKETS] = { 0 };
    for (int32_t i = 0; i < n; i++) mass[nucleus_bucket(c[i].x)] += c[i].p;
    double cum = 0.0;
    int32_t last = NUCLEUS_BUCKETS - 1;
    for (int32_t b = 0; b < NUCLEUS_BUCKETS; b++) {
        cum += mass[b];
        if (cum >= target) { last = b; break; }
    }
    if (last == NUCLEUS_BUCKETS - 1) return n;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (nucleus_bucket(c[i].x) <= last) c[m++] = c[i];
    return m;
}

/* ---------------------------------------------------------------- steps */

/* log sum exp of the row in double. Non-finite when the max is (all -inf,
 * or a +inf logit); logprob_of handles those. */
static double log_normaliser(const float *l, int32_t n)
{
    float m = l[0];
    for (int32_t i = 1; i < n; i++) if (l[i] > m) m = l[i];
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
        if (t >= 0 && t < n_vocab) l[t] += p->logit_bias[i].bias;
    }
}

/* Two passes over the window: count, then penalise each distinct token once
 * and zero its count again, so `count` is all zero between calls and no
 * pass ever touches the whole vocabulary. */
static void apply_penalties(const sl_sampling_params *p, float *l, int32_t n_vocab,
                            const int32_t *hist, int32_t n_hist, uint32_t *count)
{
    float r = p->repetition_penalty;
    int use_r = r > 0.0f && r != 1.0f;   /* r <= 0 would flip signs: skip (unvalidated) */
    if (!use_r && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
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
        v -= p->presence_penalty + (float)count[t] * p->frequency_penalty;
        l[t] = v;
        count[t] = 0;
    }
}

/* Steps 6 of the header: the row already carries bias and penalties. */
static int32_t sample_tempered(const sl_sampling_params *p, const float *l, int32_t n,
                               uint64_t draw_index, cand *c)
{
    int32_t nc = n, sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(l, n, p->top_k, c);
        nc = p->top_k;
        sorted = 1;
    } else {
        for (int32_t i = 0; i < n; i++) c[i] = (cand){ l[i], 0.0f, i };
    }
    float lmax = c[0].x;
    for (int32_t i = 1; i < nc; i++) if (c[i].x > lmax) lmax = c[i].x;
    if (!isfinite(lmax)) return argmax(l, n);   /* all -inf, or +inf: softmax undefined */

    /* Softmax numerators, shifted by the max before dividing so a tiny
     * temperature gives 0 / T = 0 and -x / T = -inf, never inf - inf (a
     * multiply by 1/T would make 0 * inf = NaN). */
    double z = 0.0;
    for (int32_t i = 0; i < nc; i++) {
        c[i].x = (c[i].x - lmax) / p->temperature;
        c[i].p = expf(c[i].x);
        z += c[i].p;
    }

    if (p->top_p < 1.0f) {
        double target = (double)p->top_p * z;
        if (!sorted) {
            nc = nucleus_prefilter(c, nc, target);
            qsort(c, (size_t)nc, sizeof *c, cand_cmp_desc);
        }
        double cum = 0.0;
        for (int32_t i = 0; i < nc; i++) {
            cum += c[i].p;
            if (cum >= target) { nc = i + 1; break; }
        }   /* no break: rounding left the kept set a hair short; keep it all */
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

    /* Renormalising is folded into the draw: u scales the kept mass. */
    double kept = 0.0;
    for (int32_t i = 0; i < nc; i++) kept += c[i].p;
    double target = sl_sampler_uniform(p->seed, draw_index) * kept;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < nc; i++) {
        if (c[i].p <= 0.0f) continue;
        cum += c[i].p;
        last = i;
        if (cum > target) return c[i].id;
    }
    return c[last].id;   /* u * kept rounded up to the full sum */
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

    for (int32_t i = 0; i < n_vocab; i++)
        if (isnan(logits[i])) logits[i] = -INFINITY;

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

    int32_t tok = p->temperature > 0.0f
                      ? sample_tempered(p, logits, n_vocab, draw_index, s->cand)
                      : argmax(logits, n_vocab);   /* also NaN or negative temperature */

    if (want_lp) {
        record->token = tok;
        record->logprob = logprob_of(s->raw[tok], log_z);
    }
    *token = tok;
    return SL_OK;
}
