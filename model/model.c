/* model/model.c: binds a GGUF file's hyperparameters and tensors into an
 * sl_model for the llama (and Mixtral), qwen2, qwen3, gemma2, gemma3,
 * granite, phi3, qwen2moe, qwen3moe and gpt-oss architectures (the MoE
 * FFNs in model_moe.c, gpt-oss's extras and YaRN in model_gptoss.c).
 * Every hyperparameter comes from metadata and is range-checked; every tensor
 * is checked for presence, exact shape and a supported type before any
 * backend sees it, so compute code never validates. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/model.h"
#include "model/model_bind.h"

static bool is_gemma(enum sl_arch a)
{
    return a == SL_ARCH_GEMMA2 || a == SL_ARCH_GEMMA3;
}

/* Granite's four scalars, as llama.cpp reads them: logit_scale is
 * required (the logits are divided by it); the other three are optional,
 * and absent or 0 means llama's behaviour (no embedding or residual
 * scaling, scores scaled by 1/sqrt(head_dim)). llama.cpp turns rope off
 * when rope.scaling.finetuned is false; no Granite 3.x file sets that, so
 * sluice refuses such a file rather than compute without positions. */
static sl_status bind_granite(sl_binder *b, sl_hparams *hp)
{
    sl_status rc;
    float logit_scale = 1.0f, embd = 0.0f, residual = 0.0f, attn = 0.0f;
    if ((rc = sl_bind_float(b, "logit_scale", true, 1e-6, 1e6, 1.0f, &logit_scale)) < 0 ||
        (rc = sl_bind_float(b, "embedding_scale", false, 0.0, 1e6, 0.0f, &embd)) < 0 ||
        (rc = sl_bind_float(b, "residual_scale", false, 0.0, 1e6, 0.0f, &residual)) < 0 ||
        (rc = sl_bind_float(b, "attention.scale", false, 0.0, 1e6, 0.0f, &attn)) < 0)
        return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", b->arch);
    bool rope_on = true;
    if (sl_gguf_find_key(b->g, key) >= 0 && sl_gguf_get_bool(b->g, key, &rope_on) < 0)
        return sl_bind_fail(b, "key %s must be a bool", key);
    if (!rope_on) {
        snprintf(b->err, SL_ERR_LEN, "%s: %s = false (no rope) is not supported", sl_gguf_path(b->g), key);
        return SL_EUNSUPPORTED;
    }
    hp->logit_mul = 1.0f / logit_scale;
    if (embd != 0.0f)
        hp->embd_scale = embd;
    if (residual != 0.0f)
        hp->residual_scale = residual;
    if (attn != 0.0f)
        hp->attn_scale = attn;
    return SL_OK;
}

/* What llama.cpp derives per architecture rather than reads: the gemma
 * embedding scale, GELU, the sliding-window layout and its rope, the
 * attention scale (Gemma's 27B sizes scale by n_embd/n_head instead of
 * head_dim) and gemma2's soft caps (keys optional, llama.cpp's defaults);
 * granite's scalars. phi3 files may carry attention.sliding_window, which
 * llama.cpp ignores (its Phi-3 support runs full attention): so does
 * sluice, computing what llama.cpp computes. */
static sl_status bind_family(sl_binder *b, sl_hparams *hp)
{
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    hp->sliding_window = 0;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->attn_softcap = hp->final_softcap = 0.0f;
    hp->residual_scale = 1.0f;
    hp->logit_mul = 1.0f;
    hp->ffn_act = SL_FFN_SILU;
    if (hp->arch == SL_ARCH_GRANITE)
        return bind_granite(b, hp);
    if (hp->arch == SL_ARCH_GPT_OSS)
        return sl_bind_gptoss_hparams(b, hp);
    if (!is_gemma(hp->arch))
        return SL_OK;
    bool g2 = hp->arch == SL_ARCH_GEMMA2;
    sl_status rc;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->ffn_act = SL_FFN_GELU_TANH;
    if ((rc = sl_bind_int(b, "attention.sliding_window", !g2, 0, 1 << 24, 4096, &hp->sliding_window)) < 0)
        return rc;
    if (g2) {
        if ((rc = sl_bind_float(b, "attn_logit_softcapping", false, 1e-3, 1e6, 50.0f, &hp->attn_softcap)) < 0 ||
            (rc = sl_bind_float(b, "final_logit_softcapping", false, 1e-3, 1e6, 30.0f, &hp->final_softcap)) < 0)
            return rc;
    } else {
        hp->rope_freq_base_swa = 10000.0f;
        hp->rope_freq_scale_swa = 1.0f;
    }
    if (hp->n_layer == (g2 ? 46 : 62))
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    return SL_OK;
}

