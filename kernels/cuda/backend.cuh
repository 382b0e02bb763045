/* kernels/cuda/backend.cuh: the CUDA backend's state, shared by its two
 * halves: backend.cu creates and destroys it, forward.cu runs the steps on
 * it. Private to libsluice_cuda.so (kernels/backend.h is the interface,
 * cuda_backend.h the library's entry point).
 * Who:       the thread that drives the backend, one step at a time; nothing
 *            here locks.
 * Ownership: backend.cu allocates every buffer at creation and frees it in
 *            its destroy slot. forward.cu writes only the per-step fields
 *            (use_gemm, use_fa, fa_groups, fa_decode, fa_off, step_ctx, sampler_gen,
 *            graph_max), the graph table's
 *            slots and the pinned logits array, and grows the staging only
 *            through sl_cuda_forward_meta_reserve(). */
#ifndef SL_CUDA_BACKEND_CUH
#define SL_CUDA_BACKEND_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_fa.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/paged.cuh"
#include "kernels/cuda/profile.cuh"
#include "kernels/cuda/qkv_post.cuh"
#include "kernels/cuda/sample.cuh"

#define MAX_LOGIT_ROWS 256         /* logits rows computed and copied back per chunk, at most */

typedef struct {
    const float *attn_norm, *ffn_norm;    /* (n_embd) */
    sl_cuda_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    const float *bq, *bk, *bv;            /* qwen2/gpt-oss biases or NULL */
    const float *bo;                      /* gpt-oss: attn_output bias (n_embd) or NULL */
    const float *sinks;                   /* gpt-oss: attention sink logits (n_head) or NULL */
    const float *q_norm, *k_norm;         /* qwen3/gemma3 (head_dim) or NULL */
    const float *post_attn_norm, *post_ffn_norm;   /* gemma (n_embd) or NULL */
    int32_t window;                       /* sliding window, 0: none (sl_layer.window) */
    /* a MoE layer (moe true; w_gate, w_up, w_down then unused): each expert
     * tensor uploaded as the file holds it, n_expert matrices one after
     * another; the sl_cuda_weight is expert 0's (moe.cuh) */
    bool moe;
    sl_cuda_weight router;                /* (n_embd -> n_expert), never given a float16 copy */
    sl_cuda_weight exp_gate, exp_up;      /* (n_embd -> n_ff_exp) x n_expert */
    sl_cuda_weight exp_down;              /* (n_ff_exp -> n_embd) x n_expert */
    sl_cuda_weight sh_gate, sh_up, sh_down, sh_gate_inp;   /* qwen2moe's shared expert, data NULL otherwise */
    const float *router_b;                /* gpt-oss: (n_expert) router bias, else NULL */
    const float *exp_gate_b, *exp_up_b;   /* gpt-oss: (n_expert, n_ff_exp) expert biases, else NULL */
    const float *exp_down_b;              /* gpt-oss: (n_expert, n_embd), else NULL */
} cuda_layer;

