/* tests/unit/model/grammar/mask_test.c: sl_grammar_matcher_mask
 * (model/grammar/mask.c, vocab.c) against brute force: for every token,
 * a fresh matcher replays the state's bytes and then the token's. Random
 * walks over several grammars on a small vocabulary with multi-byte
 * characters cut inside tokens, duplicates, an empty and special tokens. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "tests/unit/model/grammar/grammars.h"

static const char *k_tokens[] = {
    "{", "}", "{\"", "\":", " \"", "\"", "true", "tr", "ue", "null", "1", "12", "2.", ".5", "e+", ",", ", ", "[",
    "]", "[]", "\\", "\\u", "00", "e9", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "\xe2\x82\xac", "\xf0\x9f",
    "\x98\x80", "\xf0\x9f\x98\x80", "ab", "abc", "cd", "+", "-", "*", "(", ")", "((", "1+", "!", "\xc3\xa4", "\n",
    "  ", "x", "ab", "a", "b", "c", "z", "0", "9", "5", "e", "E", "f", "n", "\"a", "a\"", "\"}", "}}", "\xc3\xb6!",
    "!\xc3", "\xa4\xc3", "\xa4",
};
#define N_TOK ((int32_t)(sizeof k_tokens / sizeof *k_tokens) + 3)

static sl_grammar_vocab *make_vocab(void)
{
    const char *bytes[N_TOK];
    int32_t lens[N_TOK];
    int32_t n = N_TOK - 3;
    for (int32_t i = 0; i < n; i++) {
        bytes[i] = k_tokens[i];
        lens[i] = (int32_t)strlen(k_tokens[i]);
    }
    bytes[n] = "";          /* empty: never allowed */
    lens[n] = 0;
    bytes[n + 1] = "<eos>"; /* special */
    lens[n + 1] = -1;
    bytes[n + 2] = "{";     /* special with ordinary-looking bytes */
    lens[n + 2] = -1;
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_create(N_TOK, bytes, lens, &v), SL_OK);
    return v;
}

static bool replay_accepts(const sl_grammar *g, const char *prefix, size_t n, const char *tok)
{
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, prefix, n), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, tok, strlen(tok)) == SL_OK;
    sl_grammar_matcher_destroy(m);
    return ok;
}

static void check_grammar(const char *src, unsigned seed)
{
    sl_grammar *g = NULL;
    char err[256];
    cr_assert_eq(sl_grammar_create(src, strlen(src), &g, err, sizeof err), SL_OK, "%s", err);
    sl_grammar_vocab *v = make_vocab();
    uint32_t words = (N_TOK + 31) / 32, allow[8], again[8];
    srand(seed);
    int allowed_seen = 0;
    for (int walk = 0; walk < 25; walk++) {
        sl_grammar_matcher *m = NULL;
        cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
        char prefix[512];
        size_t n = 0;
        for (int step = 0; step < 30; step++) {
            memset(allow, 0xAA, sizeof allow);
            cr_assert_eq(sl_grammar_matcher_mask(m, v, allow), SL_OK);
            int32_t pick[N_TOK], n_pick = 0;
            for (int32_t t = 0; t < N_TOK; t++) {
                bool got = (allow[t / 32] >> (t % 32)) & 1;
                bool want = t < N_TOK - 3 && replay_accepts(g, prefix, n, k_tokens[t]);
                cr_assert_eq(got, want, "grammar %.20s walk %d step %d '%.*s' token %d '%s'", src, walk, step,
                             (int)n, prefix, t, t < N_TOK - 3 ? k_tokens[t] : "(special)");
                if (got)
                    pick[n_pick++] = t;
            }
            for (uint32_t w = words; w < 8; w++)
                cr_assert_eq(allow[w], 0xAAAAAAAAu);   /* nothing written past the mask */
            cr_assert_eq(sl_grammar_matcher_mask(m, v, again), SL_OK);
            cr_assert_eq(memcmp(allow, again, words * 4), 0, "cached mask differs");
            if (n_pick == 0)
                break;
            allowed_seen += n_pick;
            int32_t t = pick[rand() % n_pick];
            cr_assert_eq(sl_grammar_matcher_accept_token(m, v, t), SL_OK);
            size_t len = strlen(k_tokens[t]);
            if (n + len >= sizeof prefix)
                break;
            memcpy(prefix + n, k_tokens[t], len);
            n += len;
        }
        sl_grammar_matcher_destroy(m);
    }
    cr_expect(allowed_seen > 50, "%d", allowed_seen);   /* the walks went somewhere */
    sl_grammar_vocab_destroy(v);
    sl_grammar_destroy(g);
}