/* Gemma2 and gpt-oss: every other layer slides, starting with layer 0;
 * gemma3: five of every six (layers 5, 11, ... are global). */
static bool layer_slides(const sl_hparams *hp, int32_t il)
{
    if (hp->sliding_window == 0)
        return false;
    if (hp->arch == SL_ARCH_GEMMA2 || hp->arch == SL_ARCH_GPT_OSS)
        return il % 2 == 0;
    if (hp->arch == SL_ARCH_GEMMA3)
        return il % 6 < 5;
    return false;
}

static sl_status bind_hparams(sl_binder *b, sl_hparams *hp)
{
    sl_status rc;
    if ((rc = sl_bind_int(b, "context_length", true, 1, 1 << 24, 0, &hp->n_ctx_train)) < 0 ||
        (rc = sl_bind_int(b, "embedding_length", true, 1, 65536, 0, &hp->n_embd)) < 0 ||
        (rc = sl_bind_int(b, "block_count", true, 1, 1024, 0, &hp->n_layer)) < 0 ||
        (rc = sl_bind_int(b, "feed_forward_length", true, 1, 1 << 20, 0, &hp->n_ff)) < 0 ||
        (rc = sl_bind_int(b, "attention.head_count", true, 1, 4096, 0, &hp->n_head)) < 0 ||
        (rc = sl_bind_int(b, "attention.head_count_kv", false, 1, 4096, hp->n_head, &hp->n_head_kv)) < 0)
        return rc;
    if (hp->n_head % hp->n_head_kv != 0)
        return sl_bind_fail(b, "%s.attention.head_count is not a multiple of head_count_kv (%d)", b->arch,
                    hp->n_head_kv);
    int32_t def_head_dim = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    int32_t v_dim = 0;
    if ((rc = sl_bind_int(b, "attention.key_length", def_head_dim == 0, 2, 1024, def_head_dim, &hp->head_dim)) < 0 ||
        (rc = sl_bind_int(b, "attention.value_length", false, 2, 1024, hp->head_dim, &v_dim)) < 0)
        return rc;
    if (v_dim != hp->head_dim || hp->head_dim % 2 != 0)
        return sl_bind_fail(b, "%s: key_length and value_length must be equal and even (value_length %d)", b->arch,
                    v_dim);
    if ((rc = sl_bind_int(b, "rope.dimension_count", false, 2, hp->head_dim, hp->head_dim, &hp->n_rot)) < 0)
        return rc;
    if (hp->n_rot % 2 != 0)
        return sl_bind_fail(b, "%s.rope.dimension_count must be even (%d)", b->arch, hp->n_rot);
    if ((rc = sl_bind_float(b, "attention.layer_norm_rms_epsilon", true, 1e-12, 0.1, 0, &hp->norm_eps)) < 0 ||
        (rc = sl_bind_float(b, "rope.freq_base", false, 1.0, 1e12, 10000.0f, &hp->rope_freq_base)) < 0)
        return rc;

    /* Rope scaling: none, linear or YaRN (model_gptoss.c: a divisor table,
     * so the linear scale stays 1); llama3-style scaling arrives as the
     * rope_freqs tensor, which the forward pass applies whatever the type. */
    hp->rope_freq_scale = 1.0f;
    hp->yarn_factor = 0.0f;
    bool yarn = false;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", b->arch);
    sl_gguf_str type;
    float factor = 1.0f;
    if (sl_gguf_get_str(b->g, key, &type) == SL_OK) {
        if (sl_gguf_str_eq(type, "linear")) {
            if ((rc = sl_bind_float(b, "rope.scaling.factor", true, 1e-3, 1e3, 1.0f, &factor)) < 0)
                return rc;
        } else if (sl_gguf_str_eq(type, "yarn")) {
            if ((rc = sl_bind_yarn(b, hp, &factor)) < 0)
                return rc;
            yarn = true;
        } else if (!sl_gguf_str_eq(type, "none") && !sl_gguf_str_eq(type, "llama3") &&
                   !sl_gguf_str_eq(type, "longrope")) {
            char t[32];
            snprintf(t, sizeof t, "%.*s", (int)(type.len < 31 ? type.len : 31), type.ptr);
            snprintf(b->err, SL_ERR_LEN, "%s: %s = '%s' is not supported (none, linear, yarn, llama3, longrope are)",
                     sl_gguf_path(b->g), key, t);
            return SL_EUNSUPPORTED;
        }
    } else if ((rc = sl_bind_float(b, "rope.scale_linear", false, 1e-3, 1e3, 1.0f, &factor)) < 0) {
        return rc;
    }
    hp->rope_freq_scale = yarn ? 1.0f : 1.0f / factor;
    if ((rc = sl_bind_int(b, "rope.scaling.original_context_length", false, 1, 1 << 24, hp->n_ctx_train,
                      &hp->n_ctx_orig)) < 0 ||
        (rc = sl_bind_float(b, "rope.scaling.attn_factor", false, 1e-3, 1e3, 1.0f, &hp->rope_attn_factor)) < 0)
        return rc;
    return bind_family(b, hp);
}

