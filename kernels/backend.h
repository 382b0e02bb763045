/* kernels/backend.h: the one interface between the scheduler and compute.
 * Where:     the worker process (and `sluice generate`, the tools, tests).
 * Who:       one thread drives a backend; the backend may use its own threads.
 * Model:     a forward pass over a batch of sequences, each contributing
 *            n_tokens new tokens at positions [pos, pos + n_tokens): a prefill
 *            chunk, or 1 token for decode, mixed freely in one batch. Each
 *            sequence's KV cache lives in fixed-size blocks owned by the
 *            backend and addressed by the sequence's block table (the block
 *            ids the scheduler's KV manager gave it, in position order).
 * Sampling:  sl_backend_forward_sample is the one step the scheduler calls:
 *            the forward pass, then the next token of each sequence that
 *            asks, drawn by the steps of kernels/cpu/sampler.h. The CUDA
 *            backend draws on its device; the CPU backend, and the default
 *            for a backend without forward_sample, on the host
 *            (kernels/cpu/sample_batch.h).
 * Guarantee: a sequence's logits, token and logprob record are bitwise
 *            identical whatever else is in the batch and whatever the thread
 *            count (no reduction order depends on batch composition; a draw
 *            depends only on its row, its request and the seed counter).
 * Errors:    SL_OK; SL_EINVAL for a malformed batch (nothing computed);
 *            SL_EBACKEND when a step fails as a whole (the caller fails every
 *            sequence of the step; the backend stays usable); SL_ENOMEM when
 *            the first host-sampling step cannot get its rows. */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "shared/sampling.h"
#include "shared/status.h"

/* Token positions per KV block: the worker's and `sluice generate`'s block
 * size (the scheduler's default). */
#define SL_KV_BLOCK_TOKENS 16

typedef struct {
    const int32_t *tokens;    /* n_tokens token ids, each in [0, n_vocab) */
    int32_t n_tokens;         /* >= 1 */
    int32_t pos;              /* position of tokens[0]; KV holds [0, pos) from earlier calls */
    const int32_t *blocks;    /* block table covering positions [0, pos + n_tokens) */
    int32_t n_blocks;
    bool logits_all;          /* true: a logits row per new token; false: only the last */
    bool prompt;              /* the tokens are prompt (or recomputed history), not a token just
                               * sampled: a backend with two numeric paths (CUDA: tensor cores
                               * for prompts, docs/CUDA.md) keeps every prompt row on one, however
                               * the prompt is chunked, also a chunk of one token */
} sl_batch_seq;

/* How the KV cache stores K and V. */
typedef enum {
    SL_KV_TYPE_AUTO = 0,      /* the backend's default (create resolves it: cfg.kv_type says which) */
    SL_KV_TYPE_F32,           /* float32: the CPU backend's only type */
    SL_KV_TYPE_F16,           /* IEEE half */
    SL_KV_TYPE_Q8_0,          /* ggml's q8_0 along head_dim: per 32 values one half scale and 32 int8;
                               * needs head_dim % 32 == 0 */
} sl_kv_type;

/* "auto", "f32", "f16", "q8_0"; "?" for a value outside the enum. */
const char *sl_kv_type_name(sl_kv_type t);

/* Parses a name of sl_kv_type_name. Returns SL_OK, or SL_EINVAL with *out unchanged. */
sl_status sl_kv_type_parse(const char *name, sl_kv_type *out);

