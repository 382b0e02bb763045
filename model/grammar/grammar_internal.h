/* model/grammar/grammar_internal.h: the private layout shared by the grammar
 * engine's files. Calls go one way: gbnf_parse.c builds an sl_gram_build
 * (rules of alternatives of byte-class / rule-reference elements);
 * grammar.c checks it and flattens it into an sl_grammar; matcher.c walks
 * the flat form; vocab.c builds the token trie that mask.c walks with the
 * matcher's transition function. */
#ifndef SL_GRAMMAR_INTERNAL_H
#define SL_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/grammar/grammar.h"

#define SL_GRAMMAR_REPEAT_MAX 10000        /* n of {m,n} and m of {m,} */
#define SL_GRAMMAR_ELEMS_MAX (1u << 20)    /* elements after expansion */
#define SL_GRAMMAR_CLASSES_MAX (1u << 18)  /* distinct byte classes */

/* ---- compiled form ------------------------------------------------------- */

enum sl_gram_kind {
    SL_GRAM_TERM = 0,   /* one byte out of classes[arg] */
    SL_GRAM_REF  = 1,   /* the rule `arg` */
    SL_GRAM_END  = 2,   /* end of an alternative */
};

typedef struct {
    uint32_t kind;   /* enum sl_gram_kind */
    uint32_t arg;
} sl_gram_elem;

typedef struct {
    uint64_t w[4];   /* bit b of w[b >> 6]: byte b is in the class */
} sl_gram_class;

static inline bool sl_gram_class_has(const sl_gram_class *c, unsigned b)
{
    return (c->w[b >> 6] >> (b & 63)) & 1u;
}

typedef struct {
    char *name;        /* user name, or "<user>~N" for a helper rule */
    uint32_t offset;   /* byte offset of its definition (helpers: the construct) */
    uint32_t alt_lo;   /* alternatives alt_start[alt_lo .. alt_lo + n_alts) */
    uint32_t n_alts;
} sl_gram_rule;

typedef struct sl_gram_mask_share sl_gram_mask_share;   /* mask_share.c */

struct sl_grammar {
    uint32_t n_rules;
    uint32_t root;
    sl_gram_rule *rules;     /* (n_rules) */
    uint32_t *alt_start;     /* (total alternatives): index into elems */
    uint32_t n_elems;
    sl_gram_elem *elems;     /* (n_elems): each alternative ends in SL_GRAM_END */
    uint32_t n_classes;
    sl_gram_class *classes;  /* (n_classes) */
    /* Counted repetitions (x{m,n} compiles to a chain O_j ::= x O_{j-1} |
     * empty, j = n - m .. 1): for an element of O_j's first alternative,
     * rep_left is j and rep_top the element at the same offset in the
     * chain's largest rule; 0 and the element itself elsewhere. The mask
     * cache uses them to share masks between counts (mask.c). */
    uint32_t *rep_left;      /* (n_elems) */
    uint32_t *rep_top;       /* (n_elems) */
    /* masks shared by its matchers (mask_share.c), NULL until
     * sl_grammar_share_masks; the one part of a grammar that changes after
     * creation, behind its own lock */
    struct sl_gram_mask_share *share;
};

/* ---- build form (parser output, compiler input) -------------------------- */

typedef struct {
    sl_gram_elem *v;
    uint32_t n, cap;
} sl_gram_seq;   /* one alternative (no END) */

typedef struct {
    char *name;
    uint32_t offset;      /* definition, or first reference while undefined */
    bool defined;
    bool helper;
    uint32_t rep_left;    /* j of a chain rule O_j (see sl_grammar.rep_left), or 0 */
    uint32_t rep_top;     /* then: the chain's largest rule */
    sl_gram_seq *alts;
    uint32_t n_alts, cap_alts;
} sl_gram_brule;

