/* master/master.c: supervision of the worker and the front ends.
 * Runs by flags, as nginx's master does: signals arrive through a signalfd
 * into one poll loop, which reaps, recovers shared state, respawns with
 * backoff, watches the worker's heartbeat, serves the admin socket and
 * drains. No signal handler does any work.
 *
 * Recovery order matters (docs/SHARED_MEMORY.md): a dead child is reaped
 * first, then its shared state is recovered, and only then is a successor
 * forked into the same slot with the same listening socket and eventfd. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frontend/server.h"
#include "gpu-worker/worker.h"
#include "master/admin.h"
#include "master/instance.h"
#include "master/master.h"
#include "master/master_impl.h"
#include "master/worker_exec.h"
#include "shared/shm.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define HEALTHY_RUN_NS 30000000000ull   /* a child that ran this long restarts with the minimum backoff */
#define WORKER_STOP_GRACE_S 10
#define WRAPPED_WORKER_STOP_GRACE_S 300   /* under a wrapper (a sanitizer) teardown is slow */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sluice: %s\n", buf);
}

/* ------------------------------------------------------------------------ */
/* sockets                                                                   */

/* One SO_REUSEPORT listening socket per front-end slot, all on one port: the
 * first may bind port 0 and the rest take the port it got, so a bind error
 * shows here, before any fork. Per-child sockets let the kernel spread
 * accepts evenly (one inherited fd wakes every child and the first wins,
 * about 140/12 with two front ends); the cost is that a second server of the
 * same user binds the port silently and takes a share of the connections. */
static int open_listeners(sl_master *m)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%u", m->cfg.port);
    int gai = getaddrinfo(m->cfg.host, port, &hints, &ai);
    if (gai != 0) {
        log_line("--host %s: %s", m->cfg.host, gai_strerror(gai));
        return -1;
    }
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
            log_line("cannot listen on %s:%s: %s", m->cfg.host, port, strerror(errno));
            if (fd >= 0)
                close(fd);
            freeaddrinfo(ai);
            return -1;
        }
        m->listen_fds[i] = fd;
        if (i == 0 && m->cfg.port == 0) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            getsockname(fd, (struct sockaddr *)&ss, &len);
            m->cfg.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                          : ((struct sockaddr_in *)&ss)->sin_port);
            snprintf(port, sizeof port, "%u", m->cfg.port);
            if (ai->ai_family == AF_INET6)
                ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)m->cfg.port);
            else
                ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)m->cfg.port);
        }
    }
    freeaddrinfo(ai);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* children                                                                  */

/* A child ends with _exit (the master's atexit handlers and stdio buffers
 * are not the child's to run), which also skips LeakSanitizer's exit-time
 * check: a sanitizer build runs that check here, so the leak run
 * (tools/soak.py on build-asan) covers the worker and the front ends too.
 * A leak found makes the child exit with LSan's code (23) after its report. */
static _Noreturn void child_exit(int code)
{
#if defined(__SANITIZE_ADDRESS__)
    __lsan_do_leak_check();
#endif
    _exit(code);
}

/* In a child, first thing after fork: die with the master, keep only what
 * the role needs, restore signals. The death signal is set before the check
 * of the parent, so a master that dies in between is seen by one or the
 * other. Every child gets SIGKILL: with the master gone nobody restarts or
 * reaps them, a front end left on the port would answer /health 200 for an
 * instance that can no longer serve, and a worker told to stop would first
 * finish its step (seconds for a long prefill). The worker's own start
 * (sl_worker_main) sets the same signal again. */
static void child_setup(sl_master *m, int keep_listen, int death_signal)
{
    if (prctl(PR_SET_PDEATHSIG, death_signal) < 0 || getppid() != m->pid)
        _exit(SL_EXIT_FAILED);
    close(m->sig_fd);
    if (m->lock_fd >= 0)
        close(m->lock_fd);   /* the lock says "the master lives", no more */
    sl_admin_close_fds(m);
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++)
        if ((int)i != keep_listen && m->listen_fds[i] >= 0)
            close(m->listen_fds[i]);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGCHLD, SIG_DFL);
    /* A closed terminal sends SIGHUP to the whole process group: the master
     * takes it as a no-op, and a child must not die of it (ignored, the
     * disposition survives the worker's optional exec) */
    signal(SIGHUP, SIG_IGN);
}

