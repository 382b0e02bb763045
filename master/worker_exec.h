/* master/worker_exec.h: starting the worker through exec instead of a bare
 * fork, for tools that follow only exec'd children (compute-sanitizer with
 * --target-processes all did not follow the forked worker). Debug switch:
 * env SLUICE_WORKER_EXEC=1; production keeps the plain fork.
 * SLUICE_WORKER_WRAPPER="CMD ARG..." (implies exec) puts a command in front
 * of the worker, split at blanks, no shell: e.g. "compute-sanitizer --tool
 * memcheck", so a tool that does not follow children still sees the worker.
 * The master then reaps the wrapper's pid, so the wrapper must exit when the
 * worker does; a stop (SIGTERM) goes to the worker itself, whose pid the
 * segment holds, because compute-sanitizer told to stop quits before its
 * report, and a kill (a wedged worker) reaches the worker before the
 * wrapper, so none is left orphaned. A drain waits up to 300 s instead of
 * 10 for the worker to end.
 * How:  the forked child writes its sl_config (pointer-free, so its bytes are
 *       the config) behind a small header into a memfd, clears close-on-exec
 *       on that memfd and the wakeup eventfds, and execs its own binary as
 *       `sluice __worker CONFIG_FD FD,FD,...`; that entry reads the config
 *       back and runs sl_worker_main as the forked child would have. Same
 *       pid, so the master supervises it unchanged. */
#ifndef SL_MASTER_WORKER_EXEC_H
#define SL_MASTER_WORKER_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/config.h"

/* True when SLUICE_WORKER_EXEC is 1 or SLUICE_WORKER_WRAPPER is not empty. */
bool sl_worker_exec_wanted(void);

/* True when SLUICE_WORKER_WRAPPER is not empty. */
bool sl_worker_wrapped(void);

/* In the forked child: execs the worker. Returns only on failure (logged);
 * the caller then exits the child with status 1. */
void sl_worker_exec(const sl_config *cfg, const int *wake_fds, uint32_t n_fds);

/* The `sluice __worker` entry: argv[1] the config fd, argv[2] the wakeup
 * fds. Returns sl_worker_main's exit status, or 2 on malformed arguments or
 * a config that is not this binary's. */
int sl_worker_exec_main(int argc, char **argv);

#endif
