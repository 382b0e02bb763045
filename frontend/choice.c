/* frontend/choice.c: one choice of a generation request, from its mailbox's
 * tokens to OpenAI text (choice.h). Runs on each front-end process's event
 * loop, driven by stream.c, which owns the HTTP response over the request's
 * n choices.
 *
 * The pipeline of one choice, per token:
 *   mailbox -> sl_fe_choice_read -> consume(): detokenizer -> take_text():
 *   stop strings -> out_text(): the answer's text, or (filtered chat) the
 *   reasoning splitter -> the tool call parser -> deltas / reason / calls;
 *   the token's logprob record beside it.
 * Two things end a choice's text before its mailbox ends, each by cancelling
 * the mailbox (end_text_now) and dropping what the worker made after: a stop
 * string, and with parallel_tool_calls false the first complete tool call.
 * An echo (completions) puts the prompt's text in front, outside the
 * pipeline, and with logprobs reads the ring's first n_prompt - 1 entries as
 * the prompt's scores, not as generated tokens (echo_init, consume).
 * The trade-off: each choice runs the whole pipeline on its own (its own
 * detokenizer, matcher and parsers), n times the small state, so that choices
 * never wait for each other and a stop string ends one choice only. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_json.h"
#include "frontend/api_sse.h"
#include "frontend/choice.h"

#define READ_BATCH 64               /* tokens per sl_shm_read_tokens call */

/* ================================================================ buffers */

/* Room for n more bytes and a NUL. */
static bool reserve(sl_fe_buf *b, size_t n)
{
    if (b->len + n + 1 <= b->cap)
        return true;
    size_t c = b->cap ? b->cap : 256;
    while (c < b->len + n + 1)
        c *= 2;
    char *p = sl_realloc(b->p, c);
    if (p == NULL)
        return false;
    b->p = p;
    b->cap = c;
    return true;
}

bool sl_fe_buf_append(sl_fe_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return false;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool sl_fe_buf_event(sl_fe_buf *b, char *json)
{
    if (json == NULL)
        return false;
    size_t jn = strlen(json);
    size_t need = sl_api_sse_frame(NULL, 0, json, jn);
    bool ok = reserve(b, need);
    if (ok) {
        b->len += sl_api_sse_frame(b->p + b->len, need, json, jn);
        b->p[b->len] = '\0';
    }
    free(json);
    return ok;
}

void sl_fe_buf_fini(sl_fe_buf *b)
{
    free(b->p);
    *b = (sl_fe_buf){0};
}

/* ================================================================ mailbox release */

void sl_fe_release_later(sl_fe *fe, sl_shm_ticket t)
{
    sl_status rc = sl_shm_release(fe->shm, t);
    if (rc != SL_ESTATE)
        return;     /* released, or no longer ours (recovery took it back): nothing to keep */
    if (fe->n_pending == fe->cap_pending) {
        uint32_t cap = fe->cap_pending ? fe->cap_pending * 2 : 16;
        sl_shm_ticket *p = sl_realloc(fe->pending, cap * sizeof *p);
        if (p == NULL) {
            /* Out of memory: the mailbox stays taken until this slot is recovered
             * (the master reclaims a dead front end's mailboxes). Logged once per case. */
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": out of memory keeping mailbox %" PRIu32 "\n",
                    fe->slot, t.index);
            return;
        }
        fe->pending = p;
        fe->cap_pending = cap;
    }
    fe->pending[fe->n_pending++] = t;
}

void sl_fe_choice_drop(sl_fe_choice *c, bool cancel)
{
    if (!c->have_ticket)
        return;
    if (cancel)
        sl_shm_cancel(c->fe->shm, c->ticket);
    sl_fe_release_later(c->fe, c->ticket);
    c->have_ticket = false;
}

/* ================================================================ setup */

/* The echoed prompt leads the answer: its text goes straight into c->text,
 * past the stop strings (they match generated text only) and counted by the
 * response size limit like any text. With logprobs, the prompt's first token
 * opens the logprobs unscored (nothing predicts it) and the ring's first
 * n_prompt - 1 entries score the others (consume). */
