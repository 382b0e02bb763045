/* frontend/metrics.c: the series of GET /metrics, under sluice's names or
 * vLLM's (--metrics-names sluice|vllm), each with a model_name label.
 * Runs in the front end answering a scrape; every number comes from the
 * shared segment (counters, histograms, the mailbox census, the worker's
 * snapshot), so any front end answers for the whole server.
 * The trade-off: one table names each series in both schemes, so a dashboard
 * built for vLLM reads the same numbers as sluice's own; a series vLLM has no
 * name for is left out in vllm mode (the names a vLLM scrape could never
 * show would break nothing, but they would not be vLLM's either), and two
 * vLLM names for one series (a renamed metric and its deprecated name) are
 * both written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "shared/alloc.h"
#include "shared/build_info.h"
#include "frontend/api_metrics.h"
#include "frontend/server_internal.h"

/* One series' names: sluice's (always), vLLM's (NULL: none) and a second
 * vLLM name written with the same value (NULL: none). */
typedef struct {
    const char *sluice, *vllm, *vllm_also, *help;
} series_names;

typedef struct {
    sl_api_metrics *m;
    bool vllm;
    sl_api_metric_label labels[5];   /* model_name first, then the series' own */
} scrape;

typedef enum { KIND_COUNTER, KIND_GAUGE } simple_kind;

/* Writes one counter or gauge sample under the scheme's name(s); extra
 * labels follow model_name. */
static void simple(scrape *s, simple_kind kind, const series_names *n, const sl_api_metric_label *extra,
                   size_t n_extra, double value)
{
    const char *names[2] = {s->vllm ? n->vllm : n->sluice, s->vllm ? n->vllm_also : NULL};
    for (size_t i = 0; i < n_extra; i++)
        s->labels[1 + i] = extra[i];
    for (int k = 0; k < 2; k++) {
        if (names[k] == NULL)
            continue;
        if (kind == KIND_COUNTER)
            sl_api_metrics_counter(s->m, names[k], n->help, s->labels, 1 + n_extra, value);
        else
            sl_api_metrics_gauge(s->m, names[k], n->help, s->labels, 1 + n_extra, value);
    }
}

