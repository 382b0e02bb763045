/* model/model_moe.c: binds the mixture-of-experts FFNs of qwen2moe,
 * qwen3moe and Mixtral (llama with llama.expert_count > 0), as llama.cpp
 * defines them (src/models/{qwen2moe,qwen3moe,llama}.cpp and
 * build_moe_ffn): a router ffn_gate_inp (n_embd -> n_expert), softmax over
 * all experts, the top expert_used_count; qwen3moe and Mixtral renormalise
 * the chosen weights to sum 1, qwen2moe does not and adds a shared expert
 * scaled by sigmoid(ffn_gate_inp_shexp . x). gpt-oss (model_gptoss.c's
 * note): router and expert biases, top-k logits then softmax over k.
 * The experts are 3-D tensors (ne0, ne1, n_expert): n_expert matrices one
 * after another, each bound as its own sl_weight view into the mapping, so
 * a backend computes an expert as it computes any matrix. Old Mixtral
 * files with one 2-D tensor per expert (blk.N.ffn_gate.E.weight) are not
 * read: llama.cpp's converter has written the merged form since 2024. */
#include <stdio.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/model_bind.h"

sl_status sl_bind_moe_hparams(sl_binder *b, sl_hparams *hp)
{
    hp->n_expert = hp->n_expert_used = hp->n_ff_exp = hp->n_ff_shexp = 0;
    hp->moe_norm_w = false;
    hp->moe_gating = hp->arch == SL_ARCH_GPT_OSS ? SL_MOE_GATING_TOPK_SOFTMAX : SL_MOE_GATING_SOFTMAX;
    bool moe_arch = hp->arch == SL_ARCH_QWEN2MOE || hp->arch == SL_ARCH_QWEN3MOE || hp->arch == SL_ARCH_GPT_OSS;
    if (!moe_arch && hp->arch != SL_ARCH_LLAMA)
        return SL_OK;   /* dense architectures: an expert_count key, if any, means nothing */
    sl_status rc;
    int32_t n = 0;
    if ((rc = sl_bind_int(b, "expert_count", moe_arch, 0, INT32_MAX, 0, &n)) < 0)
        return rc;
    if (n == 0 && !moe_arch)
        return SL_OK;   /* a dense llama file */
    if (n == 0)
        return sl_bind_fail(b, "key %s.expert_count = 0: a %s file needs experts", b->arch, b->arch);
    if (n > SL_MOE_MAX_EXPERTS)
        return sl_bind_fail(b, "key %s.expert_count = %d exceeds the maximum of %d experts", b->arch, n,
                            SL_MOE_MAX_EXPERTS);
    int32_t used = 0;
    if ((rc = sl_bind_int(b, "expert_used_count", true, 0, INT32_MAX, 0, &used)) < 0)
        return rc;
    if (used < 1 || used > n)
        return sl_bind_fail(b, "key %s.expert_used_count = %d must be in [1, expert_count = %d]", b->arch, used, n);
    hp->n_expert = n;
    hp->n_expert_used = used;
    if (hp->arch == SL_ARCH_LLAMA) {   /* Mixtral: experts as wide as feed_forward_length */
        hp->n_ff_exp = hp->n_ff;
        hp->moe_norm_w = true;
        return SL_OK;
    }
    /* llama.cpp's defaults when the keys are absent: n_ff / n_used per expert, n_ff for the shared one */
    int32_t def_exp = hp->n_ff / used;
    if ((rc = sl_bind_int(b, "expert_feed_forward_length", def_exp == 0, 1, 1 << 20, def_exp, &hp->n_ff_exp)) < 0)
        return rc;
    if (hp->arch == SL_ARCH_QWEN2MOE &&
        (rc = sl_bind_int(b, "expert_shared_feed_forward_length", false, 1, 1 << 20, hp->n_ff, &hp->n_ff_shexp)) < 0)
        return rc;
    hp->moe_norm_w = hp->arch == SL_ARCH_QWEN3MOE;
    return SL_OK;
}

/* A 3-D expert tensor (ne0, ne1, n_expert) of one supported type as
 * n_expert matrix views out[0 .. n_expert). */
