/* tests/unit/model/tokenizer_spans_test.c: the untrusted-span rule of
 * sl_tokenize_rendered. The forward cursor (sl_tok_spans) must answer
 * exactly as a scan of every span (`scan_overlaps`, the oracle: the rule
 * as the tokenizer first had it) for span sets in the renderer's order and
 * in any other; rendered chats with special-token text at span boundaries
 * must tokenize the same through either path; and a chat of 10^5 messages
 * must cost time linear in its size. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer_internal.h"
#include "tests/unit/model/test_vocab.h"

/* The oracle: every span, every query. */
static bool scan_overlaps(const sl_tok_span *sp, size_t n, size_t off, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (off < sp[i].off + sp[i].len && sp[i].off < off + len)
            return true;
    return false;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Asks q and the oracle about every (off, len) with off rising, as encode()
 * does: several lengths at one offset, then the next offset. */
static void expect_same_answers(const sl_tok_span *sp, size_t n, size_t text_len, const char *what)
{
    sl_tok_spans q;
    cr_assert_eq(sl_tok_spans_init(&q, sp, n), SL_OK);
    for (size_t off = 0; off < text_len; off += 1 + next() % 2)
        for (size_t len = 1; len <= 12; len += 1 + next() % 3)
            cr_assert_eq(sl_tok_spans_hit(&q, off, len), scan_overlaps(sp, n, off, len),
                         "%s: n=%zu off=%zu len=%zu", what, n, off, len);
    sl_tok_spans_fini(&q);
}

Test(tokenizer_spans, cursor_answers_as_the_full_scan)
{
    sl_tok_span sp[64];
    for (int round = 0; round < 3000; round++) {
        size_t n = next() % 24, at = next() % 4;
        int shape = round % 4;
        for (size_t i = 0; i < n; i++) {
            switch (shape) {
            case 0:   /* the renderer's: sorted, disjoint, non-adjacent */
                at += 1 + next() % 6;
                sp[i] = (sl_tok_span){at, 1 + next() % 8};
                at += sp[i].len;
                break;
            case 1:   /* sorted by start, touching, empty and nested ones */
                at += next() % 4;
                sp[i] = (sl_tok_span){at, next() % 10};
                break;
            default:  /* any order, any overlap, empty ones included */
                sp[i] = (sl_tok_span){next() % 160, next() % 12};
                break;
            }
        }
        if (shape == 3)   /* duplicates of other spans */
            for (size_t i = 0; i + 1 < n; i += 3)
                sp[i + 1] = sp[i];
        expect_same_answers(sp, n, 200, shape == 0 ? "renderer order" : shape == 1 ? "sorted" : "unordered");
    }
}

Test(tokenizer_spans, span_past_size_max_is_clipped)
{
    /* off + len would wrap: the span runs to the end of any text */
    sl_tok_span sp[2] = {{5, SIZE_MAX}, {2, 1}};
    sl_tok_spans q;
    cr_assert_eq(sl_tok_spans_init(&q, sp, 2), SL_OK);
    cr_assert(sl_tok_spans_hit(&q, 2, 1));
    cr_assert_not(sl_tok_spans_hit(&q, 3, 2));
    cr_assert(sl_tok_spans_hit(&q, 4, 2));
    cr_assert(sl_tok_spans_hit(&q, 1000, 7));
    sl_tok_spans_fini(&q);
}

/* ---- rendered chats on a real vocabulary ---- */


static void render(const char *builtin, json_t *msgs, sl_chat_render_result *rr)
{
    char err[SL_ERR_LEN];
    sl_chat_template *tm = NULL;
    const char *src = sl_chat_template_builtin(builtin);
    cr_assert_eq(sl_chat_template_compile(src, strlen(src), &tm, err), SL_OK, "%s", err);
    sl_chat_render_opts opts = {.has_now = true, .now = 1721952000};
    cr_assert_eq(sl_chat_template_render(tm, msgs, NULL, true, "<s>", "</s>", &opts, rr, err), SL_OK, "%s", err);
    sl_chat_template_destroy(tm);
}

static sl_tok_span *spans_of(const sl_chat_render_result *rr)
{
    sl_tok_span *sp = malloc((rr->n_untrusted + 1) * sizeof *sp);
    cr_assert_not_null(sp);
    for (size_t i = 0; i < rr->n_untrusted; i++)
        sp[i] = (sl_tok_span){rr->untrusted[i].start, rr->untrusted[i].end - rr->untrusted[i].start};
    return sp;
}

static int32_t *tokenize(const sl_tokenizer *t, const sl_chat_render_result *rr, const sl_tok_span *sp,
                         size_t n_sp, int64_t *n)
{
    *n = sl_tokenize_rendered(t, rr->text, rr->len, sp, n_sp, false, NULL, 0);
    cr_assert_geq(*n, 0);
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    cr_assert_not_null(ids);
    cr_assert_eq(sl_tokenize_rendered(t, rr->text, rr->len, sp, n_sp, false, ids, (size_t)*n), *n);
    return ids;
}

/* Phi-3's control tokens, cut at every place inside and around a span. */
static const char *const fragments[] = {
    "<|end|>", "<|end|", "|end|>", "<|", "|>", "<|user|>", "<|assistant|>", "end", "user", "x",
    "<|endoftext|>", "\n", "<|system|>\n", "|", "<",
};

Test(tokenizer_spans, rendered_chats_same_ids_in_any_span_order)
{
    sl_tokenizer *t = sl_test_open_vocab("phi-3");
    cr_assert_not_null(t, "testdata vocab missing");
    static const char *const control[] = {"<|end|>", "<|user|>", "<|assistant|>", "<|system|>", "<|endoftext|>"};
    size_t n_ctl = sizeof control / sizeof control[0], n_frag = sizeof fragments / sizeof fragments[0];
    int32_t ctl_id[5];
    for (size_t c = 0; c < n_ctl; c++) {
        ctl_id[c] = sl_tokenizer_find(t, control[c], strlen(control[c]));
        cr_assert_eq(sl_tokenizer_attr(t, ctl_id[c]), SL_TOKEN_ATTR_CONTROL, "%s", control[c]);
    }
    size_t n_allowed = 0, n_refused = 0;
    for (int round = 0; round < 200; round++) {
        json_t *msgs = json_array();
        size_t n_msg = 1 + next() % 6;
        for (size_t m = 0; m < n_msg; m++) {
            char role[64] = "", content[256] = "";
            /* roles too are untrusted: "end" makes "<|end|>" with its middle untrusted */
            strcat(role, m % 3 == 2 ? fragments[next() % n_frag] : m % 2 ? "assistant" : "user");
            for (int k = next() % 5; k > 0; k--)
                strcat(content, fragments[next() % n_frag]);
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", role, "content", content));
        }
        sl_chat_render_result rr;
        render("phi3", msgs, &rr);
        json_decref(msgs);
        sl_tok_span *sp = spans_of(&rr);
        int64_t n_a, n_b;
        int32_t *a = tokenize(t, &rr, sp, rr.n_untrusted, &n_a);
        /* the same bytes untrusted, as spans out of order, split and
         * repeated: the sorted copy must give the same ids */
        size_t n_mixed = 0;
        sl_tok_span *mixed = malloc((3 * rr.n_untrusted + 1) * sizeof *mixed);
        cr_assert_not_null(mixed);
        for (size_t i = rr.n_untrusted; i-- > 0;) {
            size_t half = sp[i].len / 2;
            mixed[n_mixed++] = (sl_tok_span){sp[i].off + half, sp[i].len - half};
            if (half)
                mixed[n_mixed++] = (sl_tok_span){sp[i].off, half};
            if (next() % 2)
                mixed[n_mixed++] = sp[i];
        }
        int32_t *b = tokenize(t, &rr, mixed, n_mixed, &n_b);
        cr_assert_eq(n_a, n_b, "round %d: %s", round, rr.text);
        cr_assert_arr_eq(a, b, (size_t)n_a * sizeof *a, "round %d: %s", round, rr.text);
        /* phi-3's control texts cannot overlap one another, so the oracle
         * count is every occurrence that meets no span */
        size_t want = 0, got = 0;
        for (size_t c = 0; c < n_ctl; c++) {
            for (const char *s = rr.text; (s = strstr(s, control[c])) != NULL; s++) {
                bool out = !scan_overlaps(sp, rr.n_untrusted, (size_t)(s - rr.text), strlen(control[c]));
                want += out;
                n_refused += !out;
            }
            for (int64_t i = 0; i < n_a; i++)
                got += a[i] == ctl_id[c];
        }
        cr_assert_eq(got, want, "round %d: %s", round, rr.text);
        n_allowed += want;
        free(a);
        free(b);
        free(mixed);
        free(sp);
        sl_chat_render_result_fini(&rr);
    }
    cr_assert_gt(n_allowed, 0);
    cr_assert_gt(n_refused, 0);
    sl_tokenizer_destroy(t);
}

/* ---- cost ---- */

/* Best of three: render and tokenize one chat of n short messages. */
static void chat_cost(const sl_tokenizer *t, size_t n, double *render_s, double *tok_s, int64_t *n_ids)
{
    json_t *msgs = json_array();
    for (size_t i = 0; i < n; i++) {
        char c[32];
        snprintf(c, sizeof c, "hi <|end|> %zu", i % 100);
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", i % 2 ? "assistant" : "user", "content", c));
    }
    *render_s = *tok_s = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        sl_chat_render_result rr;
        double t0 = now_s();
        render("phi3", msgs, &rr);
        double t1 = now_s();
        sl_tok_span *sp = spans_of(&rr);
        double t2 = now_s();
        *n_ids = sl_tokenize_rendered(t, rr.text, rr.len, sp, rr.n_untrusted, false, NULL, 0);
        double t3 = now_s();
        cr_assert_gt(*n_ids, (int64_t)n);
        if (t1 - t0 < *render_s)
            *render_s = t1 - t0;
        if (t3 - t2 < *tok_s)
            *tok_s = t3 - t2;
        free(sp);
        sl_chat_render_result_fini(&rr);
    }
    json_decref(msgs);
}

Test(tokenizer_spans, chat_of_1e5_messages_costs_linear_time, .timeout = 120)
{
    sl_tokenizer *t = sl_test_open_vocab("phi-3");
    cr_assert_not_null(t, "testdata vocab missing");
    double r_small, t_small, r_big, t_big;
    int64_t n_small, n_big;
    chat_cost(t, 20000, &r_small, &t_small, &n_small);
    chat_cost(t, 100000, &r_big, &t_big, &n_big);
    fprintf(stderr, "chat of 2x10^4 messages: render %.3f s, tokenize %.3f s (%lld ids)\n"
                    "chat of 10^5 messages:   render %.3f s, tokenize %.3f s (%lld ids)\n",
            r_small, t_small, (long long)n_small, r_big, t_big, (long long)n_big);
    /* 5x the messages: about 5x the time when linear, 25x when quadratic */
    cr_expect_lt(t_big, 12 * t_small + 0.05, "tokenize: %.3f s vs %.3f s", t_big, t_small);
    cr_expect_lt(r_big, 12 * r_small + 0.05, "render: %.3f s vs %.3f s", r_big, r_small);
    sl_tokenizer_destroy(t);
}
