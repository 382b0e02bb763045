/* model/tokenizer_load.c: builds a tokenizer from GGUF metadata (token
 * texts, types, scores, merges, special ids, pre-tokenizer), destroys it,
 * and answers the read-only questions about it (accessors, text -> id).
 * Runs in: front ends and tools, at model load (create); the accessors from
 * any thread afterwards.
 * Trade-off: everything is copied out of the GGUF into flat arrays and two
 * hash tables at load (a few tens of MB for a 262k vocabulary) so that
 * encoding does no string conversion and never touches the reader again. */
#include "model/tokenizer_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL   "tokenizer.ggml.model"
#define KEY_PRE     "tokenizer.ggml.pre"
#define KEY_TOKENS  "tokenizer.ggml.tokens"
#define KEY_TYPES   "tokenizer.ggml.token_type"
#define KEY_SCORES  "tokenizer.ggml.scores"
#define KEY_MERGES  "tokenizer.ggml.merges"

/* ------------------------------------------------------------------ */
/* byte-level alphabet (GPT-2): every byte is shown as one printable char */
/* ------------------------------------------------------------------ */

/* The code point that stands for byte b in byte-level vocabularies. */
static uint32_t byte_to_cp(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae)
        return b;
    /* the other 68 bytes take 256, 257, ... in byte order */
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae))
            n++;
    return 256 + n;
}

static int cp_to_byte[324];   /* filled once (pthread_once); read-only afterwards */
static pthread_once_t cp_once = PTHREAD_ONCE_INIT;

static void init_cp_table(void)
{
    for (int i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte[byte_to_cp((uint8_t)b)] = b;
}

/* Decodes a byte-level string into dst (at most n bytes). Returns the
 * decoded length, or -1 if some character is outside the alphabet: HF's
 * ByteLevel decoder then keeps the token's text as it is. */
static long byte_level_decode(const char *s, size_t n, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        if (c < 0x80) { cp = c; i += 1; }
        else if ((c >> 5) == 6 && i + 1 < n) { cp = ((c & 0x1fu) << 6) | ((uint8_t)s[i + 1] & 0x3fu); i += 2; }
        else return -1;
        if (cp >= 324 || cp_to_byte[cp] < 0)
            return -1;
        dst[o++] = (char)cp_to_byte[cp];
    }
    return (long)o;
}

/* ------------------------------------------------------------------ */
/* load                                                                */
/* ------------------------------------------------------------------ */

static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
    "<|end_of_text|>",
};

static int32_t find_text(const sl_tokenizer *t, const char *s)
{
    return sl_tokenizer_find(t, s, strlen(s));
}

/* Reads an optional token-id key: absent keeps *id; present must be < n. */
static sl_status get_id(const sl_gguf *g, const char *key, int32_t n, int32_t *id,
                        char err[SL_ERR_LEN])
{
    int64_t v;
    if (sl_gguf_find_key(g, key) < 0)
        return SL_OK;
    if (sl_gguf_get_int(g, key, &v) < 0) {
        snprintf(err, SL_ERR_LEN, "%s: not an integer", key);
        return SL_EFORMAT;
    }
    if (v == -1 || v == 0xffffffffll) {   /* some converters write -1 for "none" */
        *id = -1;
        return SL_OK;
    }
    if (v < 0 || v >= n) {
        snprintf(err, SL_ERR_LEN, "%s: id %lld out of range (vocabulary has %d)", key,
                 (long long)v, n);
        return SL_EFORMAT;
    }
    *id = (int32_t)v;
    return SL_OK;
}

static void get_flag(const sl_gguf *g, const char *key, bool *v)
{
    bool b;
    if (sl_gguf_get_bool(g, key, &b) == SL_OK)
        *v = b;
}

