/* tests/unit/model/model_moe_test.c: binding the mixture-of-experts
 * architectures (model/model_moe.c): good files of each kind load with the
 * right hyperparameters and per-expert views; every bad file is refused
 * with a line naming the key or tensor. The files are written here with
 * the GGUF writer: one layer, 4 experts, zero weights. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ggml_types.h"
#include "model/gguf.h"
#include "model/model.h"

enum { E = 32, H = 2, KV = 1, D = 16, FF = 64, FE = 32, S = 48, NEXP = 4, V = 8 };

typedef struct {
    const char *arch;        /* qwen3moe, qwen2moe or llama */
    int64_t n_expert;        /* expert_count written; -1: key absent */
    int64_t n_used;          /* expert_used_count written; -1: key absent */
    const char *skip;        /* a tensor left out */
    const char *bad_shape;   /* a tensor whose last dimension is one too many */
    const char *flat;        /* an expert tensor written 2-D (ne0, ne1 * n_expert) */
} spec;

static char path[64];

static void add(sl_gguf_writer *w, const spec *s, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                uint64_t ne2)
{
    if (s->skip && !strcmp(s->skip, name))
        return;
    uint64_t ne[3] = {ne0, ne1, ne2};
    if (s->flat && !strcmp(s->flat, name)) {
        ne[1] *= ne[2];
        n_dims = 2;
    }
    if (s->bad_shape && !strcmp(s->bad_shape, name))
        ne[n_dims - 1]++;
    cr_assert(sl_gguf_writer_add_tensor(w, name, SL_GGML_TYPE_F32, n_dims, ne) >= 0, "%s", name);
}

static void write_model(const spec *s)
{
    snprintf(path, sizeof path, "/tmp/sl_model_moe_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    sl_gguf_writer *w = sl_gguf_writer_create();
    char key[96];
#define K(suffix) (snprintf(key, sizeof key, "%s." suffix, s->arch), key)
    sl_gguf_writer_set_str(w, "general.architecture", s->arch);
    sl_gguf_writer_set_u32(w, K("context_length"), 64);
    sl_gguf_writer_set_u32(w, K("embedding_length"), E);
    sl_gguf_writer_set_u32(w, K("block_count"), 1);
    sl_gguf_writer_set_u32(w, K("feed_forward_length"), FF);
    sl_gguf_writer_set_u32(w, K("attention.head_count"), H);
    sl_gguf_writer_set_u32(w, K("attention.head_count_kv"), KV);
    sl_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (s->n_expert >= 0)
        sl_gguf_writer_set_u32(w, K("expert_count"), (uint32_t)s->n_expert);
    if (s->n_used >= 0)
        sl_gguf_writer_set_u32(w, K("expert_used_count"), (uint32_t)s->n_used);
    bool llama = !strcmp(s->arch, "llama"), q2 = !strcmp(s->arch, "qwen2moe");
    uint64_t fe = llama ? FF : FE;
    if (!llama)
        sl_gguf_writer_set_u32(w, K("expert_feed_forward_length"), FE);
    if (q2)
        sl_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), S);
#undef K
    add(w, s, "token_embd.weight", 2, E, V, 1);
    add(w, s, "output_norm.weight", 1, E, 1, 1);
    add(w, s, "blk.0.attn_norm.weight", 1, E, 1, 1);
    add(w, s, "blk.0.attn_q.weight", 2, E, H * D, 1);
    add(w, s, "blk.0.attn_k.weight", 2, E, KV * D, 1);
    add(w, s, "blk.0.attn_v.weight", 2, E, KV * D, 1);
    add(w, s, "blk.0.attn_output.weight", 2, H * D, E, 1);
    add(w, s, "blk.0.ffn_norm.weight", 1, E, 1, 1);
    if (!strcmp(s->arch, "qwen3moe")) {
        add(w, s, "blk.0.attn_q_norm.weight", 1, D, 1, 1);
        add(w, s, "blk.0.attn_k_norm.weight", 1, D, 1, 1);
    }
    if (q2) {
        add(w, s, "blk.0.attn_q.bias", 1, H * D, 1, 1);
        add(w, s, "blk.0.attn_k.bias", 1, KV * D, 1, 1);
        add(w, s, "blk.0.attn_v.bias", 1, KV * D, 1, 1);
    }
    add(w, s, "blk.0.ffn_gate_inp.weight", 2, E, NEXP, 1);
    add(w, s, "blk.0.ffn_gate_exps.weight", 3, E, fe, NEXP);
    add(w, s, "blk.0.ffn_up_exps.weight", 3, E, fe, NEXP);
    add(w, s, "blk.0.ffn_down_exps.weight", 3, fe, E, NEXP);
    if (q2) {
        add(w, s, "blk.0.ffn_gate_inp_shexp.weight", 1, E, 1, 1);
        add(w, s, "blk.0.ffn_gate_shexp.weight", 2, E, S, 1);
        add(w, s, "blk.0.ffn_up_shexp.weight", 2, E, S, 1);
        add(w, s, "blk.0.ffn_down_shexp.weight", 2, S, E, 1);
    }
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_gguf_writer_begin(w, path, err), SL_OK, "%s", err);
    void *zeros = calloc(1, 4u * E * FF * NEXP * 2);
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

