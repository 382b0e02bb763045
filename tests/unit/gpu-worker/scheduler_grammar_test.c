/* tests/unit/gpu-worker/scheduler_grammar_test.c: constrained decoding in the
 * scheduler (gpu-worker/constraint.c over model/grammar) with the fake
 * backend: a sequence with a grammar emits only tokens whose text the
 * grammar allows and stops when the grammar is complete, next to
 * unconstrained sequences that run as they would alone; a bad grammar fails
 * its request alone; a cancel, a preemption and the device-sampling path keep
 * working. Run under the ASan build, the cancel case also shows the matcher
 * freed. */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "fake_io.h"
#include "gpu-worker/constraint.h"
#include "gpu-worker/scheduler.h"
#include "sched_harness.h"

#define N_VOCAB 64
#define N_CTX 512
#define EOG 63
#define CONTROL 62

/* The test vocabulary: digits, letters, a few multi-byte pieces and JSON
 * punctuation; 62 is a control token, 63 end-of-generation. */
static const char *const piece[N_VOCAB] = {
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u",
    "v", "w", "x", "y", "z",
    "yes", "no", "ye", "es", "{", "}", "\"", ":", ",", " ", "\"a\"", "12", "345", "{\"", "\":", "true", "false",
    "ok", "x1", "\n", "[", "]", "nul", "null", "tr", "ue", NULL, NULL,
};

static int32_t token_bytes(void *ctx, int32_t t, const char **bytes)
{
    (void)ctx;
    *bytes = t >= 0 && t < N_VOCAB ? piece[t] : NULL;
    return *bytes ? (int32_t)strlen(*bytes) : -1;
}

static sl_status build_trie(void *ctx, sl_grammar_vocab **out)
{
    const char *bytes[N_VOCAB];
    int32_t lens[N_VOCAB];
    for (int32_t t = 0; t < N_VOCAB; t++)
        lens[t] = token_bytes(ctx, t, &bytes[t]);
    return sl_grammar_vocab_create(N_VOCAB, bytes, lens, out);
}

static int32_t prompt[40];
static const int32_t eog[1] = {EOG};

typedef struct {
    sched_harness h;
    sl_constraint_vocab *v;
} grammar_harness;

static sl_sched_config test_config(void)
{
    sl_sched_config c;
    sl_sched_config_default(&c);
    c.max_seqs = 4;
    c.token_budget = 64;
    c.prefill_chunk = 16;
    c.kv_block_size = 16;
    c.n_kv_blocks = 256;
    return c;
}

static fake_req mkreq(const char *grammar, float temperature, uint64_t seed, int max_tokens)
{
    for (int j = 0; j < 40; j++)
        prompt[j] = (j * 7 + 3) % 60;
    fake_req r;
    memset(&r, 0, sizeof r);
    r.req.prompt = prompt;
    r.req.n_prompt = 20;
    sl_sampling_params_default(&r.req.params);
    r.req.params.temperature = temperature;
    r.req.params.seed = seed;
    r.req.max_tokens = max_tokens;
    r.req.grammar = grammar;
    r.req.grammar_len = grammar ? (uint32_t)strlen(grammar) : 0;
    return r;
}

static void g_open(grammar_harness *g, fake_req *reqs, int n, sl_sched_config c, bool device_sampling)
{
    cr_assert_eq(sl_constraint_vocab_create(N_VOCAB, eog, 1, build_trie, NULL, &g->v), SL_OK);
    c.grammar_vocab = g->v;
    g->h.io = calloc(1, sizeof *g->h.io);
    cr_assert_not_null(g->h.io);
    fake_io_init(g->h.io, reqs, n);
    cr_assert_eq(fake_backend_init(&g->h.be, N_VOCAB, c.kv_block_size, c.n_kv_blocks, c.token_budget, N_CTX,
                                   &g->h.io->clock), SL_OK);
    g->h.be.cost_token_ns = 10000;
    if (device_sampling)
        cr_assert_eq(fake_backend_sample_on_device(&g->h.be), SL_OK);
    sl_sched_io io = fake_io_table(g->h.io);
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_sched_create(&g->h.be.base, N_VOCAB, N_CTX, eog, 1, &c, &io, &g->h.s, err), SL_OK, "%s", err);
}