static sl_status echo_init(sl_fe_choice *c, const sl_api_request *r, const int32_t *prompt, uint32_t n_prompt)
{
    sl_fe *fe = c->fe;
    if (r->prompt != NULL) {
        if (!sl_fe_buf_append(&c->text, r->prompt, r->prompt_len))
            return SL_ENOMEM;
    } else {
        /* token ids: decoded as /detokenize decodes a whole sequence, control
         * tokens (a BOS) not shown, as a text prompt's echo does not show them */
        size_t need = sl_detokenize(fe->tok, prompt, n_prompt, false, NULL, 0);
        if (!reserve(&c->text, need))
            return SL_ENOMEM;
        sl_detokenize(fe->tok, prompt, n_prompt, false, c->text.p, need);
        c->text.len = need;
        c->text.p[need] = '\0';
    }
    c->echo_len = c->text.len;
    if (!c->logprobs || n_prompt == 0)
        return SL_OK;
    sl_api_token_logprob tl;
    memset(&tl, 0, sizeof tl);
    tl.unscored = true;
    tl.chosen.text = c->piece;
    tl.chosen.len = sl_api_token_text(fe->tok, prompt[0], c->piece, c->piece_cap);
    if (tl.chosen.len > c->piece_cap)
        return SL_ENOMEM;   /* cannot happen: piece_cap is the tokenizer's longest piece */
    if (sl_api_logprobs_push(&c->lp, &tl) < 0)
        return SL_ENOMEM;
    c->echo_left = n_prompt - 1;
    if (c->echo_left == 0)
        c->lp.text_offset = c->echo_len;
    return SL_OK;
}

/* The choice's text is complete before its mailbox is: stop the sequence now,
 * not at max_tokens (the request's other choices go on); what the worker made
 * before it saw the cancel is dropped (consume). */
static void end_text_now(sl_fe_choice *c)
{
    c->stop_hit = true;
    if (c->have_ticket)
        sl_shm_cancel(c->fe->shm, c->ticket);
}

sl_status sl_fe_choice_init(sl_fe_choice *c, sl_fe *fe, const sl_api_request *r, int32_t index, sl_shm_ticket t,
                            uint32_t worker_gen, bool think_open, const int32_t *prompt, uint32_t n_prompt)
{
    memset(c, 0, sizeof *c);
    c->fe = fe;
    c->index = index;
    c->ep = r->endpoint;
    c->stream = r->stream;
    c->logprobs = r->logprobs;
    c->ticket = t;
    c->have_ticket = true;
    c->worker_gen = worker_gen;
    /* generated text continues the prompt: its leading space is kept */
    sl_detok_init_continuation(&c->detok);
    c->piece_cap = sl_detok_max_piece(fe->tok);
    c->piece = sl_malloc(c->piece_cap);
    c->lp_cap = (1 + SL_TOP_LOGPROBS_MAX) * c->piece_cap;
    c->lp_scratch = c->logprobs ? sl_malloc(c->lp_cap) : NULL;
    sl_status rc = sl_api_stop_init(&c->stop, r->stop, r->stop_len, r->n_stop);
    if (c->logprobs)
        c->lp_live = sl_api_logprobs_init(&c->lp, c->ep, 0) == SL_OK;
    sl_reasoning_init(&c->reasoning, think_open);
    if (c->ep == SL_API_ENDPOINT_CHAT) {
        /* Reasoning: the request's reasoning_format, else the server's. */
        bool inline_ = r->reasoning_format == SL_API_REASONING_INLINE ||
                       (r->reasoning_format == SL_API_REASONING_SERVER && fe->reasoning_inline);
        c->reasoning_on = fe->template_thinks && !inline_;
        /* Calls: parsed unless tool_choice is none; a forced call is parsed in
         * the format its grammar wrote, also for a template without one. */
        bool forced = r->tool_choice_mode == SL_API_TOOL_CHOICE_REQUIRED ||
                      r->tool_choice_mode == SL_API_TOOL_CHOICE_NAMED;
        sl_tool_format tf = fe->tool_format == SL_TOOL_FORMAT_NONE && forced ? SL_TOOL_FORMAT_HERMES : fe->tool_format;
        if (r->tools != NULL && json_array_size(r->tools) > 0 && r->tool_choice_mode != SL_API_TOOL_CHOICE_NONE &&
            tf != SL_TOOL_FORMAT_NONE && sl_tool_parser_create(tf, r->tools, &c->tools) < 0)
            rc = SL_ENOMEM;
        c->filtered = c->reasoning_on || c->tools != NULL;
        c->single_call = c->tools != NULL && !r->parallel_tool_calls;
    }
    if (c->piece == NULL || rc != SL_OK || (c->logprobs && (c->lp_scratch == NULL || !c->lp_live)))
        return SL_ENOMEM;
    if (c->ep == SL_API_ENDPOINT_COMPLETIONS && r->echo) {
        if (echo_init(c, r, prompt, n_prompt) != SL_OK)
            return SL_ENOMEM;
        /* max_tokens 0: the answer is the prompt. With logprobs the worker
         * still scores it (and generates nothing); without, its mailbox has
         * nothing to give (generate.c). */
        c->echo_only = r->max_tokens == 0;
        if (c->echo_only && !c->logprobs)
            end_text_now(c);
    }
    return SL_OK;
}

