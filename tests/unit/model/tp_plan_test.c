/* tests/unit/model/tp_plan_test.c: model/tp_plan.c on real models' shapes
 * (Llama 3.1 8B and 70B, Qwen2.5 0.5B with its 14/2 heads, Gemma 3 270M with
 * one KV head, Qwen3-30B-A3B's experts) and their Q4_K_M-style types: every
 * split kind covers its whole range once, in the shards' order, on block
 * boundaries; and each refusal names its reason. The float64 check that the
 * shards' partial sums equal the unsharded pass is
 * tests/reference/test_tensor_parallel.py. */
#include <criterion/criterion.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/tp_plan.h"

static sl_hparams shape(int32_t n_vocab, int32_t n_embd, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                        int32_t n_ff)
{
    sl_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_vocab = n_vocab;
    hp.n_embd = n_embd;
    hp.n_layer = 2;
    hp.n_head = n_head;
    hp.n_head_kv = n_head_kv;
    hp.head_dim = head_dim;
    hp.n_ff = n_ff;
    return hp;
}

static sl_hparams llama8b(void) { return shape(128256, 4096, 32, 8, 128, 14336); }
static sl_hparams llama70b(void) { return shape(128256, 8192, 64, 8, 128, 28672); }
static sl_hparams qwen05b(void) { return shape(151936, 896, 14, 2, 64, 4864); }
static sl_hparams gemma3_270m(void) { return shape(262144, 640, 4, 1, 256, 2048); }

static sl_hparams qwen3_30b_a3b(void)
{
    sl_hparams hp = shape(151936, 2048, 32, 4, 128, 6144);
    hp.n_expert = 128;
    hp.n_expert_used = 8;
    hp.n_ff_exp = 768;
    return hp;
}

/* Q4_K_M's usual choice: Q4_K attention output, Q6_K down projections. */
static void types_q4_k_m(uint32_t t[SL_TP_KIND_COUNT])
{
    for (int k = 0; k < SL_TP_KIND_COUNT; k++)
        t[k] = SL_GGML_TYPE_Q4_K;
    t[SL_TP_KIND_FFN_DOWN] = t[SL_TP_KIND_FFN_DOWN_EXPS] = t[SL_TP_KIND_FFN_DOWN_SHEXP] = SL_GGML_TYPE_Q6_K;
}

static void types_all(uint32_t t[SL_TP_KIND_COUNT], uint32_t type)
{
    for (int k = 0; k < SL_TP_KIND_COUNT; k++)
        t[k] = type;
}

/* Kind k's shards tile [0, total) in order, with the split given, each
 * non-empty and (IN) starting and ending on a multiple of block. */
static void expect_tiles(const sl_tp_plan *p, enum sl_tp_kind k, enum sl_tp_split split, int64_t total,
                         uint32_t block)
{
    int64_t at = 0;
    for (int32_t s = 0; s < p->n_shard; s++) {
        const sl_tp_slice *sl = &p->shard[s].slice[k];
        cr_expect_eq(sl->split, split, "%s shard %d: split %s", sl_tp_kind_name(k), s, sl_tp_split_name(sl->split));
        cr_expect_eq(sl->begin, at, "%s shard %d begins at %lld, not %lld", sl_tp_kind_name(k), s,
                     (long long)sl->begin, (long long)at);
        cr_expect_gt(sl->end, sl->begin, "%s shard %d is empty", sl_tp_kind_name(k), s);
        if (split == SL_TP_SPLIT_IN)
            cr_expect_eq(sl->begin % block + sl->end % block, 0, "%s shard %d [%lld, %lld) off blocks of %u",
                         sl_tp_kind_name(k), s, (long long)sl->begin, (long long)sl->end, block);
        at = sl->end;
    }
    cr_expect_eq(at, total, "%s ends at %lld, not %lld", sl_tp_kind_name(k), (long long)at, (long long)total);
}

