/* frontend/api_request.c: OpenAI request bodies -> sl_api_request.
 * Runs in the front ends on every completion request. Trade-off: the parsed
 * jansson tree is kept whole (messages, tools) instead of being copied into
 * C structs, because the chat template walks it as JSON anyway; the struct
 * only lifts out what the front end itself decides on. */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_request_internal.h"

/* ------------------------------------------------------- field helpers
 * Each returns false with err filled. A field that is absent or null keeps
 * the caller's default and sets *present false, as OpenAI treats null. */

static bool get_number(const json_t *o, const char *key, double lo, double hi,
                       bool lo_open, double *out, bool *present, sl_api_error *err)
{
    json_t *v = sl_api_req_field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!json_is_number(v)) return sl_api_req_type_error(err, key, "a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
        return sl_api_req_value_error(err, key, "'%s' must be %s %g and <= %g, got %g",
                           key, lo_open ? ">" : ">=", lo, hi, d);
    /* The sampler keeps floats: a value just above an open bound (top_p
     * 5e-324) would round onto the bound and be refused later, under the
     * sampler's name for it. It becomes the nearest float past the bound
     * instead (FLT_MIN past 0: no denormals in the sampler's arithmetic). */
    if (lo_open && (float)d <= (float)lo)
        d = lo == 0.0 ? FLT_MIN : (double)nextafterf((float)lo, INFINITY);
    *out = d;
    return true;
}

static bool get_int(const json_t *o, const char *key, int64_t lo, int64_t hi,
                    int64_t *out, bool *present, sl_api_error *err)
{
    json_t *v = sl_api_req_field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        /* 100.0 is accepted (some clients send floats); 100.5 and 1e300 are not. */
        double d = json_real_value(v);
        if (!isfinite(d) || d != floor(d) || d < -9.0e18 || d > 9.0e18)
            return sl_api_req_type_error(err, key, "an integer");
        x = (int64_t)d;
    } else {
        return sl_api_req_type_error(err, key, "an integer");
    }
    if (x < lo || x > hi)
        return sl_api_req_value_error(err, key, "'%s' must be between %lld and %lld, got %lld",
                           key, (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return true;
}

static bool get_bool(const json_t *o, const char *key, bool *out, bool *present, sl_api_error *err)
{
    json_t *v = sl_api_req_field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!json_is_boolean(v)) return sl_api_req_type_error(err, key, "a boolean");
    *out = json_is_true(v);
    return true;
}

static bool get_string(const json_t *o, const char *key, const char **out, sl_api_error *err)
{
    json_t *v = sl_api_req_field(o, key);
    if (!v) return true;
    if (!json_is_string(v)) return sl_api_req_type_error(err, key, "a string");
    *out = json_string_value(v);
    return true;
}

/* ------------------------------------------------------------- messages */

static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};

static bool check_tool_calls(const json_t *tc, const char *at, sl_api_error *err)
{
    char p[128];
    snprintf(p, sizeof p, "%s.tool_calls", at);
    if (!json_is_array(tc)) return sl_api_req_type_error(err, p, "an array");
    size_t j;
    json_t *c;
    json_array_foreach(tc, j, c) {
        snprintf(p, sizeof p, "%s.tool_calls[%zu]", at, j);
        if (!json_is_object(c)) return sl_api_req_type_error(err, p, "an object");
        json_t *fn = json_object_get(c, "function");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].function", at, j);
        if (!json_is_object(fn)) return sl_api_req_type_error(err, p, "an object");
        json_t *name = json_object_get(fn, "name");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].function.name", at, j);
        if (!json_is_string(name)) return sl_api_req_type_error(err, p, "a string");
        /* OpenAI sends arguments as a JSON string; some clients send the
         * object itself, which templates also accept. */
        json_t *args = json_object_get(fn, "arguments");
        snprintf(p, sizeof p, "%s.tool_calls[%zu].function.arguments", at, j);
        if (args && !json_is_string(args) && !json_is_object(args))
            return sl_api_req_type_error(err, p, "a string");
    }
    return true;
}

