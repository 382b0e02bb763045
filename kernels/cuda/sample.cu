/* kernels/cuda/sample.cu: the device sampler (sample.cuh has the contract).
 *
 * One 1024-thread block per row. Every pass over the row is a plain strided
 * loop; the few places where an order matters (the draw's running sum, the
 * tie at a top-k / top-p cut) split the row into 32 contiguous warp ranges
 * walked in id order, so each row costs a handful of passes over its 0.5 MB
 * and no sort:
 *   top-k and top-p are radix selections over an order-preserving 32-bit key
 *   of the logit (top-k, weight 1 per token) or of (logit - max) / T (top-p,
 *   weight exp() in 2^-40 fixed point: integer sums are associative, so the
 *   shared-memory histograms come out the same whatever the atomics' order).
 *   Four 8-bit digits fix the key of the cut; tokens tied on it are equal in
 *   weight, so how many of them the cut takes is a division, and which ones
 *   (the lowest ids, the samplers' tie order) a ballot walk.
 * The cut is (key, id): a token is kept when its key is larger, or equal
 * with an id no larger. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sample.cuh"

#define SB 1024               /* threads per row */
#define NW (SB / SL_WARP)     /* warps per row */
#define FIXED_ONE 1099511627776.0f   /* 2^40: the top token's weight in fixed point */

/* One staged row: its request flattened into fixed-width fields. */
typedef struct {
    float temperature, top_p, min_p, repetition, presence, frequency;
    int32_t top_k, n_logprobs;
    int32_t row;              /* logits row in the step */
    int32_t n_bias, n_pen;    /* edits [edit_off, +n_bias) add biases, the next n_pen are penalties */
    int32_t n_ban;
    int64_t edit_off, ban_off;
    int64_t allow_off;        /* first word of the row's allow bitmap; -1: every token allowed */
    double u;                 /* sl_sampling_uniform(seed, draw_index) */
} sample_row;

/* A logit edit: a bias (value added, in request order) or a penalty (one
 * per distinct token of the window, with its count). orig keeps the raw
 * logit for the chosen token's logprob. */
typedef struct {
    int32_t token;
    float value;
    int32_t count;
    float orig;
} logit_edit;

struct sl_cuda_sampler {
    int32_t n_vocab;
    uint32_t *count;          /* (n_vocab) host penalty counts, zero between steps */
    int32_t *seq_staged;      /* (seq_cap) staged index of each sequence, -1: none */
    int32_t seq_cap;

    /* staging, same layout on host (pinned) and device:
     * [rows row_cap][edits edit_cap][bans ban_cap][allow allow_cap words][tokens row_cap][records row_cap] */
    uint8_t *h, *d;
    size_t bytes;
    int64_t row_cap, edit_cap, ban_cap, allow_cap;
    int32_t n_rows;           /* staged this step */
    uint64_t generation;      /* bumped when the staging is reallocated */
    int64_t n_edits, n_bans, n_allow;
};

/* ------------------------------------------------------------------------ */
/* device helpers                                                            */

