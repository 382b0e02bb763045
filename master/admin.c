/* master/admin.c: answers the admin socket from the master's own state and
 * the shared segment (never from the worker directly, so it answers while
 * the worker is dead or restarting). Served from the master's poll loop,
 * never inline: every socket is non-blocking, each client has a deadline to
 * send its line and one to take the answer, and at most
 * SL_ADMIN_CLIENTS_MAX are held. The trade-off: an answer is built in one go
 * (a few KiB of JSON) and only its sending is spread over the loop. */
#include <errno.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "master/admin.h"
#include "master/config.h"

/* What is at the admin path decides whether we may take it (admin.h). */
static sl_status admin_path_free(const char *path, const struct sockaddr_un *addr, char err[SL_ERR_LEN])
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return SL_OK;
        snprintf(err, SL_ERR_LEN, "--admin-socket %.200s: lstat: %s", path, strerror(errno));
        return SL_EIO;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, SL_ERR_LEN, "--admin-socket %.160s exists and is not a socket (%s); refusing to replace it",
                 path, S_ISREG(st.st_mode) ? "a regular file" : S_ISDIR(st.st_mode) ? "a directory"
                                         : S_ISLNK(st.st_mode) ? "a symlink" : "not a file we made");
        return SL_EINVAL;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, SL_ERR_LEN, "admin socket: %s", strerror(errno));
        return SL_EIO;
    }
    /* Only a refused connection proves nobody listens: EAGAIN is a live
     * listener with a full backlog, EACCES one we may not judge. */
    int rc = connect(fd, (const struct sockaddr *)addr, sizeof *addr), why = errno;
    close(fd);
    if (rc == 0) {
        snprintf(err, SL_ERR_LEN, "admin socket %.200s: in use by another sluice instance", path);
        return SL_EINVAL;
    }
    if (why != ECONNREFUSED) {
        snprintf(err, SL_ERR_LEN, "admin socket %.140s: may be in use (connect: %.40s); refusing to replace it", path,
                 strerror(why));
        return SL_EINVAL;
    }
    if (unlink(path) < 0 && errno != ENOENT) {   /* a dead instance's socket */
        snprintf(err, SL_ERR_LEN, "admin socket %.200s: unlink: %s", path, strerror(errno));
        return SL_EIO;
    }
    return SL_OK;
}

sl_status sl_admin_open(sl_master *m, char err[SL_ERR_LEN])
{
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++)
        m->admin_clients[i].fd = -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(m->cfg.admin_socket) >= sizeof addr.sun_path) {
        snprintf(err, SL_ERR_LEN, "--admin-socket %.200s: path too long", m->cfg.admin_socket);
        return SL_EINVAL;
    }
    strcpy(addr.sun_path, m->cfg.admin_socket);
    sl_status free_rc = admin_path_free(m->cfg.admin_socket, &addr, err);
    if (free_rc < 0)
        return free_rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask(0177);   /* 0600: the socket reveals config and can steer the server */
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc < 0 || listen(fd, 64) < 0) {
        snprintf(err, SL_ERR_LEN, "admin socket %.200s: %s", m->cfg.admin_socket, strerror(errno));
        if (fd >= 0)
            close(fd);
        return SL_EIO;
    }
    if (m->cfg.admin_group[0] != '\0') {
        /* Widened only after bind, so the socket is never more open than asked. */
        errno = 0;
        struct group *gr = getgrnam(m->cfg.admin_group);
        const char *why = NULL;
        if (gr == NULL)
            why = errno ? strerror(errno) : "no such group";
        else if (chown(m->cfg.admin_socket, (uid_t)-1, gr->gr_gid) < 0 || chmod(m->cfg.admin_socket, 0660) < 0)
            why = strerror(errno);
        if (why != NULL) {
            snprintf(err, SL_ERR_LEN, "--admin-group %.64s for %.150s: %s", m->cfg.admin_group,
                     m->cfg.admin_socket, why);
            close(fd);
            unlink(m->cfg.admin_socket);
            return SL_EINVAL;
        }
    }
    m->admin_fd = fd;
    return SL_OK;
}

static void client_close(sl_admin_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    *c = (sl_admin_client){.fd = -1};
}

void sl_admin_close_fds(sl_master *m)
{
    if (m->admin_fd >= 0)
        close(m->admin_fd);
    m->admin_fd = -1;
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++)
        if (m->admin_clients[i].fd >= 0) {
            close(m->admin_clients[i].fd);
            m->admin_clients[i].fd = -1;
        }
}

void sl_admin_close(sl_master *m)
{
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++)
        if (m->admin_clients[i].fd >= 0)
            client_close(&m->admin_clients[i]);
    if (m->admin_fd >= 0) {
        close(m->admin_fd);
        unlink(m->cfg.admin_socket);
        m->admin_fd = -1;
    }
}

static const char *worker_state_name(sl_worker_state s)
{
    switch (s) {
    case SL_WORKER_STATE_STARTING: return "starting";
    case SL_WORKER_STATE_LOADING: return "loading";
    case SL_WORKER_STATE_READY: return "ready";
    case SL_WORKER_STATE_DEAD: return "dead";
    }
    return "?";
}