/* Binds a fused matrix of n_parts stacked row ranges (rows[i] each, in
 * order) as one view per part into the same data, so every backend
 * computes the parts as separate matrices: a row range of any GGUF type is
 * a valid matrix, its rows being independent. The tensor's bytes count
 * once. *found is false (and nothing bound) when the file has no such
 * tensor and !required. */
static sl_status bind_fused(sl_binder *b, const char *name, int64_t ne0, const int64_t *rows, int n_parts,
                            bool required, sl_weight *const *parts, bool *found, uint64_t *bytes)
{
    int64_t total = 0;
    for (int i = 0; i < n_parts; i++)
        total += rows[i];
    const sl_gguf_tensor *t;
    sl_status rc = sl_bind_tensor(b, name, ne0, total, required, false, &t);
    *found = t != NULL;
    if (rc < 0 || !t)
        return rc;
    size_t row_bytes = sl_ggml_row_bytes(t->type, (uint64_t)ne0);
    int64_t r0 = 0;
    for (int i = 0; i < n_parts; i++) {
        *parts[i] = (sl_weight){.type = t->type, .ne0 = ne0, .ne1 = rows[i], .row_bytes = row_bytes,
                                .data = (const char *)t->data + (size_t)r0 * row_bytes};
        r0 += rows[i];
    }
    *bytes += t->nbytes;
    return SL_OK;
}

/* Longrope (Phi-3 128k, Phi-3.5, Phi-4 mini): two tables of per-pair
 * frequency divisors (sl_model_rope_divisors picks one), with
 * rope.scaling.attn_factor on cos/sin (bind_hparams). One table without
 * the other, or with llama3's rope_freqs, has no meaning: refused. */
