/* tests/unit/gpu-worker/cpu_quota_test.c: gpu-worker/cpu_quota.c, the
 * default thread count from the affinity mask and the cgroup CPU quota. */
#include <criterion/criterion.h>
#include <sched.h>

#include "gpu-worker/cpu_quota.h"

Test(cpu_quota, cpu_max_is_rounded_up_and_max_is_no_limit)
{
    cr_assert_eq(sl_cpu_quota_parse_max("max 100000"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("max 100000\n"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("max"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("150000 100000"), 2);
    cr_assert_eq(sl_cpu_quota_parse_max("150000 100000\n"), 2);
    cr_assert_eq(sl_cpu_quota_parse_max("50000 100000"), 1);
    cr_assert_eq(sl_cpu_quota_parse_max("200000 100000\n"), 2);
    cr_assert_eq(sl_cpu_quota_parse_max("1000 100000"), 1);   /* 1% of a CPU is still one thread */
    cr_assert_eq(sl_cpu_quota_parse_max("400000 50000"), 8);
}

Test(cpu_quota, cpu_max_that_does_not_parse_is_no_limit)
{
    cr_assert_eq(sl_cpu_quota_parse_max(NULL), 0);
    cr_assert_eq(sl_cpu_quota_parse_max(""), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("150000"), 0);          /* no period */
    cr_assert_eq(sl_cpu_quota_parse_max("150000 0"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("0 100000"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("-5 100000"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("15x000 100000"), 0);
    cr_assert_eq(sl_cpu_quota_parse_max("99999999999999999999 1"), 0);
}

Test(cpu_quota, cgroup_v1_cfs_quota)
{
    cr_assert_eq(sl_cpu_quota_parse_cfs("-1\n", "100000\n"), 0);
    cr_assert_eq(sl_cpu_quota_parse_cfs("150000\n", "100000\n"), 2);
    cr_assert_eq(sl_cpu_quota_parse_cfs("50000", "100000"), 1);
    cr_assert_eq(sl_cpu_quota_parse_cfs("300000", "100000"), 3);
    cr_assert_eq(sl_cpu_quota_parse_cfs("300000", "junk"), 0);
    cr_assert_eq(sl_cpu_quota_parse_cfs(NULL, "100000"), 0);
}

Test(cpu_quota, threads_are_the_smaller_of_affinity_and_quota_and_at_least_one)
{
    cr_assert_eq(sl_cpu_quota_threads(16, 0, 16), 16);                                  /* no quota */
    cr_assert_eq(sl_cpu_quota_threads(16, sl_cpu_quota_parse_max("max 100000"), 16), 16);
    cr_assert_eq(sl_cpu_quota_threads(16, sl_cpu_quota_parse_max("150000 100000"), 16), 2);
    cr_assert_eq(sl_cpu_quota_threads(16, sl_cpu_quota_parse_max("50000 100000"), 16), 1);
    cr_assert_eq(sl_cpu_quota_threads(4, 8, 64), 4);                                    /* taskset -c 0-3 */
    cr_assert_eq(sl_cpu_quota_threads(1, 0, 64), 1);
    cr_assert_eq(sl_cpu_quota_threads(0, 0, 8), 8);                                     /* mask unknown */
    cr_assert_eq(sl_cpu_quota_threads(-1, 3, 8), 3);
    cr_assert_eq(sl_cpu_quota_threads(0, 0, 0), 1);
}

Test(cpu_quota, this_process_gets_at_most_its_affinity)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int n = sl_cpu_quota_default_threads();
    cr_assert(n >= 1 && n <= CPU_COUNT(&set), "%d threads for %d CPUs", n, CPU_COUNT(&set));
}