/* Order-preserving key of a float (no NaN reaches it): larger float, larger key. */
static __device__ __forceinline__ uint32_t okey(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* A logit as the samplers see it: NaN (bad model output) is -inf. Every
 * read goes through here, so the row needs no clearing pass. */
static __device__ __forceinline__ float lv(const float *l, int64_t i)
{
    float v = l[i];
    return isnan(v) ? -INFINITY : v;
}

/* The samplers' one order: higher value first, then lower id; id < 0 is "none". */
static __device__ __forceinline__ bool better(float a, int32_t ia, float b, int32_t ib)
{
    if (ib < 0)
        return ia >= 0;
    if (ia < 0)
        return false;
    return a > b || (a == b && ia < ib);
}

typedef struct {
    float v[NW];
    int32_t i[NW];
    double dsum[NW];
    unsigned long long hw[256];
    unsigned int hc[256];
    unsigned int cnt[NW];
    float bv;
    int32_t bi;
    double dv;
    uint32_t prefix;
    unsigned long long above, w_eq;
    unsigned int c_eq, need;
    int32_t warp, id;
} block_smem;

/* The best (value, id) of the row among tokens strictly worse than
 * (ev, eid) (eid < 0: all); id -1 when there is none. */
static __device__ void block_best(const float *l, int64_t V, float ev, int32_t eid, block_smem &sm, float *bv,
                                  int32_t *bi)
{
    float v = 0.0f;
    int32_t id = -1;
    auto see = [&](float x, int64_t i) {
        x = isnan(x) ? -INFINITY : x;
        if (eid >= 0 && !better(ev, eid, x, (int32_t)i))
            return;
        if (better(x, (int32_t)i, v, id)) {
            v = x;
            id = (int32_t)i;
        }
    };
    if ((V & 3) == 0) {   /* rows start 16-byte aligned: read four at a time (the order is total, so
                           * which thread sees a token first does not matter) */
        const float4 *l4 = (const float4 *)l;
        for (int64_t i = threadIdx.x; i < V / 4; i += SB) {
            float4 x = l4[i];
            see(x.x, 4 * i);
            see(x.y, 4 * i + 1);
            see(x.z, 4 * i + 2);
            see(x.w, 4 * i + 3);
        }
    } else {
        for (int64_t i = threadIdx.x; i < V; i += SB)
            see(l[i], i);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int32_t oi = __shfl_xor_sync(0xffffffffu, id, o);
        if (better(ov, oi, v, id)) {
            v = ov;
            id = oi;
        }
    }
    int w = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    if (lane == 0) {
        sm.v[w] = v;
        sm.i[w] = id;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = sm.v[0];
        int32_t bidx = sm.i[0];
        for (int k = 1; k < NW; k++)
            if (better(sm.v[k], sm.i[k], b, bidx)) {
                b = sm.v[k];
                bidx = sm.i[k];
            }
        sm.bv = b;
        sm.bi = bidx;
    }
    __syncthreads();
    *bv = sm.bv;
    *bi = sm.bi;
    __syncthreads();
}

/* Sum over the block of each thread's v, in a fixed order. */
static __device__ double block_sum(double v, block_smem &sm)
{
    v = sl_warp_sum_double(v);
    if (threadIdx.x % SL_WARP == 0)
        sm.dsum[threadIdx.x / SL_WARP] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int k = 0; k < NW; k++)
            s += sm.dsum[k];
        sm.dv = s;
    }
    __syncthreads();
    double r = sm.dv;
    __syncthreads();
    return r;
}

static __device__ unsigned long long block_sum_u64(unsigned long long v, block_smem &sm)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % SL_WARP == 0)
        sm.hw[threadIdx.x / SL_WARP] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long s = 0;
        for (int k = 0; k < NW; k++)
            s += sm.hw[k];
        sm.above = s;
    }
    __syncthreads();
    unsigned long long r = sm.above;
    __syncthreads();
    return r;
}

/* What the cuts look at per token; see the file comment. */
typedef struct {
    const float *l;
    int64_t V;
    float lmax, temp;
    bool has_k;
    uint32_t k_key;           /* top-k cut, when has_k */
    int32_t k_id;
} row_view;

static __device__ __forceinline__ float tempered_p(const row_view &r, float li)
{
    return expf((li - r.lmax) / r.temp);   /* the CPU sampler's expression, so 0/T and -d/T stay exact */
}

static __device__ __forceinline__ bool in_top_k(const row_view &r, float li, int64_t i)
{
    if (!r.has_k)
        return true;
    uint32_t k = okey(li);
    return k > r.k_key || (k == r.k_key && i <= r.k_id);
}

/* Whether token i is a candidate of the cut whose key is exactly `key`. */
static __device__ __forceinline__ bool on_cut_key(const row_view &r, bool by_mass, uint32_t key, int64_t i)
{
    float li = lv(r.l, i);
    if (by_mass && !in_top_k(r, li, i))
        return false;
    return (by_mass ? okey((li - r.lmax) / r.temp) : okey(li)) == key;
}

/* Radix selection of the cut: the key K and id such that the tokens kept
 * by (K, id) are the smallest prefix, in the samplers' order, whose weight
 * reaches `target`. by_mass: top-p (key of x, fixed-point weight, only
 * top-k survivors); else top-k (key of the logit, weight 1). */
