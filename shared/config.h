/* shared/config.h: the effective configuration of one `sluice serve`
 * instance, as every process of it sees it.
 * Where:  the master parses flags, environment and an optional file into one
 *         sl_config (master/config.c) and forks; each child inherits it by
 *         fork, so no serialisation is needed and a respawned child gets the
 *         same values. The worker publishes its own view (what it actually
 *         uses) into the segment for effective-config.
 * Layout: fixed-size fields only, no pointers: the struct is copied freely. */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SL_CONFIG_PATH_MAX 1024
#define SL_CONFIG_KEY_MAX 256
#define SL_CONFIG_LIST_MAX 512   /* a list setting's text: items joined by ',' */

/* Where a value came from; reported for each value by effective-config. */
typedef enum {
    SL_CONFIG_SOURCE_DEFAULT = 0,
    SL_CONFIG_SOURCE_FILE = 1,       /* --config FILE */
    SL_CONFIG_SOURCE_ENV = 2,        /* SLUICE_* variable */
    SL_CONFIG_SOURCE_SEED_ALIAS = 3, /* aprender-serve's variable for it (CUDA_MAX_BATCH, ...) */
    SL_CONFIG_SOURCE_FLAG = 4,       /* command-line flag */
} sl_config_source;

/* One entry per setting; the index of each field's source in sl_config.source. */
typedef enum {
    SL_CFG_MODEL, SL_CFG_HOST, SL_CFG_PORT, SL_CFG_FRONTENDS, SL_CFG_API_KEY, SL_CFG_ADMIN_SOCKET,
    SL_CFG_DEVICE, SL_CFG_THREADS, SL_CFG_KV_MEMORY, SL_CFG_CTX_SIZE, SL_CFG_MAX_SEQS,
    SL_CFG_TOKEN_BUDGET, SL_CFG_PREFILL_CHUNK, SL_CFG_BATCH_WINDOW_MS, SL_CFG_STAGGERED_PREFILL,
    SL_CFG_TTFT_TRACE, SL_CFG_QUEUE_DEPTH, SL_CFG_MAX_BODY, SL_CFG_MAX_PROMPT_TOKENS,
    SL_CFG_DEFAULT_MAX_TOKENS, SL_CFG_IDLE_TIMEOUT_MS, SL_CFG_WRITE_TIMEOUT_MS, SL_CFG_DRAIN_DELAY_S,
    SL_CFG_DRAIN_TIMEOUT_S, SL_CFG_CHAT_TEMPLATE, SL_CFG_MODEL_ALIAS, SL_CFG_LOG_BODIES,
    SL_CFG_HEARTBEAT_TIMEOUT_MS, SL_CFG_ADMIN_GROUP, SL_CFG_MAX_RESPONSE, SL_CFG_LOG_FORMAT,
    SL_CFG_LOG_HEALTH, SL_CFG_TOKENIZE_THREADS, SL_CFG_PREFIX_CACHE, SL_CFG_GRAMMAR_BYTES_MAX,
    SL_CFG_REASONING_FORMAT, SL_CFG_KV_TYPE, SL_CFG_GPU_MEMORY_FRACTION, SL_CFG_WEBUI, SL_CFG_ACCEPT_ANY_MODEL,
    SL_CFG_CORS_ORIGIN, SL_CFG_METRICS_NAMES, SL_CFG_TENSOR_PARALLEL, SL_CFG_COUNT
} sl_config_key;