static void counters(scrape *s, const sl_fe *fe)
{
    static const struct { sl_counter c; series_names n; } table[] = {
        {SL_COUNTER_REQUESTS_SUBMITTED, {"sluice_requests_submitted_total", NULL, NULL, "Requests handed to the worker."}},
        {SL_COUNTER_REQUESTS_REJECTED_FULL, {"sluice_requests_rejected_queue_full_total", NULL, NULL,
                                             "Requests refused with 429 (queue full)."}},
        {SL_COUNTER_REQUESTS_FINISHED, {"sluice_requests_finished_total", NULL, NULL,
                                        "Requests that ended with stop or length."}},
        {SL_COUNTER_REQUESTS_FAILED, {"sluice_requests_failed_total", NULL, NULL, "Requests that ended with an error."}},
        {SL_COUNTER_REQUESTS_CANCELLED, {"sluice_requests_cancelled_total", NULL, NULL,
                                         "Requests cancelled (client gone, stop string)."}},
        {SL_COUNTER_TOKENS_GENERATED, {"sluice_generation_tokens_total", "vllm:generation_tokens_total", NULL,
                                       "Tokens generated."}},
        {SL_COUNTER_PROMPT_TOKENS, {"sluice_prompt_tokens_total", "vllm:prompt_tokens_total", NULL,
                                    "Prompt tokens submitted."}},
        {SL_COUNTER_WORKER_RESTARTS, {"sluice_worker_restarts_total", NULL, NULL,
                                      "Worker processes restarted after a death."}},
        {SL_COUNTER_FRONTEND_RESTARTS, {"sluice_frontend_restarts_total", NULL, NULL,
                                        "Front-end processes restarted after a death."}},
        {SL_COUNTER_PREFIX_QUERY_TOKENS, {"sluice_prefix_cache_queries_total", "vllm:prefix_cache_queries_total", NULL,
                                          "Prompt tokens looked up in the prefix cache."}},
        {SL_COUNTER_PREFIX_HIT_TOKENS, {"sluice_prefix_cache_hits_total", "vllm:prefix_cache_hits_total", NULL,
                                        "Prompt tokens found in the prefix cache (not recomputed)."}},
        {SL_COUNTER_GRAMMAR_REQUESTS, {"sluice_grammar_requests_total", NULL, NULL,
                                       "Requests decoded under a grammar (JSON Schema, regex, GBNF)."}},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        simple(s, KIND_COUNTER, &table[i].n, NULL, 0, (double)sl_shm_counter_get(fe->shm, table[i].c));
    static const series_names mask = {"sluice_grammar_mask_seconds_total", NULL, NULL,
                                      "Worker time spent computing grammar token masks."};
    simple(s, KIND_COUNTER, &mask, NULL, 0, (double)sl_shm_counter_get(fe->shm, SL_COUNTER_GRAMMAR_MASK_NS) / 1e9);

    /* Every reason, 0 included, as vLLM writes them: a rate() over a reason
     * that has not happened yet is 0, not absent. */
    static const struct { sl_counter c; const char *reason; } success[] = {
        {SL_COUNTER_SUCCESS_STOP, "stop"},
        {SL_COUNTER_SUCCESS_LENGTH, "length"},
        {SL_COUNTER_SUCCESS_TOOL_CALLS, "tool_calls"},
        {SL_COUNTER_SUCCESS_ABORT, "abort"},
    };
    static const series_names ok = {"sluice_request_success_total", "vllm:request_success_total", NULL,
                                    "Choices that ended, by finish reason (abort: the client went away first)."};
    for (size_t i = 0; i < sizeof success / sizeof success[0]; i++) {
        sl_api_metric_label reason = {"finished_reason", success[i].reason};
        simple(s, KIND_COUNTER, &ok, &reason, 1, (double)sl_shm_counter_get(fe->shm, success[i].c));
    }
}

/* KV usage comes from the worker's snapshot: a top-level (or "kv" /
 * "scheduler" object) number under `key`. */
static bool snapshot_number(json_t *snap, const char *key, double *out)
{
    const char *groups[] = {NULL, "kv", "scheduler"};
    for (size_t g = 0; g < 3; g++) {
        json_t *o = groups[g] ? json_object_get(snap, groups[g]) : snap;
        json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
        if (json_is_number(v)) {
            *out = json_number_value(v);
            return true;
        }
    }
    return false;
}


static void gauges(scrape *s, const sl_fe *fe)
{
    static const series_names build = {"sluice_build_info", NULL, NULL,
                                       "1, with the build's version, git commit, build type and CUDA backend."};
    sl_api_metric_label facts[] = {{"version", sl_build_version}, {"commit", sl_build_commit},
                                   {"build_type", sl_build_type}, {"cuda", sl_build_cuda ? "true" : "false"}};
    simple(s, KIND_GAUGE, &build, facts, 4, 1);

    static const series_names running = {"sluice_requests_running", "vllm:num_requests_running", NULL,
                                         "Requests the worker is generating for."};
    static const series_names waiting = {"sluice_requests_waiting", "vllm:num_requests_waiting", NULL,
                                         "Requests submitted, not yet taken by the worker."};
    static const series_names free_ = {"sluice_mailboxes_free", NULL, NULL, "Free request mailboxes."};
    sl_shm_census_info *cen = sl_malloc(sizeof *cen);
    if (cen != NULL) {
        sl_shm_census(fe->shm, cen);
        simple(s, KIND_GAUGE, &running, NULL, 0, (double)cen->mailboxes[SL_MAILBOX_STATE_RUNNING]);
        simple(s, KIND_GAUGE, &waiting, NULL, 0, (double)cen->mailboxes[SL_MAILBOX_STATE_SUBMITTED]);
        simple(s, KIND_GAUGE, &free_, NULL, 0, (double)cen->mailboxes[SL_MAILBOX_STATE_FREE]);
        free(cen);
    }
    static const series_names ready = {"sluice_worker_ready", NULL, NULL, "1 when the worker is READY."};
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(fe->shm, &wi);
    simple(s, KIND_GAUGE, &ready, NULL, 0, wi.worker_state == SL_WORKER_STATE_READY ? 1 : 0);

    /* vLLM 0.9 renamed gpu_cache_usage_perc to kv_cache_usage_perc (0..1 in
     * both, despite "perc"); dashboards use either. */
    static const series_names kv = {"sluice_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc",
                                    "vllm:gpu_cache_usage_perc", "KV-cache blocks in use (0..1)."};
    json_t *snap = sl_fe_worker_snapshot(fe);
    if (snap != NULL) {
        double used = 0, total = 0, ratio = 0;
        if (snapshot_number(snap, "kv_cache_usage", &ratio))
            simple(s, KIND_GAUGE, &kv, NULL, 0, ratio);
        else if (snapshot_number(snap, "kv_blocks_used", &used) && snapshot_number(snap, "kv_blocks_total", &total) &&
                 total > 0)
            simple(s, KIND_GAUGE, &kv, NULL, 0, used / total);
        json_decref(snap);
    }
}

static void histograms(scrape *s, const sl_fe *fe)
{
    static const struct { sl_histogram h; series_names n; } table[] = {
        {SL_HISTOGRAM_TTFT, {"sluice_time_to_first_token_seconds", "vllm:time_to_first_token_seconds", NULL,
                             "Submission to first token."}},
        {SL_HISTOGRAM_INTER_TOKEN, {"sluice_inter_token_latency_seconds", "vllm:inter_token_latency_seconds",
                                    "vllm:time_per_output_token_seconds",
                                    "Each gap between two consecutive tokens of a choice, as the worker made them."}},
        {SL_HISTOGRAM_MEAN_INTER_TOKEN, {"sluice_request_mean_inter_token_latency_seconds", NULL, NULL,
                                         "Per choice, (last token - first token) / (tokens - 1)."}},
        {SL_HISTOGRAM_QUEUE, {"sluice_request_queue_time_seconds", "vllm:request_queue_time_seconds", NULL,
                              "Submission to admission by the worker."}},
        {SL_HISTOGRAM_PREFILL, {"sluice_request_prefill_time_seconds", "vllm:request_prefill_time_seconds", NULL,
                                "Admission to first token."}},
        {SL_HISTOGRAM_DECODE, {"sluice_request_decode_time_seconds", "vllm:request_decode_time_seconds", NULL,
                               "First token to last token."}},
        {SL_HISTOGRAM_INFERENCE, {"sluice_request_inference_time_seconds", "vllm:request_inference_time_seconds",
                                  NULL, "Admission to last token."}},
        {SL_HISTOGRAM_E2E, {"sluice_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds", NULL,
                            "Submission to the last token."}},
        {SL_HISTOGRAM_PROMPT_TOKENS, {"sluice_request_prompt_tokens", "vllm:request_prompt_tokens", NULL,
                                      "Prompt tokens, per choice."}},
        {SL_HISTOGRAM_GENERATION_TOKENS, {"sluice_request_generation_tokens", "vllm:request_generation_tokens", NULL,
                                          "Tokens generated, per choice."}},
        {SL_HISTOGRAM_MAX_GENERATION_TOKENS, {"sluice_request_max_generation_tokens",
                                              "vllm:request_max_num_generation_tokens", NULL,
                                              "Per request, the tokens of its longest choice."}},
    };
    _Static_assert(sizeof table / sizeof table[0] == SL_HISTOGRAM_COUNT, "a row per histogram");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const series_names *n = &table[i].n;
        const char *names[2] = {s->vllm ? n->vllm : n->sluice, s->vllm ? n->vllm_also : NULL};
        bool tokens = sl_shm_histogram_unit(table[i].h) == SL_SHM_HISTOGRAM_UNIT_TOKENS;
        double scale = tokens ? 1 : 1e9;   /* ns -> seconds, the base unit */
        const uint64_t *raw = sl_shm_histogram_bounds(table[i].h);
        double bounds[SL_SHM_HISTOGRAM_BUCKETS];
        for (int b = 0; b < SL_SHM_HISTOGRAM_BUCKETS; b++)
            bounds[b] = (double)raw[b] / scale;
        uint64_t cum[SL_SHM_HISTOGRAM_BUCKETS + 1], per[SL_SHM_HISTOGRAM_BUCKETS + 1], sum = 0;
        sl_shm_histogram_read(fe->shm, table[i].h, cum, &sum);
        for (int b = 0; b <= SL_SHM_HISTOGRAM_BUCKETS; b++) {
            uint64_t prev = b ? cum[b - 1] : 0;
            per[b] = cum[b] >= prev ? cum[b] - prev : 0;   /* concurrent observers: never negative */
        }
        for (int k = 0; k < 2; k++)
            if (names[k] != NULL)
                sl_api_metrics_histogram(s->m, names[k], n->help, s->labels, 1, bounds, SL_SHM_HISTOGRAM_BUCKETS, per,
                                         (double)sum / scale);
    }
}

void sl_fe_metrics_render(const sl_fe *fe, sl_api_metrics *m)
{
    scrape s = {.m = m, .vllm = fe->metrics_vllm};
    s.labels[0] = (sl_api_metric_label){"model_name", fe->model_name};
    sl_api_metrics_allow_colons(m, s.vllm);
    counters(&s, fe);
    gauges(&s, fe);
    histograms(&s, fe);
}