static __device__ void radix_cut(const row_view &r, bool by_mass, unsigned long long target, block_smem &sm,
                                 uint32_t *cut_key, int32_t *cut_id)
{
    uint32_t prefix = 0, mask = 0;
    unsigned long long above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int j = threadIdx.x; j < 256; j += SB) {
            sm.hw[j] = 0;
            sm.hc[j] = 0;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < r.V; i += SB) {
            float li = lv(r.l, i);
            uint32_t key;
            unsigned long long w = 1;
            if (by_mass) {
                if (!in_top_k(r, li, i))
                    continue;
                float x = (li - r.lmax) / r.temp;
                key = okey(x);
                w = (unsigned long long)(expf(x) * FIXED_ONE);
            } else {
                key = okey(li);
            }
            if ((key & mask) != prefix)
                continue;
            int d = (int)((key >> shift) & 0xffu);
            if (w)
                atomicAdd(&sm.hw[d], w);
            atomicAdd(&sm.hc[d], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long a = above;
            int d = 255;
            for (; d > 0; d--) {
                if (a + sm.hw[d] >= target)
                    break;
                a += sm.hw[d];
            }
            sm.prefix = prefix | ((uint32_t)d << shift);
            sm.above = a;
            sm.w_eq = sm.hw[d];
            sm.c_eq = sm.hc[d];
        }
        __syncthreads();
        prefix = sm.prefix;
        mask |= 0xffu << shift;
        above = sm.above;
        __syncthreads();
    }
    /* Tokens with key == prefix all weigh the same: take as many of them,
     * lowest ids first, as the target still needs. */
    if (threadIdx.x == 0) {
        unsigned int c = sm.c_eq;
        unsigned long long w = c ? sm.w_eq / c : 0, need = target > above ? target - above : 1;
        unsigned long long take = w ? (need + w - 1) / w : c;
        sm.need = (unsigned int)(take < 1 ? 1 : (take > c ? c : take));
    }
    int64_t chunk = (r.V + NW - 1) / NW;
    chunk = (chunk + SL_WARP - 1) / SL_WARP * SL_WARP;
    int w = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    int64_t lo = w * chunk, hi = lo + chunk < r.V ? lo + chunk : r.V;
    unsigned int cnt = 0;
    for (int64_t base = lo; base < hi; base += SL_WARP) {
        int64_t i = base + lane;
        bool tie = i < hi && on_cut_key(r, by_mass, prefix, i);
        cnt += __popc(__ballot_sync(0xffffffffu, tie));
    }
    if (lane == 0)
        sm.cnt[w] = cnt;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int before = 0;
        int k = 0;
        for (; k < NW - 1; k++) {
            if (before + sm.cnt[k] >= sm.need)
                break;
            before += sm.cnt[k];
        }
        sm.warp = k;
        sm.need -= before;
        sm.id = -1;
    }
    __syncthreads();
    if (w == sm.warp) {
        unsigned int need = sm.need;
        for (int64_t base = lo; base < hi; base += SL_WARP) {
            int64_t i = base + lane;
            bool tie = i < hi && on_cut_key(r, by_mass, prefix, i);
            unsigned int m = __ballot_sync(0xffffffffu, tie);
            unsigned int n = __popc(m);
            if (n >= need) {
                for (unsigned int k = 1; k < need; k++)   /* drop the need-1 lowest set bits */
                    m &= m - 1;
                if (lane == 0)
                    sm.id = (int32_t)(base + __ffs(m) - 1);
                break;
            }
            need -= n;
        }
    }
    __syncthreads();
    *cut_key = prefix;
    *cut_id = sm.id >= 0 ? sm.id : 0x7fffffff;   /* not reached: then keep every tie */
    __syncthreads();
}

