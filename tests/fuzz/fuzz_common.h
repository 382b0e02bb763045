/* tests/fuzz/fuzz_common.h: what the libFuzzer harnesses share: finding the
 * repository's data, reading files, and the real vocabularies loaded once.
 * Where:  linked into every fuzz_<target> executable; never into sluice.
 * Errors: a harness cannot run without its data, so these abort with a
 *         message (a setup failure, not a finding). */
#ifndef SL_FUZZ_COMMON_H
#define SL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"
#include "shared/shm.h"

/* `rel` under the repository root (SLUICE_SOURCE_DIR, else the configured
 * source tree). Returns a static buffer, overwritten by the next call. */
const char *fz_repo_path(const char *rel);

/* `rel` under tests/data as the build expanded it (SL_TESTDATA_DIR: every
 * X.xz there is X). Returns a static buffer, overwritten by the next call. */
const char *fz_testdata_path(const char *rel);

/* The whole file, malloc'd and NUL-terminated (*len without the NUL); aborts
 * when it cannot be read. */
char *fz_read_file(const char *path, size_t *len);

/* The default model's file (models/default, q8_0). */
const char *fz_default_model_path(void);

/* Tokenizers built once and kept for the process: the default model's
 * SentencePiece vocabulary, and Llama 3's byte-level BPE one converted from
 * tests/data/tokenizers/llama3 with model/vocab_json.c. */
sl_tokenizer *fz_tokenizer_default(void);
sl_tokenizer *fz_tokenizer_llama3(void);

/* Fuzzed-input reader: takes bytes off the front; past the end gives zeros. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in;

uint8_t fz_u8(fz_in *in);
uint32_t fz_u32(fz_in *in);
/* Up to `max` bytes (fewer at the end): *len gets the count. */
const uint8_t *fz_bytes(fz_in *in, size_t max, size_t *len);


/* ---- a populated shared-memory segment (shm and admin targets) ---- */

#define FZ_SHM_TICKETS 5

/* Creates segment "/sluice-fuzz-<tag>-<pid>" with small limits (2 slots, 8
 * mailboxes, 4-entry rings, logprobs on) and plays a short history into it:
 * the worker READY with a config snapshot; slot 0 submits three requests and
 * slot 1 one; the worker pops two, streams tokens to both and finishes one;
 * slot 0 submits a fifth and cancels it before the worker sees it (its ring
 * entry stays, stale). The handles of that history are
 * detached; the master's handle is returned and the tickets stored in
 * tickets[FZ_SHM_TICKETS]. The segment is destroyed at exit. Aborts on failure. */
sl_shm_t *fz_shm_populated(const char *tag, sl_shm_ticket tickets[FZ_SHM_TICKETS]);

#endif
