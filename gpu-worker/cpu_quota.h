/* gpu-worker/cpu_quota.h: how many CPUs this process may really use, for
 * the default of --threads.
 * What:      the smaller of the CPUs in this thread's affinity mask
 *            (sched_getaffinity: taskset, cpuset, a container's --cpuset-cpus)
 *            and the cgroup CPU quota rounded up (v2 cpu.max, v1
 *            cpu.cfs_quota_us / cpu.cfs_period_us: docker --cpus, Kubernetes
 *            limits), at least 1. The number of online cores counts CPUs a
 *            container may not use: more spinning compute threads than CPUs
 *            lose to descheduling far more than they gain.
 * Who:       the master, once, while it sets the config's defaults.
 * Errors:    none: whatever cannot be read or parsed imposes no limit. */
#ifndef SL_CPU_QUOTA_H
#define SL_CPU_QUOTA_H

/* The CPUs a cgroup v2 `cpu.max` text allows ("QUOTA PERIOD", or "max
 * PERIOD"), rounded up, at least 1; 0 for no limit or text that does not
 * parse. "150000 100000" -> 2, "50000 100000" -> 1, "max 100000" -> 0. */
int sl_cpu_quota_parse_max(const char *cpu_max);

/* The same for cgroup v1: cpu.cfs_quota_us ("-1" is no limit) and
 * cpu.cfs_period_us. 0 for no limit or text that does not parse. */
int sl_cpu_quota_parse_cfs(const char *quota_us, const char *period_us);

/* The thread count for n_affinity CPUs in the mask (< 1: unknown, taken as
 * n_online) under a quota of quota_cpus (0: none), with n_online the
 * fallback when nothing is known; at least 1. */
int sl_cpu_quota_threads(int n_affinity, int quota_cpus, int n_online);

/* sl_cpu_quota_threads over this process: its affinity mask, the quotas of
 * its cgroup and every ancestor (the smallest binds) under /sys/fs/cgroup,
 * and the online cores. Reads /proc and /sys; never fails. */
int sl_cpu_quota_default_threads(void);

#endif