typedef struct {
    sl_gram_brule *rules;
    uint32_t n_rules, cap_rules;
    sl_gram_class *classes;
    uint32_t n_classes, cap_classes;
    int32_t single[256];   /* class index of {b}, or -1 */
    uint32_t n_elems;      /* running total, for SL_GRAMMAR_ELEMS_MAX */
} sl_gram_build;

/* Parses GBNF into b (which the caller zeroed). SL_EINVAL with err on bad
 * text, SL_ENOMEM. b is freed by sl_gram_build_fini either way. */
sl_status sl_gbnf_parse(const char *text, size_t len, sl_gram_build *b, char *err, size_t err_len);
void sl_gram_build_fini(sl_gram_build *b);

/* Writes "fmt ..." into err (err_len may be 0). */
void sl_gram_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- vocabulary trie ------------------------------------------------------ */

/* UTF-8 decoder states: at a character boundary, inside one (what the next
 * byte must be), or invalid. */
enum {
    SL_GRAM_UTF8_BOUNDARY = 0,
    SL_GRAM_UTF8_CONT1,     /* one 80-BF left */
    SL_GRAM_UTF8_CONT2,     /* two 80-BF left */
    SL_GRAM_UTF8_CONT3,     /* three 80-BF left */
    SL_GRAM_UTF8_E0,        /* A0-BF, then one */
    SL_GRAM_UTF8_ED,        /* 80-9F, then one */
    SL_GRAM_UTF8_F0,        /* 90-BF, then two */
    SL_GRAM_UTF8_F4,        /* 80-8F, then two */
    SL_GRAM_UTF8_INVALID,
};

static inline uint8_t sl_gram_utf8_next(uint8_t st, unsigned b)
{
    bool cont = b >= 0x80 && b <= 0xBF;
    switch (st) {
    case SL_GRAM_UTF8_BOUNDARY:
        if (b < 0x80) return SL_GRAM_UTF8_BOUNDARY;
        if (b >= 0xC2 && b <= 0xDF) return SL_GRAM_UTF8_CONT1;
        if (b == 0xE0) return SL_GRAM_UTF8_E0;
        if (b == 0xED) return SL_GRAM_UTF8_ED;
        if (b >= 0xE1 && b <= 0xEF) return SL_GRAM_UTF8_CONT2;
        if (b == 0xF0) return SL_GRAM_UTF8_F0;
        if (b >= 0xF1 && b <= 0xF3) return SL_GRAM_UTF8_CONT3;
        if (b == 0xF4) return SL_GRAM_UTF8_F4;
        return SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_CONT1: return cont ? SL_GRAM_UTF8_BOUNDARY : SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_CONT2: return cont ? SL_GRAM_UTF8_CONT1 : SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_CONT3: return cont ? SL_GRAM_UTF8_CONT2 : SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_E0: return b >= 0xA0 && b <= 0xBF ? SL_GRAM_UTF8_CONT1 : SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_ED: return b >= 0x80 && b <= 0x9F ? SL_GRAM_UTF8_CONT1 : SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_F0: return b >= 0x90 && b <= 0xBF ? SL_GRAM_UTF8_CONT2 : SL_GRAM_UTF8_INVALID;
    case SL_GRAM_UTF8_F4: return b >= 0x80 && b <= 0x8F ? SL_GRAM_UTF8_CONT2 : SL_GRAM_UTF8_INVALID;
    default: return SL_GRAM_UTF8_INVALID;
    }
}

typedef struct {
    uint32_t end;        /* index past this node's subtree (preorder) */
    uint32_t tok_lo;     /* tokens ending here: sorted[tok_lo .. tok_lo + n_tok) */
    uint32_t n_tok;
    uint8_t byte;        /* the edge into this node */
    uint8_t high;        /* a byte >= 0x80 is on an edge below this node */
    uint8_t utf8;        /* UTF-8 decoder state after this node's bytes (SL_GRAM_UTF8_*) */
    uint8_t bad_below;   /* some token below holds invalid UTF-8 */
} sl_gram_tnode;

