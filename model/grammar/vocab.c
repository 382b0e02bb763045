/* model/grammar/vocab.c: the byte trie of a model's tokens, built once per
 * model by the worker and shared by every matcher's mask walk (mask.c).
 * Trade-off: nodes are laid out in preorder (16 bytes a node), so a walk
 * that visits most of the trie reads it sequentially and pruning a subtree
 * is a jump to its end; a node's children are found only by hopping over
 * their subtrees. Building sorts the tokens once: tens of milliseconds for
 * 150k tokens. */
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

/* Ends the subtree of path[depth] at `end` and adds what lies below it,
 * and its own byte, to its parent's summary. */
static void close_node(sl_grammar_vocab *v, const uint32_t *path, uint32_t depth, uint32_t end)
{
    uint32_t i = path[depth], p = path[depth - 1];
    sl_gram_tnode *nd = &v->nodes[i];
    nd->end = end;
    uint32_t h = nd->byte >= 0x80 ? depth : v->hi_depth[i];
    if (h < v->hi_depth[p])
        v->hi_depth[p] = h;
    v->below[p][0] |= v->below[i][0];
    v->below[p][1] |= v->below[i][1];
    unsigned ch = v->chars[i] + (nd->byte < 0x80 || nd->byte >= 0xC0);   /* a character starts */
    if (ch > 255)
        ch = 255;
    if (ch > v->chars[p])
        v->chars[p] = (uint8_t)ch;
    v->nodes[p].high |= nd->high;
    v->nodes[p].bad_below |= nd->bad_below | (nd->utf8 == SL_GRAM_UTF8_INVALID);
    if (nd->byte >= 0x80)
        v->nodes[p].high = 1;
    else
        v->below[p][nd->byte >> 6] |= 1ull << (nd->byte & 63);
}

void sl_grammar_vocab_destroy(sl_grammar_vocab *v)
{
    if (v == NULL)
        return;
    free(v->nodes);
    free(v->sorted);
    free(v->below);
    free(v->chars);
    free(v->deep);
    free(v->hi_depth);
    free(v->by_len);
    free(v->len_lo);
    free(v->bytes);
    free(v->tok_off);
    free(v->tok_len);
    free(v->tok_chars);
    free(v);
}

int32_t sl_grammar_vocab_size(const sl_grammar_vocab *v) { return v->n_vocab; }

