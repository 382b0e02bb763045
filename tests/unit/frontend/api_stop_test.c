/* tests/unit/frontend/api_stop_test.c: frontend/api_stop.c on hand-made
 * boundary cases and against a whole-text reference over random splits. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_stop.h"

typedef struct {
    char out[4096];
    size_t n;
    bool hit;
} run_result;

/* Feeds `pieces` (NULL-terminated) and flushes; collects everything emitted. */
static run_result run(const char *const *stops, int n_stops, const char *const *pieces)
{
    sl_api_stop s;
    size_t lens[8] = {0};
    for (int i = 0; i < n_stops; i++) lens[i] = strlen(stops[i]);
    cr_assert_eq(sl_api_stop_init(&s, stops, lens, n_stops), SL_OK);
    run_result r = {.n = 0};
    const char *e;
    size_t el;
    for (int i = 0; pieces[i]; i++) {
        cr_assert_eq(sl_api_stop_push(&s, pieces[i], strlen(pieces[i]), &e, &el), SL_OK);
        memcpy(r.out + r.n, e, el);
        r.n += el;
    }
    sl_api_stop_flush(&s, &e, &el);
    memcpy(r.out + r.n, e, el);
    r.n += el;
    r.out[r.n] = '\0';
    r.hit = s.hit;
    sl_api_stop_fini(&s);
    return r;
}

#define P(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(api_stop, no_stop_strings_pass_through)
{
    run_result r = run(NULL, 0, P("Hello", " ", "world"));
    cr_expect_str_eq(r.out, "Hello world");
    cr_expect(!r.hit);
}

Test(api_stop, stop_inside_one_piece_is_cut_before)
{
    run_result r = run(P("END"), 1, P("abcENDdef", "more"));
    cr_expect_str_eq(r.out, "abc");
    cr_expect(r.hit);
}

Test(api_stop, stop_across_three_pieces)
{
    run_result r = run(P("lo Wor"), 1, P("Hel", "lo W", "orld"));
    cr_expect_str_eq(r.out, "Hel");
    cr_expect(r.hit);
}

Test(api_stop, held_prefix_is_released_when_it_diverges)
{
    sl_api_stop s;
    const char *stops[] = {"abc"};
    size_t lens[] = {3};
    cr_assert_eq(sl_api_stop_init(&s, stops, lens, 1), SL_OK);
    const char *e;
    size_t el;
    sl_api_stop_push(&s, "xa", 2, &e, &el);
    cr_expect_eq(el, 1);
    cr_expect(memcmp(e, "x", 1) == 0);
    sl_api_stop_push(&s, "b", 1, &e, &el);
    cr_expect_eq(el, 0);                       /* "ab" could still become "abc" */
    sl_api_stop_push(&s, "d", 1, &e, &el);
    cr_expect_eq(el, 3);
    cr_expect(memcmp(e, "abd", 3) == 0);
    cr_expect(!s.hit);
    sl_api_stop_fini(&s);
}

Test(api_stop, held_text_is_flushed_at_the_end)
{
    run_result r = run(P("</s>"), 1, P("answer </"));
    cr_expect_str_eq(r.out, "answer </");
    cr_expect(!r.hit);
}

Test(api_stop, self_overlapping_stop)
{
    run_result r = run(P("aab"), 1, P("a", "a", "a", "b", "zzz"));
    cr_expect_str_eq(r.out, "a");
    cr_expect(r.hit);
}

Test(api_stop, the_first_completed_match_wins_whatever_the_split)
{
    /* "c" completes before "abcd" does, in one piece or byte by byte. */
    run_result a = run(P("abcd", "c"), 2, P("xabcd"));
    run_result b = run(P("abcd", "c"), 2, P("x", "a", "b", "c", "d"));
    cr_expect_str_eq(a.out, "xab");
    cr_expect_str_eq(b.out, "xab");
    /* same end: the longer one cuts earlier */
    run_result c = run(P("d", "bcd"), 2, P("abcde"));
    cr_expect_str_eq(c.out, "a");
    cr_expect_eq(c.hit, true);
}

