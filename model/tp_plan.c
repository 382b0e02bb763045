/* model/tp_plan.c: the tensor-parallel sharding plan (the rules are in
 * tp_plan.h). Pure arithmetic on the hyperparameters and weight types, run
 * once at startup. The trade-off: ranges are computed per weight kind, not
 * per tensor, so every layer is cut at the same places (one set of buffer
 * shapes per shard); a layer whose matrix has a finer block type than the
 * coarsest one of its kind is cut more coarsely than it needs to be. */
#include <stdio.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/tp_plan.h"

static const char *const kind_names[SL_TP_KIND_COUNT] = {
    [SL_TP_KIND_TOKEN_EMBD] = "token_embd",         [SL_TP_KIND_ATTN_Q] = "attn_q",
    [SL_TP_KIND_ATTN_K] = "attn_k",                 [SL_TP_KIND_ATTN_V] = "attn_v",
    [SL_TP_KIND_ATTN_OUTPUT] = "attn_output",       [SL_TP_KIND_FFN_GATE] = "ffn_gate",
    [SL_TP_KIND_FFN_UP] = "ffn_up",                 [SL_TP_KIND_FFN_DOWN] = "ffn_down",
    [SL_TP_KIND_FFN_GATE_INP] = "ffn_gate_inp",     [SL_TP_KIND_FFN_GATE_EXPS] = "ffn_gate_exps",
    [SL_TP_KIND_FFN_UP_EXPS] = "ffn_up_exps",       [SL_TP_KIND_FFN_DOWN_EXPS] = "ffn_down_exps",
    [SL_TP_KIND_FFN_GATE_SHEXP] = "ffn_gate_shexp", [SL_TP_KIND_FFN_UP_SHEXP] = "ffn_up_shexp",
    [SL_TP_KIND_FFN_DOWN_SHEXP] = "ffn_down_shexp", [SL_TP_KIND_OUTPUT] = "output",
};

const char *sl_tp_kind_name(enum sl_tp_kind k)
{
    return (unsigned)k < SL_TP_KIND_COUNT ? kind_names[k] : "?";
}

const char *sl_tp_split_name(enum sl_tp_split s)
{
    switch (s) {
    case SL_TP_SPLIT_ABSENT: return "absent";
    case SL_TP_SPLIT_NONE: return "none";
    case SL_TP_SPLIT_OUT: return "out";
    case SL_TP_SPLIT_IN: return "in";
    }
    return "?";
}

static sl_status fail(sl_tp_plan *plan, char err[SL_ERR_LEN], const char *msg)
{
    memset(plan, 0, sizeof *plan);
    snprintf(err, SL_ERR_LEN, "%s", msg);
    return SL_EINVAL;
}

/* The block size kind k's IN split must respect, or 0 for an unknown type. */
static uint32_t block_of(const uint32_t *type, enum sl_tp_kind k)
{
    return type ? sl_ggml_block_elems(type[k]) : 1;
}

static const char *type_name(const uint32_t *type, enum sl_tp_kind k)
{
    const char *n = type ? sl_ggml_type_name(type[k]) : "F32";
    return n ? n : "an unknown type";
}

/* Splits a hidden width `total` (n_ff, n_ff_exp, n_ff_shexp) among the
 * shards in whole blocks of the IN-split matrix `down`, balanced: shard s
 * gets blocks [s*nb/N, (s+1)*nb/N). up and gate (OUT) take the same range. */
