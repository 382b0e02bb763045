/* gpu-worker/kv_sizing.c: the host KV pool's size from the workload and
 * the memory this process may use (kv_sizing.h), and the readers of
 * /proc/meminfo and the cgroup memory limit. Runs in the worker, once.
 * Trade-off: MemAvailable and a cgroup's headroom are snapshots taken
 * before the pool is touched (the CPU backend's pages are faulted in as
 * sequences first write them), so the pool is a ceiling that other
 * processes may still take memory from; the fraction leaves room for them
 * and for the weights' page cache rather than betting on an exact figure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu-worker/kv_sizing.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define V1_NO_LIMIT (1ull << 62)   /* v1 reports "no limit" as a page-rounded LONG_MAX */

const char *sl_kv_bound_name(sl_kv_bound b)
{
    switch (b) {
    case SL_KV_BOUND_FLAG: return "flag";
    case SL_KV_BOUND_WORKLOAD: return "workload";
    case SL_KV_BOUND_MEMORY: return "memory";
    case SL_KV_BOUND_CGROUP: return "cgroup";
    case SL_KV_BOUND_DEVICE: return "device";
    case SL_KV_BOUND_CONTEXT: return "context";
    }
    return "?";
}

uint64_t sl_kv_cgroup_headroom(uint64_t limit, uint64_t usage)
{
    if (limit == SL_KV_UNKNOWN)
        return SL_KV_UNKNOWN;
    return usage < limit ? limit - usage : 0;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

sl_status sl_kv_size_host(const sl_kv_sizing_in *in, sl_kv_sizing *out, char err[SL_ERR_LEN])
{
    memset(out, 0, sizeof *out);
    uint64_t bb = in->block_bytes ? in->block_bytes : 1;
    uint64_t min_blocks = in->min_blocks ? in->min_blocks : 1;
    uint64_t headroom = sl_kv_cgroup_headroom(in->cgroup_limit, in->cgroup_usage);
    out->available = headroom < in->mem_available ? headroom : in->mem_available;
    if (in->flag_bytes) {
        out->bound = SL_KV_BOUND_FLAG;
        out->n_blocks = in->flag_bytes / bb;
        out->bytes = mul_sat(out->n_blocks, bb);
        if (out->n_blocks < min_blocks) {
            snprintf(err, SL_ERR_LEN, "--kv-memory %llu bytes holds %llu KV blocks, but one sequence of the full "
                     "context needs %llu (%llu bytes); raise --kv-memory or lower --ctx-size",
                     (unsigned long long)in->flag_bytes, (unsigned long long)out->n_blocks,
                     (unsigned long long)min_blocks, (unsigned long long)mul_sat(min_blocks, bb));
            return SL_EINVAL;
        }
    } else {
        uint64_t need = in->need_blocks > min_blocks ? in->need_blocks : min_blocks;
        uint64_t mem_blocks = UINT64_MAX;
        if (out->available != SL_KV_UNKNOWN) {
            double f = in->fraction > 0 && in->fraction <= 1 ? in->fraction : SL_KV_HOST_FRACTION;
            double share = f * (double)out->available;   /* < 2^64: f <= 1 and available < 2^64 - 1 */
            uint64_t bytes = share >= 18446744073709549568.0 ? UINT64_MAX - 1 : (uint64_t)share;
            mem_blocks = bytes / bb;
        }
        if (need <= mem_blocks) {
            out->bound = SL_KV_BOUND_WORKLOAD;
            out->n_blocks = need;
        } else {
            out->bound = headroom <= in->mem_available ? SL_KV_BOUND_CGROUP : SL_KV_BOUND_MEMORY;
            out->n_blocks = mem_blocks;
            if (out->n_blocks < min_blocks) {
                /* a pool that cannot hold one request serves none: take the
                 * one sequence and let the kernel say no, as before */
                out->bound = SL_KV_BOUND_CONTEXT;
                out->n_blocks = min_blocks;
            }
        }
    }
    if (out->n_blocks > SL_KV_BLOCKS_MAX)
        out->n_blocks = SL_KV_BLOCKS_MAX;
    out->bytes = mul_sat(out->n_blocks, bb);
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* parsing                                                                   */

/* A decimal count of the text's first token, then only whitespace;
 * SL_KV_UNKNOWN otherwise (also on overflow). */
static uint64_t parse_count(const char *s, const char **end)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9')
        return SL_KV_UNKNOWN;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return SL_KV_UNKNOWN;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *end = s;
    return v;
}

uint64_t sl_kv_parse_meminfo(const char *meminfo)
{
    const char *line = meminfo;
    while (line && *line) {
        if (!strncmp(line, "MemAvailable:", 13)) {
            const char *end;
            uint64_t kib = parse_count(line + 13, &end);
            if (kib == SL_KV_UNKNOWN)
                return SL_KV_UNKNOWN;
            while (*end == ' ' || *end == '\t')
                end++;
            if (strncmp(end, "kB", 2))   /* the kernel's only unit; anything else is not this file */
                return SL_KV_UNKNOWN;
            return kib > UINT64_MAX / 1024 ? SL_KV_UNKNOWN : kib * 1024;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return SL_KV_UNKNOWN;
}

uint64_t sl_kv_parse_cgroup_bytes(const char *text)
{
    if (!text)
        return SL_KV_UNKNOWN;
    const char *end;
    uint64_t v = parse_count(text, &end);
    if (v == SL_KV_UNKNOWN)
        return SL_KV_UNKNOWN;   /* "max" too */
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (*end || v >= V1_NO_LIMIT)
        return SL_KV_UNKNOWN;
    return v;
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

/* Tightens *limit and *usage with dir (below mount) and each of its ancestors,
 * up to mount itself: the level with the least headroom binds. */
static void limit_along(const char *mount, const char *dir, const char *limit_file, const char *usage_file,
                        uint64_t *limit, uint64_t *usage)
{
    char rel[512], path[1200], text[64];
    snprintf(rel, sizeof rel, "%s", dir);
    for (;;) {
        size_t len = strlen(rel);
        while (len > 0 && rel[len - 1] == '/')
            rel[--len] = 0;
        snprintf(path, sizeof path, "%s%s/%s", mount, rel, limit_file);
        uint64_t l = read_text(path, text, sizeof text) == 0 ? sl_kv_parse_cgroup_bytes(text) : SL_KV_UNKNOWN;
        if (l != SL_KV_UNKNOWN) {
            snprintf(path, sizeof path, "%s%s/%s", mount, rel, usage_file);
            uint64_t u = read_text(path, text, sizeof text) == 0 ? sl_kv_parse_cgroup_bytes(text) : SL_KV_UNKNOWN;
            if (u == SL_KV_UNKNOWN)
                u = 0;
            if (sl_kv_cgroup_headroom(l, u) < sl_kv_cgroup_headroom(*limit, *usage)) {
                *limit = l;
                *usage = u;
            }
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !len)
            break;
        *slash = 0;
    }
}

void sl_kv_read_cgroup(const char *root, const char *proc_cgroup, uint64_t *limit, uint64_t *usage)
{
    *limit = SL_KV_UNKNOWN;
    *usage = 0;
    if (!proc_cgroup)
        return;
    char mount[600];
    const char *line = proc_cgroup;
    while (*line) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        if (n < sizeof buf) {
            memcpy(buf, line, n);
            buf[n] = 0;
            char *c1 = strchr(buf, ':');
            char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (c2) {
                *c2 = 0;
                const char *controllers = c1 + 1, *path = c2 + 1;
                *c1 = 0;
                if (!strcmp(buf, "0") && !*controllers) {
                    limit_along(root, path, "memory.max", "memory.current", limit, usage);
                    snprintf(mount, sizeof mount, "%s/unified", root);
                    limit_along(mount, path, "memory.max", "memory.current", limit, usage);
                } else {
                    char list[300];
                    snprintf(list, sizeof list, ",%s,", controllers);
                    if (strstr(list, ",memory,")) {
                        snprintf(mount, sizeof mount, "%s/memory", root);
                        limit_along(mount, path, "memory.limit_in_bytes", "memory.usage_in_bytes", limit, usage);
                    }
                }
            }
        }
        if (!nl)
            break;
        line = nl + 1;
    }
}

void sl_kv_host_memory(uint64_t *mem_available, uint64_t *limit, uint64_t *usage)
{
    char text[8192];
    *mem_available = read_text("/proc/meminfo", text, sizeof text) == 0 ? sl_kv_parse_meminfo(text) : SL_KV_UNKNOWN;
    if (*mem_available == SL_KV_UNKNOWN) {
        /* free pages only (no reclaimable cache): low, but a bound */
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0)
            *mem_available = (uint64_t)pages * (uint64_t)page;
    }
    const char *root = getenv("SLUICE_CGROUP_ROOT");
    if (!root || !*root)
        root = CGROUP_ROOT;
    char cg[4096];
    sl_kv_read_cgroup(root, read_text("/proc/self/cgroup", cg, sizeof cg) == 0 ? cg : NULL, limit, usage);
}
