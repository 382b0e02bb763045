/* tests/unit/model/grammar/mask_share_test.c: masks shared between the
 * matchers of one grammar (sl_grammar_share_masks, mask_share.c). Walks
 * driven by one random pick sequence run on a sharing grammar (a fresh
 * matcher per walk, as each request gets) and on the same text compiled
 * without sharing: every mask must be the same bits, and later walks must
 * get copies (cross masks). Also: a cap too small to hold a mask shares
 * nothing and changes nothing; a second vocabulary is never served the
 * first one's masks; matchers of one grammar masking on several threads
 * at once agree with the reference. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"

enum { N_TOK = 900, TOK_BYTES = 24 };

static char g_store[2][N_TOK][TOK_BYTES];
static const char *g_bytes[2][N_TOK];
static int32_t g_lens[2][N_TOK];

/* Vocabulary k: JSON pieces first, then random tokens of letters, spaces,
 * quotes, digits and separators; the last token is special. */
static sl_grammar_vocab *make_vocab(int k, unsigned seed)
{
    static const char *const fixed[] = {"{", "}", "\"", ":", ",", "[", "]", " ", "\"name\"", "\"age\"", "\"tags\"",
                                        "{\"", "\":", "\",", "1", "12", "-", "true", "null"};
    static const char alphabet[] = "abcdefg xyz\"0123456789,:{}[]";
    srand(seed);
    for (int i = 0; i < N_TOK; i++) {
        int n = 0;
        if (i < (int)(sizeof fixed / sizeof *fixed)) {
            n = (int)strlen(fixed[i]);
            memcpy(g_store[k][i], fixed[i], (size_t)n);
        } else {
            int len = 1 + rand() % (i % 4 ? 4 : 12);
            for (; n < len; n++)
                g_store[k][i][n] = alphabet[rand() % 3 ? rand() % 11 : rand() % (int)(sizeof alphabet - 1)];
        }
        g_store[k][i][n] = 0;
        g_bytes[k][i] = g_store[k][i];
        g_lens[k][i] = n;
    }
    g_lens[k][N_TOK - 1] = -1;
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_create(N_TOK, g_bytes[k], g_lens[k], &v), SL_OK);
    return v;
}

static sl_grammar *compile(const char *src)
{
    sl_grammar *g = NULL;
    char err[256];
    cr_assert_eq(sl_grammar_create(src, strlen(src), &g, err, sizeof err), SL_OK, "%s: %s", src, err);
    return g;
}

static const char *const grammars[] = {
    /* an object of unbounded strings, an integer and an array */
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \",\" ws \"\\\"age\\\"\" ws \":\" ws int ws \",\" ws "
    "\"\\\"tags\\\"\" ws \":\" ws \"[\" ws (str (ws \",\" ws str)*)? ws \"]\" ws \"}\"\n"
    "str ::= \"\\\"\" [a-g xyz0-9]* \"\\\"\"\nint ::= \"-\"? [0-9]+\nws ::= \" \"?",
    /* bounded strings (maxLength) in a bounded array */
    "root ::= \"[\" (s (\",\" s){0,3})? \"]\"\ns ::= \"\\\"\" [a-g ]{0,12} \"\\\"\"",
    /* nested bounds */
    "root ::= (\"\\\"\" [a-c0-9]{2,6} \"\\\"\" \",\"?){1,4}",
};

/* Walks `walks` times over the text of grammar gi on vocabulary v: a fresh
 * matcher of `shared` (a sharing grammar) and one of a non-sharing
 * compilation each walk, the same picks for both; every mask compared.
 * Returns the cross masks of the sharing side. */
static uint64_t walk_both(sl_grammar *shared, sl_grammar *plain, sl_grammar_vocab *v, unsigned seed, int walks,
                          int steps)
{
    static uint32_t a[(N_TOK + 31) / 32], b[(N_TOK + 31) / 32];
    size_t words = (N_TOK + 31) / 32;
    uint64_t cross = 0;
    srand(seed);
    for (int w = 0; w < walks; w++) {
        sl_grammar_matcher *ms = NULL, *mp = NULL;
        cr_assert_eq(sl_grammar_matcher_create(shared, &ms), SL_OK);
        cr_assert_eq(sl_grammar_matcher_create(plain, &mp), SL_OK);
        for (int st = 0; st < steps; st++) {
            cr_assert_eq(sl_grammar_matcher_mask(ms, v, a), SL_OK);
            cr_assert_eq(sl_grammar_matcher_mask(mp, v, b), SL_OK);
            cr_assert_eq(memcmp(a, b, words * sizeof *a), 0, "walk %d step %d: the shared mask differs", w, st);
            int32_t pick[N_TOK], n = 0;
            for (int32_t t = 0; t < N_TOK; t++)
                if (a[t / 32] >> (t % 32) & 1)
                    pick[n++] = t;
            if (n == 0)
                break;
            int32_t t = pick[rand() % n];
            cr_assert_eq(sl_grammar_matcher_accept_token(ms, v, t), SL_OK);
            cr_assert_eq(sl_grammar_matcher_accept_token(mp, v, t), SL_OK);
        }
        cross += sl_grammar_matcher_cross_masks(ms);
        sl_grammar_matcher_destroy(ms);
        sl_grammar_matcher_destroy(mp);
    }
    return cross;
}