static bool check_content(const json_t *content, const char *at, sl_api_error *err)
{
    char p[128];
    snprintf(p, sizeof p, "%s.content", at);
    if (json_is_string(content)) return true;
    if (!json_is_array(content)) return sl_api_req_type_error(err, p, "a string, null or an array of text parts");
    if (json_array_size(content) == 0) return sl_api_req_value_error(err, p, "'%s' must not be an empty array", p);
    size_t j;
    json_t *part;
    json_array_foreach(content, j, part) {
        snprintf(p, sizeof p, "%s.content[%zu]", at, j);
        if (!json_is_object(part)) return sl_api_req_type_error(err, p, "an object");
        json_t *type = json_object_get(part, "type");
        snprintf(p, sizeof p, "%s.content[%zu].type", at, j);
        if (!json_is_string(type)) return sl_api_req_type_error(err, p, "a string");
        if (strcmp(json_string_value(type), "text") != 0)
            return sl_api_req_value_error(err, p, "content part type '%s' is not supported (only 'text')",
                               json_string_value(type));
        json_t *text = json_object_get(part, "text");
        snprintf(p, sizeof p, "%s.content[%zu].text", at, j);
        if (!json_is_string(text)) return sl_api_req_type_error(err, p, "a string");
    }
    return true;
}

/* Chat templates are written for string content: Qwen3's calls
 * `content.startswith(...)` and `'</think>' in content`, and fails on a list
 * or None. OpenAI clients send text parts, and `content: null` on an
 * assistant turn that only calls tools. So, as vLLM does for such templates,
 * the template sees one string: text parts joined with "\n", and "" for an
 * absent or null content. The strings stay in the request's own tree, so the
 * tokenizer still treats them as untrusted text. */
