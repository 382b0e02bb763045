/* cli/default_model.c: which model `sluice serve` and `sluice generate` use
 * when no -m is given, first found wins:
 *   1. $SLUICE_DEFAULT_MODEL;
 *   2. the real default model, Qwen2.5-Coder 0.5B Instruct Q4_K_M, when
 *      tools/fetch-models.py has put it in the model cache;
 *   3. the 12M model shipped in models/default, looked up relative to the
 *      executable (/proc/self/exe): ../models/default (build/sluice in the
 *      source tree), models/default (a binary at the tree's root), then
 *      ../share/sluice/models (an installed tree: `cmake --install` puts the
 *      binary in PREFIX/bin and the model in PREFIX/share/sluice/models).
 * Trade-off: the cached file is recognised by its exact size, not its hash
 * (hashing 490 MB at every start would cost seconds); the fetcher only ever
 * renames a sha256-verified file into the cache, so a file of that size under
 * that name is the verified one unless someone wrote it by hand. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

/* kept in step with MODELS["qwen2.5-coder-0.5b"] in tools/fetch-models.py */
#define REAL_DEFAULT_FILE "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
#define REAL_DEFAULT_SIZE 491400064LL
/* the shipped model's file; cli/CMakeLists.txt installs it under this name */
#define SHIPPED_DEFAULT_FILE "sluice-default-q8_0.gguf"

int sl_cli_model_cache_dir(char *buf, size_t cap)
{
    const char *env = getenv("SLUICE_MODEL_CACHE");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(buf, cap, "%s", env);
    else if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/sluice/models", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/sluice/models", home);
    else
        return -1;
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

static int cached_real_default(char *buf, size_t cap)
{
    char dir[4096];
    if (sl_cli_model_cache_dir(dir, sizeof dir) < 0)
        return -1;
    int n = snprintf(buf, cap, "%s/" REAL_DEFAULT_FILE, dir);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    struct stat st;
    if (stat(buf, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != REAL_DEFAULT_SIZE || access(buf, R_OK) < 0)
        return -1;
    return 0;
}

static int shipped_default(char *buf, size_t cap)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = 0;
    char *dir = dirname(exe);
    const char *candidates[] = {"%s/../models/default/" SHIPPED_DEFAULT_FILE,
                                "%s/models/default/" SHIPPED_DEFAULT_FILE,
                                "%s/../share/sluice/models/" SHIPPED_DEFAULT_FILE};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        snprintf(buf, cap, candidates[i], dir);
        if (access(buf, R_OK) == 0)
            return 0;
    }
    return -1;
}

int sl_cli_default_model(char *buf, size_t cap, const char **what)
{
    const char *env = getenv("SLUICE_DEFAULT_MODEL");
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
        *what = "$SLUICE_DEFAULT_MODEL";
        return access(buf, R_OK) == 0 ? 0 : -1;
    }
    if (cached_real_default(buf, cap) == 0) {
        *what = "Qwen2.5-Coder 0.5B Instruct from the model cache";
        return 0;
    }
    *what = "the shipped 12M model (tools/fetch-models.py puts Qwen2.5-Coder 0.5B in the model cache)";
    return shipped_default(buf, cap);
}
