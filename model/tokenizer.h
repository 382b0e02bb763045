/* model/tokenizer.h: text <-> token ids, built from a GGUF's tokenizer.ggml.* keys.
 * Where:     front ends (/tokenize, /detokenize, chat prompts), `sluice generate`,
 *            tools. Pure CPU, no I/O after sl_tokenizer_create().
 * Who:       any thread. A created tokenizer is read-only: encode and decode may
 *            run concurrently on it (scratch is per call; regex match data is
 *            per call).
 * Safety:    user text never becomes a control token unless the caller asks
 *            for special-token parsing on that byte range (see
 *            sl_tokenize_rendered). Any byte string is accepted as input;
 *            invalid UTF-8 is tokenized byte-wise, never a crash.
 * Ownership: the tokenizer copies what it needs from the GGUF; the reader may
 *            be closed after create. Outputs go to caller buffers.
 * Errors:    create: SL_OK, SL_EFORMAT (missing/inconsistent metadata, the key
 *            named in err), SL_EUNSUPPORTED (unknown model or pre-tokenizer),
 *            SL_ENOMEM. Encode: a count >= 0 or SL_ENOMEM / SL_EINVAL. */
#ifndef SL_TOKENIZER_H
#define SL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "shared/status.h"

typedef struct sl_tokenizer sl_tokenizer;   /* opaque */

/* Token attributes: the values of tokenizer.ggml.token_type. */
enum sl_token_attr {
    SL_TOKEN_ATTR_UNDEFINED    = 0,
    SL_TOKEN_ATTR_NORMAL       = 1,   /* an ordinary vocabulary piece */
    SL_TOKEN_ATTR_UNKNOWN      = 2,   /* <unk> */
    SL_TOKEN_ATTR_CONTROL      = 3,   /* recognised only where special parsing is on */
    SL_TOKEN_ATTR_USER_DEFINED = 4,   /* added non-special token: matched in any text */
    SL_TOKEN_ATTR_UNUSED       = 5,
    SL_TOKEN_ATTR_BYTE         = 6,   /* <0xNN> byte-fallback token */
};

/* A byte range [off, off+len) of a text. */
typedef struct {
    size_t off;
    size_t len;
} sl_tok_span;

/* Builds a tokenizer from `g`'s tokenizer.ggml.* keys (model "llama" or
 * "gpt2"; pre-tokenizers listed in docs/TOKENIZER.md). On success *out owns
 * its memory; on failure *out is NULL and err names the offending key. */
sl_status sl_tokenizer_create(const sl_gguf *g, sl_tokenizer **out, char err[SL_ERR_LEN]);
/* NULL is a no-op. */
void sl_tokenizer_destroy(sl_tokenizer *t);

/* Plain text, as user content gets it: control tokens are never recognised,
 * user-defined added tokens are (as HF `tokenizers` does with
 * split_special_tokens=True). No BOS/EOS. Writes min(count, cap) ids to out
 * (out may be NULL when cap is 0) and returns the full count, which may
 * exceed cap: call again with a bigger buffer. Negative status on failure. */
int64_t sl_tokenize(const sl_tokenizer *t, const char *text, size_t len,
                    int32_t *out, size_t cap);

/* Trusted text (`/tokenize` with parse_special, `sluice generate -p`):
 * control tokens are recognised anywhere. add_special adds BOS/EOS as
 * tokenizer.ggml.add_bos_token / add_eos_token say. Returns as sl_tokenize. */
int64_t sl_tokenize_special(const sl_tokenizer *t, const char *text, size_t len,
                            bool add_special, int32_t *out, size_t cap);

/* A rendered chat prompt with provenance: control tokens are recognised only
 * where the match lies wholly outside every `untrusted` range (message
 * content, tool arguments ...); everything else is plain text. Pieces between
 * recognised control tokens are pre-tokenized independently, as HF does for
 * text between special tokens. Ranges may be in any order and may overlap;
 * ranges past `len` are clipped. Time is linear in len + n_untrusted when the
 * ranges are sorted and disjoint (as the renderer reports them); other sets
 * are first copied and sorted (SL_ENOMEM if the copy fails). Returns as
 * sl_tokenize. */
