/* frontend/api_request_fields.c: the table of every request field sluice
 * knows, for both completion endpoints, and the checks of those it accepts
 * without effect or refuses.
 * Runs in the front ends, first thing after the body parses. Trade-off: a
 * field nobody implemented is refused by name instead of being ignored, as
 * OpenAI does; a client that sends `audio` learns at once that no audio comes
 * back instead of getting text it did not ask for. The cost is that a new
 * OpenAI field is a 400 until it is added here (docs/API.md lists them all). */
#include <string.h>

#include "frontend/api_request_internal.h"

/* ------------------------------------------------------------ the checks
 * Each runs only on a non-null value (null is "not given" everywhere) and
 * returns false with err filled. */

typedef bool (*field_check)(const json_t *v, const char *key, sl_api_error *err);

static bool refuse_audio(const json_t *v, const char *key, sl_api_error *err)
{
    (void)v;
    return sl_api_req_unsupported(err, key, "'%s' is not supported: this server generates text only", key);
}

static bool refuse_prediction(const json_t *v, const char *key, sl_api_error *err)
{
    (void)v;
    return sl_api_req_unsupported(err, key, "'%s' is not supported: predicted outputs are not implemented", key);
}

static bool refuse_web_search(const json_t *v, const char *key, sl_api_error *err)
{
    (void)v;
    return sl_api_req_unsupported(err, key, "'%s' is not supported: this server has no web search", key);
}

static bool refuse_reasoning_effort(const json_t *v, const char *key, sl_api_error *err)
{
    (void)v;
    return sl_api_req_unsupported(err, key,
                                  "'%s' is not supported: this server cannot set how long a model reasons; "
                                  "where the chat template offers it, use chat_template_kwargs "
                                  "(e.g. {\"enable_thinking\": false})", key);
}

static bool refuse_verbosity(const json_t *v, const char *key, sl_api_error *err)
{
    (void)v;
    return sl_api_req_unsupported(err, key, "'%s' is not supported: the model's verbosity cannot be set here", key);
}

static bool check_string(const json_t *v, const char *key, sl_api_error *err)
{
    return json_is_string(v) ? true : sl_api_req_type_error(err, key, "a string");
}

/* ["text"] is what this server does anyway; any other output modality is not. */
static bool check_modalities(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_array(v)) return sl_api_req_type_error(err, key, "an array of strings");
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        if (!json_is_string(m)) return sl_api_req_type_error(err, key, "an array of strings");
        const char *s = json_string_value(m);
        if (strcmp(s, "audio") == 0)
            return sl_api_req_unsupported(err, key, "'%s' may only be [\"text\"]: this server generates text only",
                                          key);
        if (strcmp(s, "text") != 0)
            return sl_api_req_value_error(err, key, "unknown modality '%.40s' (only \"text\")", s);
    }
    return true;
}

/* store: false is the default meaning "do not keep it", which is what happens. */
static bool check_store(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_boolean(v)) return sl_api_req_type_error(err, key, "a boolean");
    if (json_is_true(v))
        return sl_api_req_unsupported(err, key, "'%s: true' is not supported: this server keeps no completions", key);
    return true;
}

/* OpenAI's limits: 16 pairs, keys up to 64 characters, string values up to
 * 512. Nothing reads it (it only matters for stored completions), but a
 * body OpenAI would refuse is refused here too. */
static bool check_metadata(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_object(v)) return sl_api_req_type_error(err, key, "an object of strings");
    if (json_object_size(v) > 16)
        return sl_api_req_value_error(err, key, "'%s' may hold at most 16 pairs", key);
    const char *k;
    json_t *s;
    json_object_foreach((json_t *)v, k, s) {
        if (!json_is_string(s)) return sl_api_req_type_error(err, key, "an object of strings");
        if (strlen(k) > 64) return sl_api_req_value_error(err, key, "'%s' keys may be at most 64 characters", key);
        if (json_string_length(s) > 512)
            return sl_api_req_value_error(err, key, "'%s' values may be at most 512 characters", key);
    }
    return true;
}

/* One tier exists; "auto" and "default" both name it. */
static bool check_service_tier(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_string(v)) return sl_api_req_type_error(err, key, "a string");
    const char *s = json_string_value(v);
    if (strcmp(s, "auto") == 0 || strcmp(s, "default") == 0) return true;
    if (strcmp(s, "flex") == 0 || strcmp(s, "scale") == 0 || strcmp(s, "priority") == 0)
        return sl_api_req_unsupported(err, key, "service tier '%s' is not offered: only \"default\" (or \"auto\")", s);
    return sl_api_req_value_error(err, key, "unknown service tier '%.40s' (auto, default, flex, scale, priority)", s);
}

/* The prefix cache lives in memory and is used whatever the client says;
 * a promise to keep it for 24 hours cannot be kept. */
static bool check_cache_retention(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_string(v)) return sl_api_req_type_error(err, key, "a string");
    const char *s = json_string_value(v);
    if (strcmp(s, "in_memory") == 0 || strcmp(s, "in-memory") == 0) return true;   /* the older spelling */
    if (strcmp(s, "24h") == 0)
        return sl_api_req_unsupported(err, key, "'%s: \"24h\"' is not supported: the prefix cache is in memory only",
                                      key);
    return sl_api_req_value_error(err, key, "unknown '%s' '%.40s' (in_memory or 24h)", key, s);
}

static bool check_best_of(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_integer(v)) return sl_api_req_type_error(err, key, "an integer");
    json_int_t n = json_integer_value(v);
    if (n < 1 || n > 20) return sl_api_req_value_error(err, key, "'%s' must be between 1 and 20, got %lld", key,
                                                        (long long)n);
    if (n > 1)
        return sl_api_req_unsupported(err, key, "only %s=1 is supported (one completion per request), got %lld", key,
                                      (long long)n);
    return true;
}

