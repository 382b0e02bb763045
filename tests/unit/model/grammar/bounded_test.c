/* tests/unit/model/grammar/bounded_test.c: masks inside bounded
 * repetitions ({m,n}, JSON Schema's maxLength), which mask.c builds from
 * the mask of the same state at full count plus a walk of the tokens too
 * long for the count left (matcher.c sl_gram_share). Every mask of random
 * walks is compared with brute force (a fresh matcher replays the state's
 * bytes, then the token's) on a vocabulary whose token lengths straddle the
 * bounds: counts around the token-length boundary, minLength with
 * maxLength, nested bounds, escapes (units of two bytes), nullable units
 * and multi-byte classes. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"

enum { N_MAX = 4200, TOK_BYTES = 40 };

static int32_t g_n = 700;   /* tokens in the vocabulary make_vocab builds */
static char g_store[N_MAX][TOK_BYTES];
static const char *g_bytes[N_MAX];
static int32_t g_lens[N_MAX];

/* Tokens of 1 to 16 parts: mostly plain letters, so long runs of string
 * text exist, with quotes, escapes, separators, whole and cut multi-byte
 * characters; the last two are special and empty. */
static sl_grammar_vocab *make_vocab(unsigned seed)
{
    static const char *const alphabet[] = {"a", "b", "c", " ", "\"", "\\", "n", ",", "[", "]", "{", "}", ":",
                                           "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc3", "\xa9", "\xe2",
                                           "\x82", "x", "\x01"};
    srand(seed);
    for (int i = 0; i < g_n; i++) {
        int n = 0, parts = 1 + rand() % (i % 3 ? 5 : 16);
        for (int p = 0; p < parts; p++) {
            const char *a = alphabet[rand() % 3 ? rand() % 4 : rand() % (int)(sizeof alphabet / sizeof *alphabet)];
            size_t l = strlen(a);
            if (n + l < TOK_BYTES) {
                memcpy(g_store[i] + n, a, l);
                n += (int)l;
            }
        }
        g_store[i][n] = 0;
        g_bytes[i] = g_store[i];
        g_lens[i] = n;
    }
    /* and the pieces a JSON object needs, so schema walks get going */
    static const char *const fixed[] = {"{", "\"a\"", ":", "\"", "\"b\"", "[", "]", ",", " ", "{\"a\": \"", "\",", "}"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        strcpy(g_store[i], fixed[i]);
        g_lens[i] = (int32_t)strlen(fixed[i]);
    }
    g_lens[g_n - 2] = -1;   /* special */
    g_lens[g_n - 1] = 0;    /* empty */
    g_store[g_n - 1][0] = 0;
    sl_grammar_vocab *v = NULL;
    cr_assert_eq(sl_grammar_vocab_create(g_n, g_bytes, g_lens, &v), SL_OK);
    return v;
}

static bool replay_accepts(const sl_grammar *g, const char *prefix, size_t n, int32_t t)
{
    if (g_lens[t] <= 0)
        return false;
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_assert_eq(sl_grammar_matcher_accept_bytes(m, prefix, n), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, g_bytes[t], (size_t)g_lens[t]) == SL_OK;
    sl_grammar_matcher_destroy(m);
    return ok;
}

/* Random walks over src, every mask checked; returns the masks shared. */
static uint64_t check_walks(const char *src, unsigned seed, int walks, int steps)
{
    sl_grammar *g = NULL;
    char err[256];
    cr_assert_eq(sl_grammar_create(src, strlen(src), &g, err, sizeof err), SL_OK, "%s: %s", src, err);
    sl_grammar_vocab *v = make_vocab(seed);
    static uint32_t allow[(N_MAX + 31) / 32], again[(N_MAX + 31) / 32];
    size_t words = ((size_t)g_n + 31) / 32;
    uint64_t shared = 0;
    for (int walk = 0; walk < walks; walk++) {
        sl_grammar_matcher *m = NULL;
        cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
        char prefix[2048];
        size_t n = 0;
        for (int step = 0; step < steps; step++) {
            cr_assert_eq(sl_grammar_matcher_mask(m, v, allow), SL_OK);
            int32_t pick[N_MAX], n_pick = 0;
            for (int32_t t = 0; t < g_n; t++) {
                bool got = (allow[t / 32] >> (t % 32)) & 1;
                bool want = replay_accepts(g, prefix, n, t);
                cr_assert_eq(got, want, "%s: walk %d step %d after '%.*s': token %d '%s' mask %d, brute force %d",
                             src, walk, step, (int)n, prefix, t, g_store[t], got, want);
                if (got)
                    pick[n_pick++] = t;
            }
            cr_assert_eq(sl_grammar_matcher_mask(m, v, again), SL_OK);
            cr_assert_eq(memcmp(allow, again, words * sizeof *allow), 0, "cached mask differs");
            if (n_pick == 0)
                break;
            /* favour short tokens now and then, so walks also reach the
             * last counts of a bound */
            int32_t t = pick[rand() % n_pick];
            for (int tries = 0; tries < 3 && rand() % 2 && g_lens[t] > 2; tries++)
                t = pick[rand() % n_pick];
            cr_assert_eq(sl_grammar_matcher_accept_token(m, v, t), SL_OK);
            if (n + (size_t)g_lens[t] >= sizeof prefix)
                break;
            memcpy(prefix + n, g_bytes[t], (size_t)g_lens[t]);
            n += (size_t)g_lens[t];
        }
        shared += sl_grammar_matcher_shared_masks(m);
        sl_grammar_matcher_destroy(m);
    }
    sl_grammar_vocab_destroy(v);
    sl_grammar_destroy(g);
    return shared;
}