/* The tempered draw (step 6 of sampler.h) on a row with bias and penalties. */
static __device__ int32_t draw_tempered(const sample_row &R, const float *l, int64_t V, float lmax, int32_t imax,
                                        block_smem &sm)
{
    row_view r = {l, V, lmax, R.temperature, false, 0, 0};
    if (R.top_k > 0 && R.top_k < V) {
        radix_cut(r, false, (unsigned long long)R.top_k, sm, &r.k_key, &r.k_id);
        r.has_k = true;
    }
    bool has_p = R.top_p < 1.0f;
    uint32_t p_key = 0;
    int32_t p_id = 0;
    if (has_p) {
        unsigned long long m = 0;   /* the fixed-point mass: < 2^61 for any vocabulary below 2^21 */
        for (int64_t i = threadIdx.x; i < V; i += SB) {
            float li = lv(l, i);
            if (in_top_k(r, li, i))
                m += (unsigned long long)(tempered_p(r, li) * FIXED_ONE);
        }
        m = block_sum_u64(m, sm);
        double t = ceil((double)R.top_p * (double)m);
        unsigned long long target = t < 1.0 ? 1ull : (unsigned long long)t;
        radix_cut(r, true, target, sm, &p_key, &p_id);
    }
    float thr = R.min_p > 0.0f ? (R.min_p < 1.0f ? R.min_p : 1.0f) : 0.0f;

    /* the draw: warp totals over contiguous id ranges, then one warp walks */
    int64_t chunk = (V + NW - 1) / NW;
    chunk = (chunk + SL_WARP - 1) / SL_WARP * SL_WARP;
    int w = threadIdx.x / SL_WARP, lane = threadIdx.x % SL_WARP;
    int64_t lo = w * chunk, hi = lo + chunk < V ? lo + chunk : V;
    auto weight = [&](int64_t i) -> double {
        float li = lv(l, i);
        if (!in_top_k(r, li, i))
            return 0.0;
        float x = (li - lmax) / R.temperature;
        if (has_p) {
            uint32_t k = okey(x);
            if (!(k > p_key || (k == p_key && i <= p_id)))
                return 0.0;
        }
        float p = expf(x);
        return p >= thr ? (double)p : 0.0;
    };
    double acc = 0.0;
    for (int64_t i = lo + lane; i < hi; i += SL_WARP)
        acc += weight(i);
    acc = sl_warp_sum_double(acc);
    if (lane == 0)
        sm.dsum[w] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int k = 0; k < NW; k++)
            total += sm.dsum[k];
        double target = R.u * total, cum = 0.0;
        int k = 0, last = -1;
        for (; k < NW; k++) {
            if (sm.dsum[k] > 0.0)
                last = k;
            if (sm.dsum[k] > 0.0 && cum + sm.dsum[k] > target)
                break;
            cum += sm.dsum[k];
        }
        sm.dv = target - cum;   /* what is left to pass inside warp k's range */
        if (k == NW) {   /* rounding: u * total reached the full sum */
            k = last;
            sm.dv = INFINITY;   /* the walk below then ends on the range's last kept token */
        }
        sm.warp = k;
        sm.id = -1;
    }
    __syncthreads();
    if (w == sm.warp) {
        double left = sm.dv, run = 0.0;
        int32_t last = -1, found = -1;
        for (int64_t base = lo; base < hi && found < 0; base += SL_WARP) {
            int64_t i = base + lane;
            double v = i < hi ? weight(i) : 0.0, s = v;
#pragma unroll
            for (int o = 1; o < SL_WARP; o <<= 1) {   /* inclusive scan, fixed order */
                double y = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o)
                    s += y;
            }
            unsigned int hit = __ballot_sync(0xffffffffu, v > 0.0 && run + s > left);
            unsigned int pos = __ballot_sync(0xffffffffu, v > 0.0);
            if (hit)
                found = (int32_t)(base + __ffs(hit) - 1);
            else if (pos)
                last = (int32_t)(base + 31 - __clz(pos));
            run += __shfl_sync(0xffffffffu, s, SL_WARP - 1);
        }
        if (lane == 0)
            sm.id = found >= 0 ? found : last;
    }
    __syncthreads();
    int32_t tok = sm.id >= 0 ? sm.id : imax;   /* no kept weight at all: not reached (the max is kept) */
    __syncthreads();
    return tok;
}

static __device__ float logprob_of(float v, double log_z)
{
    if (isfinite(log_z))
        return (float)((double)v - log_z);
    return (double)v == log_z ? 0.0f : -INFINITY;
}