/* The FIM tokens of the served model are not known here, so a suffix could
 * only be pasted after the prompt, which is not what it means. */
static bool check_suffix(const json_t *v, const char *key, sl_api_error *err)
{
    if (!json_is_string(v)) return sl_api_req_type_error(err, key, "a string");
    if (json_string_length(v) > 0)
        return sl_api_req_unsupported(err, key, "'%s' is not supported: fill-in-the-middle is not implemented", key);
    return true;
}

/* ------------------------------------------------------------ the table */

#define EP_CHAT 1u
#define EP_CMPL 2u
#define EP_BOTH 3u

typedef struct {
    const char *name;
    unsigned eps;           /* EP_* where the field exists */
    field_check check;      /* NULL: implemented, parsed where it is used */
} known_field;

/* Every field of OpenAI's two request bodies, then the extensions. The
 * implemented ones are parsed in api_request.c (sampling, limits, stream),
 * api_request_tools.c and api_request_format.c. docs/API.md has the same
 * list with each field's status. */
static const known_field fields[] = {
    /* OpenAI, both endpoints */
    {"model", EP_BOTH, NULL},
    {"frequency_penalty", EP_BOTH, NULL},
    {"presence_penalty", EP_BOTH, NULL},
    {"logit_bias", EP_BOTH, NULL},
    {"logprobs", EP_BOTH, NULL},
    {"max_tokens", EP_BOTH, NULL},
    {"n", EP_BOTH, NULL},
    {"seed", EP_BOTH, NULL},
    {"stop", EP_BOTH, NULL},
    {"stream", EP_BOTH, NULL},
    {"stream_options", EP_BOTH, NULL},
    {"temperature", EP_BOTH, NULL},
    {"top_p", EP_BOTH, NULL},
    {"user", EP_BOTH, NULL},
    /* OpenAI, chat */
    {"messages", EP_CHAT, NULL},
    {"top_logprobs", EP_CHAT, NULL},
    {"max_completion_tokens", EP_BOTH, NULL},   /* completions: accepted as the same limit */
    {"tools", EP_CHAT, NULL},
    {"tool_choice", EP_CHAT, NULL},
    {"parallel_tool_calls", EP_CHAT, NULL},
    {"functions", EP_CHAT, NULL},
    {"function_call", EP_CHAT, NULL},
    {"response_format", EP_BOTH, NULL},         /* completions: as vLLM */
    {"metadata", EP_CHAT, check_metadata},
    {"store", EP_CHAT, check_store},
    {"service_tier", EP_CHAT, check_service_tier},
    {"safety_identifier", EP_CHAT, check_string},
    {"prompt_cache_key", EP_CHAT, check_string},
    {"prompt_cache_retention", EP_CHAT, check_cache_retention},
    {"modalities", EP_CHAT, check_modalities},
    {"audio", EP_CHAT, refuse_audio},
    {"prediction", EP_CHAT, refuse_prediction},
    {"reasoning_effort", EP_CHAT, refuse_reasoning_effort},
    {"verbosity", EP_CHAT, refuse_verbosity},
    {"web_search_options", EP_CHAT, refuse_web_search},
    /* OpenAI, completions */
    {"prompt", EP_CMPL, NULL},
    {"echo", EP_CMPL, NULL},
    {"best_of", EP_CMPL, check_best_of},
    {"suffix", EP_CMPL, check_suffix},
    /* sampling and limits extensions (llama.cpp, vLLM) */
    {"top_k", EP_BOTH, NULL},
    {"min_p", EP_BOTH, NULL},
    {"repetition_penalty", EP_BOTH, NULL},
    {"repeat_penalty", EP_BOTH, NULL},
    {"repeat_last_n", EP_BOTH, NULL},
    {"min_tokens", EP_BOTH, NULL},
    {"ignore_eos", EP_BOTH, NULL},
    /* constrained decoding extensions (llama.cpp, vLLM) */
    {"grammar", EP_BOTH, NULL},
    {"json_schema", EP_BOTH, NULL},
    {"guided_json", EP_BOTH, NULL},
    {"guided_regex", EP_BOTH, NULL},
    {"guided_grammar", EP_BOTH, NULL},
    {"guided_choice", EP_BOTH, NULL},
    /* chat template and reasoning extensions (vLLM, llama.cpp) */
    {"chat_template_kwargs", EP_CHAT, NULL},
    {"reasoning_format", EP_CHAT, NULL},
};

static const known_field *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(fields[i].name, name) == 0) return &fields[i];
    return NULL;
}

bool sl_api_req_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool sl_api_req_check_fields(const sl_api_request *r, sl_api_error *err)
{
    unsigned ep = r->endpoint == SL_API_ENDPOINT_CHAT ? EP_CHAT : EP_CMPL;
    const char *key;
    json_t *v;
    /* The param buffer holds SL_API_PARAM_LEN bytes: a longer unknown name
     * is cut in `param` and the message, which is still enough to find it. */
    json_object_foreach(r->_root, key, v) {
        const known_field *f = lookup(key);
        if (!f) {
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, key, "unrecognized request argument '%.64s'", key);
            return false;
        }
        if (!(f->eps & ep)) {
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, key, "'%s' is not a parameter of %s", key,
                             ep == EP_CHAT ? "/v1/chat/completions" : "/v1/completions");
            return false;
        }
        if (f->check && !json_is_null(v) && !f->check(v, key, err)) return false;
    }
    return true;
}
