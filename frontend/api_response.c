/* frontend/api_response.c: OpenAI response and chunk objects.
 * Runs in the front ends, once per response or streamed chunk. Trade-off:
 * every object is built as a jansson tree and dumped, not printed by hand;
 * it costs an allocation per field, but escaping and UTF-8 are jansson's,
 * and a chunk is small next to a decode step. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "shared/alloc.h"
#include "frontend/api_json.h"
#include "frontend/api_response.h"

/* ------------------------------------------------------------------ ids */

void sl_api_id_make(char id[SL_API_ID_LEN], sl_api_endpoint ep)
{
    uint8_t r[16];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* No entropy yet (early boot): pid, clock and a counter still make
         * ids unique, which is all an id needs to be. */
        static atomic_uint_fast64_t counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        uint64_t b = ((uint64_t)getpid() << 32) ^ atomic_fetch_add(&counter, 1);
        memcpy(r, &a, 8);
        memcpy(r + 8, &b, 8);
    }
    int n = snprintf(id, SL_API_ID_LEN, "%s", ep == SL_API_ENDPOINT_CHAT ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof r; i++)
        n += snprintf(id + n, SL_API_ID_LEN - (size_t)n, "%02x", r[i]);
}

const char *sl_api_finish_name(sl_api_finish f)
{
    switch (f) {
    case SL_API_FINISH_STOP:       return "stop";
    case SL_API_FINISH_LENGTH:     return "length";
    case SL_API_FINISH_TOOL_CALLS: return "tool_calls";
    default:                       return NULL;
    }
}

/* ------------------------------------------------------------- logprobs */

/* JSON numbers must be finite: a logprob of -inf (a banned token) is sent
 * as -9999.0, the floor OpenAI itself uses. */
static json_t *logprob_json(float lp)
{
    return json_real(isfinite(lp) ? (double)lp : -9999.0);
}

static json_t *bytes_json(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

sl_status sl_api_logprobs_init(sl_api_logprobs *lp, sl_api_endpoint ep, size_t text_offset0)
{
    lp->endpoint = ep;
    lp->text_offset = text_offset0;
    if (ep == SL_API_ENDPOINT_CHAT)
        lp->_obj = json_pack("{s:[]}", "content");
    else
        lp->_obj = json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                             "top_logprobs", "text_offset");
    return lp->_obj ? SL_OK : SL_ENOMEM;
}

void sl_api_logprobs_fini(sl_api_logprobs *lp)
{
    json_decref(lp->_obj);
    lp->_obj = NULL;
}

static json_t *chat_entry(const sl_api_token_alt *a)
{
    return json_pack("{s:o,s:o,s:o}",
                     "token", sl_api_json_string_lossy(a->text, a->len),
                     "logprob", logprob_json(a->logprob),
                     "bytes", bytes_json(a->text, a->len));
}

/* jansson's setters and packers drop a member whose allocation failed and
 * carry on; a body with a missing member would be a wrong answer, so each
 * builder below also fails when any allocation failed while it ran
 * (sl_alloc_nulls, shared/alloc.h). */
static sl_status push_entry(sl_api_logprobs *lp, const sl_api_token_logprob *t);

sl_status sl_api_logprobs_push(sl_api_logprobs *lp, const sl_api_token_logprob *t)
{
    unsigned nulls = sl_alloc_nulls();
    sl_status rc = push_entry(lp, t);
    return rc == SL_OK && sl_alloc_nulls() != nulls ? SL_ENOMEM : rc;
}

