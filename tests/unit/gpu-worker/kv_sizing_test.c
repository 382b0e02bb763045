/* tests/unit/gpu-worker/kv_sizing_test.c: gpu-worker/kv_sizing.c, the host
 * KV pool from the workload, MemAvailable and the cgroup memory limit, and
 * the readers on a fake cgroup tree. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu-worker/kv_sizing.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

static sl_kv_sizing_in base(void)
{
    /* 1 MiB blocks, 4 blocks a sequence, 16 sequences: the workload needs 64 MiB */
    return (sl_kv_sizing_in){.block_bytes = MIB, .need_blocks = 64, .min_blocks = 4, .mem_available = 64 * GIB,
                             .cgroup_limit = SL_KV_UNKNOWN, .cgroup_usage = 0, .fraction = 0.5};
}

static sl_kv_sizing size_ok(const sl_kv_sizing_in *in)
{
    sl_kv_sizing out;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_kv_size_host(in, &out, err), SL_OK, "%s", err);
    cr_assert_eq(out.bytes, out.n_blocks * (in->block_bytes ? in->block_bytes : 1));
    return out;
}

Test(kv_sizing, bound_names)
{
    cr_assert_str_eq(sl_kv_bound_name(SL_KV_BOUND_FLAG), "flag");
    cr_assert_str_eq(sl_kv_bound_name(SL_KV_BOUND_WORKLOAD), "workload");
    cr_assert_str_eq(sl_kv_bound_name(SL_KV_BOUND_MEMORY), "memory");
    cr_assert_str_eq(sl_kv_bound_name(SL_KV_BOUND_CGROUP), "cgroup");
    cr_assert_str_eq(sl_kv_bound_name(SL_KV_BOUND_DEVICE), "device");
    cr_assert_str_eq(sl_kv_bound_name(SL_KV_BOUND_CONTEXT), "context");
    cr_assert_str_eq(sl_kv_bound_name((sl_kv_bound)99), "?");
}

Test(kv_sizing, workload_wins_with_plenty_of_memory)
{
    sl_kv_sizing_in in = base();
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_WORKLOAD);
    cr_assert_eq(out.n_blocks, 64);
    cr_assert_eq(out.available, 64 * GIB);
}

Test(kv_sizing, memory_wins_when_half_of_it_is_below_the_need)
{
    sl_kv_sizing_in in = base();
    in.mem_available = 40 * MIB;   /* half: 20 blocks */
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_MEMORY);
    cr_assert_eq(out.n_blocks, 20);
    in.mem_available = 128 * MIB;   /* exactly the need: the workload (ties go to it) */
    out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_WORKLOAD);
    cr_assert_eq(out.n_blocks, 64);
}

Test(kv_sizing, cgroup_headroom_wins_when_tighter_than_memavailable)
{
    sl_kv_sizing_in in = base();
    in.cgroup_limit = 100 * MIB;
    in.cgroup_usage = 70 * MIB;   /* 30 MiB left: 15 blocks */
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_CGROUP);
    cr_assert_eq(out.n_blocks, 15);
    cr_assert_eq(out.available, 30 * MIB);
    in.mem_available = 30 * MIB;   /* a tie: the cgroup is named */
    cr_assert_eq(size_ok(&in).bound, SL_KV_BOUND_CGROUP);
    in.mem_available = 20 * MIB;   /* MemAvailable tighter again */
    out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_MEMORY);
    cr_assert_eq(out.n_blocks, 10);
}

Test(kv_sizing, a_limit_below_usage_leaves_one_sequence)
{
    sl_kv_sizing_in in = base();
    in.cgroup_limit = 100 * MIB;
    in.cgroup_usage = 150 * MIB;
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.available, 0);
    cr_assert_eq(out.bound, SL_KV_BOUND_CONTEXT);
    cr_assert_eq(out.n_blocks, 4);
}

