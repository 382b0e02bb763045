/* frontend/server.h: the front-end process (libh2o 2.2.5 event loop, HTTP/1.1).
 * Where:     each front-end child the master forks calls sl_frontend_main once;
 *            tools/fe-harness does the same in tests.
 * Who:       one call per process; it owns the process until drained.
 * Safety:    request data never ends the process: every bad input is a 4xx with
 *            an OpenAI error body, and a failure after a stream started is a
 *            final SSE error event. docs/FRONTEND.md has the request lifecycle.
 * Ownership: cfg is borrowed for the whole call; listen_fd and wake_fd become the
 *            process's (closed on return); the shm segment is attached inside.
 * Errors:    the exit code of the process (see sl_frontend_main). */
#ifndef SL_FRONTEND_SERVER_H
#define SL_FRONTEND_SERVER_H

#include <stdint.h>

#include "shared/config.h"

#define SL_FRONTEND_EXIT_OK 0        /* drained after SIGTERM/SIGINT */
#define SL_FRONTEND_EXIT_FAILED 1    /* anything else: the master respawns */
#define SL_FRONTEND_EXIT_CONFIG 2    /* bad config or model: do not respawn */

/* Runs front end `slot` of the instance described by `cfg`.
 * listen_fd: bound, listening, non-blocking or not (made non-blocking here),
 *            SO_REUSEPORT; the master keeps no copy it reads from.
 * wake_fd:   this slot's eventfd, written by the worker when a mailbox of this
 *            slot got tokens or finished.
 * Attaches to cfg->shm_name as SL_SHM_ROLE_FRONTEND `slot`, loads the tokenizer
 * and chat template from cfg->model (cfg->chat_template overrides: a file, or a
 * built-in name), serves until SIGTERM or SIGINT, then drains (/ready 503 for
 * cfg->drain_delay_s, listener closed, in-flight requests get
 * cfg->drain_timeout_s) and returns.
 * Returns SL_FRONTEND_EXIT_OK after a drain, SL_FRONTEND_EXIT_CONFIG when the
 * model, template or segment cannot be used (one line on stderr says why),
 * SL_FRONTEND_EXIT_FAILED otherwise. Blocks. */
int sl_frontend_main(const sl_config *cfg, uint32_t slot, int listen_fd, int wake_fd);

#endif
