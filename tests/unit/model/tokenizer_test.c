/* tests/unit/model/tokenizer_test.c: the tokenizer on tiny hand-made
 * vocabularies (load errors name the key; specials only where allowed;
 * byte fallback; streaming decode) and on llama.cpp's real vocabularies from
 * tests/data/vocab (known ids, random bytes never crash). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/unit/model/test_vocab.h"

/* ---- helpers ---- */

static char tmp_path[64];

/* Finishes w into a temp file and builds a tokenizer from it. */
static sl_status build(sl_gguf_writer *w, sl_tokenizer **t, char err[SL_ERR_LEN])
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/sl_tok_XXXXXX");
    int fd = mkstemp(tmp_path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(sl_gguf_writer_begin(w, tmp_path, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_finish(w, err), SL_OK, "%s", err);
    sl_gguf_writer_destroy(w);
    sl_gguf *g;
    cr_assert_eq(sl_gguf_open(tmp_path, &g, err), SL_OK, "%s", err);
    sl_status rc = sl_tokenizer_create(g, t, err);
    sl_gguf_close(g);
    unlink(tmp_path);
    if (rc < 0)
        cr_assert_null(*t);
    return rc;
}

static size_t put_cp(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* A byte-level vocabulary: the 256 byte characters, then "ab", "abc",
 * <|end|> (control), <think> (user-defined); merges a+b, ab+c. */
static char bl_store[256][4];
static sl_gguf_writer *byte_level_writer(const char *merge2)
{
    static const char *extra[] = {"ab", "abc", "<|end|>", "<think>"};
    const char *toks[260];
    int32_t types[260];
    unsigned n_other = 0;
    for (unsigned b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        unsigned cp = keep ? b : 256 + n_other++;
        memset(bl_store[b], 0, 4);
        put_cp(bl_store[b], cp);
        toks[b] = bl_store[b];
        types[b] = SL_TOKEN_ATTR_NORMAL;
    }
    for (int i = 0; i < 4; i++) {
        toks[256 + i] = extra[i];
        types[256 + i] = SL_TOKEN_ATTR_NORMAL;
    }
    types[258] = SL_TOKEN_ATTR_CONTROL;
    types[259] = SL_TOKEN_ATTR_USER_DEFINED;
    const char *merges[] = {"a b", merge2};
    sl_gguf_writer *w = sl_gguf_writer_create();
    sl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    sl_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 260);
    sl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SL_GGUF_TYPE_INT32, types, 260);
    sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2);
    sl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 258);
    return w;
}

static sl_tokenizer *byte_level(void)
{
    char err[SL_ERR_LEN];
    sl_tokenizer *t = NULL;
    cr_assert_eq(build(byte_level_writer("ab c"), &t, err), SL_OK, "%s", err);
    return t;
}


static int64_t enc(const sl_tokenizer *t, const char *s, int32_t *out, size_t cap)
{
    return sl_tokenize(t, s, strlen(s), out, cap);
}

/* ---- load errors name the key ---- */

static void expect_refused(sl_gguf_writer *w, const char *key)
{
    char err[SL_ERR_LEN];
    sl_tokenizer *t = NULL;
    sl_status rc = build(w, &t, err);
    cr_assert_lt(rc, 0);
    cr_assert(strstr(err, key) != NULL, "error '%s' does not name '%s'", err, key);
}

Test(tokenizer, refuses_missing_model)
{
    sl_gguf_writer *w = sl_gguf_writer_create();
    const char *toks[] = {"a"};
    sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 1);
    expect_refused(w, "tokenizer.ggml.model");
}

Test(tokenizer, refuses_missing_tokens)
{
    sl_gguf_writer *w = sl_gguf_writer_create();
    sl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    expect_refused(w, "tokenizer.ggml.tokens");
}

Test(tokenizer, refuses_unknown_model)
{
    sl_gguf_writer *w = sl_gguf_writer_create();
    const char *toks[] = {"a"};
    sl_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 1);
    expect_refused(w, "tokenizer.ggml.model");
}

Test(tokenizer, refuses_merge_naming_unknown_token)
{
    expect_refused(byte_level_writer("ab zz"), "tokenizer.ggml.merges");
}

Test(tokenizer, refuses_merge_without_space)
{
    expect_refused(byte_level_writer("abc"), "tokenizer.ggml.merges");
}

