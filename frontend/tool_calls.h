/* frontend/tool_calls.h: tool calls in generated text, and the grammar that
 * forces one.
 * Where:     front ends: the format is picked once from the chat template at
 *            start; a parser runs per chat request that has tools (tool_choice
 *            not "none"), fed the text after the stop strings; the grammar is
 *            built at admission for tool_choice "required" or a named tool.
 * Formats:   HERMES  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>,
 *                    one block per call (Hermes 2/3, Qwen2.5, Qwen3);
 *            LLAMA3  {"name": N, "parameters": {...}} after an optional
 *                    <|python_tag|>, calls separated by ';' or whitespace;
 *                    only as the whole answer (Llama 3.1-3.3);
 *            MISTRAL [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] or
 *                    [TOOL_CALLS]N[ARGS]{...} (newer files); a bare array
 *                    at the start of the answer counts too: a grammar
 *                    cannot make the control token, so a forced call
 *                    starts with the bracket. (The server shows these
 *                    markers to the parser as text; stream.c.)
 * Rule:      a call is reported only if its JSON parses, names one of the
 *            request's tools and has an object of arguments; anything else
 *            stays content, byte for byte. Nothing is ever invented.
 * Streaming: the parser is fed pieces and reports content as soon as it
 *            cannot start a call; text that may begin a call is held until it
 *            is a call or proven not to be one. Feeding the same text in any
 *            split gives the same events, concatenated (a whole answer is one
 *            feed and is parsed by the very same code).
 * Ownership: the parser copies the tool names; events borrow the parser's
 *            memory until the callback returns.
 * Errors:    SL_OK; SL_ENOMEM; SL_EINVAL (the grammar: a parameters schema the
 *            compiler refuses, with err naming the field). */
#ifndef SL_FRONTEND_TOOL_CALLS_H
#define SL_FRONTEND_TOOL_CALLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/api_error.h"
#include "shared/status.h"

typedef enum {
    SL_TOOL_FORMAT_NONE = 0,    /* the template knows no tools: no parsing */
    SL_TOOL_FORMAT_HERMES,      /* <tool_call> blocks */
    SL_TOOL_FORMAT_LLAMA3,      /* bare JSON / <|python_tag|> */
    SL_TOOL_FORMAT_MISTRAL,     /* [TOOL_CALLS] */
} sl_tool_format;

#define SL_TOOL_CALL_ID_LEN 30  /* "call_" + 24 random characters + NUL */

/* The format a chat template's source (len bytes) asks for: its markers
 * (<tool_call>, <|python_tag|> or an "ipython" role, [TOOL_CALLS]); without
 * one, HERMES if the template reads `tools`, else NONE. */
sl_tool_format sl_tool_format_detect(const char *src, size_t len);

/* "hermes", "llama3", "mistral", "none". */
const char *sl_tool_format_name(sl_tool_format f);

/* ---- parser ---- */

typedef enum {
    SL_TOOL_EVENT_CONTENT = 0,  /* text outside calls */
    SL_TOOL_EVENT_CALL,         /* one whole call */
} sl_tool_event_kind;

typedef struct {
    sl_tool_event_kind kind;
    const char *text;           /* CONTENT: the bytes (not NUL-terminated) */
    size_t len;
    int32_t index;              /* CALL: 0, 1, ... in the answer */
    const char *id;             /* CALL: "call_<24 random [A-Za-z0-9]>" */
    const char *name;           /* CALL: a tool of the request */
    const char *arguments;      /* CALL: the arguments object as compact JSON */
} sl_tool_event;

/* Receives each event; returns SL_OK or an error that stops the feed. */
typedef sl_status (*sl_tool_on_event)(void *ctx, const sl_tool_event *ev);

typedef struct sl_tool_parser sl_tool_parser;   /* opaque */

/* A parser for `f` (not NONE) and the request's tools (an array of
 * {"type":"function","function":{"name":...}}; entries without a name are
 * skipped). *out NULL on failure. SL_OK, SL_EINVAL (f is NONE), SL_ENOMEM. */
sl_status sl_tool_parser_create(sl_tool_format f, const json_t *tools, sl_tool_parser **out);

/* Frees it; NULL is a no-op. */
void sl_tool_parser_destroy(sl_tool_parser *p);

/* Feeds n bytes; `final` says the answer ends here (what is held is decided
 * now). Calls on_event for each event in text order; content is reported
 * without trailing whitespace until more content follows it (so whitespace
 * between calls does not become a content delta), and that whitespace is
 * reported at the end only when the answer has other content. Returns SL_OK,
 * SL_ENOMEM (the parser is then unusable) or the callback's error. After a
 * final feed, further feeds are SL_ESTATE. */
sl_status sl_tool_parser_feed(sl_tool_parser *p, const char *s, size_t n, bool final, sl_tool_on_event on_event,
                              void *ctx);

/* Calls reported so far. */
int32_t sl_tool_parser_n_calls(const sl_tool_parser *p);

/* A whole answer: calls as OpenAI's message.tool_calls (array of
 * {"id","type":"function","function":{"name","arguments"}}), NULL when none;
 * content: the text outside calls (malloc'd, NUL-terminated), NULL when it
 * is empty or whitespace only. Both NULL on failure. SL_OK or SL_ENOMEM. */
sl_status sl_tool_calls_parse(sl_tool_format f, const json_t *tools, const char *text, size_t len,
                              json_t **calls, char **content);

/* ---- forcing a call ---- */

/* The GBNF text (start rule `root`) whose sentences are calls in format f
 * (HERMES when f is NONE): one call of any of `tools` (only_name NULL) or of
 * the tool only_name; several in a row when parallel. Each call's arguments
 * are what its `function.parameters` schema accepts (any object when absent).
 * *out malloc'd, NULL on failure. SL_OK; SL_EINVAL with err filled as a 400
 * naming tools[i].function.parameters and the schema compiler's message,
 * tool_choice when only_name names no tool, or tools when the whole grammar
 * passes the engine's limits (it is compiled once here); SL_ENOMEM (err
 * filled, 500). */
sl_status sl_tool_calls_grammar(sl_tool_format f, const json_t *tools, const char *only_name, bool parallel,
                                char **out, sl_api_error *err);

#endif
