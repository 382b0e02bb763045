/* tests/unit/model/tokenizer_vocab_json_test.c: tokenizer.json -> GGUF keys
 * (model/vocab_json.c): small crafted files, bad ones refused naming the
 * field, and the real Mistral and Qwen 3 files round-tripping into a
 * working tokenizer. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/vocab_json.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Converts json (and config) and loads the result; returns the tokenizer or
 * NULL with err set. */
static sl_tokenizer *convert(const char *json_path, const char *cfg_path, sl_status *rc_out,
                             char err[SL_ERR_LEN])
{
    char out[] = "/tmp/sl_vj_XXXXXX";
    int fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    close(fd);
    sl_gguf_writer *w = sl_gguf_writer_create();
    sl_status rc = sl_vocab_json_to_gguf(json_path, cfg_path, w, err);
    sl_tokenizer *t = NULL;
    if (rc == SL_OK) {
        cr_assert_eq(sl_gguf_writer_begin(w, out, err), SL_OK, "%s", err);
        cr_assert_eq(sl_gguf_writer_finish(w, err), SL_OK, "%s", err);
        sl_gguf *g;
        cr_assert_eq(sl_gguf_open(out, &g, err), SL_OK, "%s", err);
        rc = sl_tokenizer_create(g, &t, err);
        sl_gguf_close(g);
    }
    sl_gguf_writer_destroy(w);
    unlink(out);
    *rc_out = rc;
    return t;
}

static const char *k_small_spm =
    "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true,"
    " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"\\u2581\": 3, \"h\": 4, \"i\": 5,"
    " \"hi\": 6, \"\\u2581hi\": 7, \"<0x21>\": 8},"
    " \"merges\": [\"h i\", \"\\u2581 hi\"]},"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
    " {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
    " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
    " \"pre_tokenizer\": null, \"decoder\": null, \"post_processor\": null}";

Test(vocab_json, small_sentencepiece_round_trip)
{
    char jp[] = "/tmp/sl_vj_json_XXXXXX", cp[] = "/tmp/sl_vj_cfg_XXXXXX", err[SL_ERR_LEN];
    close(mkstemp(jp));
    close(mkstemp(cp));
    write_file(jp, k_small_spm);
    write_file(cp, "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}, \"add_bos_token\": true,"
                   " \"model_max_length\": 1000000000000000019884624838656, \"chat_template\": \"{{ x }}\"}");
    sl_status rc;
    sl_tokenizer *t = convert(jp, cp, &rc, err);
    cr_assert_eq(rc, SL_OK, "%s", err);
    int32_t ids[8];
    cr_assert_eq(sl_tokenize(t, "hi!", 3, ids, 8), 2);
    cr_assert_eq(ids[0], 7);   /* U+2581 prefix, then merges h+i, U+2581+hi */
    cr_assert_eq(ids[1], 8);   /* '!' only as a byte token */
    cr_assert_eq(sl_tokenizer_bos(t), 1);
    cr_assert_eq(sl_tokenizer_eos(t), 2);
    cr_assert(sl_tokenizer_add_bos(t));
    cr_assert_eq(sl_tokenizer_attr(t, 0), SL_TOKEN_ATTR_UNKNOWN);
    cr_assert_eq(sl_tokenizer_attr(t, 1), SL_TOKEN_ATTR_CONTROL);
    cr_assert_eq(sl_tokenizer_attr(t, 8), SL_TOKEN_ATTR_BYTE);
    char out[64];
    size_t n = sl_detokenize(t, ids, 2, false, out, sizeof out);
    cr_assert_eq(n, 3);
    cr_assert(memcmp(out, "hi!", 3) == 0);
    sl_tokenizer_destroy(t);
    unlink(jp);
    unlink(cp);
}

static void expect_refused(const char *json, const char *needle)
{
    char jp[] = "/tmp/sl_vj_json_XXXXXX", err[SL_ERR_LEN];
    close(mkstemp(jp));
    write_file(jp, json);
    sl_status rc;
    sl_tokenizer *t = convert(jp, NULL, &rc, err);
    unlink(jp);
    cr_assert_null(t);
    cr_assert_lt(rc, 0);
    cr_assert(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
}

Test(vocab_json, refuses_bad_files)
{
    expect_refused("{ not json", "sl_vj_json_");
    expect_refused("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model.type");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}", "model.vocab");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}", "model.merges");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                   " \"added_tokens\": [{\"id\": -1, \"content\": \"x\"}]}", "added_tokens");
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                   " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"zzz\"}},"
                   " \"decoder\": {\"type\": \"ByteLevel\"}}", "pre_tokenizer");
    /* merges naming tokens that do not exist: refused when the GGUF loads */
    expect_refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a q\"]}}",
                   "tokenizer.ggml.merges");
}