Test(tokenizer, refuses_id_out_of_range)
{
    sl_gguf_writer *w = byte_level_writer("ab c");
    sl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 260);
    expect_refused(w, "tokenizer.ggml.bos_token_id");
}

Test(tokenizer, refuses_type_count_mismatch)
{
    sl_gguf_writer *w = byte_level_writer("ab c");
    int32_t types[3] = {1, 1, 1};
    sl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SL_GGUF_TYPE_INT32, types, 3);
    expect_refused(w, "tokenizer.ggml.token_type");
}

Test(tokenizer, refuses_bad_token_type)
{
    sl_gguf_writer *w = byte_level_writer("ab c");
    int32_t types[260];
    for (int i = 0; i < 260; i++)
        types[i] = i == 7 ? 42 : 1;
    sl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SL_GGUF_TYPE_INT32, types, 260);
    expect_refused(w, "tokenizer.ggml.token_type");
}

Test(tokenizer, refuses_unknown_pre)
{
    sl_gguf_writer *w = byte_level_writer("ab c");
    sl_gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    expect_refused(w, "tokenizer.ggml.pre");
}

Test(tokenizer, refuses_tokens_of_wrong_type)
{
    sl_gguf_writer *w = sl_gguf_writer_create();
    int32_t v[2] = {1, 2};
    sl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    sl_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", SL_GGUF_TYPE_INT32, v, 2);
    expect_refused(w, "tokenizer.ggml.tokens");
}

/* ---- encoding ---- */

Test(tokenizer, merges_apply_in_rank_order)
{
    sl_tokenizer *t = byte_level();
    int32_t ids[8];
    cr_assert_eq(enc(t, "abc", ids, 8), 1);
    cr_assert_eq(ids[0], 257);
    cr_assert_eq(enc(t, "abd", ids, 8), 2);
    cr_assert_eq(ids[0], 256);
    cr_assert_eq(ids[1], 'd');
    sl_tokenizer_destroy(t);
}

Test(tokenizer, count_may_exceed_cap)
{
    sl_tokenizer *t = byte_level();
    int32_t ids[2] = {-7, -7};
    cr_assert_eq(enc(t, "x y z", NULL, 0), 5);
    cr_assert_eq(enc(t, "x y z", ids, 1), 5);
    cr_assert_eq(ids[0], 'x');
    cr_assert_eq(ids[1], -7);
    sl_tokenizer_destroy(t);
}

Test(tokenizer, control_tokens_only_where_allowed)
{
    sl_tokenizer *t = byte_level();
    const char *s = "x<|end|>y";
    int32_t ids[32];
    int64_t n = sl_tokenize(t, s, strlen(s), ids, 32);
    for (int64_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 258, "plain text produced a control token");
    n = sl_tokenize_special(t, s, strlen(s), false, ids, 32);
    cr_assert_eq(n, 3);
    cr_assert_eq(ids[1], 258);
    /* untrusted range covering the token, or only part of it: plain text */
    sl_tok_span whole = {1, 7}, part = {5, 1}, before = {0, 1};
    n = sl_tokenize_rendered(t, s, strlen(s), &whole, 1, false, ids, 32);
    for (int64_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 258);
    n = sl_tokenize_rendered(t, s, strlen(s), &part, 1, false, ids, 32);
    for (int64_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 258);
    n = sl_tokenize_rendered(t, s, strlen(s), &before, 1, false, ids, 32);
    cr_assert_eq(n, 3);
    cr_assert_eq(ids[1], 258);
    sl_tokenizer_destroy(t);
}

Test(tokenizer, user_defined_tokens_match_in_plain_text)
{
    sl_tokenizer *t = byte_level();
    int32_t ids[16];
    cr_assert_eq(enc(t, "<think>", ids, 16), 1);
    cr_assert_eq(ids[0], 259);
    cr_assert_eq(sl_tokenizer_attr(t, 259), SL_TOKEN_ATTR_USER_DEFINED);
    sl_tokenizer_destroy(t);
}