Test(grammar_bounded, counts_around_token_lengths)
{
    /* tokens run to 16 parts: bounds below, at and above that */
    uint64_t shared = 0;
    shared += check_walks("root ::= \"\\\"\" [a-c ]{0,5} \"\\\"\"", 11, 8, 12);
    shared += check_walks("root ::= \"\\\"\" [a-c ]{0,16} \"\\\"\" \",\"?", 12, 8, 14);
    shared += check_walks("root ::= \"\\\"\" [a-c ]{0,40} \"\\\"\"", 13, 6, 20);
    cr_expect(shared > 0, "no mask was shared");
}

Test(grammar_bounded, min_and_max_length)
{
    check_walks("root ::= \"\\\"\" [a-c ]{3,12} \"\\\"\"", 21, 8, 14);
    check_walks("root ::= \"\\\"\" [a-cn]{1,2} \"\\\"\" | \"\\\"\" [a-c]{0,9} \"x\"", 22, 8, 12);
}

Test(grammar_bounded, nested_bounds)
{
    check_walks("root ::= \"[\" ( s ( \",\" s ){0,6} )? \"]\"\ns ::= \"\\\"\" [a-c ]{0,7} \"\\\"\"\n", 31, 8, 20);
    check_walks("root ::= ( [a-c]{1,3} \" \" ){0,9} \"\\\"\"", 32, 8, 16);
}

Test(grammar_bounded, escapes_and_nullable_units)
{
    check_walks("root ::= \"\\\"\" c{0,10} \"\\\"\"\nc ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\n]\n", 41, 8, 14);
    check_walks("root ::= ( \"a\"? \"b\"? ){0,8} \"\\\"\"", 42, 6, 12);
}

Test(grammar_bounded, utf8_classes)
{
    check_walks("root ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,9} \"\\\"\"", 51, 8, 14);
    check_walks("root ::= \"\\\"\" [a-c\\u00e9\\u20ac\\U0001F600]{2,8} \"\\\"\"", 52, 8, 14);
}

Test(grammar_bounded, json_schema_max_length)
{
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":12},"
                         "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},"
                         "\"maxItems\":3}},\"required\":[\"a\",\"b\"]}";
    json_error_t je;
    json_t *j = json_loads(schema, 0, &je);
    cr_assert_not_null(j);
    char *gbnf = NULL, err[256];
    cr_assert_eq(sl_json_schema_to_gbnf(j, "root", &gbnf, err, sizeof err), SL_OK, "%s", err);
    json_decref(j);
    check_walks(gbnf, 61, 6, 30);
    free(gbnf);
}

/* After the last count the text may go on under another rule: the end of
 * the bound is not the end of what is allowed (ASCII, then multi-byte). */
Test(grammar_bounded, text_that_outlives_the_bound)
{
    check_walks("root ::= \"\\\"\" [a-c ]{0,4} [a-z]* \"\\\"\"", 71, 8, 14);
    check_walks("root ::= \"\\\"\" [a-c \\u00e9]{0,3} [\\u00e9\\u20ac]{0,2} \"\\\"\"", 72, 8, 14);
    check_walks("root ::= \"\\\"\" [a-c ]{1,5} ( [a-z]{0,3} \"\\\"\" | \"\\\"\" )", 73, 8, 14);
    /* a class wide enough for the walk's per-set summaries (16 bytes and
     * more), whose last count is followed by ASCII or multi-byte text */
    check_walks("root ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,3} ( [a-c,] \"x\" | [\\u00e9] \"y\" )? \"\\\"\"", 74, 12, 14);
    check_walks("root ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,6} [\\u00e9\\u20ac]? \"\\\"\"", 75, 12, 14);
}

/* A vocabulary past the size where every count with room is shared
 * (mask.c SHARE_ALWAYS_BELOW): only counters that leave more units than
 * most tokens' length are reset, the others stay in the reference. */
Test(grammar_bounded, large_vocabulary_resets_counters_with_room)
{
    g_n = N_MAX;
    uint64_t shared = check_walks("root ::= \"[\" ( s ( \",\" s ){0,2} )? \"]\"\n"
                                  "s ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,14} \"\\\"\"\n",
                                  81, 10, 40);
    cr_expect(shared > 0, "no mask was shared");
    g_n = 700;
}
