/* tools/loadgen/event.h: reads the few fields the load generator needs out
 * of one streamed OpenAI chunk, checking that the whole event is valid JSON.
 * Where:     the load generator's event loops, once per SSE event.
 * Who:       any thread; no state.
 * Why not jansson: building a tree per event costs a few microseconds, i.e.
 *            most of the generator's CPU at 100k events/s; this scanner
 *            validates the syntax and keeps only what it is asked for,
 *            without allocating.
 * Errors:    SL_OK, or SL_EFORMAT when the event is not one JSON object
 *            (nesting over 64 levels counts as malformed). */
#ifndef LG_EVENT_H
#define LG_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "shared/status.h"

typedef struct {
    int error;                   /* the object has an "error" member */
    int usage;                   /* "usage" is an object (not null) */
    int64_t completion_tokens;   /* usage.completion_tokens, -1 if absent */
    int64_t prompt_tokens;       /* usage.prompt_tokens, -1 if absent */
    int content;                 /* choices[0].delta.content (chat) or choices[0].text is a non-empty string */
} lg_event;

/* Parses n bytes of one event. chat: look for delta.content, else text.
 * OUT ev: the fields above; all zero (counts -1) on failure. */
sl_status lg_event_parse(const char *p, size_t n, int chat, lg_event *ev);

#endif