static void g_close(grammar_harness *g)
{
    sched_harness_close(&g->h);
    sl_constraint_vocab_destroy(g->v);
}

/* The text of r's tokens; EOG and control tokens add none. */
static void text_of(const fake_req *r, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < r->n_tokens; i++) {
        const char *b;
        int32_t len = token_bytes(NULL, r->tokens[i], &b);
        if (len > 0 && n + (size_t)len < cap) {
            memcpy(out + n, b, (size_t)len);
            n += (size_t)len;
        }
    }
    out[n] = 0;
}

static bool full_match(const char *pattern, const char *text)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    bool ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void assert_no_control(const fake_req *r)
{
    for (int i = 0; i < r->n_tokens; i++)
        cr_assert_neq(r->tokens[i], CONTROL, "a control token was drawn");
}

Test(scheduler_grammar, alternatives_only_and_stop_when_complete)
{
    for (uint64_t seed = 0; seed < 12; seed++) {
        fake_req r[1] = {mkreq("root ::= \"yes\" | \"no\"", 1.0f, seed, 20)};
        grammar_harness g;
        g_open(&g, r, 1, test_config(), false);
        sched_harness_run(&g.h);
        char text[256];
        text_of(&r[0], text, sizeof text);
        cr_assert(full_match("^(yes|no)$", text), "seed %llu: \"%s\"", (unsigned long long)seed, text);
        cr_assert_eq(r[0].reason, SL_SCHED_FINISH_STOP, "seed %llu: %s", (unsigned long long)seed, r[0].error);
        cr_assert_neq(r[0].tokens[r[0].n_tokens - 1], EOG, "a finished grammar stops without an EOS token");
        g_close(&g);
    }
}

Test(scheduler_grammar, digits_stop_at_eos_or_the_bound)
{
    for (uint64_t seed = 0; seed < 12; seed++) {
        fake_req r[2] = {mkreq("root ::= [0-9]{1,5}", 1.0f, seed, 30), mkreq("root ::= [0-9]{1,5}", 1.0f, seed, 30)};
        r[1].req.ignore_eos = true;
        grammar_harness g;
        g_open(&g, r, 2, test_config(), false);
        sched_harness_run(&g.h);
        char text[256];
        text_of(&r[0], text, sizeof text);
        cr_assert(full_match("^[0-9]{1,5}$", text), "seed %llu: \"%s\"", (unsigned long long)seed, text);
        cr_assert_eq(r[0].reason, SL_SCHED_FINISH_STOP);
        for (int i = 0; i + 1 < r[0].n_tokens; i++)
            cr_assert_neq(r[0].tokens[i], EOG, "EOS only as the last token");
        text_of(&r[1], text, sizeof text);
        cr_assert(full_match("^[0-9]{5}$", text), "ignore_eos: the grammar ends it: \"%s\"", text);
        cr_assert_eq(r[1].reason, SL_SCHED_FINISH_STOP, "finished grammar: stop even with ignore_eos");
        g_close(&g);
    }
}