static sl_status bind_experts(sl_binder *b, const char *name, int64_t ne0, int64_t ne1, int32_t n_expert,
                              sl_weight *out, uint64_t *bytes)
{
    const sl_gguf_tensor *t = sl_gguf_find_tensor(b->g, name);
    if (!t)
        return sl_bind_fail(b, "missing tensor '%s'", name);
    if (t->n_dims != 3 || (int64_t)t->ne[0] != ne0 || (int64_t)t->ne[1] != ne1 || (int64_t)t->ne[2] != n_expert)
        return sl_bind_fail(b, "tensor '%s' has shape [%llu, %llu, %llu] (%u dims), expected [%lld, %lld, %d]", name,
                            (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                            (unsigned long long)t->ne[2], t->n_dims, (long long)ne0, (long long)ne1, n_expert);
    if (!sl_ggml_type_supported(t->type)) {
        const char *tn = sl_ggml_type_name(t->type);
        snprintf(b->err, SL_ERR_LEN, "%s: tensor '%s' has type %s, which sluice does not support here",
                 sl_gguf_path(b->g), name, tn ? tn : "?");
        return SL_EUNSUPPORTED;
    }
    size_t row_bytes = sl_ggml_row_bytes(t->type, (uint64_t)ne0);
    size_t matrix_bytes = row_bytes * (size_t)ne1;
    if (row_bytes == 0 || matrix_bytes * (size_t)n_expert != t->nbytes)
        return sl_bind_fail(b, "tensor '%s': %llu bytes is not %d matrices of %lld rows", name,
                            (unsigned long long)t->nbytes, n_expert, (long long)ne1);
    for (int32_t e = 0; e < n_expert; e++)
        out[e] = (sl_weight){.type = t->type, .ne0 = ne0, .ne1 = ne1, .row_bytes = row_bytes,
                             .data = (const char *)t->data + (size_t)e * matrix_bytes};
    *bytes += t->nbytes;
    return SL_OK;
}

/* An F32 (ne0, ne1) tensor's data into *v (ne1 = 0: 1-D). */
static sl_status bind_f32(sl_binder *b, const char *name, int64_t ne0, int64_t ne1, const float **v, uint64_t *bytes)
{
    const sl_gguf_tensor *t;
    sl_status rc = sl_bind_tensor(b, name, ne0, ne1, true, true, &t);
    *v = t ? (const float *)t->data : NULL;
    if (t)
        *bytes += t->nbytes;
    return rc;
}

/* gpt-oss: the router's bias (n_expert) and the experts' (n_ff_exp or
 * n_embd per expert, one row per expert), all required. */
static sl_status bind_biases(sl_binder *b, const sl_hparams *hp, int32_t il, sl_moe *moe, uint64_t *bytes)
{
    int32_t n = hp->n_expert;
    int64_t E = hp->n_embd, F = hp->n_ff_exp;
    char name[96];
    sl_status rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, il), name)
    if ((rc = bind_f32(b, NAME("ffn_gate_inp.bias"), n, 0, &moe->router_b, bytes)) < 0 ||
        (rc = bind_f32(b, NAME("ffn_gate_exps.bias"), F, n, &moe->gate_b, bytes)) < 0 ||
        (rc = bind_f32(b, NAME("ffn_up_exps.bias"), F, n, &moe->up_b, bytes)) < 0 ||
        (rc = bind_f32(b, NAME("ffn_down_exps.bias"), E, n, &moe->down_b, bytes)) < 0)
        return rc;
#undef NAME
    return SL_OK;
}

sl_status sl_bind_moe_layer(sl_binder *b, const sl_hparams *hp, int32_t il, sl_layer *L, sl_weight *views,
                            uint64_t *bytes)
{
    sl_moe *moe = &L->moe;
    int32_t n = hp->n_expert;
    int64_t E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp;
    moe->gate = views;
    moe->up = views + n;
    moe->down = views + 2 * (size_t)n;
    char name[96];
    sl_status rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, il), name)
    if ((rc = sl_bind_weight(b, NAME("ffn_gate_inp.weight"), E, n, true, &moe->router, bytes)) < 0 ||
        (rc = bind_experts(b, NAME("ffn_gate_exps.weight"), E, F, n, moe->gate, bytes)) < 0 ||
        (rc = bind_experts(b, NAME("ffn_up_exps.weight"), E, F, n, moe->up, bytes)) < 0 ||
        (rc = bind_experts(b, NAME("ffn_down_exps.weight"), F, E, n, moe->down, bytes)) < 0)
        return rc;
    if (hp->arch == SL_ARCH_GPT_OSS)
        return bind_biases(b, hp, il, moe, bytes);
    if (hp->arch != SL_ARCH_QWEN2MOE)
        return SL_OK;
    /* the shared expert's gate is a vector: one output row, any type */
    const sl_gguf_tensor *t;
    if ((rc = sl_bind_tensor(b, NAME("ffn_gate_inp_shexp.weight"), E, 0, true, false, &t)) < 0)
        return rc;
    moe->sh_gate_inp = (sl_weight){.type = t->type, .ne0 = E, .ne1 = 1,
                                   .row_bytes = sl_ggml_row_bytes(t->type, (uint64_t)E), .data = t->data};
    *bytes += t->nbytes;
    if ((rc = sl_bind_weight(b, NAME("ffn_gate_shexp.weight"), E, S, true, &moe->sh_gate, bytes)) < 0 ||
        (rc = sl_bind_weight(b, NAME("ffn_up_shexp.weight"), E, S, true, &moe->sh_up, bytes)) < 0 ||
        (rc = sl_bind_weight(b, NAME("ffn_down_shexp.weight"), S, E, true, &moe->sh_down, bytes)) < 0)
        return rc;
#undef NAME
    return SL_OK;
}
