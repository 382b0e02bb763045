/* tests/unit/gpu-worker/constraint_test.c: gpu-worker/constraint.c: the
 * token trie is built at the first constraint only; the mask is the
 * grammar's tokens plus end-of-generation exactly when the text so far is
 * complete; control tokens are never allowed; accept and finished follow the
 * drawn tokens; a bad grammar is refused with "grammar: <reason>"; a
 * text is compiled once while it is in use or recently released. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "gpu-worker/constraint.h"

#define V 8
#define EOG 7
#define CONTROL 6

static const char *const piece[V] = {"a", "b", "ab", "c", "\"", "1", NULL, NULL};
static int calls;

static int32_t token_bytes(void *ctx, int32_t t, const char **bytes)
{
    (void)ctx;
    calls++;
    *bytes = piece[t];
    return piece[t] ? (int32_t)strlen(piece[t]) : -1;
}

static sl_status build_trie(void *ctx, sl_grammar_vocab **out)
{
    const char *bytes[V];
    int32_t lens[V];
    for (int32_t t = 0; t < V; t++)
        lens[t] = token_bytes(ctx, t, &bytes[t]);
    return sl_grammar_vocab_create(V, bytes, lens, out);
}

static sl_status build_wrong_size(void *ctx, sl_grammar_vocab **out)
{
    (void)ctx;
    const char *bytes[2] = {"a", "b"};
    int32_t lens[2] = {1, 1};
    return sl_grammar_vocab_create(2, bytes, lens, out);
}

static bool bit(const uint32_t *m, int32_t t) { return m[t / 32] >> (t % 32) & 1u; }

static sl_constraint_vocab *vocab(void)
{
    static const int32_t eog[1] = {EOG};
    sl_constraint_vocab *v;
    calls = 0;
    cr_assert_eq(sl_constraint_vocab_create(V, eog, 1, build_trie, NULL, &v), SL_OK);
    cr_assert_eq(calls, 0, "nothing is built before the first constraint");
    return v;
}

Test(constraint, mask_accept_and_finish)
{
    sl_constraint_vocab *v = vocab();
    static const char g[] = "root ::= \"a\" \"b\"?";
    sl_constraint *c;
    char err[128];
    cr_assert_eq(sl_constraint_create(v, g, strlen(g), &c, err, sizeof err), SL_OK, "%s", err);
    cr_assert_eq(calls, V, "every token's bytes asked once");
    const uint32_t *m = sl_constraint_mask(c, true);
    cr_assert(bit(m, 0) && bit(m, 2), "a and ab");
    cr_assert(!bit(m, 1) && !bit(m, 3) && !bit(m, CONTROL) && !bit(m, EOG), "nothing else, no EOS yet");
    cr_assert_eq(sl_constraint_accept(c, EOG), SL_EINVAL, "EOS before the text is complete");
    cr_assert_eq(sl_constraint_accept(c, 1), SL_EINVAL, "b cannot start");
    cr_assert_eq(sl_constraint_accept(c, 0), SL_OK);
    cr_assert(!sl_constraint_finished(c), "b may still follow");
    m = sl_constraint_mask(c, true);
    cr_assert(bit(m, 1) && bit(m, EOG) && !bit(m, 0));
    m = sl_constraint_mask(c, false);
    cr_assert(bit(m, 1) && !bit(m, EOG), "no EOS when the caller ignores it");
    cr_assert_eq(sl_constraint_accept(c, EOG), SL_OK, "EOS once complete");
    cr_assert_eq(sl_constraint_accept(c, 1), SL_OK);
    cr_assert(sl_constraint_finished(c));
    m = sl_constraint_mask(c, true);
    for (int32_t t = 0; t < V; t++)
        cr_assert_eq(bit(m, t), t == EOG, "finished: only EOS (token %d)", t);
    cr_assert_eq(sl_constraint_vocab_n_created(v), 1);
    sl_constraint_destroy(c);

    /* a second constraint reuses the trie */
    cr_assert_eq(sl_constraint_create(v, "root ::= [0-9]", 14, &c, err, sizeof err), SL_OK, "%s", err);
    cr_assert_eq(calls, V);
    m = sl_constraint_mask(c, true);
    cr_assert(bit(m, 5) && !bit(m, 0));
    sl_constraint_destroy(c);
    sl_constraint_vocab_destroy(v);
}