static sl_tokenizer *convert_real(const char *name, char err[SL_ERR_LEN])
{
    char jp[1024], cfg[1024];
    snprintf(jp, sizeof jp, "%s/tokenizers/%s/tokenizer.json", SL_TESTDATA_DIR, name);
    snprintf(cfg, sizeof cfg, "%s/tokenizers/%s/tokenizer_config.json", SL_TESTDATA_DIR, name);
    sl_status rc;
    sl_tokenizer *t = convert(jp, cfg, &rc, err);
    cr_assert_eq(rc, SL_OK, "%s: %s", name, err);
    return t;
}

Test(vocab_json, real_mistral_and_qwen3)
{
    char err[SL_ERR_LEN];
    sl_tokenizer *t = convert_real("mistral", err);
    int32_t ids[16];
    cr_assert_eq(sl_tokenize(t, "\n", 1, ids, 16), 2);   /* U+2581, then <0x0A> */
    cr_assert_eq(ids[0], 28705);
    cr_assert_eq(ids[1], 13);
    cr_assert_eq(sl_tokenizer_bos(t), 1);
    cr_assert(sl_tokenizer_is_eog(t, 2));
    sl_tokenizer_destroy(t);

    t = convert_real("qwen3", err);
    int32_t im_end = sl_tokenizer_find(t, "<|im_end|>", 10);
    cr_assert_geq(im_end, 0);
    cr_assert(sl_tokenizer_is_eog(t, im_end));
    cr_assert_eq(sl_tokenizer_attr(t, im_end), SL_TOKEN_ATTR_CONTROL);
    cr_assert_eq(sl_tokenizer_attr(t, sl_tokenizer_find(t, "<think>", 7)), SL_TOKEN_ATTR_USER_DEFINED);
    cr_assert_eq(sl_tokenizer_bos(t), -1);
    cr_assert_not(sl_tokenizer_add_bos(t));
    int64_t n = sl_tokenize(t, "<|im_end|>", 10, ids, 16);
    cr_assert_gt(n, 1);
    for (int64_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], im_end);
    sl_tokenizer_destroy(t);
}

/* A minimum token count pads the list with [PAD<id>] tokens of type UNUSED
 * (an embedding wider than the tokenizer); tokenizing is unchanged. */
Test(vocab_json, padded_to_a_minimum)
{
    char jp[] = "/tmp/sl_vj_json_XXXXXX", out[] = "/tmp/sl_vj_pad_XXXXXX", err[SL_ERR_LEN];
    close(mkstemp(jp));
    close(mkstemp(out));
    write_file(jp, k_small_spm);
    sl_gguf_writer *w = sl_gguf_writer_create();
    cr_assert_eq(sl_vocab_json_to_gguf_min(jp, NULL, 20, w, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_arr_len(w, "tokenizer.ggml.tokens"), 20);
    cr_assert_eq(sl_gguf_writer_arr_len(w, "tokenizer.ggml.token_type"), 20);
    cr_assert_eq(sl_gguf_writer_arr_len(w, "tokenizer.ggml.scores"), 20);
    cr_assert_eq(sl_gguf_writer_begin(w, out, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_finish(w, err), SL_OK, "%s", err);
    sl_gguf_writer_destroy(w);
    sl_gguf *g;
    sl_tokenizer *t;
    cr_assert_eq(sl_gguf_open(out, &g, err), SL_OK, "%s", err);
    cr_assert_eq(sl_tokenizer_create(g, &t, err), SL_OK, "%s", err);
    sl_gguf_close(g);
    cr_assert_eq(sl_tokenizer_n_vocab(t), 20);
    cr_assert_eq(sl_tokenizer_attr(t, 19), SL_TOKEN_ATTR_UNUSED);
    size_t len = 0;
    const char *pad = sl_tokenizer_text(t, 19, &len);
    cr_assert(pad && len == 7 && !memcmp(pad, "[PAD19]", 7));
    int32_t ids[8];
    cr_assert_eq(sl_tokenize(t, "hi!", 3, ids, 8), 2);
    cr_assert_eq(ids[0], 7);
    /* a minimum below the file's count changes nothing */
    sl_gguf_writer *w2 = sl_gguf_writer_create();
    cr_assert_eq(sl_vocab_json_to_gguf_min(jp, NULL, 3, w2, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_arr_len(w2, "tokenizer.ggml.tokens"), 9);
    sl_gguf_writer_destroy(w2);
    sl_tokenizer_destroy(t);
    unlink(jp);
    unlink(out);
}
