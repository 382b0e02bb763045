/* tests/unit/model/test_vocab.h: the real vocabularies of tests/data as
 * tokenizers, for the tokenizer tests of this folder. */
#ifndef SL_TEST_VOCAB_H
#define SL_TEST_VOCAB_H

#include "model/tokenizer.h"

/* The tokenizer of tests/data/vocab/ggml-vocab-NAME.gguf (expanded into the
 * build's testdata folder); NULL when the file is missing. Fails the calling
 * criterion test when the file opens but its tokenizer does not build. */
sl_tokenizer *sl_test_open_vocab(const char *name);

#endif
