/* master/instance.h: one instance per port, and no segment outliving its instance.
 * Who:       the master, in setup, before it forks anything.
 * Safety:    everything here is released by the kernel when the master dies
 *            (a flock, not a pid file), so a SIGKILL leaves nothing that blocks
 *            the next start; what it does leave (a segment) the next start removes.
 * Ownership: sl_master.lock_fd is the master's alone (children close it).
 * Errors:    SL_OK; SL_EINVAL (the port is served already: err says by whom). */
#ifndef SL_INSTANCE_H
#define SL_INSTANCE_H

#include "master/master_impl.h"
#include "shared/status.h"

/* Claims cfg.port (not port 0, which the kernel hands out unused) for this
 * master: takes an exclusive flock on /tmp/sluice-PORT.lock (writing our pid
 * into it for the next one's message), then binds a probe socket to
 * cfg.host:PORT without SO_REUSEPORT and closes it at once. The lock stops a
 * second sluice, the probe stops anything else already listening there (an
 * instance whose lock lives in another /tmp, e.g. systemd's PrivateTmp), and
 * the lock makes the probe-then-bind of two starting instances one at a
 * time. A lock file we may not open (another user's) leaves the probe alone
 * to decide, with one log line. Sets m->lock_fd (-1 when no lock is held).
 * Returns SL_OK, or SL_EINVAL with err naming the port and the holder. */
sl_status sl_instance_claim_port(sl_master *m, char err[SL_ERR_LEN]);

/* After the listeners are bound (cfg.port is the real port now): names the
 * segment "/sluice-PORT-PID" in cfg.shm_name. Never fails. */
void sl_instance_name_segment(sl_master *m);

/* Removes every segment of ours in /dev/shm named "sluice-PORT-PID" whose
 * master is dead: its pid gone (kill(pid, 0) says ESRCH) and its port's lock
 * not held by anyone else. Both, because a pid alone misleads across pid
 * namespaces sharing one /dev/shm, and a lock alone across separate /tmps; on
 * m's own port, whose lock m holds, the pid alone decides (m's lock proves
 * no other sluice with our /tmp is alive there). Logs each segment removed;
 * returns how many. Does not block. */
unsigned sl_instance_remove_stale_segments(const sl_master *m);

/* Drops the port lock (at exit; the kernel does the same on a crash). */
void sl_instance_release(sl_master *m);

#endif