static sl_status bind_longrope(sl_binder *b, sl_model *m)
{
    int64_t half = m->hp.n_rot / 2;
    sl_status rc;
    if ((rc = sl_bind_vector(b, "rope_factors_long.weight", half, false, &m->rope_factors_long, &m->weight_bytes)) < 0 ||
        (rc = sl_bind_vector(b, "rope_factors_short.weight", half, false, &m->rope_factors_short,
                          &m->weight_bytes)) < 0)
        return rc;
    if (!m->rope_factors_long != !m->rope_factors_short)
        return sl_bind_fail(b, "tensor '%s' without '%s' (longrope needs both)",
                    m->rope_factors_long ? "rope_factors_long.weight" : "rope_factors_short.weight",
                    m->rope_factors_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
    if (m->rope_factors_long && m->rope_freqs)
        return sl_bind_fail(b, "tensors 'rope_freqs.weight' and 'rope_factors_long.weight': two rope scalings");
    return SL_OK;
}

static sl_status bind_layers(sl_binder *b, sl_model *m)
{
    const sl_hparams *hp = &m->hp;
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    bool gptoss = hp->arch == SL_ARCH_GPT_OSS;
    bool biases = hp->arch == SL_ARCH_QWEN2 || hp->arch == SL_ARCH_QWEN2MOE || gptoss;
    bool qk_norm = hp->arch == SL_ARCH_QWEN3 || hp->arch == SL_ARCH_GEMMA3 || hp->arch == SL_ARCH_QWEN3MOE;
    bool moe = hp->n_expert > 0;
    bool post_norms = is_gemma(hp->arch), phi3 = hp->arch == SL_ARCH_PHI3;
    uint64_t *B = &m->weight_bytes;
    for (int32_t i = 0; i < hp->n_layer; i++) {
        sl_layer *L = &m->layers[i];
        char n[96];
        sl_status rc;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, i), n)
        /* phi3: q/k/v from the fused attn_qkv (Q rows, then K, then V) or,
         * as llama.cpp also accepts, separate matrices; gate and up from the
         * fused ffn_up of 2 x n_ff rows, gate first (llama.cpp's SWIGLU
         * activates the first half of its output) */
        bool fused_qkv = false;
        if (phi3) {
            bool found;
            if ((rc = bind_fused(b, NAME("attn_qkv.weight"), hp->n_embd, (const int64_t[]){q_dim, kv_dim, kv_dim},
                                 3, false, (sl_weight *const[]){&L->wq, &L->wk, &L->wv}, &fused_qkv, B)) < 0 ||
                (rc = bind_fused(b, NAME("ffn_up.weight"), hp->n_embd, (const int64_t[]){hp->n_ff, hp->n_ff}, 2,
                                 true, (sl_weight *const[]){&L->w_gate, &L->w_up}, &found, B)) < 0)
                return rc;
            if (!fused_qkv && !sl_gguf_find_tensor(b->g, NAME("attn_q.weight")))
                return sl_bind_fail(b, "missing tensor 'blk.%d.attn_qkv.weight' (or attn_q, attn_k and attn_v)", i);
        }
        if (!fused_qkv &&
            ((rc = sl_bind_weight(b, NAME("attn_q.weight"), hp->n_embd, q_dim, true, &L->wq, B)) < 0 ||
             (rc = sl_bind_weight(b, NAME("attn_k.weight"), hp->n_embd, kv_dim, true, &L->wk, B)) < 0 ||
             (rc = sl_bind_weight(b, NAME("attn_v.weight"), hp->n_embd, kv_dim, true, &L->wv, B)) < 0))
            return rc;
        if (!phi3 && !moe &&
            ((rc = sl_bind_weight(b, NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, true, &L->w_gate, B)) < 0 ||
             (rc = sl_bind_weight(b, NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, true, &L->w_up, B)) < 0 ||
             (rc = sl_bind_weight(b, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, true, &L->w_down, B)) < 0))
            return rc;
        if (phi3 && (rc = sl_bind_weight(b, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, true, &L->w_down, B)) < 0)
            return rc;
        if (moe && (rc = sl_bind_moe_layer(b, hp, i, L, m->experts + (size_t)i * 3 * hp->n_expert, B)) < 0)
            return rc;
        if ((rc = sl_bind_vector(b, NAME("attn_norm.weight"), hp->n_embd, true, &L->attn_norm, B)) < 0 ||
            (rc = sl_bind_weight(b, NAME("attn_output.weight"), q_dim, hp->n_embd, true, &L->wo, B)) < 0 ||
            (rc = sl_bind_vector(b, gptoss ? NAME("post_attention_norm.weight") : NAME("ffn_norm.weight"), hp->n_embd,
                                 true, &L->ffn_norm, B)) < 0 ||
            (rc = sl_bind_vector(b, NAME("attn_q.bias"), q_dim, biases, &L->bq, B)) < 0 ||
            (rc = sl_bind_vector(b, NAME("attn_k.bias"), kv_dim, biases, &L->bk, B)) < 0 ||
            (rc = sl_bind_vector(b, NAME("attn_v.bias"), kv_dim, biases, &L->bv, B)) < 0 ||
            (rc = sl_bind_vector(b, NAME("attn_q_norm.weight"), hp->head_dim, qk_norm, &L->q_norm, B)) < 0 ||
            (rc = sl_bind_vector(b, NAME("attn_k_norm.weight"), hp->head_dim, qk_norm, &L->k_norm, B)) < 0)
            return rc;
        if (post_norms &&
            ((rc = sl_bind_vector(b, NAME("post_attention_norm.weight"), hp->n_embd, true, &L->post_attn_norm, B)) < 0 ||
             (rc = sl_bind_vector(b, NAME("post_ffw_norm.weight"), hp->n_embd, true, &L->post_ffn_norm, B)) < 0))
            return rc;
#undef NAME
        if (gptoss && (rc = sl_bind_gptoss_layer(b, hp, i, L, B)) < 0)
            return rc;
        bool slides = layer_slides(hp, i);
        L->window = slides ? hp->sliding_window : 0;
        L->rope_freq_base = slides ? hp->rope_freq_base_swa : hp->rope_freq_base;
        L->rope_freq_scale = slides ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
    }
    return SL_OK;
}

