/* model/model_gptoss.c: what gpt-oss adds to the shared binding, and YaRN
 * rope scaling (which gpt-oss's files use; any architecture may).
 * Runs on the load path only (model.c calls in).
 *
 * gpt-oss as llama.cpp defines it (src/models/openai-moe.cpp, its graph's
 * build_attn and build_moe_ffn): q/k/v and attn_output biases; per head a
 * learned sink logit blk.N.attn_sinks that joins the attention softmax's
 * denominator only; a sliding window (attention.sliding_window, 128 in the
 * released files) on the even layers (llama.cpp's swa pattern 2: layer il
 * slides when il % 2 == 0); NEOX rope with YaRN; the FFN input norm is
 * named post_attention_norm; every FFN a MoE: router logits W x + b, the
 * expert_used_count largest, softmax over those k (no renormalisation);
 * experts with biases and the clamped SwiGLU (alpha 1.702, limit 7, both
 * constants in llama.cpp, not file keys); no shared expert. The attention
 * scale is 1/sqrt(head_dim).
 *
 * YaRN, as llama.cpp computes it (llama-context.cpp's cparams, ggml's
 * rope_yarn): with s = 1/factor and pair i of the n_rot rotated dims, the
 * angle pos * base^(-2i/n_rot) is multiplied by s + (1 - s) * r(i), where
 * the ramp r is 1 below the correction dim of beta_fast and 0 above that of
 * beta_slow (each floor/ceil-rounded, as ggml does; HF's "truncate": false
 * would not round), and cos/sin are multiplied by 1 + 0.1 ln(factor) (and
 * rope.scaling.attn_factor). llama.cpp applies it at every context length,
 * so does sluice. Both become what the backends already apply: a per-pair
 * divisor table (sl_model_rope_divisors) and rope_attn_factor; the divisor
 * is rounded to float, so angles differ from ggml's float arithmetic by a
 * few ulp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/model_bind.h"

sl_status sl_bind_yarn(sl_binder *b, sl_hparams *hp, float *factor)
{
    sl_status rc;
    float ext = 1.0f;
    if ((rc = sl_bind_float(b, "rope.scaling.factor", true, 1.0, 1e4, 1.0f, factor)) < 0 ||
        (rc = sl_bind_float(b, "rope.scaling.yarn_beta_fast", false, 0.0, 1e4, 32.0f, &hp->yarn_beta_fast)) < 0 ||
        (rc = sl_bind_float(b, "rope.scaling.yarn_beta_slow", false, 0.0, 1e4, 1.0f, &hp->yarn_beta_slow)) < 0 ||
        (rc = sl_bind_float(b, "rope.scaling.yarn_ext_factor", false, -1.0, 1e4, 1.0f, &ext)) < 0)
        return rc;
    /* the converter writes no ext_factor for gpt-oss; llama.cpp then uses 1
     * (a negative value means the same); others would blend differently */
    if (ext != 1.0f && ext >= 0.0f) {
        snprintf(b->err, SL_ERR_LEN, "%s: key %s.rope.scaling.yarn_ext_factor = %g is not supported (1 is)",
                 sl_gguf_path(b->g), b->arch, ext);
        return SL_EUNSUPPORTED;
    }
    if (hp->yarn_beta_fast <= hp->yarn_beta_slow)
        return sl_bind_fail(b, "key %s.rope.scaling.yarn_beta_fast (%g) must exceed yarn_beta_slow (%g)", b->arch,
                            hp->yarn_beta_fast, hp->yarn_beta_slow);
    hp->yarn_factor = *factor;
    return SL_OK;
}

/* ggml_rope_yarn_corr_dim, in float as ggml has it: the rotated dim whose
 * wavelength makes `rot` turns over the original context. */
static float corr_dim(int n_dims, int n_ctx_orig, float rot, float base)
{
    return (float)n_dims * logf((float)n_ctx_orig / (rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

sl_status sl_model_yarn_table(sl_model *m, char err[SL_ERR_LEN])
{
    sl_hparams *hp = &m->hp;
    if (hp->yarn_factor <= 0.0f)
        return SL_OK;
    int half = hp->n_rot / 2;
    if (!(m->rope_yarn = malloc((size_t)half * sizeof *m->rope_yarn))) {
        snprintf(err, SL_ERR_LEN, "%s: out of memory", sl_gguf_path(m->gguf));
        return SL_ENOMEM;
    }
    float lo = floorf(corr_dim(hp->n_rot, hp->n_ctx_orig, hp->yarn_beta_fast, hp->rope_freq_base));
    float hi = ceilf(corr_dim(hp->n_rot, hp->n_ctx_orig, hp->yarn_beta_slow, hp->rope_freq_base));
    lo = lo > 0.0f ? lo : 0.0f;
    hi = hi < (float)(hp->n_rot - 1) ? hi : (float)(hp->n_rot - 1);
    double s = 1.0 / hp->yarn_factor;
    for (int i = 0; i < half; i++) {
        float y = ((float)i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
        double r = 1.0 - (y < 0.0f ? 0.0 : y > 1.0f ? 1.0 : (double)y);
        m->rope_yarn[i] = (float)(1.0 / (s * (1.0 - r) + r));
    }
    hp->rope_attn_factor *= 1.0f + 0.1f * logf(hp->yarn_factor);
    return SL_OK;
}

sl_status sl_bind_gptoss_hparams(sl_binder *b, sl_hparams *hp)
{
    sl_status rc;
    if ((rc = sl_bind_int(b, "attention.sliding_window", true, 1, 1 << 24, 0, &hp->sliding_window)) < 0)
        return rc;
    char key[128];
    /* llama.cpp reads a layer pattern here when present; released files
     * carry none, and sluice computes only the default alternation */
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", b->arch);
    if (sl_gguf_find_key(b->g, key) >= 0) {
        snprintf(b->err, SL_ERR_LEN, "%s: key %s is not supported (sluice slides the even layers, "
                 "llama.cpp's default)", sl_gguf_path(b->g), key);
        return SL_EUNSUPPORTED;
    }
    float base_swa = hp->rope_freq_base;
    if ((rc = sl_bind_float(b, "rope.freq_base_swa", false, 1.0, 1e12, hp->rope_freq_base, &base_swa)) < 0)
        return rc;
    if (base_swa != hp->rope_freq_base) {   /* the YaRN table is computed at one base */
        snprintf(b->err, SL_ERR_LEN, "%s: key %s.rope.freq_base_swa = %g differs from rope.freq_base: "
                 "not supported", sl_gguf_path(b->g), b->arch, base_swa);
        return SL_EUNSUPPORTED;
    }
    hp->ffn_act = SL_FFN_SWIGLU_OAI;
    return SL_OK;
}

sl_status sl_bind_gptoss_layer(sl_binder *b, const sl_hparams *hp, int32_t il, sl_layer *L, uint64_t *bytes)
{
    char name[96];
    sl_status rc;
    snprintf(name, sizeof name, "blk.%d.attn_output.bias", il);
    if ((rc = sl_bind_vector(b, name, hp->n_embd, true, &L->bo, bytes)) < 0)
        return rc;
    snprintf(name, sizeof name, "blk.%d.attn_sinks.weight", il);
    return sl_bind_vector(b, name, hp->n_head, true, &L->attn_sinks, bytes);
}
