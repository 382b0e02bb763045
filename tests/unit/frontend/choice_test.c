/* tests/unit/frontend/choice_test.c: frontend/choice.c's pipeline fed by a
 * fake worker over a real segment in this process: an echo's text and
 * logprobs (whole and streamed, n = 2 choices, max_tokens 0) read from the
 * ring as shared/shm.h's echo_logprobs contract lays it out, and
 * parallel_tool_calls false ending a choice at its first call. The vocabulary
 * is GPT-2's byte-level BPE, so any text round-trips exactly. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "frontend/server_internal.h"
#include "frontend/choice.h"

static sl_shm_t *g_m, *g_fe, *g_w;
static sl_gguf *g_gguf;
static sl_tokenizer *g_tok;
static sl_fe g_fe_state;
static int g_efd = -1;
static char g_name[64];

static void setup(void)
{
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_gguf_open(SL_TESTDATA_DIR "/vocab/ggml-vocab-gpt-2.gguf", &g_gguf, err), SL_OK, "%s", err);
    cr_assert_eq(sl_tokenizer_create(g_gguf, &g_tok, err), SL_OK, "%s", err);
    sl_shm_limits lim;
    sl_shm_limits_default(&lim);
    lim.n_slots = 1;
    lim.n_mailboxes = 8;
    lim.prompt_tokens_max = 256;
    lim.token_ring_entries = 256;
    lim.grammar_bytes_max = 4096;
    lim.logprobs = 1;
    snprintf(g_name, sizeof g_name, "/sluice-choice-test-%d", (int)getpid());
    g_m = sl_shm_create(g_name, &lim, err);
    cr_assert_not_null(g_m, "%s", err);
    g_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    sl_shm_set_eventfds(g_m, &g_efd, 1);
    g_w = sl_shm_attach(g_name, SL_SHM_ROLE_WORKER, 0, err);
    g_fe = sl_shm_attach(g_name, SL_SHM_ROLE_FRONTEND, 0, err);
    cr_assert(g_w && g_fe, "%s", err);
    sl_shm_set_eventfds(g_w, &g_efd, 1);
    sl_shm_set_eventfds(g_fe, &g_efd, 1);
    sl_shm_set_worker_state(g_w, SL_WORKER_STATE_READY, "test");
    memset(&g_fe_state, 0, sizeof g_fe_state);
    g_fe_state.shm = g_fe;
    g_fe_state.tok = g_tok;
    g_fe_state.tool_format = SL_TOOL_FORMAT_HERMES;
    g_fe_state.tool_markers[0] = g_fe_state.tool_markers[1] = -1;
}

static void teardown(void)
{
    free(g_fe_state.pending);
    sl_shm_detach(g_fe);
    sl_shm_detach(g_w);
    sl_shm_destroy(g_m);
    close(g_efd);
    sl_tokenizer_destroy(g_tok);
    sl_gguf_close(g_gguf);
}

TestSuite(choice, .init = setup, .fini = teardown);

/* ---------------------------------------------------------------- helpers */

static int64_t tokenize(const char *s, int32_t *out, size_t cap)
{
    int64_t n = sl_tokenize(g_tok, s, strlen(s), out, cap);
    cr_assert(n > 0 && (size_t)n <= cap);
    return n;
}

static void parse(sl_api_request *r, sl_api_endpoint ep, const char *body)
{
    sl_api_error e;
    cr_assert_eq(sl_api_request_parse(r, ep, body, strlen(body), sl_tokenizer_n_vocab(g_tok), &e), SL_OK, "%s: %s",
                 body, e.message);
}

static sl_shm_ticket submit(const sl_api_request *r, const int32_t *prompt, uint32_t n, int32_t max_tokens)
{
    sl_shm_request sr;
    memset(&sr, 0, sizeof sr);
    sr.params = r->sampling;
    sr.max_tokens = max_tokens;
    sr.prompt = prompt;
    sr.n_prompt = n;
    sr.echo_logprobs = r->echo && r->logprobs;
    sl_shm_ticket t;
    cr_assert_eq(sl_shm_submit(g_fe, &sr, &t), SL_OK);
    sl_shm_ticket w;
    cr_assert_eq(sl_shm_worker_pop(g_w, &w), SL_OK);
    cr_assert_eq(w.index, t.index);
    return t;
}