typedef struct {
    char model[SL_CONFIG_PATH_MAX];         /* GGUF file */
    char model_alias[SL_CONFIG_LIST_MAX];   /* names the API accepts, a comma list (sl_config_list_next); the
                                               first is the one it reports; `sluice serve`: the file's
                                               general.name when none is given, else its base name */
    uint32_t accept_any_model;              /* 1 = a request's `model` may name anything (the served model answers) */
    char cors_origin[SL_CONFIG_LIST_MAX];   /* browser origins allowed (CORS), a comma list; "*" = any; "" = no CORS */
    char host[64];                          /* listen address */
    uint32_t port;                          /* listen port (0 = any, tests) */
    uint32_t n_frontends;                   /* front-end processes */
    char api_key[SL_CONFIG_KEY_MAX];        /* bearer key; empty = no auth */
    char admin_socket[SL_CONFIG_PATH_MAX];  /* Unix socket path of the master's admin interface */
    char admin_group[64];                   /* group given access to the socket (0660); empty = 0600 */
    char device[16];                        /* auto | cpu | cuda */
    uint32_t threads;                       /* CPU compute threads of the worker */
    uint32_t tensor_parallel;               /* devices each layer is split over (model/tp_plan.h); 1 = one */
    uint64_t kv_memory;                     /* bytes for the KV cache; 0 = sized per backend (docs/OPERATIONS.md) */
    char kv_type[8];                        /* how K/V are stored: auto | f32 | f16 | q8_0 (sl_kv_type_name) */
    double gpu_memory_fraction;             /* CUDA: share of the device's memory for weights, scratch and KV, (0, 1] */
    uint32_t ctx_size;                      /* longest sequence (prompt + output); 0 = the model's */
    uint32_t max_seqs;                      /* live sequences at most (seed: CUDA_MAX_BATCH) */
    uint32_t token_budget;                  /* tokens per scheduler step (decode + prefill chunks) */
    uint32_t prefill_chunk;                 /* prefill tokens of one sequence per step at most */
    uint32_t batch_window_ms;               /* 0 = adaptive (seed: CUDA_BATCH_WINDOW_MS) */
    uint32_t staggered_prefill;             /* 1 = one new prefill per step (seed: STAGGERED_PREFILL) */
    uint32_t ttft_trace;                    /* 1 = per-stage TTFT lines on the worker's stderr (seed: TTFT_TRACE) */
    uint32_t queue_depth;                   /* requests waiting per front end before 429 */
    uint64_t max_body;                      /* request body bytes at most */
    uint32_t max_prompt_tokens;             /* prompt tokens at most; 0 = the context */
    uint32_t default_max_tokens;            /* when a request gives none; 0 = up to the context */
    uint32_t idle_timeout_ms;               /* header/body/keep-alive idle limit */
    uint32_t write_timeout_ms;              /* a stream that cannot write for this long is dropped */
    uint32_t drain_delay_s;                 /* SIGTERM: /ready is 503 this long before listeners close */
    uint32_t drain_timeout_s;               /* then in-flight requests get this long to finish */
    char chat_template[SL_CONFIG_PATH_MAX]; /* file or built-in name overriding the model's template */
    uint32_t log_bodies;                    /* 1 = log request bodies (off: bodies may hold secrets) */
    uint32_t heartbeat_timeout_ms;          /* a worker whose step outlives its bound by this is wedged */
    uint64_t max_response;                  /* response body bytes at most; 0 = 64 MiB */
    char log_format[8];                     /* access log: "text" (logfmt) or "json"; "" = text */
    uint32_t log_health;                    /* 1 = log /health and /ready requests too */
    uint32_t tokenize_threads;              /* per front end: render/tokenize threads for large bodies; 0 = on the loop */
    uint32_t prefix_cache;                  /* 1 = reuse the KV of cached prompt prefixes (worker's prefix cache) */
    uint64_t grammar_bytes_max;             /* longest grammar text a request may carry (shm slice); 0 = no grammars */
    char reasoning_format[12];              /* <think> text: "separate" (reasoning_content) or "inline"; "" = separate */
    uint32_t webui;                         /* 1 = the chat page at / (frontend/webui.c); 0 = / is a 404 */
    char metrics_names[8];                  /* /metrics series names: "sluice" or "vllm" (vLLM's, for its dashboards) */
    char shm_name[64];                      /* the segment's name, derived from the pid */
    uint8_t source[SL_CFG_COUNT];           /* sl_config_source of each field */
} sl_config;

/* Walks a list setting (model_alias, cors_origin: items joined by ',', each
 * non-empty and without surrounding blanks, as master/config.c stores them).
 * *pos starts at 0; each call returns the next item's start and sets *len,
 * or returns NULL after the last. */
static inline const char *sl_config_list_next(const char *list, size_t *pos, size_t *len)
{
    if (list[*pos] == '\0')
        return NULL;
    const char *item = list + *pos;
    *len = strcspn(item, ",");
    *pos += *len + (item[*len] == ',' ? 1 : 0);
    return item;
}

#endif