static sl_status load_tokens(sl_tokenizer *t, const sl_gguf *g, char err[SL_ERR_LEN])
{
    sl_gguf_arr toks, types, scores;
    if (sl_gguf_get_arr(g, KEY_TOKENS, &toks) < 0 || toks.type != SL_GGUF_TYPE_STRING) {
        snprintf(err, SL_ERR_LEN, "%s: missing or not a string array", KEY_TOKENS);
        return SL_EFORMAT;
    }
    if (toks.n == 0 || toks.n > 0x7fffffffull) {
        snprintf(err, SL_ERR_LEN, "%s: %llu tokens", KEY_TOKENS, (unsigned long long)toks.n);
        return SL_EFORMAT;
    }
    int32_t n = (int32_t)toks.n;
    t->n_vocab = n;
    bool has_types = sl_gguf_get_arr(g, KEY_TYPES, &types) == SL_OK;
    if (has_types && types.n != toks.n) {
        snprintf(err, SL_ERR_LEN, "%s: %llu entries for %d tokens", KEY_TYPES,
                 (unsigned long long)types.n, n);
        return SL_EFORMAT;
    }
    bool has_scores = sl_gguf_get_arr(g, KEY_SCORES, &scores) == SL_OK;
    if (has_scores && scores.n != toks.n) {
        snprintf(err, SL_ERR_LEN, "%s: %llu entries for %d tokens", KEY_SCORES,
                 (unsigned long long)scores.n, n);
        return SL_EFORMAT;
    }
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        sl_gguf_str s;
        if (sl_gguf_arr_str(&toks, (uint64_t)i, &s) < 0) {
            snprintf(err, SL_ERR_LEN, "%s: entry %d unreadable", KEY_TOKENS, i);
            return SL_EFORMAT;
        }
        total += s.len;
    }
    if (total > 0x7fffffffull) {
        snprintf(err, SL_ERR_LEN, "%s: %zu bytes of token text", KEY_TOKENS, total);
        return SL_EFORMAT;
    }
    t->text = malloc(total + 1);
    t->text_off = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    t->attr = malloc((size_t)n);
    t->eog = calloc((size_t)n, 1);
    t->scores = has_scores ? malloc(sizeof(float) * (size_t)n) : NULL;
    if (!t->text || !t->text_off || !t->attr || !t->eog || (has_scores && !t->scores))
        return SL_ENOMEM;
    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        sl_gguf_str s;
        sl_gguf_arr_str(&toks, (uint64_t)i, &s);
        t->text_off[i] = off;
        memcpy(t->text + off, s.ptr, s.len);
        off += (uint32_t)s.len;
        int64_t ty = SL_TOKEN_ATTR_NORMAL;
        if (has_types && (sl_gguf_arr_int(&types, (uint64_t)i, &ty) < 0 || ty < 0 || ty > 6)) {
            snprintf(err, SL_ERR_LEN, "%s: entry %d is not a token type (0..6)", KEY_TYPES, i);
            return SL_EFORMAT;
        }
        t->attr[i] = (uint8_t)ty;
        if (has_scores) {
            double d;
            if (sl_gguf_arr_float(&scores, (uint64_t)i, &d) < 0) {
                snprintf(err, SL_ERR_LEN, "%s: entry %d is not a float", KEY_SCORES, i);
                return SL_EFORMAT;
            }
            t->scores[i] = (float)d;
        }
    }
    t->text_off[n] = off;
    return SL_OK;
}