/* The fake worker's token: its record has the token itself as the only
 * alternative, with logprob -(k + 1) for the k-th entry pushed. */
static void push(sl_shm_ticket t, int32_t tok, int k)
{
    sl_logprob_record rec;
    memset(&rec, 0, sizeof rec);
    rec.token = tok;
    rec.logprob = -(float)(k + 1);
    rec.n_top = 1;
    rec.top[0].token = tok;
    rec.top[0].logprob = rec.logprob;
    cr_assert_eq(sl_shm_worker_push(g_w, t, tok, &rec), SL_OK);
}

/* Reads c until its mailbox is terminal or its text ended, then ends it. */
static void run_to_end(sl_fe_choice *c)
{
    bool terminal = false;
    for (int spins = 0; !terminal && !c->stop_hit; spins++) {
        cr_assert_lt(spins, 100);
        cr_assert_eq(sl_fe_choice_read(c, UINT32_MAX, &terminal), SL_OK);
        cr_assert_not(c->oom);
    }
    sl_api_error e;
    bool flush = false;
    cr_assert(sl_fe_choice_end(c, false, &e, &flush), "%s", e.message);
}

static json_t *whole_choice(const sl_fe_choice *c)
{
    sl_api_result r;
    sl_fe_choice_result(c, &r);
    r.id = "cmpl-x";
    r.model = "m";
    char *s = sl_api_response_build(&r);
    json_error_t je;
    json_t *o = json_loads(s, 0, &je);
    free(s);
    cr_assert_not_null(o);
    json_t *ch = json_incref(json_array_get(json_object_get(o, "choices"), 0));
    json_decref(o);
    return ch;
}

#define PROMPT "Once upon a time"
#define GEN " there was"

/* ---------------------------------------------------------------- echo */

Test(choice, echo_text_and_logprobs_whole_n2)
{
    int32_t p[32], g[32];
    int64_t np = tokenize(PROMPT, p, 32), ng = tokenize(GEN, g, 32);
    sl_api_request r;
    parse(&r, SL_API_ENDPOINT_COMPLETIONS, "{\"prompt\":\"" PROMPT "\",\"echo\":true,\"logprobs\":1,\"n\":2}");
    sl_fe_choice c[2];
    for (int i = 0; i < 2; i++) {
        sl_shm_ticket t = submit(&r, p, (uint32_t)np, (int32_t)ng);
        cr_assert_eq(sl_fe_choice_init(&c[i], &g_fe_state, &r, i, t, 0, false, p, (uint32_t)np), SL_OK);
        int k = 0;
        for (int64_t j = 1; j < np; j++)
            push(t, p[j], k++);                 /* the prompt's scores lead the ring */
        for (int64_t j = 0; j < ng; j++)
            push(t, g[j], k++);
        sl_shm_worker_finish(g_w, t, SL_FINISH_REASON_LENGTH, NULL);
    }
    for (int i = 0; i < 2; i++) {
        run_to_end(&c[i]);
        cr_expect_eq(c[i].n_generated, ng, "prompt entries are not generated tokens");
        json_t *ch = whole_choice(&c[i]);
        cr_expect_str_eq(json_string_value(json_object_get(ch, "text")), PROMPT GEN);
        cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
        json_t *lp = json_object_get(ch, "logprobs");
        json_t *toks = json_object_get(lp, "tokens"), *tl = json_object_get(lp, "token_logprobs");
        json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
        cr_assert_eq((int64_t)json_array_size(toks), np + ng);
        cr_expect(json_is_null(json_array_get(tl, 0)) && json_is_null(json_array_get(top, 0)));
        size_t at = 0;
        char joined[256] = "";
        for (int64_t j = 0; j < np + ng; j++) {
            if (j > 0)
                cr_expect_float_eq(json_number_value(json_array_get(tl, (size_t)j)), -(double)j, 1e-6);
            cr_expect_eq((size_t)json_integer_value(json_array_get(off, (size_t)j)), at);
            at += strlen(json_string_value(json_array_get(toks, (size_t)j)));
            strcat(joined, json_string_value(json_array_get(toks, (size_t)j)));
        }
        cr_expect_str_eq(joined, PROMPT GEN);
        json_decref(ch);
        sl_fe_choice_fini(&c[i]);
    }
    sl_api_request_fini(&r);
}