static bool flatten_content(json_t *m, sl_api_error *err)
{
    json_t *content = json_object_get(m, "content");
    if (json_is_string(content)) return true;
    size_t n = json_is_array(content) ? json_array_size(content) : 0, len = 0;
    for (size_t j = 0; j < n; j++)
        len += json_string_length(json_object_get(json_array_get(content, j), "text")) + (j > 0);
    char *buf = sl_malloc(len + 1);
    size_t at = 0;
    for (size_t j = 0; buf && j < n; j++) {
        json_t *text = json_object_get(json_array_get(content, j), "text");
        if (j > 0) buf[at++] = '\n';
        memcpy(buf + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    /* Parts were checked to be strings, which jansson holds as valid UTF-8. */
    json_t *flat = buf ? json_stringn_nocheck(buf, at) : NULL;
    free(buf);
    if (!flat || json_object_set_new(m, "content", flat) != 0) {
        sl_api_error_set(err, SL_API_ERR_INTERNAL, NULL, "out of memory");
        return false;
    }
    return true;
}

static bool check_messages(json_t *msgs, sl_api_error *err)
{
    if (!msgs)
        return sl_api_req_value_error(err, "messages", "'messages' is a required property");
    if (!json_is_array(msgs)) return sl_api_req_type_error(err, "messages", "an array");
    if (json_array_size(msgs) == 0)
        return sl_api_req_value_error(err, "messages", "'messages' must contain at least one message");
    size_t i;
    json_t *m;
    char at[48], p[128];
    json_array_foreach(msgs, i, m) {
        snprintf(at, sizeof at, "messages[%zu]", i);
        if (!json_is_object(m)) return sl_api_req_type_error(err, at, "an object");
        json_t *role = json_object_get(m, "role");
        snprintf(p, sizeof p, "%s.role", at);
        if (!json_is_string(role)) return sl_api_req_type_error(err, p, "a string");
        const char *r = json_string_value(role);
        size_t k = 0;
        while (k < sizeof roles / sizeof roles[0] && strcmp(r, roles[k]) != 0) k++;
        if (k == sizeof roles / sizeof roles[0])
            return sl_api_req_value_error(err, p, "unknown role '%s' (system, user, assistant, tool or developer)", r);
        bool is_assistant = strcmp(r, "assistant") == 0, is_tool = strcmp(r, "tool") == 0;

        json_t *content = json_object_get(m, "content");
        json_t *tool_calls = sl_api_req_field(m, "tool_calls");
        json_t *tool_call_id = sl_api_req_field(m, "tool_call_id");
        json_t *name = sl_api_req_field(m, "name");
        snprintf(p, sizeof p, "%s.name", at);
        if (name && !json_is_string(name)) return sl_api_req_type_error(err, p, "a string");
        if (content && !json_is_null(content) && !check_content(content, at, err)) return false;
        bool has_content = content && !json_is_null(content);
        if (tool_calls) {
            if (!is_assistant) {
                snprintf(p, sizeof p, "%s.tool_calls", at);
                return sl_api_req_value_error(err, p, "only assistant messages may have tool_calls");
            }
            if (!check_tool_calls(tool_calls, at, err)) return false;
        }
        if (tool_call_id) {
            snprintf(p, sizeof p, "%s.tool_call_id", at);
            if (!json_is_string(tool_call_id)) return sl_api_req_type_error(err, p, "a string");
        }
        snprintf(p, sizeof p, "%s.content", at);
        if (is_assistant) {
            if (!has_content && !tool_calls)
                return sl_api_req_value_error(err, p, "an assistant message needs content or tool_calls");
        } else if (is_tool) {
            if (!has_content && !tool_call_id)
                return sl_api_req_value_error(err, p, "a tool message needs content or tool_call_id");
        } else if (!has_content) {
            return sl_api_req_value_error(err, p, "a %s message needs content", r);
        }
        if (!flatten_content(m, err)) return false;
    }
    return true;
}

/* ---------------------------------------------------------------- prompt */

static bool parse_prompt(sl_api_request *r, int32_t n_vocab, sl_api_error *err)
{
    json_t *v = json_object_get(r->_root, "prompt");
    if (!v || json_is_null(v))
        return sl_api_req_value_error(err, "prompt", "'prompt' is a required property");
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);   /* ["text"] is the one-prompt batch */
    if (json_is_string(v)) {
        r->prompt = json_string_value(v);
        r->prompt_len = json_string_length(v);
        return true;
    }
    if (!json_is_array(v)) return sl_api_req_type_error(err, "prompt", "a string or an array of token ids");
    size_t n = json_array_size(v);
    if (n == 0) return sl_api_req_value_error(err, "prompt", "'prompt' must not be empty");
    if (json_is_string(json_array_get(v, 0)))
        return sl_api_req_value_error(err, "prompt", "a batch of several prompts is not supported");
    r->prompt_tokens = sl_malloc(n * sizeof *r->prompt_tokens);
    if (!r->prompt_tokens) {
        sl_api_error_set(err, SL_API_ERR_INTERNAL, NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        if (!json_is_integer(t)) return sl_api_req_type_error(err, "prompt", "a string or an array of token ids");
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= n_vocab)
            return sl_api_req_value_error(err, "prompt", "token id %lld at prompt[%zu] is outside the vocabulary (0..%d)",
                               (long long)id, i, n_vocab - 1);
        r->prompt_tokens[i] = (int32_t)id;
    }
    r->n_prompt_tokens = n;
    return true;
}

/* ---------------------------------------------------------- stop, biases */

static bool set_stop(sl_api_request *r, const json_t *s, size_t i, sl_api_error *err)
{
    char p[32];
    snprintf(p, sizeof p, i == (size_t)-1 ? "stop" : "stop[%zu]", i);
    if (!json_is_string(s)) return sl_api_req_type_error(err, p, "a string");
    size_t len = json_string_length(s);
    if (len == 0) return sl_api_req_value_error(err, p, "stop strings must not be empty");
    if (len > SL_API_STOP_LEN_MAX)
        return sl_api_req_value_error(err, p, "stop strings may be at most %d bytes", SL_API_STOP_LEN_MAX);
    r->stop[r->n_stop] = json_string_value(s);
    r->stop_len[r->n_stop] = len;
    r->n_stop++;
    return true;
}

static bool parse_stop(sl_api_request *r, sl_api_error *err)
{
    json_t *v = sl_api_req_field(r->_root, "stop");
    if (!v) return true;
    if (json_is_string(v)) return set_stop(r, v, (size_t)-1, err);
    if (!json_is_array(v)) return sl_api_req_type_error(err, "stop", "a string or an array of strings");
    if (json_array_size(v) > SL_API_STOP_MAX)
        return sl_api_req_value_error(err, "stop", "at most %d stop sequences are allowed, got %zu",
                           SL_API_STOP_MAX, json_array_size(v));
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s)
        if (!set_stop(r, s, i, err)) return false;
    return true;
}