/* raw[] (what a token stands for) and piece[] (what decoding emits). */
static sl_status build_raw(sl_tokenizer *t)
{
    int32_t n = t->n_vocab;
    size_t total = t->text_off[n];
    t->raw = malloc(total + 1);
    t->raw_off = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    t->piece = malloc(total + 1);
    t->piece_off = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    if (!t->raw || !t->raw_off || !t->piece || !t->piece_off)
        return SL_ENOMEM;
    uint32_t ro = 0, po = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *s = t->text + t->text_off[i];
        size_t l = t->text_off[i + 1] - t->text_off[i];
        t->raw_off[i] = ro;
        t->piece_off[i] = po;
        if (t->kind == SL_TOK_KIND_BPE) {
            long d = byte_level_decode(s, l, t->raw + ro);
            if (d < 0) {
                memcpy(t->raw + ro, s, l);
                d = (long)l;
            }
            memcpy(t->piece + po, t->raw + ro, (size_t)d);
            ro += (uint32_t)d;
            po += (uint32_t)d;
            continue;
        }
        memcpy(t->raw + ro, s, l);
        ro += (uint32_t)l;
        if (t->attr[i] == SL_TOKEN_ATTR_BYTE && l == 6 && memcmp(s, "<0x", 3) == 0) {
            t->piece[po++] = (char)strtol(s + 3, NULL, 16);
            continue;
        }
        for (size_t j = 0; j < l;) {   /* U+2581 (e2 96 81) decodes to a space */
            if (j + 3 <= l && memcmp(s + j, "\xe2\x96\x81", 3) == 0) {
                t->piece[po++] = ' ';
                j += 3;
            } else {
                t->piece[po++] = s[j++];
            }
        }
    }
    t->raw_off[n] = ro;
    t->piece_off[n] = po;
    size_t mx = 0;
    for (int32_t i = 0; i < n; i++)
        if (t->piece_off[i + 1] - t->piece_off[i] > mx)
            mx = t->piece_off[i + 1] - t->piece_off[i];
    /* worst case: the held bytes flushed as U+FFFD each, then a piece whose
     * every byte is invalid (U+FFFD is 3 bytes) */
    t->max_piece = 3 * mx + sizeof(((sl_detok *)0)->_held) * 3 + 8;

    t->by_raw.mask = sl_tok_table_size((size_t)n) - 1;
    t->by_raw.slots = calloc((size_t)t->by_raw.mask + 1, sizeof(uint32_t));
    if (!t->by_raw.slots)
        return SL_ENOMEM;
    /* ordinary pieces first so that an added token with the same bytes never
     * shadows the piece BPE merges produce */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < n; i++) {
            bool normal = t->attr[i] == SL_TOKEN_ATTR_NORMAL || t->attr[i] == SL_TOKEN_ATTR_BYTE ||
                          t->attr[i] == SL_TOKEN_ATTR_UNDEFINED;
            if (normal == (pass == 0))
                sl_tok_hash_insert(t, i);
        }
    return SL_OK;
}