Test(grammar_mask, json_matches_brute_force) { check_grammar(G_JSON, 1); }
Test(grammar_mask, arith_matches_brute_force) { check_grammar(G_ARITH, 2); }
Test(grammar_mask, list_matches_brute_force) { check_grammar(G_LIST, 3); }
Test(grammar_mask, utf8_matches_brute_force) { check_grammar(G_UTF8, 4); }
Test(grammar_mask, string_matches_brute_force) { check_grammar("root ::= \"\\\"\" [^\"]* \"\\\"\" \"!\"?", 5); }
Test(grammar_mask, factored_enum_matches_brute_force)
{
    check_grammar("root ::= (\"ab\" | \"abc\" | \"a\" | \"true\" | \"tr\" | \"12\" | \"1\" | \"ab\" | \"cd\" "
                  "| \"\xc3\xa9\" | \"\xc3\xa4\" | \"\xe2\x82\xac!\" | \"{\\\"\" | \"{\" | \"z\" | [a-c] [0-9])+", 6);
}

Test(grammar_mask, finished_matcher_allows_nothing)
{
    sl_grammar *g = NULL;
    cr_assert_eq(sl_grammar_create("root ::= \"ab\"", 13, &g, NULL, 0), SL_OK);
    sl_grammar_vocab *v = make_vocab();
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "ab", 2), SL_OK);
    uint32_t allow[3] = {1, 1, 1};
    cr_assert_eq(sl_grammar_matcher_mask(m, v, allow), SL_OK);
    for (uint32_t w = 0; w < (N_TOK + 31) / 32; w++)
        cr_expect_eq(allow[w], 0);
    sl_grammar_matcher_destroy(m);
    sl_grammar_vocab_destroy(v);
    sl_grammar_destroy(g);
}

Test(grammar_mask, overflow_is_erange_and_zero)
{
    sl_grammar *g = NULL;
    const char *src = "root ::= s\ns ::= \"a\" s \"b\"? | \"\"";
    cr_assert_eq(sl_grammar_create(src, strlen(src), &g, NULL, 0), SL_OK);
    const char *bytes[] = {"a", "b"};
    int32_t lens[] = {1, 1};
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_create(2, bytes, lens, &v), SL_OK);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    while (sl_grammar_matcher_accept_bytes(m, "a", 1) == SL_OK) {
    }
    uint32_t allow[1] = {~0u};
    cr_expect_eq(sl_grammar_matcher_mask(m, v, allow), SL_ERANGE);
    cr_expect_eq(allow[0], 0);
    sl_grammar_matcher_destroy(m);
    sl_grammar_vocab_destroy(v);
    sl_grammar_destroy(g);
}

Test(grammar_mask, vocab_errors)
{
    sl_grammar_vocab *v = (sl_grammar_vocab *)1;
    cr_expect_eq(sl_grammar_vocab_create(-1, NULL, NULL, &v), SL_EINVAL);
    cr_expect_null(v);
    const char *bytes[] = {NULL};
    int32_t lens[] = {3};
    cr_expect_eq(sl_grammar_vocab_create(1, bytes, lens, &v), SL_EINVAL);
    cr_expect_eq(sl_grammar_vocab_create(0, NULL, NULL, &v), SL_OK);
    cr_expect_eq(sl_grammar_vocab_size(v), 0);
    sl_grammar_vocab_destroy(v);
}

