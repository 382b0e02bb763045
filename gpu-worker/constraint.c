/* gpu-worker/constraint.c: see constraint.h. Runs on the worker's scheduler
 * thread (and in `sluice generate`).
 * Trade-off: the vocabulary trie is built at the first constrained request,
 * not at startup: a server that never sees a grammar never pays for it (a
 * 128k-token vocabulary), and the first such request pays once, inside its
 * own admission. */
#include "gpu-worker/constraint.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/threadpool.h"
#include "model/tokenizer.h"
#include "shared/alloc.h"

/* Grammars are compiled once per text and kept by the vocabulary: a
 * schema that many requests send is compiled once, and its matchers share
 * their masks (sl_grammar_share_masks) from its second user on, so a new
 * request finds its root and string states already walked. The first user
 * shares nothing: a grammar sent once does not pay for a store. Bounds:
 * at most SHARE_GRAMMARS_MAX grammars share at once, with
 * SL_GRAMMAR_SHARE_BYTES each (128 MiB in all at most, allocated only as
 * masks are stored), and a grammar no constraint uses is kept while it is
 * one of the IDLE_MAX most recently released ones. */
#define SHARE_GRAMMARS_MAX 4
#define IDLE_MAX 8

typedef struct {
    uint64_t hash;
    char *text;
    size_t len;
    sl_grammar *g;
    int32_t refs;                 /* live constraints on it */
    uint32_t users;               /* constraints ever made on it */
    uint64_t released;            /* vocab clock when refs last fell to 0 */
    bool shares;
} grammar_entry;

struct sl_constraint_vocab {
    int32_t n_vocab;
    int32_t n_words;              /* (n_vocab + 31) / 32 */
    int32_t *eog;                 /* (n_eog) */
    int32_t n_eog;
    sl_constraint_build_fn build_fn;
    void *ctx;
    sl_grammar_vocab *trie;       /* NULL until the first constraint */
    _Atomic uint64_t mask_ns;     /* summed by the pool's threads */
    sl_threadpool *pool;          /* sl_constraint_mask_batch's; NULL until needed (or if it failed) */
    bool pool_tried;
    struct {                      /* the batch being masked (one at a time: the caller's thread) */
        sl_constraint *const *cs;
        const bool *allow_eog;
        const uint32_t **out;
    } job;
    uint64_t n_created;
    grammar_entry **grammars;     /* (n_grammars) compiled texts, live and idle */
    int32_t n_grammars, cap_grammars;
    int32_t n_sharing;
    uint64_t clock;
    uint64_t n_compiled;
};

struct sl_constraint {
    sl_constraint_vocab *v;
    grammar_entry *ge;            /* its grammar, shared with constraints of the same text */
    sl_grammar *g;
    sl_grammar_matcher *m;
    uint32_t *allow;              /* (n_words) */
    const char *error;            /* why the last mask is empty */
};

sl_status sl_constraint_tokenizer_trie(void *ctx, sl_grammar_vocab **out)
{
    return sl_grammar_vocab_from_tokenizer((const sl_tokenizer *)ctx, out);
}

sl_status sl_constraint_vocab_create(int32_t n_vocab, const int32_t *eog, int32_t n_eog,
                                     sl_constraint_build_fn build_fn, void *ctx, sl_constraint_vocab **out)
{
    *out = NULL;
    if (n_vocab < 1 || !build_fn || n_eog < 0 || (n_eog > 0 && !eog))
        return SL_EINVAL;
    sl_constraint_vocab *v = sl_calloc(1, sizeof *v);
    if (!v)
        return SL_ENOMEM;
    v->eog = sl_malloc((size_t)(n_eog ? n_eog : 1) * sizeof *v->eog);
    if (!v->eog) {
        free(v);
        return SL_ENOMEM;
    }
    for (int32_t i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab)
            v->eog[v->n_eog++] = eog[i];
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 31) / 32;
    v->build_fn = build_fn;
    v->ctx = ctx;
    *out = v;
    return SL_OK;
}

static void entry_free(grammar_entry *e)
{
    sl_grammar_destroy(e->g);
    free(e->text);
    free(e);
}

void sl_constraint_vocab_destroy(sl_constraint_vocab *v)
{
    if (!v)
        return;
    for (int32_t i = 0; i < v->n_grammars; i++)
        entry_free(v->grammars[i]);
    free(v->grammars);
    sl_threadpool_destroy(v->pool);
    sl_grammar_vocab_destroy(v->trie);
    free(v->eog);
    free(v);
}