static sl_status load_merges(sl_tokenizer *t, const sl_gguf *g, char err[SL_ERR_LEN])
{
    sl_gguf_arr arr;
    if (sl_gguf_get_arr(g, KEY_MERGES, &arr) < 0) {
        if (t->kind == SL_TOK_KIND_BPE) {
            snprintf(err, SL_ERR_LEN, "%s: missing (required by model gpt2)", KEY_MERGES);
            return SL_EFORMAT;
        }
        return SL_OK;
    }
    if (arr.type != SL_GGUF_TYPE_STRING || arr.n > 0x7fffffffull) {
        snprintf(err, SL_ERR_LEN, "%s: not a string array", KEY_MERGES);
        return SL_EFORMAT;
    }
    sl_tok_merges *m = &t->merges;
    m->mask = sl_tok_table_size((size_t)arr.n) - 1;
    m->slots = calloc((size_t)m->mask + 1, sizeof(sl_tok_merge_slot));
    char *buf = NULL;
    size_t buf_cap = 0;
    if (!m->slots)
        return SL_ENOMEM;
    for (uint64_t r = 0; r < arr.n; r++) {
        sl_gguf_str s;
        if (sl_gguf_arr_str(&arr, r, &s) < 0)
            goto bad;
        if (sl_tok_grow((void **)&buf, &buf_cap, s.len * 2 + 2, 1) < 0) {
            free(buf);
            return SL_ENOMEM;
        }
        /* "A B": tokens may themselves hold spaces in odd vocabularies, so
         * take the first split where both halves are tokens */
        bool found = false;
        for (size_t sp = 0; sp < s.len && !found; sp++) {
            if (s.ptr[sp] != ' ')
                continue;
            int32_t a, b;
            long la, lb;
            if (t->kind == SL_TOK_KIND_BPE) {
                la = byte_level_decode(s.ptr, sp, buf);
                lb = byte_level_decode(s.ptr + sp + 1, s.len - sp - 1, buf + s.len);
                if (la < 0 || lb < 0)
                    continue;
                a = sl_tok_hash_find(t, buf, (size_t)la);
                b = sl_tok_hash_find(t, buf + s.len, (size_t)lb);
                if (a < 0 || b < 0)
                    continue;
                memcpy(buf + la, buf + s.len, (size_t)lb);
            } else {
                la = (long)sp;
                lb = (long)(s.len - sp - 1);
                a = sl_tok_hash_find(t, s.ptr, (size_t)la);
                b = sl_tok_hash_find(t, s.ptr + sp + 1, (size_t)lb);
                if (a < 0 || b < 0)
                    continue;
                memcpy(buf, s.ptr, (size_t)la);
                memcpy(buf + la, s.ptr + sp + 1, (size_t)lb);
            }
            int32_t res = sl_tok_hash_find(t, buf, (size_t)(la + lb));
            if (res < 0) {
                snprintf(err, SL_ERR_LEN, "%s: merge %llu (\"%.*s\") makes a token not in %s",
                         KEY_MERGES, (unsigned long long)r, (int)(s.len > 64 ? 64 : s.len),
                         s.ptr, KEY_TOKENS);
                free(buf);
                return SL_EFORMAT;
            }
            sl_tok_merge_insert(m, a, b, (uint32_t)r, res);
            found = true;
        }
        if (!found) {
bad:
            snprintf(err, SL_ERR_LEN, "%s: merge %llu names unknown tokens", KEY_MERGES,
                     (unsigned long long)r);
            free(buf);
            return SL_EFORMAT;
        }
    }
    free(buf);
    return SL_OK;
}

/* SentencePiece text is one "word" to the reference, so BPE runs over the
 * whole text. It may instead be cut before a U+2581 whenever no token
 * contains the preceding character followed by U+2581: no symbol can then
 * ever span the cut (merges and score-merges only make tokens), and each
 * side's merge order is unchanged, so the result is identical while heaps
 * stay small and words hit the cache. spm_nocut[b] marks bytes b that some
 * token has right before a U+2581 (Gemma 3's ">\u2581</", runs of U+2581);
 * no cut follows a character ending in such a byte. Needs U+2581 itself to be
 * a token, so that no <unk> run can straddle a cut. */
static bool spm_cuttable(sl_tokenizer *t)
{
    if (sl_tok_hash_find(t, "\xe2\x96\x81", 3) < 0)
        return false;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const char *s = t->raw + t->raw_off[i];
        uint32_t l = t->raw_off[i + 1] - t->raw_off[i];
        for (uint32_t k = 1; k + 3 <= l; k++)
            if (memcmp(s + k, "\xe2\x96\x81", 3) == 0)
                t->spm_nocut[(uint8_t)s[k - 1]] = 1;
    }
    t->spm_nocut[0x81] = 1;   /* inside a run of U+2581: never cut */
    return true;
}

static bool is_matched_added(uint8_t a)
{
    return a == SL_TOKEN_ATTR_CONTROL || a == SL_TOKEN_ATTR_USER_DEFINED ||
           a == SL_TOKEN_ATTR_UNKNOWN;
}

