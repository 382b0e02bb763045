/* model/tp_plan.h: the tensor-parallel sharding plan: which part of each
 * weight every one of N devices holds, Megatron-style, or why the model
 * cannot be split N ways.
 * Where:     `sluice serve --tensor-parallel N` validates a model with it;
 *            tools/tpplan prints it as JSON for the float64 simulation of
 *            tests/reference/test_tensor_parallel.py. No backend runs it yet
 *            (docs/TENSOR_PARALLEL.md).
 * Ownership: a plan is a plain value in caller storage: no pointers, nothing
 *            to free. It reads the hyperparameters and weight types only.
 * Errors:    SL_EINVAL with err naming the reason (the count that does not
 *            divide, or the matrix whose blocks a split would cut).
 *
 * The split, per layer (rows are a stored matrix's outputs, ne1; a row's
 * elements are its inputs, ne0; model/model.h sl_weight):
 *   attn_q, attn_k, attn_v    OUT: whole heads. Shard s owns q heads
 *                             [s*n_head/N, (s+1)*n_head/N) and their rows; the
 *                             q biases and gpt-oss's attn_sinks follow them.
 *                             KV heads: n_head_kv % N == 0 splits them the same
 *                             way; n_head_kv < N with N % n_head_kv == 0
 *                             replicates each KV head on N/n_head_kv shards
 *                             (kv_replicas), each shard holding the one KV
 *                             head its q heads read. Any other count is refused.
 *   attn_output               IN: the columns of the shard's q heads; its
 *                             partial sums meet in an all-reduce (sum), after
 *                             which the bias (gpt-oss), the post-norm (gemma)
 *                             and the residual scale apply, once.
 *   ffn_gate, ffn_up          OUT: a range of n_ff; ffn_down IN: the same
 *                             range, then the second all-reduce.
 *   MoE: every expert is split by n_ff_exp, not placed whole on one shard:
 *   each shard holds a slice of every expert, so routing (ffn_gate_inp,
 *   replicated: every shard computes the same top-k) needs no exchange of
 *   tokens, and the load is even whatever the router picks. ffn_gate_exps and
 *   ffn_up_exps OUT, ffn_down_exps IN (and their biases with them); the shared
 *   expert likewise by n_ff_shexp; the one all-reduce sums the weighted
 *   routed and shared partials (both linear in the shard's slice).
 *   output                    OUT: a range of the vocabulary (vocab-parallel);
 *                             the shards' logit slices are gathered.
 *   token_embd, norms, q/k norms, the routers: replicated.
 * An IN split cuts every row of a quantized matrix: it must fall on a block
 * boundary (sl_ggml_block_elems), which also keeps the activation's own
 * quantization blocks (Q8_0, Q8_K) the unsharded ones. Head ranges are
 * equal; n_ff-like ranges are balanced in whole blocks of the IN-split
 * matrix's type (shards may differ by one block: the all-reduce adds partial
 * sums, it needs no equal widths); the vocabulary is balanced in rows. */
#ifndef SL_MODEL_TP_PLAN_H
#define SL_MODEL_TP_PLAN_H

#include <stdint.h>

#include "model/model.h"
#include "shared/status.h"

/* Shards a plan holds at most (and the largest --tensor-parallel). */
#define SL_TP_MAX_SHARDS 64

/* How a shard holds a weight kind. */
enum sl_tp_split {
    SL_TP_SPLIT_ABSENT,     /* the model has no such weight (a dense model's experts) */
    SL_TP_SPLIT_NONE,       /* replicated: every shard holds the whole matrix */
    SL_TP_SPLIT_OUT,        /* rows [begin, end): a range of the outputs */
    SL_TP_SPLIT_IN,         /* elements [begin, end) of every row: a range of the inputs */
};

/* The weight kinds, named as the GGUF tensors' stems (sl_tp_kind_name). */
enum sl_tp_kind {
    SL_TP_KIND_TOKEN_EMBD,      /* NONE */
    SL_TP_KIND_ATTN_Q,          /* OUT, the shard's q heads */
    SL_TP_KIND_ATTN_K,          /* OUT, the shard's KV heads */
    SL_TP_KIND_ATTN_V,          /* OUT, the shard's KV heads */
    SL_TP_KIND_ATTN_OUTPUT,     /* IN, the shard's q heads */
    SL_TP_KIND_FFN_GATE,        /* OUT, a range of n_ff */
    SL_TP_KIND_FFN_UP,          /* OUT, the same range */
    SL_TP_KIND_FFN_DOWN,        /* IN, the same range */
    SL_TP_KIND_FFN_GATE_INP,    /* NONE: the router */
    SL_TP_KIND_FFN_GATE_EXPS,   /* OUT, a range of n_ff_exp of every expert */
    SL_TP_KIND_FFN_UP_EXPS,     /* OUT, the same range */
    SL_TP_KIND_FFN_DOWN_EXPS,   /* IN, the same range */
    SL_TP_KIND_FFN_GATE_SHEXP,  /* OUT, a range of n_ff_shexp */
    SL_TP_KIND_FFN_UP_SHEXP,    /* OUT, the same range */
    SL_TP_KIND_FFN_DOWN_SHEXP,  /* IN, the same range */
    SL_TP_KIND_OUTPUT,          /* OUT, a range of the vocabulary */
    SL_TP_KIND_COUNT
};

/* What one shard holds of one weight kind. NONE: [0, whole); ABSENT: [0, 0). */
typedef struct {
    enum sl_tp_split split;
    int64_t begin, end;         /* rows (OUT) or elements of each row (IN) */
} sl_tp_slice;

typedef struct {
    int32_t head_begin, head_end;       /* q heads [begin, end) */
    int32_t head_kv_begin, head_kv_end; /* KV heads held, so its KV cache's heads */
    sl_tp_slice slice[SL_TP_KIND_COUNT];
} sl_tp_shard;

typedef struct {
    int32_t n_shard;                    /* N, 1..SL_TP_MAX_SHARDS */
    int32_t kv_replicas;                /* shards holding each KV head: 1 = split */
    sl_tp_shard shard[SL_TP_MAX_SHARDS];
} sl_tp_plan;

/* Plans hp over n_shard devices. type[k] is the tensor type whose blocks an
 * IN split of kind k must respect (the largest block among the layers; see
 * sl_tp_plan_for_model), or type NULL for unquantized (F32) weights.
 * n_shard 1 gives a plan that holds everything whole (OUT/IN over the full
 * range). Returns SL_OK; SL_EINVAL with err naming the reason (n_shard out
 * of range, n_head or n_head_kv not dividing, a split off a block boundary,
 * fewer blocks or rows than shards); *plan is zeroed on failure. */
sl_status sl_tp_plan_init(sl_tp_plan *plan, const sl_hparams *hp, const uint32_t *type, int32_t n_shard,
                          char err[SL_ERR_LEN]);

/* sl_tp_plan_init with the types taken from m: per IN-split kind, the type
 * with the largest block among its layers' matrices. Errors as above. */
sl_status sl_tp_plan_for_model(sl_tp_plan *plan, const sl_model *m, int32_t n_shard, char err[SL_ERR_LEN]);

/* The GGUF stem of kind k ("attn_q", "ffn_down_exps"), or "?" out of range. */
const char *sl_tp_kind_name(enum sl_tp_kind k);

/* "absent", "none", "out", "in", or "?". */
const char *sl_tp_split_name(enum sl_tp_split s);

#endif
