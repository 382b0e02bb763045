/* model/model.h: a model description: hyperparameters and weight views bound
 * from a GGUF file, for the architectures sluice computes.
 * Where:     the worker and `sluice generate` load one; backends read it.
 * Ownership: weights point into the GGUF mapping, which the model owns: it
 *            lives until sl_model_destroy(). Read-only after load, so backend
 *            threads share it freely.
 * Errors:    sl_model_load() fills err with one line naming the file and the
 *            key or tensor at fault. */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "shared/status.h"

enum sl_arch {
    SL_ARCH_LLAMA,   /* Llama 2/3.x, Mistral, TinyLlama, SmolLM: adjacent-pair rope */
    SL_ARCH_QWEN2,   /* QKV biases, NEOX-style (half-split) rope */
    SL_ARCH_QWEN3,   /* per-head q/k RMS norms, NEOX-style rope, no biases */
    SL_ARCH_GEMMA2,  /* scaled embeddings, post-norms, GELU FFN, soft-capped scores and logits,
                      * sliding window on every other layer */
    SL_ARCH_GEMMA3,  /* gemma2's layout with per-head q/k norms and no soft-capping; five
                      * sliding-window layers (own rope base) to one global */
    SL_ARCH_GRANITE, /* IBM Granite 3.x dense: llama's layout with four scalars from the file
                      * (embedding, residual, attention and logit scales) */
    SL_ARCH_PHI3,    /* Phi-3, Phi-3.5 mini, Phi-4 mini: fused qkv and gate|up matrices (split into row
                      * views at load), NEOX rope, possibly partial, longrope on the long files */
    SL_ARCH_QWEN2MOE, /* Qwen1.5-MoE, Qwen2-57B-A14B: qwen2's attention, a MoE FFN (weights not
                       * renormalised) plus a sigmoid-gated shared expert */
    SL_ARCH_QWEN3MOE, /* Qwen3-30B-A3B, -235B-A22B: qwen3's attention, a MoE FFN (top-k weights
                       * renormalised to sum 1) */
    SL_ARCH_GPT_OSS,  /* gpt-oss-20b/120b: q/k/v/o biases, attention sinks, a sliding window on even
                       * layers, YaRN rope; a MoE FFN with biases, top-k of the router logits then
                       * softmax over those k, clamped SwiGLU experts (model_gptoss.c) */
};                    /* Mixtral is SL_ARCH_LLAMA with hp.n_expert > 0 (renormalised top-k) */

/* The most experts a layer may have: llama.cpp's limit too (LLAMA_MAX_EXPERTS). */
#define SL_MOE_MAX_EXPERTS 512

enum sl_ffn_act {
    SL_FFN_SILU,        /* silu(gate) * up */
    SL_FFN_GELU_TANH,   /* gelu(gate) * up, GELU's tanh approximation */
    SL_FFN_SWIGLU_OAI,  /* gpt-oss: x * sigmoid(1.702 x) * (y + 1), x = min(gate, 7), y = clamp(up, -7, 7) */
};

/* How a MoE layer turns router logits into expert weights. */
enum sl_moe_gating {
    SL_MOE_GATING_SOFTMAX,       /* softmax over all experts, then the top k (optionally renormalised) */
    SL_MOE_GATING_TOPK_SOFTMAX,  /* the top k logits, then softmax over those k (gpt-oss) */
};

enum sl_rope_style {
    SL_ROPE_ADJACENT,   /* rotate (x[2i], x[2i+1]): ggml's "normal" mode, as llama GGUFs are stored */
    SL_ROPE_NEOX,       /* rotate (x[i], x[i + d/2]) */
};

/* A weight matrix stored row-major in its GGUF type: ne1 rows of ne0
 * elements, each row `row_bytes` bytes. y = W x means y[r] = dot(row r, x).
 * It may be a row range of a larger tensor (phi3's fused attn_qkv and
 * ffn_up): every type's rows are independent, so a range is a matrix. */
typedef struct {
    uint32_t type;          /* enum sl_ggml_type */
    int64_t ne0, ne1;       /* (in, out) */
    size_t row_bytes;
    const void *data;       /* NULL when the model has no such tensor */
} sl_weight;

