/* frontend/generate.c: admission of a generation request (POST
 * /v1/chat/completions and /v1/completions): parse the body, check the model
 * name and the worker, render the template, tokenize, apply the context
 * limits and submit to the worker's ring; then stream.c takes the request.
 * Runs on each front-end process's event loop, called by routes.c.
 * The trade-off: every refusal (404, 400, 429, 503) is decided here, before a
 * mailbox is taken or a byte is sent, so a refused request costs the worker
 * nothing and always gets a status and an OpenAI error body; the price is that
 * the prompt is rendered and tokenized on the event loop, in the front end. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "shared/alloc.h"
#include "frontend/api_json.h"
#include "frontend/api_request.h"
#include "frontend/server_internal.h"

static void reject(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, sl_api_err_kind kind, const char *param,
                   const char *code, const char *msg)
{
    sl_api_error e;
    sl_api_error_set(&e, kind, param, "%s", msg);
    e.code = code;
    if (kind == SL_API_ERR_UNAVAILABLE)
        e.retry_after_s = 1;
    sl_fe_respond_error(fe, req, ri, &e);
}

/* Tokenizes into a malloc'd array (grown once if the first guess is short). */
static int64_t tokenize_alloc(const sl_fe *fe, const char *text, size_t len, const sl_tok_span *spans, size_t n_spans,
                              bool add_special, int32_t **out)
{
    size_t cap = len / 2 + 16;
    for (int pass = 0; pass < 2; pass++) {
        int32_t *buf = sl_malloc(cap * sizeof *buf);
        if (buf == NULL)
            return SL_ENOMEM;
        int64_t n = sl_tokenize_rendered(fe->tok, text, len, spans, n_spans, add_special, buf, cap);
        if (n >= 0 && (size_t)n <= cap) {
            *out = buf;
            return n;
        }
        free(buf);
        if (n < 0)
            return n;
        cap = (size_t)n;
    }
    return SL_ENOMEM;
}

/* The prompt's token ids for a parsed request. On failure *e is filled. */
static int64_t build_prompt(sl_fe *fe, const sl_api_request *r, int32_t **out, sl_api_error *e)
{
    *out = NULL;
    if (r->endpoint == SL_API_ENDPOINT_COMPLETIONS && r->prompt_tokens != NULL) {
        int32_t *p = sl_malloc((r->n_prompt_tokens ? r->n_prompt_tokens : 1) * sizeof *p);
        if (p == NULL)
            goto nomem;
        memcpy(p, r->prompt_tokens, r->n_prompt_tokens * sizeof *p);
        *out = p;
        return (int64_t)r->n_prompt_tokens;
    }
    if (r->endpoint == SL_API_ENDPOINT_COMPLETIONS) {
        /* A completion prompt is user text: no control tokens from it, BOS as the model wants. */
        sl_tok_span all = {0, r->prompt_len};
        int64_t n = tokenize_alloc(fe, r->prompt, r->prompt_len, &all, 1, true, out);
        if (n < 0)
            goto nomem;
        return n;
    }
    char err[SL_ERR_LEN] = "";
    sl_chat_render_result rr;
    memset(&rr, 0, sizeof rr);
    sl_status rc = sl_chat_template_render(fe->tmpl, r->messages, r->tools, true, fe->bos_text, fe->eos_text, NULL,
                                           &rr, err);
    if (rc < 0) {
        if (rc == SL_ENOMEM)
            goto nomem;
        sl_api_error_set(e, rc == SL_ERANGE || rc == SL_EINVAL ? SL_API_ERR_INVALID_REQUEST : SL_API_ERR_INTERNAL,
                         "messages", "chat template: %s", err[0] ? err : sl_status_name(rc));
        return rc;
    }
    sl_tok_span *spans = sl_malloc((rr.n_untrusted ? rr.n_untrusted : 1) * sizeof *spans);
    if (spans == NULL) {
        sl_chat_render_result_fini(&rr);
        goto nomem;
    }
    for (size_t i = 0; i < rr.n_untrusted; i++)
        spans[i] = (sl_tok_span){rr.untrusted[i].start, rr.untrusted[i].end - rr.untrusted[i].start};
    /* The template writes BOS itself where the model wants it (as HF's
     * apply_chat_template, which tokenizes without adding specials). */
    int64_t n = tokenize_alloc(fe, rr.text, rr.len, spans, rr.n_untrusted, false, out);
    free(spans);
    sl_chat_render_result_fini(&rr);
    if (n < 0)
        goto nomem;
    return n;
nomem:
    sl_api_error_set(e, SL_API_ERR_INTERNAL, NULL, "out of memory");
    return SL_ENOMEM;
}