static sl_status split_hidden(sl_tp_plan *plan, const uint32_t *type, int64_t total, const char *what,
                              enum sl_tp_kind gate, enum sl_tp_kind up, enum sl_tp_kind down, char err[SL_ERR_LEN])
{
    int32_t n = plan->n_shard;
    uint32_t be = block_of(type, down);
    char msg[SL_ERR_LEN];
    if (be == 0 || total <= 0 || total % be) {
        snprintf(msg, sizeof msg, "%s is %s (blocks of %u): %s %lld is not a whole number of blocks",
                 sl_tp_kind_name(down), type_name(type, down), be, what, (long long)total);
        return fail(plan, err, msg);
    }
    int64_t nb = total / be;
    if (nb < n) {
        snprintf(msg, sizeof msg, "%s is %s (blocks of %u): %s %lld is %lld blocks, fewer than --tensor-parallel %d",
                 sl_tp_kind_name(down), type_name(type, down), be, what, (long long)total, (long long)nb, n);
        return fail(plan, err, msg);
    }
    for (int32_t s = 0; s < n; s++) {
        int64_t b = s * nb / n * be, e = (s + 1) * nb / n * be;
        plan->shard[s].slice[gate] = (sl_tp_slice){SL_TP_SPLIT_OUT, b, e};
        plan->shard[s].slice[up] = (sl_tp_slice){SL_TP_SPLIT_OUT, b, e};
        plan->shard[s].slice[down] = (sl_tp_slice){SL_TP_SPLIT_IN, b, e};
    }
    return SL_OK;
}

/* q and KV heads per shard, and the attention matrices' ranges. */
static sl_status split_heads(sl_tp_plan *plan, const sl_hparams *hp, const uint32_t *type, char err[SL_ERR_LEN])
{
    int32_t n = plan->n_shard, nh = hp->n_head, nkv = hp->n_head_kv, d = hp->head_dim;
    char msg[SL_ERR_LEN];
    if (nh <= 0 || nkv <= 0 || d <= 0 || nh % nkv) {
        snprintf(msg, sizeof msg, "n_head %d, n_head_kv %d and head_dim %d are not a valid attention shape", nh,
                 nkv, d);
        return fail(plan, err, msg);
    }
    if (nh % n) {
        snprintf(msg, sizeof msg, "n_head %d is not divisible by --tensor-parallel %d", nh, n);
        return fail(plan, err, msg);
    }
    if (nkv >= n && nkv % n) {
        snprintf(msg, sizeof msg, "n_head_kv %d is not divisible by --tensor-parallel %d", nkv, n);
        return fail(plan, err, msg);
    }
    if (nkv < n && n % nkv) {
        snprintf(msg, sizeof msg,
                 "n_head_kv %d is fewer than --tensor-parallel %d and does not divide it (KV heads are replicated "
                 "only in equal groups)", nkv, n);
        return fail(plan, err, msg);
    }
    int32_t hq = nh / n;
    uint32_t be = block_of(type, SL_TP_KIND_ATTN_OUTPUT);
    if (be == 0 || ((int64_t)hq * d) % be) {
        snprintf(msg, sizeof msg,
                 "attn_output is %s (blocks of %u): a shard's %lld columns (%d heads of %d) do not fall on block "
                 "boundaries", type_name(type, SL_TP_KIND_ATTN_OUTPUT), be, (long long)hq * d, hq, d);
        return fail(plan, err, msg);
    }
    plan->kv_replicas = nkv >= n ? 1 : n / nkv;
    for (int32_t s = 0; s < n; s++) {
        sl_tp_shard *sh = &plan->shard[s];
        sh->head_begin = s * hq;
        sh->head_end = (s + 1) * hq;
        if (plan->kv_replicas == 1) {
            sh->head_kv_begin = s * (nkv / n);
            sh->head_kv_end = (s + 1) * (nkv / n);
        } else {
            sh->head_kv_begin = s / plan->kv_replicas;
            sh->head_kv_end = sh->head_kv_begin + 1;
        }
        sh->slice[SL_TP_KIND_ATTN_Q] = (sl_tp_slice){SL_TP_SPLIT_OUT, (int64_t)sh->head_begin * d,
                                                     (int64_t)sh->head_end * d};
        sl_tp_slice kv = {SL_TP_SPLIT_OUT, (int64_t)sh->head_kv_begin * d, (int64_t)sh->head_kv_end * d};
        sh->slice[SL_TP_KIND_ATTN_K] = kv;
        sh->slice[SL_TP_KIND_ATTN_V] = kv;
        sh->slice[SL_TP_KIND_ATTN_OUTPUT] = (sl_tp_slice){SL_TP_SPLIT_IN, (int64_t)sh->head_begin * d,
                                                          (int64_t)sh->head_end * d};
    }
    return SL_OK;
}

