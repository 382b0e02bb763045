/* cli/cli.h: the subcommands of the `sluice` binary. Each takes argv with
 * argv[0] = the subcommand's name and returns the process exit status
 * (0 ok, 1 runtime failure, 2 bad usage, config or model). */
#ifndef SL_CLI_H
#define SL_CLI_H

int sl_cli_generate(int argc, char **argv);

#endif
