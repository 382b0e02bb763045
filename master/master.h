/* master/master.h: the supervising process of `sluice serve`.
 * Who:     the process the user starts. It never loads weights or touches a
 *          GPU: it validates the config and model metadata, creates the
 *          shared segment, the listening sockets and the wakeup eventfds,
 *          forks the worker and the front ends, restarts them when they die
 *          (after recovering their shared state), serves the admin socket,
 *          and drains on SIGTERM/SIGINT.
 * Exit:    0 after a drain; 2 = bad config or model (or a child said so: do
 *          not restart); 1 = a start-up failure of the system (socket, shm). */
#ifndef SL_MASTER_H
#define SL_MASTER_H

#include <stdint.h>

#include "shared/config.h"

#define SL_EXIT_OK 0
#define SL_EXIT_FAILED 1
#define SL_EXIT_CONFIG 2

/* Runs the server until drained. n_ctx: the context the segment must carry
 * prompts for (the model's, or --ctx-size), checked by the caller. Returns
 * the process exit code. */
int sl_master_run(const sl_config *cfg, int32_t n_ctx);

#endif