/* A mixture-of-experts FFN (model/model_moe.c binds it). Each expert e is
 * swiglu: down[e](silu(gate[e] x) * up[e] x); the per-expert views point
 * into the file's 3-D tensors (ne0, ne1, n_expert), one matrix after
 * another. Routing (kernels/cpu/ops.h sl_cpu_moe_route): softmax over all
 * router outputs, the top n_expert_used, optionally renormalised. */
typedef struct {
    sl_weight router;                /* ffn_gate_inp: (n_embd -> n_expert) */
    sl_weight *gate, *up;            /* n_expert views each: (n_embd -> n_ff_exp) */
    sl_weight *down;                 /* n_expert views: (n_ff_exp -> n_embd) */
    sl_weight sh_gate, sh_up;        /* qwen2moe's shared expert: (n_embd -> n_ff_shexp), data NULL otherwise */
    sl_weight sh_down;               /* (n_ff_shexp -> n_embd) */
    sl_weight sh_gate_inp;           /* (n_embd -> 1): its output's sigmoid scales the shared expert */
    const float *router_b;           /* gpt-oss: (n_expert) added to the router logits, else NULL */
    const float *gate_b, *up_b;      /* gpt-oss: (n_expert, n_ff_exp) expert e's biases at e*n_ff_exp, else NULL */
    const float *down_b;             /* gpt-oss: (n_expert, n_embd), else NULL */
} sl_moe;

typedef struct {
    const float *attn_norm;          /* (n_embd) */
    sl_weight wq, wk, wv;            /* (n_embd -> n_head*head_dim), (n_embd -> n_head_kv*head_dim) x2 */
    const float *bq, *bk, *bv;       /* qwen2 biases, NULL otherwise */
    const float *q_norm, *k_norm;    /* qwen3/gemma3 per-head RMS norm weights (head_dim), NULL otherwise */
    sl_weight wo;                    /* (n_head*head_dim -> n_embd) */
    const float *bo;                 /* gpt-oss: (n_embd) attn_output bias, else NULL */
    const float *attn_sinks;         /* gpt-oss: (n_head) per-head logit that joins each softmax's
                                      * denominator only (no value), else NULL */
    const float *post_attn_norm;     /* gemma: RMS norm of the attention output before the residual add, or NULL */
    const float *ffn_norm;           /* (n_embd) */
    sl_weight w_gate, w_up;          /* (n_embd -> n_ff); data NULL on a MoE layer */
    sl_weight w_down;                /* (n_ff -> n_embd); data NULL on a MoE layer */
    sl_moe moe;                      /* MoE layer: moe.gate != NULL (then the three above are unused) */
    const float *post_ffn_norm;      /* gemma: RMS norm of the FFN output before the residual add, or NULL */
    int32_t window;                  /* sliding window: position p attends to (p - window, p]; 0 = all of [0, p] */
    float rope_freq_base;            /* this layer's rope base and linear scale: the file's, or */
    float rope_freq_scale;           /* hp's *_swa pair on a sliding-window layer */
} sl_layer;