static void start_worker(sl_master *m)
{
    pid_t pid = fork();
    if (pid < 0) {
        log_line("fork of the worker failed: %s", strerror(errno));
        m->worker.next_start_ns = now_ns() + BACKOFF_MAX_MS * 1000000ull;
        return;
    }
    if (pid == 0) {
        child_setup(m, -1, SIGKILL);
        if (sl_worker_exec_wanted()) {   /* debug: a worker that tools following exec can see */
            sl_worker_exec(&m->cfg, m->wake_fds, m->cfg.n_frontends);
            child_exit(SL_EXIT_FAILED);
        }
        child_exit(sl_worker_main(&m->cfg, m->wake_fds, m->cfg.n_frontends));
    }
    m->worker.pid = pid;
    m->worker.started_ns = now_ns();
}

static void start_frontend(sl_master *m, uint32_t slot)
{
    pid_t pid = fork();
    if (pid < 0) {
        log_line("fork of front end %u failed: %s", slot, strerror(errno));
        m->frontends[slot].next_start_ns = now_ns() + BACKOFF_MAX_MS * 1000000ull;
        return;
    }
    if (pid == 0) {
        child_setup(m, (int)slot, SIGKILL);
        for (uint32_t i = 0; i < m->cfg.n_frontends; i++)
            if (i != slot)
                close(m->wake_fds[i]);
        child_exit(sl_frontend_main(&m->cfg, slot, m->listen_fds[slot], m->wake_fds[slot]));
    }
    m->frontends[slot].pid = pid;
    m->frontends[slot].started_ns = now_ns();
}

static void schedule_restart(sl_child *c)
{
    uint64_t t = now_ns();
    if (t - c->started_ns > HEALTHY_RUN_NS || c->backoff_ms == 0)
        c->backoff_ms = BACKOFF_MIN_MS;
    else if ((c->backoff_ms *= 2) > BACKOFF_MAX_MS)
        c->backoff_ms = BACKOFF_MAX_MS;
    c->next_start_ns = t + (uint64_t)c->backoff_ms * 1000000ull;
    c->restarts++;
}

static void describe_exit(int status, char *buf, size_t cap)
{
    if (WIFEXITED(status))
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "stopped (status %d)", status);
}

/* Reaps every dead child, recovers its shared state, and plans its restart.
 * Returns SL_EXIT_CONFIG when a child reported bad config or model. */
static int reap(sl_master *m)
{
    int fatal = 0, status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        char how[96];
        describe_exit(status, how, sizeof how);
        bool config = WIFEXITED(status) && WEXITSTATUS(status) == SL_EXIT_CONFIG;
        if (pid == m->worker.pid) {
            m->worker.pid = 0;
            uint32_t failed = 0;
            sl_shm_recover_worker_death(m->shm, &failed);
            if (!m->draining)
                log_line("worker (pid %d) %s; %u running request(s) failed%s", pid, how, failed,
                         config ? "; not restarting (bad config or model)" : "; restarting");
            if (config)
                fatal = SL_EXIT_CONFIG;
            else if (!m->draining) {
                schedule_restart(&m->worker);
                sl_shm_counter_add(m->shm, SL_COUNTER_WORKER_RESTARTS, 1);
            }
            continue;
        }
        for (uint32_t i = 0; i < m->cfg.n_frontends; i++) {
            if (pid != m->frontends[i].pid)
                continue;
            m->frontends[i].pid = 0;
            uint32_t n = 0;
            sl_shm_recover_frontend_death(m->shm, i, &n);
            if (m->draining && WIFEXITED(status) && WEXITSTATUS(status) == 0)
                break;
            log_line("front end %u (pid %d) %s; %u mailbox(es) reclaimed%s", i, pid, how, n,
                     config ? "; not restarting (bad config or model)" : m->draining ? "" : "; restarting");
            if (config)
                fatal = SL_EXIT_CONFIG;
            else if (!m->draining) {
                schedule_restart(&m->frontends[i]);
                sl_shm_counter_add(m->shm, SL_COUNTER_FRONTEND_RESTARTS, 1);
            }
            break;
        }
    }
    return fatal;
}

/* Signals the worker. Under a wrapper (worker_exec.h) the process that owns
 * the GPU is the wrapper's child, known from the segment once it has
 * attached: SIGTERM goes to it alone (a sanitizer told to stop would quit
 * before its report; a worker that stops lets the tool report and exit),
 * and SIGKILL to it before the wrapper, so no wrapped worker outlives the
 * recovery that follows. */
