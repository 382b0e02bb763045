/* tests/fuzz/fuzz_tokenizer.c: libFuzzer target `tokenizer`: encode and
 * decode with real vocabularies loaded once: the default model's
 * SentencePiece one and Llama 3's byte-level BPE one (from
 * tests/data/tokenizers/llama3 through model/vocab_json.c).
 * Input: byte 0 picks the vocabulary (bit 0) and the mode (bits 1..3); the
 * rest is the text, or for the decode modes little-endian 32-bit token ids
 * (any value: out-of-range ids must be ignored, not read).
 * Checks beyond "no crash": every id produced is in the vocabulary, the
 * count does not depend on the buffer size, streaming decode (sl_detok)
 * gives exactly the one-shot decode, and for plain text the BPE vocabulary
 * round-trips valid UTF-8 byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

#define CHECK(cond)                                                                                    \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "fuzz_tokenizer: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                                   \
        }                                                                                              \
    } while (0)

static sl_tokenizer *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    toks[0] = fz_tokenizer_default();
    toks[1] = fz_tokenizer_llama3();
    return 0;
}

static bool utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/* Decodes ids both ways (one-shot and streaming) and checks they agree. */
static void decode_both(const sl_tokenizer *t, const int32_t *ids, size_t n, bool show_special, char **text_out,
                        size_t *len_out)
{
    size_t need = sl_detokenize(t, ids, n, show_special, NULL, 0);
    char *one = malloc(need + 1);
    CHECK(one != NULL);
    CHECK(sl_detokenize(t, ids, n, show_special, one, need) == need);

    size_t piece_cap = sl_detok_max_piece(t);
    char *piece = malloc(piece_cap);
    char *stream = malloc(need + 1);
    CHECK(piece != NULL && stream != NULL);
    size_t got = 0;
    sl_detok d;
    sl_detok_init(&d);
    for (size_t i = 0; i <= n; i++) {
        size_t k = i < n ? sl_detok_push(&d, t, ids[i], show_special, piece, piece_cap)
                         : sl_detok_flush(&d, t, piece, piece_cap);
        CHECK(k <= piece_cap);
        CHECK(got + k <= need);
        memcpy(stream + got, piece, k);
        got += k;
    }
    CHECK(got == need);
    CHECK(memcmp(one, stream, need) == 0);
    free(piece);
    free(stream);
    if (text_out) {
        *text_out = one;
        *len_out = need;
    } else {
        free(one);
    }
}

static int32_t *encode(const sl_tokenizer *t, int mode, const char *text, size_t len, int64_t *n_out)
{
    int32_t small[4];
    sl_tok_span spans[2] = {{0, len / 2}, {len / 3, len}};
    int64_t n;
    switch (mode) {
    case 0: n = sl_tokenize(t, text, len, small, 4); break;
    case 1: n = sl_tokenize_special(t, text, len, true, small, 4); break;
    default: n = sl_tokenize_rendered(t, text, len, spans, 1 + (len & 1), (len & 2) != 0, small, 4); break;
    }
    CHECK(n >= 0);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    CHECK(ids != NULL);
    int64_t n2;
    switch (mode) {
    case 0: n2 = sl_tokenize(t, text, len, ids, (size_t)n); break;
    case 1: n2 = sl_tokenize_special(t, text, len, true, ids, (size_t)n); break;
    default: n2 = sl_tokenize_rendered(t, text, len, spans, 1 + (len & 1), (len & 2) != 0, ids, (size_t)n); break;
    }
    CHECK(n2 == n);
    for (size_t i = 0; i < 4 && i < (size_t)n; i++)
        CHECK(ids[i] == small[i]);
    int32_t nv = sl_tokenizer_n_vocab(t);
    for (int64_t i = 0; i < n; i++)
        CHECK(ids[i] >= 0 && ids[i] < nv);
    *n_out = n;
    return ids;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const sl_tokenizer *t = toks[data[0] & 1];
    int mode = (data[0] >> 1) & 7;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (mode <= 2) {
        /* encode, then decode what came out */
        int64_t n;
        int32_t *ids = encode(t, mode, text, len, &n);
        char *back;
        size_t back_len;
        decode_both(t, ids, (size_t)n, mode != 0, &back, &back_len);
        /* byte-level BPE keeps every byte of valid UTF-8 text */
        if (mode == 0 && t == toks[1] && utf8_valid((const uint8_t *)text, len))
            CHECK(back_len == len && memcmp(back, text, len) == 0);
        free(back);
        free(ids);
    } else if (mode <= 5) {
        /* arbitrary ids, any 32-bit value */
        size_t n = len / 4;
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        CHECK(ids != NULL);
        memcpy(ids, text, n * 4);
        decode_both(t, ids, n, mode == 4, NULL, NULL);
        free(ids);
    } else {
        /* ids near the vocabulary: 16-bit values scaled into [0, n_vocab + 16) */
        size_t n = len / 2;
        int32_t nv = sl_tokenizer_n_vocab(t);
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        CHECK(ids != NULL);
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)(uint8_t)text[2 * i] | (uint32_t)(uint8_t)text[2 * i + 1] << 8;
            ids[i] = (int32_t)((uint64_t)v * (uint64_t)(nv + 16) / 65536u);
            size_t tl;
            if (sl_tokenizer_text(t, ids[i], &tl) == NULL)
                CHECK(ids[i] >= nv);
            (void)sl_tokenizer_attr(t, ids[i]);
            (void)sl_tokenizer_is_eog(t, ids[i]);
        }
        decode_both(t, ids, n, mode == 7, NULL, NULL);
        free(ids);
    }
    return 0;
}