void sl_fe_choice_fini(sl_fe_choice *c)
{
    sl_api_stop_fini(&c->stop);
    if (c->lp_live)
        sl_api_logprobs_fini(&c->lp);
    c->lp_live = false;
    free(c->piece);
    free(c->lp_scratch);
    c->piece = c->lp_scratch = NULL;
    sl_fe_buf_fini(&c->text);
    sl_reasoning_fini(&c->reasoning);
    sl_tool_parser_destroy(c->tools);
    c->tools = NULL;
    json_decref(c->deltas);
    c->deltas = NULL;
    sl_fe_buf_fini(&c->reason);
    json_decref(c->calls);
    c->calls = NULL;
}

/* ================================================================ filtered answers */

/* Appends text to the last delta if it is of the same key, else a new one. */
static sl_status delta_text(sl_fe_choice *c, const char *key, const char *s, size_t n)
{
    if (c->deltas == NULL && (c->deltas = json_array()) == NULL)
        return SL_ENOMEM;
    size_t k = json_array_size(c->deltas);
    json_t *last = k ? json_array_get(c->deltas, k - 1) : NULL;
    json_t *old = last && json_object_size(last) == 1 ? json_object_get(last, key) : NULL;
    size_t ol = old ? json_string_length(old) : 0;
    char *cat = sl_malloc(ol + n + 1);
    if (cat == NULL)
        return SL_ENOMEM;
    if (ol)
        memcpy(cat, json_string_value(old), ol);
    memcpy(cat + ol, s, n);
    json_t *v = sl_api_json_string_lossy(cat, ol + n);
    free(cat);
    if (v == NULL)
        return SL_ENOMEM;
    if (old)
        return json_object_set_new(last, key, v) ? SL_ENOMEM : SL_OK;
    json_t *d = json_object();
    if (d == NULL || json_object_set_new(d, key, v) || json_array_append_new(c->deltas, d))
        return SL_ENOMEM;
    return SL_OK;
}

static sl_status on_tool_event(void *ctx, const sl_tool_event *ev)
{
    sl_fe_choice *c = ctx;
    if (c->single_call && c->n_calls > 0)
        return SL_OK;   /* what the model wrote after a single-call answer's call is not the client's */
    if (ev->kind == SL_TOOL_EVENT_CONTENT) {
        if (c->stream)
            return delta_text(c, "content", ev->text, ev->len);
        return sl_fe_buf_append(&c->text, ev->text, ev->len) ? SL_OK : SL_ENOMEM;
    }
    c->n_calls++;
    if (c->single_call)
        end_text_now(c);   /* parallel_tool_calls false: the answer is this call */
    if (!c->stream) {
        if (c->calls == NULL && (c->calls = json_array()) == NULL)
            return SL_ENOMEM;
        json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", ev->id, "type", "function", "function", "name",
                              ev->name, "arguments", ev->arguments);
        return o && json_array_append_new(c->calls, o) == 0 ? SL_OK : SL_ENOMEM;
    }
    /* OpenAI's shape: the first delta of a call names it, the next carry its arguments. */
    if (c->deltas == NULL && (c->deltas = json_array()) == NULL)
        return SL_ENOMEM;
    json_t *head = json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", (int)ev->index, "id", ev->id,
                             "type", "function", "function", "name", ev->name, "arguments", "");
    json_t *args = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", (int)ev->index, "function", "arguments",
                             ev->arguments);
    bool bad = head == NULL || args == NULL;
    bad |= json_array_append_new(c->deltas, head) != 0;
    bad |= json_array_append_new(c->deltas, args) != 0;
    return bad ? SL_ENOMEM : SL_OK;
}

