/* model/grammar/vocab_tokenizer.c: a tokenizer's pieces as a grammar
 * vocabulary. Runs once per model in the worker. It reads the tokenizer's
 * private piece table (the bytes decoding emits: SPM's U+2581 already a
 * space, <0xNN> already the byte, byte-level BPE already raw bytes), which
 * is why it lives beside the tokenizer's files' layout header rather than
 * behind the public decode API, whose UTF-8 holding would hide a token's
 * own bytes. */
#include <stdlib.h>

#include "model/grammar/grammar_internal.h"
#include "model/tokenizer.h"
#include "model/tokenizer_internal.h"

sl_status sl_grammar_vocab_from_tokenizer(const struct sl_tokenizer *t, sl_grammar_vocab **out)
{
    *out = NULL;
    int32_t n = t->n_vocab;
    const char **bytes = malloc((n ? (size_t)n : 1) * sizeof *bytes);
    int32_t *lens = malloc((n ? (size_t)n : 1) * sizeof *lens);
    if (bytes == NULL || lens == NULL) {
        free(bytes);
        free(lens);
        return SL_ENOMEM;
    }
    for (int32_t i = 0; i < n; i++) {
        uint8_t a = t->attr[i];
        bytes[i] = t->piece + t->piece_off[i];
        lens[i] = (int32_t)(t->piece_off[i + 1] - t->piece_off[i]);
        if (a == SL_TOKEN_ATTR_CONTROL || a == SL_TOKEN_ATTR_UNKNOWN || a == SL_TOKEN_ATTR_UNUSED ||
            sl_tokenizer_is_eog(t, i))
            lens[i] = -1;
    }
    sl_status rc = sl_grammar_vocab_create(n, bytes, lens, out);
    free(bytes);
    free(lens);
    return rc;
}