Test(api_stop, pushes_after_a_hit_emit_nothing)
{
    sl_api_stop s;
    const char *stops[] = {"\n\n"};
    size_t lens[] = {2};
    cr_assert_eq(sl_api_stop_init(&s, stops, lens, 1), SL_OK);
    const char *e;
    size_t el;
    sl_api_stop_push(&s, "one\n", 4, &e, &el);
    cr_expect_eq(el, 3);
    sl_api_stop_push(&s, "\ntwo", 4, &e, &el);
    cr_expect_eq(el, 0);
    cr_expect(s.hit);
    cr_expect_eq(s.hit_index, 0);
    sl_api_stop_push(&s, "three", 5, &e, &el);
    cr_expect_eq(el, 0);
    sl_api_stop_flush(&s, &e, &el);
    cr_expect_eq(el, 0);
    sl_api_stop_fini(&s);
}

Test(api_stop, multibyte_characters_are_never_split)
{
    /* stop "é!" ; the text has "é" many times, split between characters */
    run_result r = run(P("\xc3\xa9!"), 1, P("caf\xc3\xa9", " \xc3\xa9", "t\xc3\xa9", "!", "x"));
    cr_expect_str_eq(r.out, "caf\xc3\xa9 \xc3\xa9t");
    cr_expect(r.hit);
}

Test(api_stop, bad_init_arguments)
{
    sl_api_stop s;
    const char *stops[] = {"a", ""};
    size_t lens[] = {1, 0};
    cr_expect_eq(sl_api_stop_init(&s, stops, lens, 2), SL_EINVAL);
    cr_expect_eq(sl_api_stop_init(&s, stops, lens, SL_API_STOP_N_MAX + 1), SL_EINVAL);
    cr_expect_eq(sl_api_stop_init(&s, stops, lens, -1), SL_EINVAL);
    sl_api_stop_fini(&s);
}

/* Reference on the whole text: the occurrence with the smallest end (ties:
 * the smallest start); the output is the text before it. */
static size_t reference_cut(const char *text, size_t n, const char *const *stops, int ns, bool *hit)
{
    size_t best_end = SIZE_MAX, best_start = n;
    for (int i = 0; i < ns; i++) {
        size_t l = strlen(stops[i]);
        for (size_t p = 0; p + l <= n; p++)
            if (memcmp(text + p, stops[i], l) == 0) {
                if (p + l < best_end || (p + l == best_end && p < best_start)) {
                    best_end = p + l;
                    best_start = p;
                }
                break;
            }
    }
    *hit = best_end != SIZE_MAX;
    return *hit ? best_start : n;
}

Test(api_stop, random_splits_match_the_whole_text_reference)
{
    uint64_t st = 88172645463325252ull;
#define RND() (st ^= st << 13, st ^= st >> 7, st ^= st << 17, st)
    char text[64], stopbuf[4][8];
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 1 + RND() % 40;
        for (size_t i = 0; i < n; i++) text[i] = "abc"[RND() % 3];
        text[n] = '\0';
        int ns = 1 + (int)(RND() % 4);
        const char *stops[4];
        size_t lens[4];
        for (int k = 0; k < ns; k++) {
            size_t l = 1 + RND() % 4;
            for (size_t i = 0; i < l; i++) stopbuf[k][i] = "abc"[RND() % 3];
            stopbuf[k][l] = '\0';
            stops[k] = stopbuf[k];
            lens[k] = l;
        }
        bool want_hit;
        size_t want = reference_cut(text, n, stops, ns, &want_hit);

        sl_api_stop s;
        cr_assert_eq(sl_api_stop_init(&s, stops, lens, ns), SL_OK);
        char out[64];
        size_t got = 0, pos = 0;
        const char *e;
        size_t el;
        while (pos < n) {
            size_t k = 1 + RND() % 6;
            if (k > n - pos) k = n - pos;
            sl_api_stop_push(&s, text + pos, k, &e, &el);
            memcpy(out + got, e, el);
            got += el;
            pos += k;
            cr_assert_leq(got, want, "emitted past the cut: text %s", text);
        }
        sl_api_stop_flush(&s, &e, &el);
        memcpy(out + got, e, el);
        got += el;
        cr_assert_eq(got, want, "text %s stops %s/%s: got %zu want %zu", text, stops[0],
                     ns > 1 ? stops[1] : "-", got, want);
        cr_assert(memcmp(out, text, got) == 0);
        cr_assert_eq(s.hit, want_hit);
        sl_api_stop_fini(&s);
    }
#undef RND
}