Test(kv_sizing, flag_wins_over_everything)
{
    sl_kv_sizing_in in = base();
    in.flag_bytes = 200 * MIB + 5;   /* more than the need, and a partial block dropped */
    in.mem_available = 10 * MIB;
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_FLAG);
    cr_assert_eq(out.n_blocks, 200);
    cr_assert_eq(out.bytes, 200 * MIB);
}

Test(kv_sizing, a_flag_below_one_sequence_is_an_error_naming_the_numbers)
{
    sl_kv_sizing_in in = base();
    in.flag_bytes = 3 * MIB;
    sl_kv_sizing out;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_kv_size_host(&in, &out, err), SL_EINVAL);
    cr_assert(strstr(err, "--kv-memory 3145728 bytes holds 3 KV blocks"), "%s", err);
    cr_assert(strstr(err, "needs 4 (4194304 bytes)"), "%s", err);
    cr_assert_eq(out.n_blocks, 3);
    cr_assert_eq(out.bound, SL_KV_BOUND_FLAG);
}

Test(kv_sizing, unknown_memory_leaves_the_workload)
{
    sl_kv_sizing_in in = base();
    in.mem_available = SL_KV_UNKNOWN;
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_WORKLOAD);
    cr_assert_eq(out.available, SL_KV_UNKNOWN);
    in.cgroup_limit = 40 * MIB;   /* the cgroup alone still binds */
    out = size_ok(&in);
    cr_assert_eq(out.bound, SL_KV_BOUND_CGROUP);
    cr_assert_eq(out.n_blocks, 20);
}

Test(kv_sizing, odd_inputs_are_taken_as_their_floor)
{
    sl_kv_sizing_in in = base();
    in.need_blocks = 0;   /* below one sequence: one sequence */
    sl_kv_sizing out = size_ok(&in);
    cr_assert_eq(out.n_blocks, 4);
    cr_assert_eq(out.bound, SL_KV_BOUND_WORKLOAD);
    in = base();
    in.min_blocks = 0;    /* at least one block */
    in.mem_available = 0;
    out = size_ok(&in);
    cr_assert_eq(out.n_blocks, 1);
    cr_assert_eq(out.bound, SL_KV_BOUND_CONTEXT);
    in = base();
    in.fraction = 0;      /* out of range: the default half */
    in.mem_available = 40 * MIB;
    cr_assert_eq(size_ok(&in).n_blocks, 20);
    in.fraction = 7.5;
    cr_assert_eq(size_ok(&in).n_blocks, 20);
    in.fraction = 1.0;
    cr_assert_eq(size_ok(&in).n_blocks, 40);
    in = base();
    in.block_bytes = 0;   /* counted as one byte, never a division by zero */
    in.need_blocks = 10;
    cr_assert_eq(size_ok(&in).n_blocks, 10);
}

Test(kv_sizing, huge_figures_saturate_instead_of_wrapping)
{
    sl_kv_sizing_in in = base();
    in.need_blocks = UINT64_MAX;
    in.mem_available = UINT64_MAX - 1;
    in.block_bytes = 1;
    sl_kv_sizing out;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_kv_size_host(&in, &out, err), SL_OK);
    cr_assert_eq(out.n_blocks, SL_KV_BLOCKS_MAX);
    cr_assert_eq(out.bytes, SL_KV_BLOCKS_MAX);
    in.flag_bytes = UINT64_MAX;
    cr_assert_eq(sl_kv_size_host(&in, &out, err), SL_OK);
    cr_assert_eq(out.n_blocks, SL_KV_BLOCKS_MAX);
    in = base();
    in.block_bytes = UINT64_MAX / 2;   /* blocks x bytes would overflow: saturated */
    in.min_blocks = 3;
    in.mem_available = SL_KV_UNKNOWN;
    cr_assert_eq(sl_kv_size_host(&in, &out, err), SL_OK);
    cr_assert_eq(out.bytes, UINT64_MAX);
}