int64_t sl_tokenize_rendered(const sl_tokenizer *t, const char *text, size_t len,
                             const sl_tok_span *untrusted, size_t n_untrusted,
                             bool add_special, int32_t *out, size_t cap);

/* ---- accessors ---- */
int32_t sl_tokenizer_n_vocab(const sl_tokenizer *t);
int32_t sl_tokenizer_bos(const sl_tokenizer *t);   /* -1 if none */
int32_t sl_tokenizer_eos(const sl_tokenizer *t);   /* -1 if none */
int32_t sl_tokenizer_eot(const sl_tokenizer *t);   /* -1 if none */
int32_t sl_tokenizer_pad(const sl_tokenizer *t);   /* -1 if none */
bool sl_tokenizer_add_bos(const sl_tokenizer *t);
bool sl_tokenizer_add_eos(const sl_tokenizer *t);
/* End of generation: eos, eot, eom and the end tokens llama.cpp also treats
 * so (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|> ...). */
bool sl_tokenizer_is_eog(const sl_tokenizer *t, int32_t id);
/* Attribute of `id`; SL_TOKEN_ATTR_UNDEFINED when out of range. */
enum sl_token_attr sl_tokenizer_attr(const sl_tokenizer *t, int32_t id);
/* The token's text as stored in the vocabulary (byte-level form for gpt2
 * vocabularies, with U+2581 for llama ones); NULL when out of range.
 * Not NUL-terminated: *len gets the length. Lives as long as t. */
const char *sl_tokenizer_text(const sl_tokenizer *t, int32_t id, size_t *len);
/* The id of a token by its stored text, or -1. */
int32_t sl_tokenizer_find(const sl_tokenizer *t, const char *text, size_t len);

/* ---- detokenization ----
 * Streaming: the front end keeps one sl_detok per request. Each push
 * appends only complete UTF-8 to out; bytes of an unfinished character (or
 * a run of byte-fallback tokens) are held until complete. Invalid sequences
 * become U+FFFD exactly as the reference decode does. */
typedef struct {
    uint8_t _held[64];     /* bytes not yet emitted */
    uint32_t _n_held;
    bool _started;         /* something was emitted (leading-space rule) */
    bool _held_bytes_tok;  /* held bytes come from a run of <0xNN> tokens */
} sl_detok;

/* sl_detok_init: for a whole sequence (/detokenize, a prompt): with
 * add_space_prefix, one leading space of the output is dropped, as HF's
 * decode does. sl_detok_init_continuation: for text that continues a prompt
 * (generated tokens): nothing is dropped, so " not" after "... life is"
 * stays " not", as llama.cpp and OpenAI return it. */
void sl_detok_init(sl_detok *d);
void sl_detok_init_continuation(sl_detok *d);
/* Decodes `id` (show_special: control and unknown tokens shown as their
 * text, else dropped) and writes the newly complete text to out. Returns the
 * bytes produced; only min(that, cap) are written, so give
 * cap >= sl_detok_max_piece(t), which is always enough. An out-of-range id
 * produces nothing. Never fails. */
size_t sl_detok_push(sl_detok *d, const sl_tokenizer *t, int32_t id, bool show_special,
                     char *out, size_t cap);
/* Emits what is still held (an unfinished character as one U+FFFD; an
 * invalid byte-token run as one U+FFFD per byte) and resets the hold.
 * Returns bytes produced, as sl_detok_push (cap >= sl_detok_max_piece). */
size_t sl_detok_flush(sl_detok *d, const sl_tokenizer *t, char *out, size_t cap);
/* An output size that is always enough for one push or flush. */
size_t sl_detok_max_piece(const sl_tokenizer *t);

/* One-shot: decodes ids[0..n). Writes min(total, cap) bytes (no NUL) and
 * returns the total length needed. */
size_t sl_detokenize(const sl_tokenizer *t, const int32_t *ids, size_t n, bool show_special,
                     char *out, size_t cap);

#endif