static sl_status build_specials(sl_tokenizer *t)
{
    size_t cap = 1;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_matched_added(t->attr[i]))
            cap += t->text_off[i + 1] - t->text_off[i];
    t->trie = malloc(sizeof(sl_tok_trie_node) * cap);
    if (!t->trie)
        return SL_ENOMEM;
    t->trie[0] = (sl_tok_trie_node){-1, -1, -1, 0};
    t->n_trie = 1;
    for (int b = 0; b < 256; b++)
        t->trie_root[b] = -1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!is_matched_added(t->attr[i]))
            continue;
        const uint8_t *s = (const uint8_t *)t->text + t->text_off[i];
        uint32_t l = t->text_off[i + 1] - t->text_off[i];
        int32_t node = 0;
        for (uint32_t k = 0; k < l; k++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != s[k])
                c = t->trie[c].sibling;
            if (c < 0) {
                c = (int32_t)t->n_trie++;
                t->trie[c] = (sl_tok_trie_node){-1, t->trie[node].child, -1, s[k]};
                t->trie[node].child = c;
                if (node == 0)
                    t->trie_root[s[k]] = c;
            }
            node = c;
        }
        if (node && t->trie[node].id < 0)   /* duplicate texts: the lowest id wins */
            t->trie[node].id = i;
    }
    return SL_OK;
}

sl_status sl_tokenizer_create(const sl_gguf *g, sl_tokenizer **out, char err[SL_ERR_LEN])
{
    *out = NULL;
    err[0] = 0;
    pthread_once(&cp_once, init_cp_table);   /* creates may run concurrently */
    sl_gguf_str model, pre = {"default", 7};
    if (sl_gguf_get_str(g, KEY_MODEL, &model) < 0) {
        snprintf(err, SL_ERR_LEN, "%s: missing or not a string", KEY_MODEL);
        return SL_EFORMAT;
    }
    sl_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return SL_ENOMEM;
    sl_status rc;
    if (sl_gguf_str_eq(model, "llama")) {
        t->kind = SL_TOK_KIND_SPM;
    } else if (sl_gguf_str_eq(model, "gpt2")) {
        t->kind = SL_TOK_KIND_BPE;
    } else {
        snprintf(err, SL_ERR_LEN, "%s: \"%.*s\" is not supported (llama, gpt2)", KEY_MODEL,
                 (int)(model.len > 32 ? 32 : model.len), model.ptr);
        rc = SL_EUNSUPPORTED;
        goto fail;
    }
    if ((rc = load_tokens(t, g, err)) < 0 || (rc = build_raw(t)) < 0 ||
        (rc = load_merges(t, g, err)) < 0 || (rc = build_specials(t)) < 0)
        goto fail;
    if (t->kind == SL_TOK_KIND_SPM)
        t->spm_words = spm_cuttable(t);

    int32_t n = t->n_vocab;
    for (int b = 0; b < 256; b++) {
        if (t->kind == SL_TOK_KIND_BPE) {
            char c = (char)b;
            /* may be -1: some vocabularies lack bytes that never occur in
             * UTF-8 (0xC0, 0xC1, ...); HF then drops such a byte */
            t->byte_tok[b] = sl_tok_hash_find(t, &c, 1);
        } else {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_tok[b] = sl_tok_hash_find(t, name, 6);
        }
    }

    if (t->kind == SL_TOK_KIND_SPM) {
        t->bos = n > 1 ? 1 : -1;
        t->eos = n > 2 ? 2 : -1;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else {
        t->bos = t->eos = t->unk = -1;
        if (sl_gguf_find_key(g, KEY_PRE) >= 0 && sl_gguf_get_str(g, KEY_PRE, &pre) < 0) {
            snprintf(err, SL_ERR_LEN, "%s: not a string", KEY_PRE);
            rc = SL_EFORMAT;
            goto fail;
        }
        if ((rc = sl_tok_pretok_init(&t->pretok, pre.ptr, pre.len, err)) < 0)
            goto fail;
        t->ignore_merges = sl_gguf_str_eq(pre, "llama-bpe") || sl_gguf_str_eq(pre, "llama3") ||
                           sl_gguf_str_eq(pre, "dbrx") || sl_gguf_str_eq(pre, "smaug-bpe");
    }
    t->eot = t->eom = t->pad = -1;
    if ((rc = get_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos, err)) < 0 ||
        (rc = get_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos, err)) < 0 ||
        (rc = get_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk, err)) < 0 ||
        (rc = get_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad, err)) < 0 ||
        (rc = get_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot, err)) < 0 ||
        (rc = get_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom, err)) < 0)
        goto fail;
    get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    if (t->kind == SL_TOK_KIND_BPE)
        t->add_space_prefix = false;

    /* end-of-generation set, as llama.cpp builds it */
    for (size_t i = 0; i < sizeof k_eog_texts / sizeof k_eog_texts[0]; i++) {
        int32_t id = find_text(t, k_eog_texts[i]);
        if (id < 0 || (t->attr[id] != SL_TOKEN_ATTR_CONTROL &&
                       t->attr[id] != SL_TOKEN_ATTR_USER_DEFINED))
            continue;
        t->eog[id] = 1;
        if (t->eot < 0 && i < 3)   /* eot_id, im_end, end: the turn enders */
            t->eot = id;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    *out = t;
    return SL_OK;
fail:
    if (rc == SL_ENOMEM && !err[0])
        snprintf(err, SL_ERR_LEN, "tokenizer: out of memory");
    sl_tokenizer_destroy(t);
    return rc;
}