/* Token ids as decimal strings: "50256". No sign, spaces or leading '+'. */
static bool parse_token_key(const char *k, int32_t n_vocab, int32_t *out)
{
    size_t n = strlen(k);
    if (n == 0 || n > 10) return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)k[i])) return false;
        v = v * 10 + (k[i] - '0');
    }
    if (v >= n_vocab) return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_logit_bias(sl_api_request *r, int32_t n_vocab, sl_api_error *err)
{
    json_t *v = sl_api_req_field(r->_root, "logit_bias");
    if (!v) return true;
    if (!json_is_object(v)) return sl_api_req_type_error(err, "logit_bias", "an object of token id -> bias");
    if (json_object_size(v) > SL_LOGIT_BIAS_MAX)
        return sl_api_req_value_error(err, "logit_bias", "at most %d logit_bias entries are allowed", SL_LOGIT_BIAS_MAX);
    const char *k;
    json_t *b;
    sl_sampling_params *sp = &r->sampling;
    json_object_foreach(v, k, b) {
        int32_t tok;
        if (!parse_token_key(k, n_vocab, &tok))
            return sl_api_req_value_error(err, "logit_bias", "logit_bias key '%.40s' is not a token id in 0..%d",
                               k, n_vocab - 1);
        if (!json_is_number(b)) return sl_api_req_type_error(err, "logit_bias", "a number as each bias");
        double d = json_number_value(b);
        if (!isfinite(d) || d < -100.0 || d > 100.0)
            return sl_api_req_value_error(err, "logit_bias", "logit_bias values must be between -100 and 100");
        sp->logit_bias[sp->n_logit_bias].token = tok;
        sp->logit_bias[sp->n_logit_bias].bias = (float)d;
        sp->n_logit_bias++;
    }
    return true;
}

/* ------------------------------------------------------------- sampling */