static void expect_dense(const sl_tp_plan *p, const sl_hparams *hp, uint32_t down_block, uint32_t wo_block)
{
    int64_t q = (int64_t)hp->n_head * hp->head_dim;
    expect_tiles(p, SL_TP_KIND_ATTN_Q, SL_TP_SPLIT_OUT, q, 1);
    expect_tiles(p, SL_TP_KIND_ATTN_OUTPUT, SL_TP_SPLIT_IN, q, wo_block);
    expect_tiles(p, SL_TP_KIND_FFN_GATE, SL_TP_SPLIT_OUT, hp->n_ff, 1);
    expect_tiles(p, SL_TP_KIND_FFN_UP, SL_TP_SPLIT_OUT, hp->n_ff, 1);
    expect_tiles(p, SL_TP_KIND_FFN_DOWN, SL_TP_SPLIT_IN, hp->n_ff, down_block);
    expect_tiles(p, SL_TP_KIND_OUTPUT, SL_TP_SPLIT_OUT, hp->n_vocab, 1);
    for (int32_t s = 0; s < p->n_shard; s++) {
        const sl_tp_shard *sh = &p->shard[s];
        cr_expect_eq(sh->slice[SL_TP_KIND_TOKEN_EMBD].split, SL_TP_SPLIT_NONE);
        cr_expect_eq(sh->slice[SL_TP_KIND_FFN_GATE_EXPS].split, SL_TP_SPLIT_ABSENT);
        cr_expect_eq(sh->slice[SL_TP_KIND_FFN_DOWN_SHEXP].split, SL_TP_SPLIT_ABSENT);
        /* gate, up and down cut n_ff at the same places */
        cr_expect_eq(sh->slice[SL_TP_KIND_FFN_GATE].begin, sh->slice[SL_TP_KIND_FFN_DOWN].begin);
        cr_expect_eq(sh->slice[SL_TP_KIND_FFN_UP].end, sh->slice[SL_TP_KIND_FFN_DOWN].end);
        /* each shard's q heads read only the KV heads it holds */
        int32_t group = hp->n_head / hp->n_head_kv;
        cr_expect_geq(sh->head_begin / group, sh->head_kv_begin, "shard %d", s);
        cr_expect_lt((sh->head_end - 1) / group, sh->head_kv_end, "shard %d", s);
        cr_expect_eq(sh->slice[SL_TP_KIND_ATTN_K].begin, (int64_t)sh->head_kv_begin * hp->head_dim);
        cr_expect_eq(sh->slice[SL_TP_KIND_ATTN_V].end, (int64_t)sh->head_kv_end * hp->head_dim);
    }
}

/* ---- plans that work ---------------------------------------------------- */

Test(tp_plan, one_shard_holds_everything)
{
    sl_hparams hp = llama8b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 1, err), SL_OK, "%s", err);
    cr_expect_eq(p.kv_replicas, 1);
    expect_dense(&p, &hp, 256, 256);
    cr_expect_eq(p.shard[0].head_kv_end, 8);
}

Test(tp_plan, llama_8b_splits_two_four_and_eight_ways)
{
    sl_hparams hp = llama8b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    for (int32_t n = 2; n <= 8; n *= 2) {
        sl_tp_plan p;
        char err[SL_ERR_LEN] = "";
        cr_assert_eq(sl_tp_plan_init(&p, &hp, t, n, err), SL_OK, "N=%d: %s", n, err);
        cr_expect_eq(p.n_shard, n);
        cr_expect_eq(p.kv_replicas, 1);
        expect_dense(&p, &hp, 256, 256);
        cr_expect_eq(p.shard[n - 1].head_begin, 32 - 32 / n);
        cr_expect_eq(p.shard[n - 1].head_kv_begin, 8 - 8 / n);
        /* 14336 = 56 blocks of 256: even at 2, 4 and 8 */
        cr_expect_eq(p.shard[0].slice[SL_TP_KIND_FFN_DOWN].end, 14336 / n);
    }
}

Test(tp_plan, llama_8b_sixteen_ways_replicates_kv_heads_in_pairs)
{
    sl_hparams hp = llama8b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 16, err), SL_OK, "%s", err);
    cr_expect_eq(p.kv_replicas, 2);
    expect_dense(&p, &hp, 256, 256);
    for (int32_t s = 0; s < 16; s++) {
        cr_expect_eq(p.shard[s].head_kv_begin, s / 2);
        cr_expect_eq(p.shard[s].head_kv_end, s / 2 + 1);
    }
}

Test(tp_plan, llama_70b_eight_ways)
{
    sl_hparams hp = llama70b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 8, err), SL_OK, "%s", err);
    expect_dense(&p, &hp, 256, 256);
    cr_expect_eq(p.shard[3].head_begin, 24);
    cr_expect_eq(p.shard[3].head_kv_begin, 3);
    cr_expect_eq(p.shard[3].slice[SL_TP_KIND_FFN_UP].begin, 3 * 3584);
    cr_expect_eq(p.shard[7].slice[SL_TP_KIND_OUTPUT].begin, 7 * 128256 / 8);
}

/* Qwen2.5 0.5B's Q4_K_M file: attn_output's rows (896) are no multiple of
 * 256, so its quantizer picks a 32-element type; ffn_down is Q6_K. */
Test(tp_plan, qwen_05b_two_ways_balances_n_ff_in_blocks)
{
    sl_hparams hp = qwen05b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    t[SL_TP_KIND_ATTN_OUTPUT] = SL_GGML_TYPE_Q5_0;
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 2, err), SL_OK, "%s", err);
    expect_dense(&p, &hp, 256, 32);
    cr_expect_eq(p.shard[1].head_begin, 7);
    cr_expect_eq(p.shard[1].head_kv_begin, 1);
    /* 4864 = 19 blocks of 256: 9 and 10 */
    cr_expect_eq(p.shard[0].slice[SL_TP_KIND_FFN_DOWN].end, 9 * 256);
}

