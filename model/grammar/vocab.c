/* model/grammar/vocab.c: the byte trie of a model's tokens, built once per
 * model by the worker and shared by every matcher's mask walk (mask.c).
 * Trade-off: nodes are laid out breadth first with each node's children
 * contiguous (16 bytes a node), so the walk reads children as one run and
 * a subtree is pruned by skipping its index range; building sorts the
 * tokens once, which costs a few tens of milliseconds for 150k tokens. */
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar_internal.h"

typedef struct {
    const uint8_t *p;
    int32_t len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b)
{
    const tok_ref *x = a, *y = b;
    int32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, (size_t)n);
    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void sl_grammar_vocab_destroy(sl_grammar_vocab *v)
{
    if (v == NULL)
        return;
    free(v->nodes);
    free(v->sorted);
    free(v->bytes);
    free(v->tok_off);
    free(v->tok_len);
    free(v);
}

int32_t sl_grammar_vocab_size(const sl_grammar_vocab *v) { return v->n_vocab; }

sl_status sl_grammar_vocab_create(int32_t n_vocab, const char *const *bytes, const int32_t *lens,
                                  sl_grammar_vocab **out)
{
    *out = NULL;
    if (n_vocab < 0 || (n_vocab > 0 && (bytes == NULL || lens == NULL)))
        return SL_EINVAL;
    uint64_t total = 0;
    uint32_t n_trie = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (lens[t] > 0 && bytes[t] == NULL)
            return SL_EINVAL;
        if (lens[t] > 0) {
            total += (uint64_t)lens[t];
            n_trie++;
        }
    }
    if (total >= UINT32_MAX)
        return SL_EINVAL;   /* node indices are 32-bit */
    sl_grammar_vocab *v = calloc(1, sizeof *v);
    tok_ref *refs = malloc((n_trie ? n_trie : 1) * sizeof *refs);
    uint32_t *lo = malloc((total + 1) * sizeof *lo), *hi = malloc((total + 1) * sizeof *hi);
    if (v == NULL || refs == NULL || lo == NULL || hi == NULL)
        goto nomem;
    v->n_vocab = n_vocab;
    v->bytes = malloc(total ? total : 1);
    v->tok_off = malloc((n_vocab ? (size_t)n_vocab : 1) * sizeof *v->tok_off);
    v->tok_len = malloc((n_vocab ? (size_t)n_vocab : 1) * sizeof *v->tok_len);
    v->sorted = malloc((n_trie ? n_trie : 1) * sizeof *v->sorted);
    v->nodes = malloc((total + 1) * sizeof *v->nodes);
    if (!v->bytes || !v->tok_off || !v->tok_len || !v->sorted || !v->nodes)
        goto nomem;
    uint64_t off = 0;
    uint32_t k = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        v->tok_off[t] = off;
        v->tok_len[t] = lens[t];
        if (lens[t] <= 0)
            continue;   /* never allowed: special (< 0) or empty */
        memcpy(v->bytes + off, bytes[t], (size_t)lens[t]);
        refs[k++] = (tok_ref){(const uint8_t *)v->bytes + off, lens[t], t};
        off += (uint64_t)lens[t];
        if ((uint32_t)lens[t] > v->depth_max)
            v->depth_max = (uint32_t)lens[t];
    }
    qsort(refs, n_trie, sizeof *refs, cmp_tok);
    for (uint32_t i = 0; i < n_trie; i++)
        v->sorted[i] = refs[i].id;

    /* Breadth first: node i covers sorted[lo[i] .. hi[i]), all sharing its
     * prefix of length depth(i); the tokens of exactly that length come
     * first in the range (a prefix sorts before its extensions). Depth is
     * implicit: a node's depth is its parent's plus one, tracked per level. */
    uint32_t n_nodes = 1;
    v->nodes[0] = (sl_gram_tnode){0};
    lo[0] = 0;
    hi[0] = n_trie;
    uint32_t level_end = 1, depth = 0;
    for (uint32_t i = 0; i < n_nodes; i++) {
        if (i == level_end) {
            depth++;
            level_end = n_nodes;
        }
        sl_gram_tnode *nd = &v->nodes[i];
        uint32_t a = lo[i], b = hi[i];
        nd->tok_lo = a;
        while (a < b && (uint32_t)refs[a].len == depth)
            a++;
        nd->n_tok = a - nd->tok_lo;
        nd->child_lo = n_nodes;
        nd->n_child = 0;
        while (a < b) {
            uint8_t c = refs[a].p[depth];
            uint32_t e = a + 1;
            while (e < b && refs[e].p[depth] == c)
                e++;
            v->nodes[n_nodes] = (sl_gram_tnode){.byte = c};
            lo[n_nodes] = a;
            hi[n_nodes] = e;
            n_nodes++;
            nd = &v->nodes[i];
            nd->n_child++;
            a = e;
        }
    }
    v->n_nodes = n_nodes;
    sl_gram_tnode *shrunk = realloc(v->nodes, n_nodes * sizeof *v->nodes);
    if (shrunk != NULL)
        v->nodes = shrunk;
    free(refs);
    free(lo);
    free(hi);
    *out = v;
    return SL_OK;
nomem:
    free(refs);
    free(lo);
    free(hi);
    sl_grammar_vocab_destroy(v);
    return SL_ENOMEM;
}
