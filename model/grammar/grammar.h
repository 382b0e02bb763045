/* model/grammar/grammar.h: constrained decoding. A GBNF grammar (llama.cpp's
 * format) compiled once, a per-model vocabulary trie, and an incremental
 * matcher that says which tokens may come next.
 * Where:     front ends compile a request's grammar to refuse a bad one with a
 *            400 (the text, not the compiled form, travels to the worker); the
 *            worker compiles it again and runs one matcher per constrained
 *            sequence, asking for a mask before each draw.
 * Who:       an sl_grammar and an sl_grammar_vocab are immutable after
 *            creation and may be shared by threads; a matcher belongs to one
 *            thread at a time.
 * Safety:    any byte string is accepted as grammar text: what is not GBNF, or
 *            is left-recursive, or exceeds the limits below, is SL_EINVAL with
 *            a one-line reason naming the rule and byte offset, never a crash.
 * Model:     the grammar is compiled to bytes: a character class over code
 *            points becomes alternatives over UTF-8 byte sequences, so the
 *            matcher advances byte by byte and a token that ends inside a
 *            multi-byte character is handled like any other prefix.
 * Ownership: each _create has one _destroy; a matcher borrows its grammar
 *            (which must outlive it); a mask call borrows the vocabulary.
 * Errors:    SL_OK; SL_EINVAL (grammar text, with err); SL_ENOMEM;
 *            SL_ERANGE (a limit below was reached while matching). */
#ifndef SL_GRAMMAR_H
#define SL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/status.h"

#define SL_GRAMMAR_TEXT_MAX (256u * 1024u) /* bytes of GBNF text accepted */
#define SL_GRAMMAR_RULES_MAX 4096          /* rules after expansion of repetitions */
#define SL_GRAMMAR_STACKS_MAX 1024         /* live parse stacks (ambiguity bound) */

typedef struct sl_grammar sl_grammar;
typedef struct sl_grammar_vocab sl_grammar_vocab;
typedef struct sl_grammar_matcher sl_grammar_matcher;

/* ---- grammar ------------------------------------------------------------------ */

/* Compiles GBNF `text` (len bytes, need not be NUL-terminated) whose start
 * rule is `root`. Supports what llama.cpp's GBNF does: rules `name ::= ...`,
 * alternatives `|`, groups `( )`, literals "..." with escapes (\n \t \r \\ \"
 * \xHH \uHHHH \UHHHHHHHH), character classes [a-z] and negated [^...], `.`
 * (any code point), repetitions * + ? {m} {m,} {m,n}, and # comments.
 * *out: the grammar, or NULL on failure with err (err_len bytes, may be 0)
 * naming the problem. Undefined rules, left recursion and rules that match
 * nothing are errors. */
sl_status sl_grammar_create(const char *text, size_t len, sl_grammar **out, char *err, size_t err_len);

/* Frees it; NULL is a no-op. */
void sl_grammar_destroy(sl_grammar *g);

/* Lets g's matchers share the masks they compute: a state one matcher
 * walked the trie for is a copy for every other matcher of g (on the same
 * vocabulary: the first one a mask is stored for), as when many requests
 * carry one schema. Exact: states are compared by their stacks, not by a
 * hash. Holds at most cap_bytes of masks and keys, then adds no more.
 * Mask calls on g's matchers may then run on several threads at once (the
 * shared part has its own lock); call this while none runs. Idempotent.
 * SL_OK, SL_EINVAL (NULL), SL_ENOMEM. */
sl_status sl_grammar_share_masks(sl_grammar *g, size_t cap_bytes);

/* The cap the worker gives a grammar it shares (gpu-worker/constraint.c):
 * what a schema of four maxLength strings needs on a 150k vocabulary to
 * stop walking cold (docs/PERF.md, "Constrained decoding"). */
#define SL_GRAMMAR_SHARE_BYTES (32u << 20)

/* ---- vocabulary --------------------------------------------------------------- */

/* Builds the trie of a model's tokens. bytes[t] / lens[t]: the exact bytes
 * token t decodes to (what the detokenizer appends); lens[t] < 0 marks a
 * token the grammar never allows (control and special tokens, EOS included:
 * the caller allows end-of-generation itself, see
 * sl_grammar_matcher_accepting). Copies what it needs. *out NULL on failure. */