static bool parse_sampling(sl_api_request *r, int32_t n_vocab, sl_api_error *err)
{
    const json_t *o = r->_root;
    sl_sampling_params *p = &r->sampling;
    double d;
    int64_t x;
    bool has;

    if (!get_number(o, "temperature", 0.0, 2.0, false, &d, &has, err)) return false;
    if (has) p->temperature = (float)d;
    if (!get_number(o, "top_p", 0.0, 1.0, true, &d, &has, err)) return false;
    if (has) p->top_p = (float)d;
    if (!get_number(o, "min_p", 0.0, 1.0, false, &d, &has, err)) return false;
    if (has) p->min_p = (float)d;
    if (!get_int(o, "top_k", -1, INT32_MAX, &x, &has, err)) return false;
    if (has) p->top_k = x < 0 ? 0 : (int32_t)x;   /* -1 (vLLM) and 0 (llama.cpp) both mean off */
    if (!get_number(o, "presence_penalty", -2.0, 2.0, false, &d, &has, err)) return false;
    if (has) p->presence_penalty = (float)d;
    if (!get_number(o, "frequency_penalty", -2.0, 2.0, false, &d, &has, err)) return false;
    if (has) p->frequency_penalty = (float)d;
    /* repetition_penalty (vLLM, HF) and repeat_penalty (llama-server) are one knob. */
    if (!get_number(o, "repeat_penalty", 0.0, 10.0, true, &d, &has, err)) return false;
    if (has) p->repetition_penalty = (float)d;
    if (!get_number(o, "repetition_penalty", 0.0, 10.0, true, &d, &has, err)) return false;
    if (has) p->repetition_penalty = (float)d;
    if (!get_int(o, "repeat_last_n", -1, SL_API_PENALTY_LAST_N_MAX, &x, &has, err)) return false;
    if (has) p->penalty_last_n = (int32_t)x;
    if (!get_int(o, "seed", INT64_MIN, INT64_MAX, &x, &r->has_seed, err)) return false;
    if (r->has_seed) p->seed = (uint64_t)x;
    if (!parse_logit_bias(r, n_vocab, err)) return false;

    /* logprobs: a boolean plus top_logprobs for chat; an integer 0..5 for
     * completions (OpenAI's legacy shape). */
    if (r->endpoint == SL_API_ENDPOINT_CHAT) {
        bool has_top;
        if (!get_bool(o, "logprobs", &r->logprobs, NULL, err)) return false;
        if (!get_int(o, "top_logprobs", 0, SL_TOP_LOGPROBS_MAX, &x, &has_top, err)) return false;
        if (has_top) {
            if (!r->logprobs)
                return sl_api_req_value_error(err, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
            r->top_logprobs = (int32_t)x;
        }
    } else {
        if (!get_int(o, "logprobs", 0, 5, &x, &has, err)) return false;
        if (has) { r->logprobs = true; r->top_logprobs = (int32_t)x; }
    }
    p->n_logprobs = r->logprobs ? r->top_logprobs : -1;

    const char *why = NULL;
    if (sl_sampling_validate(p, n_vocab, &why) < 0)
        return sl_api_req_value_error(err, why, "invalid sampling parameter '%s'", why);
    return true;
}

/* ------------------------------------------------------------------ main */

/* stream_options: include_usage, and include_obfuscation (whose padding is
 * not produced: false is accepted, true refused). */
static bool parse_stream_options(sl_api_request *r, sl_api_error *err)
{
    json_t *so = sl_api_req_field(r->_root, "stream_options");
    if (!so) return true;
    if (!json_is_object(so)) return sl_api_req_type_error(err, "stream_options", "an object");
    if (!r->stream)
        return sl_api_req_value_error(err, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    const char *k;
    json_t *v;
    char p[SL_API_PARAM_LEN];
    json_object_foreach(so, k, v) {
        snprintf(p, sizeof p, "stream_options.%s", k);
        if (strcmp(k, "include_usage") == 0) {
            if (!json_is_null(v) && !json_is_boolean(v)) return sl_api_req_type_error(err, p, "a boolean");
            r->include_usage = json_is_true(v);
        } else if (strcmp(k, "include_obfuscation") == 0) {
            if (!json_is_null(v) && !json_is_boolean(v)) return sl_api_req_type_error(err, p, "a boolean");
            if (json_is_true(v))
                return sl_api_req_unsupported(err, p, "'%s: true' is not supported: stream events carry no "
                                              "obfuscation padding", p);
        } else {
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, p, "unrecognized argument '%.64s' in 'stream_options'",
                             k);
            return false;
        }
    }
    return true;
}

static bool parse_fields(sl_api_request *r, int32_t n_vocab, sl_api_error *err)
{
    const json_t *o = r->_root;
    int64_t x;
    bool has;

    if (!sl_api_req_check_fields(r, err)) return false;
    if (!get_string(o, "model", &r->model, err)) return false;
    if (!get_string(o, "user", &r->user, err)) return false;

    if (r->endpoint == SL_API_ENDPOINT_CHAT) {
        r->messages = json_object_get(o, "messages");
        if (!check_messages(r->messages, err)) return false;
        if (!sl_api_req_parse_tools(r, err)) return false;
    } else {
        if (!parse_prompt(r, n_vocab, err)) return false;
    }

    /* max_completion_tokens is the newer name of the same limit. */
    int64_t mct = 0;
    bool has_mct;
    if (r->endpoint == SL_API_ENDPOINT_COMPLETIONS && !get_bool(o, "echo", &r->echo, NULL, err)) return false;
    /* max_tokens 0 asks for the prompt alone: only an echo answers anything
     * (lm-eval-harness scores a prompt that way). */
    int64_t mt_lo = r->echo ? 0 : 1;
    if (!get_int(o, "max_tokens", mt_lo, SL_API_MAX_TOKENS_MAX, &x, &has, err)) return false;
    if (has) r->max_tokens = x;
    if (!get_int(o, "max_completion_tokens", mt_lo, SL_API_MAX_TOKENS_MAX, &mct, &has_mct, err)) return false;
    if (has_mct) {
        if (has && mct != x)
            return sl_api_req_value_error(err, "max_completion_tokens", "'max_completion_tokens' (%lld) and "
                                          "'max_tokens' (%lld) are the same limit: give one, or both equal",
                                          (long long)mct, (long long)x);
        r->max_tokens = mct;
    }
    if (!get_int(o, "min_tokens", 0, SL_API_MAX_TOKENS_MAX, &x, &has, err)) return false;
    if (has) r->min_tokens = x;
    if (r->max_tokens >= 0 && r->min_tokens > r->max_tokens)
        return sl_api_req_value_error(err, "min_tokens", "'min_tokens' (%lld) must not exceed max_tokens (%lld)",
                           (long long)r->min_tokens, (long long)r->max_tokens);

    /* Each choice takes a mailbox of its own (queue and --max-seqs count n). */
    if (!get_int(o, "n", 1, SL_API_N_MAX, &x, &has, err)) return false;
    if (has) r->n = (int32_t)x;

    if (!get_bool(o, "stream", &r->stream, NULL, err)) return false;
    if (!parse_stream_options(r, err)) return false;
    if (!get_bool(o, "ignore_eos", &r->ignore_eos, NULL, err)) return false;
    if (!parse_stop(r, err)) return false;
    if (!parse_sampling(r, n_vocab, err)) return false;
    return sl_api_req_parse_format(r, err);
}

sl_status sl_api_request_parse(sl_api_request *r, sl_api_endpoint ep,
                               const char *body, size_t len, int32_t n_vocab,
                               sl_api_error *err)
{
    memset(r, 0, sizeof *r);
    r->endpoint = ep;
    r->max_tokens = -1;
    r->n = 1;
    r->parallel_tool_calls = true;
    r->tool_choice_mode = SL_API_TOOL_CHOICE_NONE;   /* completions have no tools */
    sl_sampling_params_default(&r->sampling);
    if (n_vocab <= 0) n_vocab = INT32_MAX;

    r->_root = sl_api_json_parse_body(body, len, err);
    if (!r->_root) return SL_EINVAL;
    if (!parse_fields(r, n_vocab, err)) {
        sl_status rc = err->kind == SL_API_ERR_INTERNAL ? SL_ENOMEM : SL_EINVAL;
        sl_api_request_fini(r);
        r->endpoint = ep;
        return rc;
    }
    return SL_OK;
}

void sl_api_request_fini(sl_api_request *r)
{
    json_decref(r->_root);
    free(r->prompt_tokens);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}