sl_status sl_tp_plan_init(sl_tp_plan *plan, const sl_hparams *hp, const uint32_t *type, int32_t n_shard,
                          char err[SL_ERR_LEN])
{
    char msg[SL_ERR_LEN];
    memset(plan, 0, sizeof *plan);
    if (n_shard < 1 || n_shard > SL_TP_MAX_SHARDS) {
        snprintf(msg, sizeof msg, "--tensor-parallel %d is out of range (1..%d)", n_shard, SL_TP_MAX_SHARDS);
        return fail(plan, err, msg);
    }
    plan->n_shard = n_shard;
    sl_status rc = split_heads(plan, hp, type, err);
    if (rc < 0)
        return rc;
    if (hp->n_expert == 0) {
        rc = split_hidden(plan, type, hp->n_ff, "n_ff", SL_TP_KIND_FFN_GATE, SL_TP_KIND_FFN_UP,
                          SL_TP_KIND_FFN_DOWN, err);
    } else {
        rc = split_hidden(plan, type, hp->n_ff_exp, "n_ff_exp", SL_TP_KIND_FFN_GATE_EXPS, SL_TP_KIND_FFN_UP_EXPS,
                          SL_TP_KIND_FFN_DOWN_EXPS, err);
        if (rc == SL_OK && hp->n_ff_shexp > 0)
            rc = split_hidden(plan, type, hp->n_ff_shexp, "n_ff_shexp", SL_TP_KIND_FFN_GATE_SHEXP,
                              SL_TP_KIND_FFN_UP_SHEXP, SL_TP_KIND_FFN_DOWN_SHEXP, err);
    }
    if (rc < 0)
        return rc;
    if (hp->n_vocab < n_shard) {
        snprintf(msg, sizeof msg, "n_vocab %d is fewer than --tensor-parallel %d", hp->n_vocab, n_shard);
        return fail(plan, err, msg);
    }
    for (int32_t s = 0; s < n_shard; s++) {
        sl_tp_shard *sh = &plan->shard[s];
        int64_t v = hp->n_vocab;
        sh->slice[SL_TP_KIND_OUTPUT] = (sl_tp_slice){SL_TP_SPLIT_OUT, s * v / n_shard, (s + 1) * v / n_shard};
        sh->slice[SL_TP_KIND_TOKEN_EMBD] = (sl_tp_slice){SL_TP_SPLIT_NONE, 0, v};
        if (hp->n_expert > 0)
            sh->slice[SL_TP_KIND_FFN_GATE_INP] = (sl_tp_slice){SL_TP_SPLIT_NONE, 0, hp->n_expert};
    }
    return SL_OK;
}

/* ---- the types of a loaded model ---------------------------------------- */

/* Keeps in *t the type of w when its block is larger than the one held. */
static void coarsest(uint32_t *t, const sl_weight *w)
{
    if (w->data && sl_ggml_block_elems(w->type) > sl_ggml_block_elems(*t))
        *t = w->type;
}

sl_status sl_tp_plan_for_model(sl_tp_plan *plan, const sl_model *m, int32_t n_shard, char err[SL_ERR_LEN])
{
    uint32_t type[SL_TP_KIND_COUNT] = {0};   /* 0 = F32: a block of one element */
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const sl_layer *L = &m->layers[l];
        coarsest(&type[SL_TP_KIND_ATTN_OUTPUT], &L->wo);
        coarsest(&type[SL_TP_KIND_FFN_DOWN], &L->w_down);
        if (L->moe.down)
            for (int32_t e = 0; e < m->hp.n_expert; e++)
                coarsest(&type[SL_TP_KIND_FFN_DOWN_EXPS], &L->moe.down[e]);
        coarsest(&type[SL_TP_KIND_FFN_DOWN_SHEXP], &L->moe.sh_down);
    }
    return sl_tp_plan_init(plan, &m->hp, type, n_shard, err);
}
