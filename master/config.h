/* master/config.h: `sluice serve` configuration from flags, environment and
 * an optional file, into one sl_config (shared/config.h).
 * Precedence, lowest first: default, --config FILE, the seed's environment
 * names (CUDA_MAX_BATCH, CUDA_BATCH_WINDOW_MS, STAGGERED_PREFILL, TTFT_TRACE),
 * SLUICE_* environment, command-line flags. Each value remembers its source.
 * Errors:  a value that does not parse or is out of range is an error naming
 *          the flag or variable and the value: never a silent default. */
#ifndef SL_MASTER_CONFIG_H
#define SL_MASTER_CONFIG_H

#include <stdio.h>

#include "shared/config.h"
#include "shared/status.h"

/* Parses argv (argv[0] = "serve") and the environment into cfg.
 * Returns SL_OK; SL_AGAIN when --help was printed (exit 0); SL_EINVAL with
 * err set on a bad flag, value, variable or file. */
sl_status sl_config_parse(int argc, char **argv, sl_config *cfg, char err[SL_ERR_LEN]);

/* Prints the options, their variables and defaults. */
void sl_config_usage(FILE *f);

/* Name of a setting as a flag ("max-seqs") and of a source ("flag"). */
const char *sl_config_key_name(sl_config_key k);
const char *sl_config_source_name(sl_config_source s);

/* The value of setting k as text (API keys are redacted). */
void sl_config_value_text(const sl_config *cfg, sl_config_key k, char *buf, size_t cap);

#endif
