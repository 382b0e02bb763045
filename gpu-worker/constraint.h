/* gpu-worker/constraint.h: constrained decoding for the scheduler: one
 * grammar matcher per constrained sequence, over the model's token bytes.
 * Where:     the worker process (the scheduler's thread) and `sluice generate`.
 *            Wraps model/grammar/grammar.h: the vocabulary (the trie of every
 *            token's bytes) is built once, at the first constrained request;
 *            a grammar text is compiled once and kept by the vocabulary
 *            while constraints use it (and a while after), and from its
 *            second constraint on their matchers share computed masks;
 *            each sequence keeps its own matcher and an allow bitmap
 *            (sl_sample_req.allow) sized at creation.
 * Who:       one thread: a vocabulary and its constraints are not shared
 *            between threads (sl_constraint_mask_batch spreads one call's
 *            masks over its own pool and returns when they are done).
 * Model:     the matcher follows the generated tokens, never the KV cache, so
 *            preemption, recompute and prefix caching leave it valid.
 *            End-of-generation tokens add no text (their bytes are never in
 *            the trie): the mask allows them only when the matcher is
 *            accepting, and the caller ends a sequence whose grammar is
 *            finished (accepting, nothing more may follow).
 * Ownership: sl_constraint_vocab_create/_destroy, sl_constraint_create/
 *            _destroy; a constraint borrows its vocabulary (which must
 *            outlive it) and copies the grammar text it needs.
 * Errors:    SL_OK; SL_EINVAL (bad grammar text, with the reason);
 *            SL_ENOMEM; SL_ERANGE (the matcher's ambiguity bound). */
#ifndef SL_CONSTRAINT_H
#define SL_CONSTRAINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/grammar/grammar.h"
#include "shared/status.h"

/* Builds the token trie (*out) when the first constraint needs it: for a
 * model, sl_constraint_tokenizer_trie; tests give their own bytes to
 * sl_grammar_vocab_create. Returns SL_OK, SL_ENOMEM, SL_EINVAL. */
typedef sl_status (*sl_constraint_build_fn)(void *ctx, sl_grammar_vocab **out);

/* A build_fn over a model tokenizer (ctx: the const sl_tokenizer *):
 * sl_grammar_vocab_from_tokenizer, so each token's bytes are what the
 * detokenizer appends for it, and control, unknown, unused and
 * end-of-generation tokens never match text. */
sl_status sl_constraint_tokenizer_trie(void *ctx, sl_grammar_vocab **out);

typedef struct sl_constraint_vocab sl_constraint_vocab;
typedef struct sl_constraint sl_constraint;

/* A vocabulary of n_vocab tokens whose trie build_fn makes (called once, when
 * the first constraint is created; ctx must live until destroy); eog: the
 * n_eog end-of-generation ids (copied), which the trie must leave out (the
 * mask adds them itself). Cheap: nothing is built yet. *out NULL on failure.
 * Returns SL_OK, SL_EINVAL (n_vocab < 1, NULL build_fn), SL_ENOMEM. */
sl_status sl_constraint_vocab_create(int32_t n_vocab, const int32_t *eog, int32_t n_eog,
                                     sl_constraint_build_fn build_fn, void *ctx, sl_constraint_vocab **out);

/* Frees it; every constraint over it must be gone. NULL is a no-op. */
void sl_constraint_vocab_destroy(sl_constraint_vocab *v);

/* Totals for metrics: ns spent computing masks, and constraints created. */
uint64_t sl_constraint_vocab_mask_ns(const sl_constraint_vocab *v);
uint64_t sl_constraint_vocab_n_created(const sl_constraint_vocab *v);
/* Grammar texts compiled: a text already held (live, or idle among the
 * most recently released) is not compiled again. */
uint64_t sl_constraint_vocab_n_compiled(const sl_constraint_vocab *v);

/* Compiles `len` bytes of GBNF text (builds v's trie first if this is the
 * first constraint) and makes a matcher at its start and an allow bitmap.
 * On failure *out is NULL and err (err_len bytes) holds "grammar: <reason>".
 * Returns SL_OK, SL_EINVAL (the text, or a trie whose size is not n_vocab),
 * SL_ENOMEM. A failed trie build is tried again by the next create. */
sl_status sl_constraint_create(sl_constraint_vocab *v, const char *text, size_t len, sl_constraint **out,
                               char *err, size_t err_len);

/* Frees it; NULL is a no-op. */
void sl_constraint_destroy(sl_constraint *c);

/* The allow bitmap for the next draw ((n_vocab + 31) / 32 words, owned by c,
 * valid until the next call): the tokens the grammar allows next, plus the
 * end-of-generation ids when allow_eog and the matcher is accepting. On a
 * matcher failure every bit is 0 (the draw then finds nothing) and
 * sl_constraint_error says why. Never NULL. */
const uint32_t *sl_constraint_mask(sl_constraint *c, bool allow_eog);

/* The bitmap sl_constraint_mask writes and returns, without computing it:
 * its address is fixed for c's life, so a step can point a draw at it before
 * the mask is written (sl_backend_forward_sample_overlap). */
const uint32_t *sl_constraint_allow(const sl_constraint *c);

/* sl_constraint_mask for n constraints of v at once: out[i] = the mask of
 * cs[i] with allow_eog[i]. The masks are independent (each matcher owns its
 * state and cache; the trie is read only), so they are computed on a pool
 * of up to SL_CONSTRAINT_MASK_THREADS threads (the caller included), made at
 * the first call with more than one constraint: a step of 64 constrained
 * sequences costs the slowest few masks, not their sum. Blocks until all
 * are done. A pool that cannot be made leaves the masks serial. */
void sl_constraint_mask_batch(sl_constraint_vocab *v, sl_constraint *const *cs, const bool *allow_eog, int32_t n,
                              const uint32_t **out);

#define SL_CONSTRAINT_MASK_THREADS 8

/* Advances over drawn token t. An end-of-generation id leaves the state as
 * it is. Returns SL_OK; SL_EINVAL when the grammar does not allow t (nothing
 * changed); SL_ERANGE (ambiguity bound). */
sl_status sl_constraint_accept(sl_constraint *c, int32_t t);

/* True when the text so far is complete and nothing more may follow: the
 * sequence is done (finish reason stop). */
bool sl_constraint_finished(const sl_constraint *c);

/* Why the last mask allowed nothing, for the request's error text:
 * "grammar: no allowed token", or the matcher failure. Never NULL. */
const char *sl_constraint_error(const sl_constraint *c);

#endif
