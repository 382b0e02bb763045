/* model/tokenizer_spm.c: score-driven SentencePiece BPE, for GGUFs that
 * carry tokenizer.ggml.scores but no merges (llama.cpp's Llama 2 and Phi-3
 * vocabularies). Repeatedly merges the adjacent pair whose concatenation is
 * the highest-scoring piece (ties: leftmost), then maps pieces to ids, with
 * <0xNN> byte tokens for characters outside the vocabulary.
 * Runs in: the calling thread, scratch in the sink.
 * Trade-off: no reverse-merge table: a merged symbol is by construction a
 * vocabulary piece, so only single characters can miss and fall back to
 * bytes. */
#include "model/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t off, n;   /* bytes of the symbol in the normalized text; n 0 = merged away */
    int32_t prev, next;
} spm_sym;

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} spm_bigram;

static bool better(const spm_bigram *a, const spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(spm_bigram *h, size_t *n, spm_bigram v)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!better(&v, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static spm_bigram heap_pop(spm_bigram *h, size_t *n)
{
    spm_bigram top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && better(&h[c + 1], &h[c]))
            c++;
        if (!better(&h[c], &v))
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = v;
    return top;
}

static void try_bigram(const sl_tokenizer *t, const char *w, const spm_sym *sy, int32_t l,
                       int32_t r, spm_bigram *h, size_t *nh)
{
    if (l < 0 || r < 0)
        return;
    uint32_t size = sy[l].n + sy[r].n;
    int32_t id = sl_tok_hash_find(t, w + sy[l].off, size);
    if (id < 0)
        return;
    spm_bigram b = {t->scores ? t->scores[id] : 0.0f, l, r, size};
    heap_push(h, nh, b);
}

sl_status sl_tok_spm_scores(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len)
{
    if (sl_tok_grow(&s->sym, &s->sym_cap, len, sizeof(spm_sym)) < 0 ||
        sl_tok_grow(&s->heap, &s->heap_cap, 3 * len + 1, sizeof(spm_bigram)) < 0)
        return SL_ENOMEM;
    spm_sym *sy = s->sym;
    spm_bigram *h = s->heap;
    size_t n = 0, nh = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = sl_tok_utf8_len(w + i, len - i);
        sy[n].off = (uint32_t)i;
        sy[n].n = (uint32_t)cl;
        sy[n].prev = (int32_t)n - 1;
        sy[n].next = i + cl < len ? (int32_t)n + 1 : -1;
        n++;
        i += cl;
    }
    for (size_t i = 1; i < n; i++)
        try_bigram(t, w, sy, (int32_t)i - 1, (int32_t)i, h, &nh);
    while (nh) {
        spm_bigram b = heap_pop(h, &nh);
        spm_sym *l = &sy[b.left], *r = &sy[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;   /* one side changed since the pair was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = b.left;
        try_bigram(t, w, sy, l->prev, b.left, h, &nh);
        try_bigram(t, w, sy, b.left, l->next, h, &nh);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = sy[i].next) {
        int32_t id = sl_tok_hash_find(t, w + sy[i].off, sy[i].n);
        if (id >= 0) {
            sl_tok_emit(s, id);
            continue;
        }
        for (uint32_t k = 0; k < sy[i].n; k++) {
            int32_t b = t->byte_tok[(uint8_t)w[sy[i].off + k]];
            if (b >= 0 || t->unk >= 0)
                sl_tok_emit(s, b >= 0 ? b : t->unk);
        }
    }
    return SL_OK;
}
