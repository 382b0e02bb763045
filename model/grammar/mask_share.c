/* model/grammar/mask_share.c: masks shared between the matchers of one
 * grammar (sl_grammar_share_masks). Many requests of a server carry the
 * same schema, and each request's matcher meets the same states (the root,
 * the first token inside each string property, each count of a bounded
 * string) and would walk the trie for each one cold; here the first walk
 * of a state is a copy for every later matcher.
 * Key: a state is its set of stacks and its accepting bit. Set ids and
 * node ids are per matcher, so the key is the state's content: the
 * accepting bit, then each stack as its positions (top first), stacks in
 * the order of their hashes. The table compares whole keys, never hashes
 * alone, so a hit is exactly the same state and its mask exactly the
 * same; two stacks whose hashes tie can only order differently in two
 * matchers, which makes a miss, not a wrong mask.
 * Who: any thread; a mutex guards the table (mask calls of one step run
 * on a pool, sl_constraint_mask_batch). The lock is taken only on a miss
 * of the matcher's own cache, and holds a copy of one mask at most.
 * Bound: the table stops adding once its masks and keys reach the cap
 * given at sl_grammar_share_masks; what is in it stays until the grammar
 * is destroyed (no eviction: states met first are the common ones). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar_internal.h"
#include "shared/hash.h"

typedef struct {
    uint64_t hash;
    uint32_t key_len;        /* int32 words */
    int32_t *key;            /* (key_len), then the mask's words in the same block */
} share_entry;

struct sl_gram_mask_share {
    pthread_mutex_t lock;
    const sl_grammar_vocab *vocab;   /* the vocabulary of the masks held (the first one used) */
    uint32_t words;
    size_t cap_bytes, used_bytes;
    share_entry *tab;                /* open addressing; key NULL = empty */
    uint32_t tab_cap, n;
};

sl_status sl_grammar_share_masks(sl_grammar *g, size_t cap_bytes)
{
    if (g == NULL)
        return SL_EINVAL;
    if (g->share)
        return SL_OK;
    sl_gram_mask_share *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SL_ENOMEM;
    s->tab_cap = 64;
    s->tab = calloc(s->tab_cap, sizeof *s->tab);
    if (s->tab == NULL || pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s->tab);
        free(s);
        return SL_ENOMEM;
    }
    s->cap_bytes = cap_bytes;
    g->share = s;
    return SL_OK;
}