Test(choice, echo_streams_the_prompt_first)
{
    int32_t p[32], g[32];
    int64_t np = tokenize(PROMPT, p, 32), ng = tokenize(GEN, g, 32);
    sl_api_request r;
    parse(&r, SL_API_ENDPOINT_COMPLETIONS, "{\"prompt\":\"" PROMPT "\",\"echo\":true,\"logprobs\":1,\"stream\":true}");
    sl_shm_ticket t = submit(&r, p, (uint32_t)np, (int32_t)ng);
    sl_fe_choice c;
    cr_assert_eq(sl_fe_choice_init(&c, &g_fe_state, &r, 0, t, 0, false, p, (uint32_t)np), SL_OK);
    sl_api_chunk tmpl = {.endpoint = SL_API_ENDPOINT_COMPLETIONS, .id = "cmpl-x", .model = "m"};
    sl_fe_buf out = {0};
    /* before any token: the prompt's text and its first (unscored) entry */
    bool terminal = false;
    cr_assert_eq(sl_fe_choice_read(&c, UINT32_MAX, &terminal), SL_OK);
    cr_assert(sl_fe_choice_out_progress(&c, &tmpl, &out));
    cr_assert_not_null(out.p);
    cr_expect_not_null(strstr(out.p, "\"text\":\"" PROMPT "\""), "%s", out.p);
    cr_expect_not_null(strstr(out.p, "\"token_logprobs\":[null]"), "%s", out.p);
    out.len = 0;
    int k = 0;
    for (int64_t j = 1; j < np; j++)
        push(t, p[j], k++);
    for (int64_t j = 0; j < ng; j++)
        push(t, g[j], k++);
    sl_shm_worker_finish(g_w, t, SL_FINISH_REASON_LENGTH, NULL);
    cr_assert_eq(sl_fe_choice_read(&c, UINT32_MAX, &terminal), SL_OK);
    cr_assert(terminal);
    sl_api_error e;
    bool flush;
    cr_assert(sl_fe_choice_end(&c, true, &e, &flush));
    cr_assert(sl_fe_choice_out_final(&c, &tmpl, NULL, &out));
    /* the rest: the prompt's scored entries, then the generated text */
    cr_expect_not_null(strstr(out.p, "\"text\":\"" GEN "\""), "%s", out.p);
    cr_expect_null(strstr(out.p, PROMPT), "the prompt went out once: %s", out.p);
    cr_expect_not_null(strstr(out.p, "\"finish_reason\":\"length\""), "%s", out.p);
    sl_fe_buf_fini(&out);
    sl_fe_choice_fini(&c);
    sl_api_request_fini(&r);
}

