/* cli/generate.c: `sluice generate`: run a model on a prompt. */
#include <stdio.h>

#include "cli/cli.h"

int sl_cli_generate(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "sluice generate: not built yet\n");
    return 1;
}
