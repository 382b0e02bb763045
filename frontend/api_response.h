/* frontend/api_response.h: OpenAI response objects, whole and streamed.
 * Where:     front ends, once a request's tokens come back from the worker.
 * Who:       any thread; no shared state (ids come from getrandom).
 * Shapes:    chat.completion / chat.completion.chunk for the chat route,
 *            text_completion (both whole and streamed) for completions, with
 *            OpenAI's field names, plus `timings` in llama-server's names.
 * Ownership: builders return malloc'd compact JSON (UTF-8, not \u-escaped)
 *            the caller frees; inputs are borrowed. sl_api_logprobs owns its
 *            JSON until fini.
 * Errors:    NULL / SL_ENOMEM only when allocation fails. */
#ifndef SL_API_RESPONSE_H
#define SL_API_RESPONSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/api_request.h"
#include "model/tokenizer.h"
#include "shared/sampling.h"
#include "shared/status.h"

#define SL_API_ID_LEN 48   /* "chatcmpl-" + 32 hex + NUL fits */

typedef enum {
    SL_API_FINISH_NONE = 0,     /* still running: finish_reason null */
    SL_API_FINISH_STOP,         /* EOS or a stop string: "stop" */
    SL_API_FINISH_LENGTH,       /* max_tokens or the context: "length" */
    SL_API_FINISH_TOOL_CALLS,   /* the template parser found tool calls: "tool_calls" */
} sl_api_finish;

typedef struct {
    int64_t prompt_tokens;
    int64_t completion_tokens;   /* every generated token, stop text included */
    int64_t cached_tokens;       /* prompt tokens the worker's prefix cache held: prompt_tokens_details */
} sl_api_usage;

/* Measured by the worker; the derived per-token and per-second figures are
 * computed here (0 when a count or time is 0). */
typedef struct {
    int64_t prompt_n;
    double prompt_ms;
    int64_t predicted_n;
    double predicted_ms;
} sl_api_timings;

/* One generated token and its alternatives, as text. `text` holds the
 * token's raw bytes (possibly half a UTF-8 character): `bytes` is sent
 * exactly, `token` as lossy UTF-8. */
typedef struct {
    const char *text;
    size_t len;
    float logprob;
} sl_api_token_alt;

typedef struct {
    sl_api_token_alt chosen;
    bool unscored;                /* completions: token_logprobs and top_logprobs null (an echoed
                                     prompt's first token, which nothing predicts); chosen.logprob
                                     and top are then unused */
    int32_t n_top;
    sl_api_token_alt top[SL_TOP_LOGPROBS_MAX];
} sl_api_token_logprob;

/* Writes "chatcmpl-<32 hex>" (chat) or "cmpl-<32 hex>" (completions) to id;
 * 128 random bits from getrandom (a counter mixed with the clock if that
 * fails), so ids are unique across front-end processes. */
void sl_api_id_make(char id[SL_API_ID_LEN], sl_api_endpoint ep);

/* ---- logprobs ----
 * Accumulates OpenAI's logprobs object for a run of tokens: for chat
 * {"content":[{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}]},
 * for completions {tokens, token_logprobs, top_logprobs:[{text: logprob}],
 * text_offset}. A whole response uses one for all tokens; a stream uses one
 * per chunk. */
typedef struct {
    sl_api_endpoint endpoint;
    size_t text_offset;         /* completions: offset of the next token's text */
    json_t *_obj;
} sl_api_logprobs;

/* text_offset0: completions' offset of the first token (the prompt length
 * when echoing, else 0). SL_OK or SL_ENOMEM (then fini is still safe). */
sl_status sl_api_logprobs_init(sl_api_logprobs *lp, sl_api_endpoint ep, size_t text_offset0);
/* Appends one token (t->n_top clamped to 0..SL_TOP_LOGPROBS_MAX; texts are
 * copied). SL_OK or SL_ENOMEM (the object may then hold part of the token:
 * fail the request). */
sl_status sl_api_logprobs_push(sl_api_logprobs *lp, const sl_api_token_logprob *t);
/* The token's text alone, as a logprobs entry shows it (each token decoded
 * alone, special tokens shown, a leading space kept): min(needed, cap) bytes
 * to out; returns the bytes needed (cap >= sl_detok_max_piece(t) is enough). */