static void expect_refused(const spec *s, const char *needle)
{
    write_model(s);
    sl_model *m = (sl_model *)1;
    char err[SL_ERR_LEN] = "";
    sl_status rc = sl_model_load(path, &m, err);
    unlink(path);
    cr_assert(rc < 0, "loaded; expected an error with '%s'", needle);
    cr_assert_null(m);
    cr_assert(strstr(err, needle), "error '%s' does not say '%s'", err, needle);
}

Test(model_moe, qwen3moe_binds_per_expert_views)
{
    sl_model *m = load_ok(&(spec){.arch = "qwen3moe", .n_expert = NEXP, .n_used = 2});
    const sl_hparams *hp = &m->hp;
    cr_assert_eq(hp->arch, SL_ARCH_QWEN3MOE);
    cr_assert(sl_model_is_moe(m));
    cr_assert_eq(hp->n_expert, NEXP);
    cr_assert_eq(hp->n_expert_used, 2);
    cr_assert_eq(hp->n_ff_exp, FE);
    cr_assert_eq(hp->n_ff_shexp, 0);
    cr_assert(hp->moe_norm_w);
    const sl_moe *moe = &m->layers[0].moe;
    cr_assert_not_null(moe->gate);
    cr_assert_null(m->layers[0].w_gate.data);
    cr_assert_null(moe->sh_down.data);
    cr_assert_eq(moe->router.ne0, E);
    cr_assert_eq(moe->router.ne1, NEXP);
    for (int e = 0; e < NEXP; e++) {   /* consecutive matrices of one tensor */
        cr_assert_eq(moe->gate[e].ne0, E);
        cr_assert_eq(moe->gate[e].ne1, FE);
        cr_assert_eq(moe->down[e].ne0, FE);
        cr_assert_eq(moe->down[e].ne1, E);
        cr_assert_eq((const char *)moe->up[e].data, (const char *)moe->up[0].data + (size_t)e * FE * E * 4);
        cr_assert_eq((const char *)moe->down[e].data, (const char *)moe->down[0].data + (size_t)e * FE * E * 4);
    }
    sl_model_destroy(m);
}

Test(model_moe, qwen2moe_has_a_shared_expert_and_no_renormalisation)
{
    sl_model *m = load_ok(&(spec){.arch = "qwen2moe", .n_expert = NEXP, .n_used = 2});
    cr_assert_eq(m->hp.arch, SL_ARCH_QWEN2MOE);
    cr_assert_eq(m->hp.n_ff_shexp, S);
    cr_assert(!m->hp.moe_norm_w);
    const sl_moe *moe = &m->layers[0].moe;
    cr_assert_not_null(moe->sh_down.data);
    cr_assert_eq(moe->sh_gate_inp.ne0, E);
    cr_assert_eq(moe->sh_gate_inp.ne1, 1);
    cr_assert_eq(moe->sh_gate.ne1, S);
    cr_assert_not_null(m->layers[0].bq);
    sl_model_destroy(m);
}

Test(model_moe, llama_with_experts_is_mixtral)
{
    sl_model *m = load_ok(&(spec){.arch = "llama", .n_expert = NEXP, .n_used = 2});
    cr_assert_eq(m->hp.arch, SL_ARCH_LLAMA);
    cr_assert_eq(m->hp.n_expert, NEXP);
    cr_assert_eq(m->hp.n_ff_exp, FF);   /* Mixtral's experts are feed_forward_length wide */
    cr_assert(m->hp.moe_norm_w);
    sl_model_destroy(m);
}

