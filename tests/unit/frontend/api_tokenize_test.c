/* tests/unit/frontend/api_tokenize_test.c: frontend/api_tokenize.c with the
 * real Llama 2 SentencePiece vocabulary from tests/data (its ids are
 * from llama.cpp's test vectors: "Hello world" = 15043 3186, BOS = 1). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_response.h"
#include "frontend/api_tokenize.h"
#include "model/gguf.h"

static sl_gguf *g;
static sl_tokenizer *tok;

static void setup(void)
{
    const char *path = SL_TESTDATA_DIR "/vocab/ggml-vocab-llama-spm.gguf";
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_gguf_open(path, &g, err), SL_OK, "%s", err);
    cr_assert_eq(sl_tokenizer_create(g, &tok, err), SL_OK, "%s", err);
}

static void teardown(void)
{
    sl_tokenizer_destroy(tok);
    sl_gguf_close(g);
}

TestSuite(api_tokenize, .init = setup, .fini = teardown);

static json_t *tokenize(const char *body)
{
    sl_api_tokenize_req r;
    sl_api_error e;
    cr_assert_eq(sl_api_tokenize_parse(&r, body, strlen(body), &e), SL_OK, "%s", e.message);
    char *out;
    cr_assert_eq(sl_api_tokenize_respond(tok, &r, 0, &out, &e), SL_OK, "%s", e.message);
    sl_api_tokenize_fini(&r);
    json_t *o = json_loads(out, 0, NULL);
    cr_assert_not_null(o, "%s", out);
    free(out);
    return o;
}

static void expect_ids(json_t *o, const int *ids, size_t n)
{
    json_t *a = json_object_get(o, "tokens");
    cr_assert_eq(json_array_size(a), n, "got %zu tokens", json_array_size(a));
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(json_integer_value(json_array_get(a, i)), ids[i], "token %zu", i);
}

Test(api_tokenize, plain_content)
{
    json_t *o = tokenize("{\"content\":\"Hello world\"}");
    expect_ids(o, (int[]){15043, 3186}, 2);
    json_decref(o);
}

Test(api_tokenize, add_special_prepends_bos)
{
    json_t *o = tokenize("{\"content\":\"Hello world\",\"add_special\":true}");
    expect_ids(o, (int[]){1, 15043, 3186}, 3);
    json_decref(o);
}

Test(api_tokenize, parse_special_decides_control_tokens)
{
    json_t *o = tokenize("{\"content\":\"<s>\"}");
    expect_ids(o, (int[]){1}, 1);
    json_decref(o);
    o = tokenize("{\"content\":\"<s>\",\"parse_special\":false}");
    json_t *a = json_object_get(o, "tokens");
    cr_expect_gt(json_array_size(a), 1);
    for (size_t i = 0; i < json_array_size(a); i++)
        cr_expect_neq(json_integer_value(json_array_get(a, i)), 1);
    json_decref(o);
}

Test(api_tokenize, with_pieces_gives_strings_or_bytes)
{
    json_t *o = tokenize("{\"content\":\"Hello \xf0\x9f\xa6\x99\",\"with_pieces\":true}");
    json_t *a = json_object_get(o, "tokens");
    cr_assert_geq(json_array_size(a), 3);
    json_t *t0 = json_array_get(a, 0);
    cr_expect_eq(json_integer_value(json_object_get(t0, "id")), 15043);
    /* a piece keeps its leading space (SentencePiece's U+2581), as llama-server shows it */
    cr_expect_str_eq(json_string_value(json_object_get(t0, "piece")), " Hello");
    /* the llama is four <0xNN> byte tokens: each piece alone is one raw byte */
    size_t n = json_array_size(a);
    json_t *last = json_array_get(a, n - 1);
    json_t *p = json_object_get(last, "piece");
    cr_assert(json_is_array(p), "byte piece should be a byte array");
    cr_expect_eq(json_array_size(p), 1);
    cr_expect_eq(json_integer_value(json_array_get(p, 0)), 0x99);
    json_decref(o);
}

Test(api_tokenize, empty_content_gives_no_tokens)
{
    json_t *o = tokenize("{\"content\":\"\"}");
    expect_ids(o, NULL, 0);
    json_decref(o);
}

Test(api_tokenize, long_content_uses_the_heap_path)
{
    size_t n = 3000;
    char *body = malloc(n * 6 + 32);
    size_t k = (size_t)sprintf(body, "{\"content\":\"");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(body + k, "%s", i ? " world" : "world");
    sprintf(body + k, "\"}");
    json_t *o = tokenize(body);
    cr_expect_geq(json_array_size(json_object_get(o, "tokens")), n);
    json_decref(o);
    free(body);
}

