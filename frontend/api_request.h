/* frontend/api_request.h: parse and validate the bodies of
 * POST /v1/chat/completions and POST /v1/completions.
 * Where:     front ends, before the chat template, tokenization and submit.
 * Who:       any thread; no shared state.
 * Safety:    any byte string is accepted as input: a body that is not what
 *            OpenAI's API accepts gives SL_EINVAL and a filled sl_api_error
 *            (400, `param` naming the field), never a crash. Every field
 *            is known (api_request_fields.c has the table): implemented,
 *            accepted where doing nothing is its documented meaning, or
 *            refused by name; an unknown field is a 400, as OpenAI does.
 * Ownership: sl_api_request owns the parsed JSON (`_root`); every json_t and
 *            string pointer in it is borrowed from there and dies with
 *            sl_api_request_fini. The body buffer may be freed after parse.
 * Errors:    SL_OK; SL_EINVAL (request data, err filled); SL_ENOMEM (err
 *            filled as a 500). The body size limit is the server's, not ours.
 * Limits:    JSON nesting depth <= SL_API_JSON_DEPTH_MAX; up to
 *            SL_API_STOP_MAX stop strings of 1..SL_API_STOP_LEN_MAX bytes;
 *            n from 1 to SL_API_N_MAX (else 400, param "n");
 *            up to SL_API_TOOLS_MAX tools; chat_template_kwargs up to
 *            SL_API_TEMPLATE_KWARGS_BYTES_MAX bytes of compact JSON; at most
 *            one output constraint (response_format or an extension). */
#ifndef SL_API_REQUEST_H
#define SL_API_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/api_error.h"
#include "shared/sampling.h"
#include "shared/status.h"

#define SL_API_STOP_MAX 4           /* OpenAI: "up to 4 sequences" */
#define SL_API_STOP_LEN_MAX 256     /* bytes per stop string (the matcher holds this much) */
#define SL_API_JSON_DEPTH_MAX 64    /* nesting refused before parsing (tool schemas nest deep) */
#define SL_API_MAX_TOKENS_MAX 1048576  /* max_tokens above this is refused as nonsense */
#define SL_API_PENALTY_LAST_N_MAX 1048576
#define SL_API_N_MAX 16             /* `n`: choices per request at most */
#define SL_API_TOOLS_MAX 128        /* OpenAI's limit on `tools` */
#define SL_API_TEMPLATE_KWARGS_BYTES_MAX 65536  /* chat_template_kwargs, compact JSON */

typedef enum {
    SL_API_ENDPOINT_CHAT = 0,       /* /v1/chat/completions */
    SL_API_ENDPOINT_COMPLETIONS,    /* /v1/completions */
} sl_api_endpoint;

/* tool_choice, validated against tools. */
typedef enum {
    SL_API_TOOL_CHOICE_AUTO = 0,    /* the model may call a tool (default when tools are given) */
    SL_API_TOOL_CHOICE_NONE,        /* no call (default without tools); tools still reach the template */
    SL_API_TOOL_CHOICE_REQUIRED,    /* at least one call, forced by a grammar */
    SL_API_TOOL_CHOICE_NAMED,       /* a call of tool_choice_name, forced by a grammar */
} sl_api_tool_choice;

/* Where <think>...</think> text goes (reasoning_format). */
typedef enum {
    SL_API_REASONING_SERVER = 0,    /* not given: the server's setting */
    SL_API_REASONING_SEPARATE,      /* message.reasoning_content / delta.reasoning_content */
    SL_API_REASONING_INLINE,        /* left in content as the model wrote it */
} sl_api_reasoning_format;

typedef struct {
    sl_api_endpoint endpoint;
    const char *model;              /* NULL when absent (the server's model is used) */

    /* chat */
    json_t *messages;               /* validated array, each content a string; NULL for completions */
    json_t *tools;                  /* validated non-empty array of function tools, or NULL; for the
                                       template (the legacy `functions` arrive here rewritten) */
    json_t *tool_choice;            /* string or object or NULL (`function_call` rewritten) */
    sl_api_tool_choice tool_choice_mode;
    const char *tool_choice_name;   /* SL_API_TOOL_CHOICE_NAMED: the function's name (borrowed) */
    bool parallel_tool_calls;       /* default true: more than one call may come */
    json_t *chat_template_kwargs;   /* object of extra template variables or NULL (borrowed) */
    sl_api_reasoning_format reasoning_format;

    /* completions: exactly one of the two forms is set */
    const char *prompt;             /* text prompt (may be ""), NULL when token ids are given */
    size_t prompt_len;
    int32_t *prompt_tokens;         /* malloc'd token ids, NULL for a text prompt */
    size_t n_prompt_tokens;

    bool echo;                      /* completions: the prompt leads the text (and its logprobs the
                                       logprobs, when asked for) */
    int64_t max_tokens;             /* -1 = not given (until the context ends); 0 only with echo */
    int64_t min_tokens;             /* 0 = off (vLLM extension: EOS/stop ignored before) */
    int32_t n;                      /* choices, 1..SL_API_N_MAX (default 1) */
    bool stream;
    bool include_usage;             /* stream_options.include_usage */
    bool ignore_eos;                /* vLLM extension */
    bool logprobs;                  /* logprobs asked for (chat: true; completions: >= 0) */
    int32_t top_logprobs;           /* alternatives per token, 0..20 (completions: 0..5) */
    bool has_seed;                  /* seed given; else sampling.seed is 0 and the caller picks one */
    const char *user;               /* NULL when absent */

    int32_t n_stop;
    const char *stop[SL_API_STOP_MAX];       /* borrowed, valid UTF-8, non-empty */
    size_t stop_len[SL_API_STOP_MAX];

    sl_sampling_params sampling;    /* validated with sl_sampling_validate */
    char *grammar;                  /* malloc'd GBNF text (model/grammar/grammar.h), start rule `root`,
                                       that the output must match (response_format or an extension;
                                       never the tool-call grammar), NUL-terminated, known to compile;
                                       NULL = unconstrained; freed by fini */
    char grammar_from[SL_API_PARAM_LEN]; /* the field it came from ("response_format",
                                       "guided_regex", ...), for errors after the parse; "" = none */

    json_t *_root;                  /* owns everything borrowed above */
} sl_api_request;

/* Parses `body` (len bytes, need not be NUL-terminated) for `ep`. n_vocab
 * bounds token ids (prompt tokens, logit_bias keys); pass the model's.
 * On SL_OK *r is filled and must be released with sl_api_request_fini. On
 * failure *r holds nothing (fini is still safe) and err says why. */
sl_status sl_api_request_parse(sl_api_request *r, sl_api_endpoint ep,
                               const char *body, size_t len, int32_t n_vocab,
                               sl_api_error *err);

/* Releases what parse took; safe on a zeroed or failed request. */
void sl_api_request_fini(sl_api_request *r);

/* Parses `body` into a JSON object, refusing nesting deeper than
 * SL_API_JSON_DEPTH_MAX, invalid UTF-8, NUL in strings, duplicate keys,
 * numbers out of double/int64 range and any top level other than an object.
 * Returns a new reference or NULL with err filled (400). Shared by every
 * JSON route (tokenize, detokenize). */
json_t *sl_api_json_parse_body(const char *body, size_t len, sl_api_error *err);

#endif
