/* tests/fuzz/fuzz_request.c: libFuzzer target `request`: the fuzzed bytes
 * are a request body for POST /v1/chat/completions and for
 * POST /v1/completions, taken through what a front end does with it
 * (frontend/stream.c sl_fe_generate): sl_api_request_parse, then for a
 * parsed request the default model's chat template and the tokenizer (the
 * prompt), the error body for a refused one, and the stop-string matcher
 * fed the prompt text in pieces.
 * Checks beyond "no crash": a parsed request keeps the header's promises
 * (n in 1..16, stop strings 1..256 bytes, one prompt form), a refusal has a
 * message and a 4xx/5xx body, and the matcher emits a prefix of its input
 * that holds no stop string. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_request.h"
#include "frontend/api_stop.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "tests/fuzz/fuzz_common.h"

static sl_tokenizer *tok;
static sl_chat_template *tmpl;
static char bos[64], eos[64];
static int32_t n_vocab;

#define CHECK(cond)                                                                                  \
    do {                                                                                             \
        if (!(cond)) {                                                                               \
            fprintf(stderr, "fuzz_request: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                                 \
        }                                                                                            \
    } while (0)

static void token_text(int32_t id, char out[64])
{
    size_t len = 0;
    const char *s = id >= 0 ? sl_tokenizer_text(tok, id, &len) : NULL;
    snprintf(out, 64, "%.*s", s ? (int)len : 0, s ? s : "");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[SL_ERR_LEN];
    tok = fz_tokenizer_default();
    n_vocab = sl_tokenizer_n_vocab(tok);
    token_text(sl_tokenizer_bos(tok), bos);
    token_text(sl_tokenizer_eos(tok), eos);
    sl_gguf *g;
    if (sl_gguf_open(fz_default_model_path(), &g, err) != SL_OK)
        abort();
    sl_gguf_str s;
    const char *src = sl_chat_template_builtin("chatml");
    size_t len = strlen(src);
    if (sl_gguf_get_str(g, "tokenizer.chat_template", &s) == SL_OK) {
        src = s.ptr;
        len = s.len;
    }
    if (sl_chat_template_compile(src, len, &tmpl, err) != SL_OK) {
        fprintf(stderr, "fuzz_request: default template: %s\n", err);
        abort();
    }
    sl_gguf_close(g);
    return 0;
}

/* Feeds text to the matcher in pieces whose sizes come from the text itself,
 * and checks what comes out. */
static void run_stop(const sl_api_request *r, const char *text, size_t len)
{
    sl_api_stop st;
    if (sl_api_stop_init(&st, r->stop, r->stop_len, r->n_stop) != SL_OK)
        return;
    char *out = malloc(len + 1);
    size_t n_out = 0, off = 0;
    CHECK(out != NULL);
    while (off < len && !st.hit) {
        size_t piece = 1 + (uint8_t)text[off] % 7;
        if (piece > len - off)
            piece = len - off;
        const char *emit;
        size_t emit_len;
        if (sl_api_stop_push(&st, text + off, piece, &emit, &emit_len) != SL_OK)
            break;
        CHECK(n_out + emit_len <= len);
        memcpy(out + n_out, emit, emit_len);
        n_out += emit_len;
        off += piece;
    }
    const char *emit;
    size_t emit_len;
    sl_api_stop_flush(&st, &emit, &emit_len);
    CHECK(n_out + emit_len <= len);
    memcpy(out + n_out, emit, emit_len);
    n_out += emit_len;
    CHECK(memcmp(out, text, n_out) == 0);
    if (!st.hit)
        CHECK(n_out == off);
    for (int i = 0; i < r->n_stop; i++)
        CHECK(memmem(out, n_out, r->stop[i], r->stop_len[i]) == NULL);
    free(out);
    sl_api_stop_fini(&st);
}

