/* master/config_groups.c: which --help group each `sluice serve` setting is
 * printed in, most used first within a group. It is a table of its own, kept
 * apart from config.c's settings table, so that adding a setting stays a
 * one-row change there plus one name here; tests/unit/master fails while a
 * setting is in no group or in two. Internal knobs (traces, switches only a
 * developer needs) go under Debugging. */
#include "master/config_groups.h"

const sl_config_group sl_config_groups[] = {
    {"Model", {"model", "model-alias", "accept-any-model", "ctx-size", "chat-template", "reasoning-format",
               NULL}},
    {"Server", {"host", "port", "api-key", "cors-origin", "webui", "frontends", "max-body", "idle-timeout-ms",
                "write-timeout-ms", "tokenize-threads", NULL}},
    {"Scheduler", {"device", "tensor-parallel", "threads", "max-seqs", "kv-memory", "gpu-memory-fraction", "kv-type",
                   "prefix-cache", "token-budget", "prefill-chunk", "batch-window-ms", NULL}},
    {"Limits", {"queue-depth", "max-prompt-tokens", "default-max-tokens", "max-response", "grammar-bytes-max",
                NULL}},
    {"Operations", {"log-format", "log-health", "metrics-names", "admin-socket", "admin-group", "drain-delay",
                    "drain-timeout", "heartbeat-timeout-ms", NULL}},
    {"Debugging", {"log-bodies", "ttft-trace", "staggered-prefill", NULL}},
};

const size_t sl_config_n_groups = sizeof sl_config_groups / sizeof sl_config_groups[0];