typedef struct {
    const char *device;       /* "cpu", "cuda" or "auto" */
    int n_threads;            /* CPU threads (>= 1) */
    uint32_t kv_block_size;   /* token positions per KV block (e.g. 16) */
    uint32_t n_kv_blocks;     /* KV blocks to allocate; 0 (cuda, auto): as many as free device
                               * memory allows after weights and scratch (the backend's cfg
                               * then holds the count chosen) */
    int32_t max_batch_tokens; /* most new tokens in one forward call */
    int32_t max_ctx;          /* longest sequence (positions) a call may reach */
    int32_t max_batch_seqs;   /* most sequences in one call, in [0, max_batch_tokens]; 0: max_batch_tokens.
                               * Sizes the host sampling rows (one logits row per sequence) */
    sl_kv_type kv_type;       /* AUTO: the backend's default. A type the backend does not store is
                               * SL_EINVAL at create, err naming it */
    double gpu_memory_fraction; /* CUDA with n_kv_blocks 0: the share of the device's total memory that
                                 * weights, scratch and the KV cache may take together, in (0, 1];
                                 * 0 (or out of range) = 0.90. The pool is also bounded by what is free */
} sl_backend_config;

typedef struct sl_backend sl_backend;

/* What one sequence of a step asks of sl_backend_forward_sample: the next
 * token drawn from the sequence's last logits row by the steps of
 * kernels/cpu/sampler.h, after the tokens `allow` leaves out (a grammar's
 * mask) and the `ban` tokens are set to -inf (the worker holds
 * end-of-generation back until min_tokens). */
typedef struct {
    const sl_sampling_params *params; /* validated (sl_sampling_validate); NULL: no token wanted */
    const int32_t *history;           /* the sequence's tokens so far (penalties read its window) */
    int32_t n_history;
    uint64_t draw_index;              /* index of the output token drawn (the seed's counter) */
    const int32_t *ban;               /* may be NULL when n_ban is 0 */
    int32_t n_ban;
    const uint32_t *allow;            /* NULL = every token; else bit t of allow[t/32] set = token t may be
                                         drawn ((n_vocab + 31) / 32 words). Applied first, like ban:
                                         disallowed logits become -inf before logprobs, bias, penalties and
                                         the draw; a row with no allowed token left draws -1 */
    sl_logprob_record *record;        /* OUT when params->n_logprobs >= 0, else unused */
} sl_sample_req;

/* Writes the allow bitmaps of a sl_backend_forward_sample_overlap call:
 * fn(ctx) fills the words its reqs' allow pointers point at (the grammar
 * masks of the step's sequences). */
typedef struct {
    void (*fn)(void *ctx);
    void *ctx;
} sl_allow_fill;

/* The vtable a backend implements. */
typedef struct {
    const char *name;         /* required: "cpu", "cuda", ... */
    /* Required. logits: OUT, one row of n_vocab floats per requested
     * position, in batch order (all rows of seqs[0], then seqs[1], ...). */
    sl_status (*forward)(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits);
    /* Required: frees the backend (sl_backend_destroy has freed the default
     * sampler's buffers first). */
    void (*destroy)(sl_backend *b);
    /* Optional (NULL: sl_backend_forward_sample runs forward, then draws on
     * the host with the reference sampler, on cfg.n_threads threads).
     * The forward pass, then one draw per sequence whose req has params:
     * tokens[i] OUT (-1 where none was asked or the draw failed). The CUDA
     * backend draws on its device, so only the chosen ids and asked records
     * cross to the host; the CPU backend draws on its compute threads. Every
     * seqs[i] has logits_all false. Same guarantee as forward: a sequence's
     * token and record do not depend on the rest of the batch. */
    sl_status (*forward_sample)(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, const sl_sample_req *reqs,
                                int32_t *tokens);
    /* Optional (NULL: fill first, then forward_sample): forward_sample that
     * calls fill once, after the forward pass is queued on the device and
     * before the draw reads the allow bitmaps, on the caller's thread. */
    sl_status (*forward_sample_overlap)(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                        const sl_sample_req *reqs, int32_t *tokens, const sl_allow_fill *fill);
} sl_backend_ops;

struct sl_backend {
    const sl_backend_ops *ops;
    const sl_model *model;
    sl_backend_config cfg;
    uint64_t kv_bytes;        /* bytes the KV cache takes */
    const char *description;  /* optional, set at create (NULL: ops->name): the compute path for status
                               * lines, a static string (the CPU backend: the dot-product ISA in use) */
    struct sl_sample_batch *_host_sampling; /* private to kernels/backend.c: the default forward_sample's rows
                                             * and scratch, made by its first call; NULL before */
};