Test(scheduler_grammar, json_object_greedy_and_sampled)
{
    static const char g_json[] =
        "root ::= \"{\" ws pair (\",\" ws pair)* \"}\"\n"
        "pair ::= \"\\\"\" [a-z]+ \"\\\"\" \":\" ws value\n"
        "value ::= [0-9]+ | \"true\" | \"false\" | \"null\"\n"
        "ws ::= \" \"?\n";
    for (uint64_t seed = 0; seed < 8; seed++) {
        fake_req r[1] = {mkreq(g_json, seed == 0 ? 0.0f : 1.0f, seed, 60)};
        r[0].req.params.top_k = seed % 2 ? 5 : 0;
        grammar_harness g;
        g_open(&g, r, 1, test_config(), seed % 3 == 2);
        sched_harness_run(&g.h);
        char text[512];
        text_of(&r[0], text, sizeof text);
        if (r[0].reason == SL_SCHED_FINISH_LENGTH)   /* cut short: a prefix of a sentence */
            cr_assert(full_match("^\\{[a-z0-9\" :,]*$", text), "seed %llu: \"%s\"", (unsigned long long)seed, text);
        else
            cr_assert(full_match("^\\{ ?\"[a-z]+\": ?([0-9]+|true|false|null)(, ?\"[a-z]+\": ?([0-9]+|true|false|null))*\\}$",
                                 text),
                      "seed %llu: \"%s\" (%s)", (unsigned long long)seed, text, r[0].error);
        assert_no_control(&r[0]);
        g_close(&g);
    }
}

Test(scheduler_grammar, constrained_and_unconstrained_in_one_batch)
{
    fake_req r[3] = {mkreq("root ::= [a-z]{3,8}", 0.9f, 7, 40), mkreq(NULL, 0.9f, 7, 12),
                     mkreq("root ::= \"ok\"", 0.0f, 0, 40)};
    grammar_harness g;
    g_open(&g, r, 3, test_config(), false);
    sched_harness_run(&g.h);
    int32_t most = 0;   /* the same prompt: the first prefill's blocks are shared before the others start */
    for (uint64_t i = 0; i < g.h.io->steps && i < FAKE_MAX_STEPS; i++)
        most = g.h.io->stats[i].step_seqs > most ? g.h.io->stats[i].step_seqs : most;
    cr_assert_eq(most, 3, "they ran in one batch");
    char text[256];
    text_of(&r[0], text, sizeof text);
    cr_assert(full_match("^[a-z]{3,8}$", text), "\"%s\"", text);
    text_of(&r[2], text, sizeof text);
    cr_assert_str_eq(text, "ok");
    cr_assert_eq(r[1].n_tokens, 12, "the unconstrained one runs to max_tokens");
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_LENGTH);
    sl_sched_stats st;
    sl_sched_stats_get(g.h.s, &st);
    cr_assert_eq(st.n_constrained, 2);
    int32_t mixed[FAKE_MAX_TOKENS];
    memcpy(mixed, r[1].tokens, sizeof mixed);
    g_close(&g);

    /* alone, the unconstrained request draws the same tokens */
    fake_req a[1] = {mkreq(NULL, 0.9f, 7, 12)};
    g_open(&g, a, 1, test_config(), false);
    sched_harness_run(&g.h);
    cr_assert_arr_eq(a[0].tokens, mixed, 12 * sizeof(int32_t));
    g_close(&g);
}

Test(scheduler_grammar, bad_grammar_fails_alone_with_the_reason)
{
    fake_req r[3] = {mkreq("root ::= \"a", 0.0f, 0, 5), mkreq(NULL, 0.0f, 0, 5), mkreq("root ::= undefined", 0.0f, 0, 5)};
    grammar_harness g;
    g_open(&g, r, 3, test_config(), false);
    sched_harness_run(&g.h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strncmp(r[0].error, "grammar: ", 9) == 0 && strlen(r[0].error) > 9, "%s", r[0].error);
    cr_assert_eq(r[0].n_tokens, 0);
    cr_assert_eq(r[2].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strncmp(r[2].error, "grammar: ", 9) == 0, "%s", r[2].error);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_LENGTH, "the unconstrained request runs");
    g_close(&g);
}

