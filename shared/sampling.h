/* shared/sampling.h: a request's sampling parameters and a token's logprob
 * record, as they travel through shared memory.
 * Where:  written by front ends (from the API request) into a mailbox, read by
 *         the worker's sampler; `sluice generate` fills one from flags.
 * Layout: fixed-width fields only (this struct lives in the shm segment); the
 *         worker re-validates every field before use (sl_sampling_validate). */
#ifndef SL_SAMPLING_H
#define SL_SAMPLING_H

#include <stdint.h>

#include "shared/status.h"

#define SL_LOGIT_BIAS_MAX 300  /* OpenAI's limit on logit_bias entries */
#define SL_TOP_LOGPROBS_MAX 20 /* OpenAI's limit on top_logprobs */

typedef struct {
    int32_t token;
    float bias;                 /* added to the logit; -100 bans, +100 forces (OpenAI) */
} sl_logit_bias;

typedef struct {
    float temperature;          /* 0 = greedy (argmax); else logits / temperature */
    float top_p;                /* 1 = off; keep the smallest set with mass >= top_p */
    float min_p;                /* 0 = off; drop tokens with p < min_p * p_max */
    float repetition_penalty;   /* 1 = off; llama.cpp/CTRL style: logit>0 ? l/r : l*r */
    float presence_penalty;     /* 0 = off; minus this once a token appeared */
    float frequency_penalty;    /* 0 = off; minus this times its count */
    int32_t top_k;              /* 0 = off (all tokens) */
    int32_t penalty_last_n;     /* window of recent tokens penalties look at; -1 = whole context, 0 = none */
    int32_t n_logprobs;         /* -1 = no logprobs; 0 = chosen token only; 1..20 also top-n alternatives */
    int32_t n_logit_bias;       /* entries used in logit_bias */
    uint64_t seed;              /* RNG seed; the draw for output token i depends only on (seed, i) */
    sl_logit_bias logit_bias[SL_LOGIT_BIAS_MAX];
} sl_sampling_params;

/* The logprob record of one generated token (OpenAI's logprobs.content[i]). */
typedef struct {
    int32_t token;
    float logprob;              /* log-softmax of the chosen token, before sampling filters */
    int32_t n_top;              /* entries used in top[] */
    struct { int32_t token; float logprob; } top[SL_TOP_LOGPROBS_MAX];
} sl_logprob_record;

/* Fills `p` with the defaults (OpenAI's): temperature 1, top_p 1, min_p 0,
 * penalties off, top_k 0, penalty_last_n 64, no logprobs, no bias, seed 0. */
void sl_sampling_params_default(sl_sampling_params *p);

/* Checks every field's range (finite floats, temperature >= 0, 0 < top_p <= 1,
 * 0 <= min_p <= 1, repetition_penalty > 0, |presence/frequency| <= 2,
 * top_k >= 0, penalty_last_n >= -1, -1 <= n_logprobs <= 20,
 * 0 <= n_logit_bias <= SL_LOGIT_BIAS_MAX, bias tokens in [0, n_vocab), biases
 * finite). Returns SL_OK or SL_EINVAL with `why` naming the field (why may be
 * NULL). */
/* The uniform double in [0, 1) that draw `draw_index` of seed `seed` uses
 * (splitmix64 of both): one definition for every sampler, host or device. */
double sl_sampling_uniform(uint64_t seed, uint64_t draw_index);

sl_status sl_sampling_validate(const sl_sampling_params *p, int32_t n_vocab, const char **why);

#endif