Test(grammar_mask_share, later_matchers_copy_the_same_masks)
{
    sl_grammar_vocab *v = make_vocab(0, 5);
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++) {
        sl_grammar *gs = compile(grammars[i]), *gp = compile(grammars[i]);
        cr_assert_eq(sl_grammar_share_masks(gs, 64u << 20), SL_OK);
        cr_assert_eq(sl_grammar_share_masks(gs, 64u << 20), SL_OK, "idempotent");
        uint64_t cross = walk_both(gs, gp, v, 100 + (unsigned)i, 12, 40);
        cr_expect(cross > 0, "grammar %zu: no mask was copied from another matcher", i);
        sl_grammar_destroy(gs);
        sl_grammar_destroy(gp);
    }
    sl_grammar_vocab_destroy(v);
}

Test(grammar_mask_share, a_full_cap_shares_nothing_and_changes_nothing)
{
    sl_grammar_vocab *v = make_vocab(0, 6);
    sl_grammar *gs = compile(grammars[0]), *gp = compile(grammars[0]);
    cr_assert_eq(sl_grammar_share_masks(gs, 16), SL_OK);   /* smaller than any mask */
    cr_assert_eq(walk_both(gs, gp, v, 7, 6, 30), 0);
    sl_grammar_destroy(gs);
    sl_grammar_destroy(gp);
    sl_grammar_vocab_destroy(v);
    cr_assert_eq(sl_grammar_share_masks(NULL, 1), SL_EINVAL);
}

Test(grammar_mask_share, another_vocabulary_is_never_served_the_first_ones_masks)
{
    sl_grammar_vocab *v0 = make_vocab(0, 8), *v1 = make_vocab(1, 9);
    sl_grammar *gs = compile(grammars[0]), *gp = compile(grammars[0]);
    cr_assert_eq(sl_grammar_share_masks(gs, 64u << 20), SL_OK);
    cr_assert(walk_both(gs, gp, v0, 10, 6, 30) > 0);
    cr_assert_eq(walk_both(gs, gp, v1, 11, 6, 30), 0, "v1's masks came from v0's store");
    sl_grammar_destroy(gs);
    sl_grammar_destroy(gp);
    sl_grammar_vocab_destroy(v0);
    sl_grammar_vocab_destroy(v1);
}

typedef struct {
    sl_grammar *shared, *plain;
    sl_grammar_vocab *v;
    unsigned seed;
    int bad;
} thread_job;

static void *masking_thread(void *arg)
{
    thread_job *j = arg;
    static _Thread_local uint32_t a[(N_TOK + 31) / 32], b[(N_TOK + 31) / 32];
    unsigned r = j->seed;
    for (int w = 0; w < 8; w++) {
        sl_grammar_matcher *ms = NULL, *mp = NULL;
        if (sl_grammar_matcher_create(j->shared, &ms) != SL_OK || sl_grammar_matcher_create(j->plain, &mp) != SL_OK)
            j->bad++;
        for (int st = 0; ms && mp && st < 30; st++) {
            if (sl_grammar_matcher_mask(ms, j->v, a) != SL_OK || sl_grammar_matcher_mask(mp, j->v, b) != SL_OK ||
                memcmp(a, b, sizeof a) != 0) {
                j->bad++;
                break;
            }
            int32_t pick[N_TOK], n = 0;
            for (int32_t t = 0; t < N_TOK; t++)
                if (a[t / 32] >> (t % 32) & 1)
                    pick[n++] = t;
            if (n == 0)
                break;
            int32_t t = pick[rand_r(&r) % (unsigned)n];
            if (sl_grammar_matcher_accept_token(ms, j->v, t) != SL_OK ||
                sl_grammar_matcher_accept_token(mp, j->v, t) != SL_OK)
                j->bad++;
        }
        sl_grammar_matcher_destroy(ms);
        sl_grammar_matcher_destroy(mp);
    }
    return NULL;
}

Test(grammar_mask_share, matchers_on_several_threads_agree_with_the_reference)
{
    sl_grammar_vocab *v = make_vocab(0, 12);
    sl_grammar *gs = compile(grammars[1]);
    cr_assert_eq(sl_grammar_share_masks(gs, 64u << 20), SL_OK);
    enum { T = 4 };
    sl_grammar *gp[T];
    thread_job jobs[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        gp[i] = compile(grammars[1]);   /* each thread its own reference grammar: nothing shared there */
        jobs[i] = (thread_job){gs, gp[i], v, 31u * (unsigned)i + 1, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, masking_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].bad, 0, "thread %d: %d masks differ", i, jobs[i].bad);
        sl_grammar_destroy(gp[i]);
    }
    sl_grammar_destroy(gs);
    sl_grammar_vocab_destroy(v);
}