static sl_status on_reasoning_text(void *ctx, sl_reasoning_event_kind kind, const char *s, size_t n)
{
    sl_fe_choice *c = ctx;
    if (c->single_call && c->n_calls > 0)
        return SL_OK;   /* after a single-call answer's call, as on_tool_event */
    if (kind == SL_REASONING_EVENT_REASONING) {
        if (c->stream)
            return delta_text(c, "reasoning_content", s, n);
        return sl_fe_buf_append(&c->reason, s, n) ? SL_OK : SL_ENOMEM;
    }
    if (c->tools)
        return sl_tool_parser_feed(c->tools, s, n, false, on_tool_event, c);
    sl_tool_event ev = {.kind = SL_TOOL_EVENT_CONTENT, .text = s, .len = n};
    return on_tool_event(c, &ev);
}

/* ================================================================ tokens -> text */

/* Text past the stop strings: to the answer, or through the filters. final:
 * the answer ends (held text is decided now). */
static void out_text(sl_fe_choice *c, const char *s, size_t n, bool final)
{
    if (!c->filtered) {
        if (n && !sl_fe_buf_append(&c->text, s, n))
            c->oom = true;
        return;
    }
    sl_status rc = SL_OK;
    if (c->reasoning_on)
        rc = sl_reasoning_feed(&c->reasoning, s, n, final, on_reasoning_text, c);
    else if (n)
        rc = on_reasoning_text(c, SL_REASONING_EVENT_CONTENT, s, n);
    if (rc == SL_OK && final && c->tools)
        rc = sl_tool_parser_feed(c->tools, "", 0, true, on_tool_event, c);
    if (rc < 0)
        c->oom = true;
}

static void take_text(sl_fe_choice *c, const char *s, size_t n)
{
    const char *emit = NULL;
    size_t emit_len = 0;
    if (n == 0 || c->stop_hit)
        return;
    if (sl_api_stop_push(&c->stop, s, n, &emit, &emit_len) < 0)
        return;    /* out of memory: the matcher kept the text; it comes out with the next piece */
    out_text(c, emit, emit_len, false);
    if (c->stop.hit)
        end_text_now(c);
}

static void consume(sl_fe_choice *c, int32_t token, const sl_logprob_record *rec)
{
    sl_fe *fe = c->fe;
    if (c->stop_hit)
        return;     /* tokens the worker made before it saw the cancel: not the client's */
    if (c->echo_left > 0) {
        /* A prompt token the worker scored (echo with logprobs): its text is
         * in the echo already and it is not a generated token. The generated
         * tokens' text_offset then points past the echoed text. */
        c->echo_left--;
        sl_api_token_logprob tl;
        if (rec != NULL && c->lp_live &&
            (sl_api_token_logprob_from_record(&tl, rec, fe->tok, c->lp_scratch, c->lp_cap) != SL_OK ||
             sl_api_logprobs_push(&c->lp, &tl) < 0))
            c->oom = true;
        if (c->echo_left == 0)
            c->lp.text_offset = c->echo_len;
        return;
    }
    c->n_generated++;
    bool marker = c->tools != NULL && token >= 0 && (token == fe->tool_markers[0] || token == fe->tool_markers[1]);
    size_t n = sl_detok_push(&c->detok, fe->tok, token, marker, c->piece, c->piece_cap);
    take_text(c, c->piece, n);
    if (c->logprobs && rec != NULL && c->lp_live && !sl_tokenizer_is_eog(fe->tok, token)) {
        sl_api_token_logprob tl;
        if (sl_api_token_logprob_from_record(&tl, rec, fe->tok, c->lp_scratch, c->lp_cap) == SL_OK &&
            sl_api_logprobs_push(&c->lp, &tl) < 0)
            c->oom = true;
    }
}

