/* master/instance.c: one sluice per port, and the segments of dead instances.
 * Runs in the master's setup, before the first fork.
 *
 * The listeners use SO_REUSEPORT (one socket per front end), so the kernel
 * lets any process of the same user join the port's group: a second
 * `sluice serve --port P` would silently take a share of P's connections.
 * Refusing it takes two checks (instance.h says why both): a flock on
 * /tmp/sluice-P.lock, which the kernel drops the moment the master dies, and
 * a plain bind of the port without SO_REUSEPORT, which fails while anyone
 * listens there. The trade-off: the lock file stays in /tmp (zero or a few
 * bytes) after the instance ends, because unlinking a lock file races with
 * the next instance opening it.
 *
 * Segments are named "/sluice-PORT-PID": the pid makes the name unique, the
 * port lets a start find the lock that says whether their owner is alive. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/instance.h"

#define LOCK_DIR "/tmp"
#define SHM_DIR "/dev/shm"   /* where glibc's shm_open keeps names */

static void lock_path(unsigned port, char *buf, size_t cap)
{
    snprintf(buf, cap, LOCK_DIR "/sluice-%u.lock", port);
}

/* 1 when another process holds the lock of `port`; 0 when nobody does or
 * there is no lock file we can open. */
static int port_lock_held(unsigned port)
{
    char path[64];
    lock_path(port, path, sizeof path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

static sl_status probe_port(const sl_config *cfg, char err[SL_ERR_LEN])
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%u", cfg->port);
    if (getaddrinfo(cfg->host, port, &hints, &ai) != 0)
        return SL_OK;   /* open_listeners reports it */
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    sl_status rc = SL_OK;
    /* SO_REUSEADDR: the TIME_WAIT connections of an instance that just ended
     * must not count as "served" */
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno == EADDRINUSE) {
        snprintf(err, SL_ERR_LEN,
                 "port %u on %.100s is already served (another sluice instance or another program); "
                 "refusing to share it",
                 cfg->port, cfg->host);
        rc = SL_EINVAL;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

sl_status sl_instance_claim_port(sl_master *m, char err[SL_ERR_LEN])
{
    m->lock_fd = -1;
    if (m->cfg.port == 0)
        return SL_OK;
    char path[64];
    lock_path(m->cfg.port, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "sluice: open(%s): %s; only the bind check guards port %u\n", path, strerror(errno),
                m->cfg.port);
    } else if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        char pid[16] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        snprintf(err, SL_ERR_LEN, "port %u is already served by another sluice instance (master pid %s, lock %s)",
                 m->cfg.port, pid[0] ? pid : "?", path);
        close(fd);
        return SL_EINVAL;
    } else {
        char pid[16];
        int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
        if (ftruncate(fd, 0) == 0)   /* the pid only serves the next one's message */
            (void)!pwrite(fd, pid, (size_t)len, 0);
        m->lock_fd = fd;
    }
    sl_status rc = probe_port(&m->cfg, err);
    if (rc < 0)
        sl_instance_release(m);
    return rc;
}

void sl_instance_name_segment(sl_master *m)
{
    snprintf(m->cfg.shm_name, sizeof m->cfg.shm_name, "/sluice-%u-%d", m->cfg.port, (int)getpid());
}

unsigned sl_instance_remove_stale_segments(const sl_master *m)
{
    DIR *d = opendir(SHM_DIR);
    if (d == NULL)
        return 0;
    unsigned removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned port;
        int pid, end = 0;
        if (sscanf(e->d_name, "sluice-%u-%d%n", &port, &pid, &end) != 2 || e->d_name[end] != 0 || pid <= 0 ||
            pid == (int)getpid())
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        /* the lock of our own port is ours now: the pid alone decides there */
        bool own = m->lock_fd >= 0 && port == m->cfg.port;
        if (kill(pid, 0) == 0 || errno != ESRCH || (!own && port_lock_held(port)))
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0) {
            fprintf(stderr, "sluice: removed the segment %s of a dead instance (master pid %d)\n", name, pid);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

void sl_instance_release(sl_master *m)
{
    if (m->lock_fd >= 0)
        close(m->lock_fd);
    m->lock_fd = -1;
}
