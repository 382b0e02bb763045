/* model/tokenizer_internal.h: the private layout shared by tokenizer*.c and
 * detok.c. Not a public contract: include only from those files.
 * Why one struct: the loader (tokenizer_load.c) sizes and fills everything
 * once; the encoders (tokenizer.c, tokenizer_bpe.c, tokenizer_spm.c,
 * tokenizer_pretok.c) and the decoder (detok.c) only read it, which is what
 * makes a tokenizer shareable between threads without locks.
 * Calls go one way, each file only to files below it:
 *   tokenizer_load.c -> tokenizer_pretok.c (init/fini), tokenizer_util.c
 *   tokenizer.c      -> tokenizer_pretok.c, tokenizer_bpe.c, tokenizer_spm.c,
 *                       tokenizer_util.c
 *   tokenizer_pretok.c -> tokenizer_bpe.c -> tokenizer_util.c
 *   tokenizer_spm.c  -> tokenizer_util.c
 *   detok.c          -> (the layout only) */
#ifndef SL_TOKENIZER_INTERNAL_H
#define SL_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

enum sl_tok_kind {
    SL_TOK_KIND_SPM = 1,   /* tokenizer.ggml.model "llama": U+2581 spaces, byte fallback */
    SL_TOK_KIND_BPE = 2,   /* tokenizer.ggml.model "gpt2": byte-level BPE */
};

/* A compiled pre-tokenizer: a chain of split regexes, each applied to every
 * piece the previous one produced, keeping both matches and the gaps
 * between them (HF's Split with behavior "Isolated"). */
#define SL_PRETOK_MAX 8
typedef struct {
    int n;
    void *code[SL_PRETOK_MAX];   /* pcre2_code_8 * */
} sl_pretok;

/* Open-addressing set of strings -> ids. Keys live in a blob owned by the
 * tokenizer; slots hold id+1 (0 = empty). */
typedef struct {
    uint32_t *slots;
    uint32_t mask;
} sl_tok_hash;

/* Open-addressing map (left id, right id) -> (rank, merged id). One slot
 * is 16 bytes so a probe costs one cache line, not three. */
typedef struct {
    uint64_t key;        /* (left << 32 | right) + 1; 0 = empty */
    uint32_t rank;
    int32_t result;
} sl_tok_merge_slot;

typedef struct {
    sl_tok_merge_slot *slots;
    uint32_t mask;
    uint32_t n;
} sl_tok_merges;

/* Per-call cache of short BPE words (text repeats its words; HF caches
 * them too). Direct-mapped; an entry holds the word and its ids. */
#define SL_TOK_CACHE_WORD 24
#define SL_TOK_CACHE_IDS 12
typedef struct {
    uint8_t wlen;        /* 0 = empty */
    uint8_t n_ids;
    char w[SL_TOK_CACHE_WORD];
    int32_t ids[SL_TOK_CACHE_IDS];
} sl_tok_cache_entry;

/* A trie node: children are a sibling list (fan-out is small below the
 * first byte, which trie_root indexes directly). */
typedef struct {
    int32_t child;       /* first child, -1 none */
    int32_t sibling;     /* next child of the same parent, -1 none */
    int32_t id;          /* token ending here, -1 none */
    uint8_t byte;
} sl_tok_trie_node;

struct sl_tokenizer {
    int kind;                      /* enum sl_tok_kind */
    int32_t n_vocab;
    char *text;                    /* stored token texts, concatenated */
    uint32_t *text_off;            /* (n_vocab + 1) */
    char *raw;                     /* the bytes a token stands for (byte-level decoded) */
    uint32_t *raw_off;             /* (n_vocab + 1); raw == text for SPM */
    char *piece;                   /* what decoding emits (SPM: U+2581 -> ' ', <0xNN> -> byte) */
    uint32_t *piece_off;           /* (n_vocab + 1) */
    uint8_t *attr;                 /* (n_vocab) enum sl_token_attr */
    uint8_t *eog;                  /* (n_vocab) 1 = end of generation */
    float *scores;                 /* (n_vocab) or NULL */
    sl_tok_hash by_raw;            /* raw bytes -> id */
    sl_tok_merges merges;          /* empty when the GGUF has none */
    int32_t byte_tok[256];         /* byte -> token (BPE: its byte-level char; SPM: <0xNN>), -1 none */

    /* Added tokens matched before the model runs: CONTROL/UNKNOWN (special
     * parsing only) and USER_DEFINED (always), in a byte trie so that the
     * scan costs the match depth, not the number of added tokens (Gemma 3
     * has 6,400, most starting with '<'). */
    sl_tok_trie_node *trie;        /* node 0 is the root */
    uint32_t n_trie;
    int32_t trie_root[256];        /* root's child for each first byte, -1 none */

    sl_pretok pretok;              /* BPE only */
    bool add_space_prefix;         /* SPM: prepend U+2581 to every plain piece */
    bool ignore_merges;            /* BPE: a word already in the vocab is one token (llama3) */
    bool spm_words;                /* SPM: text may be cut into words (see spm_cuttable) */
    uint8_t spm_nocut[256];        /* 1: never cut after a char ending in this byte */
    bool add_bos, add_eos;
    int32_t bos, eos, eot, eom, pad, unk;
    size_t max_piece;
};