static json_t *worker_json(sl_master *m)
{
    sl_shm_worker_info info;
    sl_shm_worker_info_get(m->shm, &info);
    uint64_t slack = (uint64_t)m->cfg.heartbeat_timeout_ms * 1000000ull;
    return json_pack("{s:i, s:s, s:I, s:I, s:b, s:i}", "pid", (int)m->worker.pid, "state",
                     worker_state_name(info.worker_state), "generation", (json_int_t)info.worker_generation,
                     "steps", (json_int_t)info.step, "alive", sl_shm_worker_alive(m->shm, sl_shm_now_ns(), slack),
                     "restarts", (int)m->worker.restarts);
}

static json_t *master_json(sl_master *m)
{
    json_t *pids = json_array();
    uint32_t restarts = 0;
    for (uint32_t i = 0; i < m->cfg.n_frontends; i++) {
        json_array_append_new(pids, json_integer(m->frontends[i].pid));
        restarts += m->frontends[i].restarts;
    }
    return json_pack("{s:i, s:i, s:o, s:i, s:o, s:b, s:b, s:s}", "pid", (int)getpid(), "frontends",
                     (int)m->cfg.n_frontends, "frontend_pids", pids, "frontend_restarts", (int)restarts, "worker",
                     worker_json(m), "draining", m->draining, "paused", sl_shm_paused(m->shm), "shm",
                     m->cfg.shm_name);
}

static json_t *config_json(sl_master *m)
{
    json_t *o = json_object();
    for (int k = 0; k < SL_CFG_COUNT; k++) {
        char v[SL_CONFIG_PATH_MAX];
        sl_config_value_text(&m->cfg, (sl_config_key)k, v, sizeof v);
        json_object_set_new(o, sl_config_key_name((sl_config_key)k),
                            json_pack("{s:s, s:s}", "value", v, "source",
                                      sl_config_source_name((sl_config_source)m->cfg.source[k])));
    }
    return o;
}

static json_t *snapshot_json(sl_master *m)
{
    static char buf[SL_SHM_CONFIG_MAX + 1];
    size_t len;
    if (sl_shm_config_read(m->shm, buf, sizeof buf, &len) != SL_OK)
        return json_null();
    json_t *o = json_loadb(buf, len, 0, NULL);
    return o ? o : json_null();
}

static json_t *stats_json(sl_master *m)
{
    static const char *counters[] = {"requests_submitted", "requests_rejected_full", "requests_finished",
                                     "requests_failed", "requests_cancelled", "tokens_generated",
                                     "prompt_tokens", "stale_entries_skipped", "worker_restarts",
                                     "frontend_restarts", "prefix_cache_query_tokens",
                                     "prefix_cache_hit_tokens", "grammar_requests", "grammar_mask_ns",
                                     "success_stop", "success_length", "success_tool_calls",
                                     "success_abort"};
    _Static_assert(sizeof counters / sizeof counters[0] == SL_COUNTER_COUNT, "a name per counter");
    static const char *states[] = {"free", "claimed", "submitted", "running", "finished", "failed", "cancelled"};
    json_t *c = json_object(), *mb = json_object();
    for (int i = 0; i < SL_COUNTER_COUNT; i++)
        json_object_set_new(c, counters[i], json_integer((json_int_t)sl_shm_counter_get(m->shm, (sl_counter)i)));
    sl_shm_census_info census;
    sl_shm_census(m->shm, &census);
    for (int i = 0; i < 7; i++)
        json_object_set_new(mb, states[i], json_integer(census.mailboxes[i]));
    return json_pack("{s:o, s:o, s:i, s:i, s:b}", "counters", c, "mailboxes", mb, "orphans", (int)census.orphans,
                     "prompt_blocks_free", (int)census.blocks_free, "paused", sl_shm_paused(m->shm));
}

