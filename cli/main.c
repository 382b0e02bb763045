/* cli/main.c: the `sluice` binary's entry point: dispatches subcommands.
 * Each subcommand lives in its own file (cli/<name>.c) and has the signature
 * int sl_cli_<name>(int argc, char **argv). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "shared/build_info.h"
#include "master/worker_exec.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"serve", sl_cli_serve, "serve a model over an OpenAI-compatible HTTP API"},
    {"generate", sl_cli_generate, "run a model on a prompt and stream the continuation"},
    {"admin", sl_cli_admin, "ask a running server (effective-config, stats, health)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`sluice COMMAND --help` describes a command's options; `sluice --version` the build.\n");
}

/* One line a support request can quote, then the build's facts. Whether a
 * GPU is usable is decided at run time (`serve` logs the backend it chose). */
static void version(void)
{
    printf("sluice %s (commit %s)\n", sl_build_version, sl_build_commit);
    printf("build: %s%s%s\n", sl_build_type, *sl_build_options ? ", " : "", sl_build_options);
    printf("cuda: %s\n", sl_build_cuda ? "built (libsluice_cuda.so, loaded when --device auto|cuda finds a GPU)"
                                        : "not built (CPU backend only)");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        version();
        return 0;
    }
    if (!strcmp(argv[1], "__worker"))   /* not a user command: `serve` execs it (master/worker_exec.h) */
        return sl_worker_exec_main(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
