/* master/admin.h: the master's admin socket (Unix domain, mode 0600).
 * Protocol: the client sends one command line (within 2 s of connecting),
 * the master answers one JSON document and closes. Served from the master's
 * poll loop without blocking: no client, slow or silent, delays supervision.
 * Commands:
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

#include <poll.h>
#include <stdint.h>

#include "master/master_impl.h"
#include "shared/status.h"

#define SL_ADMIN_DEADLINE_MS 2000   /* a client's time to send its line, then to take the answer */
#define SL_ADMIN_POLLFDS (1 + SL_ADMIN_CLIENTS_MAX)   /* pollfds sl_admin_poll_fill may use */

/* Binds and listens on cfg.admin_socket, mode 0600; with cfg.admin_group set,
 * then gives that group the socket and mode 0660. What is at the path first
 * decides: nothing, fine; a socket nobody listens on (ECONNREFUSED: a dead
 * instance's), removed; anything else is left alone and refused: a socket
 * that answers or whose state is unclear, a regular file, a directory, a
 * symlink. Returns SL_OK; SL_EINVAL (path too long, the path refused as
 * above, unknown group or chown/chmod refused: err says which, and no socket
 * file of ours is left); SL_EIO (lstat, socket, bind or listen failed). */
sl_status sl_admin_open(sl_master *m, char err[SL_ERR_LEN]);

/* Closes the listener and every client, and removes the socket file. */
void sl_admin_close(sl_master *m);

/* In a forked child: closes the listener's and the clients' descriptors and
 * removes nothing (the socket stays the master's). */
void sl_admin_close_fds(sl_master *m);

/* The admin socket in the master's poll loop; neither call blocks. Fill puts
 * the listener and every client (POLLIN while reading, POLLOUT while an
 * answer waits) into pfd, at most SL_ADMIN_POLLFDS, and returns how many.
 * Handle takes the same entries after poll: accepts every waiting client (a
 * client beyond SL_ADMIN_CLIENTS_MAX evicts the reader with the oldest
 * deadline, so silent connections cannot keep a real one out), reads lines,
 * answers a complete one (LF, SL_ADMIN_LINE_MAX bytes, or the client's EOF),
 * and closes a client past its deadline with an error document. */
uint32_t sl_admin_poll_fill(sl_master *m, struct pollfd *pfd);
void sl_admin_poll_handle(sl_master *m, const struct pollfd *pfd, uint32_t n);

/* What the socket sends back for the `n` bytes a client sent (at most
 * SL_ADMIN_LINE_MAX are read; the command ends at the first CR, LF or NUL):
 * the answer and a newline, or an error document for an unknown command.
 * Malloc'd; NULL only when out of memory. Any bytes are accepted. */
char *sl_admin_reply(sl_master *m, const char *buf, size_t n);

/* The JSON answer to `cmd` (malloc'd), or NULL for an unknown command. */
char *sl_admin_answer(sl_master *m, const char *cmd);

#endif
