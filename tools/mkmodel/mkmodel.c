/* tools/mkmodel/mkmodel.c: writes GGUF test models of real architecture
 * shapes with seeded random weights, in any supported tensor type or in the
 * Q4_K_M / Q5_K_M mixes, with a real vocabulary from a tokenizer.json.
 *
 * Every weight row is generated from (seed, tensor name, row), so a model is
 * the same bytes whatever the thread count; rows are generated and quantized
 * on all cores and tensors are streamed to the file one at a time, so an
 * 8B-shape model needs memory for its largest tensor only.
 *
 *   mkmodel -o out.gguf [--preset NAME] [--arch A] [--type T] [--seed S] ...
 * (mkmodel --help lists every option).
 *
 * Init: every matrix std 1/sqrt(fan_in), embeddings std 1, norms 1 +- 0.1;
 * --branch-scale X multiplies the std of attn_output and ffn_down (whose
 * outputs are added into the residual stream) by X, like GPT-2's
 * 1/sqrt(2 n_layer) on output projections, so a layer is a small update of
 * the stream instead of as large as it; the default 1 writes the same bytes
 * as before the option existed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/threadpool.h"
#include "model/ggml_types.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "model/vocab_json.h"
#include "tests/seeded.h"

typedef struct {
    const char *name, *arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx, n_vocab;
    float rope_base, llama3_factor; /* llama3_factor > 0: write rope_freqs as Llama 3.x does */
    int tied;
    int window;                     /* gemma: attention.sliding_window */
    int n_rot;                      /* rope.dimension_count: rotated dims per head; 0 = head_dim */
    int longrope_orig;              /* > 0: longrope tables and keys, this original context (phi3) */
    int n_expert, n_expert_used;    /* > 0: every FFN a mixture of experts (qwen2moe, qwen3moe, llama = Mixtral) */
    int n_ff_exp;                   /* qwen*moe: each expert's width (Mixtral's experts are n_ff wide) */
    int n_ff_shexp;                 /* qwen2moe: the shared expert's width */
    float yarn_factor;              /* > 0: YaRN rope scaling by this factor (gpt-oss: 32) ... */
    int yarn_orig;                  /* ... from this original context (gpt-oss: 4096) */
} shape;

/* Real shapes: the tiny ones keep real ratios (GQA, head_dim 64/128) at dims
 * 256-512 for reference checks; 1b and 8b are Llama-3.2-1B and Llama-3.1-8B.
 * The gemma ones have Gemma's wide heads (q_dim > n_embd; gemma3's head_dim
 * 256 and one KV head, as in Gemma 3 270M), enough layers for both kinds
 * (gemma3: layers 0-4 slide, 5 is global) and a window of 8 positions, so
 * a test prompt of 12+ tokens reaches past it. tiny-granite is llama's
 * layout with Granite's four scalars (see main), its output untied (Granite
 * ties it, but 12x random embeddings then dominate the stream and a tied
 * output picks the input token again: greedy tests would see one token);
 * tiny-phi3 has fused attn_qkv and gate|up matrices, grouped KV heads (so
 * the K and V row ranges differ from Q's) and partial rotary (48 of 64
 * dims, as Phi-4 mini rotates 3/4 of each head); tiny-phi3-longrope adds
 * Phi-3 128k's longrope (long and short factor tables, an original context
 * of 512 in 8192, and the attention factor its converter writes).
 * The MoE ones: tiny-qwen3moe (8 experts, top 2, renormalised), tiny-qwen2moe
 * (4 experts, top 2, not renormalised, plus the gated shared expert and
 * qwen2's biases), tiny-mixtral (llama with 8 experts of n_ff, top 2);
 * 30b-a3b is Qwen3-30B-A3B's shape and mixtral-8x7b Mixtral 8x7B's (for
 * GPU benchmarks; vocabularies of their real sizes).
 * gpt-oss: tiny-gpt-oss keeps gpt-oss's layout (q_dim twice n_embd, 4 query
 * heads per KV head, 4 layers so two slide and two attend globally, 8
 * experts top 2, YaRN x32 from 4096 as gpt-oss's files carry it) with a
 * window of 8 positions; gpt-oss-20b is gpt-oss-20b's shape (n_embd 2880 =
 * 90 blocks of 32: only the 32-element types fit its rows). */