Test(constraint, empty_mask_names_the_reason)
{
    sl_constraint_vocab *v = vocab();
    sl_constraint *c;
    char err[128];
    cr_assert_eq(sl_constraint_create(v, "root ::= \"z\"", 12, &c, err, sizeof err), SL_OK, "%s", err);
    const uint32_t *m = sl_constraint_mask(c, true);
    cr_assert_eq(m[0], 0u, "no token spells z");
    cr_assert_str_eq(sl_constraint_error(c), "grammar: no allowed token");
    sl_constraint_destroy(c);
    sl_constraint_vocab_destroy(v);
}

Test(constraint, bad_grammar_is_refused_with_the_reason)
{
    sl_constraint_vocab *v = vocab();
    static const char *const bad[] = {"root ::= \"a", "root ::= nowhere", "", "root ::= [", "x ::= \"a\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_constraint *c = (sl_constraint *)1;
        char err[128];
        cr_assert_lt(sl_constraint_create(v, bad[i], strlen(bad[i]), &c, err, sizeof err), 0, "%s", bad[i]);
        cr_assert_null(c);
        cr_assert(strncmp(err, "grammar: ", 9) == 0 && strlen(err) > 9, "%s -> %s", bad[i], err);
    }
    cr_assert_eq(sl_constraint_vocab_n_created(v), 0);
    sl_constraint_vocab_destroy(v);
}

Test(constraint, vocab_create_refuses_bad_arguments)
{
    sl_constraint_vocab *v = (sl_constraint_vocab *)1;
    cr_assert_eq(sl_constraint_vocab_create(0, NULL, 0, build_trie, NULL, &v), SL_EINVAL);
    cr_assert_null(v);
    cr_assert_eq(sl_constraint_vocab_create(4, NULL, 0, NULL, NULL, &v), SL_EINVAL);
    cr_assert_eq(sl_constraint_vocab_create(4, NULL, 2, build_trie, NULL, &v), SL_EINVAL);
    sl_constraint_vocab_destroy(NULL);
    sl_constraint_destroy(NULL);
}

Test(constraint, a_trie_of_another_size_is_refused)
{
    sl_constraint_vocab *v;
    cr_assert_eq(sl_constraint_vocab_create(V, NULL, 0, build_wrong_size, NULL, &v), SL_OK);
    sl_constraint *c = (sl_constraint *)1;
    char err[128];
    cr_assert_eq(sl_constraint_create(v, "root ::= \"a\"", 12, &c, err, sizeof err), SL_EINVAL);
    cr_assert_null(c);
    cr_assert(strncmp(err, "grammar: ", 9) == 0, "%s", err);
    sl_constraint_vocab_destroy(v);
    sl_constraint_vocab_destroy(NULL);
    sl_constraint_destroy(NULL);
}