void sl_tokenizer_destroy(sl_tokenizer *t)
{
    if (!t)
        return;
    sl_tok_pretok_fini(&t->pretok);
    free(t->text); free(t->text_off); free(t->raw); free(t->raw_off);
    free(t->piece); free(t->piece_off); free(t->attr); free(t->eog); free(t->scores);
    free(t->by_raw.slots);
    free(t->merges.slots);
    free(t->trie);
    free(t);
}

/* ------------------------------------------------------------------ */
/* accessors                                                           */
/* ------------------------------------------------------------------ */

int32_t sl_tokenizer_n_vocab(const sl_tokenizer *t) { return t->n_vocab; }
int32_t sl_tokenizer_bos(const sl_tokenizer *t) { return t->bos; }
int32_t sl_tokenizer_eos(const sl_tokenizer *t) { return t->eos; }
int32_t sl_tokenizer_eot(const sl_tokenizer *t) { return t->eot; }
int32_t sl_tokenizer_pad(const sl_tokenizer *t) { return t->pad; }
bool sl_tokenizer_add_bos(const sl_tokenizer *t) { return t->add_bos; }
bool sl_tokenizer_add_eos(const sl_tokenizer *t) { return t->add_eos; }

bool sl_tokenizer_is_eog(const sl_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

enum sl_token_attr sl_tokenizer_attr(const sl_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return SL_TOKEN_ATTR_UNDEFINED;
    return (enum sl_token_attr)t->attr[id];
}

const char *sl_tokenizer_text(const sl_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

int32_t sl_tokenizer_find(const sl_tokenizer *t, const char *text, size_t len)
{
    /* stored text, not raw bytes: the added tokens first (trie), then the
     * raw table, which equals the text for SPM and for byte-level tokens
     * whose text has no escaped bytes */
    int32_t node = len ? t->trie_root[(uint8_t)text[0]] : -1;
    for (size_t k = 1; node >= 0 && k < len; k++) {
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != (uint8_t)text[k])
            ch = t->trie[ch].sibling;
        node = ch;
    }
    if (node >= 0 && t->trie[node].id >= 0)
        return t->trie[node].id;
    int32_t id = sl_tok_hash_find(t, text, len);
    if (id >= 0) {
        uint32_t o = t->text_off[id], l = t->text_off[id + 1] - o;
        if (l == len && memcmp(t->text + o, text, len) == 0)
            return id;
    }
    return -1;
}
