/* model/tokenizer.c: the public encode entry points. Splits the text at
 * the added tokens it may match (a byte trie; control tokens only where the
 * caller allows them), adds BOS/EOS, and hands every plain piece to the
 * model's encoder: the pre-tokenizer and byte-level BPE (gpt2), or
 * SentencePiece normalization and then merge-BPE or score-BPE (llama).
 * Runs in: the calling thread, per request; scratch lives in a per-call sink.
 * Trade-off: the special-token scan walks the trie at every byte instead of
 * a single automaton (Aho-Corasick): the walk costs the match depth, which is
 * short, and keeps the per-span "allowed" rule a simple check at each hit. */
#include "shared/alloc.h"
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

/* ------------------------------------------------------------------------
 * Untrusted spans, asked in order.
 *
 * A control token at [off, off+len) is refused when some span [a, b) has
 * off < b && a < off + len (so an empty span strictly inside the match
 * counts too). encode() asks with off never
 * decreasing, so a span with b <= off is dead for the rest of the call. If
 * the spans are ordered so that both a and b never decrease, the live spans
 * are a suffix that starts at a cursor, and the suffix's first span has the
 * smallest a: one comparison answers the query, and the cursor only moves
 * forward, so a whole call costs O(text + spans). The renderer's spans are
 * sorted and disjoint, which is that order. Any other set is copied, sorted
 * by a and merged where a span starts at or before the previous one ends
 * (exact for the rule above, as len >= 1), which is that order too. A scan
 * of every span at every match would make a chat of n messages cost n^2.
 * ------------------------------------------------------------------------ */

/* b of a span, clipped at SIZE_MAX instead of wrapping. */
static size_t span_end(const sl_tok_span *s)
{
    return s->len > SIZE_MAX - s->off ? SIZE_MAX : s->off + s->len;
}

static int span_cmp(const void *x, const void *y)
{
    const sl_tok_span *a = x, *b = y;
    if (a->off != b->off)
        return a->off < b->off ? -1 : 1;
    size_t ea = span_end(a), eb = span_end(b);
    return ea < eb ? -1 : ea > eb;
}

sl_status sl_tok_spans_init(sl_tok_spans *q, const sl_tok_span *sp, size_t n)
{
    *q = (sl_tok_spans){.sp = sp, .n = n};
    size_t i = 1;
    while (i < n && sp[i].off >= sp[i - 1].off && span_end(&sp[i]) >= span_end(&sp[i - 1]))
        i++;
    if (i >= n)
        return SL_OK;
    sl_tok_span *own = sl_malloc(n * sizeof *own);
    if (!own)
        return SL_ENOMEM;
    memcpy(own, sp, n * sizeof *own);
    qsort(own, n, sizeof *own, span_cmp);
    size_t m = 0;   /* own[0..m] is the merged prefix */
    for (size_t k = 1; k < n; k++) {
        size_t end = span_end(&own[m]);
        if (own[k].off <= end) {
            size_t e = span_end(&own[k]);
            own[m].len = (e > end ? e : end) - own[m].off;
        } else {
            own[++m] = own[k];
        }
    }
    q->own = own;
    q->sp = own;
    q->n = m + 1;
    return SL_OK;
}

bool sl_tok_spans_hit(sl_tok_spans *q, size_t off, size_t len)
{
    while (q->i < q->n && span_end(&q->sp[q->i]) <= off)
        q->i++;
    return q->i < q->n && q->sp[q->i].off < off + len;
}

void sl_tok_spans_fini(sl_tok_spans *q)
{
    free(q->own);
    q->own = NULL;
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
    sl_tok_spans q;
    sl_status rc = sl_tok_spans_init(&q, sp, n_sp);
    if (rc < 0)
        return rc;
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
                            (allow_control == 2 && !sl_tok_spans_hit(&q, pos, k - pos)))) {
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
    sl_tok_spans_fini(&q);
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
