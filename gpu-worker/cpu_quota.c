/* gpu-worker/cpu_quota.c: the CPUs this process may use, from its affinity
 * mask and its cgroup's CPU quota (cpu_quota.h).
 * Trade-off: a quota is an average over its period, not a CPU count; the
 * quota rounded up is the thread count that can use all of it while a
 * period still has time left, and one fewer thread than that would leave
 * part of it unused. Anything unreadable (no cgroup mounted, a namespace
 * that hides the path) imposes no limit, so the answer is never below
 * what the machine gives and never 0. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* CPU_COUNT */
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu-worker/cpu_quota.h"

#define CGROUP_ROOT "/sys/fs/cgroup"

static int ceil_div(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n > 1 << 20 ? 1 << 20 : (int)n;
}

/* Parses a non-negative decimal integer that fills the text up to
 * whitespace; -1 otherwise. *end gets the rest. */
static long long parse_int(const char *s, const char **end)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9')
        return -1;
    long long v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (1ll << 50))
            return -1;
        v = v * 10 + (*s - '0');
    }
    if (*s && *s != ' ' && *s != '\t' && *s != '\n')
        return -1;
    *end = s;
    return v;
}

int sl_cpu_quota_parse_max(const char *cpu_max)
{
    if (!cpu_max)
        return 0;
    const char *s = cpu_max, *rest;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!strncmp(s, "max", 3))
        return 0;
    long long quota = parse_int(s, &rest);
    if (quota < 0)
        return 0;
    long long period = parse_int(rest, &rest);
    return period > 0 ? ceil_div(quota, period) : 0;
}

int sl_cpu_quota_parse_cfs(const char *quota_us, const char *period_us)
{
    if (!quota_us || !period_us)
        return 0;
    const char *rest;
    long long quota = parse_int(quota_us, &rest);   /* "-1": no limit, and no parse */
    long long period = parse_int(period_us, &rest);
    return quota > 0 && period > 0 ? ceil_div(quota, period) : 0;
}

int sl_cpu_quota_threads(int n_affinity, int quota_cpus, int n_online)
{
    int n = n_affinity > 0 ? n_affinity : n_online;
    if (quota_cpus > 0 && (n < 1 || quota_cpus < n))
        n = quota_cpus;
    return n > 0 ? n : 1;
}

/* ------------------------------------------------------------------------ */
/* reading this process's limits                                             */

static int read_text(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = 0;
    return 0;
}

static int min_quota(int a, int b)
{
    return a == 0 ? b : b == 0 ? a : a < b ? a : b;
}

/* The smallest quota of dir (below mount) and each of its ancestors: file
 * alone is v2's cpu.max (period_file NULL), else v1's quota and period
 * files. 0: none found. */
static int quota_along(const char *mount, const char *dir, const char *file, const char *period_file)
{
    char rel[512], path[700], a[128], b[128];
    snprintf(rel, sizeof rel, "%s", dir);
    int best = 0;
    for (;;) {
        size_t len = strlen(rel);
        while (len > 0 && rel[len - 1] == '/')
            rel[--len] = 0;
        snprintf(path, sizeof path, "%s%s/%s", mount, rel, file);
        if (read_text(path, a, sizeof a) == 0) {
            if (!period_file) {
                best = min_quota(best, sl_cpu_quota_parse_max(a));
            } else {
                snprintf(path, sizeof path, "%s%s/%s", mount, rel, period_file);
                if (read_text(path, b, sizeof b) == 0)
                    best = min_quota(best, sl_cpu_quota_parse_cfs(a, b));
            }
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !len)
            break;
        *slash = 0;
    }
    return best;
}

/* The quota from /proc/self/cgroup's entries: "0::PATH" (v2) and
 * "N:...cpu...:PATH" (v1, the cpu controller's mount). Inside a cgroup
 * namespace PATH is "/" and the mount root is the container's cgroup. */
static int cgroup_quota(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[1024];
    int best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *controllers = c1 + 1, *path = c2 + 1;
        if (!strcmp(line, "0") && !*controllers) {
            best = min_quota(best, quota_along(CGROUP_ROOT, path, "cpu.max", NULL));
            best = min_quota(best, quota_along(CGROUP_ROOT "/unified", path, "cpu.max", NULL));
            continue;
        }
        char list[256];
        snprintf(list, sizeof list, ",%s,", controllers);
        if (!strstr(list, ",cpu,"))
            continue;
        static const char *const mounts[] = {CGROUP_ROOT "/cpu", CGROUP_ROOT "/cpu,cpuacct",
                                             CGROUP_ROOT "/cpuacct,cpu"};
        /* a v1 controller is mounted by its own name or by the joined list */
        for (size_t i = 0; i < sizeof mounts / sizeof *mounts; i++)
            best = min_quota(best, quota_along(mounts[i], path, "cpu.cfs_quota_us", "cpu.cfs_period_us"));
    }
    fclose(f);
    return best;
}

int sl_cpu_quota_default_threads(void)
{
    cpu_set_t set;
    int n_affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return sl_cpu_quota_threads(n_affinity, cgroup_quota(), online > 0 ? (int)online : 1);
}
