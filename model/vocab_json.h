/* model/vocab_json.h: a Hugging Face tokenizer.json (+ tokenizer_config.json)
 * turned into the tokenizer.ggml.* keys of a GGUF, as llama.cpp's converter
 * writes them.
 * Where:     tools (mkvocab, mkmodel) and tests; never on a serving path.
 * Ownership: reads the files, sets keys on the caller's writer (copied).
 * Errors:    SL_OK; SL_EIO (unreadable file), SL_EFORMAT (malformed JSON or
 *            inconsistent vocabulary, the field named in err),
 *            SL_EUNSUPPORTED (a model or pre-tokenizer sluice cannot run). */
#ifndef SL_VOCAB_JSON_H
#define SL_VOCAB_JSON_H

#include "model/gguf.h"
#include "shared/status.h"

/* Sets tokenizer.ggml.{model, pre, tokens, token_type, scores, merges,
 * bos/eos/unknown/padding_token_id, add_bos_token, add_eos_token,
 * add_space_prefix} and, when the config has one, tokenizer.chat_template
 * (named templates as tokenizer.chat_template.<name>). config may be NULL.
 * Model "llama" for SentencePiece-style BPE (U+2581 spaces, byte fallback),
 * "gpt2" for byte-level BPE; pre is recognised from the Split regexes. */
sl_status sl_vocab_json_to_gguf(const char *tokenizer_json_path, const char *tokenizer_config_path,
                                sl_gguf_writer *w, char err[SL_ERR_LEN]);

/* The same with at least min_tokens tokens: ids past the file's last are
 * "[PAD<id>]" entries of type UNUSED, as llama.cpp's converter writes them
 * for a model whose embedding has more rows than its tokenizer has tokens
 * (Qwen's 151,936 rows; llama.cpp refuses a file whose token list and
 * embedding rows differ). */
sl_status sl_vocab_json_to_gguf_min(const char *tokenizer_json_path, const char *tokenizer_config_path,
                                    size_t min_tokens, sl_gguf_writer *w, char err[SL_ERR_LEN]);

#endif