Test(model_moe, flops_count_the_routed_experts_only)
{
    sl_model *m = load_ok(&(spec){.arch = "qwen3moe", .n_expert = NEXP, .n_used = 2});
    uint64_t attn = (uint64_t)E * (H * D + 2 * KV * D) + (uint64_t)H * D * E;
    uint64_t ffn = (uint64_t)E * NEXP + 3ull * E * 2 * FE;
    cr_assert_eq(sl_model_flops_per_token(m), attn + ffn + (uint64_t)E * V);
    sl_model_destroy(m);
}

Test(model_moe, used_count_zero_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = NEXP, .n_used = 0},
                   "qwen3moe.expert_used_count = 0 must be in [1, expert_count = 4]");
}

Test(model_moe, used_count_over_expert_count_refused)
{
    expect_refused(&(spec){.arch = "llama", .n_expert = NEXP, .n_used = 5},
                   "llama.expert_used_count = 5 must be in [1, expert_count = 4]");
}

Test(model_moe, used_count_missing_refused)
{
    expect_refused(&(spec){.arch = "qwen2moe", .n_expert = NEXP, .n_used = -1},
                   "missing required key qwen2moe.expert_used_count");
}

Test(model_moe, expert_count_missing_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = -1, .n_used = 2},
                   "missing required key qwen3moe.expert_count");
}

Test(model_moe, expert_count_zero_refused_for_a_moe_arch)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = 0, .n_used = 2}, "qwen3moe.expert_count = 0");
}

Test(model_moe, expert_count_over_maximum_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = SL_MOE_MAX_EXPERTS + 1, .n_used = 2},
                   "qwen3moe.expert_count = 513 exceeds the maximum of 512 experts");
}

Test(model_moe, expert_count_not_matching_tensors_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = 8, .n_used = 2},
                   "tensor 'blk.0.ffn_gate_inp.weight' has shape [32, 4], expected [32, 8]");
}

Test(model_moe, missing_expert_tensor_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = NEXP, .n_used = 2, .skip = "blk.0.ffn_up_exps.weight"},
                   "missing tensor 'blk.0.ffn_up_exps.weight'");
}

Test(model_moe, missing_router_refused)
{
    expect_refused(&(spec){.arch = "llama", .n_expert = NEXP, .n_used = 2, .skip = "blk.0.ffn_gate_inp.weight"},
                   "missing tensor 'blk.0.ffn_gate_inp.weight'");
}

Test(model_moe, expert_tensor_of_wrong_shape_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = NEXP, .n_used = 2,
                           .bad_shape = "blk.0.ffn_down_exps.weight"},
                   "tensor 'blk.0.ffn_down_exps.weight' has shape [32, 32, 5] (3 dims), expected [32, 32, 4]");
}

Test(model_moe, expert_tensor_in_two_dims_refused)
{
    expect_refused(&(spec){.arch = "qwen3moe", .n_expert = NEXP, .n_used = 2, .flat = "blk.0.ffn_gate_exps.weight"},
                   "tensor 'blk.0.ffn_gate_exps.weight' has shape [32, 128, 1] (2 dims), expected [32, 32, 4]");
}

Test(model_moe, missing_shared_expert_refused)
{
    expect_refused(&(spec){.arch = "qwen2moe", .n_expert = NEXP, .n_used = 2,
                           .skip = "blk.0.ffn_gate_inp_shexp.weight"},
                   "missing tensor 'blk.0.ffn_gate_inp_shexp.weight'");
    expect_refused(&(spec){.arch = "qwen2moe", .n_expert = NEXP, .n_used = 2, .skip = "blk.0.ffn_down_shexp.weight"},
                   "missing tensor 'blk.0.ffn_down_shexp.weight'");
}

Test(model_moe, shared_expert_of_wrong_shape_refused)
{
    expect_refused(&(spec){.arch = "qwen2moe", .n_expert = NEXP, .n_used = 2,
                           .bad_shape = "blk.0.ffn_up_shexp.weight"},
                   "tensor 'blk.0.ffn_up_shexp.weight' has shape [32, 49], expected [32, 48]");
}
