/* frontend/reasoning.h: splits a reasoning model's <think>...</think> block
 * off its answer.
 * Where:     front ends, per chat request when the model's template writes
 *            <think> and the request's reasoning_format resolves to
 *            "separate"; fed the text after the stop strings, before the tool
 *            call parser (calls inside the block are thoughts, not calls).
 * Rule:      a block counts only at the start of the answer (after optional
 *            whitespace), or from the first byte when the prompt itself ends
 *            inside an open <think> (DeepSeek-R1's and Qwen3's generation
 *            prompts may open it). Its text is reasoning; the whitespace after
 *            </think> is dropped; the rest is content. A block that never
 *            closes is all reasoning. A literal <think> later in the answer
 *            stays content.
 * Streaming: as tool_calls.h: any split of the same text gives the same
 *            events, concatenated; a possible "<think>" or "</think>" is held
 *            until it is decided.
 * Ownership: caller storage (_init/_fini); events borrow its memory until the
 *            callback returns.
 * Errors:    SL_OK; SL_ENOMEM; the callback's error. */
#ifndef SL_FRONTEND_REASONING_H
#define SL_FRONTEND_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/status.h"

typedef enum {
    SL_REASONING_EVENT_CONTENT = 0,   /* answer text */
    SL_REASONING_EVENT_REASONING,     /* text inside the block */
} sl_reasoning_event_kind;

/* Receives each piece of text, in order; returns SL_OK or an error that stops the feed. */
typedef sl_status (*sl_reasoning_on_text)(void *ctx, sl_reasoning_event_kind kind, const char *s, size_t n);

typedef struct {
    int _phase;                 /* private: where in the answer the splitter is */
    char *_buf;                 /* private: the undecided tail */
    size_t _len, _cap;
    bool _finished;
} sl_reasoning;

/* start_open: the prompt ends inside an open <think> (sl_reasoning_prompt_opens). */
void sl_reasoning_init(sl_reasoning *r, bool start_open);

/* Frees the held text; safe on a zeroed struct. */
void sl_reasoning_fini(sl_reasoning *r);

/* Feeds n bytes; final: the answer ends here. Calls on_text for each decided
 * piece. SL_OK, SL_ENOMEM, SL_ESTATE after a final feed, or the callback's error. */
sl_status sl_reasoning_feed(sl_reasoning *r, const char *s, size_t n, bool final, sl_reasoning_on_text on_text,
                            void *ctx);

/* Whether a chat template's source writes a <think> block (Qwen3, DeepSeek-R1). */
bool sl_reasoning_template_thinks(const char *src, size_t len);

/* Whether a rendered prompt ends with <think> (and whitespace): the
 * generation starts inside the block. */
bool sl_reasoning_prompt_opens(const char *text, size_t len);

#endif
