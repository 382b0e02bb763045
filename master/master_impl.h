/* master/master_impl.h: the master's state, shared by its files (master.c
 * supervises, admin.c answers the admin socket). Private to master/. */
#ifndef SL_MASTER_IMPL_H
#define SL_MASTER_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/config.h"
#include "shared/shm.h"

typedef struct {
    pid_t pid;                  /* 0 = not running */
    uint64_t started_ns;
    uint64_t next_start_ns;     /* earliest restart (backoff) */
    uint32_t backoff_ms;
    uint32_t restarts;
} sl_child;

#define SL_ADMIN_LINE_MAX 256     /* the admin protocol's command line (admin.h) */
#define SL_ADMIN_CLIENTS_MAX 8    /* admin clients served at once; a ninth evicts the oldest reader */

/* One admin connection, served from the master's poll loop (admin.c). */
typedef struct {
    int fd;                            /* -1 = free */
    uint64_t deadline_ns;              /* to send the line, then to take the answer */
    uint32_t line_len;                 /* bytes of the command line read so far */
    char line[SL_ADMIN_LINE_MAX];
    char *out;                         /* the answer while it is sent (malloc'd); NULL while reading */
    size_t out_len, out_sent;
} sl_admin_client;

typedef struct {
    sl_config cfg;
    int32_t n_ctx;
    sl_shm_t *shm;
    int listen_fds[SL_SHM_SLOTS_MAX];   /* per slot; kept for respawns until the drain */
    int wake_fds[SL_SHM_SLOTS_MAX];     /* per slot eventfd, written by the worker */
    int sig_fd;
    int admin_fd;
    sl_admin_client admin_clients[SL_ADMIN_CLIENTS_MAX];
    int lock_fd;                        /* the port's flock (instance.h); -1 = none */
    pid_t pid;                          /* the master's, for the children's check at birth */
    sl_child worker;
    sl_child frontends[SL_SHM_SLOTS_MAX];
    bool draining;
    uint64_t drain_started_ns;
} sl_master;

#endif
