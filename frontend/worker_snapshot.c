/* frontend/worker_snapshot.c: the worker's effective-config snapshot as the
 * front end reads it from the segment (GET /v1/effective-config and the
 * gauges of GET /metrics). See server_internal.h. */
#include <jansson.h>

#include "frontend/server_internal.h"

json_t *sl_fe_worker_snapshot(const sl_fe *fe)
{
    static char buf[SL_SHM_CONFIG_MAX + 1];
    size_t len = 0;
    if (sl_shm_config_read(fe->shm, buf, sizeof buf, &len) != SL_OK)
        return NULL;
    return json_loadb(buf, len, 0, NULL);
}