sl_status sl_grammar_vocab_create(int32_t n_vocab, const char *const *bytes, const int32_t *lens,
                                  sl_grammar_vocab **out);

/* The vocabulary of tokenizer t (model/tokenizer.h): each token's bytes
 * are what the detokenizer appends for it mid-sequence; control, unknown
 * and unused tokens and every end-of-generation token get lens < 0. Same
 * returns as sl_grammar_vocab_create. */
struct sl_tokenizer;
sl_status sl_grammar_vocab_from_tokenizer(const struct sl_tokenizer *t, sl_grammar_vocab **out);

/* Frees it; NULL is a no-op. */
void sl_grammar_vocab_destroy(sl_grammar_vocab *v);

int32_t sl_grammar_vocab_size(const sl_grammar_vocab *v);

/* Token t's bytes as v holds them (*len < 0: never allowed); NULL when t is
 * out of range. Valid while v lives. */
const char *sl_grammar_vocab_token(const sl_grammar_vocab *v, int32_t t, int32_t *len);

/* ---- matcher ------------------------------------------------------------------ */

/* A matcher at the start of `g`'s root rule. *out NULL on failure. */
sl_status sl_grammar_matcher_create(const sl_grammar *g, sl_grammar_matcher **out);

/* Frees it (and its mask cache); NULL is a no-op. */
void sl_grammar_matcher_destroy(sl_grammar_matcher *m);

/* Advances over n bytes. Returns SL_OK when the grammar allows them (the
 * state moves), SL_EINVAL when it does not (the state is unchanged), SL_ERANGE
 * when the ambiguity bound was reached (the state is unchanged). */
sl_status sl_grammar_matcher_accept_bytes(sl_grammar_matcher *m, const char *s, size_t n);

/* Advances over token t's bytes (v's); same returns as accept_bytes. */
sl_status sl_grammar_matcher_accept_token(sl_grammar_matcher *m, const sl_grammar_vocab *v, int32_t t);

/* True when the bytes so far are a complete sentence of the root rule: the
 * caller may allow end-of-generation. */
bool sl_grammar_matcher_accepting(const sl_grammar_matcher *m);

/* True when at least one more byte is allowed. A matcher that is accepting
 * and cannot continue is finished: the caller ends the sequence. */
bool sl_grammar_matcher_can_continue(const sl_grammar_matcher *m);

/* Writes the allowed-token bitmap for the next token: allow[t / 32] bit
 * (t % 32) is 1 when token t's bytes may follow (a token whose bytes take the
 * matcher through an accepting state and beyond is allowed when every byte
 * is). allow has (sl_grammar_vocab_size(v) + 31) / 32 words; every word is
 * written. Tokens with lens < 0 are never set. Masks are cached per matcher
 * state (the set of parse stacks), so a state met again costs a copy; the
 * cache holds at most SL_GRAMMAR_MASK_CACHE_BYTES. Returns SL_OK, SL_ENOMEM
 * or SL_ERANGE (allow is then all zero). */
sl_status sl_grammar_matcher_mask(sl_grammar_matcher *m, const sl_grammar_vocab *v, uint32_t *allow);

#define SL_GRAMMAR_MASK_CACHE_BYTES (1u << 20)  /* per matcher */

/* Mask calls since create served by the cache (*hits, a copy) and by a walk
 * of the trie (*misses), for metrics and benchmarks. */
void sl_grammar_matcher_cache_stats(const sl_grammar_matcher *m, uint64_t *hits, uint64_t *misses);

/* Of the misses, how many were built from the cached mask of the same state
 * with its bounded repetitions ({m,n}, a JSON Schema maxLength) back at
 * their full count (those with room left), walking only the tokens too
 * long for the counts left. */
uint64_t sl_grammar_matcher_shared_masks(const sl_grammar_matcher *m);

/* Of the misses, how many were copies of a mask another matcher of the
 * same grammar computed (sl_grammar_share_masks). */
uint64_t sl_grammar_matcher_cross_masks(const sl_grammar_matcher *m);

#endif