static void signal_worker(sl_master *m, int sig)
{
    if (m->worker.pid <= 0)
        return;
    if (sl_worker_wrapped()) {
        sl_shm_worker_info info;
        sl_shm_worker_info_get(m->shm, &info);
        if (info.worker_pid > 0 && info.worker_pid != m->worker.pid && kill(info.worker_pid, sig) == 0 &&
            sig == SIGTERM)
            return;
    }
    kill(m->worker.pid, sig);
}

/* A READY worker whose current step outlived its bound by the heartbeat
 * timeout is wedged (a progressing slow step extends its own bound). */
static void check_worker_liveness(sl_master *m)
{
    if (m->worker.pid <= 0 || m->draining)
        return;
    sl_shm_worker_info info;
    sl_shm_worker_info_get(m->shm, &info);
    if (info.worker_state != SL_WORKER_STATE_READY)
        return;
    if (!sl_shm_worker_alive(m->shm, now_ns(), (uint64_t)m->cfg.heartbeat_timeout_ms * 1000000ull)) {
        log_line("worker (pid %d) stopped making progress (no heartbeat within its bound + %u ms); killing it",
                 m->worker.pid, m->cfg.heartbeat_timeout_ms);
        signal_worker(m, SIGKILL);
        signal_worker(m, SIGCONT);
    }
}

static void kill_all(sl_master *m, int sig)
{
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++)
        if (m->frontends[i].pid > 0)
            kill(m->frontends[i].pid, sig);
    signal_worker(m, sig);
}

static bool frontends_running(const sl_master *m)
{
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++)
        if (m->frontends[i].pid > 0)
            return true;
    return false;
}

/* ------------------------------------------------------------------------ */

static void begin_drain(sl_master *m)
{
    m->draining = true;
    m->drain_started_ns = now_ns();
    /* a paused worker would hold every in-flight request until the drain
     * timeout ends it with an error */
    if (sl_shm_paused(m->shm)) {
        log_line("draining: resuming the paused worker");
        sl_shm_set_paused(m->shm, 0);
    }
    log_line("draining: /ready turns 503 for %u s, then in-flight requests get %u s", m->cfg.drain_delay_s,
             m->cfg.drain_timeout_s);
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++) {
        if (m->frontends[i].pid > 0)
            kill(m->frontends[i].pid, SIGTERM);
        /* our copies would keep the sockets in the port's group after the
         * front ends close theirs */
        close(m->listen_fds[i]);
        m->listen_fds[i] = -1;
    }
}

static int setup(sl_master *m)
{
    for (uint32_t i = 0; i < SL_SHM_SLOTS_MAX; i++)
        m->listen_fds[i] = m->wake_fds[i] = -1;
    m->admin_fd = -1;
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++)
        m->admin_clients[i].fd = -1;
    m->pid = getpid();
    char err[SL_ERR_LEN];
    if (sl_instance_claim_port(m, err) < 0) {
        log_line("%s", err);
        return SL_EXIT_CONFIG;
    }
    bool port_0 = m->cfg.port == 0;
    if (open_listeners(m) < 0)
        return SL_EXIT_FAILED;
    /* the default admin socket is named after the port, known only now */
    if (port_0 && m->cfg.source[SL_CFG_ADMIN_SOCKET] == SL_CONFIG_SOURCE_DEFAULT)
        snprintf(m->cfg.admin_socket, sizeof m->cfg.admin_socket, "/tmp/sluice-%u.sock", m->cfg.port);
    sl_instance_name_segment(m);
    sl_instance_remove_stale_segments(m);
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++) {
        m->wake_fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (m->wake_fds[i] < 0) {
            log_line("eventfd: %s", strerror(errno));
            return SL_EXIT_FAILED;
        }
    }
    sl_shm_limits lim;
    sl_shm_limits_default(&lim);
    lim.n_slots = m->cfg.n_frontends;
    uint32_t ring = 2;
    while (ring < m->cfg.queue_depth && ring < 65536)
        ring <<= 1;
    lim.submit_ring_entries = ring;
    lim.submit_queue_depth = m->cfg.queue_depth;   /* exact: the ring is only rounded up to index it */
    /* Requests the server holds at once: queue_depth waiting per front end plus
     * what the worker takes in (max_seqs running + max_seqs waiting in its
     * scheduler, worker.c). Twice that, so mailboxes finished but not yet
     * released by their front end never make the pool, rather than the queue
     * depth, the limit (docs/OPERATIONS.md "Capacity and 429"). */
    uint64_t held = (uint64_t)m->cfg.n_frontends * m->cfg.queue_depth + 2ull * m->cfg.max_seqs;
    uint64_t mailboxes = 2 * held;
    lim.n_mailboxes = (uint32_t)(mailboxes < 1024 ? 1024 : mailboxes > 65535 ? 65535 : mailboxes);
    lim.prompt_tokens_max = m->n_ctx;
    lim.grammar_bytes_max = (uint32_t)m->cfg.grammar_bytes_max;
    m->shm = sl_shm_create(m->cfg.shm_name, &lim, err);
    if (!m->shm) {
        log_line("%s", err);
        return SL_EXIT_FAILED;
    }
    sl_shm_set_eventfds(m->shm, m->wake_fds, m->cfg.n_frontends);
    sl_status admin_rc = sl_admin_open(m, err);
    if (admin_rc < 0) {
        log_line("%s", err);
        return admin_rc == SL_EINVAL ? SL_EXIT_CONFIG : SL_EXIT_FAILED;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    m->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return m->sig_fd < 0 ? SL_EXIT_FAILED : SL_EXIT_OK;
}