sl_status sl_fe_choice_read(sl_fe_choice *c, uint32_t max_tokens, bool *terminal)
{
    static int32_t toks[READ_BATCH];
    static sl_logprob_record recs[READ_BATCH];
    sl_fe *fe = c->fe;
    *terminal = false;
    if (!c->have_ticket)
        return SL_OK;
    bool want_recs = c->logprobs && sl_shm_get_limits(fe->shm)->logprobs;
    uint32_t total = 0;
    while (!c->stop_hit && total < max_tokens) {
        uint32_t n = 0;
        sl_mailbox_state state = SL_MAILBOX_STATE_RUNNING;
        sl_status rc = sl_shm_read_tokens(fe->shm, c->ticket, toks, want_recs ? recs : NULL, READ_BATCH, &n, &state);
        if (rc < 0) {
            c->have_ticket = false;   /* not ours any more (recovery took it back) */
            return SL_ESTALE;
        }
        for (uint32_t i = 0; i < n; i++)
            consume(c, toks[i], want_recs ? &recs[i] : NULL);
        total += n;
        if (c->oom)
            return SL_OK;
        if (state >= SL_MAILBOX_STATE_FINISHED && n < READ_BATCH) {
            *terminal = true;
            break;
        }
        if (n < READ_BATCH)
            break;
    }
    return SL_OK;
}

size_t sl_fe_choice_bytes(const sl_fe_choice *c)
{
    return c->text.len + c->reason.len;
}

/* ================================================================ chunks */

static bool lp_has_entries(const sl_fe_choice *c)
{
    if (!c->lp_live || c->lp._obj == NULL)
        return false;
    json_t *a = json_object_get(c->lp._obj, c->ep == SL_API_ENDPOINT_CHAT ? "content" : "tokens");
    return json_array_size(a) > 0;
}

/* A stream's logprobs start over after each chunk that carried them; the
 * completions text offset runs on. */
static void lp_reset(sl_fe_choice *c)
{
    if (!c->logprobs)
        return;
    size_t off = c->lp.text_offset;
    if (c->lp_live)
        sl_api_logprobs_fini(&c->lp);
    c->lp_live = sl_api_logprobs_init(&c->lp, c->ep, off) == SL_OK;
    if (!c->lp_live)
        c->oom = true;
}

static sl_api_chunk chunk_of(const sl_fe_choice *c, const sl_api_chunk *tmpl, sl_api_chunk_kind kind)
{
    sl_api_chunk k = *tmpl;
    k.kind = kind;
    k.index = c->index;
    k.text = "";
    k.text_len = 0;
    k.logprobs = NULL;
    k.delta = NULL;
    k.usage = NULL;
    k.timings = NULL;
    k.finish = SL_API_FINISH_NONE;
    return k;
}

/* The text (and logprobs) read since the last chunk as one text chunk. */
static bool out_text_chunk(sl_fe_choice *c, const sl_api_chunk *tmpl, sl_fe_buf *out)
{
    sl_api_chunk k = chunk_of(c, tmpl, SL_API_CHUNK_TEXT);
    k.text = c->text.p ? c->text.p : "";
    k.text_len = c->text.len;
    k.logprobs = lp_has_entries(c) ? &c->lp : NULL;
    return sl_fe_buf_event(out, sl_api_chunk_build(&k));
}

/* A filtered stream's deltas as chunks onto out, the logprobs on the first;
 * with none, the logprobs wait for the next chunk, or (last) ride on an
 * empty content delta. */
static bool out_deltas(sl_fe_choice *c, const sl_api_chunk *tmpl, sl_fe_buf *out, bool last)
{
    size_t n = json_array_size(c->deltas);
    bool lp = lp_has_entries(c);
    if (n == 0 && !(last && lp))
        return true;
    sl_api_chunk k = chunk_of(c, tmpl, SL_API_CHUNK_DELTA);
    bool ok = true;
    if (n == 0) {
        json_t *d = json_pack("{s:s}", "content", "");
        k.delta = d;
        k.logprobs = &c->lp;
        ok = d != NULL && sl_fe_buf_event(out, sl_api_chunk_build(&k));
        json_decref(d);
    }
    for (size_t i = 0; i < n && ok; i++) {
        k.delta = json_array_get(c->deltas, i);
        k.logprobs = i == 0 && lp ? &c->lp : NULL;
        ok = sl_fe_buf_event(out, sl_api_chunk_build(&k));
    }
    json_array_clear(c->deltas);
    lp_reset(c);
    return ok;
}

