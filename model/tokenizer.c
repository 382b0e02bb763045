/* model/tokenizer.c: the public encode entry points. Splits the text at
 * the added tokens it may match (a byte trie; control tokens only where the
 * caller allows them), adds BOS/EOS, and hands every plain piece to the
 * model's encoder: the pre-tokenizer and byte-level BPE (gpt2), or
 * SentencePiece normalization and then merge-BPE or score-BPE (llama).
 * Runs in: the calling thread, per request; scratch lives in a per-call sink.
 * Trade-off: the special-token scan walks the trie at every byte instead of
 * a single automaton (Aho-Corasick): the walk costs the match depth, which is
 * short, and keeps the per-span "allowed" rule a simple check at each hit. */
#include "model/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* Model encoding of one plain-text piece (between recognised tokens). */
static sl_status encode_plain(const sl_tokenizer *t, sl_tok_sink *s, const char *p, size_t len)
{
    if (!len)
        return SL_OK;
    if (t->kind == SL_TOK_KIND_BPE)
        return sl_tok_pretok_split(t, s, p, len);
    /* SentencePiece normalization: optional U+2581 prefix, spaces -> U+2581 */
    size_t need = 3 + len * 3;
    if (sl_tok_grow((void **)&s->buf, &s->buf_cap, need, 1) < 0)
        return SL_ENOMEM;
    size_t o = 0;
    if (t->add_space_prefix) {
        memcpy(s->buf, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] == ' ') {
            memcpy(s->buf + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            s->buf[o++] = p[i];
        }
    }
    /* the buffer may move inside the encoder: hand it a private copy */
    char *norm = s->buf;
    s->buf = NULL;
    s->buf_cap = 0;
    sl_status rc = SL_OK;
    sl_tok_word_fn word = t->merges.n ? sl_tok_bpe_chars : sl_tok_spm_scores;
    if (!t->spm_words) {
        rc = word(t, s, norm, o);
    } else {
        size_t w0 = 0;   /* cut where spm_cuttable() allows */
        for (size_t i = 1; i + 3 <= o && rc == SL_OK; i++) {
            if (norm[i] != '\xe2' || memcmp(norm + i, "\xe2\x96\x81", 3) != 0 ||
                t->spm_nocut[(uint8_t)norm[i - 1]])
                continue;
            rc = sl_tok_word_cached(t, s, norm + w0, i - w0, word);
            w0 = i;
        }
        if (rc == SL_OK)
            rc = sl_tok_word_cached(t, s, norm + w0, o - w0, word);
    }
    free(norm);
    return rc;
}

static bool overlaps(const sl_tok_span *sp, size_t n, size_t off, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (off < sp[i].off + sp[i].len && sp[i].off < off + len)
            return true;
    return false;
}

static void sink_free(sl_tok_sink *s)
{
    free(s->sym); free(s->heap); free(s->buf);
    free(s->pieces[0]); free(s->pieces[1]); free(s->cache);
    sl_tok_pretok_release(s);
}

/* allow_control: 0 never, 1 everywhere, 2 outside the untrusted spans. */
static int64_t encode(const sl_tokenizer *t, const char *text, size_t len, int allow_control,
                      const sl_tok_span *sp, size_t n_sp, bool add_special,
                      int32_t *out, size_t cap)
{
    if (!t || (!text && len) || (!out && cap))
        return SL_EINVAL;
    sl_tok_sink s = {.out = out, .cap = cap, .text_len = len};
    sl_status rc = SL_OK;
    if (add_special && t->add_bos && t->bos >= 0)
        sl_tok_emit(&s, t->bos);
    size_t seg = 0;
    for (size_t pos = 0; pos < len;) {
        uint8_t c = (uint8_t)text[pos];
        int32_t hit = -1;
        size_t hit_len = 0;
        /* walk the trie; the deepest allowed token seen is the match */
        int32_t node = t->trie_root[c];
        for (size_t k = pos + 1; node >= 0; k++) {
            int32_t id = t->trie[node].id;
            if (id >= 0 && (t->attr[id] == SL_TOKEN_ATTR_USER_DEFINED ||
                            allow_control == 1 ||
                            (allow_control == 2 && !overlaps(sp, n_sp, pos, k - pos)))) {
                hit = id;
                hit_len = k - pos;
            }
            if (k >= len)
                break;
            int32_t ch = t->trie[node].child;
            while (ch >= 0 && t->trie[ch].byte != (uint8_t)text[k])
                ch = t->trie[ch].sibling;
            node = ch;
        }
        if (hit < 0) {
            pos++;
            continue;
        }
        if ((rc = encode_plain(t, &s, text + seg, pos - seg)) < 0)
            goto done;
        sl_tok_emit(&s, hit);
        pos += hit_len;
        seg = pos;
    }
    if ((rc = encode_plain(t, &s, text + seg, len - seg)) < 0)
        goto done;
    if (add_special && t->add_eos && t->eos >= 0)
        sl_tok_emit(&s, t->eos);
done:
    sink_free(&s);
    return rc < 0 ? rc : (int64_t)s.n;
}

int64_t sl_tokenize(const sl_tokenizer *t, const char *text, size_t len, int32_t *out, size_t cap)
{
    return encode(t, text, len, 0, NULL, 0, false, out, cap);
}

int64_t sl_tokenize_special(const sl_tokenizer *t, const char *text, size_t len,
                            bool add_special, int32_t *out, size_t cap)
{
    return encode(t, text, len, 1, NULL, 0, add_special, out, cap);
}

int64_t sl_tokenize_rendered(const sl_tokenizer *t, const char *text, size_t len,
                             const sl_tok_span *untrusted, size_t n_untrusted,
                             bool add_special, int32_t *out, size_t cap)
{
    if (n_untrusted && !untrusted)
        return SL_EINVAL;
    return encode(t, text, len, 2, untrusted, n_untrusted, add_special, out, cap);
}