/* Bytes one KV block takes for this model (K and V, every layer) when stored
 * as `type` (AUTO counts as F32, the widest). The layout is the CPU
 * backend's; the CUDA backend uses the same one for every type. */
uint64_t sl_backend_kv_block_bytes(const sl_model *m, uint32_t block_size, sl_kv_type type);

/* Creates the backend named by cfg->device. The model must outlive it. On
 * failure *out is NULL and err says what did not fit or is missing.
 * "cuda" loads libsluice_cuda.so at run time (docs/CUDA.md says where it is
 * looked for); "auto" (or NULL) uses it when it loads and finds a GPU, else
 * the CPU backend (with a note on stderr when the library is there but
 * unusable); other CUDA failures (out of memory) are returned, not hidden. */
sl_status sl_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out,
                            char err[SL_ERR_LEN]);

/* Validates the batch against the config (token ids, block ids, table
 * length, token counts) and runs the forward pass. */
sl_status sl_backend_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits);

/* True when the backend draws tokens itself (its forward_sample slot: the
 * CPU and CUDA backends); false when sl_backend_forward_sample uses the
 * default (forward, then the reference sampler on the host). */
bool sl_backend_samples(const sl_backend *b);

/* The logprob record of `token` from one host logits row of sl_backend_forward
 * (the raw distribution: no bias, penalties or temperature), with n_top
 * alternatives sorted as the sampler sorts them: the record the reference
 * sampler gives a draw of that token from that row (kernels/cpu/sampler.h,
 * sl_sampler_logprob_record), computed on the host. NaN entries of row become -inf. Returns SL_OK;
 * SL_EINVAL (NULL, n_vocab <= 0, token out of range). */
sl_status sl_backend_logprob_record(float *row, int32_t n_vocab, int32_t token, int32_t n_top,
                                    sl_logprob_record *record);

/* Validates like sl_backend_forward (and: logits_all false everywhere,
 * record set where logprobs are asked, ban ids in range), then runs the
 * backend's forward_sample, or the default: forward into host rows and one
 * draw per asked sequence with the reference sampler. tokens: OUT (n_seqs),
 * -1 where no token was asked or the draw failed; reqs[i].record OUT where
 * logprobs are asked. The default's first call allocates its rows (one per
 * sequence, cfg.max_batch_seqs of them) and per-thread scratch, once:
 * SL_ENOMEM then, with nothing computed. Blocks for the whole step. */
sl_status sl_backend_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                    const sl_sample_req *reqs, int32_t *tokens);

/* sl_backend_forward_sample whose allow bitmaps are written while the
 * forward pass runs: the pointers in reqs are fixed before the call, and
 * fill->fn writes the words they point at once during it, after the pass is
 * queued and before any draw, so on a GPU the host's mask work hides behind
 * the device's pass instead of adding to the step. A backend that computes
 * on the caller's threads (the CPU's) calls fill first: the same result as
 * filling before sl_backend_forward_sample. fill is called once in every
 * step that reaches its draws; not when validation refuses the batch or the
 * backend fails before the draws (the step's status then says so, and no
 * token is taken). */
sl_status sl_backend_forward_sample_overlap(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                            const sl_sample_req *reqs, int32_t *tokens, const sl_allow_fill *fill);

/* A short description of the backend's compute path for status lines
 * (b->description, else ops->name): e.g. "avx2+fma" on the CPU. Static. */
const char *sl_backend_describe(const sl_backend *b);

/* Frees the backend (and the default sampler's buffers); NULL is a no-op. */
void sl_backend_destroy(sl_backend *b);

/* Rows of logits a batch produces. */
int64_t sl_batch_logit_rows(const sl_batch_seq *seqs, int32_t n_seqs);

/* Most sequences one call may carry: cfg->max_batch_seqs, or
 * max_batch_tokens when that is 0. */
int32_t sl_backend_max_batch_seqs(const sl_backend_config *cfg);

#endif