struct sl_grammar_vocab {
    int32_t n_vocab;
    uint32_t n_nodes;
    sl_gram_tnode *nodes;    /* (n_nodes) in preorder: node 0 is the root (the empty
                                prefix), a node's first child is the next node */
    int32_t *sorted;         /* token ids with lens >= 0, lexicographic by bytes */
    uint32_t depth_max;      /* longest token */
    uint32_t n_sorted;
    uint64_t (*below)[2];    /* (n_nodes) ASCII bytes on edges below each node */
    uint8_t *chars;          /* (n_nodes) most characters on a path below (a cut
                                one counts), saturated at 255 */
    uint32_t *deep;          /* (n_nodes) longest token (bytes) in the subtree */
    uint32_t *hi_depth;      /* (n_nodes) least depth of a byte >= 0x80 strictly
                                below, UINT32_MAX when none */
    int32_t *by_len;         /* (n_sorted) token ids with lens > 0, shortest first */
    uint32_t *len_lo;        /* (depth_max + 2) by_len[len_lo[L] ..]: the tokens of
                                L bytes or more */
    char *bytes;             /* all token bytes */
    uint64_t *tok_off;       /* (n_vocab) offset in bytes */
    int32_t *tok_len;        /* (n_vocab) the caller's lens */
    uint32_t *tok_chars;     /* (n_vocab) characters: bytes outside 80-BF */
};

/* ---- matcher internals (matcher.c) used by mask.c ------------------------- */

#define SL_GRAM_DEAD (-1)       /* transition: no stack survives */
#define SL_GRAM_OVERFLOW (-2)   /* transition: SL_GRAMMAR_STACKS_MAX reached */
#define SL_GRAM_NOMEM (-3)      /* transition: memory ran out computing it */
#define SL_GRAM_UNKNOWN (-4)    /* dense row entry not computed yet */

/* Node closings one mask walk may spend computing new transitions (a
 * cold JSON mask spends about 10^4): past it the mask is SL_ERANGE, so a
 * grammar built to keep a thousand stacks alive on every byte cannot stall
 * the worker for seconds per token. */
#define SL_GRAM_MASK_WORK_MAX (1u << 24)

typedef struct {
    uint32_t off, n;         /* stacks: set_pool[off .. off + n), sorted node ids */
    uint32_t hash;
    uint32_t accepting;      /* a stack finished the root rule */
    int32_t cache_slot;      /* mask cache entry, or -1 */
    int32_t dense;           /* row of dense transitions, or -1 */
    /* The mask walk's summary of a hot set X (mask.c, uniform_props): on
     * the ASCII bytes of umask, X steps to one set, usucc; run: how many
     * sets X, usucc(X), ... in a row share X's umask (UINT32_MAX: a loop),
     * so any ASCII text of up to run characters over umask is allowed. */
    uint32_t props_known;
    uint32_t utf8_closed;    /* usucc == X and every valid multi-byte character
                                leads back to X through live sets */
    int32_t usucc;           /* or -1 */
    uint32_t run;            /* 0: not computed */
    uint64_t umask[2];
    int32_t run_end;         /* with run: the set after run characters over
                                umask, or -1 (a loop, or unknown) */
    uint32_t tail_utf8;      /* 0 unknown; 2: run <= a few, and every set of the
                                run takes every valid multi-byte character to
                                its usucc (1: not so) */
    /* Mask sharing (sl_gram_share): share_ref is this set with every
     * counted repetition that has room (share_min) back at its full
     * count, share_bound the longest
     * token (in bytes) on which both sets allow the same; -1 / 0 when the
     * set has no counter or is its own reference. */
    uint32_t share_known;
    int32_t share_ref;
    uint32_t share_bound;
    uint32_t n_tr;           /* transitions computed from it */
    sl_gram_class any;       /* union of the stacks' top classes */
} sl_gram_set;

typedef struct {
    int32_t set;             /* owner, or -1 when free */
    uint32_t used;           /* clock bit */
} sl_gram_cache_entry;