Test(constraint, batch_masks_equal_the_masks_one_by_one)
{
    sl_constraint_vocab *v = vocab();
    static const char *const g[4] = {"root ::= \"a\" \"b\"?", "root ::= [abc]+ \"1\"", "root ::= \"\\\"\" [ab]* \"\\\"\"",
                                     "root ::= \"c\" | \"ab\""};
    enum { N = 24 };
    sl_constraint *cs[N], *one[N];
    bool eog[N];
    const uint32_t *out[N];
    char err[128];
    for (int i = 0; i < N; i++) {
        const char *t = g[i % 4];
        cr_assert_eq(sl_constraint_create(v, t, strlen(t), &cs[i], err, sizeof err), SL_OK, "%s", err);
        cr_assert_eq(sl_constraint_create(v, t, strlen(t), &one[i], err, sizeof err), SL_OK, "%s", err);
        eog[i] = i % 3 != 0;
    }
    for (int step = 0; step < 3; step++) {
        sl_constraint_mask_batch(v, cs, eog, N, out);
        for (int i = 0; i < N; i++) {
            const uint32_t *m = sl_constraint_mask(one[i], eog[i]);
            cr_assert_eq(out[i][0], m[0], "constraint %d step %d: batch %#x, alone %#x", i, step, out[i][0], m[0]);
            int32_t pick = -1;   /* advance both by the lowest allowed text token */
            for (int32_t t = 0; t < V && pick < 0; t++)
                if (t != EOG && bit(m, t))
                    pick = t;
            if (pick >= 0) {
                cr_assert_eq(sl_constraint_accept(cs[i], pick), SL_OK);
                cr_assert_eq(sl_constraint_accept(one[i], pick), SL_OK);
            }
        }
    }
    for (int i = 0; i < N; i++) {
        sl_constraint_destroy(cs[i]);
        sl_constraint_destroy(one[i]);
    }
    sl_constraint_vocab_destroy(v);
}

/* One text is compiled once while constraints use it or it is among the
 * most recently released; each constraint keeps its own state; a bad text
 * is never kept; more idle texts than the vocabulary keeps are compiled
 * again. */
Test(constraint, a_text_is_compiled_once_and_each_constraint_keeps_its_state)
{
    sl_constraint_vocab *v = vocab();
    static const char g[] = "root ::= \"a\" \"b\"? \"c\"";
    char err[128];
    sl_constraint *c1, *c2, *c3;
    cr_assert_eq(sl_constraint_create(v, g, strlen(g), &c1, err, sizeof err), SL_OK, "%s", err);
    cr_assert_eq(sl_constraint_create(v, g, strlen(g), &c2, err, sizeof err), SL_OK, "%s", err);
    cr_assert_eq(sl_constraint_vocab_n_compiled(v), 1);
    cr_assert_eq(sl_constraint_accept(c1, 0), SL_OK);   /* c1 after "a", c2 at the start */
    const uint32_t *m2 = sl_constraint_mask(c2, true);
    cr_assert(bit(m2, 0) && !bit(m2, 1) && !bit(m2, 3));
    const uint32_t *m1 = sl_constraint_mask(c1, true);
    cr_assert(!bit(m1, 0) && bit(m1, 1) && bit(m1, 3) && !bit(m1, EOG));
    sl_constraint_destroy(c1);
    sl_constraint_destroy(c2);
    cr_assert_eq(sl_constraint_create(v, g, strlen(g), &c3, err, sizeof err), SL_OK, "%s", err);
    cr_assert_eq(sl_constraint_vocab_n_compiled(v), 1, "an idle text is kept");
    cr_assert(bit(sl_constraint_mask(c3, true), 0));
    sl_constraint_destroy(c3);

    static const char bad[] = "root ::= undefined";
    cr_assert_eq(sl_constraint_create(v, bad, strlen(bad), &c1, err, sizeof err), SL_EINVAL);
    cr_assert_eq(sl_constraint_create(v, bad, strlen(bad), &c1, err, sizeof err), SL_EINVAL);
    cr_assert_eq(sl_constraint_vocab_n_compiled(v), 1, "a bad text is not kept");

    /* twenty other texts, each released at once: the first one's turn comes
     * to be forgotten */
    for (int i = 0; i < 20; i++) {
        char t[64];
        snprintf(t, sizeof t, "root ::= \"a\"{%d}", i + 1);
        cr_assert_eq(sl_constraint_create(v, t, strlen(t), &c1, err, sizeof err), SL_OK, "%s", err);
        sl_constraint_destroy(c1);
    }
    cr_assert_eq(sl_constraint_vocab_n_compiled(v), 21);
    cr_assert_eq(sl_constraint_create(v, g, strlen(g), &c1, err, sizeof err), SL_OK, "%s", err);
    cr_assert_eq(sl_constraint_vocab_n_compiled(v), 22, "the oldest idle text was forgotten");
    sl_constraint_destroy(c1);
    sl_constraint_vocab_destroy(v);
}
