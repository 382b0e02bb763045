/* tests/unit/model/test_vocab.c: see test_vocab.h. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "model/gguf.h"
#include "tests/unit/model/test_vocab.h"

sl_tokenizer *sl_test_open_vocab(const char *name)
{
    char path[1024], err[SL_ERR_LEN];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", SL_TESTDATA_DIR, name);
    sl_gguf *g;
    if (sl_gguf_open(path, &g, err) < 0)
        return NULL;
    sl_tokenizer *t = NULL;
    cr_assert_eq(sl_tokenizer_create(g, &t, err), SL_OK, "%s", err);
    sl_gguf_close(g);
    return t;
}