size_t sl_api_token_text(const sl_tokenizer *t, int32_t id, char *out, size_t cap);
/* Frees the object; safe after a failed init. */
void sl_api_logprobs_fini(sl_api_logprobs *lp);

/* Fills `out` from a worker record, with token texts decoded by `t` (each
 * token alone, special tokens shown). Texts point into `scratch`, which
 * must hold (1 + rec->n_top) * sl_detok_max_piece(t) bytes. Returns SL_OK or
 * SL_ERANGE when scratch is too small. */
sl_status sl_api_token_logprob_from_record(sl_api_token_logprob *out, const sl_logprob_record *rec,
                                           const sl_tokenizer *t, char *scratch, size_t cap);

/* ---- whole responses ---- */
typedef struct {
    sl_api_endpoint endpoint;
    const char *id;
    int64_t created;                  /* unix seconds */
    const char *model;
    const char *system_fingerprint;   /* after model; NULL: no such field */
    const char *text;                 /* generated text, valid UTF-8 (the detokenizer's) */
    size_t text_len;
    sl_api_finish finish;
    sl_api_usage usage;
    const sl_api_timings *timings;    /* NULL: no `timings` field */
    const sl_api_logprobs *logprobs;  /* NULL: "logprobs": null */
    /* chat only, set by the tool call and reasoning parsers: */
    bool content_null;                /* "content": null (the answer was only calls or thought) */
    const char *reasoning;            /* message.reasoning_content; NULL: no such field */
    size_t reasoning_len;
    const json_t *tool_calls;         /* message.tool_calls (array, borrowed); NULL: no such field */
} sl_api_result;

/* chat.completion: {id, object, created, model, system_fingerprint?, choices:[{index, message:
 * {role:"assistant", content, reasoning_content?, tool_calls?}, logprobs,
 * finish_reason}], usage, timings};
 * text_completion: choices:[{index, text, logprobs, finish_reason}]. */
char *sl_api_response_build(const sl_api_result *r);

/* The same with n >= 1 choices: r[i] is choice i (its text, finish,
 * logprobs, reasoning and calls; "index": i). The envelope (endpoint, id,
 * created, model), usage and timings are r[0]'s, which the caller fills
 * with the request's totals (usage.completion_tokens summed over the
 * choices). NULL for n == 0 or on failure. */
char *sl_api_response_build_n(const sl_api_result *r, size_t n);

/* ---- streamed chunks ---- */
typedef enum {
    SL_API_CHUNK_ROLE = 0,   /* chat only: delta {"role":"assistant","content":""} */
    SL_API_CHUNK_TEXT,       /* delta {"content": text} / {"text": text} */
    SL_API_CHUNK_FINISH,     /* delta {} (chat) / text "" with finish_reason set */
    SL_API_CHUNK_USAGE,      /* choices [] and the usage object (include_usage) */
    SL_API_CHUNK_DELTA,      /* chat only: the given delta object ({"content"}, {"reasoning_content"},
                                {"tool_calls":[...]}), with this event's logprobs */
} sl_api_chunk_kind;

typedef struct {
    sl_api_endpoint endpoint;
    sl_api_chunk_kind kind;
    int32_t index;                    /* the choice this chunk belongs to (n > 1); not USAGE */
    const char *id;                   /* the same id for every chunk of a response */
    int64_t created;
    const char *model;
    const char *system_fingerprint;   /* after model, on every chunk; NULL: no such field */
    const char *text;                 /* TEXT (and FINISH, optional trailing text) */
    size_t text_len;
    sl_api_finish finish;             /* FINISH */
    const sl_api_logprobs *logprobs;  /* TEXT: this chunk's tokens; NULL = null */
    bool include_usage;               /* "usage": null on every non-usage chunk */
    const sl_api_usage *usage;        /* USAGE */
    const sl_api_timings *timings;    /* FINISH or USAGE: added as `timings` */
    const json_t *delta;              /* DELTA: the delta object (borrowed) */
} sl_api_chunk;

/* The chunk's JSON (without SSE framing; see api_sse.h). NULL on failure. */
char *sl_api_chunk_build(const sl_api_chunk *c);

/* GET /v1/models: {"object":"list","data":[{"id":model,"object":"model",
 * "created":created,"owned_by":"sluice"}]}. NULL on failure. */
char *sl_api_models_build(const char *model, int64_t created);

/* "stop", "length", "tool_calls"; NULL for NONE. */
const char *sl_api_finish_name(sl_api_finish f);

#endif
