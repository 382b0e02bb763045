/* tests/unit/model/model_gptoss_test.c: binding gpt-oss (model/model_gptoss.c,
 * model_moe.c's biases) and YaRN: a good file loads with the derived
 * hyperparameters (even layers slide, top-k-then-softmax gating, clamped
 * SwiGLU, YaRN's divisor table and magnitude factor); each bad file is
 * refused with a line naming the key or tensor. Files written here with the
 * GGUF writer: two layers, 4 experts, zero weights. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ggml_types.h"
#include "model/gguf.h"
#include "model/model.h"

enum { E = 32, H = 4, KV = 2, D = 16, FE = 32, NEXP = 4, V = 8, NL = 2 };

typedef struct {
    const char *skip;        /* a tensor left out */
    bool no_window;          /* attention.sliding_window absent */
    bool pattern;            /* an attention.sliding_window_pattern key */
    bool no_yarn;            /* no rope.scaling keys */
    bool no_factor;          /* rope.scaling.type yarn without its factor */
    float ext_factor;        /* != 0: rope.scaling.yarn_ext_factor */
    float base_swa;          /* != 0: rope.freq_base_swa */
} spec;

static char path[64];

static void add(sl_gguf_writer *w, const spec *s, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                uint64_t ne2)
{
    if (s->skip && !strcmp(s->skip, name))
        return;
    uint64_t ne[3] = {ne0, ne1, ne2};
    cr_assert(sl_gguf_writer_add_tensor(w, name, SL_GGML_TYPE_F32, n_dims, ne) >= 0, "%s", name);
}