Test(tokenizer, accessors)
{
    sl_tokenizer *t = byte_level();
    cr_assert_eq(sl_tokenizer_n_vocab(t), 260);
    cr_assert_eq(sl_tokenizer_eos(t), 258);
    cr_assert_eq(sl_tokenizer_bos(t), -1);
    cr_assert(sl_tokenizer_is_eog(t, 258));   /* eos, and <|end|> by name */
    cr_assert_not(sl_tokenizer_is_eog(t, 5));
    cr_assert_not(sl_tokenizer_is_eog(t, -1));
    cr_assert_not(sl_tokenizer_is_eog(t, 99999));
    cr_assert_eq(sl_tokenizer_attr(t, 99999), SL_TOKEN_ATTR_UNDEFINED);
    size_t len;
    const char *s = sl_tokenizer_text(t, 256, &len);
    cr_assert_eq(len, 2);
    cr_assert(memcmp(s, "ab", 2) == 0);
    cr_assert_null(sl_tokenizer_text(t, -3, &len));
    cr_assert_eq(sl_tokenizer_find(t, "<|end|>", 7), 258);
    sl_tokenizer_destroy(t);
}

/* ---- real vocabularies ---- */

Test(tokenizer, llama_spm_known_ids)
{
    sl_tokenizer *t = sl_test_open_vocab("llama-spm");
    cr_assert_not_null(t, "testdata vocab missing");
    int32_t ids[16];
    cr_assert_eq(enc(t, "Hello world", ids, 16), 2);
    cr_assert_eq(ids[0], 15043);
    cr_assert_eq(ids[1], 3186);
    /* BOS per add_bos_token, and <s> parsed only in special mode */
    int64_t n = sl_tokenize_special(t, "<s>Hello world", 14, true, ids, 16);
    cr_assert_eq(n, 4);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 1);
    n = enc(t, "<s>", ids, 16);
    for (int64_t i = 0; i < n; i++)
        cr_assert_neq(ids[i], 1);
    sl_tokenizer_destroy(t);
}

/* Pushes ids one at a time; returns the concatenated output. */
static size_t stream(const sl_tokenizer *t, const int32_t *ids, size_t n, bool show, char *out)
{
    sl_detok d;
    sl_detok_init(&d);
    size_t mp = sl_detok_max_piece(t), o = 0;
    for (size_t i = 0; i < n; i++)
        o += sl_detok_push(&d, t, ids[i], show, out + o, mp);
    o += sl_detok_flush(&d, t, out + o, mp);
    return o;
}