sl_status sl_model_from_gguf(sl_gguf *g, sl_model **out, char err[SL_ERR_LEN])
{
    *out = NULL;
    sl_binder b = {.g = g, .err = err};
    sl_gguf_str arch;
    if (sl_gguf_get_str(g, "general.architecture", &arch) < 0)
        return sl_bind_fail(&b, "missing required key %s", "general.architecture");
    sl_model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, SL_ERR_LEN, "%s: out of memory", sl_gguf_path(g));
        return SL_ENOMEM;
    }
    sl_hparams *hp = &m->hp;
    if (sl_gguf_str_eq(arch, "llama")) {
        hp->arch = SL_ARCH_LLAMA;
        hp->rope_style = SL_ROPE_ADJACENT;
    } else if (sl_gguf_str_eq(arch, "qwen2")) {
        hp->arch = SL_ARCH_QWEN2;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "qwen3")) {
        hp->arch = SL_ARCH_QWEN3;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "gemma2")) {
        hp->arch = SL_ARCH_GEMMA2;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "gemma3")) {
        hp->arch = SL_ARCH_GEMMA3;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "granite")) {
        hp->arch = SL_ARCH_GRANITE;
        hp->rope_style = SL_ROPE_ADJACENT;
    } else if (sl_gguf_str_eq(arch, "phi3")) {
        hp->arch = SL_ARCH_PHI3;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "qwen2moe")) {
        hp->arch = SL_ARCH_QWEN2MOE;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "qwen3moe")) {
        hp->arch = SL_ARCH_QWEN3MOE;
        hp->rope_style = SL_ROPE_NEOX;
    } else if (sl_gguf_str_eq(arch, "gpt-oss")) {
        hp->arch = SL_ARCH_GPT_OSS;
        hp->rope_style = SL_ROPE_NEOX;
    } else {
        snprintf(err, SL_ERR_LEN, "%s: architecture '%.*s' is not supported "
                 "(llama, qwen2, qwen3, gemma2, gemma3, granite, phi3, qwen2moe, qwen3moe, gpt-oss are)",
                 sl_gguf_path(g), (int)(arch.len < 32 ? arch.len : 32), arch.ptr);
        free(m);
        return SL_EUNSUPPORTED;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)arch.len, arch.ptr);
    b.arch = m->arch_name;

    sl_status rc = bind_hparams(&b, hp);
    if (rc == SL_OK)
        rc = sl_bind_moe_hparams(&b, hp);
    const sl_gguf_tensor *emb = NULL;
    if (rc == SL_OK && !(emb = sl_gguf_find_tensor(g, "token_embd.weight")))
        rc = sl_bind_fail(&b, "missing tensor '%s'", "token_embd.weight");
    if (rc == SL_OK) {
        if (emb->n_dims != 2 || emb->ne[1] > (1u << 24) || (int64_t)emb->ne[0] != hp->n_embd)
            rc = sl_bind_fail(&b, "tensor 'token_embd.weight' does not have shape [n_embd=%d, n_vocab]",
                      hp->n_embd);
        else
            hp->n_vocab = (int32_t)emb->ne[1];
    }
    if (rc == SL_OK)
        rc = sl_bind_weight(&b, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd, &m->weight_bytes);
    if (rc == SL_OK)
        rc = sl_bind_vector(&b, "output_norm.weight", hp->n_embd, true, &m->output_norm, &m->weight_bytes);
    if (rc == SL_OK)
        rc = sl_bind_weight(&b, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output, &m->weight_bytes);
    if (rc == SL_OK && !m->output.data) {
        m->output = m->tok_embd;
        m->tied_output = true;
    }
    if (rc == SL_OK)
        rc = sl_bind_vector(&b, "rope_freqs.weight", hp->n_rot / 2, false, &m->rope_freqs, &m->weight_bytes);
    if (rc == SL_OK)
        rc = bind_longrope(&b, m);
    if (rc == SL_OK && hp->yarn_factor > 0.0f && (m->rope_freqs || m->rope_factors_long))
        rc = sl_bind_fail(&b, "YaRN rope scaling with a rope_freqs or rope_factors table: two rope scalings");
    if (rc == SL_OK) {
        m->gguf = g;   /* for its error line; borrowed: the failure path below frees m, never g */
        rc = sl_model_yarn_table(m, err);
    }
    if (rc == SL_OK && !(m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers))) {
        snprintf(err, SL_ERR_LEN, "%s: out of memory", sl_gguf_path(g));
        rc = SL_ENOMEM;
    }
    if (rc == SL_OK && hp->n_expert > 0 &&
        !(m->experts = calloc((size_t)hp->n_layer * 3 * (size_t)hp->n_expert, sizeof *m->experts))) {
        snprintf(err, SL_ERR_LEN, "%s: out of memory", sl_gguf_path(g));
        rc = SL_ENOMEM;
    }
    if (rc == SL_OK)
        rc = bind_layers(&b, m);
    if (rc < 0) {
        free(m->rope_yarn);
        free(m->experts);
        free(m->layers);
        free(m);
        return rc;
    }
    sl_gguf_str name;
    if (sl_gguf_get_str(g, "general.name", &name) == SL_OK && name.len > 0) {
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len < 127 ? name.len : 127), name.ptr);
    } else {
        const char *p = strrchr(sl_gguf_path(g), '/');
        snprintf(m->name, sizeof m->name, "%s", p ? p + 1 : sl_gguf_path(g));
    }
    m->gguf = g;
    *out = m;
    return SL_OK;
}