Test(choice, echo_token_prompt_and_max_tokens_0)
{
    int32_t p[32];
    int64_t np = tokenize(PROMPT, p, 32);
    char body[512];
    int n = snprintf(body, sizeof body, "{\"echo\":true,\"max_tokens\":0,\"prompt\":[");
    for (int64_t j = 0; j < np; j++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%d", j ? "," : "", (int)p[j]);
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    sl_api_request r;
    parse(&r, SL_API_ENDPOINT_COMPLETIONS, body);
    /* without logprobs the mailbox has a budget of 1 and is cancelled at once */
    sl_shm_ticket t = submit(&r, p, (uint32_t)np, 1);
    sl_fe_choice c;
    cr_assert_eq(sl_fe_choice_init(&c, &g_fe_state, &r, 0, t, 0, false, p, (uint32_t)np), SL_OK);
    cr_expect(sl_shm_worker_cancelled(g_w, t));
    push(t, p[0], 0);                           /* made before the worker saw the cancel: dropped */
    sl_shm_worker_finish(g_w, t, SL_FINISH_REASON_CANCELLED, NULL);
    run_to_end(&c);
    cr_expect_eq(c.n_generated, 0);
    json_t *ch = whole_choice(&c);
    cr_expect_str_eq(json_string_value(json_object_get(ch, "text")), PROMPT);
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_decref(ch);
    sl_fe_choice_fini(&c);
    sl_api_request_fini(&r);
}

/* ---------------------------------------------------------------- parallel_tool_calls */

#define CALL(city) "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" city "\"}}\n</tool_call>\n"
#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]"

static void two_calls(bool parallel, bool stream, int *n_calls, bool *cancelled, char *content, size_t cap)
{
    int32_t g[256];
    int64_t ng = tokenize(CALL("Paris") CALL("Rome") "After.", g, 256);
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
             ",\"tool_choice\":\"auto\",\"parallel_tool_calls\":%s,\"stream\":%s}", parallel ? "true" : "false",
             stream ? "true" : "false");
    sl_api_request r;
    parse(&r, SL_API_ENDPOINT_CHAT, body);
    int32_t p[1] = {g[0]};
    sl_shm_ticket t = submit(&r, p, 1, 200);
    sl_fe_choice c;
    cr_assert_eq(sl_fe_choice_init(&c, &g_fe_state, &r, 0, t, 0, false, p, 1), SL_OK);
    for (int64_t j = 0; j < ng; j++)
        push(t, g[j], (int)j);
    *cancelled = false;
    bool terminal = false;
    cr_assert_eq(sl_fe_choice_read(&c, UINT32_MAX, &terminal), SL_OK);
    *cancelled = sl_shm_worker_cancelled(g_w, t) != 0;
    sl_shm_worker_finish(g_w, t, *cancelled ? SL_FINISH_REASON_CANCELLED : SL_FINISH_REASON_STOP, NULL);
    run_to_end(&c);
    cr_expect_eq(c.fin, SL_API_FINISH_TOOL_CALLS);
    *n_calls = c.n_calls;
    content[0] = '\0';
    if (stream) {
        sl_api_chunk tmpl = {.endpoint = SL_API_ENDPOINT_CHAT, .id = "chatcmpl-x", .model = "m"};
        sl_fe_buf out = {0};
        cr_assert(sl_fe_choice_out_final(&c, &tmpl, NULL, &out));
        snprintf(content, cap, "%s", out.p ? out.p : "");
        sl_fe_buf_fini(&out);
    } else {
        snprintf(content, cap, "%s", c.text.p ? c.text.p : "");
        cr_expect_eq((int)json_array_size(c.calls), c.n_calls);
    }
    sl_fe_choice_fini(&c);
    sl_api_request_fini(&r);
}

Test(choice, parallel_tool_calls_false_ends_at_the_first_call)
{
    for (int stream = 0; stream < 2; stream++) {
        int n;
        bool cancelled;
        char text[8192];
        two_calls(true, stream, &n, &cancelled, text, sizeof text);
        cr_expect_eq(n, 2);
        cr_expect_not(cancelled);
        cr_expect_not_null(strstr(text, "After."));
        two_calls(false, stream, &n, &cancelled, text, sizeof text);
        cr_expect_eq(n, 1, "stream %d", stream);
        cr_expect(cancelled, "the sequence is stopped at the first call, as at a stop string");
        cr_expect_null(strstr(text, "After."), "what came after the call is dropped: %s", text);
        cr_expect_null(strstr(text, "Rome"), "%s", text);
    }
}