static const shape presets[] = {
    {"tiny-llama", "llama", 256, 2, 4, 2, 64, 768, 2048, 0, 10000.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-llama3", "llama", 512, 2, 8, 2, 64, 1536, 4096, 0, 500000.0f, 32.0f, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-qwen2", "qwen2", 256, 2, 4, 2, 64, 768, 4096, 0, 1000000.0f, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-qwen3", "qwen3", 256, 3, 4, 2, 128, 768, 4096, 0, 1000000.0f, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-gemma2", "gemma2", 256, 2, 4, 2, 128, 768, 8192, 0, 10000.0f, 0, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-gemma3", "gemma3", 256, 6, 2, 1, 256, 768, 32768, 0, 1000000.0f, 0, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-granite", "granite", 256, 2, 4, 2, 64, 768, 4096, 0, 10000000.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-phi3", "phi3", 256, 2, 4, 2, 64, 768, 4096, 0, 10000.0f, 0, 0, 0, 48, 0, 0, 0, 0, 0, 0, 0},
    {"tiny-phi3-longrope", "phi3", 256, 2, 4, 2, 64, 768, 8192, 0, 10000.0f, 0, 0, 0, 48, 512, 0, 0, 0, 0, 0, 0},
    {"tiny-qwen3moe", "qwen3moe", 256, 2, 4, 2, 64, 768, 4096, 0, 1000000.0f, 0, 0, 0, 0, 0, 8, 2, 256, 0, 0, 0},
    {"tiny-qwen2moe", "qwen2moe", 256, 2, 4, 2, 64, 768, 4096, 0, 1000000.0f, 0, 0, 0, 0, 0, 4, 2, 256, 256, 0, 0},
    {"tiny-mixtral", "llama", 256, 2, 4, 2, 64, 256, 4096, 0, 1000000.0f, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0, 0},
    {"1b", "llama", 2048, 16, 32, 8, 64, 8192, 131072, 0, 500000.0f, 32.0f, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"8b", "llama", 4096, 32, 32, 8, 128, 14336, 131072, 0, 500000.0f, 8.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"30b-a3b", "qwen3moe", 2048, 48, 32, 4, 128, 6144, 40960, 151936, 1000000.0f, 0, 0, 0, 0, 0, 128, 8, 768, 0, 0, 0},
    {"mixtral-8x7b", "llama", 4096, 32, 32, 8, 128, 14336, 32768, 32000, 1000000.0f, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0, 0},
    {"tiny-gpt-oss", "gpt-oss", 256, 4, 8, 2, 64, 256, 131072, 0, 150000.0f, 0, 0, 8, 0, 0, 8, 2, 256, 0, 32.0f,
     4096},
    {"gpt-oss-20b", "gpt-oss", 2880, 24, 64, 8, 64, 2880, 131072, 201088, 150000.0f, 0, 0, 128, 0, 0, 32, 4, 2880,
     0, 32.0f, 4096},
};

typedef struct {
    const char *out, *tokenizer_json, *tokenizer_config, *type_name;
    shape s;
    uint64_t seed;
    float peak;
    double branch_scale;   /* extra std factor of the residual-branch outputs */
    int threads;
} options;

/* ------------------------------------------------------------------------ */
/* seeded values                                                             */

static double uniform(uint64_t *s)
{
    return ((sl_seeded_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static uint64_t name_hash(const char *n)
{
    uint64_t h = 1469598103934665603ull;
    for (; *n; n++)
        h = (h ^ (uint8_t)*n) * 1099511628211ull;
    return h;
}

/* How a tensor's values are drawn: mean + std * N(0,1). */
typedef struct { double mean, std; } dist;

/* ------------------------------------------------------------------------ */
/* tensor plan                                                               */

typedef struct {
    char name[64];
    uint32_t type, n_dims;
    uint64_t ne[3];
    dist d;
    const float *fixed;     /* values to write instead of random ones (rope_freqs) */
} tensor_plan;

typedef struct {
    tensor_plan *t;
    size_t n, cap;
} plan;

static void add(plan *p, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1, dist d)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->t = realloc(p->t, p->cap * sizeof *p->t);
        if (!p->t) {
            fprintf(stderr, "mkmodel: out of memory\n");
            exit(1);
        }
    }
    tensor_plan *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = 1;
    t->d = d;
}

/* n matrices (ne0 -> ne1) as one 3-D tensor, as llama.cpp stores experts. */
static void add3(plan *p, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1, uint64_t n, dist d)
{
    add(p, name, type, ne0, ne1, d);
    p->t[p->n - 1].n_dims = 3;
    p->t[p->n - 1].ne[2] = n;
}

/* llama.cpp's rule for which layers get more bits in the _M mixes. */
static int use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

typedef struct { const char *name; uint32_t base; int mix; uint32_t file_type; } type_choice;

static const type_choice type_choices[] = {
    {"F32", SL_GGML_TYPE_F32, 0, 0},      {"F16", SL_GGML_TYPE_F16, 0, 1},
    {"BF16", SL_GGML_TYPE_BF16, 0, 32},   {"Q8_0", SL_GGML_TYPE_Q8_0, 0, 7},
    {"Q4_0", SL_GGML_TYPE_Q4_0, 0, 2},    {"Q4_K", SL_GGML_TYPE_Q4_K, 0, 14},
    {"Q5_K", SL_GGML_TYPE_Q5_K, 0, 16},   {"Q6_K", SL_GGML_TYPE_Q6_K, 0, 18},
    {"Q4_K_M", SL_GGML_TYPE_Q4_K, 1, 15}, {"Q5_K_M", SL_GGML_TYPE_Q5_K, 1, 17},
    {"Q5_0", SL_GGML_TYPE_Q5_0, 0, 8},    {"Q4_1", SL_GGML_TYPE_Q4_1, 0, 3},
    {"Q5_1", SL_GGML_TYPE_Q5_1, 0, 9},    {"IQ4_NL", SL_GGML_TYPE_IQ4_NL, 0, 25},
    {"Q8_1", SL_GGML_TYPE_Q8_1, 0, 1024},   /* no llama.cpp ftype: 1024 is its "guessed" */
    /* plain low-bit files: every matrix in the type (llama.cpp names the
     * all-Q3_K file type Q3_K_S) */
    {"Q2_K", SL_GGML_TYPE_Q2_K, 0, 10},   {"Q3_K", SL_GGML_TYPE_Q3_K, 0, 11},
    {"IQ4_XS", SL_GGML_TYPE_IQ4_XS, 0, 30},
    /* ternary, every matrix too: the gguf package's quantizer (d = max |x|) */
    {"TQ1_0", SL_GGML_TYPE_TQ1_0, 0, 36}, {"TQ2_0", SL_GGML_TYPE_TQ2_0, 0, 37},
    /* llama.cpp's MXFP4_MOE: the 3-D expert tensors MXFP4, every other
     * matrix Q8_0 (a dense model is then all Q8_0) */
    {"MXFP4", SL_GGML_TYPE_Q8_0, 2, 38},
};

static void build_plan(const options *o, const type_choice *tc, plan *p, float *rope_freqs)
{
    const shape *s = &o->s;
    uint64_t E = s->n_embd, Q = (uint64_t)s->n_head * s->head_dim, KV = (uint64_t)s->n_head_kv * s->head_dim;
    uint64_t F = s->n_ff, V = s->n_vocab;
    uint32_t base = tc->base, hi = tc->mix == 1 ? SL_GGML_TYPE_Q6_K : base;
    uint32_t exps = tc->mix == 2 ? SL_GGML_TYPE_MXFP4 : base;   /* the expert tensors' type */
    int qwen2 = !strcmp(s->arch, "qwen2") || !strcmp(s->arch, "qwen2moe");
    int gptoss = !strcmp(s->arch, "gpt-oss");   /* biases everywhere, attention sinks, post_attention_norm */
    int qwen3 = !strcmp(s->arch, "qwen3") || !strcmp(s->arch, "qwen3moe");
    int moe = s->n_expert > 0, shexp = moe && !strcmp(s->arch, "qwen2moe");
    uint64_t NE = (uint64_t)s->n_expert, FE = moe && s->n_ff_exp ? (uint64_t)s->n_ff_exp : F;
    int gemma = !strncmp(s->arch, "gemma", 5), gemma3 = !strcmp(s->arch, "gemma3");
    int phi3 = !strcmp(s->arch, "phi3");   /* fused q|k|v and gate|up, as Phi-3's converter writes them */
    dist norm = {1.0, 0.1}, bias = {0.0, 0.1};
    /* output (or tied embedding) scale sets how peaked next-token distributions are */
    dist out = {0.0, o->peak / sqrt((double)E)};
    /* attn_output and ffn_down write into the residual stream: at std
     * 1/sqrt(fan_in) each branch adds as much as the stream holds, so the
     * network amplifies small activation errors far more than a trained
     * model does; --branch-scale shrinks those two (1 keeps the old files). */
    dist branch_q = {0.0, o->branch_scale / sqrt((double)Q)};
    dist branch_f = {0.0, o->branch_scale / sqrt((double)F)};

    add(p, "token_embd.weight", s->tied ? hi : base, E, V, s->tied ? out : (dist){0.0, 1.0});
    for (int l = 0; l < s->n_layer; l++) {
        char n[64];
#define T(fmt) (snprintf(n, sizeof n, "blk.%d." fmt, l), n)
        int more = tc->mix == 1 && use_more_bits(l, s->n_layer);
        add(p, T("attn_norm.weight"), SL_GGML_TYPE_F32, E, 0, norm);
        if (phi3) {
            add(p, T("attn_qkv.weight"), base, E, Q + 2 * KV, (dist){0, 1 / sqrt((double)E)});
        } else {
            add(p, T("attn_q.weight"), base, E, Q, (dist){0, 1 / sqrt((double)E)});
            add(p, T("attn_k.weight"), base, E, KV, (dist){0, 1 / sqrt((double)E)});
            add(p, T("attn_v.weight"), more ? hi : base, E, KV, (dist){0, 1 / sqrt((double)E)});
        }
        if (qwen2 || gptoss) {
            add(p, T("attn_q.bias"), SL_GGML_TYPE_F32, Q, 0, bias);
            add(p, T("attn_k.bias"), SL_GGML_TYPE_F32, KV, 0, bias);
            add(p, T("attn_v.bias"), SL_GGML_TYPE_F32, KV, 0, bias);
        }
        if (qwen3 || gemma3) {
            add(p, T("attn_q_norm.weight"), SL_GGML_TYPE_F32, s->head_dim, 0, norm);
            add(p, T("attn_k_norm.weight"), SL_GGML_TYPE_F32, s->head_dim, 0, norm);
        }
        add(p, T("attn_output.weight"), base, Q, E, branch_q);
        if (gptoss) {
            add(p, T("attn_output.bias"), SL_GGML_TYPE_F32, E, 0, bias);
            /* per-head sink logits of the order of the scores, so the
             * softmax's extra mass is neither nothing nor everything */
            add(p, T("attn_sinks.weight"), SL_GGML_TYPE_F32, (uint64_t)s->n_head, 0, (dist){0.0, 1.0});
        }
        if (gemma)
            add(p, T("post_attention_norm.weight"), SL_GGML_TYPE_F32, E, 0, norm);
        /* gpt-oss names its FFN input norm post_attention_norm */
        add(p, gptoss ? T("post_attention_norm.weight") : T("ffn_norm.weight"), SL_GGML_TYPE_F32, E, 0, norm);
        if (moe) {
            /* the router stays F32 whatever the type, as llama.cpp's quantizer
             * keeps ffn_gate_inp; std 2/sqrt(E) spreads the routing
             * probabilities so the k-th and (k+1)-th experts are rarely near a tie */
            /* gpt-oss softmaxes over the chosen k only, so a near tie at the
             * k-th expert swaps a large weight: 3x the spread keeps such
             * ties rarer than one rounded activation code can cross */
            add(p, T("ffn_gate_inp.weight"), SL_GGML_TYPE_F32, E, NE, (dist){0, (gptoss ? 6 : 2) / sqrt((double)E)});
            add3(p, T("ffn_gate_exps.weight"), exps, E, FE, NE, (dist){0, 1 / sqrt((double)E)});
            add3(p, T("ffn_up_exps.weight"), exps, E, FE, NE, (dist){0, 1 / sqrt((double)E)});
            add3(p, T("ffn_down_exps.weight"), more ? hi : exps, FE, E, NE,
                 (dist){0, o->branch_scale / sqrt((double)FE)});
            if (gptoss) {   /* the router's and each expert's biases, F32 as llama.cpp keeps 1-D/2-D tensors */
                add(p, T("ffn_gate_inp.bias"), SL_GGML_TYPE_F32, NE, 0, bias);
                add(p, T("ffn_gate_exps.bias"), SL_GGML_TYPE_F32, FE, NE, bias);
                add(p, T("ffn_up_exps.bias"), SL_GGML_TYPE_F32, FE, NE, bias);
                add(p, T("ffn_down_exps.bias"), SL_GGML_TYPE_F32, E, NE, bias);
            }
            if (shexp) {
                uint64_t S = (uint64_t)s->n_ff_shexp;
                add(p, T("ffn_gate_inp_shexp.weight"), SL_GGML_TYPE_F32, E, 0, (dist){0, 1 / sqrt((double)E)});
                add(p, T("ffn_gate_shexp.weight"), base, E, S, (dist){0, 1 / sqrt((double)E)});
                add(p, T("ffn_up_shexp.weight"), base, E, S, (dist){0, 1 / sqrt((double)E)});
                add(p, T("ffn_down_shexp.weight"), more ? hi : base, S, E, (dist){0, o->branch_scale / sqrt((double)S)});
            }
        } else if (phi3) {
            add(p, T("ffn_up.weight"), base, E, 2 * F, (dist){0, 1 / sqrt((double)E)});
        } else {
            add(p, T("ffn_gate.weight"), base, E, F, (dist){0, 1 / sqrt((double)E)});
            add(p, T("ffn_up.weight"), base, E, F, (dist){0, 1 / sqrt((double)E)});
        }
        if (!moe)
            add(p, T("ffn_down.weight"), more ? hi : base, F, E, branch_f);
        if (gemma)
            add(p, T("post_ffw_norm.weight"), SL_GGML_TYPE_F32, E, 0, norm);
#undef T
    }
    add(p, "output_norm.weight", SL_GGML_TYPE_F32, E, 0, norm);
    if (!s->tied)
        add(p, "output.weight", hi, E, V, out);
    if (s->llama3_factor > 0) {
        add(p, "rope_freqs.weight", SL_GGML_TYPE_F32, s->head_dim / 2, 0, (dist){0, 0});
        p->t[p->n - 1].fixed = rope_freqs;
    }
    if (s->longrope_orig > 0) {   /* rope_freqs holds the long table, then the short one */
        int half = (s->n_rot ? s->n_rot : s->head_dim) / 2;
        add(p, "rope_factors_long.weight", SL_GGML_TYPE_F32, half, 0, (dist){0, 0});
        p->t[p->n - 1].fixed = rope_freqs;
        add(p, "rope_factors_short.weight", SL_GGML_TYPE_F32, half, 0, (dist){0, 0});
        p->t[p->n - 1].fixed = rope_freqs + half;
    }
}

/* Llama 3.x frequency scaling (low_freq_factor 1, high_freq_factor 4,
 * original context 8192), stored as divisors of each pair's frequency. */
static void llama3_rope_freqs(const shape *s, float *out)
{
    const double lo = 1.0, hi = 4.0, old_ctx = 8192.0, factor = s->llama3_factor;
    for (int i = 0; i < s->head_dim / 2; i++) {
        double freq = pow(s->rope_base, -2.0 * i / s->head_dim);
        double wavelen = 2 * M_PI / freq;
        if (wavelen < old_ctx / hi)
            out[i] = 1.0f;
        else if (wavelen > old_ctx / lo)
            out[i] = (float)factor;
        else {
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

/* Longrope tables shaped like Phi-3 128k's: short divisors near 1 (1 to
 * 1.25), long ones growing to 16 at the slowest pairs; out holds the long
 * table, then the short one (n_rot/2 each). */
static void longrope_factors(const shape *s, float *out)
{
    int half = (s->n_rot ? s->n_rot : s->head_dim) / 2;
    for (int i = 0; i < half; i++) {
        double f = half > 1 ? (double)i / (half - 1) : 0.0;
        out[i] = (float)(1.0 + 15.0 * f * f);
        out[half + i] = (float)(1.0 + 0.25 * f);
    }
}

/* ------------------------------------------------------------------------ */
/* parallel row generation                                                   */

typedef struct {
    const tensor_plan *t;
    uint64_t seed;
    size_t row_bytes;
    unsigned char *out;
    float *scratch;       /* (threads, ne0) */
    int failed;
} gen_job;

static void gen_row(void *ctx, int64_t r, int thread)
{
    gen_job *j = ctx;
    const tensor_plan *t = j->t;
    float *x = j->scratch + (size_t)thread * t->ne[0];
    if (t->fixed) {
        memcpy(x, t->fixed + r * t->ne[0], t->ne[0] * sizeof(float));
    } else {
        uint64_t s = j->seed ^ name_hash(t->name) ^ ((uint64_t)r * 0xd1b54a32d192ed03ull);
        for (uint64_t i = 0; i < t->ne[0]; i += 2) {
            double u1 = uniform(&s), u2 = uniform(&s), rad = sqrt(-2.0 * log(u1));
            x[i] = (float)(t->d.mean + t->d.std * rad * cos(2 * M_PI * u2));
            if (i + 1 < t->ne[0])
                x[i + 1] = (float)(t->d.mean + t->d.std * rad * sin(2 * M_PI * u2));
        }
    }
    if (sl_quant_quantize_row(t->type, x, j->out + (size_t)r * j->row_bytes, (int64_t)t->ne[0]) < 0)
        j->failed = 1;
}

/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mkmodel -o OUT.gguf [options]\n"
        "Writes a GGUF test model with seeded random weights.\n\n"
        "  --preset NAME        shape: tiny-llama, tiny-llama3, tiny-qwen2, tiny-qwen3, tiny-gemma2, tiny-gemma3,\n"
        "                       tiny-granite, tiny-phi3, tiny-phi3-longrope, tiny-qwen3moe, tiny-qwen2moe,\n"
        "                       tiny-mixtral, tiny-gpt-oss, 1b, 8b, 30b-a3b, mixtral-8x7b, gpt-oss-20b\n"
        "                       (default tiny-llama)\n"
        "  --arch A             llama | qwen2 | qwen3 | gemma2 | gemma3 | granite | phi3 | qwen2moe | qwen3moe\n"
        "                       | gpt-oss\n"
        "                       (overrides the preset's)\n"
        "  --n-expert N --n-expert-used K --n-ff-exp N --n-ff-shexp N\n"
        "                       experts per layer (0: dense; llama with experts is Mixtral), experts per token,\n"
        "                       expert width (qwen*moe), shared expert width (qwen2moe)\n"
        "  --window N           gemma: sliding window of the sliding layers (0: none)\n"
        "  --yarn-factor X --yarn-orig N\n"
        "                       YaRN rope scaling by X from an original context of N (any architecture;\n"
        "                       gpt-oss presets: 32 from 4096; X 0: none)\n"
        "  --n-embd N --n-layer N --n-head N --n-head-kv N --head-dim N --n-ff N --n-ctx N\n"
        "                       override the preset's dimensions\n"
        "  --n-rot N            rotated dims per head (even, <= head_dim; default: the preset's, else head_dim)\n"
        "  --tied 0|1           output weights tied to the token embedding\n"
        "  --type T             F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M Q5_0 Q4_1 Q5_1\n"
        "                       IQ4_NL Q8_1 Q2_K Q3_K IQ4_XS TQ1_0 TQ2_0\n"
        "                       MXFP4 (experts MXFP4, the rest Q8_0) (default F32)\n"
        "  --tokenizer FILE     tokenizer.json giving the vocabulary (required unless --n-vocab)\n"
        "  --tokenizer-config F tokenizer_config.json (chat template, BOS/EOS flags)\n"
        "  --n-vocab N          synthetic vocabulary of N tokens instead of a tokenizer\n"
        "  --peak X             output-layer scale: larger = more peaked next-token distributions (default 1)\n"
        "  --branch-scale X     std factor of attn_output and ffn_down (the residual branches' outputs);\n"
        "                       X < 1 makes each layer a small update of the stream, as in trained models (default 1)\n"
        "  --seed S             weight seed (default 1)\n"
        "  --threads N          threads (default: all cores)\n");
}

static int parse_int(const char *opt, const char *v, int lo, int hi)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end || x < lo || x > hi) {
        fprintf(stderr, "mkmodel: %s expects an integer in [%d, %d], got '%s'\n", opt, lo, hi, v);
        exit(2);
    }
    return (int)x;
}

static double parse_double(const char *opt, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (*v == 0 || *end || !(x > 0) || !isfinite(x)) {
        fprintf(stderr, "mkmodel: %s expects a number > 0, got '%s'\n", opt, v);
        exit(2);
    }
    return x;
}

static void parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->s = presets[0];
    o->type_name = "F32";
    o->seed = 1;
    o->peak = 1.0f;
    o->branch_scale = 1.0;
    o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mkmodel: %s needs a value\n", a);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--preset")) {
            size_t k;
            for (k = 0; k < sizeof presets / sizeof presets[0]; k++)
                if (!strcmp(presets[k].name, v))
                    break;
            if (k == sizeof presets / sizeof presets[0]) {
                fprintf(stderr, "mkmodel: unknown preset '%s'\n", v);
                exit(2);
            }
            o->s = presets[k];
        }
        else if (!strcmp(a, "--arch")) {
            if (strcmp(v, "llama") && strcmp(v, "qwen2") && strcmp(v, "qwen3") && strcmp(v, "gemma2") &&
                strcmp(v, "gemma3") && strcmp(v, "granite") && strcmp(v, "phi3") && strcmp(v, "qwen2moe") &&
                strcmp(v, "qwen3moe") && strcmp(v, "gpt-oss")) {
                fprintf(stderr, "mkmodel: unknown architecture '%s'\n", v);
                exit(2);
            }
            o->s.arch = v;
        }
        else if (!strcmp(a, "--n-embd")) o->s.n_embd = parse_int(a, v, 32, 65536);
        else if (!strcmp(a, "--n-layer")) o->s.n_layer = parse_int(a, v, 1, 512);
        else if (!strcmp(a, "--n-head")) o->s.n_head = parse_int(a, v, 1, 1024);
        else if (!strcmp(a, "--n-head-kv")) o->s.n_head_kv = parse_int(a, v, 1, 1024);
        else if (!strcmp(a, "--head-dim")) o->s.head_dim = parse_int(a, v, 2, 1024);
        else if (!strcmp(a, "--n-ff")) o->s.n_ff = parse_int(a, v, 32, 1 << 20);
        else if (!strcmp(a, "--n-ctx")) o->s.n_ctx = parse_int(a, v, 16, 1 << 24);
        else if (!strcmp(a, "--n-vocab")) o->s.n_vocab = parse_int(a, v, 4, 1 << 22);
        else if (!strcmp(a, "--tied")) o->s.tied = parse_int(a, v, 0, 1);
        else if (!strcmp(a, "--window")) o->s.window = parse_int(a, v, 0, 1 << 24);
        else if (!strcmp(a, "--yarn-factor")) o->s.yarn_factor = (float)parse_double(a, v);
        else if (!strcmp(a, "--yarn-orig")) o->s.yarn_orig = parse_int(a, v, 16, 1 << 24);
        else if (!strcmp(a, "--n-rot")) o->s.n_rot = parse_int(a, v, 2, 1024);
        else if (!strcmp(a, "--n-expert")) o->s.n_expert = parse_int(a, v, 0, 512);
        else if (!strcmp(a, "--n-expert-used")) o->s.n_expert_used = parse_int(a, v, 1, 512);
        else if (!strcmp(a, "--n-ff-exp")) o->s.n_ff_exp = parse_int(a, v, 32, 1 << 20);
        else if (!strcmp(a, "--n-ff-shexp")) o->s.n_ff_shexp = parse_int(a, v, 32, 1 << 20);
        else if (!strcmp(a, "--type")) o->type_name = v;
        else if (!strcmp(a, "--tokenizer")) o->tokenizer_json = v;
        else if (!strcmp(a, "--tokenizer-config")) o->tokenizer_config = v;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--peak")) o->peak = strtof(v, NULL);
        else if (!strcmp(a, "--branch-scale")) o->branch_scale = parse_double(a, v);
        else if (!strcmp(a, "--threads")) o->threads = parse_int(a, v, 1, 1024);
        else {
            fprintf(stderr, "mkmodel: unknown option %s\n", a);
            usage(stderr);
            exit(2);
        }
    }
    if (!o->out) {
        usage(stderr);
        exit(2);
    }
    if (o->s.n_head % o->s.n_head_kv || o->s.head_dim % 2 || o->s.n_rot % 2 || o->s.n_rot > o->s.head_dim ||
        !(o->peak > 0)) {
        fprintf(stderr, "mkmodel: n_head must be a multiple of n_head_kv, head_dim even, n_rot even and "
                "<= head_dim, peak > 0\n");
        exit(2);
    }
    if (o->s.yarn_factor != 0 && (!(o->s.yarn_factor >= 1.0f) || o->s.yarn_orig == 0)) {
        fprintf(stderr, "mkmodel: --yarn-factor needs a factor >= 1 and --yarn-orig\n");
        exit(2);
    }
    int moe_arch = !strcmp(o->s.arch, "qwen2moe") || !strcmp(o->s.arch, "qwen3moe") || !strcmp(o->s.arch, "gpt-oss");
    if ((moe_arch && o->s.n_expert == 0) || (o->s.n_expert > 0 && o->s.n_expert_used > o->s.n_expert) ||
        (o->s.n_expert > 0 && strcmp(o->s.arch, "llama") && !moe_arch) ||
        (!strcmp(o->s.arch, "qwen2moe") && o->s.n_ff_shexp == 0)) {
        fprintf(stderr, "mkmodel: experts need --arch llama, qwen2moe, qwen3moe or gpt-oss, which need them; "
                "n_expert_used <= n_expert; qwen2moe a --n-ff-shexp\n");
        exit(2);
    }
    if (moe_arch && o->s.n_ff_exp == 0)
        o->s.n_ff_exp = o->s.n_ff / (o->s.n_expert_used ? o->s.n_expert_used : 1);
    if (o->s.n_expert > 0 && o->s.n_expert_used == 0)
        o->s.n_expert_used = o->s.n_expert < 2 ? o->s.n_expert : 2;
    if (!o->tokenizer_json && o->s.n_vocab == 0) {
        fprintf(stderr, "mkmodel: give --tokenizer FILE or --n-vocab N\n");
        exit(2);
    }
}

