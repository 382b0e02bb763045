/* frontend/choice.h: one choice of a generation request, from its mailbox
 * to OpenAI text: the mailbox ticket, the detokenizer, the stop strings,
 * the logprobs, the reasoning splitter and the tool call parser, and the
 * choice's chunks (a stream) or its share of the whole answer. stream.c runs
 * n of these (the request's `n`) under one HTTP response; generate.c uses the
 * mailbox release below when a submission of n fails half way.
 * Where:     each front-end process's event loop; not a public contract (only
 *            the server files include it, after server_internal.h).
 * Who:       the loop thread only: the token buffers of sl_fe_choice_read are
 *            static.
 * Ownership: a choice lives in caller storage (the stream's array); init
 *            allocates its buffers, fini frees them. It owns its ticket from
 *            init until sl_fe_choice_drop (or sl_fe_choice_end's drop), which
 *            releases it exactly once, now or through sl_fe_release_later.
 *            Chunks built from templates borrow the template's strings.
 * Errors:    allocation failures set `oom` (the request must then fail);
 *            sl_fe_choice_end fills an sl_api_error for a choice that failed. */
#ifndef SL_FRONTEND_CHOICE_H
#define SL_FRONTEND_CHOICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "frontend/api_error.h"
#include "frontend/api_request.h"
#include "frontend/api_response.h"
#include "frontend/api_stop.h"
#include "frontend/reasoning.h"
#include "frontend/server_internal.h"
#include "frontend/tool_calls.h"
#include "model/tokenizer.h"
#include "shared/shm.h"

/* A growable byte buffer (an event's SSE bytes, a choice's text). */
typedef struct {
    char *p;                       /* NUL-terminated once anything was appended */
    size_t len, cap;
} sl_fe_buf;

/* Appends n bytes; false (b unchanged) when memory runs out. */
bool sl_fe_buf_append(sl_fe_buf *b, const char *s, size_t n);

/* Frames one chunk's JSON as an SSE event onto b and frees json; false when
 * json is NULL (a failed build) or memory runs out. */
bool sl_fe_buf_event(sl_fe_buf *b, char *json);

/* Frees b's bytes; b is empty after. */
void sl_fe_buf_fini(sl_fe_buf *b);

/* Releases mailbox t now if the worker let go, else keeps it in fe->pending
 * until sl_fe_streams_retry_releases sees it let go (a cancelled request is
 * released only after the worker saw the cancel). Never blocks. */
void sl_fe_release_later(sl_fe *fe, sl_shm_ticket t);

typedef struct {
    sl_fe *fe;
    int32_t index;                 /* the choice's place in `choices` (its chunks' index) */
    sl_api_endpoint ep;
    bool stream, logprobs;
    sl_shm_ticket ticket;
    bool have_ticket;
    uint32_t worker_gen;           /* the worker generation when the request was taken over */
    bool stop_hit;                 /* a stop string, the first call of a single-call answer or max_tokens
                                      0 ended the text (the mailbox was cancelled) */
    bool echo_only;                /* echo with max_tokens 0: the answer is the prompt, "length" */
    uint32_t echo_left;            /* echo with logprobs: prompt entries still to read from the ring
                                      (the first n_prompt - 1 entries; shm.h's contract) */
    size_t echo_len;               /* bytes of echoed prompt text leading the answer */
    bool single_call;              /* parallel_tool_calls false: the first complete call ends the choice */
    bool oom;                      /* text or a logprob was lost to a failed allocation */
    bool ended;                    /* sl_fe_choice_end succeeded: fin and info hold the outcome */
    sl_api_finish fin;
    sl_shm_result_info info;       /* the mailbox's result (timings, cached tokens) once ended */
    int64_t n_generated;           /* tokens read, stop text included */

    sl_detok detok;
    sl_api_stop stop;
    char *piece;                   /* detokenizer output, sl_detok_max_piece bytes */
    size_t piece_cap;
    char *lp_scratch;              /* token texts for one logprob record */
    size_t lp_cap;
    sl_api_logprobs lp;            /* stream: the tokens since the last chunk; else all */
    bool lp_live;
    sl_fe_buf text;                /* stream: the text since the last chunk; else the whole answer */

    /* Chat answers through the reasoning splitter and/or the tool call parser
     * ("filtered"): after the stop strings, text is split into content,
     * reasoning and calls. A stream collects the deltas since the last chunk
     * in order (`deltas`); a whole answer collects content in `text`, the
     * reasoning in `reason` and the calls in `calls`. */
    bool filtered;
    bool reasoning_on;
    sl_reasoning reasoning;
    sl_tool_parser *tools;         /* NULL: no tool parsing */
    json_t *deltas;                /* stream: delta objects not yet sent */
    sl_fe_buf reason;              /* whole answer: the reasoning text */
    json_t *calls;                 /* whole answer: message.tool_calls; NULL = none */
    int32_t n_calls;
} sl_fe_choice;

