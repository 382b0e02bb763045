/* tests/fuzz/fuzz_admin.c: libFuzzer target `admin`: the master's admin
 * socket protocol (master/admin.c) without a socket or processes: a
 * sl_master holds a parsed default configuration and a populated segment
 * (fz_shm_populated), and sl_admin_reply gets the bytes a client sent.
 * Input: byte 0 is the length L of what the client sent (the line, any
 * bytes, cut at SL_ADMIN_LINE_MAX as the socket reader does); the bytes
 * after those L are published as the worker's effective-config snapshot
 * (the admin parses that text as JSON), and the input's length parity
 * sets the draining flag.
 * Checks beyond "no crash": every reply is one JSON document and a newline. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/admin.h"
#include "master/config.h"
#include "shared/shm_impl.h"
#include "tests/fuzz/fuzz_common.h"

static sl_master m;
static uint8_t *pristine;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[SL_ERR_LEN];
    char *args[] = {"serve", "--model", (char *)fz_default_model_path(), NULL};
    if (sl_config_parse(3, args, &m.cfg, err) != SL_OK) {
        fprintf(stderr, "fuzz_admin: config: %s\n", err);
        abort();
    }
    sl_shm_ticket tickets[FZ_SHM_TICKETS];
    m.shm = fz_shm_populated("admin", tickets);
    snprintf(m.cfg.shm_name, sizeof m.cfg.shm_name, "%s", m.shm->name);
    m.admin_fd = -1;
    m.sig_fd = -1;
    m.worker.pid = 4242;
    for (uint32_t i = 0; i < m.cfg.n_frontends && i < SL_SHM_SLOTS_MAX; i++)
        m.frontends[i].pid = 5000 + (pid_t)i;
    pristine = malloc(m.shm->size);
    if (pristine == NULL)
        abort();
    memcpy(pristine, m.shm->hdr, m.shm->size);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    memcpy(m.shm->hdr, pristine, m.shm->size);
    size_t line_len = data[0];
    if (line_len > size - 1)
        line_len = size - 1;
    const char *line = (const char *)data + 1;
    const char *snap = line + line_len;
    size_t snap_len = size - 1 - line_len;
    if (snap_len > 0 && snap_len <= SL_SHM_CONFIG_MAX)
        sl_shm_config_publish(m.shm, snap, snap_len);
    m.draining = size & 1;
    char *reply = sl_admin_reply(&m, line, line_len);
    if (reply == NULL)
        abort();
    size_t n = strlen(reply);
    if (n == 0 || reply[n - 1] != '\n')
        abort();
    json_error_t je;
    json_t *j = json_loadb(reply, n, 0, &je);
    if (j == NULL) {
        fprintf(stderr, "fuzz_admin: reply is not JSON (%s): %.200s\n", je.text, reply);
        abort();
    }
    json_decref(j);
    free(reply);
    return 0;
}