bool sl_fe_choice_out_progress(sl_fe_choice *c, const sl_api_chunk *tmpl, sl_fe_buf *out)
{
    if (c->filtered)
        return out_deltas(c, tmpl, out, false);   /* nothing while all is held back (a call or tag) */
    if (c->text.len == 0 && !lp_has_entries(c))
        return true;
    bool ok = out_text_chunk(c, tmpl, out);
    c->text.len = 0;
    lp_reset(c);
    return ok && !c->oom;
}

bool sl_fe_choice_out_pending(sl_fe_choice *c, const sl_api_chunk *tmpl, sl_fe_buf *out)
{
    if (c->filtered || (c->text.len == 0 && !lp_has_entries(c)))
        return false;
    return out_text_chunk(c, tmpl, out);
}

bool sl_fe_choice_out_final(sl_fe_choice *c, const sl_api_chunk *tmpl, const sl_api_timings *timings,
                            sl_fe_buf *out)
{
    bool ok = true;
    if (c->filtered)
        ok = out_deltas(c, tmpl, out, true);
    else if (c->text.len > 0 || lp_has_entries(c))
        ok = out_text_chunk(c, tmpl, out);
    c->text.len = 0;
    sl_api_chunk k = chunk_of(c, tmpl, SL_API_CHUNK_FINISH);
    k.finish = c->fin;
    k.timings = timings;
    return ok && sl_fe_buf_event(out, sl_api_chunk_build(&k));
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

void sl_fe_choice_result(const sl_fe_choice *c, sl_api_result *r)
{
    memset(r, 0, sizeof *r);
    r->endpoint = c->ep;
    r->text = c->text.p ? c->text.p : "";
    r->text_len = c->text.len;
    r->finish = c->fin;
    r->logprobs = c->lp_live ? &c->lp : NULL;
    if (c->filtered) {
        r->content_null = blank(c->text.p, c->text.len);
        r->reasoning = c->reasoning_on && c->reason.len > 0 ? c->reason.p : NULL;
        r->reasoning_len = c->reason.len;
        r->tool_calls = c->calls;
    }
}

/* ================================================================ end */

/* A FAILED mailbox that a worker death failed (shared/recover.c), not the
 * worker itself: recovery bumps the worker generation before it marks the
 * mailboxes, so a generation newer than at submission says so; its error
 * text is the fallback for a death between submission and takeover. */
static bool worker_died(const sl_fe_choice *c, const sl_shm_result_info *info)
{
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(c->fe->shm, &wi);
    if (wi.worker_generation != c->worker_gen)
        return true;
    static const char died[] = "the worker process died";
    return strncmp(info->error, died, sizeof died - 1) == 0;
}

/* The per-choice histograms, at a choice's end (vLLM observes them when a
 * request finishes). A choice that ended at a stop string sluice matched is
 * left out: the worker was still running it, so its timings are not final. */
static void observe(sl_fe *fe, const sl_shm_timings *t, int64_t n)
{
    if (t->queued_ns == 0)
        return;
    sl_shm_t *shm = fe->shm;
    sl_shm_histogram_observe(shm, SL_HISTOGRAM_PROMPT_TOKENS, t->n_prompt_tokens);
    sl_shm_histogram_observe(shm, SL_HISTOGRAM_GENERATION_TOKENS, n > 0 ? (uint64_t)n : 0);
    if (t->admitted_ns >= t->queued_ns)
        sl_shm_histogram_observe(shm, SL_HISTOGRAM_QUEUE, t->admitted_ns - t->queued_ns);
    if (t->first_token_ns >= t->queued_ns && t->first_token_ns > 0) {
        sl_shm_histogram_observe(shm, SL_HISTOGRAM_TTFT, t->first_token_ns - t->queued_ns);
        if (n > 1 && t->last_token_ns > t->first_token_ns)
            sl_shm_histogram_observe(shm, SL_HISTOGRAM_MEAN_INTER_TOKEN,
                                     (t->last_token_ns - t->first_token_ns) / (uint64_t)(n - 1));
        if (t->admitted_ns > 0 && t->first_token_ns >= t->admitted_ns && t->last_token_ns >= t->first_token_ns) {
            sl_shm_histogram_observe(shm, SL_HISTOGRAM_PREFILL, t->first_token_ns - t->admitted_ns);
            sl_shm_histogram_observe(shm, SL_HISTOGRAM_DECODE, t->last_token_ns - t->first_token_ns);
            sl_shm_histogram_observe(shm, SL_HISTOGRAM_INFERENCE, t->last_token_ns - t->admitted_ns);
        }
    }
    uint64_t end = t->last_token_ns ? t->last_token_ns : sl_shm_now_ns();
    if (end >= t->queued_ns)
        sl_shm_histogram_observe(shm, SL_HISTOGRAM_E2E, end - t->queued_ns);
}

static void count_success(sl_fe *fe, sl_api_finish fin)
{
    sl_counter c = fin == SL_API_FINISH_LENGTH       ? SL_COUNTER_SUCCESS_LENGTH
                   : fin == SL_API_FINISH_TOOL_CALLS ? SL_COUNTER_SUCCESS_TOOL_CALLS
                                                     : SL_COUNTER_SUCCESS_STOP;
    sl_shm_counter_add(fe->shm, c, 1);
}

void sl_fe_choice_abort(sl_fe_choice *c)
{
    if (c->have_ticket && !c->ended)
        sl_shm_counter_add(c->fe->shm, SL_COUNTER_SUCCESS_ABORT, 1);
    sl_fe_choice_drop(c, true);
}

bool sl_fe_choice_end(sl_fe_choice *c, bool started, sl_api_error *e, bool *flush_text)
{
    sl_fe *fe = c->fe;
    *flush_text = false;
    sl_shm_result_info info;
    memset(&info, 0, sizeof info);
    if (!c->have_ticket || sl_shm_result(fe->shm, c->ticket, &info) != SL_OK) {
        sl_api_error_set(e, SL_API_ERR_UNAVAILABLE, NULL, "the request was lost: the worker restarted");
        return false;
    }
    if (!c->stop_hit) {
        size_t n = sl_detok_flush(&c->detok, fe->tok, c->piece, c->piece_cap);
        take_text(c, c->piece, n);
    }
    if (!c->stop_hit) {
        const char *emit = NULL;
        size_t emit_len = 0;
        sl_api_stop_flush(&c->stop, &emit, &emit_len);
        out_text(c, emit, emit_len, false);
    }
    if (c->filtered)
        out_text(c, "", 0, true);   /* also after a stop string: what the filters held is decided */
    if (c->oom) {
        sl_api_error_set(e, SL_API_ERR_INTERNAL, NULL, "out of memory");
        return false;
    }
    sl_api_finish fin = SL_API_FINISH_STOP;
    if (!c->stop_hit) {
        if (info.state == SL_MAILBOX_STATE_FAILED) {
            const char *what = info.error[0] ? info.error : "the worker process died while running this request";
            if (!worker_died(c, &info)) {
                sl_api_error_set(e, SL_API_ERR_INTERNAL, NULL, "generation failed: %s",
                                 info.error[0] ? info.error : "worker error");
                *flush_text = true;
            } else if (!started) {
                /* Nothing reached the client: a 503 with Retry-After says it is
                 * safe to send again (HAProxy's retry-on 503 replays it). */
                sl_api_error_set(e, SL_API_ERR_UNAVAILABLE, NULL, "%s; nothing was sent, so it can be retried.",
                                 what);
                e->code = "worker_lost";
                e->retry_after_s = 1;
            } else {
                /* Part of the answer is out: the error event says what was
                 * lost, as the 503 would have (a client's retry is its call). */
                sl_api_error_set(e, SL_API_ERR_UNAVAILABLE, NULL, "%s; the answer so far is incomplete.", what);
                e->code = "worker_lost";
            }
            return false;
        }
        if (info.state == SL_MAILBOX_STATE_CANCELLED) {
            sl_api_error_set(e, SL_API_ERR_UNAVAILABLE, NULL, "the request was cancelled by the server");
            return false;
        }
        fin = info.finish_reason == SL_FINISH_REASON_LENGTH ? SL_API_FINISH_LENGTH : SL_API_FINISH_STOP;
        observe(fe, &info.timings, c->n_generated);
    }
    if (c->echo_only)
        fin = SL_API_FINISH_LENGTH;   /* max_tokens 0: the budget ended the answer before it began */
    if (c->n_calls > 0 && fin == SL_API_FINISH_STOP)
        fin = SL_API_FINISH_TOOL_CALLS;
    c->fin = fin;
    c->info = info;
    c->ended = true;
    count_success(fe, fin);
    sl_fe_choice_drop(c, false);   /* released now, or after the worker saw the stop string's cancel */
    return true;
}
