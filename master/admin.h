/* master/admin.h: the master's admin socket (Unix domain, mode 0600).
 * Protocol: the client sends one command line, the master answers one JSON
 * document and closes. Commands:
 *   effective-config  the worker's snapshot from shared memory plus the
 *                     master's own view (front ends, worker state and
 *                     generation, restarts, every setting with its source)
 *   stats             counters, mailbox census, histogram counts
 *   health            master alive, worker state and liveness
 *   pause             the worker stops running forward steps (requests stay
 *                     accepted and queued, cancellations still apply, the
 *                     heartbeat goes on); answers {"paused": true}
 *   resume            undoes pause; answers {"paused": false}
 * It answers while the worker restarts: nothing here waits on the worker. */
#ifndef SL_ADMIN_H
#define SL_ADMIN_H

#include "master/master_impl.h"
#include "shared/status.h"

#define SL_ADMIN_LINE_MAX 256

/* Binds and listens on cfg.admin_socket (replacing a stale socket file),
 * mode 0600; with cfg.admin_group set, then gives that group the socket and
 * mode 0660. Returns SL_OK; SL_EINVAL (path too long, another instance
 * answers, unknown group or chown/chmod refused: err says which, and no
 * socket file is left); SL_EIO (socket, bind or listen failed). */
sl_status sl_admin_open(sl_master *m, char err[SL_ERR_LEN]);
void sl_admin_close(sl_master *m);

/* Accepts one client and answers it (bounded: 1 s to send its line). */
void sl_admin_serve_one(sl_master *m);

/* What the socket sends back for the `n` bytes a client sent (at most
 * SL_ADMIN_LINE_MAX are read; the command ends at the first CR, LF or NUL):
 * the answer and a newline, or an error document for an unknown command.
 * Malloc'd; NULL only when out of memory. Any bytes are accepted. */
char *sl_admin_reply(sl_master *m, const char *buf, size_t n);

/* The JSON answer to `cmd` (malloc'd), or NULL for an unknown command. */
char *sl_admin_answer(sl_master *m, const char *cmd);

#endif
