/* tests/unit/model/grammar/matcher_test.c: the matcher of grammar.h
 * (model/grammar/matcher.c): accept/reject on real grammars, UTF-8 split
 * across calls, accepting/can_continue, the ambiguity bound and the
 * unchanged state after a refusal. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "tests/unit/model/grammar/grammars.h"

static sl_grammar *compile(const char *src)
{
    sl_grammar *g = NULL;
    char err[256] = "";
    cr_assert_eq(sl_grammar_create(src, strlen(src), &g, err, sizeof err), SL_OK, "%s", err);
    return g;
}

static bool full_match(const sl_grammar *g, const char *s)
{
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, s, strlen(s)) == SL_OK && sl_grammar_matcher_accepting(m);
    sl_grammar_matcher_destroy(m);
    return ok;
}

/* Prefix of the language (accepted, maybe not complete). */
static bool prefix_ok(const sl_grammar *g, const char *s)
{
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, s, strlen(s)) == SL_OK;
    sl_grammar_matcher_destroy(m);
    return ok;
}

Test(grammar_matcher, arithmetic)
{
    sl_grammar *g = compile(G_ARITH);
    const char *yes[] = {"1", "12+3", "(1+2)*3", "-(4/2)--3", "((((7))))", "1*2*3+4/5"};
    const char *no[] = {"", "+", "1+", "(1", "1)", "1++2", "a"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        cr_expect(full_match(g, yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        cr_expect(!full_match(g, no[i]), "%s", no[i]);
    cr_expect(prefix_ok(g, "(1+"));
    cr_expect(!prefix_ok(g, "(1+)"));
    sl_grammar_destroy(g);
}

Test(grammar_matcher, json)
{
    sl_grammar *g = compile(G_JSON);
    const char *yes[] = {"{}", "{\"a\": 1}", "{\"a\": [1, 2.5e3, -0.1, true, null, {\"b\": \"x\\n\\u00e9\"}]}",
                         "{\"k\": \"h\xc3\xa9llo \xe4\xb8\x96\xf0\x9f\x98\x80\"}", "{ \"a\" : {\"b\":{}} }\n  "};
    const char *no[] = {"", "[]", "{\"a\"}", "{\"a\": 01}", "{\"a\": \"\x01\"}", "{\"a\": tru}", "{\"a\": \"\\x\"}",
                        "{\"a\": \"\xc3\"}", "{,}"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        cr_expect(full_match(g, yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        cr_expect(!full_match(g, no[i]), "%s", no[i]);
    sl_grammar_destroy(g);
}

Test(grammar_matcher, counted_lists)
{
    sl_grammar *g = compile(G_LIST);
    cr_expect(full_match(g, "[ab,cd]"));
    cr_expect(full_match(g, "[abcd,ef,gh,ij]"));
    cr_expect(!full_match(g, "[ab]"));
    cr_expect(!full_match(g, "[ab,cd,ef,gh,ij]"));
    cr_expect(!full_match(g, "[a,cd]"));
    cr_expect(!full_match(g, "[abcde,cd]"));
    sl_grammar_destroy(g);
}

Test(grammar_matcher, utf8_split_across_calls)
{
    sl_grammar *g = compile(G_UTF8);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    const char *s = "\xf0\x9f\x98\x80\xe2\x82\xac!";   /* 😀€! */
    for (size_t i = 0; i < strlen(s); i++) {
        cr_assert_eq(sl_grammar_matcher_accept_bytes(m, s + i, 1), SL_OK, "byte %zu", i);
        cr_expect_eq(sl_grammar_matcher_accepting(m), i == strlen(s) - 1, "byte %zu", i);
    }
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "\xc3\xa9", 2), SL_OK);   /* é: not in a-z */
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "q", 1), SL_EINVAL);
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "\xc3", 1), SL_OK);      /* half a character */
    cr_expect(!sl_grammar_matcher_accepting(m));
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "\x41", 1), SL_EINVAL);   /* not a continuation */
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "\xbc", 1), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    sl_grammar_matcher_destroy(m);
    cr_expect(!full_match(g, "\xc3\xa5!"));   /* å */
    cr_expect(full_match(g, "\xc3\xa4\xc3\xb6" "a!"));
    sl_grammar_destroy(g);
}

Test(grammar_matcher, accepting_and_can_continue)
{
    sl_grammar *g = compile("root ::= \"a\" \"b\"?");
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_expect(!sl_grammar_matcher_accepting(m));
    cr_expect(sl_grammar_matcher_can_continue(m));
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "a", 1), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    cr_expect(sl_grammar_matcher_can_continue(m));
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "b", 1), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    cr_expect(!sl_grammar_matcher_can_continue(m));
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "b", 1), SL_EINVAL);
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "", 0), SL_OK);
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);

    g = compile("root ::= \"\"");
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    cr_expect(!sl_grammar_matcher_can_continue(m));
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
}

Test(grammar_matcher, rejected_accept_leaves_state)
{
    sl_grammar *g = compile(G_JSON);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "{\"a\": ", 6), SL_OK);
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "12x", 3), SL_EINVAL);   /* the first two would pass */
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "}", 1), SL_EINVAL);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "[1]}", 4), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
}

