/* gpu-worker/worker.h: the worker process's entry point.
 * Where:  a child the master forks (and re-forks after a crash); it never
 *         forks itself, so CUDA may be initialised here and only here.
 * What:   attaches the shared segment, loads the model onto the configured
 *         backend, sizes the KV cache, publishes READY and its effective-
 *         config snapshot, then runs the scheduler over the segment until
 *         SIGTERM/SIGINT (or the master's death). */
#ifndef SL_WORKER_H
#define SL_WORKER_H

#include <stdint.h>

#include "shared/config.h"

/* Exit codes, part of the master protocol. */
#define SL_WORKER_EXIT_OK 0        /* stopped on request */
#define SL_WORKER_EXIT_FAILED 1    /* a runtime failure: restart with backoff */
#define SL_WORKER_EXIT_CONFIG 2    /* bad config or model: do not respawn */

/* Runs the worker; wake_fds[i] is front-end slot i's eventfd. Returns the
 * process exit code. */
int sl_worker_main(const sl_config *cfg, const int *wake_fds, uint32_t n_fds);

/* The default of --threads: the CPUs this process may use (its affinity
 * mask, its cgroup's CPU quota rounded up; gpu-worker/cpu_quota.h), at
 * least 1. Reads /proc and /sys; never fails. */
uint32_t sl_worker_default_threads(void);

#endif
