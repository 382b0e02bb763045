/* tests/fuzz/fuzz_grammar.c: libFuzzer target `grammar`: the GBNF engine
 * of model/grammar/grammar.h. Input: the whole of it is grammar text. When
 * it compiles, a matcher walks up to 8 tokens of a tiny fixed vocabulary
 * (ASCII, multi-byte characters cut inside tokens, an empty and a special
 * token), choosing by a hash of the input; at each step the mask must equal
 * brute force (a fresh matcher replaying the walk's bytes, then the token).
 * A failed compile must say why and leave no grammar. The engine bounds its
 * rules, elements, stacks and per-step work, so every input ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"

#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "fuzz_grammar: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                                \
        }                                                                                           \
    } while (0)

static const char *k_tokens[] = {"a", "b", "ab", "{\"", "\"", "}", "0", "12", " ", "\n", "[", "]", ",", "\\",
                                 "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "x\xe2", "-",
                                 "(", ")", "+", "true", "", "<s>"};
#define N_TOK ((int32_t)(sizeof k_tokens / sizeof *k_tokens))
static sl_grammar_vocab *vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    int32_t lens[N_TOK];
    for (int32_t i = 0; i < N_TOK; i++)
        lens[i] = (int32_t)strlen(k_tokens[i]);
    lens[N_TOK - 1] = -1;   /* special */
    CHECK(sl_grammar_vocab_create(N_TOK, k_tokens, lens, &vocab) == SL_OK);
    return 0;
}

static sl_status replay(const sl_grammar *g, const char *prefix, size_t n, int32_t t)
{
    sl_grammar_matcher *m = NULL;
    CHECK(sl_grammar_matcher_create(g, &m) == SL_OK);
    sl_status rc = sl_grammar_matcher_accept_bytes(m, prefix, n);
    CHECK(rc == SL_OK);
    rc = sl_grammar_matcher_accept_bytes(m, k_tokens[t], strlen(k_tokens[t]));
    sl_grammar_matcher_destroy(m);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_grammar *g = (sl_grammar *)1;
    char err[256] = "";
    sl_status rc = sl_grammar_create((const char *)data, size, &g, err, sizeof err);
    if (rc != SL_OK) {
        CHECK(rc < 0 && g == NULL && err[0] != 0);
        return 0;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    sl_grammar_matcher *m = NULL;
    rc = sl_grammar_matcher_create(g, &m);
    if (rc != SL_OK) {
        CHECK(rc == SL_ERANGE && m == NULL);   /* the start alone may pass the ambiguity bound */
        sl_grammar_destroy(g);
        return 0;
    }
    char prefix[256];
    size_t n = 0;
    uint32_t allow[1], again[1];
    for (int step = 0; step < 8; step++) {
        rc = sl_grammar_matcher_mask(m, vocab, allow);
        if (rc != SL_OK) {
            CHECK(rc == SL_ERANGE && allow[0] == 0);
            break;
        }
        CHECK(sl_grammar_matcher_mask(m, vocab, again) == SL_OK && again[0] == allow[0]);
        int32_t pick[N_TOK], n_pick = 0;
        bool erange = false;
        for (int32_t t = 0; t < N_TOK; t++) {
            bool got = (allow[0] >> t) & 1;
            sl_status want = t < N_TOK - 2 ? replay(g, prefix, n, t) : SL_EINVAL;
            erange |= want == SL_ERANGE;
            CHECK(want == SL_ERANGE || got == (want == SL_OK));
            if (got)
                pick[n_pick++] = t;
        }
        CHECK(!sl_grammar_matcher_can_continue(m) ? n_pick == 0 : true);
        if (n_pick == 0 || erange)
            break;
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        int32_t t = pick[(h >> 33) % (uint64_t)n_pick];
        CHECK(sl_grammar_matcher_accept_token(m, vocab, t) == SL_OK);
        memcpy(prefix + n, k_tokens[t], strlen(k_tokens[t]));
        n += strlen(k_tokens[t]);
    }
    (void)sl_grammar_matcher_accepting(m);
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
    return 0;
}