static sl_status push_entry(sl_api_logprobs *lp, const sl_api_token_logprob *t)
{
    if (!lp->_obj) return SL_ENOMEM;
    int32_t n_top = t->n_top < 0 ? 0 : t->n_top > SL_TOP_LOGPROBS_MAX ? SL_TOP_LOGPROBS_MAX : t->n_top;
    if (lp->endpoint == SL_API_ENDPOINT_CHAT) {
        json_t *e = chat_entry(&t->chosen);
        json_t *top = json_array();
        if (!e || !top) { json_decref(e); json_decref(top); return SL_ENOMEM; }
        for (int32_t i = 0; i < n_top; i++)
            json_array_append_new(top, chat_entry(&t->top[i]));
        json_object_set_new(e, "top_logprobs", top);
        return json_array_append_new(json_object_get(lp->_obj, "content"), e) ? SL_ENOMEM : SL_OK;
    }
    /* Completions: parallel arrays; top_logprobs is a dict per token (two
     * alternatives with the same text collapse, as in OpenAI's own shape). */
    json_t *top = t->unscored ? json_null() : json_object();
    if (!top) return SL_ENOMEM;
    for (int32_t i = 0; i < n_top && !t->unscored; i++) {
        json_t *k = sl_api_json_string_lossy(t->top[i].text, t->top[i].len);
        if (k) json_object_set_new(top, json_string_value(k), logprob_json(t->top[i].logprob));
        json_decref(k);
    }
    int bad = 0;
    bad |= json_array_append_new(json_object_get(lp->_obj, "tokens"),
                                 sl_api_json_string_lossy(t->chosen.text, t->chosen.len));
    bad |= json_array_append_new(json_object_get(lp->_obj, "token_logprobs"),
                                 t->unscored ? json_null() : logprob_json(t->chosen.logprob));
    bad |= json_array_append_new(json_object_get(lp->_obj, "top_logprobs"), top);
    bad |= json_array_append_new(json_object_get(lp->_obj, "text_offset"),
                                 json_integer((json_int_t)lp->text_offset));
    lp->text_offset += t->chosen.len;
    return bad ? SL_ENOMEM : SL_OK;
}

/* A token's raw bytes: what a fresh detokenizer emits for it alone plus what
 * it holds back (half a character, a <0xNN> byte). A continuation's
 * detokenizer: a token after the prompt keeps its space.
 * Wart: this reads sl_detok's private fields; a model/ accessor for a
 * token's decoded bytes would remove it. */
size_t sl_api_token_text(const sl_tokenizer *t, int32_t id, char *out, size_t cap)
{
    sl_detok d;
    sl_detok_init_continuation(&d);
    size_t n = sl_detok_push(&d, t, id, true, out, cap);
    if (n > cap) return n;
    if (n + d._n_held > cap) return n + d._n_held;
    memcpy(out + n, d._held, d._n_held);
    return n + d._n_held;
}

sl_status sl_api_token_logprob_from_record(sl_api_token_logprob *out, const sl_logprob_record *rec,
                                           const sl_tokenizer *t, char *scratch, size_t cap)
{
    size_t piece = sl_detok_max_piece(t);
    int32_t n_top = rec->n_top < 0 ? 0 : rec->n_top > SL_TOP_LOGPROBS_MAX ? SL_TOP_LOGPROBS_MAX : rec->n_top;
    memset(out, 0, sizeof *out);
    if (cap / piece < (size_t)n_top + 1) return SL_ERANGE;
    size_t used = 0;
    for (int32_t i = -1; i < n_top; i++) {
        sl_api_token_alt *a = i < 0 ? &out->chosen : &out->top[i];
        int32_t id = i < 0 ? rec->token : rec->top[i].token;
        a->text = scratch + used;
        a->len = sl_api_token_text(t, id, scratch + used, piece);
        if (a->len > piece) return SL_ERANGE;
        a->logprob = i < 0 ? rec->logprob : rec->top[i].logprob;
        used += a->len;
    }
    out->n_top = n_top;
    return SL_OK;
}

/* ------------------------------------------------------------- objects */

static json_t *usage_json(const sl_api_usage *u)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}",
                     "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens,
                     "total_tokens", (json_int_t)(u->prompt_tokens + u->completion_tokens),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
}