typedef struct {
    sl_backend base;
    cudaStream_t stream;
    bool stream_ok;

    uint8_t *weights;            /* one allocation holding every tensor below */
    cuda_layer *layers;          /* (n_layer), host array of device pointers */
    sl_cuda_weight tok_embd, output;
    const float *output_norm;
    double *inv_freq;            /* (n_rot/2), inside `weights` */
    double *inv_freq_swa;        /* (n_rot/2) at rope_freq_base_swa, right after inv_freq */
    sl_cuda_qkv_params qkv;      /* per-layer fields filled at each layer */

    sl_cuda_kv kv;               /* kv.kv: (n_layer, 2, n_kv_blocks, n_head_kv, block_size) rows of kv.type (paged.cuh) */

    /* scratch for T = max_batch_tokens rows */
    float *x;                    /* (T, n_embd) residual stream */
    float *xn;                   /* (T, max(n_embd, q_dim)) normed input / projection output */
    float *q, *k, *v;            /* (T, q_dim), (T, kv_dim) x2 */
    float *att;                  /* (T, q_dim) attention output */
    float *att_split;            /* split-K partials, att_split_floats (attention.cuh); NULL: max_ctx never splits */
    int64_t att_split_floats;
    float *gate, *up;            /* (T, n_ff) */
    float *logits;               /* (logit_rows, n_vocab) */

    /* MoE layers' scratch for T rows and R = T * n_expert_used routed pairs
     * (moe.cuh), one allocation (moe.base), NULL for a dense model */
    struct {
        uint8_t *base;
        float *logits;           /* (T, n_expert) router outputs */
        int32_t *ids;            /* (T, k) chosen experts */
        float *w;                /* (T, k) their weights */
        int32_t *off;            /* (n_expert + 1) pair ranges per expert */
        int32_t *used;           /* (n_expert + 1) count, then the experts with pairs; right after off */
        int32_t *pairs;          /* (R) pair indices grouped by expert */
        float *h;                /* (R, n_ff_exp) silu(gate) * up per pair */
        float *y;                /* (R, n_embd) expert outputs per pair */
        float *sh_h, *sh_u;      /* (T, n_ff_shexp) shared expert's gate and up */
        float *shg;              /* (T) shared expert's gate logit */
        float *sh_out;           /* (T, n_embd) shared expert's output */
        int32_t *tiles;          /* the tensor-core experts' tile table (gemm_moe.cuh) */
        float *scale;            /* (R) their input rows' power-of-two divisors */
    } moe;

    /* SLUICE_CUDA_MMVQ=1: one matmul input's T rows rounded to 8 bits
     * (mmvq.cuh), xq_bytes long; NULL: the path is off */
    uint8_t *xq;
    size_t xq_bytes;

    /* per-step integers: host pinned staging, mirrored on the device:
     * [tokens T | tok_pos T | tok_table T | out_rows T | blocks | FA steps only: query groups
     *  2 fa_groups | decode rows fa_decode] */
    int32_t *meta_h, *meta_d;
    int64_t meta_cap;            /* int32 entries both hold */

    int64_t logit_rows;          /* rows cb->logits holds: min(max_batch_tokens, MAX_LOGIT_ROWS) */

    /* decode-step graphs, captured on first use, by (draws tokens or copies
     * logits, row count T in 1..graph_max, attention splits S): see
     * graph_slot. NULL: graphs off (SLUICE_CUDA_GRAPHS=0, profiling) */
    cudaGraphExec_t *graphs;
    int64_t graph_cap;
    int64_t graph_max;           /* graph_cap, or 0 after a failed capture */
    uint64_t sampler_gen;        /* the sampler staging the sampling graphs point into */

    /* tensor-core path for steps of >= gemm_min token rows (gemm.cuh); NULL: off */
    sl_cuda_gemm *gemm;
    __half *f16;                 /* one allocation holding every matrix's float16 copy */
    int64_t gemm_min;
    bool use_gemm;               /* this step's choice (forward_steps) */
    /* flash attention on tensor cores (attention_fa.cuh) for steps that take
     * the tensor-core path and carry a prompt chunk: fa_ok says the model and
     * cache allow it and SLUICE_CUDA_FLASH_ATTN is not 0 (read at creation) */
    bool fa_ok;
    bool use_fa;                 /* this step's choice (forward_steps) */
    int64_t fa_groups;           /* this step's query groups: (start, end) pairs staged at meta + fa_off */
    int64_t fa_decode;           /* its decode rows, listed after the pairs, for the split kernel */
    int64_t fa_off;
    int64_t step_ctx;            /* this step's longest context, max(pos) + 1 (forward_steps) */

    /* the caller's logits array, page-locked in place so copies to it run at
     * full speed (a pageable target halves them); grown as steps ask for more */
    float *pinned_ptr;
    size_t pinned_bytes;
    bool pin_failed;

    sl_cuda_sampler *sampler;    /* draws tokens on the device (forward_sample) */

    sl_cuda_profile *prof;       /* SLUICE_CUDA_PROFILE=1: per-op timing, else NULL */
} cuda_backend;

/* ------------------------------------------------------------------------ */
/* the decode-graph table: allocated by backend.cu, filled by forward.cu    */

#define GRAPH_SPLITS (SL_CUDA_ATTN_SPLIT_MAX + 1)

static inline int64_t graph_slots(int64_t cap)
{
    return 2 * (cap + 1) * GRAPH_SPLITS;
}

/* Where the graph of a decode step lives: one per (sampling on the device
 * or not, T rows, S attention splits), since each bakes in its launches. */
static inline cudaGraphExec_t *graph_slot(cuda_backend *cb, bool sampling, int64_t T, int S)
{
    return &cb->graphs[((sampling ? 1 : 0) * (cb->graph_cap + 1) + T) * GRAPH_SPLITS + S];
}

#endif
