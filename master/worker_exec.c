/* master/worker_exec.c: see worker_exec.h. */
#include "master/worker_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu-worker/worker.h"

#define MAX_FDS 256
#define MAX_WRAPPER_WORDS 64
#define MAGIC 0x736c7763u   /* "slwc" */

typedef struct {
    uint32_t magic;
    uint32_t size;          /* sizeof(sl_config) of the binary that wrote it */
} config_header;

bool sl_worker_exec_wanted(void)
{
    const char *e = getenv("SLUICE_WORKER_EXEC");
    return (e && !strcmp(e, "1")) || sl_worker_wrapped();
}

bool sl_worker_wrapped(void)
{
    const char *w = getenv("SLUICE_WORKER_WRAPPER");
    return w && *w;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

void sl_worker_exec(const sl_config *cfg, const int *wake_fds, uint32_t n_fds)
{
    if (n_fds > MAX_FDS) {
        fprintf(stderr, "sluice: exec of the worker: %u wakeup fds (at most %d)\n", n_fds, MAX_FDS);
        return;
    }
    int fd = memfd_create("sluice-worker-config", 0);   /* no MFD_CLOEXEC: the worker reads it */
    config_header h = {MAGIC, (uint32_t)sizeof *cfg};
    if (fd < 0 || !write_all(fd, &h, sizeof h) || !write_all(fd, cfg, sizeof *cfg)) {
        fprintf(stderr, "sluice: exec of the worker: writing its config: %s\n", strerror(errno));
        return;
    }
    char fd_arg[16], fds_arg[MAX_FDS * 12 + 1] = "";
    snprintf(fd_arg, sizeof fd_arg, "%d", fd);
    size_t at = 0;
    for (uint32_t i = 0; i < n_fds; i++) {
        if (fcntl(wake_fds[i], F_SETFD, 0) < 0) {
            fprintf(stderr, "sluice: exec of the worker: fd %d: %s\n", wake_fds[i], strerror(errno));
            return;
        }
        at += (size_t)snprintf(fds_arg + at, sizeof fds_arg - at, "%s%d", i ? "," : "", wake_fds[i]);
    }
    /* the wrapper's words, then this binary by its real path (under a
     * wrapper /proc/self/exe would name the wrapper) */
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "sluice: exec of the worker: /proc/self/exe: %s\n", strerror(errno));
        return;
    }
    exe[len] = '\0';
    const char *wrapper = getenv("SLUICE_WORKER_WRAPPER");
    char *words = strdup(wrapper ? wrapper : "");
    char *argv[MAX_WRAPPER_WORDS + 5];
    int argc = 0;
    for (char *save = NULL, *w = words ? strtok_r(words, " \t", &save) : NULL; w; w = strtok_r(NULL, " \t", &save)) {
        if (argc == MAX_WRAPPER_WORDS) {
            fprintf(stderr, "sluice: exec of the worker: SLUICE_WORKER_WRAPPER has over %d words\n",
                    MAX_WRAPPER_WORDS);
            free(words);
            return;
        }
        argv[argc++] = w;
    }
    bool wrapped = argc > 0;
    const char *file = wrapped ? argv[0] : exe;
    argv[argc++] = wrapped ? exe : "sluice";
    argv[argc++] = "__worker";
    argv[argc++] = fd_arg;
    argv[argc++] = fds_arg;
    argv[argc] = NULL;
    execvp(file, argv);
    fprintf(stderr, "sluice: exec of the worker (%s): %s\n", file, strerror(errno));
    free(words);
}

/* A non-negative int that is all of s. */
static bool parse_fd(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1 << 30)
        return false;
    *out = (int)v;
    return true;
}

int sl_worker_exec_main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "sluice __worker: started by `sluice serve` only\n");
        return 2;
    }
    int cfg_fd;
    int fds[MAX_FDS];
    uint32_t n = 0;
    if (!parse_fd(argv[1], &cfg_fd)) {
        fprintf(stderr, "sluice __worker: bad config fd '%s'\n", argv[1]);
        return 2;
    }
    char *list = strdup(argv[2]);
    for (char *save = NULL, *tok = list ? strtok_r(list, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_FDS || !parse_fd(tok, &fds[n])) {
            fprintf(stderr, "sluice __worker: bad wakeup fd list '%s'\n", argv[2]);
            free(list);
            return 2;
        }
        n++;
    }
    free(list);
    config_header h;
    static sl_config cfg;   /* large: not on the stack */
    bool ok = pread(cfg_fd, &h, sizeof h, 0) == (ssize_t)sizeof h && h.magic == MAGIC && h.size == sizeof cfg &&
              pread(cfg_fd, &cfg, sizeof cfg, sizeof h) == (ssize_t)sizeof cfg;
    close(cfg_fd);
    if (!ok) {
        fprintf(stderr, "sluice __worker: the config is missing or from another build\n");
        return 2;
    }
    return sl_worker_main(&cfg, fds, n);
}