void sl_gram_share_free(sl_gram_mask_share *s)
{
    if (s == NULL)
        return;
    for (uint32_t i = 0; i < s->tab_cap; i++)
        free(s->tab[i].key);
    free(s->tab);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

typedef struct {
    uint64_t hash;
    int32_t top;
    uint32_t len;
} stack_ref;

static int by_hash(const void *a, const void *b)
{
    uint64_t x = ((const stack_ref *)a)->hash, y = ((const stack_ref *)b)->hash;
    return (x > y) - (x < y);
}

/* Writes set s's key into m->key_buf (grown as needed): *len words, *hash.
 * false when out of memory. */
static bool build_key(sl_grammar_matcher *m, int32_t s, uint32_t *len, uint64_t *hash)
{
    const sl_gram_set *set = &m->sets[s];
    uint32_t total = 2;
    for (uint32_t i = 0; i < set->n; i++)
        for (int32_t id = m->set_pool[set->off + i]; id >= 0; id = m->node_parent[id])
            total++;
    total += set->n;   /* a length per stack */
    size_t refs_bytes = (size_t)set->n * sizeof(stack_ref);
    size_t need = (size_t)total * sizeof(int32_t) + refs_bytes;
    if (need > m->key_bytes) {
        void *p = realloc(m->key_buf, need);
        if (p == NULL)
            return false;
        m->key_buf = p;
        m->key_bytes = need;
    }
    stack_ref *refs = (stack_ref *)m->key_buf;
    int32_t *key = (int32_t *)((char *)m->key_buf + refs_bytes);
    for (uint32_t i = 0; i < set->n; i++) {
        int32_t top = m->set_pool[set->off + i];
        uint64_t h = 0x9e3779b97f4a7c15ull;
        uint32_t n = 0;
        for (int32_t id = top; id >= 0; id = m->node_parent[id], n++)
            h = sl_hash_mix64(h ^ (uint32_t)m->node_pos[id]);
        refs[i] = (stack_ref){sl_hash_mix64(h ^ n), top, n};
    }
    qsort(refs, set->n, sizeof *refs, by_hash);
    uint32_t w = 0;
    key[w++] = (int32_t)set->accepting;
    key[w++] = (int32_t)set->n;
    uint64_t h = sl_hash_mix64(set->accepting + 1u);
    for (uint32_t i = 0; i < set->n; i++) {
        key[w++] = (int32_t)refs[i].len;
        for (int32_t id = refs[i].top; id >= 0; id = m->node_parent[id])
            key[w++] = m->node_pos[id];
        h = sl_hash_mix64(h ^ refs[i].hash);
    }
    *len = w;
    *hash = h;
    return true;
}

static uint32_t *entry_bits(const share_entry *e) { return (uint32_t *)(e->key + e->key_len); }

/* The slot holding key, or the empty slot where it would go. */
static share_entry *probe(sl_gram_mask_share *s, const int32_t *key, uint32_t len, uint64_t hash)
{
    uint32_t mask = s->tab_cap - 1;
    for (uint32_t k = (uint32_t)hash & mask;; k = (k + 1) & mask) {
        share_entry *e = &s->tab[k];
        if (e->key == NULL ||
            (e->hash == hash && e->key_len == len && memcmp(e->key, key, len * sizeof *key) == 0))
            return e;
    }
}

bool sl_gram_share_lookup(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t s, uint32_t *allow)
{
    sl_gram_mask_share *sh = m->g->share;
    uint32_t len;
    uint64_t hash;
    if (sh == NULL || !build_key(m, s, &len, &hash))
        return false;
    const int32_t *key = (const int32_t *)((char *)m->key_buf + (size_t)m->sets[s].n * sizeof(stack_ref));
    bool hit = false;
    pthread_mutex_lock(&sh->lock);
    if (sh->vocab == v && sh->n > 0) {
        const share_entry *e = probe(sh, key, len, hash);
        if (e->key) {
            memcpy(allow, entry_bits(e), sh->words * sizeof *allow);
            hit = true;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    return hit;
}

/* Doubles the table; false when out of memory (the table is unchanged). */
static bool grow(sl_gram_mask_share *s)
{
    uint32_t cap = s->tab_cap * 2;
    share_entry *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return false;
    share_entry *old = s->tab;
    uint32_t old_cap = s->tab_cap;
    s->tab = t;
    s->tab_cap = cap;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i].key)
            *probe(s, old[i].key, old[i].key_len, old[i].hash) = old[i];
    free(old);
    return true;
}

void sl_gram_share_insert(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t s, const uint32_t *allow)
{
    sl_gram_mask_share *sh = m->g->share;
    uint32_t len;
    uint64_t hash;
    if (sh == NULL || !build_key(m, s, &len, &hash))
        return;
    const int32_t *key = (const int32_t *)((char *)m->key_buf + (size_t)m->sets[s].n * sizeof(stack_ref));
    uint32_t words = ((uint32_t)v->n_vocab + 31) / 32;
    size_t bytes = (size_t)len * sizeof *key + (size_t)words * sizeof *allow;
    pthread_mutex_lock(&sh->lock);
    if (sh->vocab == NULL) {
        sh->vocab = v;
        sh->words = words;
    }
    if (sh->vocab == v && sh->used_bytes + bytes <= sh->cap_bytes && ((sh->n + 1) * 2 <= sh->tab_cap || grow(sh))) {
        share_entry *e = probe(sh, key, len, hash);
        if (e->key == NULL && (e->key = malloc(bytes)) != NULL) {
            e->hash = hash;
            e->key_len = len;
            memcpy(e->key, key, (size_t)len * sizeof *key);
            memcpy(entry_bits(e), allow, (size_t)words * sizeof *allow);
            sh->used_bytes += bytes;
            sh->n++;
        }
    }
    pthread_mutex_unlock(&sh->lock);
}