static json_t *timings_json(const sl_api_timings *t)
{
    double ppt = t->prompt_n > 0 ? t->prompt_ms / (double)t->prompt_n : 0.0;
    double pps = t->prompt_ms > 0 ? 1e3 * (double)t->prompt_n / t->prompt_ms : 0.0;
    double dpt = t->predicted_n > 0 ? t->predicted_ms / (double)t->predicted_n : 0.0;
    double dps = t->predicted_ms > 0 ? 1e3 * (double)t->predicted_n / t->predicted_ms : 0.0;
    return json_pack("{s:I,s:f,s:f,s:f,s:I,s:f,s:f,s:f}",
                     "prompt_n", (json_int_t)t->prompt_n,
                     "prompt_ms", isfinite(t->prompt_ms) ? t->prompt_ms : 0.0,
                     "prompt_per_token_ms", isfinite(ppt) ? ppt : 0.0,
                     "prompt_per_second", isfinite(pps) ? pps : 0.0,
                     "predicted_n", (json_int_t)t->predicted_n,
                     "predicted_ms", isfinite(t->predicted_ms) ? t->predicted_ms : 0.0,
                     "predicted_per_token_ms", isfinite(dpt) ? dpt : 0.0,
                     "predicted_per_second", isfinite(dps) ? dps : 0.0);
}

static json_t *finish_json(sl_api_finish f)
{
    const char *s = sl_api_finish_name(f);
    return s ? json_string(s) : json_null();
}

static json_t *logprobs_ref(const sl_api_logprobs *lp)
{
    return lp && lp->_obj ? json_incref(lp->_obj) : json_null();
}