static uint64_t hash_id(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;    /* FNV-1a: a stable number for the worker's logs */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static void log_body(const sl_fe *fe, const sl_fe_reqinfo *ri, h2o_req_t *req)
{
    json_t *s = sl_api_json_string_lossy(req->entity.base ? req->entity.base : "", req->entity.len);
    char *d = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    fprintf(stderr, "sluice-fe slot=%" PRIu32 " request_id=%s body=%s\n", fe->slot, ri->id, d ? d : "\"\"");
    free(d);
    json_decref(s);
}

void sl_fe_generate(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int chat)
{
    sl_api_endpoint ep = chat ? SL_API_ENDPOINT_CHAT : SL_API_ENDPOINT_COMPLETIONS;
    sl_alloc_fault_begin();   /* a fault-injection sweep counts this request's allocations */
    if (fe->cfg->log_bodies)
        log_body(fe, ri, req);
    if (fe->draining && fe->listener == NULL) {
        reject(fe, req, ri, SL_API_ERR_UNAVAILABLE, NULL, "shutting_down", "The server is shutting down.");
        return;
    }
    uint64_t slack = (uint64_t)(fe->cfg->heartbeat_timeout_ms ? fe->cfg->heartbeat_timeout_ms : 5000) * 1000000ull;
    if (!sl_shm_worker_alive(fe->shm, sl_shm_now_ns(), slack)) {
        reject(fe, req, ri, SL_API_ERR_UNAVAILABLE, NULL, "worker_unavailable",
               "The model worker is not ready; retry shortly.");
        return;
    }
    sl_api_request r;
    memset(&r, 0, sizeof r);
    sl_api_error e;
    memset(&e, 0, sizeof e);
    if (sl_api_request_parse(&r, ep, req->entity.base ? req->entity.base : "", req->entity.len, fe->n_vocab, &e) !=
        SL_OK) {
        sl_api_request_fini(&r);
        sl_fe_respond_error(fe, req, ri, &e);
        return;
    }
    int32_t *prompt = NULL;
    char msg[SL_ERR_LEN];
    if (r.model != NULL && strcmp(r.model, fe->model_name) != 0) {
        snprintf(msg, sizeof msg, "The model `%.100s` does not exist (this server serves `%.100s`).", r.model,
                 fe->model_name);
        reject(fe, req, ri, SL_API_ERR_NOT_FOUND, "model", "model_not_found", msg);
        goto out;
    }
    if (r.logprobs && !sl_shm_get_limits(fe->shm)->logprobs) {
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, "logprobs", "unsupported",
               "This server was started without logprobs support.");
        goto out;
    }
    int64_t n_prompt = build_prompt(fe, &r, &prompt, &e);
    if (n_prompt < 0) {
        sl_fe_respond_error(fe, req, ri, &e);
        goto out;
    }
    if (n_prompt == 0) {
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, chat ? "messages" : "prompt", NULL,
               "The prompt is empty after tokenization.");
        goto out;
    }
    if (n_prompt > (int64_t)fe->max_prompt) {
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %" PRIu32 " tokens and prompts may use at most %" PRIu32
                 ". However, your prompt has %" PRId64 " tokens.",
                 fe->n_ctx, fe->max_prompt, n_prompt);
        reject(fe, req, ri, SL_API_ERR_CONTEXT_LENGTH, chat ? "messages" : "prompt", NULL, msg);
        goto out;
    }
    int64_t max_tokens = r.max_tokens;
    int64_t room = (int64_t)fe->n_ctx - n_prompt;
    if (max_tokens < 0) {
        max_tokens = room;
        if (fe->cfg->default_max_tokens > 0 && (int64_t)fe->cfg->default_max_tokens < max_tokens)
            max_tokens = fe->cfg->default_max_tokens;
    } else if (max_tokens > room) {
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %" PRIu32 " tokens. However, you requested %" PRId64
                 " tokens (%" PRId64 " in the %s, %" PRId64 " in the completion). Please reduce the length of the "
                 "%s or completion.",
                 fe->n_ctx, n_prompt + max_tokens, n_prompt, chat ? "messages" : "prompt", max_tokens,
                 chat ? "messages" : "prompt");
        reject(fe, req, ri, SL_API_ERR_CONTEXT_LENGTH, "max_tokens", NULL, msg);
        goto out;
    }
    if (max_tokens < 1) {
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, "max_tokens", NULL, "max_tokens must be at least 1.");
        goto out;
    }

    sl_shm_request sr;
    memset(&sr, 0, sizeof sr);
    sr.params = r.sampling;
    if (!r.has_seed && getrandom(&sr.params.seed, sizeof sr.params.seed, GRND_NONBLOCK) != sizeof sr.params.seed)
        sr.params.seed = sl_shm_now_ns();
    sr.max_tokens = (int32_t)max_tokens;
    sr.min_tokens = (int32_t)(r.min_tokens > max_tokens ? max_tokens : r.min_tokens);
    sr.ignore_eos = r.ignore_eos;
    sr.request_id = hash_id(ri->id);
    sr.prompt = prompt;
    sr.n_prompt = (uint32_t)n_prompt;
    sl_shm_ticket ticket;
    sl_status rc = sl_shm_submit(fe->shm, &sr, &ticket);
    if (rc == SL_AGAIN) {
        reject(fe, req, ri, SL_API_ERR_QUEUE_FULL, NULL, NULL, "The server is at capacity (queue full); retry shortly.");
        goto out;
    }
    if (rc < 0) {
        snprintf(msg, sizeof msg, "Cannot queue the request (%s).", sl_status_name(rc));
        reject(fe, req, ri, rc == SL_ESTALE ? SL_API_ERR_UNAVAILABLE : SL_API_ERR_INTERNAL, NULL, NULL, msg);
        goto out;
    }

    sl_fe_stream_start(fe, req, ri, &r, ticket, n_prompt);   /* owns the ticket from here */
out:
    free(prompt);
    sl_api_request_fini(&r);
}