uint64_t sl_constraint_vocab_mask_ns(const sl_constraint_vocab *v) { return v ? atomic_load(&v->mask_ns) : 0; }
uint64_t sl_constraint_vocab_n_created(const sl_constraint_vocab *v) { return v ? v->n_created : 0; }
uint64_t sl_constraint_vocab_n_compiled(const sl_constraint_vocab *v) { return v ? v->n_compiled : 0; }

static bool is_eog(const sl_constraint_vocab *v, int32_t t)
{
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t)
            return true;
    return false;
}

static sl_status vocab_build(sl_constraint_vocab *v)
{
    if (v->trie)
        return SL_OK;
    sl_grammar_vocab *trie = NULL;
    sl_status rc = v->build_fn(v->ctx, &trie);
    if (rc == SL_OK && sl_grammar_vocab_size(trie) != v->n_vocab)
        rc = SL_EINVAL;   /* a bitmap sized for n_vocab must cover every id the trie can set */
    if (rc < 0) {
        sl_grammar_vocab_destroy(trie);
        return rc;
    }
    v->trie = trie;
    return SL_OK;
}

static uint64_t text_hash(const char *text, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
    return h;
}

/* Destroys the least recently released idle grammars beyond IDLE_MAX. */
static void evict_idle(sl_constraint_vocab *v)
{
    for (;;) {
        int32_t idle = 0, oldest = -1;
        for (int32_t i = 0; i < v->n_grammars; i++)
            if (v->grammars[i]->refs == 0) {
                idle++;
                if (oldest < 0 || v->grammars[i]->released < v->grammars[oldest]->released)
                    oldest = i;
            }
        if (idle <= IDLE_MAX)
            return;
        grammar_entry *e = v->grammars[oldest];
        v->n_sharing -= e->shares;
        entry_free(e);
        v->grammars[oldest] = v->grammars[--v->n_grammars];
    }
}

/* The entry of text (compiled now when new); NULL with why filled on a bad
 * text, or with *rc SL_ENOMEM. */
static grammar_entry *grammar_get(sl_constraint_vocab *v, const char *text, size_t len, sl_status *rc, char *why,
                                  size_t why_len)
{
    uint64_t h = text_hash(text, len);
    for (int32_t i = 0; i < v->n_grammars; i++) {
        grammar_entry *e = v->grammars[i];
        if (e->hash == h && e->len == len && memcmp(e->text, text, len) == 0) {
            /* a second user: from now on its matchers share their masks (a
             * failure only costs speed) */
            if (!e->shares && v->n_sharing < SHARE_GRAMMARS_MAX &&
                sl_grammar_share_masks(e->g, SL_GRAMMAR_SHARE_BYTES) == SL_OK) {
                e->shares = true;
                v->n_sharing++;
            }
            *rc = SL_OK;
            return e;
        }
    }
    if (v->n_grammars == v->cap_grammars) {
        int32_t cap = v->cap_grammars ? 2 * v->cap_grammars : 16;
        grammar_entry **p = sl_realloc(v->grammars, (size_t)cap * sizeof *p);
        if (!p) {
            *rc = SL_ENOMEM;
            return NULL;
        }
        v->grammars = p;
        v->cap_grammars = cap;
    }
    grammar_entry *e = sl_calloc(1, sizeof *e);
    if (e)
        e->text = sl_malloc(len ? len : 1);
    if (!e || !e->text) {
        free(e);
        *rc = SL_ENOMEM;
        return NULL;
    }
    *rc = sl_grammar_create(text, len, &e->g, why, why_len);
    if (*rc < 0) {
        entry_free(e);
        return NULL;
    }
    memcpy(e->text, text, len);
    e->len = len;
    e->hash = h;
    v->grammars[v->n_grammars++] = e;
    v->n_compiled++;
    return e;
}

