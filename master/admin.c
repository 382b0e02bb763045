/* master/admin.c: answers the admin socket from the master's own state and
 * the shared segment (never from the worker directly, so it answers while
 * the worker is dead or restarting). One client at a time, each bounded by a
 * short read timeout so a silent client cannot hold the master. */
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

sl_status sl_admin_open(sl_master *m, char err[SL_ERR_LEN])
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(m->cfg.admin_socket) >= sizeof addr.sun_path) {
        snprintf(err, SL_ERR_LEN, "--admin-socket %.200s: path too long", m->cfg.admin_socket);
        return SL_EINVAL;
    }
    strcpy(addr.sun_path, m->cfg.admin_socket);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, SL_ERR_LEN, "admin socket: %s", strerror(errno));
        return SL_EIO;
    }
    /* a socket file left by a dead instance: refuse if someone still answers */
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        close(fd);
        snprintf(err, SL_ERR_LEN, "admin socket %.200s: another sluice instance is using it", m->cfg.admin_socket);
        return SL_EINVAL;
    }
    close(fd);
    unlink(m->cfg.admin_socket);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask(0177);   /* 0600: the socket reveals config and can steer the server */
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc < 0 || listen(fd, 16) < 0) {
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

void sl_admin_close(sl_master *m)
{
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
                                     "frontend_restarts"};
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

static void reply(int fd, const char *text)
{
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = send(fd, text + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 1000) <= 0)
                return;
            continue;
        }
        if (n <= 0)
            return;
        off += (size_t)n;
    }
}

void sl_admin_serve_one(sl_master *m)
{
    int fd = accept4(m->admin_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    char line[SL_ADMIN_LINE_MAX + 1];
    size_t n = 0;
    while (n < SL_ADMIN_LINE_MAX && !memchr(line, '\n', n)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            break;
        ssize_t r = recv(fd, line + n, SL_ADMIN_LINE_MAX - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    char *text = sl_admin_reply(m, line, n);
    if (text) {
        reply(fd, text);
        free(text);
    }
    close(fd);
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
