/* tests/unit/model/grammar/vocab_test.c: sl_grammar_vocab_from_tokenizer
 * (model/grammar/vocab_tokenizer.c) on the real vocabularies of
 * tests/data/vocab: a byte-level BPE one (GPT-2) and a SentencePiece one
 * with byte tokens (Phi-3): token bytes are what decoding emits, special
 * tokens are never allowed, and a mask inside a JSON string agrees with
 * brute force on the real tokens. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/grammar/grammar.h"
#include "model/tokenizer.h"
#include "tests/unit/model/grammar/grammars.h"

static sl_tokenizer *open_vocab(const char *name)
{
    char path[1024], err[SL_ERR_LEN];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", SL_TESTDATA_DIR, name);
    sl_gguf *g;
    cr_assert_eq(sl_gguf_open(path, &g, err), SL_OK, "%s: %s", path, err);
    sl_tokenizer *t = NULL;
    cr_assert_eq(sl_tokenizer_create(g, &t, err), SL_OK, "%s", err);
    sl_gguf_close(g);
    return t;
}

static void expect_bytes(const sl_tokenizer *t, const sl_grammar_vocab *v, const char *text, const char *want)
{
    int32_t id = sl_tokenizer_find(t, text, strlen(text));
    cr_assert(id >= 0, "no token '%s'", text);
    int32_t len;
    const char *b = sl_grammar_vocab_token(v, id, &len);
    cr_expect(len == (int32_t)strlen(want) && memcmp(b, want, (size_t)len) == 0, "token '%s'", text);
}

/* Brute force over every token at the state after `prefix`. */
static void check_state(const sl_grammar *g, const sl_grammar_vocab *v, const char *prefix)
{
    int32_t n = sl_grammar_vocab_size(v);
    uint32_t *allow = calloc(((size_t)n + 31) / 32, 4);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, prefix, strlen(prefix)), SL_OK);
    cr_assert_eq(sl_grammar_matcher_mask(m, v, allow), SL_OK);
    int32_t n_allowed = 0;
    for (int32_t t = 0; t < n; t++) {
        sl_grammar_matcher *b = NULL;
        cr_assert_eq(sl_grammar_matcher_create(g, &b), SL_OK);
        cr_assert_eq(sl_grammar_matcher_accept_bytes(b, prefix, strlen(prefix)), SL_OK);
        bool want = sl_grammar_matcher_accept_token(b, v, t) == SL_OK;
        bool got = (allow[t / 32] >> (t % 32)) & 1;
        cr_assert_eq(got, want, "prefix '%s' token %d", prefix, t);
        n_allowed += got;
        sl_grammar_matcher_destroy(b);
    }
    cr_expect(n_allowed > 0);
    sl_grammar_matcher_destroy(m);
    free(allow);
}

static void check_vocab(const char *name)
{
    sl_tokenizer *t = open_vocab(name);
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_from_tokenizer(t, &v), SL_OK);
    cr_expect_eq(sl_grammar_vocab_size(v), sl_tokenizer_n_vocab(t));
    int32_t len;
    if (sl_tokenizer_eos(t) >= 0) {
        sl_grammar_vocab_token(v, sl_tokenizer_eos(t), &len);
        cr_expect(len < 0, "EOS allowed");
    }
    /* the pieces of an encoding concatenate to the text (SPM: after the
     * space it prefixes) */
    const char *text = "Hello world, h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c {\"k\": 1}";
    int32_t ids[64];
    int64_t n = sl_tokenize(t, text, strlen(text), ids, 64);
    cr_assert(n > 0 && n <= 64);
    char joined[256];
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *b = sl_grammar_vocab_token(v, ids[i], &len);
        cr_assert(len > 0 && k + (size_t)len < sizeof joined);
        memcpy(joined + k, b, (size_t)len);
        k += (size_t)len;
    }
    size_t skip = k == strlen(text) + 1 && joined[0] == ' ';
    cr_expect(k - skip == strlen(text) && memcmp(joined + skip, text, strlen(text)) == 0, "%.*s", (int)k, joined);
    if (strcmp(name, "phi-3") == 0)
        expect_bytes(t, v, "<0x41>", "A");
    sl_grammar *g = NULL;
    cr_assert_eq(sl_grammar_create(G_JSON, strlen(G_JSON), &g, NULL, 0), SL_OK);
    check_state(g, v, "{\"k\": \"ab");
    check_state(g, v, "{\"k\": [1, ");
    sl_grammar_destroy(g);
    sl_grammar_vocab_destroy(v);
    sl_tokenizer_destroy(t);
}

Test(grammar_vocab, gpt2_byte_level_bpe) { check_vocab("gpt-2"); }
Test(grammar_vocab, phi3_sentencepiece) { check_vocab("phi-3"); }