struct sl_grammar_matcher {
    const sl_grammar *g;
    int32_t cur;             /* current set */

    /* nodes: interned (pos, parent) pairs: persistent stacks with shared tails */
    uint32_t n_nodes, cap_nodes;
    int32_t *node_pos, *node_parent;
    uint32_t *node_stamp;    /* visited mark for one step */
    int32_t *node_hash;      /* open addressing, -1 empty */
    uint32_t node_hash_cap;

    /* sets of stacks, interned */
    uint32_t n_sets, cap_sets;
    sl_gram_set *sets;
    uint32_t pool_n, pool_cap;
    int32_t *set_pool;
    int32_t *set_hash;       /* open addressing, -1 empty */
    uint32_t set_hash_cap;

    /* transitions (set, byte) -> set, open addressing */
    uint64_t *tr_key;        /* set << 8 | byte, plus 1; 0 empty */
    int32_t *tr_val;
    uint32_t tr_n, tr_cap;
    /* a set with many transitions (inside a string) also gets a dense row
     * of 256, so the mask walk's hot path is one load */
    int32_t *dense;          /* (n_dense, 256): SL_GRAM_UNKNOWN or a step result */
    uint32_t n_dense, cap_dense;

    /* one step's scratch */
    uint32_t stamp;
    int32_t *out;
    uint32_t out_n, out_cap;
    int32_t *todo;
    uint32_t todo_n, todo_cap;
    uint32_t work;
    uint64_t work_total;     /* node closings ever: the mask walk's budget */
    bool step_accepting, step_overflow, step_nomem;

    /* mask cache */
    uint32_t cache_words;    /* words per mask; 0 before the first mask */
    const sl_grammar_vocab *cache_vocab;
    uint32_t cache_n, cache_hand;
    sl_gram_cache_entry *cache;
    uint32_t *cache_bits;    /* (cache_n * cache_words) */
    uint64_t stat_hits, stat_misses;
    uint64_t stat_shared;    /* misses served from a reference set's mask */
    uint32_t share_min;      /* counters leaving fewer units are not reset by
                                sl_gram_share (set per vocabulary, mask.c) */

    uint64_t stat_cross;     /* misses served by another matcher's mask (mask_share.c) */
    void *key_buf;           /* a state's key for the shared masks (mask_share.c) */
    size_t key_bytes;

    /* walk scratch */
    int32_t *walk_set;
    uint32_t *walk_child;    /* (3 * walk_cap): next, end, characters so far */
    uint32_t walk_cap;
};

/* The set reached from set s over byte b: a set id, SL_GRAM_DEAD,
 * SL_GRAM_OVERFLOW or SL_GRAM_NOMEM. */
int32_t sl_gram_step(sl_grammar_matcher *m, int32_t s, unsigned b);

/* Set s's mask-sharing reference (see sl_gram_set.share_ref): *ref is a
 * set id or -1, *bound its share_bound. SL_OK or SL_ENOMEM. */
sl_status sl_gram_share(sl_grammar_matcher *m, int32_t s, int32_t *ref, uint32_t *bound);

/* Drops every set, node and transition but the current set's (the mask
 * cache too) when the matcher's memory has grown past its bound. */
sl_status sl_gram_maybe_compact(sl_grammar_matcher *m);

/* Masks shared between the matchers of one grammar (mask_share.c):
 * lookup copies state s's mask into allow and returns true when another
 * matcher stored it for vocabulary v; insert stores it (when the grammar
 * shares masks, the vocabulary is the one it holds, and the cap allows).
 * Both are no-ops on a grammar that does not share; thread safe. */
bool sl_gram_share_lookup(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t s, uint32_t *allow);
void sl_gram_share_insert(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t s, const uint32_t *allow);
void sl_gram_share_free(struct sl_gram_mask_share *s);

/* The mask cache's storage (matcher.c; mask.c fills it). */
void sl_gram_cache_clear(sl_grammar_matcher *m);
void sl_gram_cache_free(sl_grammar_matcher *m);

#endif