const char *sl_grammar_vocab_token(const sl_grammar_vocab *v, int32_t t, int32_t *len)
{
    if (t < 0 || t >= v->n_vocab) {
        *len = -1;
        return NULL;
    }
    *len = v->tok_len[t];
    return v->bytes + v->tok_off[t];
}

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
    uint32_t *lo = malloc((total + 1) * sizeof *lo);
    if (v == NULL || refs == NULL || lo == NULL)
        goto nomem;
    v->n_vocab = n_vocab;
    v->bytes = malloc(total ? total : 1);
    v->tok_off = malloc((n_vocab ? (size_t)n_vocab : 1) * sizeof *v->tok_off);
    v->tok_len = malloc((n_vocab ? (size_t)n_vocab : 1) * sizeof *v->tok_len);
    v->tok_chars = calloc(n_vocab ? (size_t)n_vocab : 1, sizeof *v->tok_chars);
    v->sorted = malloc((n_trie ? n_trie : 1) * sizeof *v->sorted);
    v->nodes = malloc((total + 1) * sizeof *v->nodes);
    v->below = calloc(total + 1, sizeof *v->below);
    v->chars = calloc(total + 1, 1);
    v->deep = calloc(total + 1, sizeof *v->deep);
    v->hi_depth = malloc((total + 1) * sizeof *v->hi_depth);
    v->by_len = malloc((n_trie ? n_trie : 1) * sizeof *v->by_len);
    if (!v->bytes || !v->tok_off || !v->tok_len || !v->sorted || !v->nodes || !v->below || !v->chars || !v->deep ||
        !v->by_len || !v->hi_depth || !v->tok_chars)
        goto nomem;
    memset(v->hi_depth, 0xff, (total + 1) * sizeof *v->hi_depth);
    uint64_t off = 0;
    uint32_t k = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        v->tok_off[t] = off;
        v->tok_len[t] = lens[t];
        if (lens[t] <= 0)
            continue;   /* never allowed: special (< 0) or empty */
        memcpy(v->bytes + off, bytes[t], (size_t)lens[t]);
        for (int32_t i = 0; i < lens[t]; i++)
            v->tok_chars[t] += ((const uint8_t *)bytes[t])[i] < 0x80 || ((const uint8_t *)bytes[t])[i] >= 0xC0;
        refs[k++] = (tok_ref){(const uint8_t *)v->bytes + off, lens[t], t};
        off += (uint64_t)lens[t];
        if ((uint32_t)lens[t] > v->depth_max)
            v->depth_max = (uint32_t)lens[t];
    }
    qsort(refs, n_trie, sizeof *refs, cmp_tok);
    for (uint32_t i = 0; i < n_trie; i++)
        v->sorted[i] = refs[i].id;

    /* Preorder, from the sorted tokens: path[d] is the node of the current
     * token's prefix of length d. A token keeps the nodes of its common
     * prefix with the previous token, closes the deeper ones (their
     * subtree ends here) and opens one node per remaining byte; it ends at
     * the last. Equal byte strings are adjacent, so a node's tokens are a
     * contiguous run of sorted[]. */
    uint32_t *path = lo;   /* (depth_max + 1) */
    uint32_t n_nodes = 1, depth = 0;
    v->nodes[0] = (sl_gram_tnode){0};
    path[0] = 0;
    for (uint32_t i = 0; i < n_trie; i++) {
        uint32_t common = 0;
        if (i > 0) {
            uint32_t lim = (uint32_t)(refs[i].len < refs[i - 1].len ? refs[i].len : refs[i - 1].len);
            while (common < lim && refs[i].p[common] == refs[i - 1].p[common])
                common++;
        }
        for (; depth > common; depth--)
            close_node(v, path, depth, n_nodes);
        for (; depth < (uint32_t)refs[i].len; depth++) {
            uint8_t b = refs[i].p[depth];
            v->nodes[n_nodes] = (sl_gram_tnode){.byte = b, .tok_lo = i,
                                                .utf8 = sl_gram_utf8_next(v->nodes[path[depth]].utf8, b)};
            path[depth + 1] = n_nodes++;
        }
        for (uint32_t d = 0; d <= depth; d++)
            if (v->deep[path[d]] < depth)
                v->deep[path[d]] = depth;
        sl_gram_tnode *nd = &v->nodes[path[depth]];
        if (nd->n_tok == 0)
            nd->tok_lo = i;
        nd->n_tok++;
    }
    for (; depth > 0; depth--)
        close_node(v, path, depth, n_nodes);
    v->nodes[0].end = n_nodes;
    v->n_nodes = n_nodes;
    v->n_sorted = n_trie;
    sl_gram_tnode *shrunk = realloc(v->nodes, n_nodes * sizeof *v->nodes);
    if (shrunk != NULL)
        v->nodes = shrunk;
    uint64_t(*below)[2] = realloc(v->below, n_nodes * sizeof *v->below);
    if (below != NULL)
        v->below = below;
    uint8_t *chars = realloc(v->chars, n_nodes);
    if (chars != NULL)
        v->chars = chars;
    uint32_t *deep = realloc(v->deep, n_nodes * sizeof *v->deep);
    if (deep != NULL)
        v->deep = deep;
    uint32_t *hd = realloc(v->hi_depth, n_nodes * sizeof *v->hi_depth);
    if (hd != NULL)
        v->hi_depth = hd;
    /* tokens by length: a counting sort */
    v->len_lo = calloc(v->depth_max + 2, sizeof *v->len_lo);
    if (v->len_lo == NULL)
        goto nomem;
    for (int32_t t = 0; t < n_vocab; t++)
        if (lens[t] > 0)
            v->len_lo[lens[t] + 1]++;
    for (uint32_t l = 1; l < v->depth_max + 2; l++)
        v->len_lo[l] += v->len_lo[l - 1];
    for (int32_t t = 0; t < n_vocab; t++)
        if (lens[t] > 0)
            v->by_len[v->len_lo[lens[t]]++] = t;
    /* each len_lo[L] now ends L's run: shift back to starts */
    for (uint32_t l = v->depth_max + 1; l > 0; l--)
        v->len_lo[l] = v->len_lo[l - 1];
    v->len_lo[0] = 0;
    free(refs);
    free(lo);
    *out = v;
    return SL_OK;
nomem:
    free(refs);
    free(lo);
    sl_grammar_vocab_destroy(v);
    return SL_ENOMEM;
}