/* Sets c up for choice `index` of request r over the submitted mailbox t
 * (owned from here, also on failure). think_open: the rendered prompt ends
 * inside an open <think>. prompt: the n_prompt token ids submitted; with
 * r->echo the answer starts with the prompt's text (r->prompt itself, or
 * these ids detokenized) and, with logprobs, the logprobs with the prompt's
 * tokens: the first as unscored, the next n_prompt - 1 from the ring's first
 * entries. Returns SL_OK or SL_ENOMEM (c is then still safe to drop and
 * fini). r and prompt are only read during the call. */
sl_status sl_fe_choice_init(sl_fe_choice *c, sl_fe *fe, const sl_api_request *r, int32_t index, sl_shm_ticket t,
                            uint32_t worker_gen, bool think_open, const int32_t *prompt, uint32_t n_prompt);

/* Frees c's buffers. The ticket must have been dropped first. */
void sl_fe_choice_fini(sl_fe_choice *c);

/* Gives the mailbox up, once: cancelled first when `cancel`, then released
 * now or by sl_fe_release_later. A no-op without a ticket. */
void sl_fe_choice_drop(sl_fe_choice *c, bool cancel);

/* The client is gone (or the server gave up on it) before c ended: counted
 * once as a request_success "abort" unless c had ended, then dropped with
 * cancel. */
void sl_fe_choice_abort(sl_fe_choice *c);

/* Reads what the mailbox holds, at most about max_tokens tokens (stopping
 * early at a stop string), into text, logprobs and deltas. *terminal (OUT):
 * the mailbox is finished and everything was read. Returns SL_OK (c->oom
 * may be set: fail the request) or SL_ESTALE when the mailbox is not ours
 * any more (recovery took it back: the ticket is gone, *terminal false). */
sl_status sl_fe_choice_read(sl_fe_choice *c, uint32_t max_tokens, bool *terminal /* OUT */);

/* Text and reasoning bytes this choice holds (a whole answer's size). */
size_t sl_fe_choice_bytes(const sl_fe_choice *c);

/* Stream: the chunks of what was read since the last call, appended to out
 * from the template `tmpl` (endpoint, id, created, model, include_usage; the
 * kind, index and payload are set here), then forgotten. Nothing is appended
 * when nothing is ready (a filter holding text back). false when memory ran
 * out. */
bool sl_fe_choice_out_progress(sl_fe_choice *c, const sl_api_chunk *tmpl, sl_fe_buf *out);

/* The mailbox is terminal or a stop string ended the text: flushes the
 * detokenizer, the stop matcher and the filters and decides the outcome.
 * true: c->ended, c->fin and c->info hold it, metrics were observed and the
 * ticket was dropped (without a cancel). false: the choice failed and *e
 * (OUT) says how, for the whole request (a worker death: a 503 worker_lost
 * with Retry-After when `started` is false, nothing having been sent);
 * *flush_text (OUT) says the worker failed with an error of its own, so a
 * stream that sent nothing yet sends the choice's pending text first
 * (sl_fe_choice_out_pending). The ticket is kept: the caller fails the
 * request, which drops it. */
bool sl_fe_choice_end(sl_fe_choice *c, bool started, sl_api_error *e /* OUT */, bool *flush_text /* OUT */);

/* Stream, after a successful sl_fe_choice_end: the choice's last text or
 * deltas and its finish chunk (carrying `timings` when non-NULL) onto out.
 * false when memory ran out. */
bool sl_fe_choice_out_final(sl_fe_choice *c, const sl_api_chunk *tmpl, const sl_api_timings *timings,
                            sl_fe_buf *out);

/* Stream, failing before its headers: the text read since the last chunk as
 * one text chunk onto out, so that it goes out before the error event. true
 * when a chunk was appended. */
bool sl_fe_choice_out_pending(sl_fe_choice *c, const sl_api_chunk *tmpl, sl_fe_buf *out);

/* Whole answer, after a successful sl_fe_choice_end: c's fields of r (text,
 * finish, logprobs, reasoning, calls); the envelope, usage and timings are
 * left to the caller. Borrows c's buffers. */
void sl_fe_choice_result(const sl_fe_choice *c, sl_api_result *r /* OUT */);

#endif