Test(scheduler_grammar, grammar_without_a_vocabulary_fails)
{
    fake_req r[1] = {mkreq("root ::= \"a\"", 0.0f, 0, 5)};
    sched_harness h;
    h.io = calloc(1, sizeof *h.io);
    fake_io_init(h.io, r, 1);
    sl_sched_config c = test_config();
    cr_assert_eq(fake_backend_init(&h.be, N_VOCAB, c.kv_block_size, c.n_kv_blocks, c.token_budget, N_CTX,
                                   &h.io->clock), SL_OK);
    sl_sched_io io = fake_io_table(h.io);
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_sched_create(&h.be.base, N_VOCAB, N_CTX, eog, 1, &c, &io, &h.s, err), SL_OK);
    sched_harness_run(&h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_ERROR);
    cr_assert(strncmp(r[0].error, "grammar: ", 9) == 0, "%s", r[0].error);
    sched_harness_close(&h);
}

Test(scheduler_grammar, nothing_allowed_fails_only_that_sequence)
{
    /* every sentence needs a token the vocabulary lacks: the first mask is empty */
    fake_req r[2] = {mkreq("root ::= \"#\"", 1.0f, 3, 5), mkreq(NULL, 1.0f, 3, 5)};
    grammar_harness g;
    g_open(&g, r, 2, test_config(), false);
    sched_harness_run(&g.h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_ERROR);
    cr_assert_str_eq(r[0].error, "grammar: no allowed token");
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_LENGTH);
    g_close(&g);
}

Test(scheduler_grammar, cancel_mid_way_frees_the_matcher)
{
    fake_req r[2] = {mkreq("root ::= [a-z]+", 1.0f, 1, 100), mkreq("root ::= [0-9]+", 1.0f, 2, 100)};
    r[0].cancel_after = 3;
    r[1].cancel_after = 5;
    grammar_harness g;
    g_open(&g, r, 2, test_config(), false);
    sched_harness_run(&g.h);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_CANCELLED);
    cr_assert_eq(r[1].reason, SL_SCHED_FINISH_CANCELLED);
    char text[256];
    text_of(&r[0], text, sizeof text);
    cr_assert(full_match("^[a-z]+$", text), "\"%s\"", text);
    g_close(&g);   /* ASan: the matchers and bitmaps are gone */
}

Test(scheduler_grammar, preemption_keeps_the_matcher_on_the_generated_text)
{
    sl_sched_config c = test_config();
    c.n_kv_blocks = 10;   /* 160 positions for 4 sequences that grow to 60 each */
    fake_req r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = mkreq("root ::= ([a-z] [0-9])+", 1.0f, 10 + (uint64_t)i, 40);
        r[i].req.ignore_eos = true;
    }
    grammar_harness g;
    g_open(&g, r, 4, c, false);
    sched_harness_run(&g.h);
    sl_sched_stats st;
    sl_sched_stats_get(g.h.s, &st);
    cr_assert_gt(st.n_preemptions, 0, "the pool is small enough to force preemption");
    for (int i = 0; i < 4; i++) {
        char text[256];
        text_of(&r[i], text, sizeof text);
        cr_assert(full_match("^([a-z][0-9])+[a-z]?$", text), "request %d: \"%s\"", i, text);
        cr_assert_eq(r[i].reason, SL_SCHED_FINISH_LENGTH);
        cr_assert_eq(r[i].n_tokens, 40);
    }
    g_close(&g);
}

Test(scheduler_grammar, device_sampling_respects_the_mask)
{
    fake_req r[2] = {mkreq("root ::= \"no\" | \"yes\" | [0-9]{2}", 1.0f, 5, 10), mkreq(NULL, 1.0f, 5, 6)};
    grammar_harness g;
    g_open(&g, r, 2, test_config(), true);
    sched_harness_run(&g.h);
    char text[256];
    text_of(&r[0], text, sizeof text);
    cr_assert(full_match("^(no|yes|[0-9]{2})$", text), "\"%s\"", text);
    cr_assert_eq(r[0].reason, SL_SCHED_FINISH_STOP);
    cr_assert_eq(r[1].n_tokens, 6);
    g_close(&g);
}