Test(tokenizer, spm_detok_holds_byte_runs)
{
    sl_tokenizer *t = sl_test_open_vocab("llama-spm");
    cr_assert_not_null(t);
    int32_t ids[16];
    int64_t n = enc(t, " \xf0\x9f\xa6\x99", ids, 16);   /* a llama: byte-fallback tokens */
    cr_assert_geq(n, 4);
    sl_detok d;
    sl_detok_init(&d);
    char buf[4096];
    size_t total = 0;
    for (int64_t i = 0; i + 1 < n; i++)
        total += sl_detok_push(&d, t, ids[i], false, buf + total, sizeof buf - total);
    size_t before = total;
    total += sl_detok_push(&d, t, ids[n - 1], false, buf + total, sizeof buf - total);
    total += sl_detok_flush(&d, t, buf + total, sizeof buf - total);
    cr_assert_lt(before, total);
    /* leading space of the output dropped (add_space_prefix) */
    cr_assert_eq(total, 5);
    cr_assert(memcmp(buf, " \xf0\x9f\xa6\x99", 5) == 0);
    /* an unfinished run becomes one U+FFFD per byte */
    size_t m = stream(t, ids + n - 4, 2, false, buf);
    cr_assert_eq(m, 6);
    cr_assert(memcmp(buf, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0);
    sl_tokenizer_destroy(t);
}

Test(tokenizer, spm_continuation_keeps_its_leading_space)
{
    sl_tokenizer *t = sl_test_open_vocab("llama-spm");
    cr_assert_not_null(t);
    int32_t ids[16];
    int64_t n = enc(t, "not to be", ids, 16);   /* "\xe2\x96\x81not" first: the prefix space */
    cr_assert_geq(n, 3);
    char buf[256];
    /* a whole sequence drops one leading space (HF's decode)... */
    size_t m = stream(t, ids, (size_t)n, false, buf);
    cr_assert_eq(m, strlen("not to be"));
    cr_assert(memcmp(buf, "not to be", m) == 0);
    /* ...text continuing a prompt keeps it */
    sl_detok d;
    sl_detok_init_continuation(&d);
    size_t o = 0;
    for (int64_t i = 0; i < n; i++)
        o += sl_detok_push(&d, t, ids[i], false, buf + o, sizeof buf - o);
    o += sl_detok_flush(&d, t, buf + o, sizeof buf - o);
    cr_assert_eq(o, strlen(" not to be"), "%zu: '%.*s'", o, (int)o, buf);
    cr_assert(memcmp(buf, " not to be", o) == 0);
    sl_tokenizer_destroy(t);
}

Test(tokenizer, bpe_detok_streams_complete_utf8)
{
    sl_tokenizer *t = sl_test_open_vocab("gpt-2");
    cr_assert_not_null(t);
    const char *s = "caf\xc3\xa9 \xf0\x9f\xa6\x99!";
    int32_t ids[32];
    int64_t n = enc(t, s, ids, 32);
    char out[256];
    size_t m = stream(t, ids, (size_t)n, true, out);
    cr_assert_eq(m, strlen(s));
    cr_assert(memcmp(out, s, m) == 0);
    cr_assert_eq(sl_detokenize(t, ids, (size_t)n, true, NULL, 0), strlen(s));
    /* cut after the first byte of the emoji: one U+FFFD */
    int32_t one[1];
    cr_assert_eq(enc(t, "\xf0", one, 1), 1);
    m = stream(t, one, 1, true, out);
    cr_assert_eq(m, 3);
    cr_assert(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    sl_tokenizer_destroy(t);
}

Test(tokenizer, random_bytes_never_crash)
{
    static const char *names[] = {"llama-spm", "gpt-2", "falcon", "deepseek-llm"};
    unsigned seed = 12345;
    for (int v = 0; v < 4; v++) {
        sl_tokenizer *t = sl_test_open_vocab(names[v]);
        cr_assert_not_null(t);
        char text[300];
        int32_t ids[600];
        char out[8192];
        for (int it = 0; it < 150; it++) {
            size_t len = (size_t)(rand_r(&seed) % sizeof text);
            for (size_t i = 0; i < len; i++)
                text[i] = (char)(rand_r(&seed) % 4 == 0 ? rand_r(&seed) : "ab <|\xc3\xe2\x96\x81\n"[rand_r(&seed) % 10]);
            int64_t n = sl_tokenize_special(t, text, len, true, ids, 600);
            cr_assert_geq(n, 0);
            cr_assert_leq(n, 600);
            for (int64_t i = 0; i < n; i++)
                cr_assert(ids[i] >= 0 && ids[i] < sl_tokenizer_n_vocab(t));
            size_t m = sl_detokenize(t, ids, (size_t)n, it & 1, out, sizeof out);
            cr_assert_leq(m, sizeof out);
        }
        /* ids out of range decode to nothing */
        int32_t badids[3] = {-1, 1 << 30, 0};
        sl_detokenize(t, badids, 2, true, out, sizeof out);
        sl_tokenizer_destroy(t);
    }
}

/* ---- concurrency: one tokenizer, several threads ---- */

typedef struct {
    const sl_tokenizer *t;
    const char *text;
    const int32_t *want;
    int64_t n_want;
    int bad;
} enc_job;

static void *enc_worker(void *arg)
{
    enc_job *j = arg;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(j->n_want + 1));
    char out[4096];
    for (int it = 0; it < 40; it++) {
        int64_t n = sl_tokenize(j->t, j->text, strlen(j->text), ids, (size_t)j->n_want + 1);
        if (n != j->n_want || memcmp(ids, j->want, sizeof(int32_t) * (size_t)n) != 0)
            j->bad++;
        size_t m = sl_detokenize(j->t, ids, (size_t)n, true, out, sizeof out);
        if (m != strlen(j->text) || memcmp(out, j->text, m) != 0)
            j->bad++;
    }
    free(ids);
    return NULL;
}

Test(tokenizer, concurrent_encode_decode_agree)
{
    sl_tokenizer *t = sl_test_open_vocab("gpt-2");
    cr_assert_not_null(t);
    const char *text = "Concurrency \xf0\x9f\xa6\x99 test: the same words, the same ids. 12345 "
                       "\xe4\xb8\xad\xe6\x96\x87   spaces\n\n";
    int32_t want[256];
    int64_t n = sl_tokenize(t, text, strlen(text), want, 256);
    cr_assert_gt(n, 0);
    pthread_t th[4];
    enc_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (enc_job){t, text, want, n, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, enc_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(jobs[i].bad, 0);
    }
    sl_tokenizer_destroy(t);
}