char *sl_admin_answer(sl_master *m, const char *cmd)
{
    json_t *o = NULL;
    if (!strcmp(cmd, "effective-config"))
        o = json_pack("{s:o, s:o, s:o}", "master", master_json(m), "config", config_json(m), "worker",
                      snapshot_json(m));
    else if (!strcmp(cmd, "stats"))
        o = stats_json(m);
    else if (!strcmp(cmd, "pause") || !strcmp(cmd, "resume")) {
        /* The worker sees the flag at its next step boundary (a step already
         * running finishes); its snapshot's "paused" says when it has. */
        int on = cmd[0] == 'p';
        if (sl_shm_paused(m->shm) != on)
            fprintf(stderr, "sluice: admin: %s\n", on ? "paused: the worker runs no step until resume"
                                                       : "resumed");
        sl_shm_set_paused(m->shm, on);
        o = json_pack("{s:b}", "paused", on);
    } else if (!strcmp(cmd, "health"))
        o = json_pack("{s:s, s:o}", "status", m->draining ? "draining" : "ok", "worker", worker_json(m));
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

/* ------------------------------------------------------------------------ */
/* serving from the poll loop                                                */

#define DEADLINE_NS ((uint64_t)SL_ADMIN_DEADLINE_MS * 1000000ull)
#define ACCEPTS_PER_TURN 64   /* a flood of connections yields to supervision between turns */

static const char late_text[] = "{\"error\": \"no command line within the admin deadline\"}\n";

/* Sends what the socket takes now; closes the client when all is sent or the
 * peer is gone. */
static void client_write(sl_admin_client *c)
{
    while (c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;   /* POLLOUT brings us back */
        if (n <= 0)
            break;
        c->out_sent += (size_t)n;
    }
    client_close(c);
}

static void client_answer(sl_master *m, sl_admin_client *c, uint64_t now)
{
    c->out = sl_admin_reply(m, c->line, c->line_len);
    if (c->out == NULL) {
        client_close(c);
        return;
    }
    c->out_len = strlen(c->out);
    c->out_sent = 0;
    c->deadline_ns = now + DEADLINE_NS;
    client_write(c);
}

/* Reads what has arrived; a line ends at LF, at SL_ADMIN_LINE_MAX bytes or
 * at the client's EOF (a client that shut down its writing side). */
static void client_read(sl_master *m, sl_admin_client *c, uint64_t now)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->line + c->line_len, SL_ADMIN_LINE_MAX - c->line_len, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r < 0) {
            client_close(c);
            return;
        }
        int ended = r == 0 || memchr(c->line + c->line_len, '\n', (size_t)r) != NULL;
        c->line_len += (uint32_t)r;
        if (ended || c->line_len == SL_ADMIN_LINE_MAX) {
            client_answer(m, c, now);
            return;
        }
    }
}

/* A free client slot, or the reader with the oldest deadline closed to make
 * one; NULL when every slot is sending an answer. */
static sl_admin_client *client_slot(sl_master *m)
{
    sl_admin_client *oldest = NULL;
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++) {
        sl_admin_client *c = &m->admin_clients[i];
        if (c->fd < 0)
            return c;
        if (c->out == NULL && (oldest == NULL || c->deadline_ns < oldest->deadline_ns))
            oldest = c;
    }
    if (oldest != NULL)
        client_close(oldest);
    return oldest;
}

uint32_t sl_admin_poll_fill(sl_master *m, struct pollfd *pfd)
{
    uint32_t n = 0;
    if (m->admin_fd >= 0)
        pfd[n++] = (struct pollfd){.fd = m->admin_fd, .events = POLLIN};
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++) {
        const sl_admin_client *c = &m->admin_clients[i];
        if (c->fd >= 0)
            pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
    }
    return n;
}

void sl_admin_poll_handle(sl_master *m, const struct pollfd *pfd, uint32_t n)
{
    uint64_t now = sl_shm_now_ns();
    int accept_ready = 0;
    /* Clients first, by fd: nothing here opens a descriptor, so no number in
     * pfd can come to mean a new client before the accepts below. */
    for (uint32_t k = 0; k < n; k++) {
        if (pfd[k].fd == m->admin_fd) {
            accept_ready = (pfd[k].revents & POLLIN) != 0;
            continue;
        }
        if (pfd[k].revents == 0)
            continue;
        for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++) {
            sl_admin_client *c = &m->admin_clients[i];
            if (c->fd != pfd[k].fd)
                continue;
            if (c->out)
                client_write(c);
            else
                client_read(m, c, now);
            break;
        }
    }
    for (uint32_t i = 0; i < SL_ADMIN_CLIENTS_MAX; i++) {
        sl_admin_client *c = &m->admin_clients[i];
        if (c->fd < 0 || now < c->deadline_ns)
            continue;
        if (c->out == NULL)   /* best effort: one try, the socket is non-blocking */
            (void)!send(c->fd, late_text, sizeof late_text - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        client_close(c);
    }
    for (int k = 0; accept_ready && k < ACCEPTS_PER_TURN; k++) {
        int fd = accept4(m->admin_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        sl_admin_client *c = client_slot(m);
        if (c == NULL) {
            close(fd);
            continue;
        }
        *c = (sl_admin_client){.fd = fd, .deadline_ns = now + DEADLINE_NS};
        client_read(m, c, now);   /* its line is often there already */
    }
}

char *sl_admin_reply(sl_master *m, const char *buf, size_t n)
{
    char line[SL_ADMIN_LINE_MAX + 1];
    if (n > SL_ADMIN_LINE_MAX)
        n = SL_ADMIN_LINE_MAX;
    memcpy(line, buf, n);
    line[n] = 0;
    line[strcspn(line, "\r\n")] = 0;  /* a NUL inside the line ends the command too */
    char *answer = sl_admin_answer(m, line);
    if (answer == NULL)
        return strdup("{\"error\": \"unknown command (effective-config, stats, health, pause, resume)\"}\n");
    size_t len = strlen(answer);
    char *text = realloc(answer, len + 2);
    if (text == NULL) {
        free(answer);
        return NULL;
    }
    memcpy(text + len, "\n", 2);
    return text;
}
