/* frontend/generate.c: admission of a generation request (POST
 * /v1/chat/completions and /v1/completions): parse the body, check the model
 * name and the worker, render the template, tokenize, apply the context
 * limits and submit to the worker's ring, one mailbox per choice (`n`); then
 * stream.c takes the request.
 * Runs on each front-end process's event loop, called by routes.c; the pure
 * middle (parse, render, tokenize: prompt_work) runs as a job (jobs.c), on a
 * tokenize-pool thread when the body is large.
 * The trade-off: every refusal (404, 400, 429, 503) is decided here, before a
 * mailbox is taken or a byte is sent, so a refused request costs the worker
 * nothing and always gets a status and an OpenAI error body; the price is that
 * the prompt is rendered and tokenized in the front end, before submission. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "frontend/api_json.h"
#include "frontend/api_request.h"
#include "frontend/choice.h"
#include "frontend/reasoning.h"
#include "frontend/server_internal.h"
#include "frontend/tool_calls.h"
#include "shared/alloc.h"

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

/* The prompt's token ids for a parsed request; *think_open says whether the
 * rendered prompt ends inside an open <think>. On failure *e is filled. */
static int64_t build_prompt(const sl_fe *fe, const sl_api_request *r, int32_t **out, bool *think_open,
                            sl_api_error *e)
{
    *out = NULL;
    *think_open = false;
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
    /* chat_template_kwargs are the template's extra variables (Qwen3's enable_thinking). */
    sl_chat_render_opts opts = {.extra_vars = r->chat_template_kwargs};
    sl_status rc = sl_chat_template_render(fe->tmpl, r->messages, r->tools, true, fe->bos_text, fe->eos_text, &opts,
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
    *think_open = fe->template_thinks && sl_reasoning_prompt_opens(rr.text, rr.len);
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

/* The pure part of admission, as a job (jobs.c): parse the body and, unless
 * the model or logprobs check will refuse it anyway, build the prompt. The
 * refusals themselves are sent by prompt_done, in the order they always had. */
typedef struct {
    sl_fe_job job;                   /* first: jobs.c hands this back */
    int chat;
    bool logprobs_ok;                /* the worker's limit, read on the loop (work reads no shm) */
    sl_status parse_rc;              /* outputs of work */
    sl_api_request r;
    sl_api_error e;
    bool built;                      /* build_prompt ran: n_prompt, prompt and e hold its answer */
    bool think_open;                 /* the prompt ends inside <think> */
    int64_t n_prompt;
    int32_t *prompt;
} prompt_job;

static void prompt_work(const sl_fe *fe, sl_fe_job *job)
{
    prompt_job *j = (prompt_job *)job;
    sl_api_endpoint ep = j->chat ? SL_API_ENDPOINT_CHAT : SL_API_ENDPOINT_COMPLETIONS;
    j->parse_rc = sl_api_request_parse(&j->r, ep, j->job.body, j->job.len, fe->n_vocab, &j->e);
    free(j->job.body_owned);         /* the parsed request owns its JSON (api_request.h) */
    j->job.body_owned = NULL;
    j->job.body = NULL;
    if (j->parse_rc != SL_OK)
        return;
    if (!sl_api_models_accepts(&fe->models, j->r.model))
        return;
    if (j->r.logprobs && !j->logprobs_ok)
        return;
    if (ep == SL_API_ENDPOINT_CHAT && j->r.tools != NULL &&
        (j->r.tool_choice_mode == SL_API_TOOL_CHOICE_REQUIRED || j->r.tool_choice_mode == SL_API_TOOL_CHOICE_NAMED)) {
        /* A call is forced by a grammar in the template's format (the parse
         * refused any other output constraint beside a forced call). */
        char *g = NULL;
        sl_status rc = sl_tool_calls_grammar(fe->tool_format, j->r.tools,
                                             j->r.tool_choice_mode == SL_API_TOOL_CHOICE_NAMED ? j->r.tool_choice_name
                                                                                               : NULL,
                                             j->r.parallel_tool_calls, &g, &j->e);
        if (rc < 0) {
            j->parse_rc = rc;
            return;
        }
        free(j->r.grammar);
        j->r.grammar = g;
        snprintf(j->r.grammar_from, sizeof j->r.grammar_from, "tool_choice");
    }
    j->n_prompt = build_prompt(fe, &j->r, &j->prompt, &j->think_open, &j->e);
    j->built = true;
}

static void prompt_submit(sl_fe *fe, h2o_req_t *req, prompt_job *j)
{
    const sl_fe_reqinfo *ri = &j->job.ri;
    const sl_api_request *rq = &j->r;
    int chat = j->chat;
    char msg[SL_ERR_LEN];
    if (j->parse_rc != SL_OK) {
        sl_fe_respond_error(fe, req, ri, &j->e);
        return;
    }
    if (!sl_api_models_accepts(&fe->models, rq->model)) {
        snprintf(msg, sizeof msg, "The model `%.100s` does not exist (this server serves `%.100s`).", rq->model,
                 fe->model_name);
        reject(fe, req, ri, SL_API_ERR_NOT_FOUND, "model", "model_not_found", msg);
        return;
    }
    if (rq->logprobs && !j->logprobs_ok) {
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, "logprobs", "unsupported",
               "This server was started without logprobs support.");
        return;
    }
    int64_t n_prompt = j->n_prompt;
    if (!j->built || n_prompt < 0) {
        if (!j->built)
            sl_api_error_set(&j->e, SL_API_ERR_INTERNAL, NULL, "the prompt was not built");
        sl_fe_respond_error(fe, req, ri, &j->e);
        return;
    }
    if (n_prompt == 0) {
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, chat ? "messages" : "prompt", NULL,
               "The prompt is empty after tokenization.");
        return;
    }
    if (n_prompt > (int64_t)fe->max_prompt) {
        snprintf(msg, sizeof msg,
                 "This model's maximum context length is %" PRIu32 " tokens and prompts may use at most %" PRIu32
                 ". However, your prompt has %" PRId64 " tokens.",
                 fe->n_ctx, fe->max_prompt, n_prompt);
        reject(fe, req, ri, SL_API_ERR_CONTEXT_LENGTH, chat ? "messages" : "prompt", NULL, msg);
        return;
    }
    int64_t max_tokens = rq->max_tokens;
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
        return;
    }
    /* An explicit 0 with echo (the parse refused it without) is the prompt
     * alone; a context the prompt fills leaves nothing to generate. */
    bool echo_only = rq->echo && max_tokens == 0 && rq->max_tokens == 0;
    if (max_tokens < 1 && !echo_only) {
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, "max_tokens", NULL, "max_tokens must be at least 1.");
        return;
    }
    /* echo with logprobs: the worker scores the prompt first (shm.h's
     * token-ring contract) and may then generate nothing. Without logprobs
     * the worker has nothing to do for max_tokens 0, but a mailbox keeps one
     * path for every answer: it gets a budget of 1 and the choice, which
     * knows the request's 0, cancels it at once (choice.c). */
    bool echo_logprobs = rq->echo && rq->logprobs;
    if (echo_only && !echo_logprobs)
        max_tokens = 1;

    sl_shm_request sr;
    memset(&sr, 0, sizeof sr);
    sr.params = rq->sampling;
    sr.max_tokens = (int32_t)max_tokens;
    sr.min_tokens = (int32_t)(rq->min_tokens > max_tokens ? max_tokens : rq->min_tokens);
    sr.ignore_eos = rq->ignore_eos;
    sr.echo_logprobs = echo_logprobs ? 1u : 0u;
    sr.request_id = hash_id(ri->id);
    sr.prompt = j->prompt;
    sr.n_prompt = (uint32_t)n_prompt;
    sr.grammar = rq->grammar;
    sr.grammar_len = rq->grammar ? (uint32_t)strlen(rq->grammar) : 0;
    /* n choices are n mailboxes of the same prompt and grammar, submitted
     * all or nothing: each counts against the queue and --max-seqs. */
    uint32_t n = rq->n >= 1 && rq->n <= SL_API_N_MAX ? (uint32_t)rq->n : 1;
    sl_shm_ticket tickets[SL_API_N_MAX];
    sl_status rc = SL_OK;
    uint32_t k = 0;
    for (; k < n; k++) {
        /* Choice i with seed s samples as an n=1 request with seed s + i
         * (wrapping); without a seed, each draws its own. */
        if (rq->has_seed)
            sr.params.seed = rq->sampling.seed + k;
        else if (getrandom(&sr.params.seed, sizeof sr.params.seed, GRND_NONBLOCK) != sizeof sr.params.seed)
            sr.params.seed = sl_shm_now_ns() + k;
        rc = sl_shm_submit(fe->shm, &sr, &tickets[k]);
        if (rc != SL_OK)
            break;   /* SL_AGAIN (full) is positive: not an error, but not a mailbox either */
    }
    if (rc != SL_OK) {
        for (uint32_t i = 0; i < k; i++) {
            /* the worker may have taken it already: it lets go once it sees the cancel */
            sl_shm_cancel(fe->shm, tickets[i]);
            sl_fe_release_later(fe, tickets[i]);
        }
    }
    if (rc == SL_AGAIN) {
        reject(fe, req, ri, SL_API_ERR_QUEUE_FULL, NULL, NULL, "The server is at capacity (queue full); retry shortly.");
        return;
    }
    if (rc == SL_EINVAL && sr.grammar_len > 0) {
        /* The prompt's bounds were checked above, so it is the grammar: past
         * the segment's grammar_bytes_max, or constrained decoding is off. */
        snprintf(msg, sizeof msg, "The output constraint becomes a grammar of %" PRIu32 " bytes, which this server "
                 "does not accept (too long, or constrained decoding is off).", sr.grammar_len);
        reject(fe, req, ri, SL_API_ERR_INVALID_REQUEST, rq->grammar_from, "unsupported", msg);
        return;
    }
    if (rc < 0) {
        snprintf(msg, sizeof msg, "Cannot queue the request (%s).", sl_status_name(rc));
        reject(fe, req, ri, rc == SL_ESTALE ? SL_API_ERR_UNAVAILABLE : SL_API_ERR_INTERNAL, NULL, NULL, msg);
        return;
    }

    sl_fe_stream_start(fe, req, ri, rq, tickets, n, j->prompt, n_prompt, j->think_open);   /* owns the tickets from here */
}

static void prompt_done(sl_fe *fe, sl_fe_job *job, h2o_req_t *req)
{
    prompt_job *j = (prompt_job *)job;
    if (req != NULL)
        prompt_submit(fe, req, j);
    free(j->prompt);
    sl_api_request_fini(&j->r);
    free(j->job.body_owned);
    free(j);
}

void sl_fe_generate(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int chat)
{
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
    prompt_job *j = (prompt_job *)sl_fe_jobs_new(fe, req, ri, sizeof *j);
    if (j == NULL)
        return;
    j->job.work = prompt_work;
    j->job.done = prompt_done;
    j->chat = chat;
    j->logprobs_ok = sl_shm_get_limits(fe->shm)->logprobs;
    sl_fe_jobs_run(fe, req, &j->job);
}