/* Output sink for the encoders: counts every id, stores the first cap. */
typedef struct {
    int32_t *out;
    size_t cap;
    size_t n;
    /* per-call scratch, grown on demand and freed by the caller */
    void *sym;  size_t sym_cap;    /* symbol array (encoder specific) */
    void *heap; size_t heap_cap;   /* merge queue */
    char *buf;  size_t buf_cap;    /* normalized text */
    void *md;                      /* pcre2_match_data_8 *, per call */
    size_t *pieces[2]; size_t pieces_cap[2];   /* pre-tokenizer piece lists (off, len pairs) */
    sl_tok_cache_entry *cache;     /* BPE word cache, sized from the input length */
    uint32_t cache_mask;
    size_t text_len;               /* input size, to size the cache */
} sl_tok_sink;

static inline void sl_tok_emit(sl_tok_sink *s, int32_t id)
{
    if (s->n < s->cap)
        s->out[s->n] = id;
    s->n++;
}

/* tokenizer.c */
/* The untrusted spans of one sl_tokenize_rendered call, asked with offsets
 * that never decrease (the comment above sl_tok_spans_init says why that
 * makes every query O(1) amortized). */
typedef struct {
    const sl_tok_span *sp;   /* (n) both off and off+len never decrease */
    size_t n;
    size_t i;                /* first span that can still be hit */
    sl_tok_span *own;        /* sorted, merged copy, or NULL if the caller's were in order */
} sl_tok_spans;
/* Points q at sp[0..n) if they are in order, else at a sorted and merged
 * copy. SL_OK, or SL_ENOMEM (q then owns nothing). */
sl_status sl_tok_spans_init(sl_tok_spans *q, const sl_tok_span *sp, size_t n);
/* True if [off, off+len) (len >= 1) meets a span: off < end && start <
 * off+len for some span. off must not be below any earlier call's. */
bool sl_tok_spans_hit(sl_tok_spans *q, size_t off, size_t len);
/* Frees the copy, if any. */
void sl_tok_spans_fini(sl_tok_spans *q);

/* tokenizer_util.c */
/* Grows *p to hold n elements of size sz; SL_ENOMEM on failure (*p kept). */
sl_status sl_tok_grow(void **p, size_t *cap, size_t n, size_t sz);
/* Slot count (a power of two, at least 16) for a table of n keys kept at
 * most half full; the table's mask is this minus one. */
uint32_t sl_tok_table_size(size_t n);

/* Lookup by raw bytes; -1 if absent. */
int32_t sl_tok_hash_find(const sl_tokenizer *t, const char *s, size_t len);
/* Inserts id into t->by_raw under its raw bytes unless those bytes are
 * already taken (the first, i.e. preferred, holder wins). The table must
 * have a free slot. */
void sl_tok_hash_insert(sl_tokenizer *t, int32_t id);
/* Merge rank of (a, b), or UINT32_MAX; *res gets the merged id. */
uint32_t sl_tok_merge_find(const sl_tok_merges *m, int32_t a, int32_t b, int32_t *res);
/* Adds (a, b) -> (rank, res). Returns false, changing nothing, if the pair
 * is already present (HF keeps the first rank). The table must have a free
 * slot. */
bool sl_tok_merge_insert(sl_tok_merges *m, int32_t a, int32_t b, uint32_t rank, int32_t res);

/* tokenizer_pretok.c */
sl_status sl_tok_pretok_init(sl_pretok *p, const char *pre, size_t pre_len, char err[SL_ERR_LEN]);
void sl_tok_pretok_fini(sl_pretok *p);
/* Splits text and calls bpe on every piece, in order. */
sl_status sl_tok_pretok_split(const sl_tokenizer *t, sl_tok_sink *s, const char *text, size_t len);
/* Frees the sink's regex match data, if any. */
void sl_tok_pretok_release(sl_tok_sink *s);

/* tokenizer_bpe.c */
/* Byte-level BPE of one pre-tokenized word. */
sl_status sl_tok_bpe_word(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len);
/* Merge-based BPE over UTF-8 characters with byte fallback (HF's BPE model
 * for SentencePiece-converted vocabularies: Mistral, Gemma). */
sl_status sl_tok_bpe_chars(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len);
/* Runs an encoder on one word through the sink's per-call cache of short
 * words (one kind of encoder per call). */
typedef sl_status (*sl_tok_word_fn)(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len);
sl_status sl_tok_word_cached(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len,
                             sl_tok_word_fn fn);

/* tokenizer_spm.c */
/* Score-based SentencePiece BPE (GGUFs with scores and no merges). */
sl_status sl_tok_spm_scores(const sl_tokenizer *t, sl_tok_sink *s, const char *w, size_t len);

/* Length of the UTF-8 sequence starting at s[0] (1 for an invalid byte),
 * clipped to n. */
static inline size_t sl_tok_utf8_len(const char *s, size_t n)
{
    uint8_t c = (uint8_t)s[0];
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return l > n ? n : l;
}

#endif
