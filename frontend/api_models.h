/* frontend/api_models.h: what the API says about the served model: the
 * names a request's `model` may give (--model-alias, repeatable; the first
 * is the name responses and /v1/models report first), whether any name is
 * accepted (--accept-any-model), and the `system_fingerprint` of responses.
 * Where:     front ends; filled once at start, read-only afterwards.
 * Who:       any thread once filled (job threads read it).
 * Ownership: sl_api_models is caller storage holding copies of the names.
 * Errors:    sl_api_models_init: SL_OK, or SL_EINVAL with err naming the
 *            setting (too many names, a name too long). */
#ifndef SL_API_MODELS_H
#define SL_API_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "shared/status.h"

#define SL_API_MODEL_NAMES_MAX 16    /* names one server answers to */
#define SL_API_MODEL_NAME_LEN 128    /* a name's bytes at most, NUL included */
#define SL_API_FINGERPRINT_LEN 16    /* "fp_" + 12 hex digits + NUL */

typedef struct {
    char names[SL_API_MODEL_NAMES_MAX][SL_API_MODEL_NAME_LEN];   /* names[0] is the primary name */
    uint32_t n_names;                                            /* >= 1 after init */
    bool accept_any;                                             /* every `model` is this model */
} sl_api_models;

/* Fills m from a list setting (comma-joined names, shared/config.h's
 * sl_config_list_next) or, when it is empty, the single name `fallback`
 * (the model file's base name). A name listed twice is kept once. */
sl_status sl_api_models_init(sl_api_models *m, const char *list, const char *fallback, bool accept_any,
                             char err[SL_ERR_LEN]);

/* Whether `name` (len bytes, not NUL-terminated) is one of m's names. */
bool sl_api_models_has(const sl_api_models *m, const char *name, size_t len);

/* Whether a request whose `model` is `requested` is served: NULL (absent or
 * null) and "" mean "the served model"; any other name must be one of m's
 * names unless m->accept_any. */
bool sl_api_models_accepts(const sl_api_models *m, const char *requested);

/* `system_fingerprint`: "fp_" and 12 hex digits of a 64-bit FNV-1a hash
 * over the build (version, commit) and the model file's identity: its size,
 * its tensor table (names, types, shapes, offsets) and the first 4 KiB of
 * its first and last tensors' data. Stable across restarts and copies of
 * the file; it changes with the build or the weights. Reads two pages of
 * the mapping. */
void sl_api_models_fingerprint(const sl_gguf *g, const char *version, const char *commit,
                               char out[SL_API_FINGERPRINT_LEN]);

#endif