/* A vocabulary of n tokens "<0>", "<1>", ... as an SPM-style tokenizer
 * (enough for id-level tests; real vocabularies come from --tokenizer). */
static int write_synthetic_vocab(sl_gguf_writer *w, int n)
{
    char **toks = malloc((size_t)n * sizeof *toks);
    float *scores = malloc((size_t)n * sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    if (!toks || !scores || !types)
        return -1;
    for (int i = 0; i < n; i++) {
        toks[i] = malloc(16);
        snprintf(toks[i], 16, "<%d>", i);
        scores[i] = -(float)i;
        types[i] = i < 3 ? 3 : 1;   /* control for <unk>,<s>,</s> slots, normal otherwise */
    }
    sl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, (uint64_t)n);
    sl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SL_GGUF_TYPE_FLOAT32, scores, (uint64_t)n);
    sl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SL_GGUF_TYPE_INT32, types, (uint64_t)n);
    sl_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    sl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    sl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    for (int i = 0; i < n; i++)
        free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    parse_args(argc, argv, &o);
    const type_choice *tc = NULL;
    for (size_t i = 0; i < sizeof type_choices / sizeof type_choices[0]; i++)
        if (!strcmp(type_choices[i].name, o.type_name))
            tc = &type_choices[i];
    if (!tc) {
        fprintf(stderr, "mkmodel: unknown type '%s'\n", o.type_name);
        return 2;
    }

    char err[SL_ERR_LEN];
    sl_gguf_writer *w = sl_gguf_writer_create();
    if (o.tokenizer_json) {
        /* a preset's embedding wider than the tokenizer (30b-a3b's 151,936 rows
         * with the llama3 tokenizer) gets [PAD] tokens up to its rows, as real
         * files have them, so the token list and the embedding agree */
        if (sl_vocab_json_to_gguf_min(o.tokenizer_json, o.tokenizer_config, (size_t)(o.s.n_vocab > 0 ? o.s.n_vocab : 0),
                                      w, err) < 0) {
            fprintf(stderr, "mkmodel: %s\n", err);
            return 2;
        }
        int64_t n = sl_gguf_writer_arr_len(w, "tokenizer.ggml.tokens");
        if (n <= 0) {
            fprintf(stderr, "mkmodel: %s gave no tokens\n", o.tokenizer_json);
            return 2;
        }
        if (o.s.n_vocab < n)
            o.s.n_vocab = (int)n;
    } else if (write_synthetic_vocab(w, o.s.n_vocab) < 0) {
        fprintf(stderr, "mkmodel: out of memory\n");
        return 1;
    }

    const shape *s = &o.s;
    const char *A = s->arch;
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s." suffix, A), key)
    sl_gguf_writer_set_str(w, "general.architecture", A);
    /* "phi3" spelt "phi_3": llama.cpp gives any file whose general.name
     * holds "phi3" or "phi-3" Phi-3's token attributes, looking tokens
     * such as <|endoftext|> up by text, and fails to load a vocabulary
     * without them (the synthetic one, or another model's) */
    char name[96], preset_name[48];
    const char *phi = strstr(s->name, "phi3");
    if (phi)
        snprintf(preset_name, sizeof preset_name, "%.*sphi_3%s", (int)(phi - s->name), s->name, phi + 4);
    else
        snprintf(preset_name, sizeof preset_name, "%s", s->name);
    snprintf(name, sizeof name, "sluice-test %s %s", preset_name, tc->name);
    sl_gguf_writer_set_str(w, "general.name", name);
    sl_gguf_writer_set_u32(w, "general.file_type", tc->file_type);
    sl_gguf_writer_set_u32(w, "general.quantization_version", 2);
    sl_gguf_writer_set_u32(w, K("context_length"), (uint32_t)s->n_ctx);
    sl_gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)s->n_embd);
    sl_gguf_writer_set_u32(w, K("block_count"), (uint32_t)s->n_layer);
    sl_gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)s->n_ff);
    sl_gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)s->n_head);
    sl_gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    sl_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f);
    sl_gguf_writer_set_f32(w, K("rope.freq_base"), s->rope_base);
    sl_gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)(s->n_rot ? s->n_rot : s->head_dim));
    if (s->head_dim * s->n_head != s->n_embd) {
        sl_gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)s->head_dim);
        sl_gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)s->head_dim);
    }
    sl_gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)s->n_vocab);
    if (!strncmp(A, "gemma", 5) || !strcmp(A, "gpt-oss"))
        sl_gguf_writer_set_u32(w, K("attention.sliding_window"), (uint32_t)s->window);
    if (s->yarn_factor > 0) {   /* as llama.cpp's converter writes gpt-oss's rope_scaling */
        sl_gguf_writer_set_str(w, K("rope.scaling.type"), "yarn");
        sl_gguf_writer_set_f32(w, K("rope.scaling.factor"), s->yarn_factor);
        sl_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)s->yarn_orig);
    }
    if (s->n_expert > 0) {
        sl_gguf_writer_set_u32(w, K("expert_count"), (uint32_t)s->n_expert);
        sl_gguf_writer_set_u32(w, K("expert_used_count"), (uint32_t)s->n_expert_used);
        if (strcmp(A, "llama"))
            sl_gguf_writer_set_u32(w, K("expert_feed_forward_length"), (uint32_t)s->n_ff_exp);
        if (!strcmp(A, "qwen2moe"))
            sl_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), (uint32_t)s->n_ff_shexp);
    }
    if (!strcmp(A, "gemma2")) {   /* Gemma 2's values, as its converted files carry them */
        sl_gguf_writer_set_f32(w, K("attn_logit_softcapping"), 50.0f);
        sl_gguf_writer_set_f32(w, K("final_logit_softcapping"), 30.0f);
    }
    if (s->longrope_orig > 0) {   /* Phi-3's converter: sqrt(1 + ln(scale) / ln(original context)) */
        double scale = (double)s->n_ctx / s->longrope_orig;
        sl_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)s->longrope_orig);
        sl_gguf_writer_set_f32(w, K("rope.scaling.attn_factor"),
                               (float)sqrt(1.0 + log(scale) / log((double)s->longrope_orig)));
    }
    if (!strcmp(A, "granite")) {
        /* Granite 3.x's own values: each far from 1, and the attention scale
         * (1/128) far from 1/sqrt(head_dim) = 1/8, so a scale applied at the
         * wrong place or not at all shows in the logits */
        sl_gguf_writer_set_f32(w, K("embedding_scale"), 12.0f);
        sl_gguf_writer_set_f32(w, K("residual_scale"), 0.22f);
        sl_gguf_writer_set_f32(w, K("attention.scale"), 0.0078125f);
        sl_gguf_writer_set_f32(w, K("logit_scale"), 8.0f);
    }