static void write_model(const spec *s)
{
    snprintf(path, sizeof path, "/tmp/sl_model_gptoss_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    sl_gguf_writer *w = sl_gguf_writer_create();
    sl_gguf_writer_set_str(w, "general.architecture", "gpt-oss");
    sl_gguf_writer_set_u32(w, "gpt-oss.context_length", 131072);
    sl_gguf_writer_set_u32(w, "gpt-oss.embedding_length", E);
    sl_gguf_writer_set_u32(w, "gpt-oss.block_count", NL);
    sl_gguf_writer_set_u32(w, "gpt-oss.feed_forward_length", FE);
    sl_gguf_writer_set_u32(w, "gpt-oss.attention.head_count", H);
    sl_gguf_writer_set_u32(w, "gpt-oss.attention.head_count_kv", KV);
    sl_gguf_writer_set_u32(w, "gpt-oss.attention.key_length", D);
    sl_gguf_writer_set_u32(w, "gpt-oss.attention.value_length", D);
    sl_gguf_writer_set_f32(w, "gpt-oss.attention.layer_norm_rms_epsilon", 1e-5f);
    sl_gguf_writer_set_f32(w, "gpt-oss.rope.freq_base", 150000.0f);
    sl_gguf_writer_set_u32(w, "gpt-oss.expert_count", NEXP);
    sl_gguf_writer_set_u32(w, "gpt-oss.expert_used_count", 2);
    sl_gguf_writer_set_u32(w, "gpt-oss.expert_feed_forward_length", FE);
    if (!s->no_window)
        sl_gguf_writer_set_u32(w, "gpt-oss.attention.sliding_window", 128);
    if (s->pattern)
        sl_gguf_writer_set_u32(w, "gpt-oss.attention.sliding_window_pattern", 2);
    if (!s->no_yarn) {
        sl_gguf_writer_set_str(w, "gpt-oss.rope.scaling.type", "yarn");
        if (!s->no_factor)
            sl_gguf_writer_set_f32(w, "gpt-oss.rope.scaling.factor", 32.0f);
        sl_gguf_writer_set_u32(w, "gpt-oss.rope.scaling.original_context_length", 4096);
    }
    if (s->ext_factor != 0.0f)
        sl_gguf_writer_set_f32(w, "gpt-oss.rope.scaling.yarn_ext_factor", s->ext_factor);
    if (s->base_swa != 0.0f)
        sl_gguf_writer_set_f32(w, "gpt-oss.rope.freq_base_swa", s->base_swa);
    add(w, s, "token_embd.weight", 2, E, V, 1);
    add(w, s, "output_norm.weight", 1, E, 1, 1);
    add(w, s, "output.weight", 2, E, V, 1);
    for (int l = 0; l < NL; l++) {
        char n[96];
#define T(x) (snprintf(n, sizeof n, "blk.%d." x, l), n)
        add(w, s, T("attn_norm.weight"), 1, E, 1, 1);
        add(w, s, T("attn_q.weight"), 2, E, H * D, 1);
        add(w, s, T("attn_k.weight"), 2, E, KV * D, 1);
        add(w, s, T("attn_v.weight"), 2, E, KV * D, 1);
        add(w, s, T("attn_q.bias"), 1, H * D, 1, 1);
        add(w, s, T("attn_k.bias"), 1, KV * D, 1, 1);
        add(w, s, T("attn_v.bias"), 1, KV * D, 1, 1);
        add(w, s, T("attn_output.weight"), 2, H * D, E, 1);
        add(w, s, T("attn_output.bias"), 1, E, 1, 1);
        add(w, s, T("attn_sinks.weight"), 1, H, 1, 1);
        add(w, s, T("post_attention_norm.weight"), 1, E, 1, 1);
        add(w, s, T("ffn_gate_inp.weight"), 2, E, NEXP, 1);
        add(w, s, T("ffn_gate_inp.bias"), 1, NEXP, 1, 1);
        add(w, s, T("ffn_gate_exps.weight"), 3, E, FE, NEXP);
        add(w, s, T("ffn_up_exps.weight"), 3, E, FE, NEXP);
        add(w, s, T("ffn_down_exps.weight"), 3, FE, E, NEXP);
        add(w, s, T("ffn_gate_exps.bias"), 2, FE, NEXP, 1);
        add(w, s, T("ffn_up_exps.bias"), 2, FE, NEXP, 1);
        add(w, s, T("ffn_down_exps.bias"), 2, E, NEXP, 1);
#undef T
    }
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_gguf_writer_begin(w, path, err), SL_OK, "%s", err);
    void *zeros = calloc(1, 4u * E * FE * NEXP);
    for (uint64_t i = 0; sl_gguf_writer_tensor_bytes(w, i) > 0; i++)
        cr_assert_eq(sl_gguf_writer_write_tensor(w, i, zeros, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_finish(w, err), SL_OK, "%s", err);
    sl_gguf_writer_destroy(w);
    free(zeros);
}

static sl_model *load_ok(const spec *s)
{
    write_model(s);
    sl_model *m;
    char err[SL_ERR_LEN] = "";
    sl_status rc = sl_model_load(path, &m, err);
    unlink(path);
    cr_assert_eq(rc, SL_OK, "%s", err);
    return m;
}

static void expect_refused(const spec *s, sl_status want, const char *needle)
{
    write_model(s);
    sl_model *m = (sl_model *)1;
    char err[SL_ERR_LEN] = "";
    sl_status rc = sl_model_load(path, &m, err);
    unlink(path);
    cr_assert_eq(rc, want, "rc %d; expected an error with '%s' (%s)", rc, needle, err);
    cr_assert_null(m);
    cr_assert(strstr(err, needle), "error '%s' does not say '%s'", err, needle);
}

Test(model_gptoss, binds_its_layout)
{
    sl_model *m = load_ok(&(spec){0});
    const sl_hparams *hp = &m->hp;
    cr_expect_eq(hp->arch, SL_ARCH_GPT_OSS);
    cr_expect_eq(hp->rope_style, SL_ROPE_NEOX);
    cr_expect_eq(hp->n_expert, NEXP);
    cr_expect_eq(hp->n_ff_exp, FE);
    cr_expect_eq(hp->moe_gating, SL_MOE_GATING_TOPK_SOFTMAX);
    cr_expect(!hp->moe_norm_w);
    cr_expect_eq(hp->ffn_act, SL_FFN_SWIGLU_OAI);
    cr_expect_float_eq(hp->attn_scale, 0.25f, 1e-7);   /* 1/sqrt(head_dim 16) */
    cr_expect_eq(m->layers[0].window, 128);             /* even layers slide */
    cr_expect_eq(m->layers[1].window, 0);
    for (int l = 0; l < NL; l++) {
        const sl_layer *L = &m->layers[l];
        cr_expect(L->bq && L->bk && L->bv && L->bo && L->attn_sinks && L->ffn_norm);
        cr_expect(L->moe.router_b && L->moe.gate_b && L->moe.up_b && L->moe.down_b);
        cr_expect_null(L->moe.sh_down.data);
    }
    sl_model_destroy(m);
}

/* gpt-oss's YaRN (factor 32 from 4096, base 150000, 64 rotated dims in the
 * real files; here 16): pairs below the beta_fast correction dim keep their
 * frequency (divisor 1), those above beta_slow's are divided by the factor,
 * a linear ramp between; cos/sin scaled by 1 + 0.1 ln 32. */
Test(model_gptoss, yarn_divisors_and_magnitude)
{
    sl_model *m = load_ok(&(spec){0});
    const sl_hparams *hp = &m->hp;
    cr_expect_float_eq(hp->rope_freq_scale, 1.0f, 0);
    cr_expect_float_eq(hp->yarn_factor, 32.0f, 0);
    cr_expect_float_eq(hp->rope_attn_factor, 1.0f + 0.1f * logf(32.0f), 1e-6);
    const float *d = sl_model_rope_divisors(m, 4096);
    cr_assert(d && d == m->rope_yarn);
    /* n_dims 16: lo = floor(16 ln(4096/(64 pi)) / (2 ln 150000)) = 2, hi = ceil(4.35) = 5 */
    double lo = 2, hi = 5;
    for (int i = 0; i < D / 2; i++) {
        double r = 1.0 - fmin(1.0, fmax(0.0, (i - lo) / (hi - lo)));
        double want = 1.0 / (r + (1.0 - r) / 32.0);
        cr_expect_float_eq(d[i], (float)want, 1e-6 * want, "pair %d: %g vs %g", i, d[i], want);
    }
    sl_model_destroy(m);
}

Test(model_gptoss, no_yarn_keys_means_no_table)
{
    sl_model *m = load_ok(&(spec){.no_yarn = true});
    cr_expect_null(m->rope_yarn);
    cr_expect_null(sl_model_rope_divisors(m, 4096));
    cr_expect_float_eq(m->hp.rope_attn_factor, 1.0f, 0);
    sl_model_destroy(m);
}

Test(model_gptoss, missing_sinks_refused)
{
    expect_refused(&(spec){.skip = "blk.1.attn_sinks.weight"}, SL_EFORMAT, "missing tensor 'blk.1.attn_sinks.weight'");
}

Test(model_gptoss, missing_output_bias_refused)
{
    expect_refused(&(spec){.skip = "blk.0.attn_output.bias"}, SL_EFORMAT, "missing tensor 'blk.0.attn_output.bias'");
}

Test(model_gptoss, missing_expert_bias_refused)
{
    expect_refused(&(spec){.skip = "blk.0.ffn_down_exps.bias"}, SL_EFORMAT,
                   "missing tensor 'blk.0.ffn_down_exps.bias'");
    expect_refused(&(spec){.skip = "blk.1.ffn_gate_inp.bias"}, SL_EFORMAT, "missing tensor 'blk.1.ffn_gate_inp.bias'");
}

Test(model_gptoss, ffn_norm_is_post_attention_norm)
{
    expect_refused(&(spec){.skip = "blk.0.post_attention_norm.weight"}, SL_EFORMAT,
                   "missing tensor 'blk.0.post_attention_norm.weight'");
}

Test(model_gptoss, missing_window_refused)
{
    expect_refused(&(spec){.no_window = true}, SL_EFORMAT, "missing required key gpt-oss.attention.sliding_window");
}

Test(model_gptoss, window_pattern_refused)
{
    expect_refused(&(spec){.pattern = true}, SL_EUNSUPPORTED, "gpt-oss.attention.sliding_window_pattern");
}

Test(model_gptoss, yarn_without_factor_refused)
{
    expect_refused(&(spec){.no_factor = true}, SL_EFORMAT, "missing required key gpt-oss.rope.scaling.factor");
}

Test(model_gptoss, yarn_ext_factor_other_than_one_refused)
{
    expect_refused(&(spec){.ext_factor = 0.5f}, SL_EUNSUPPORTED, "yarn_ext_factor = 0.5 is not supported");
}

Test(model_gptoss, distinct_swa_rope_base_refused)
{
    expect_refused(&(spec){.base_swa = 10000.0f}, SL_EUNSUPPORTED, "rope.freq_base_swa = 10000");
}
