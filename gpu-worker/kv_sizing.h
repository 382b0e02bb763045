/* gpu-worker/kv_sizing.h: how many KV blocks the worker asks a host-memory
 * backend for, and which bound chose the number.
 * What:      the pool is the smallest of what the workload can use (every
 *            sequence at the full context), a fraction of the memory
 *            available to this process (MemAvailable, and the headroom its
 *            cgroup's memory limit leaves), unless --kv-memory gives the
 *            bytes. It is never below one full-context sequence (a flag
 *            that is below that is a startup error). The CUDA backend sizes
 *            its own pool from device memory (--gpu-memory-fraction); only
 *            the bound's name for that case lives here.
 * Who:       the worker, once at startup, before it creates the backend.
 * Test hook: SLUICE_CGROUP_ROOT replaces /sys/fs/cgroup for the memory
 *            limit (tests build a fake tree there).
 * Errors:    sl_kv_size_host: SL_OK, or SL_EINVAL when --kv-memory cannot
 *            hold one sequence (err names the numbers). The readers never
 *            fail: what cannot be read or parsed imposes no limit. */
#ifndef SL_KV_SIZING_H
#define SL_KV_SIZING_H

#include <stdint.h>

#include "shared/status.h"

#define SL_KV_UNKNOWN UINT64_MAX    /* a memory figure that could not be read: no limit */
#define SL_KV_HOST_FRACTION 0.5     /* share of the available memory the host KV pool may take */
#define SL_KV_BLOCKS_MAX (1u << 30) /* most blocks a pool has (block ids are int32) */

/* What decided the pool's size (effective-config's kv_sizing.bound). */
typedef enum {
    SL_KV_BOUND_FLAG = 0,   /* --kv-memory */
    SL_KV_BOUND_WORKLOAD,   /* max-seqs sequences of the full context: all the workload can use */
    SL_KV_BOUND_MEMORY,     /* the fraction of /proc/meminfo MemAvailable */
    SL_KV_BOUND_CGROUP,     /* the fraction of the cgroup's memory.max - memory.current */
    SL_KV_BOUND_DEVICE,     /* the CUDA backend: --gpu-memory-fraction of the device */
    SL_KV_BOUND_CONTEXT,    /* the memory bound was below one full-context sequence: raised to it */
} sl_kv_bound;

/* "flag", "workload", "memory", "cgroup", "device", "context"; "?" outside the enum. */
const char *sl_kv_bound_name(sl_kv_bound b);

/* The inputs of sl_kv_size_host. */
typedef struct {
    uint64_t block_bytes;     /* one block (K and V of every layer) in the stored type; >= 1 */
    uint64_t flag_bytes;      /* --kv-memory; 0 = not given */
    uint64_t need_blocks;     /* what the workload can use: max-seqs x blocks of one full sequence */
    uint64_t min_blocks;      /* blocks of one full-context sequence; >= 1 */
    uint64_t mem_available;   /* MemAvailable bytes; SL_KV_UNKNOWN: none known */
    uint64_t cgroup_limit;    /* the binding cgroup's memory limit; SL_KV_UNKNOWN: none */
    uint64_t cgroup_usage;    /* ... and its usage (a usage above the limit leaves 0) */
    double fraction;          /* share of the available memory, in (0, 1]; out of range: SL_KV_HOST_FRACTION */
} sl_kv_sizing_in;

/* What sl_kv_size_host chose. */
typedef struct {
    uint64_t n_blocks;        /* in [min_blocks, SL_KV_BLOCKS_MAX] */
    uint64_t bytes;           /* n_blocks x block_bytes (saturated at UINT64_MAX) */
    sl_kv_bound bound;
    uint64_t available;       /* min(mem_available, cgroup headroom): SL_KV_UNKNOWN when neither is known */
} sl_kv_sizing;

/* The host pool for `in`: the flag's blocks when flag_bytes is set (fewer
 * than min_blocks: SL_EINVAL, err says how many it holds and how many one
 * sequence needs); else min(need_blocks, fraction x available / block_bytes),
 * raised to min_blocks. Ties go to the workload, then to the cgroup. out
 * is filled on success; on failure out->bytes and n_blocks hold the flag's
 * figures. */
sl_status sl_kv_size_host(const sl_kv_sizing_in *in, sl_kv_sizing *out, char err[SL_ERR_LEN]);

/* Bytes a cgroup with this limit and usage still lets the process take:
 * limit - usage, 0 when usage is at or above it, SL_KV_UNKNOWN when limit is. */
uint64_t sl_kv_cgroup_headroom(uint64_t limit, uint64_t usage);

/* MemAvailable of a /proc/meminfo text, in bytes; SL_KV_UNKNOWN when
 * missing or not a number. */
uint64_t sl_kv_parse_meminfo(const char *meminfo);

/* A cgroup v2 memory.max or memory.current text ("max" or a byte count,
 * one line), or a v1 memory.limit_in_bytes (a value of 2^62 or more is v1's
 * "no limit"); SL_KV_UNKNOWN for "max", no limit or text that does not parse. */
uint64_t sl_kv_parse_cgroup_bytes(const char *text);

/* The tightest memory limit on the cgroups of a /proc/self/cgroup text
 * (`proc_cgroup`) below `root` (in place of /sys/fs/cgroup): for the v2
 * entry ("0::PATH") memory.max and memory.current of PATH and of every
 * ancestor, under root and root/unified; for a v1 memory entry
 * ("N:memory:PATH") memory.limit_in_bytes and memory.usage_in_bytes under
 * root/memory. The level with the least headroom binds: *limit and *usage
 * OUT are its figures, SL_KV_UNKNOWN and 0 when no level has a limit (also
 * when proc_cgroup is NULL). A level whose usage cannot be read counts as
 * using nothing. */
void sl_kv_read_cgroup(const char *root, const char *proc_cgroup, uint64_t *limit, uint64_t *usage);

/* The memory available to this process: MemAvailable from /proc/meminfo
 * (else the free pages sysconf reports) into *mem_available, and
 * sl_kv_read_cgroup over /proc/self/cgroup under $SLUICE_CGROUP_ROOT (when
 * set and not empty) or /sys/fs/cgroup into *limit and *usage. All OUT;
 * SL_KV_UNKNOWN for what cannot be read. */
void sl_kv_host_memory(uint64_t *mem_available, uint64_t *limit, uint64_t *usage);

#endif