Test(grammar_matcher, ambiguity_bound_is_erange)
{
    /* After n a's the parse may be inside any depth 1..n: n + 1 stacks. */
    sl_grammar *g = compile("root ::= s\ns ::= \"a\" s \"b\"? | \"\"");
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    sl_status rc = SL_OK;
    int n = 0;
    for (; n < 5000 && rc == SL_OK; n++)
        rc = sl_grammar_matcher_accept_bytes(m, "a", 1);
    cr_expect_eq(rc, SL_ERANGE);
    cr_expect(n > 500 && n < 2000, "%d", n);
    cr_expect(sl_grammar_matcher_accepting(m));   /* unchanged: still after n - 1 a's */
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "bb", 2), SL_OK);
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
}

Test(grammar_matcher, deep_nesting_costs_no_c_stack)
{
    sl_grammar *g = compile(G_JSON);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "{\"a\":", 5), SL_OK);
    for (int i = 0; i < 20000; i++)
        cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "[", 1), SL_OK, "%d", i);
    for (int i = 0; i < 20000; i++)
        cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "]", 1), SL_OK, "%d", i);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "}", 1), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
}

Test(grammar_matcher, long_run_compacts)
{
    /* Every nesting level is a new set: 700k of them pass the compaction
     * threshold (about 131k sets) several times; each keeps only the
     * current stacks. */
    sl_grammar *g = compile("root ::= a\na ::= \"[\" a? \"]\" \"x\"?");
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    for (int i = 0; i < 700000; i++)
        cr_assert_eq(sl_grammar_matcher_accept_bytes(m, "[", 1), SL_OK, "%d", i);
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "x", 1), SL_EINVAL);
    for (int i = 0; i < 700000; i++)
        cr_assert_eq(sl_grammar_matcher_accept_bytes(m, i % 2 ? "]x" : "]", i % 2 ? 2 : 1), SL_OK, "%d", i);
    cr_expect(sl_grammar_matcher_accepting(m));
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "]", 1), SL_EINVAL);
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
}

Test(grammar_matcher, tokens)
{
    const char *bytes[] = {"{", "\"a\"", ":", " 1", "}", "", "<eos>"};
    int32_t lens[] = {1, 3, 1, 2, 1, 0, -1};
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_create(7, bytes, lens, &v), SL_OK);
    cr_expect_eq(sl_grammar_vocab_size(v), 7);
    int32_t len;
    const char *b = sl_grammar_vocab_token(v, 1, &len);
    cr_expect(len == 3 && memcmp(b, "\"a\"", 3) == 0);
    cr_expect_null(sl_grammar_vocab_token(v, 7, &len));
    cr_expect_eq(len, -1);
    sl_grammar_vocab_token(v, 6, &len);
    cr_expect_eq(len, -1);
    sl_grammar *g = compile(G_JSON);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    for (int32_t t = 0; t < 5; t++)
        cr_assert_eq(sl_grammar_matcher_accept_token(m, v, t), SL_OK, "%d", t);
    cr_expect(sl_grammar_matcher_accepting(m));
    cr_expect_eq(sl_grammar_matcher_accept_token(m, v, 5), SL_EINVAL);
    cr_expect_eq(sl_grammar_matcher_accept_token(m, v, 6), SL_EINVAL);
    cr_expect_eq(sl_grammar_matcher_accept_token(m, v, 7), SL_EINVAL);
    cr_expect_eq(sl_grammar_matcher_accept_token(m, v, -1), SL_EINVAL);
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
    sl_grammar_vocab_destroy(v);
    sl_grammar_vocab_destroy(NULL);
    sl_grammar_destroy(NULL);
    sl_grammar_matcher_destroy(NULL);
}

/* "w0" | "w1" | ... : the words of a big enum, as JSON Schema gives one. */
static char *enum_grammar(int n, const char *prefix)
{
    size_t cap = (size_t)n * 32 + 64, k = 0;
    char *s = malloc(cap);
    k += (size_t)snprintf(s + k, cap - k, "root ::= %s(", prefix);
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(s + k, cap - k, "%s\"\\\"v%d%c\\\"\"", i ? " | " : "", i * 7919 % 100000, 'a' + i % 26);
    k += (size_t)snprintf(s + k, cap - k, ")\n");
    return s;
}

Test(grammar_matcher, big_enum_is_left_factored)
{
    /* unfactored, 3000 alternatives would start 3000 stacks (SL_ERANGE) */
    char *src = enum_grammar(3000, "");
    sl_grammar *g = compile(src);
    char w[64];
    for (int i = 0; i < 3000; i += 37) {
        snprintf(w, sizeof w, "\"v%d%c\"", i * 7919 % 100000, 'a' + i % 26);
        cr_expect(full_match(g, w), "%s", w);
        w[strlen(w) - 2] = 0;
        cr_expect(!full_match(g, w), "%s", w);
    }
    cr_expect(!full_match(g, "\"v1a\""));
    cr_expect(!full_match(g, "\"\""));
    sl_grammar_destroy(g);
    free(src);
    /* past the rule limit the rest stays unfactored: still correct when
     * the stacks fit */
    src = enum_grammar(900, "[a-c] \"=\" ");
    g = compile(src);
    cr_expect(full_match(g, "b=\"v7919ba\"") == false);
    snprintf(w, sizeof w, "a=\"v%d%c\"", 5 * 7919 % 100000, 'a' + 5);
    cr_expect(full_match(g, w), "%s", w);
    sl_grammar_destroy(g);
    free(src);
}
