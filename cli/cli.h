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
 * named by $SLUICE_DEFAULT_MODEL, else models/default/sluice-default-q8_0.gguf
 * in the folder above the binary's (<repo>/build/sluice -> <repo>/models/...)
 * or in the binary's own folder.
 * Returns 0 with the path in buf, or -1 if no such file exists. */
int sl_cli_default_model(char *buf, size_t cap);

#endif