typedef struct {
    enum sl_arch arch;
    enum sl_rope_style rope_style;
    int32_t n_vocab;
    int32_t n_ctx_train;    /* context length the model was trained for */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;       /* per-head size of q and k (and v) */
    int32_t n_ff;
    int32_t n_rot;          /* rotated dims per head (rope.dimension_count), <= head_dim */
    float norm_eps;
    float rope_freq_base;
    float rope_freq_scale; /* 1/factor for linear rope scaling, else 1 */
    int32_t n_ctx_orig;    /* longrope: rope.scaling.original_context_length (else n_ctx_train) */
    float rope_attn_factor; /* rope.scaling.attn_factor: cos and sin of every rotated pair are
                             * multiplied by it (longrope's magnitude correction), else 1 */
    float rope_freq_base_swa;   /* rope base and scale of sliding-window layers (gemma3: 10000 and 1, */
    float rope_freq_scale_swa;  /* fixed by the architecture; else the global pair) */
    int32_t sliding_window;     /* window of the sliding-window layers; 0 = none */
    float embd_scale;           /* token embeddings are multiplied by this (gemma: sqrt(n_embd)), else 1 */
    float attn_scale;           /* q.k multiplier: 1/sqrt(head_dim) unless the architecture says otherwise */
    float attn_softcap;         /* > 0: scores become cap * tanh(score / cap) (gemma2); 0 = none */
    float final_softcap;        /* > 0: the same on the output logits (gemma2); 0 = none */
    float residual_scale;       /* each block's attention and FFN output is multiplied by this before
                                 * its residual add (granite.residual_scale), else 1 */
    float logit_mul;            /* output logits are multiplied by this (granite: 1/logit_scale), else 1 */
    enum sl_ffn_act ffn_act;
    int32_t n_expert;           /* experts per MoE layer ({arch}.expert_count); 0 = dense model */
    int32_t n_expert_used;      /* experts each token is routed to (expert_used_count), 1..n_expert */
    int32_t n_ff_exp;           /* each expert's hidden size (qwen*moe: expert_feed_forward_length; llama: n_ff) */
    int32_t n_ff_shexp;         /* shared expert's hidden size (qwen2moe), else 0 */
    bool moe_norm_w;            /* renormalise the top-k weights to sum 1 (qwen3moe, Mixtral; not qwen2moe) */
    enum sl_moe_gating moe_gating;
    float yarn_factor;          /* > 0: YaRN rope scaling (rope.scaling.type yarn) by this factor, from
                                 * n_ctx_orig; m->rope_yarn then holds its per-pair divisors and
                                 * rope_attn_factor its magnitude correction (rope_freq_scale stays 1) */
    float yarn_beta_fast, yarn_beta_slow; /* its correction range (rope.scaling.yarn_beta_*, 32 and 1) */
} sl_hparams;

typedef struct sl_model {
    sl_hparams hp;
    char name[128];                  /* general.name or the file's base name */
    char arch_name[16];
    const float *rope_freqs;         /* (n_rot/2) llama3 frequency divisors, or NULL */
    const float *rope_factors_long;  /* (n_rot/2) longrope divisors past n_ctx_orig, or NULL */
    const float *rope_factors_short; /* (n_rot/2) longrope divisors within it; both or neither */
    float *rope_yarn;                /* (n_rot/2) YaRN divisors, owned (computed at load), or NULL */
    sl_weight tok_embd;              /* (n_embd, n_vocab): rows are embeddings */
    const float *output_norm;        /* (n_embd) */
    sl_weight output;                /* (n_embd -> n_vocab); same as tok_embd when tied */
    bool tied_output;
    sl_layer *layers;                /* n_layer */
    sl_weight *experts;              /* (n_layer, 3, n_expert) views the layers' sl_moe point into, or NULL */
    sl_gguf *gguf;                   /* owned */
    uint64_t weight_bytes;           /* all tensor data the forward pass reads */
} sl_model;

/* Opens `path` and binds an architecture. On failure *out is NULL and err
 * says what is wrong (unknown architecture, a missing key or tensor, a shape
 * mismatch, an unsupported tensor type with the tensor's name). */
sl_status sl_model_load(const char *path, sl_model **out, char err[SL_ERR_LEN]);

/* Binds an already opened file; takes ownership of g on success only. */
sl_status sl_model_from_gguf(sl_gguf *g, sl_model **out, char err[SL_ERR_LEN]);

void sl_model_destroy(sl_model *m);

/* The per-pair rope frequency divisors a backend serving sequences of up
 * to max_ctx positions applies (n_rot/2 floats), or NULL for none: the
 * llama3 table; for longrope, the long table when max_ctx exceeds the
 * original context and the short one otherwise (llama.cpp's rule, which
 * looks at the configured context, not each position, so a sequence's
 * cached keys never need re-rotating); YaRN's table (applied at every
 * context, as llama.cpp does). Inline: the CUDA library, which
 * links no model code, calls it too. */
static inline const float *sl_model_rope_divisors(const sl_model *m, int32_t max_ctx)
{
    if (m->rope_factors_long)
        return max_ctx > m->hp.n_ctx_orig ? m->rope_factors_long : m->rope_factors_short;
    if (m->rope_yarn)
        return m->rope_yarn;
    return m->rope_freqs;
}

/* True when the model's FFNs are mixtures of experts. */
static inline bool sl_model_is_moe(const sl_model *m)
{
    return m->hp.n_expert > 0;
}

/* Multiply-accumulate count per token (for tok/s vs roofline figures). */
uint64_t sl_model_flops_per_token(const sl_model *m);

#endif
