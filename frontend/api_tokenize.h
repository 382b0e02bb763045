/* frontend/api_tokenize.h: POST /tokenize and POST /detokenize, in
 * llama-server's shapes.
 *   /tokenize   {"content": str, "add_special": bool = false,
 *                "parse_special": bool = true, "with_pieces": bool = false}
 *            -> {"tokens": [id, ...]}, or with_pieces
 *               {"tokens": [{"id": id, "piece": str | [byte, ...]}, ...]}
 *               (a piece that is not valid UTF-8 alone is sent as its bytes)
 *   /detokenize {"tokens": [id, ...]} -> {"content": str}
 * Where:     front ends. Who: any thread (the tokenizer is read-only).
 * Ownership: parsed requests own their JSON until fini; responses are
 *            malloc'd strings the caller frees.
 * Errors:    SL_OK; SL_EINVAL (err filled, 400); SL_ERANGE (the answer would
 *            exceed max_out: err filled, 400 response_too_large, nothing
 *            built); SL_ENOMEM (err filled, 500). */
#ifndef SL_API_TOKENIZE_H
#define SL_API_TOKENIZE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/api_error.h"
#include "model/tokenizer.h"
#include "shared/status.h"

typedef struct {
    const char *content;      /* borrowed from _root */
    size_t content_len;
    bool add_special;
    bool parse_special;
    bool with_pieces;
    json_t *_root;
} sl_api_tokenize_req;

typedef struct {
    int32_t *tokens;          /* malloc'd */
    size_t n_tokens;
} sl_api_detokenize_req;

/* Parses a /tokenize body. On SL_OK release *r with fini; on failure *r
 * holds nothing (fini is still safe) and err names the field. */
sl_status sl_api_tokenize_parse(sl_api_tokenize_req *r, const char *body, size_t len,
                                sl_api_error *err);
void sl_api_tokenize_fini(sl_api_tokenize_req *r);
/* Tokenizes and builds the response, unless it would be longer than
 * max_out bytes (0 = no limit; with pieces the bound is 4 bytes per piece
 * byte, so an answer near the limit may be refused). On SL_OK *out is the
 * malloc'd body; else *out is NULL and err says why. */
sl_status sl_api_tokenize_respond(const sl_tokenizer *t, const sl_api_tokenize_req *r, uint64_t max_out,
                                  char **out, sl_api_error *err);

/* Parses a /detokenize body; ids must be integers in [0, n_vocab). On
 * failure r->tokens is NULL and err says why (param "tokens"). */
sl_status sl_api_detokenize_parse(sl_api_detokenize_req *r, const char *body, size_t len,
                                  int32_t n_vocab, sl_api_error *err);
void sl_api_detokenize_fini(sl_api_detokenize_req *r);
/* Decodes with special tokens shown (as llama-server) into {"content":...},
 * unless that would be longer than max_out bytes (0 = no limit), which is
 * known before the text is made. */
sl_status sl_api_detokenize_respond(const sl_tokenizer *t, const sl_api_detokenize_req *r, uint64_t max_out,
                                    char **out, sl_api_error *err);

#endif