Test(api_tokenize, bad_tokenize_bodies)
{
    static const struct { const char *body; const char *param; } t[] = {
        {"", NULL}, {"[]", NULL}, {"{\"content\":\"\xff\"}", NULL},
        {"{}", "content"}, {"{\"content\":5}", "content"}, {"{\"content\":null}", "content"},
        {"{\"content\":\"a\",\"add_special\":\"yes\"}", "add_special"},
        {"{\"content\":\"a\",\"with_pieces\":1}", "with_pieces"},
        {"{\"content\":\"a\",\"parse_special\":[]}", "parse_special"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sl_api_tokenize_req r;
        sl_api_error e;
        cr_expect_eq(sl_api_tokenize_parse(&r, t[i].body, strlen(t[i].body), &e), SL_EINVAL, "%s", t[i].body);
        cr_expect_eq(sl_api_error_http_status(e.kind), 400);
        cr_expect_str_eq(e.param, t[i].param ? t[i].param : "", "%s", t[i].body);
        cr_expect_null(r._root);
        sl_api_tokenize_fini(&r);
    }
}

static char *detokenize(const char *body)
{
    sl_api_detokenize_req r;
    sl_api_error e;
    cr_assert_eq(sl_api_detokenize_parse(&r, body, strlen(body), sl_tokenizer_n_vocab(tok), &e), SL_OK,
                 "%s", e.message);
    char *out;
    cr_assert_eq(sl_api_detokenize_respond(tok, &r, 0, &out, &e), SL_OK);
    sl_api_detokenize_fini(&r);
    return out;
}

Test(api_tokenize, detokenize_round_trip)
{
    char *s = detokenize("{\"tokens\":[15043,3186]}");
    cr_expect_str_eq(s, "{\"content\":\"Hello world\"}");
    free(s);
    /* "▁" then the llama as four byte tokens; the one leading space of the
     * output is dropped, as HF's decoder does for this vocabulary */
    s = detokenize("{\"tokens\":[29871,243,162,169,156]}");
    json_t *o = json_loads(s, 0, NULL);
    cr_expect_str_eq(json_string_value(json_object_get(o, "content")), "\xf0\x9f\xa6\x99");
    json_decref(o);
    free(s);
    s = detokenize("{\"tokens\":[243]}");   /* half a character: U+FFFD, still valid JSON */
    o = json_loads(s, 0, NULL);
    cr_expect_str_eq(json_string_value(json_object_get(o, "content")), "\xef\xbf\xbd");
    json_decref(o);
    free(s);
    s = detokenize("{\"tokens\":[]}");
    cr_expect_str_eq(s, "{\"content\":\"\"}");
    free(s);
}

Test(api_tokenize, bad_detokenize_bodies)
{
    static const char *const t[] = {
        "{}", "{\"tokens\":5}", "{\"tokens\":[\"a\"]}", "{\"tokens\":[-1]}",
        "{\"tokens\":[32000]}", "{\"tokens\":[1.5]}", "{\"tokens\":[1,99999999999]}", "{\"tokens\":null}",
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sl_api_detokenize_req r;
        sl_api_error e;
        cr_expect_eq(sl_api_detokenize_parse(&r, t[i], strlen(t[i]), sl_tokenizer_n_vocab(tok), &e),
                     SL_EINVAL, "%s", t[i]);
        cr_expect_str_eq(e.param, "tokens", "%s", t[i]);
        cr_expect_null(r.tokens);
        sl_api_detokenize_fini(&r);
    }
}

/* api_response.c's record -> text conversion needs a real tokenizer, so it
 * is checked here. */
Test(api_tokenize, logprob_record_texts_are_raw_token_bytes)
{
    sl_logprob_record rec = {.token = 15043, .logprob = -0.5f, .n_top = 2};
    rec.top[0].token = 15043;
    rec.top[0].logprob = -0.5f;
    rec.top[1].token = 243;      /* <0xF0> */
    rec.top[1].logprob = -3.0f;
    size_t cap = 3 * sl_detok_max_piece(tok);
    char *scratch = malloc(cap);
    sl_api_token_logprob t;
    cr_assert_eq(sl_api_token_logprob_from_record(&t, &rec, tok, scratch, cap), SL_OK);
    cr_expect_eq(t.chosen.len, 6);
    cr_expect(memcmp(t.chosen.text, " Hello", 6) == 0);
    cr_expect_float_eq(t.chosen.logprob, -0.5f, 0);
    cr_expect_eq(t.n_top, 2);
    cr_expect_eq(t.top[1].len, 1);
    cr_expect_eq((unsigned char)t.top[1].text[0], 0xF0);
    cr_expect_eq(sl_api_token_logprob_from_record(&t, &rec, tok, scratch, 1), SL_ERANGE);
    free(scratch);
}