sl_status sl_constraint_create(sl_constraint_vocab *v, const char *text, size_t len, sl_constraint **out,
                               char *err, size_t err_len)
{
    *out = NULL;
    if (err_len)
        err[0] = 0;
    sl_status rc = vocab_build(v);
    if (rc < 0) {
        snprintf(err, err_len, "grammar: %s", rc == SL_ENOMEM ? "out of memory building the token trie"
                                                              : "the token trie does not match the vocabulary");
        return rc;
    }
    sl_constraint *c = sl_calloc(1, sizeof *c);
    if (c)
        c->allow = sl_calloc((size_t)v->n_words, sizeof *c->allow);
    if (!c || !c->allow) {
        sl_constraint_destroy(c);
        snprintf(err, err_len, "grammar: out of memory");
        return SL_ENOMEM;
    }
    c->v = v;
    char why[200];
    why[0] = 0;
    c->ge = grammar_get(v, text, len, &rc, why, sizeof why);
    if (!c->ge) {
        sl_constraint_destroy(c);
        snprintf(err, err_len, "grammar: %s", why[0] ? why : rc == SL_ENOMEM ? "out of memory" : "invalid");
        return rc;
    }
    c->ge->refs++;
    c->ge->users++;
    c->g = c->ge->g;
    rc = sl_grammar_matcher_create(c->g, &c->m);
    if (rc < 0) {
        sl_constraint_destroy(c);
        snprintf(err, err_len, "grammar: %s", rc == SL_ENOMEM ? "out of memory" : "cannot start the matcher");
        return rc;
    }
    c->error = "grammar: no allowed token";
    v->n_created++;
    *out = c;
    return SL_OK;
}

void sl_constraint_destroy(sl_constraint *c)
{
    if (!c)
        return;
    sl_grammar_matcher_destroy(c->m);
    if (c->ge && --c->ge->refs == 0) {
        c->ge->released = ++c->v->clock;
        evict_idle(c->v);
    }
    free(c->allow);
    free(c);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const uint32_t *sl_constraint_mask(sl_constraint *c, bool allow_eog)
{
    uint64_t t0 = now_ns();
    sl_status rc = sl_grammar_matcher_mask(c->m, c->v->trie, c->allow);
    if (rc < 0) {
        memset(c->allow, 0, (size_t)c->v->n_words * sizeof *c->allow);
        c->error = rc == SL_ERANGE ? "grammar: the matcher's ambiguity bound was reached"
                                   : "grammar: out of memory computing the token mask";
    } else {
        c->error = "grammar: no allowed token";
        if (allow_eog && sl_grammar_matcher_accepting(c->m))
            for (int32_t i = 0; i < c->v->n_eog; i++)
                c->allow[c->v->eog[i] / 32] |= 1u << (c->v->eog[i] % 32);
    }
    atomic_fetch_add_explicit(&c->v->mask_ns, now_ns() - t0, memory_order_relaxed);
    return c->allow;
}

const uint32_t *sl_constraint_allow(const sl_constraint *c)
{
    return c->allow;
}

static void mask_task(void *ctx, int64_t i, int thread)
{
    (void)thread;
    sl_constraint_vocab *v = ctx;
    v->job.out[i] = sl_constraint_mask(v->job.cs[i], v->job.allow_eog[i]);
}

void sl_constraint_mask_batch(sl_constraint_vocab *v, sl_constraint *const *cs, const bool *allow_eog, int32_t n,
                              const uint32_t **out)
{
    if (n > 1 && !v->pool_tried) {
        v->pool_tried = true;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = cores < 1 ? 1 : cores > SL_CONSTRAINT_MASK_THREADS ? SL_CONSTRAINT_MASK_THREADS : (int)cores;
        if (threads > 1 && sl_threadpool_create(threads, &v->pool) < 0)
            v->pool = NULL;
    }
    if (n <= 1 || !v->pool) {
        for (int32_t i = 0; i < n; i++)
            out[i] = sl_constraint_mask(cs[i], allow_eog[i]);
        return;
    }
    v->job.cs = cs;
    v->job.allow_eog = allow_eog;
    v->job.out = out;
    sl_threadpool_run(v->pool, mask_task, v, n);
}

sl_status sl_constraint_accept(sl_constraint *c, int32_t t)
{
    if (t < 0 || t >= c->v->n_vocab)
        return SL_EINVAL;
    if (is_eog(c->v, t))
        return sl_grammar_matcher_accepting(c->m) ? SL_OK : SL_EINVAL;
    return sl_grammar_matcher_accept_token(c->m, c->v->trie, t);
}

bool sl_constraint_finished(const sl_constraint *c)
{
    return sl_grammar_matcher_accepting(c->m) && !sl_grammar_matcher_can_continue(c->m);
}

const char *sl_constraint_error(const sl_constraint *c)
{
    return c->error;
}
