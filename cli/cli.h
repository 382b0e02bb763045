/* cli/cli.h: the subcommands of the `sluice` binary. Each takes argv with
 * argv[0] = the subcommand's name and returns the process exit status
 * (0 ok, 1 runtime failure, 2 bad usage, config or model). */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stddef.h>

int sl_cli_generate(int argc, char **argv);
int sl_cli_serve(int argc, char **argv);
int sl_cli_admin(int argc, char **argv);

/* Path of the project's default model, used when no -m is given: the file
 * named by $SLUICE_DEFAULT_MODEL; else Qwen2.5-Coder 0.5B Instruct Q4_K_M in
 * the model cache (sl_cli_model_cache_dir), recognised by name and size; else
 * models/default/sluice-default-q8_0.gguf in the folder above the binary's
 * (<repo>/build/sluice -> <repo>/models/...) or in the binary's own folder.
 * Returns 0 with the path in buf and a phrase saying which one it is in
 * *what, or -1 if no such file exists. */
int sl_cli_default_model(char *buf, size_t cap, const char **what);

/* The model cache tools/fetch-models.py fills: $SLUICE_MODEL_CACHE, else
 * ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/models. Returns 0, or -1 when no
 * variable names it or buf is too small. */
int sl_cli_model_cache_dir(char *buf, size_t cap);

#endif