Test(kv_sizing, cgroup_headroom)
{
    cr_assert_eq(sl_kv_cgroup_headroom(SL_KV_UNKNOWN, 5), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_cgroup_headroom(100, 30), 70);
    cr_assert_eq(sl_kv_cgroup_headroom(100, 100), 0);
    cr_assert_eq(sl_kv_cgroup_headroom(100, 300), 0);
}

/* ------------------------------------------------------------------------ */
/* parsers                                                                   */

Test(kv_sizing, meminfo_memavailable)
{
    cr_assert_eq(sl_kv_parse_meminfo("MemTotal:       32000000 kB\nMemFree:         1000 kB\n"
                                     "MemAvailable:   23848748 kB\nBuffers: 5 kB\n"),
                 23848748ull * 1024);
    cr_assert_eq(sl_kv_parse_meminfo("MemAvailable: 1 kB"), 1024);
    cr_assert_eq(sl_kv_parse_meminfo("MemTotal: 5 kB\nMemFree: 1 kB\n"), SL_KV_UNKNOWN);   /* old kernels */
    cr_assert_eq(sl_kv_parse_meminfo(""), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_meminfo(NULL), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_meminfo("MemAvailable: lots kB\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_meminfo("MemAvailable: 12 MB\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_meminfo("MemAvailable: 99999999999999999999999 kB\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_meminfo("MemAvailable: 18014398509481984 kB\n"), SL_KV_UNKNOWN);   /* 2^54 kB */
}

Test(kv_sizing, cgroup_byte_texts)
{
    cr_assert_eq(sl_kv_parse_cgroup_bytes("max\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("max"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("536870912\n"), 536870912);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("0\n"), 0);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("9223372036854771712\n"), SL_KV_UNKNOWN);   /* v1's no limit */
    cr_assert_eq(sl_kv_parse_cgroup_bytes(""), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes(NULL), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("12K\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("-1\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("12 34\n"), SL_KV_UNKNOWN);
    cr_assert_eq(sl_kv_parse_cgroup_bytes("99999999999999999999999\n"), SL_KV_UNKNOWN);
}

/* ------------------------------------------------------------------------ */
/* the reader on a fake tree                                                 */

static char tree[256];

static void put(const char *rel, const char *text)
{
    char path[600], dir[600];
    snprintf(path, sizeof path, "%s/%s", tree, rel);
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(tree) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = 0;
        mkdir(dir, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void make_tree(void)
{
    snprintf(tree, sizeof tree, "/tmp/kv_sizing_test.XXXXXX");
    cr_assert(mkdtemp(tree));
}

static void remove_tree(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tree);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(kv_sizing_tree, .init = make_tree, .fini = remove_tree);

Test(kv_sizing_tree, no_files_no_limit)
{
    uint64_t limit = 1, usage = 1;
    sl_kv_read_cgroup(tree, "0::/a/b\n", &limit, &usage);
    cr_assert_eq(limit, SL_KV_UNKNOWN);
    cr_assert_eq(usage, 0);
    sl_kv_read_cgroup(tree, NULL, &limit, &usage);
    cr_assert_eq(limit, SL_KV_UNKNOWN);
    sl_kv_read_cgroup(tree, "", &limit, &usage);
    cr_assert_eq(limit, SL_KV_UNKNOWN);
    sl_kv_read_cgroup(tree, "garbage without colons\n::\n", &limit, &usage);
    cr_assert_eq(limit, SL_KV_UNKNOWN);
}

Test(kv_sizing_tree, v2_limit_of_the_process_cgroup)
{
    put("a/b/memory.max", "1000000\n");
    put("a/b/memory.current", "250000\n");
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "0::/a/b\n", &limit, &usage);
    cr_assert_eq(limit, 1000000);
    cr_assert_eq(usage, 250000);
}

Test(kv_sizing_tree, max_is_no_limit_and_an_ancestor_still_binds)
{
    put("a/b/memory.max", "max\n");
    put("a/b/memory.current", "250000\n");
    put("a/memory.max", "800000\n");
    put("a/memory.current", "700000\n");
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "0::/a/b\n", &limit, &usage);
    cr_assert_eq(limit, 800000);
    cr_assert_eq(usage, 700000);
}

Test(kv_sizing_tree, the_level_with_least_headroom_binds)
{
    put("a/b/memory.max", "1000000\n");      /* 900000 left */
    put("a/b/memory.current", "100000\n");
    put("a/memory.max", "5000000\n");        /* 500000 left: binds though its limit is larger */
    put("a/memory.current", "4500000\n");
    put("memory.max", "garbage\n");          /* ignored */
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "0::/a/b\n", &limit, &usage);
    cr_assert_eq(limit, 5000000);
    cr_assert_eq(usage, 4500000);
}

Test(kv_sizing_tree, a_limit_below_usage_binds_with_no_headroom)
{
    put("memory.max", "1000\n");
    put("memory.current", "5000\n");
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "0::/\n", &limit, &usage);
    cr_assert_eq(limit, 1000);
    cr_assert_eq(usage, 5000);
    cr_assert_eq(sl_kv_cgroup_headroom(limit, usage), 0);
}

Test(kv_sizing_tree, missing_or_garbage_usage_counts_as_nothing_used)
{
    put("x/memory.max", "4096\n");
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "0::/x\n", &limit, &usage);
    cr_assert_eq(limit, 4096);
    cr_assert_eq(usage, 0);
    put("x/memory.current", "lots\n");
    sl_kv_read_cgroup(tree, "0::/x\n", &limit, &usage);
    cr_assert_eq(limit, 4096);
    cr_assert_eq(usage, 0);
}

Test(kv_sizing_tree, a_root_limit_binds_whatever_the_path)
{
    /* what the integration tests rely on: a fake root binds every process */
    put("memory.max", "64000000\n");
    put("memory.current", "1000000\n");
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "0::/user.slice/user-1000.slice/session-2.scope\n", &limit, &usage);
    cr_assert_eq(limit, 64000000);
    cr_assert_eq(usage, 1000000);
}

Test(kv_sizing_tree, v1_memory_controller_and_hybrid_unified)
{
    put("memory/docker/abc/memory.limit_in_bytes", "2000000\n");
    put("memory/docker/abc/memory.usage_in_bytes", "500000\n");
    put("memory/memory.limit_in_bytes", "9223372036854771712\n");   /* v1's no limit */
    uint64_t limit, usage;
    sl_kv_read_cgroup(tree, "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n", &limit, &usage);
    cr_assert_eq(limit, 2000000);
    cr_assert_eq(usage, 500000);
    put("unified/docker/abc/memory.max", "1000000\n");   /* the hybrid mount's v2 limit binds more */
    put("unified/docker/abc/memory.current", "0\n");
    sl_kv_read_cgroup(tree, "4:cpu,memory:/docker/abc\n0::/docker/abc\n", &limit, &usage);
    cr_assert_eq(limit, 1000000);
    cr_assert_eq(usage, 0);
}

Test(kv_sizing_tree, the_env_hook_points_the_process_reader_at_the_tree)
{
    put("memory.max", "123456789\n");
    put("memory.current", "23456789\n");
    put("unified/memory.max", "max\n");
    setenv("SLUICE_CGROUP_ROOT", tree, 1);
    uint64_t mem, limit, usage;
    sl_kv_host_memory(&mem, &limit, &usage);
    unsetenv("SLUICE_CGROUP_ROOT");
    cr_assert_neq(mem, SL_KV_UNKNOWN);   /* /proc/meminfo is there on Linux */
    /* the process's cgroup path is whatever this machine says; the root binds */
    cr_assert_eq(limit, 123456789);
    cr_assert_eq(usage, 23456789);
}