static void tokenize_prompt(const char *text, size_t len, const sl_tok_span *spans, size_t n_spans, bool add_special)
{
    size_t cap = len / 2 + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    CHECK(ids != NULL);
    int64_t n = sl_tokenize_rendered(tok, text, len, spans, n_spans, add_special, ids, cap);
    CHECK(n >= 0);
    if ((size_t)n > cap) {
        free(ids);
        cap = (size_t)n;
        ids = malloc(cap * sizeof *ids);
        CHECK(ids != NULL);
        CHECK(sl_tokenize_rendered(tok, text, len, spans, n_spans, add_special, ids, cap) == n);
    }
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] >= 0 && ids[i] < n_vocab);
    free(ids);
}

static void run_parsed(const sl_api_request *r)
{
    CHECK(r->n >= 1 && r->n <= SL_API_N_MAX);
    CHECK(r->n_stop >= 0 && r->n_stop <= SL_API_STOP_MAX);
    for (int i = 0; i < r->n_stop; i++)
        CHECK(r->stop[i] != NULL && r->stop_len[i] >= 1 && r->stop_len[i] <= SL_API_STOP_LEN_MAX);
    if (r->endpoint == SL_API_ENDPOINT_COMPLETIONS) {
        CHECK(r->messages == NULL);
        CHECK((r->prompt != NULL) != (r->prompt_tokens != NULL));
        for (size_t i = 0; r->prompt_tokens && i < r->n_prompt_tokens; i++)
            CHECK(r->prompt_tokens[i] >= 0 && r->prompt_tokens[i] < n_vocab);
        if (r->prompt != NULL) {
            sl_tok_span all = {0, r->prompt_len};
            tokenize_prompt(r->prompt, r->prompt_len, &all, 1, true);
            run_stop(r, r->prompt, r->prompt_len);
        }
        return;
    }
    CHECK(json_is_array(r->messages));
    char err[SL_ERR_LEN] = "";
    sl_chat_render_result rr;
    memset(&rr, 0, sizeof rr);
    sl_chat_render_opts opts = {.has_now = true, .now = 1700000000};
    if (sl_chat_template_render(tmpl, r->messages, r->tools, true, bos, eos, &opts, &rr, err) != SL_OK)
        return;
    sl_tok_span *spans = malloc((rr.n_untrusted ? rr.n_untrusted : 1) * sizeof *spans);
    CHECK(spans != NULL);
    for (size_t i = 0; i < rr.n_untrusted; i++) {
        CHECK(rr.untrusted[i].start < rr.untrusted[i].end && rr.untrusted[i].end <= rr.len);
        CHECK(i == 0 || rr.untrusted[i - 1].end < rr.untrusted[i].start);
        spans[i] = (sl_tok_span){rr.untrusted[i].start, rr.untrusted[i].end - rr.untrusted[i].start};
    }
    tokenize_prompt(rr.text, rr.len, spans, rr.n_untrusted, false);
    run_stop(r, rr.text, rr.len);
    free(spans);
    sl_chat_render_result_fini(&rr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int ep = SL_API_ENDPOINT_CHAT; ep <= SL_API_ENDPOINT_COMPLETIONS; ep++) {
        sl_api_request r;
        sl_api_error e;
        memset(&r, 0, sizeof r);
        memset(&e, 0, sizeof e);
        sl_status rc = sl_api_request_parse(&r, (sl_api_endpoint)ep, (const char *)data, size, n_vocab, &e);
        if (rc == SL_OK) {
            CHECK(r.endpoint == (sl_api_endpoint)ep);
            run_parsed(&r);
        } else {
            CHECK(rc < 0);
            CHECK(e.message[0] != 0);
            int http = 0;
            char *body = sl_api_error_body(&e, &http);
            CHECK(body != NULL && http >= 400 && http < 600);
            json_t *j = json_loads(body, 0, NULL);
            CHECK(j != NULL);
            json_decref(j);
            free(body);
        }
        sl_api_request_fini(&r);
    }
    return 0;
}
