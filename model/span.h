/* model/span.h: a half-open byte range [start, end) of a text.
 * Where:     the chat-template renderer reports the untrusted bytes of its
 *            output as a sorted list of spans; the tokenizer reads that list
 *            and recognises special tokens only outside it.
 * Ownership: plain value type; lists of spans belong to whoever built them. */
#ifndef SL_SPAN_H
#define SL_SPAN_H

#include <stddef.h>

typedef struct {
    size_t start; /* first byte inside the range */
    size_t end;   /* one past the last byte; end > start in every list we build */
} sl_span;

#endif
