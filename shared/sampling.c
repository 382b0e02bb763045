/* shared/sampling.c: defaults and range checks for sampling parameters.
 * Both sides run the checks: the front end to answer 400, the worker because
 * it never trusts shared memory. */
#include <math.h>
#include <string.h>

#include "shared/sampling.h"

void sl_sampling_params_default(sl_sampling_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->top_k = 0;
    p->penalty_last_n = 64;
    p->n_logprobs = -1;
}

/* splitmix64's output function: a bijection with good avalanche, so
 * mix(seed ^ mix(i)) gives every (seed, i) its own well-spread word. */
static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sl_sampling_uniform(uint64_t seed, uint64_t draw_index)
{
    uint64_t z = mix64(seed ^ mix64(draw_index));
    return (double)(z >> 11) * 0x1.0p-53;   /* 53 random bits: exact in a double */
}

#define FAIL(field) do { if (why) *why = field; return SL_EINVAL; } while (0)

sl_status sl_sampling_validate(const sl_sampling_params *p, int32_t n_vocab, const char **why)
{
    if (!isfinite(p->temperature) || p->temperature < 0.0f) FAIL("temperature");
    if (!isfinite(p->top_p) || p->top_p <= 0.0f || p->top_p > 1.0f) FAIL("top_p");
    if (!isfinite(p->min_p) || p->min_p < 0.0f || p->min_p > 1.0f) FAIL("min_p");
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty <= 0.0f) FAIL("repetition_penalty");
    if (!isfinite(p->presence_penalty) || fabsf(p->presence_penalty) > 2.0f) FAIL("presence_penalty");
    if (!isfinite(p->frequency_penalty) || fabsf(p->frequency_penalty) > 2.0f) FAIL("frequency_penalty");
    if (p->top_k < 0) FAIL("top_k");
    if (p->penalty_last_n < -1) FAIL("penalty_last_n");
    if (p->n_logprobs < -1 || p->n_logprobs > SL_TOP_LOGPROBS_MAX) FAIL("top_logprobs");
    if (p->n_logit_bias < 0 || p->n_logit_bias > SL_LOGIT_BIAS_MAX) FAIL("logit_bias");
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab) FAIL("logit_bias");
        if (!isfinite(p->logit_bias[i].bias)) FAIL("logit_bias");
    }
    return SL_OK;
}