static __global__ void __launch_bounds__(SB)
sample_rows(float *__restrict__ logits, int64_t V, int32_t row0, const sample_row *__restrict__ rows,
            logit_edit *__restrict__ edits, const int32_t *__restrict__ bans, const uint32_t *__restrict__ allow,
            int32_t *__restrict__ out_tok, sl_logprob_record *__restrict__ out_rec)
{
    __shared__ block_smem sm;
    const sample_row R = rows[blockIdx.x];
    float *l = logits + (int64_t)(R.row - row0) * V;

    /* 1. the allow bitmap (the grammar mask), then the banned tokens (NaN
     *    reads as -inf everywhere: lv). A thread owns whole words, so a word
     *    of all ones costs one load. */
    if (R.allow_off >= 0) {
        const uint32_t *A = allow + R.allow_off;
        for (int64_t w = threadIdx.x; w * 32 < V; w += SB) {
            uint32_t bits = A[w];
            if (bits == 0xffffffffu)
                continue;
            int64_t end = w * 32 + 32 < V ? w * 32 + 32 : V;
            for (int64_t t = w * 32; t < end; t++)
                if (!(bits >> (t & 31) & 1u))
                    l[t] = -INFINITY;
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < R.n_ban; j += SB) {
        int32_t t = bans[R.ban_off + j];
        if (t >= 0 && t < V)
            l[t] = -INFINITY;
    }
    __syncthreads();

    /* 2. logprobs of the raw row */
    bool want_lp = R.n_logprobs >= 0;
    double log_z = 0.0;
    sl_logprob_record *rec = out_rec + blockIdx.x;
    if (want_lp) {
        float m;
        int32_t im;
        block_best(l, V, 0.0f, -1, sm, &m, &im);
        if (isfinite(m)) {
            double s = 0.0;
            for (int64_t i = threadIdx.x; i < V; i += SB)
                s += exp((double)lv(l, i) - (double)m);
            log_z = (double)m + log(block_sum(s, sm));
        } else {
            log_z = m;
        }
        int n_top = R.n_logprobs < SL_TOP_LOGPROBS_MAX ? R.n_logprobs : SL_TOP_LOGPROBS_MAX;
        if (n_top > V)
            n_top = (int)V;
        float ev = 0.0f;
        int32_t eid = -1;
        int used = 0;
        for (int k = 0; k < n_top; k++) {
            float v;
            int32_t id;
            block_best(l, V, ev, eid, sm, &v, &id);
            if (id < 0)
                break;
            if (threadIdx.x == 0) {
                rec->top[k].token = id;
                rec->top[k].logprob = logprob_of(v, log_z);
            }
            ev = v;
            eid = id;
            used++;
        }
        if (threadIdx.x == 0)
            rec->n_top = used;
    }

    /* 3. bias (in request order: duplicates add up), then penalties (one
     *    edit per distinct token), the raw values saved first */
    logit_edit *E = edits + R.edit_off;
    int n_edit = R.n_bias + R.n_pen;
    for (int j = threadIdx.x; j < n_edit; j += SB)
        E[j].orig = E[j].token >= 0 && E[j].token < V ? lv(l, E[j].token) : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int j = 0; j < R.n_bias; j++) {
            int32_t t = E[j].token;
            if (t >= 0 && t < V && isfinite(E[j].value))
                l[t] = lv(l, t) + E[j].value;
        }
    __syncthreads();
    {
        float rp = R.repetition;
        float pres = isfinite(R.presence) ? R.presence : 0.0f;
        float freq = isfinite(R.frequency) ? R.frequency : 0.0f;
        bool use_r = rp > 0.0f && rp != 1.0f && isfinite(rp);
        for (int j = R.n_bias + threadIdx.x; j < n_edit; j += SB) {
            int32_t t = E[j].token;
            if (t < 0 || t >= V)
                continue;
            float v = lv(l, t);
            if (use_r)
                v = v > 0.0f ? v / rp : v * rp;
            v -= pres + (float)E[j].count * freq;
            l[t] = v;
        }
    }
    __syncthreads();

    /* 4. greedy, or the tempered draw */
    float lmax;
    int32_t imax;
    block_best(l, V, 0.0f, -1, sm, &lmax, &imax);
    int32_t tok = imax;
    if (R.allow_off >= 0 && lmax == -INFINITY)
        tok = -1;   /* nothing allowed is left: the all -inf fallback (lowest id) would break the mask */
    else if (R.temperature > 0.0f && isfinite(R.temperature) && isfinite(lmax))
        tok = draw_tempered(R, l, V, lmax, imax, sm);

    if (threadIdx.x == 0) {
        out_tok[blockIdx.x] = tok;
        if (want_lp && tok < 0) {
            rec->token = -1;
        } else if (want_lp) {
            float raw = lv(l, tok);
            for (int j = 0; j < n_edit; j++)
                if (E[j].token == tok) {
                    raw = E[j].orig;
                    break;
                }
            rec->token = tok;
            rec->logprob = logprob_of(raw, log_z);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* host side                                                                 */

sl_status sl_cuda_sampler_create(int32_t n_vocab, sl_cuda_sampler **out)
{
    *out = NULL;
    if (n_vocab < 1)
        return SL_EINVAL;
    sl_cuda_sampler *s = (sl_cuda_sampler *)calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    s->n_vocab = n_vocab;
    s->count = (uint32_t *)calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->count) {
        free(s);
        return SL_ENOMEM;
    }
    *out = s;
    return SL_OK;
}

void sl_cuda_sampler_destroy(sl_cuda_sampler *s)
{
    if (!s)
        return;
    cudaFree(s->d);
    cudaFreeHost(s->h);
    free(s->count);
    free(s->seq_staged);
    free(s);
}

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static size_t off_edits(const sl_cuda_sampler *s)
{
    return align8((size_t)s->row_cap * sizeof(sample_row));
}
static size_t off_bans(const sl_cuda_sampler *s)
{
    return off_edits(s) + (size_t)s->edit_cap * sizeof(logit_edit);
}
static size_t off_allow(const sl_cuda_sampler *s)
{
    return align8(off_bans(s) + (size_t)s->ban_cap * sizeof(int32_t));
}
static size_t off_tokens(const sl_cuda_sampler *s)
{
    return align8(off_allow(s) + (size_t)s->allow_cap * sizeof(uint32_t));
}
static size_t off_records(const sl_cuda_sampler *s)
{
    return align8(off_tokens(s) + (size_t)s->row_cap * sizeof(int32_t));
}

/* Room for rows, edits, bans and allow words; nothing may be in flight (a
 * step's results are read before the next is staged). */
static sl_status reserve(sl_cuda_sampler *s, int64_t rows, int64_t edits, int64_t bans, int64_t allow)
{
    if (rows <= s->row_cap && edits <= s->edit_cap && bans <= s->ban_cap && allow <= s->allow_cap)
        return SL_OK;
    cudaFree(s->d);
    cudaFreeHost(s->h);
    s->d = NULL;
    s->h = NULL;
    s->generation++;
    s->row_cap = rows > 2 * s->row_cap ? rows : 2 * s->row_cap;
    s->edit_cap = edits > 2 * s->edit_cap ? edits : 2 * s->edit_cap;
    s->ban_cap = bans > 2 * s->ban_cap ? bans : 2 * s->ban_cap;
    s->allow_cap = allow > 2 * s->allow_cap ? allow : 2 * s->allow_cap;
    s->bytes = off_records(s) + (size_t)s->row_cap * sizeof(sl_logprob_record);
    if (cudaMalloc((void **)&s->d, s->bytes) != cudaSuccess ||
        cudaHostAlloc((void **)&s->h, s->bytes, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(s->d);
        s->d = NULL;
        s->h = NULL;
        s->row_cap = s->edit_cap = s->ban_cap = s->allow_cap = 0;
        return SL_ENOMEM;
    }
    return SL_OK;
}

/* The window penalties look at, as in sampler.c: the last penalty_last_n
 * tokens (-1: all), or none when every penalty is off. */
static int64_t penalty_window(const sl_sample_req *r, int64_t *start)
{
    const sl_sampling_params *p = r->params;
    float rp = p->repetition_penalty;
    bool use_r = rp > 0.0f && rp != 1.0f && isfinite(rp);
    bool pres = isfinite(p->presence_penalty) && p->presence_penalty != 0.0f;
    bool freq = isfinite(p->frequency_penalty) && p->frequency_penalty != 0.0f;
    *start = 0;
    if ((!use_r && !pres && !freq) || p->penalty_last_n == 0 || !r->history || r->n_history <= 0)
        return 0;
    if (p->penalty_last_n > 0 && p->penalty_last_n < r->n_history)
        *start = r->n_history - p->penalty_last_n;
    return r->n_history - *start;
}

static sl_status stage(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st, bool allow_later)
{
    if (n > s->seq_cap) {
        int32_t *m = (int32_t *)realloc(s->seq_staged, (size_t)n * sizeof *m);
        if (!m)
            return SL_ENOMEM;
        s->seq_staged = m;
        s->seq_cap = n;
    }
    int64_t rows = 0, edits = 0, bans = 0, allow = 0;
    int64_t words = ((int64_t)s->n_vocab + 31) / 32;   /* one allow bitmap */
    for (int32_t i = 0; i < n; i++) {
        if (!reqs[i].params)
            continue;
        int64_t start;
        rows++;
        edits += reqs[i].params->n_logit_bias + penalty_window(&reqs[i], &start);
        bans += reqs[i].n_ban;
        allow += reqs[i].allow ? words : 0;
    }
    sl_status rc = reserve(s, rows, edits, bans, allow);
    if (rc < 0)
        return rc;
    sample_row *R = (sample_row *)s->h;
    logit_edit *E = (logit_edit *)(s->h + off_edits(s));
    int32_t *B = (int32_t *)(s->h + off_bans(s));
    uint32_t *A = (uint32_t *)(s->h + off_allow(s));
    int32_t V = s->n_vocab;
    s->n_rows = 0;
    s->n_edits = s->n_bans = s->n_allow = 0;
    for (int32_t i = 0; i < n; i++) {
        const sl_sample_req *r = &reqs[i];
        s->seq_staged[i] = -1;
        if (!r->params)
            continue;
        const sl_sampling_params *p = r->params;
        sample_row *o = &R[s->n_rows];
        s->seq_staged[i] = s->n_rows++;
        *o = (sample_row){p->temperature, p->top_p, p->min_p, p->repetition_penalty, p->presence_penalty,
                          p->frequency_penalty, p->top_k, p->n_logprobs, i, 0, 0, 0, s->n_edits, s->n_bans, -1,
                          sl_sampling_uniform(p->seed, r->draw_index)};
        int32_t nb = p->n_logit_bias < SL_LOGIT_BIAS_MAX ? p->n_logit_bias : SL_LOGIT_BIAS_MAX;
        for (int32_t j = 0; j < nb; j++)
            E[s->n_edits++] = (logit_edit){p->logit_bias[j].token, p->logit_bias[j].bias, 0, 0.0f};
        o->n_bias = nb;
        /* penalties: count the window, then one edit per distinct token,
         * zeroing its count again (the count array stays all zero) */
        int64_t start, len = penalty_window(r, &start);
        for (int64_t j = start; j < start + len; j++)
            if (r->history[j] >= 0 && r->history[j] < V)
                s->count[r->history[j]]++;
        for (int64_t j = start; j < start + len; j++) {
            int32_t t = r->history[j];
            if (t < 0 || t >= V || !s->count[t])
                continue;
            E[s->n_edits++] = (logit_edit){t, 0.0f, (int32_t)s->count[t], 0.0f};
            o->n_pen++;
            s->count[t] = 0;
        }
        for (int32_t j = 0; j < r->n_ban; j++)
            B[s->n_bans++] = r->ban[j];
        o->n_ban = r->n_ban;
        if (r->allow) {
            o->allow_off = s->n_allow;
            if (!allow_later)
                memcpy(A + s->n_allow, r->allow, (size_t)words * sizeof(uint32_t));
            s->n_allow += words;
        }
    }
    if (s->n_rows == 0)
        return SL_OK;
    /* rows, edits, bans, then the allow bitmaps: the copy ends where the last
     * bitmap does (or where the bans do, without one or with them later) */
    size_t bytes = s->n_allow && !allow_later ? off_allow(s) + (size_t)s->n_allow * sizeof(uint32_t)
                                              : off_bans(s) + (size_t)s->n_bans * sizeof(int32_t);
    SL_CUDA_CHECK(cudaMemcpyAsync(s->d, s->h, bytes, cudaMemcpyHostToDevice, st));
    return SL_OK;
}

sl_status sl_cuda_sampler_stage(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st)
{
    return stage(s, reqs, n, st, false);
}

sl_status sl_cuda_sampler_stage_deferred(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st)
{
    return stage(s, reqs, n, st, true);
}

sl_status sl_cuda_sampler_stage_allow(sl_cuda_sampler *s, const sl_sample_req *reqs, int32_t n, cudaStream_t st)
{
    if (s->n_allow == 0)
        return SL_OK;
    /* the same walk as stage's: bitmaps in row order, one per masked row */
    size_t words = ((size_t)s->n_vocab + 31) / 32;
    uint32_t *A = (uint32_t *)(s->h + off_allow(s));
    int64_t at = 0;
    for (int32_t i = 0; i < n && at < s->n_allow; i++)
        if (reqs[i].params && reqs[i].allow) {
            memcpy(A + at, reqs[i].allow, words * sizeof(uint32_t));
            at += (int64_t)words;
        }
    SL_CUDA_CHECK(cudaMemcpyAsync(s->d + off_allow(s), A, (size_t)s->n_allow * sizeof(uint32_t),
                                  cudaMemcpyHostToDevice, st));
    return SL_OK;
}

sl_status sl_cuda_sampler_launch(sl_cuda_sampler *s, float *logits, int32_t row0, int32_t n_rows, cudaStream_t st)
{
    /* the staged rows are in row order: find the ones in [row0, row0 + n_rows) */
    const sample_row *R = (const sample_row *)s->h;
    int32_t a = 0;
    while (a < s->n_rows && R[a].row < row0)
        a++;
    int32_t b = a;
    while (b < s->n_rows && R[b].row < row0 + n_rows)
        b++;
    if (b == a)
        return SL_OK;
    sample_rows<<<(unsigned)(b - a), SB, 0, st>>>(
        logits, s->n_vocab, row0, (const sample_row *)s->d + a, (logit_edit *)(s->d + off_edits(s)),
        (const int32_t *)(s->d + off_bans(s)), (const uint32_t *)(s->d + off_allow(s)),
        (int32_t *)(s->d + off_tokens(s)) + a,
        (sl_logprob_record *)(s->d + off_records(s)) + a);
    SL_CUDA_CHECK_LAUNCH();
    return SL_OK;
}

uint64_t sl_cuda_sampler_generation(const sl_cuda_sampler *s)
{
    return s->generation;
}

sl_status sl_cuda_sampler_fetch(sl_cuda_sampler *s, cudaStream_t st)
{
    if (s->n_rows == 0)
        return SL_OK;
    bool any_lp = false;
    const sample_row *R = (const sample_row *)s->h;
    for (int32_t i = 0; i < s->n_rows && !any_lp; i++)
        any_lp = R[i].n_logprobs >= 0;
    SL_CUDA_CHECK(cudaMemcpyAsync(s->h + off_tokens(s), s->d + off_tokens(s), (size_t)s->n_rows * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, st));
    if (any_lp)
        SL_CUDA_CHECK(cudaMemcpyAsync(s->h + off_records(s), s->d + off_records(s),
                                      (size_t)s->n_rows * sizeof(sl_logprob_record), cudaMemcpyDeviceToHost, st));
    return SL_OK;
}

int32_t sl_cuda_sampler_result(const sl_cuda_sampler *s, int32_t i, const sl_sample_req *req)
{
    if (i < 0 || i >= s->seq_cap || !req->params)
        return -1;
    int32_t k = s->seq_staged[i];
    if (k < 0)
        return -1;
    int32_t tok = ((const int32_t *)(s->h + off_tokens(s)))[k];
    if (tok < 0 || tok >= s->n_vocab)
        return -1;
    if (req->params->n_logprobs >= 0 && req->record)
        *req->record = ((const sl_logprob_record *)(s->h + off_records(s)))[k];
    return tok;
}

/* ------------------------------------------------------------------------ */
/* check entry (tools/cudacheck --sampling)                                  */

/* Draws one token per row of host `logits` (n_rows x n_vocab) for reqs[i]
 * on the device, as a step would; *kernel_ms gets the sampling kernel's
 * time. Returns 0, or -1 when CUDA fails (logged). */
extern "C" __attribute__((visibility("default"))) int sl_cuda_sample_rows(const float *logits, int32_t n_rows,
                                                                         int32_t n_vocab, const sl_sample_req *reqs,
                                                                         int32_t *tokens, double *kernel_ms)
{
    sl_cuda_sampler *s = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *d = NULL;
    int rc = -1;
    size_t bytes = (size_t)n_rows * (size_t)n_vocab * sizeof(float);
    if (sl_cuda_sampler_create(n_vocab, &s) < 0 || cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess ||
        cudaMalloc((void **)&d, bytes) != cudaSuccess ||
        cudaMemcpyAsync(d, logits, bytes, cudaMemcpyHostToDevice, st) != cudaSuccess ||
        sl_cuda_sampler_stage(s, reqs, n_rows, st) < 0 || cudaEventRecord(e0, st) != cudaSuccess ||
        sl_cuda_sampler_launch(s, d, 0, n_rows, st) < 0 || cudaEventRecord(e1, st) != cudaSuccess ||
        sl_cuda_sampler_fetch(s, st) < 0 || cudaStreamSynchronize(st) != cudaSuccess) {
        fprintf(stderr, "cuda: sl_cuda_sample_rows: %s\n", cudaGetErrorString(cudaGetLastError()));
        goto done;
    }
    {
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        *kernel_ms = ms;
    }
    for (int32_t i = 0; i < n_rows; i++)
        tokens[i] = sl_cuda_sampler_result(s, i, &reqs[i]);
    rc = 0;
done:
    if (st)
        cudaStreamSynchronize(st);
    cudaFree(d);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (st)
        cudaStreamDestroy(st);
    sl_cuda_sampler_destroy(s);
    return rc;
}
