/* model/tokenizer_bpe.c: merge-rank BPE, the algorithm of HF `tokenizers`'
 * BPE model, for byte-level words (gpt2 vocabularies) and for
 * SentencePiece-converted vocabularies that carry merges (Mistral, Gemma).
 * Runs in: the calling thread, scratch in the sink.
 * Trade-off: a binary heap of (rank, position) per word, as HF does, rather
 * than a rescan per merge: O(n log n), which matters for SentencePiece text
 * where a whole paragraph is one word. Ties go to the leftmost pair, so the
 * result equals HF's merge order exactly. */
#include "shared/alloc.h"
#include "model/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;     /* -1 once merged into its left neighbour */
    int32_t prev;
    int32_t next;
} bpe_sym;

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = v;
    return top;
}

static void push_pair(const sl_tokenizer *t, uint64_t *h, size_t *nh, const bpe_sym *sy, int32_t i)
{
    int32_t j = sy[i].next, res;
    if (j < 0)
        return;
    uint32_t r = sl_tok_merge_find(&t->merges, sy[i].id, sy[j].id, &res);
    if (r != UINT32_MAX)
        heap_push(h, nh, ((uint64_t)r << 32) | (uint32_t)i);
}

/* Applies merges to sy[0..n) (linked in order) and emits the result. */
static sl_status merge_and_emit(const sl_tokenizer *t, sl_tok_sink *s, size_t n)
{
    bpe_sym *sy = s->sym;
    if (n > 1) {
        if (sl_tok_grow(&s->heap, &s->heap_cap, 3 * n, sizeof(uint64_t)) < 0)
            return SL_ENOMEM;
        uint64_t *h = s->heap;
        size_t nh = 0;
        for (size_t i = 0; i + 1 < n; i++)
            push_pair(t, h, &nh, sy, (int32_t)i);
        while (nh) {
            uint64_t top = heap_pop(h, &nh);
            int32_t i = (int32_t)(uint32_t)top, j, res;
            if (sy[i].id < 0 || (j = sy[i].next) < 0)
                continue;
            /* stale entry: the pair at i changed since it was queued */
            if (sl_tok_merge_find(&t->merges, sy[i].id, sy[j].id, &res) != (uint32_t)(top >> 32))
                continue;
            sy[i].id = res;
            sy[j].id = -1;
            sy[i].next = sy[j].next;
            if (sy[j].next >= 0)
                sy[sy[j].next].prev = i;
            if (sy[i].prev >= 0)
                push_pair(t, h, &nh, sy, sy[i].prev);
            push_pair(t, h, &nh, sy, i);
        }
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = sy[i].next)
        sl_tok_emit(s, sy[i].id);
    return SL_OK;
}

static sl_status bpe_word_uncached(const sl_tokenizer *t, sl_tok_sink *s, const char *w,
                                   size_t len);

static uint32_t word_hash(const char *w, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)w[i]) * 16777619u;
    return h;
}

/* Runs fn on the word through the sink's cache. The cache holds one kind of
 * word per call (a tokenizer is either byte-level or SentencePiece). */
sl_status sl_tok_word_cached(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len,
                             sl_tok_word_fn fn)
{
    sl_tok_cache_entry *ce = NULL;
    if (len <= SL_TOK_CACHE_WORD && s->text_len >= 4096) {
        if (!s->cache) {
            /* ~one entry per 32 input bytes, 256..16384 entries */
            uint32_t n = 256;
            while (n < 16384 && n < s->text_len / 32)
                n <<= 1;
            s->cache = sl_calloc(n, sizeof *s->cache);
            s->cache_mask = n - 1;
        }
        if (s->cache) {
            ce = &s->cache[word_hash(w, len) & s->cache_mask];
            if (ce->wlen == len && memcmp(ce->w, w, len) == 0) {
                for (uint32_t i = 0; i < ce->n_ids; i++)
                    sl_tok_emit(s, ce->ids[i]);
                return SL_OK;
            }
        }
    }
    size_t first = s->n;
    sl_status rc = fn(t, s, w, len);
    if (rc == SL_OK && ce && s->n - first <= SL_TOK_CACHE_IDS && s->n <= s->cap) {
        ce->wlen = (uint8_t)len;
        memcpy(ce->w, w, len);
        ce->n_ids = (uint8_t)(s->n - first);
        memcpy(ce->ids, s->out + first, sizeof(int32_t) * ce->n_ids);
    }
    return rc;
}

sl_status sl_tok_bpe_word(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len)
{
    return sl_tok_word_cached(t, s, w, len, bpe_word_uncached);
}

static sl_status bpe_word_uncached(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len)
{
    if (len == 1) {
        if (t->byte_tok[(uint8_t)w[0]] >= 0)
            sl_tok_emit(s, t->byte_tok[(uint8_t)w[0]]);
        return SL_OK;
    }
    if (t->ignore_merges) {   /* HF's ignore_merges: a word that is a piece is one token */
        int32_t id = sl_tok_hash_find(t, w, len);
        if (id >= 0) {
            sl_tok_emit(s, id);
            return SL_OK;
        }
    }
    if (sl_tok_grow(&s->sym, &s->sym_cap, len, sizeof(bpe_sym)) < 0)
        return SL_ENOMEM;
    bpe_sym *sy = s->sym;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if ((sy[n].id = t->byte_tok[(uint8_t)w[i]]) >= 0)
            n++;
    for (size_t i = 0; i < n; i++) {
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    return merge_and_emit(t, s, n);
}

sl_status sl_tok_bpe_chars(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len)
{
    if (sl_tok_grow(&s->sym, &s->sym_cap, len, sizeof(bpe_sym)) < 0)
        return SL_ENOMEM;
    bpe_sym *sy = s->sym;
    size_t n = 0;
    bool last_unk = false;
    for (size_t i = 0; i < len;) {
        size_t cl = sl_tok_utf8_len(w + i, len - i);
        int32_t id = sl_tok_hash_find(t, w + i, cl);
        if (id >= 0) {
            sy[n++].id = id;
            last_unk = false;
        } else {
            bool all = true;
            for (size_t k = 0; k < cl; k++)
                all = all && t->byte_tok[(uint8_t)w[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < cl; k++)
                    sy[n++].id = t->byte_tok[(uint8_t)w[i + k]];
                last_unk = false;
            } else if (t->unk >= 0 && !last_unk) {   /* fuse_unk: one <unk> per run */
                sy[n++].id = t->unk;
                last_unk = true;
            }
        }
        i += cl;
    }
    for (size_t i = 0; i < n; i++) {
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    return merge_and_emit(t, s, n);
}