/* A few thousand random tokens over an alphabet that stresses the walk's
 * self-loop shortcut: string characters, quotes and backslashes, whole and
 * cut multi-byte characters, bytes that are never valid UTF-8. */
Test(grammar_mask, self_loop_shortcut_matches_brute_force)
{
    static const char *const alphabet[] = {"a", "b", "Z", " ", "0", "\"", "\\", "\x7f", "\x01", "\n", "{",
                                           "\xc3\xa9", "\xe4\xb8\x96", "\xf0\x9f\x98\x80", "\xc3", "\xa9",
                                           "\xe4", "\xb8", "\xff", "\xed\xa0\x80", "\xf4\x8f\xbf\xbf", "u", "n"};
    enum { N = 3000 };
    static char store[N][24];
    const char *bytes[N];
    int32_t lens[N];
    srand(7);
    for (int i = 0; i < N; i++) {
        int n = 0, parts = 1 + rand() % 5;
        for (int p = 0; p < parts; p++) {
            /* mostly plain characters, so subtrees of pure string text exist */
            const char *a = alphabet[rand() % 4 ? rand() % 5 : rand() % (int)(sizeof alphabet / sizeof *alphabet)];
            size_t l = strlen(a);
            if (n + l < sizeof store[i]) {
                memcpy(store[i] + n, a, l);
                n += (int)l;
            }
        }
        bytes[i] = store[i];
        lens[i] = n;
    }
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_create(N, bytes, lens, &v), SL_OK);
    const char *grammars[] = {
        G_JSON,
        "root ::= \"\\\"\" [^\"\\\\]* \"\\\"\"",
        "root ::= \"\\\"\" [^\"\\\\\\u00e9]* \"\\\"\"",   /* one multi-byte character excluded */
        "root ::= \"\\\"\" [a-z ]* \"\\\"\"",
        "root ::= \"\\\"\" .{0,5} \"\\\"\"",
        "root ::= \"\\\"\" [a-z ]{0,7} \"\\\"\"",
        "root ::= \"\\\"\" [^\"]{2,6} \"\\\"\" | \"\\\"\" [a-b]{1,3} \"x\"",
    };
    const char *prefixes[] = {"{\"", "{\"k\": \"ab", "\"", "\"ab\xc3", "\"\xe4\xb8", "\"a"};
    static uint32_t allow[(N + 31) / 32];
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        sl_grammar *g = NULL;
        cr_assert_eq(sl_grammar_create(grammars[gi], strlen(grammars[gi]), &g, NULL, 0), SL_OK);
        for (size_t pi = 0; pi < sizeof prefixes / sizeof *prefixes; pi++) {
            sl_grammar_matcher *m = NULL;
            cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
            const char *pre = prefixes[pi];
            if (sl_grammar_matcher_accept_bytes(m, pre, strlen(pre)) != SL_OK) {
                sl_grammar_matcher_destroy(m);
                continue;
            }
            for (int round = 0; round < 2; round++) {   /* fresh walks, then m's cached mask */
                sl_grammar_matcher *w = NULL;
                cr_assert_eq(sl_grammar_matcher_create(g, &w), SL_OK);
                cr_assert_eq(sl_grammar_matcher_accept_bytes(w, pre, strlen(pre)), SL_OK);
                cr_assert_eq(sl_grammar_matcher_mask(round ? m : w, v, allow), SL_OK);
                if (round == 0)
                    cr_assert_eq(sl_grammar_matcher_mask(m, v, allow), SL_OK);
                for (int32_t t = 0; t < N; t++) {
                    bool got = (allow[t / 32] >> (t % 32)) & 1;
                    bool want = lens[t] > 0 && replay_accepts(g, pre, strlen(pre), store[t]);
                    cr_assert_eq(got, want, "grammar %zu prefix %zu round %d token %d", gi, pi, round, t);
                }
                sl_grammar_matcher_destroy(w);
            }
            sl_grammar_matcher_destroy(m);
        }
        sl_grammar_destroy(g);
    }
    sl_grammar_vocab_destroy(v);
}
