/* model/model_bind.h: the binding helpers model.c, model_moe.c and
 * model_gptoss.c share (the basic ones in model_bind.c; internal to model/:
 * nothing outside the folder includes it).
 * Where:     on the load path only, single-threaded.
 * Ownership: a binder borrows the open file and the caller's error buffer.
 * Errors:    every helper returns SL_OK or a negative status with one line
 *            in b->err naming the file and the key or tensor at fault. */
#ifndef SL_MODEL_BIND_H
#define SL_MODEL_BIND_H

#include <stdbool.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/model.h"

typedef struct {
    const sl_gguf *g;
    const char *arch;   /* the key prefix: "llama", "qwen3moe", ... */
    char *err;          /* SL_ERR_LEN bytes */
} sl_binder;

/* Writes "path: <fmt...>" to b->err; returns SL_EFORMAT. */
__attribute__((format(printf, 2, 3)))
sl_status sl_bind_fail(sl_binder *b, const char *fmt, ...);

/* {arch}.suffix as an integer in [lo, hi] into *out; when absent and not
 * required, *out = def. SL_EFORMAT for a missing required key, a wrong
 * type or a value out of range. */
sl_status sl_bind_int(sl_binder *b, const char *suffix, bool required, int64_t lo, int64_t hi, int32_t def,
                      int32_t *out);

/* The same for a float key (finite, in [lo, hi]). */
sl_status sl_bind_float(sl_binder *b, const char *suffix, bool required, double lo, double hi, float def,
                        float *out);

/* Finds tensor `name` and checks its shape (ne1 = 0: 1-D) and type (F32
 * only, or any type sluice computes). *out = NULL when absent and not
 * required (SL_OK), or on failure: SL_EFORMAT (missing, shape) or
 * SL_EUNSUPPORTED (type). */
sl_status sl_bind_tensor(sl_binder *b, const char *name, int64_t ne0, int64_t ne1, bool required, bool f32_only,
                         const sl_gguf_tensor **out);

/* A matrix (ne0 -> ne1) of any supported type into *w (zeroed when absent
 * or on failure); its bytes are added to *bytes. */
sl_status sl_bind_weight(sl_binder *b, const char *name, int64_t ne0, int64_t ne1, bool required, sl_weight *w,
                         uint64_t *bytes);

/* An F32 vector of n elements into *v (NULL when absent or on failure). */
sl_status sl_bind_vector(sl_binder *b, const char *name, int64_t n, bool required, const float **v,
                         uint64_t *bytes);

/* model_moe.c. The MoE hyperparameters of hp->arch into hp (n_expert 0 and
 * the rest zero for a dense llama file): expert_count (1..SL_MOE_MAX_EXPERTS,
 * required by qwen2moe/qwen3moe), expert_used_count (1..expert_count),
 * expert_feed_forward_length, expert_shared_feed_forward_length, and the
 * architecture's renormalisation rule. Runs after the dense keys, before
 * the tensors. */
sl_status sl_bind_moe_hparams(sl_binder *b, sl_hparams *hp);

/* Binds layer il's MoE tensors into L->moe, the per-expert views into
 * views[0 .. 3 * n_expert) (gate, up, down): router, the three 3-D expert
 * tensors (ne0, ne1, n_expert) of one type, qwen2moe's shared expert and
 * gpt-oss's router and expert biases (F32). */
sl_status sl_bind_moe_layer(sl_binder *b, const sl_hparams *hp, int32_t il, sl_layer *L, sl_weight *views,
                            uint64_t *bytes);

/* model_gptoss.c. rope.scaling.type = yarn: rope.scaling.factor (required,
 * >= 1) into *factor and hp->yarn_factor, yarn_beta_fast/slow (default 32
 * and 1) into hp; yarn_ext_factor other than 1 is SL_EUNSUPPORTED. */
sl_status sl_bind_yarn(sl_binder *b, sl_hparams *hp, float *factor /* OUT */);

/* After the hyperparameters: m->rope_yarn (n_rot/2 divisors, owned) and
 * YaRN's magnitude factor into hp->rope_attn_factor; nothing without YaRN.
 * SL_ENOMEM (err filled). */
sl_status sl_model_yarn_table(sl_model *m, char err[SL_ERR_LEN]);

/* gpt-oss's derived hyperparameters: attention.sliding_window (required),
 * the clamped SwiGLU; refuses a sliding_window_pattern key or a distinct
 * rope.freq_base_swa (SL_EUNSUPPORTED). */
sl_status sl_bind_gptoss_hparams(sl_binder *b, sl_hparams *hp);

/* gpt-oss's per-layer attention tensors: attn_output.bias (n_embd) and
 * attn_sinks.weight (n_head), both required, F32. */
sl_status sl_bind_gptoss_layer(sl_binder *b, const sl_hparams *hp, int32_t il, sl_layer *L, uint64_t *bytes);

#endif
