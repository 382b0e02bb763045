/* model/tokenizer_util.c: the lookup tables every tokenizer file shares
 * (raw bytes -> id, (left, right) -> merge) and the scratch growth of the
 * encoders. Depends on nothing but the private layout, so the loader and
 * every encoder can sit above it.
 * Runs in: the loader fills the tables once; encoders only look up.
 * Trade-off: open addressing with linear probing, never more than half
 * full: a lookup is a probe or two in one flat array, paid for with twice
 * the slots. Insert and find live together because they must hash alike. */
#include "shared/alloc.h"
#include "model/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include "shared/hash.h"

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    return h;
}


uint32_t sl_tok_table_size(size_t n)
{
    uint32_t sz = 16;
    while (sz < n * 2)
        sz <<= 1;
    return sz;
}

int32_t sl_tok_hash_find(const sl_tokenizer *t, const char *s, size_t len)
{
    uint32_t m = t->by_raw.mask;
    for (uint32_t i = (uint32_t)hash_bytes(s, len) & m;; i = (i + 1) & m) {
        uint32_t v = t->by_raw.slots[i];
        if (!v)
            return -1;
        int32_t id = (int32_t)(v - 1);
        uint32_t o = t->raw_off[id], l = t->raw_off[id + 1] - o;
        if (l == len && memcmp(t->raw + o, s, len) == 0)
            return id;
    }
}

/* Inserts id under its raw bytes unless those bytes are already taken
 * (the first, i.e. preferred, holder wins). */
void sl_tok_hash_insert(sl_tokenizer *t, int32_t id)
{
    uint32_t o = t->raw_off[id], l = t->raw_off[id + 1] - o;
    uint32_t m = t->by_raw.mask;
    for (uint32_t i = (uint32_t)hash_bytes(t->raw + o, l) & m;; i = (i + 1) & m) {
        uint32_t v = t->by_raw.slots[i];
        if (!v) {
            t->by_raw.slots[i] = (uint32_t)id + 1;
            return;
        }
        uint32_t o2 = t->raw_off[v - 1], l2 = t->raw_off[v] - o2;
        if (l2 == l && memcmp(t->raw + o2, t->raw + o, l) == 0)
            return;
    }
}

uint32_t sl_tok_merge_find(const sl_tok_merges *m, int32_t a, int32_t b, int32_t *res)
{
    if (!m->n)
        return UINT32_MAX;
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (uint32_t i = (uint32_t)sl_hash_mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        const sl_tok_merge_slot *sl = &m->slots[i];
        if (sl->key == k) {
            *res = sl->result;
            return sl->rank;
        }
        if (!sl->key)
            return UINT32_MAX;
    }
}

/* Returns false if the pair was already present (HF keeps the first rank). */
bool sl_tok_merge_insert(sl_tok_merges *m, int32_t a, int32_t b, uint32_t rank, int32_t res)
{
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (uint32_t i = (uint32_t)sl_hash_mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        sl_tok_merge_slot *sl = &m->slots[i];
        if (sl->key == k)
            return false;
        if (!sl->key) {
            sl->key = k;
            sl->rank = rank;
            sl->result = res;
            m->n++;
            return true;
        }
    }
}

sl_status sl_tok_grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return SL_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < n)
        nc *= 2;
    void *q = sl_realloc(*p, nc * sz);
    if (!q)
        return SL_ENOMEM;
    *p = q;
    *cap = nc;
    return SL_OK;
}
