/* cli/default_model.c: where the project's default model lives. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

int sl_cli_default_model(char *buf, size_t cap)
{
    const char *env = getenv("SLUICE_DEFAULT_MODEL");
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
        return access(buf, R_OK) == 0 ? 0 : -1;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = 0;
    char *dir = dirname(exe);
    const char *candidates[] = {"%s/../models/default/sluice-default-q8_0.gguf",
                                "%s/models/default/sluice-default-q8_0.gguf"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        snprintf(buf, cap, candidates[i], dir);
        if (access(buf, R_OK) == 0)
            return 0;
    }
    return -1;
}