#undef K

    float *rope_freqs = calloc((size_t)s->head_dim + 1, sizeof(float));
    if (s->llama3_factor > 0)
        llama3_rope_freqs(s, rope_freqs);
    if (s->longrope_orig > 0)
        longrope_factors(s, rope_freqs);
    plan p = {0};
    build_plan(&o, tc, &p, rope_freqs);
    for (size_t i = 0; i < p.n; i++) {
        const tensor_plan *t = &p.t[i];
        if (sl_ggml_row_bytes(t->type, t->ne[0]) == 0) {
            fprintf(stderr, "mkmodel: tensor %s: row of %llu is not a multiple of %s's block\n", t->name,
                    (unsigned long long)t->ne[0], sl_ggml_type_name(t->type));
            return 2;
        }
        if (sl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne) < 0) {
            fprintf(stderr, "mkmodel: cannot add tensor %s\n", t->name);
            return 1;
        }
    }
    if (sl_gguf_writer_begin(w, o.out, err) < 0) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return 1;
    }

    sl_threadpool *pool;
    if (sl_threadpool_create(o.threads, &pool) < 0) {
        fprintf(stderr, "mkmodel: cannot start %d threads\n", o.threads);
        return 1;
    }
    uint64_t max_bytes = 0, max_ne0 = 0;
    for (size_t i = 0; i < p.n; i++) {
        uint64_t b = sl_gguf_writer_tensor_bytes(w, i);
        max_bytes = b > max_bytes ? b : max_bytes;
        max_ne0 = p.t[i].ne[0] > max_ne0 ? p.t[i].ne[0] : max_ne0;
    }
    unsigned char *buf = malloc(max_bytes);
    float *scratch = malloc((size_t)o.threads * max_ne0 * sizeof(float));
    if (!buf || !scratch) {
        fprintf(stderr, "mkmodel: out of memory for a %llu-byte tensor\n", (unsigned long long)max_bytes);
        return 1;
    }
    for (size_t i = 0; i < p.n; i++) {
        gen_job j = {.t = &p.t[i], .seed = o.seed, .row_bytes = sl_ggml_row_bytes(p.t[i].type, p.t[i].ne[0]),
                     .out = buf, .scratch = scratch};
        sl_threadpool_run(pool, gen_row, &j, (int64_t)(p.t[i].ne[1] * p.t[i].ne[2]));
        if (j.failed) {
            fprintf(stderr, "mkmodel: quantizing %s to %s failed\n", p.t[i].name, sl_ggml_type_name(p.t[i].type));
            return 1;
        }
        if (sl_gguf_writer_write_tensor(w, i, buf, err) < 0 ) {
            fprintf(stderr, "mkmodel: %s\n", err);
            return 1;
        }
    }
    if (sl_gguf_writer_finish(w, err) < 0) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return 1;
    }
    sl_threadpool_destroy(pool);
    sl_gguf_writer_destroy(w);
    free(buf);
    free(scratch);
    free(rope_freqs);
    free(p.t);
    return 0;
}