/* The fields every object starts with, in OpenAI's order. */
static json_t *envelope(const char *id, const char *object, int64_t created, const char *model,
                        const char *fingerprint)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:o}", "id", id ? id : "", "object", object,
                          "created", (json_int_t)created,
                          "model", sl_api_json_string_lossy(model ? model : "", model ? strlen(model) : 0));
    if (o && fingerprint && json_object_set_new(o, "system_fingerprint", json_string(fingerprint)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *dump_and_free(json_t *o)
{
    char *s = o ? sl_api_json_dump(o) : NULL;
    json_decref(o);
    return s;
}

static char *build_response(const sl_api_result *r, size_t n);
static char *build_chunk(const sl_api_chunk *c);

/* A builder's body, or NULL when any allocation failed while it ran. */
static char *checked(char *body, unsigned nulls)
{
    if (body && sl_alloc_nulls() != nulls) {
        free(body);
        return NULL;
    }
    return body;
}

char *sl_api_response_build(const sl_api_result *r)
{
    return sl_api_response_build_n(r, 1);
}

char *sl_api_response_build_n(const sl_api_result *r, size_t n)
{
    if (n == 0) return NULL;
    unsigned nulls = sl_alloc_nulls();
    return checked(build_response(r, n), nulls);
}

char *sl_api_chunk_build(const sl_api_chunk *c)
{
    unsigned nulls = sl_alloc_nulls();
    return checked(build_chunk(c), nulls);
}

static json_t *choice_json(const sl_api_result *r, int32_t index)
{
    bool chat = r->endpoint == SL_API_ENDPOINT_CHAT;
    json_t *text = sl_api_json_string_lossy(r->text ? r->text : "", r->text ? r->text_len : 0);
    if (!chat)
        return json_pack("{s:i,s:o,s:o,s:o}", "index", (int)index, "text", text,
                         "logprobs", logprobs_ref(r->logprobs), "finish_reason", finish_json(r->finish));
    if (r->content_null) {
        json_decref(text);
        text = json_null();
    }
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", text);
    if (msg && r->reasoning)
        json_object_set_new(msg, "reasoning_content", sl_api_json_string_lossy(r->reasoning, r->reasoning_len));
    if (msg && r->tool_calls)
        json_object_set_new(msg, "tool_calls", json_deep_copy(r->tool_calls));
    return json_pack("{s:i,s:o,s:o,s:o}", "index", (int)index, "message", msg,
                     "logprobs", logprobs_ref(r->logprobs), "finish_reason", finish_json(r->finish));
}

static char *build_response(const sl_api_result *r, size_t n)
{
    bool chat = r->endpoint == SL_API_ENDPOINT_CHAT;
    json_t *o = envelope(r->id, chat ? "chat.completion" : "text_completion", r->created, r->model,
                         r->system_fingerprint);
    json_t *choices = json_array();
    if (!o || !choices) { json_decref(o); json_decref(choices); return NULL; }
    for (size_t i = 0; i < n; i++) {
        json_t *choice = choice_json(&r[i], (int32_t)i);
        if (!choice || json_array_append_new(choices, choice)) {
            json_decref(o);
            json_decref(choices);
            return NULL;
        }
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(&r->usage));
    if (r->timings) json_object_set_new(o, "timings", timings_json(r->timings));
    return dump_and_free(o);
}

static char *build_chunk(const sl_api_chunk *c)
{
    bool chat = c->endpoint == SL_API_ENDPOINT_CHAT;
    json_t *o = envelope(c->id, chat ? "chat.completion.chunk" : "text_completion", c->created, c->model,
                         c->system_fingerprint);
    if (!o) return NULL;
    json_t *choices = json_array();
    if (c->kind != SL_API_CHUNK_USAGE) {
        json_t *text = c->text ? sl_api_json_string_lossy(c->text, c->text_len) : json_string("");
        json_t *choice;
        if (chat) {
            json_t *delta;
            switch (c->kind) {
            case SL_API_CHUNK_ROLE:
                delta = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
                json_decref(text);
                break;
            case SL_API_CHUNK_TEXT:
                delta = json_pack("{s:o}", "content", text);
                break;
            case SL_API_CHUNK_DELTA:
                delta = c->delta ? json_deep_copy(c->delta) : json_object();
                json_decref(text);
                break;
            default:   /* FINISH: an empty delta unless trailing text rides along */
                delta = c->text_len ? json_pack("{s:o}", "content", text) : json_object();
                if (!c->text_len) json_decref(text);
                break;
            }
            choice = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)c->index, "delta", delta,
                               "logprobs", logprobs_ref(c->kind == SL_API_CHUNK_TEXT || c->kind == SL_API_CHUNK_DELTA
                                                            ? c->logprobs : NULL),
                               "finish_reason",
                               finish_json(c->kind == SL_API_CHUNK_FINISH ? c->finish : SL_API_FINISH_NONE));
        } else {
            choice = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)c->index, "text", text,
                               "logprobs", logprobs_ref(c->kind == SL_API_CHUNK_FINISH ? NULL : c->logprobs),
                               "finish_reason",
                               finish_json(c->kind == SL_API_CHUNK_FINISH ? c->finish : SL_API_FINISH_NONE));
        }
        json_array_append_new(choices, choice);
    }
    json_object_set_new(o, "choices", choices);
    if (c->kind == SL_API_CHUNK_USAGE && c->usage)
        json_object_set_new(o, "usage", usage_json(c->usage));
    else if (c->include_usage)
        json_object_set_new(o, "usage", json_null());
    if (c->timings && (c->kind == SL_API_CHUNK_FINISH || c->kind == SL_API_CHUNK_USAGE))
        json_object_set_new(o, "timings", timings_json(c->timings));
    return dump_and_free(o);
}

char *sl_api_models_build(const char *model, int64_t created)
{
    json_t *m = json_pack("{s:o,s:s,s:I,s:s}",
                          "id", sl_api_json_string_lossy(model ? model : "", model ? strlen(model) : 0),
                          "object", "model", "created", (json_int_t)created, "owned_by", "sluice");
    return dump_and_free(m ? json_pack("{s:s,s:[o]}", "object", "list", "data", m) : NULL);
}