Test(tp_plan, qwen_05b_fourteen_ways_replicates_each_kv_head_seven_times)
{
    sl_hparams hp = qwen05b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_all(t, SL_GGML_TYPE_Q8_0);
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 14, err), SL_OK, "%s", err);
    cr_expect_eq(p.kv_replicas, 7);
    expect_dense(&p, &hp, 32, 32);
    cr_expect_eq(p.shard[6].head_kv_begin, 0);
    cr_expect_eq(p.shard[7].head_kv_begin, 1);
}

Test(tp_plan, gemma3_270m_replicates_its_one_kv_head)
{
    sl_hparams hp = gemma3_270m();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    for (int32_t n = 2; n <= 4; n *= 2) {
        sl_tp_plan p;
        char err[SL_ERR_LEN] = "";
        cr_assert_eq(sl_tp_plan_init(&p, &hp, t, n, err), SL_OK, "N=%d: %s", n, err);
        cr_expect_eq(p.kv_replicas, n);
        expect_dense(&p, &hp, 256, 256);
        for (int32_t s = 0; s < n; s++)
            cr_expect_eq(p.shard[s].slice[SL_TP_KIND_ATTN_K].end, 256);
    }
}

Test(tp_plan, qwen3_30b_a3b_splits_every_expert)
{
    sl_hparams hp = qwen3_30b_a3b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_all(t, SL_GGML_TYPE_Q8_0);
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 8, err), SL_OK, "%s", err);
    cr_expect_eq(p.kv_replicas, 2);
    expect_tiles(&p, SL_TP_KIND_FFN_GATE_EXPS, SL_TP_SPLIT_OUT, 768, 1);
    expect_tiles(&p, SL_TP_KIND_FFN_UP_EXPS, SL_TP_SPLIT_OUT, 768, 1);
    expect_tiles(&p, SL_TP_KIND_FFN_DOWN_EXPS, SL_TP_SPLIT_IN, 768, 32);
    for (int32_t s = 0; s < 8; s++) {
        cr_expect_eq(p.shard[s].slice[SL_TP_KIND_FFN_DOWN_EXPS].end - p.shard[s].slice[SL_TP_KIND_FFN_DOWN_EXPS].begin,
                     96);
        cr_expect_eq(p.shard[s].slice[SL_TP_KIND_FFN_GATE_INP].split, SL_TP_SPLIT_NONE);
        cr_expect_eq(p.shard[s].slice[SL_TP_KIND_FFN_GATE_INP].end, 128);
        cr_expect_eq(p.shard[s].slice[SL_TP_KIND_FFN_DOWN].split, SL_TP_SPLIT_ABSENT);
        cr_expect_eq(p.shard[s].slice[SL_TP_KIND_FFN_DOWN_SHEXP].split, SL_TP_SPLIT_ABSENT);
    }
}

Test(tp_plan, shared_expert_is_split_by_its_own_width)
{
    sl_hparams hp = qwen3_30b_a3b();
    hp.n_ff_shexp = 5632;   /* Qwen1.5-MoE-A2.7B's shared expert is 4 * 1408 wide */
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, t, 2, err), SL_OK, "%s", err);
    expect_tiles(&p, SL_TP_KIND_FFN_GATE_SHEXP, SL_TP_SPLIT_OUT, 5632, 1);
    expect_tiles(&p, SL_TP_KIND_FFN_DOWN_SHEXP, SL_TP_SPLIT_IN, 5632, 256);
}

Test(tp_plan, unquantized_weights_need_no_block_alignment)
{
    sl_hparams hp = qwen05b();
    hp.n_ff = 4863;   /* not even a multiple of 2 */
    sl_tp_plan p;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_tp_plan_init(&p, &hp, NULL, 2, err), SL_OK, "%s", err);
    expect_dense(&p, &hp, 1, 1);
    cr_expect_eq(p.shard[0].slice[SL_TP_KIND_FFN_DOWN].end, 2431);
}

Test(tp_plan, names)
{
    cr_expect_str_eq(sl_tp_kind_name(SL_TP_KIND_FFN_DOWN_EXPS), "ffn_down_exps");
    cr_expect_str_eq(sl_tp_kind_name(SL_TP_KIND_OUTPUT), "output");
    cr_expect_str_eq(sl_tp_kind_name(SL_TP_KIND_COUNT), "?");
    cr_expect_str_eq(sl_tp_split_name(SL_TP_SPLIT_IN), "in");
    cr_expect_str_eq(sl_tp_split_name((enum sl_tp_split)9), "?");
    for (int k = 0; k < SL_TP_KIND_COUNT; k++)
        cr_expect_neq(sl_tp_kind_name((enum sl_tp_kind)k), NULL);
}