sl_status sl_model_load(const char *path, sl_model **out, char err[SL_ERR_LEN])
{
    *out = NULL;
    sl_gguf *g;
    sl_status rc = sl_gguf_open(path, &g, err);
    if (rc < 0)
        return rc;
    rc = sl_model_from_gguf(g, out, err);
    if (rc < 0)
        sl_gguf_close(g);
    return rc;
}

void sl_model_destroy(sl_model *m)
{
    if (!m)
        return;
    sl_gguf_close(m->gguf);
    free(m->rope_yarn);
    free(m->experts);
    free(m->layers);
    free(m);
}

uint64_t sl_model_flops_per_token(const sl_model *m)
{
    const sl_hparams *hp = &m->hp;
    uint64_t q = (uint64_t)hp->n_head * hp->head_dim, kv = (uint64_t)hp->n_head_kv * hp->head_dim;
    /* a MoE layer: the router, the experts a token is routed to, the shared expert */
    uint64_t ffn = hp->n_expert > 0 ? (uint64_t)hp->n_embd * hp->n_expert +
                                          3ull * hp->n_embd * ((uint64_t)hp->n_expert_used * hp->n_ff_exp + hp->n_ff_shexp)
                                    : 3ull * hp->n_embd * hp->n_ff;
    uint64_t per_layer = (uint64_t)hp->n_embd * (q + 2 * kv) + q * hp->n_embd + ffn;
    return per_layer * hp->n_layer + (uint64_t)hp->n_embd * hp->n_vocab;
}