static void teardown(sl_master *m)
{
    sl_admin_close(m);
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++) {
        if (m->listen_fds[i] >= 0)
            close(m->listen_fds[i]);
        if (m->wake_fds[i] >= 0)
            close(m->wake_fds[i]);
    }
    if (m->shm)
        sl_shm_destroy(m->shm);
    if (m->sig_fd >= 0)
        close(m->sig_fd);
    sl_instance_release(m);
}

int sl_master_run(const sl_config *cfg, int32_t n_ctx)
{
    static sl_master m;   /* large (fd tables); one per process */
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.n_ctx = n_ctx;
    m.sig_fd = -1;
    m.lock_fd = -1;
    int rc = setup(&m);
    if (rc != SL_EXIT_OK) {
        teardown(&m);
        return rc;
    }
    start_worker(&m);
    for (uint32_t i = 0; i < m.cfg.n_frontends; i++)
        start_frontend(&m, i);
    log_line("listening on http://%s:%u with %u front end(s); admin socket %s", m.cfg.host, m.cfg.port,
             m.cfg.n_frontends, m.cfg.admin_socket);

    int exit_code = SL_EXIT_OK;
    uint64_t worker_stop_sent = 0;
    for (;;) {
        struct pollfd pfd[1 + SL_ADMIN_POLLFDS] = {{.fd = m.sig_fd, .events = POLLIN}};
        uint32_t n_admin = sl_admin_poll_fill(&m, pfd + 1);
        poll(pfd, 1 + n_admin, 100);
        sl_admin_poll_handle(&m, pfd + 1, n_admin);   /* never blocks: clients wait in the loop */
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(m.sig_fd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGHUP)
                    log_line("SIGHUP: ignored (there is no reload; restart the server to change its config)");
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                    if (m.draining) {
                        log_line("second signal: stopping at once");
                        kill_all(&m, SIGKILL);
                    } else {
                        begin_drain(&m);
                    }
                }
            }
        }
        int fatal = reap(&m);
        if (fatal && !m.draining) {
            exit_code = fatal;
            begin_drain(&m);
            kill_all(&m, SIGTERM);
        }
        uint64_t t = now_ns();
        if (!m.draining) {
            check_worker_liveness(&m);
            if (m.worker.pid == 0 && t >= m.worker.next_start_ns)
                start_worker(&m);
            for (uint32_t i = 0; i < m.cfg.n_frontends; i++)
                if (m.frontends[i].pid == 0 && t >= m.frontends[i].next_start_ns)
                    start_frontend(&m, i);
            continue;
        }
        /* draining: front ends first, then the worker (it may still be
         * finishing their requests) */
        uint64_t deadline = m.drain_started_ns +
                            ((uint64_t)m.cfg.drain_delay_s + m.cfg.drain_timeout_s + 5) * 1000000000ull;
        if (frontends_running(&m)) {
            if (t > deadline)
                for (uint32_t i = 0; i < m.cfg.n_frontends; i++)
                    if (m.frontends[i].pid > 0)
                        kill(m.frontends[i].pid, SIGKILL);
            continue;
        }
        if (m.worker.pid > 0) {
            if (!worker_stop_sent) {
                signal_worker(&m, SIGTERM);
                worker_stop_sent = t;
            } else if (t - worker_stop_sent > (sl_worker_wrapped() ? WRAPPED_WORKER_STOP_GRACE_S
                                                                    : WORKER_STOP_GRACE_S) * 1000000000ull) {
                signal_worker(&m, SIGKILL);
            }
            continue;
        }
        break;
    }
    teardown(&m);
    log_line("stopped");
    return exit_code;
}