/* ---- refusals ----------------------------------------------------------- */

static void expect_refused(const sl_hparams *hp, const uint32_t *t, int32_t n, const char *needle)
{
    sl_tp_plan p;
    memset(&p, 0x5a, sizeof p);
    char err[SL_ERR_LEN] = "";
    cr_expect_eq(sl_tp_plan_init(&p, hp, t, n, err), SL_EINVAL, "N=%d accepted", n);
    cr_expect(strstr(err, needle) != NULL, "N=%d: '%s' lacks '%s'", n, err, needle);
    cr_expect_eq(p.n_shard, 0, "the plan is zeroed on failure");
}

Test(tp_plan, shard_count_out_of_range)
{
    sl_hparams hp = llama8b();
    expect_refused(&hp, NULL, 0, "--tensor-parallel 0 is out of range (1..64)");
    expect_refused(&hp, NULL, -1, "--tensor-parallel -1 is out of range");
    expect_refused(&hp, NULL, 65, "--tensor-parallel 65 is out of range");
}

Test(tp_plan, heads_that_do_not_divide)
{
    sl_hparams hp = llama8b();
    expect_refused(&hp, NULL, 3, "n_head 32 is not divisible by --tensor-parallel 3");
    hp = qwen05b();
    expect_refused(&hp, NULL, 4, "n_head 14 is not divisible by --tensor-parallel 4");
    expect_refused(&hp, NULL, 7, "n_head_kv 2 is fewer than --tensor-parallel 7 and does not divide it");
    hp = shape(32000, 4096, 48, 12, 128, 14336);   /* n_head 48 divides 8 ways, n_head_kv 12 does not */
    expect_refused(&hp, NULL, 8, "n_head_kv 12 is not divisible by --tensor-parallel 8");
    hp = shape(32000, 4096, 48, 12, 128, 14336);   /* 24 ways would replicate each KV head twice; 16 cannot */
    expect_refused(&hp, NULL, 16, "n_head_kv 12 is fewer than --tensor-parallel 16 and does not divide it");
    hp = shape(32000, 4096, 10, 4, 128, 14336);    /* a broken file: 10 q heads over 4 KV heads */
    expect_refused(&hp, NULL, 2, "n_head 10, n_head_kv 4 and head_dim 128 are not a valid attention shape");
}

Test(tp_plan, attn_output_cut_off_a_block_boundary)
{
    /* 7 heads of 64 = 448 columns: not a multiple of Q4_K's 256 */
    sl_hparams hp = qwen05b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_all(t, SL_GGML_TYPE_Q4_K);
    expect_refused(&hp, t, 2,
                   "attn_output is Q4_K (blocks of 256): a shard's 448 columns (7 heads of 64) do not fall on block "
                   "boundaries");
    /* llama 8B 32 ways: one head of 128 columns per shard */
    hp = llama8b();
    expect_refused(&hp, t, 32, "a shard's 128 columns (1 heads of 128)");
    t[SL_TP_KIND_ATTN_OUTPUT] = 5;   /* a removed type id */
    expect_refused(&hp, t, 2, "attn_output is an unknown type (blocks of 0)");
}

Test(tp_plan, fewer_blocks_than_shards)
{
    sl_hparams hp = qwen3_30b_a3b();
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    t[SL_TP_KIND_FFN_DOWN_EXPS] = SL_GGML_TYPE_Q4_K;
    expect_refused(&hp, t, 4,
                   "ffn_down_exps is Q4_K (blocks of 256): n_ff_exp 768 is 3 blocks, fewer than --tensor-parallel 4");
    hp = shape(32000, 1024, 32, 32, 32, 512);
    types_all(t, SL_GGML_TYPE_Q8_0);
    expect_refused(&hp, t, 32, "ffn_down is Q8_0 (blocks of 32): n_ff 512 is 16 blocks, fewer than --tensor-parallel 32");
}

Test(tp_plan, hidden_width_not_whole_blocks_or_unknown_type)
{
    sl_hparams hp = llama8b();
    hp.n_ff = 14000;
    uint32_t t[SL_TP_KIND_COUNT];
    types_q4_k_m(t);
    expect_refused(&hp, t, 2, "ffn_down is Q6_K (blocks of 256): n_ff 14000 is not a whole number of blocks");
    hp = llama8b();
    t[SL_TP_KIND_FFN_DOWN] = 4;   /* a removed type id: no block size */
    expect_refused(&hp, t, 2, "ffn_down is an unknown type (blocks of 0)");
}

Test(tp_plan, fewer_vocabulary_rows_than_shards)
{
    sl_hparams hp = shape(4, 256, 8, 8, 32, 512);
    expect_refused(&hp, NULL, 8, "n_vocab 4 is fewer than --tensor-parallel 8");
}
