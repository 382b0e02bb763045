/* master/config.c: one table describes every `sluice serve` setting (flag,
 * variable, seed alias, type, range, default, help); parsing, --help and
 * effective-config all read it, so they cannot drift apart. --help prints
 * them in the groups of config_groups.c (a table of its own, so a new row
 * here needs one line there; sl_config_groups_check and its unit test say
 * when it is missing). */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu-worker/worker.h"
#include "kernels/backend.h"
#include "master/config.h"
#include "master/config_groups.h"
#include "model/tp_plan.h"

/* T_FRACTION: a double in (0, 1]. T_LIST: a string of comma-separated
 * items; a repeated flag (or file line) adds its items to the list, while a
 * value from a higher-precedence source replaces the list. */
typedef enum { T_STR, T_U32, T_BYTES, T_BOOL, T_FRACTION, T_LIST } vtype;

typedef struct {
    sl_config_key key;
    const char *flag;       /* long flag without "--"; also the config-file key */
    char short_flag;        /* 0 = none */
    const char *env;        /* SLUICE_* */
    const char *seed;       /* the seed's variable name, or NULL */
    vtype type;
    size_t offset, size;    /* field in sl_config */
    uint64_t lo, hi;        /* range for numbers */
    const char *def;        /* default as text ("" = empty / computed) */
    const char *help;
} setting;

#define F(field) offsetof(sl_config, field), sizeof(((sl_config *)0)->field)

static const setting settings[] = {
    {SL_CFG_MODEL, "model", 'm', "SLUICE_MODEL", NULL, T_STR, F(model), 0, 0, "",
     "GGUF model file (default: the project's default model)"},
    {SL_CFG_MODEL_ALIAS, "model-alias", 0, "SLUICE_MODEL_ALIAS", NULL, T_LIST, F(model_alias), 0, 0, "",
     "a name requests may give as `model`; repeatable or a comma list; the first is the name responses "
     "report (default: the model's general.name)"},
    {SL_CFG_ACCEPT_ANY_MODEL, "accept-any-model", 0, "SLUICE_ACCEPT_ANY_MODEL", NULL, T_BOOL, F(accept_any_model),
     0, 1, "0", "accept any `model` name in requests (a client with a wrong name then silently gets this model)"},
    {SL_CFG_HOST, "host", 0, "SLUICE_HOST", NULL, T_STR, F(host), 0, 0, "127.0.0.1", "address to listen on"},
    {SL_CFG_PORT, "port", 'p', "SLUICE_PORT", NULL, T_U32, F(port), 0, 65535, "8080", "TCP port (0 = any free port)"},
    {SL_CFG_FRONTENDS, "frontends", 0, "SLUICE_FRONTENDS", NULL, T_U32, F(n_frontends), 1, 256, "",
     "HTTP front-end processes (default: number of cores)"},
    {SL_CFG_API_KEY, "api-key", 0, "SLUICE_API_KEY", NULL, T_STR, F(api_key), 0, 0, "",
     "require 'Authorization: Bearer KEY' (health and ready exempt)"},
    {SL_CFG_CORS_ORIGIN, "cors-origin", 0, "SLUICE_CORS_ORIGIN", NULL, T_LIST, F(cors_origin), 0, 0, "",
     "a browser origin (http[s]://host[:port], or * for any) allowed to call the API; repeatable or a comma list "
     "(default: none, no CORS headers)"},
    {SL_CFG_ADMIN_SOCKET, "admin-socket", 0, "SLUICE_ADMIN_SOCKET", NULL, T_STR, F(admin_socket), 0, 0, "",
     "admin Unix socket path (default: /tmp/sluice-PORT.sock), mode 0600"},
    {SL_CFG_ADMIN_GROUP, "admin-group", 0, "SLUICE_ADMIN_GROUP", NULL, T_STR, F(admin_group), 0, 0, "",
     "group that may also use the admin socket (mode 0660 instead of 0600)"},
    {SL_CFG_DEVICE, "device", 0, "SLUICE_DEVICE", NULL, T_STR, F(device), 0, 0, "auto", "auto | cpu | cuda"},
    {SL_CFG_THREADS, "threads", 't', "SLUICE_THREADS", NULL, T_U32, F(threads), 1, 1024, "",
     "worker compute threads on the CPU backend (default: the CPUs the affinity mask and cgroup quota allow)"},
    {SL_CFG_TENSOR_PARALLEL, "tensor-parallel", 0, "SLUICE_TENSOR_PARALLEL", NULL, T_U32, F(tensor_parallel), 1,
     SL_TP_MAX_SHARDS, "1",
     "devices each layer is split over, Megatron-style (docs/TENSOR_PARALLEL.md); over 1 is checked against the "
     "model, then refused: this build drives one device"},
    {SL_CFG_KV_MEMORY, "kv-memory", 0, "SLUICE_KV_MEMORY", NULL, T_BYTES, F(kv_memory), 0, UINT64_MAX, "0",
     "KV-cache bytes, suffix K/M/G allowed (0 = sized per backend: the CPU takes what max-seqs sequences "
     "of the full context need, at most half the memory available; CUDA --gpu-memory-fraction of the device)"},
    {SL_CFG_KV_TYPE, "kv-type", 0, "SLUICE_KV_TYPE", NULL, T_STR, F(kv_type), 0, 0, "auto",
     "how the KV cache stores K and V: auto (the backend's default), f32, f16, q8_0"},
    {SL_CFG_GPU_MEMORY_FRACTION, "gpu-memory-fraction", 0, "SLUICE_GPU_MEMORY_FRACTION", NULL, T_FRACTION,
     F(gpu_memory_fraction), 0, 0, "0.90",
     "CUDA: share of the device's memory that weights, scratch and the KV cache may take, in (0, 1]"},
    {SL_CFG_CTX_SIZE, "ctx-size", 'c', "SLUICE_CTX_SIZE", NULL, T_U32, F(ctx_size), 0, 1u << 24, "0",
     "longest sequence, prompt + output (0 = the model's context)"},
    {SL_CFG_MAX_SEQS, "max-seqs", 0, "SLUICE_MAX_SEQS", "CUDA_MAX_BATCH", T_U32, F(max_seqs), 1, 4096, "256",
     "live sequences at most (unset: what the KV cache holds at 1024 tokens each, 16 up to the default)"},
    {SL_CFG_TOKEN_BUDGET, "token-budget", 0, "SLUICE_TOKEN_BUDGET", NULL, T_U32, F(token_budget), 1, 65536, "256",
     "new tokens per scheduler step (decodes + prefill chunks)"},
    {SL_CFG_PREFILL_CHUNK, "prefill-chunk", 0, "SLUICE_PREFILL_CHUNK", NULL, T_U32, F(prefill_chunk), 1, 65536,
     "256", "prompt tokens of one sequence per step at most"},
    {SL_CFG_BATCH_WINDOW_MS, "batch-window-ms", 0, "SLUICE_BATCH_WINDOW_MS", "CUDA_BATCH_WINDOW_MS", T_U32,
     F(batch_window_ms), 0, 10000, "0", "wait for stragglers up to this long (0 = adaptive)"},
    {SL_CFG_STAGGERED_PREFILL, "staggered-prefill", 0, "SLUICE_STAGGERED_PREFILL", "STAGGERED_PREFILL", T_BOOL,
     F(staggered_prefill), 0, 1, "0", "at most one new sequence starts prefill per step"},
    {SL_CFG_TTFT_TRACE, "ttft-trace", 0, "SLUICE_TTFT_TRACE", "TTFT_TRACE", T_BOOL, F(ttft_trace), 0, 1, "0",
     "one line per request and stage on the worker's stderr"},
    {SL_CFG_QUEUE_DEPTH, "queue-depth", 0, "SLUICE_QUEUE_DEPTH", NULL, T_U32, F(queue_depth), 2, 65536, "256",
     "requests waiting per front end before 429"},
    {SL_CFG_MAX_BODY, "max-body", 0, "SLUICE_MAX_BODY", NULL, T_BYTES, F(max_body), 1024, 1ull << 32, "8M",
     "request body bytes at most (413 beyond)"},
    {SL_CFG_MAX_PROMPT_TOKENS, "max-prompt-tokens", 0, "SLUICE_MAX_PROMPT_TOKENS", NULL, T_U32,
     F(max_prompt_tokens), 0, 1u << 24, "0", "prompt tokens at most (0 = the context)"},
    {SL_CFG_DEFAULT_MAX_TOKENS, "default-max-tokens", 0, "SLUICE_DEFAULT_MAX_TOKENS", NULL, T_U32,
     F(default_max_tokens), 0, 1u << 24, "0", "max_tokens when a request gives none (0 = up to the context)"},
    {SL_CFG_IDLE_TIMEOUT_MS, "idle-timeout-ms", 0, "SLUICE_IDLE_TIMEOUT_MS", NULL, T_U32, F(idle_timeout_ms), 100,
     3600000, "10000", "header, body and keep-alive idle limit"},
    {SL_CFG_WRITE_TIMEOUT_MS, "write-timeout-ms", 0, "SLUICE_WRITE_TIMEOUT_MS", NULL, T_U32, F(write_timeout_ms),
     100, 3600000, "30000", "a client that reads nothing for this long is dropped and its request cancelled"},
    {SL_CFG_DRAIN_DELAY_S, "drain-delay", 0, "SLUICE_DRAIN_DELAY", NULL, T_U32, F(drain_delay_s), 0, 3600, "5",
     "on SIGTERM, seconds /ready answers 503 before listeners close"},
    {SL_CFG_DRAIN_TIMEOUT_S, "drain-timeout", 0, "SLUICE_DRAIN_TIMEOUT", NULL, T_U32, F(drain_timeout_s), 0, 86400,
     "60", "then seconds in-flight requests get to finish"},
    {SL_CFG_CHAT_TEMPLATE, "chat-template", 0, "SLUICE_CHAT_TEMPLATE", NULL, T_STR, F(chat_template), 0, 0, "",
     "template file or built-in name (chatml, llama2, llama3, mistral, gemma, phi3) instead of the model's"},
    {SL_CFG_LOG_BODIES, "log-bodies", 0, "SLUICE_LOG_BODIES", NULL, T_BOOL, F(log_bodies), 0, 1, "0",
     "log request bodies (off by default: they may hold secrets)"},
    {SL_CFG_HEARTBEAT_TIMEOUT_MS, "heartbeat-timeout-ms", 0, "SLUICE_HEARTBEAT_TIMEOUT_MS", NULL, T_U32,
     F(heartbeat_timeout_ms), 100, 3600000, "5000",
     "a worker whose step outlives its bound by this much is restarted"},
    {SL_CFG_MAX_RESPONSE, "max-response", 0, "SLUICE_MAX_RESPONSE", NULL, T_BYTES, F(max_response), 4096,
     1ull << 40, "64M", "response body bytes at most (a larger answer is refused with 400 response_too_large)"},
    {SL_CFG_LOG_FORMAT, "log-format", 0, "SLUICE_LOG_FORMAT", NULL, T_STR, F(log_format), 0, 0, "text",
     "access log lines: text (logfmt) or json (one object per line)"},
    {SL_CFG_LOG_HEALTH, "log-health", 0, "SLUICE_LOG_HEALTH", NULL, T_BOOL, F(log_health), 0, 1, "1",
     "log /health and /ready requests (0 leaves probes out of the access log)"},
    {SL_CFG_TOKENIZE_THREADS, "tokenize-threads", 0, "SLUICE_TOKENIZE_THREADS", NULL, T_U32, F(tokenize_threads), 0,
     16, "1", "threads per front end that render and tokenize bodies over 64 KiB (0 = on the event loop)"},
    {SL_CFG_REASONING_FORMAT, "reasoning-format", 0, "SLUICE_REASONING_FORMAT", NULL, T_STR, F(reasoning_format), 0,
     0, "separate", "a reasoning model's <think> text: separate (reasoning_content) or inline (left in content)"},
    {SL_CFG_PREFIX_CACHE, "prefix-cache", 0, "SLUICE_PREFIX_CACHE", NULL, T_BOOL, F(prefix_cache), 0, 1, "1",
     "reuse the KV blocks of a prompt prefix seen before (--no-prefix-cache: off)"},
    {SL_CFG_GRAMMAR_BYTES_MAX, "grammar-bytes-max", 0, "SLUICE_GRAMMAR_BYTES_MAX", NULL, T_BYTES,
     F(grammar_bytes_max), 0, 256u * 1024u, "64K",
     "grammar text bytes a request may carry, after JSON Schema or regex conversion (0 = constrained decoding off)"},
    {SL_CFG_WEBUI, "webui", 0, "SLUICE_WEBUI", NULL, T_BOOL, F(webui), 0, 1, "1",
     "serve the chat page at / (--no-webui: / answers 404)"},
    {SL_CFG_METRICS_NAMES, "metrics-names", 0, "SLUICE_METRICS_NAMES", NULL, T_STR, F(metrics_names), 0, 0, "sluice",
     "names of the /metrics series: sluice (sluice_*) or vllm (vLLM's vllm:* names, for dashboards built on vLLM)"},
};
#define N_SETTINGS (sizeof settings / sizeof settings[0])

_Static_assert(N_SETTINGS == SL_CFG_COUNT, "every sl_config_key has one settings row");

const char *sl_config_key_name(sl_config_key k)
{
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (settings[i].key == k)
            return settings[i].flag;
    return "?";
}

const char *sl_config_source_name(sl_config_source s)
{
    static const char *names[] = {"default", "file", "seed-alias", "env", "flag"};
    switch (s) {
    case SL_CONFIG_SOURCE_DEFAULT: return names[0];
    case SL_CONFIG_SOURCE_FILE: return names[1];
    case SL_CONFIG_SOURCE_SEED_ALIAS: return names[2];
    case SL_CONFIG_SOURCE_ENV: return names[3];
    case SL_CONFIG_SOURCE_FLAG: return names[4];
    }
    return "?";
}

/* A T_LIST value: `text`'s comma-separated items, blanks around each
 * trimmed, appended to the list in field (of `cap` bytes) or replacing it.
 * An empty text is an empty list; an empty item ("a,,b") is an error. */
static sl_status set_list(char *field, size_t cap, const char *text, bool append, const char *what, char *err)
{
    char out[SL_CONFIG_LIST_MAX];
    if (cap > sizeof out)
        cap = sizeof out;
    size_t o = append ? strnlen(field, cap - 1) : 0;
    memcpy(out, field, o);
    for (const char *p = text; *text != '\0'; p++) {
        size_t n = strcspn(p, ",");
        const char *a = p, *b = p + n;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b) {
            snprintf(err, SL_ERR_LEN, "%s: '%s' has an empty item", what, text);
            return SL_EINVAL;
        }
        if (o + 1 + (size_t)(b - a) >= cap) {
            snprintf(err, SL_ERR_LEN, "%s: the list is longer than %zu bytes", what, cap - 1);
            return SL_EINVAL;
        }
        if (o > 0)
            out[o++] = ',';
        memcpy(out + o, a, (size_t)(b - a));
        o += (size_t)(b - a);
        p += n;
        if (*p == '\0')
            break;
    }
    out[o] = '\0';
    memcpy(field, out, o + 1);
    return SL_OK;
}

/* Parses `text` into the field of setting s; `what` names the origin for
 * errors ("--max-seqs", "SLUICE_MAX_SEQS", "FILE:3 max-seqs"). append: a
 * T_LIST value joins the list already set from the same source. */
static sl_status set_value(sl_config *cfg, const setting *s, const char *text, const char *what, bool append,
                           char *err)
{
    char *field = (char *)cfg + s->offset;
    if (s->type == T_LIST)
        return set_list(field, s->size, text, append, what, err);
    if (s->type == T_STR) {
        if (strlen(text) >= s->size) {
            snprintf(err, SL_ERR_LEN, "%s: value is longer than %zu bytes", what, s->size - 1);
            return SL_EINVAL;
        }
        memcpy(field, text, strlen(text) + 1);
        return SL_OK;
    }
    if (s->type == T_FRACTION) {
        char *end;
        errno = 0;
        double d = strtod(text, &end);
        /* "nan" fails both comparisons: refused too */
        if (errno || end == text || *end || !(d > 0.0 && d <= 1.0)) {
            snprintf(err, SL_ERR_LEN, "%s: '%s' is not a fraction in (0, 1] (e.g. 0.9)", what, text);
            return SL_EINVAL;
        }
        *(double *)field = d;
        return SL_OK;
    }
    uint64_t v;
    if (s->type == T_BOOL) {
        if (!strcmp(text, "1") || !strcasecmp(text, "true") || !strcasecmp(text, "yes") || !strcasecmp(text, "on"))
            v = 1;
        else if (!strcmp(text, "0") || !strcasecmp(text, "false") || !strcasecmp(text, "no") ||
                 !strcasecmp(text, "off"))
            v = 0;
        else {
            snprintf(err, SL_ERR_LEN, "%s: '%s' is not a boolean (1/0, true/false)", what, text);
            return SL_EINVAL;
        }
    } else {
        char *end;
        errno = 0;
        if (!isdigit((unsigned char)text[0])) {
            snprintf(err, SL_ERR_LEN, "%s: '%s' is not a non-negative integer", what, text);
            return SL_EINVAL;
        }
        unsigned long long x = strtoull(text, &end, 10);
        uint64_t mult = 1;
        if (s->type == T_BYTES && *end) {
            switch (toupper((unsigned char)*end)) {
            case 'K': mult = 1ull << 10; break;
            case 'M': mult = 1ull << 20; break;
            case 'G': mult = 1ull << 30; break;
            case 'T': mult = 1ull << 40; break;
            default: mult = 0;
            }
            end += mult ? 1 : 0;
            if (mult && (*end == 'i' || *end == 'I'))
                end++;
            if (mult && (*end == 'B' || *end == 'b'))
                end++;
        }
        if (errno || *end || mult == 0 || (mult > 1 && x > UINT64_MAX / mult)) {
            snprintf(err, SL_ERR_LEN, "%s: '%s' is not a%s integer", what, text,
                     s->type == T_BYTES ? " byte count (e.g. 512M, 4G) or" : " non-negative");
            return SL_EINVAL;
        }
        v = x * mult;
    }
    if (v < s->lo || v > s->hi) {
        snprintf(err, SL_ERR_LEN, "%s: %llu is out of range [%llu, %llu]", what, (unsigned long long)v,
                 (unsigned long long)s->lo, (unsigned long long)s->hi);
        return SL_EINVAL;
    }
    if (s->size == 8)
        *(uint64_t *)field = v;
    else
        *(uint32_t *)field = (uint32_t)v;
    return SL_OK;
}

static const setting *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strlen(settings[i].flag) == len && !strncmp(settings[i].flag, name, len))
            return &settings[i];
    return NULL;
}

static sl_status read_file(sl_config *cfg, const char *path, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, SL_ERR_LEN, "--config %s: cannot open: %s", path, strerror(errno));
        return SL_EINVAL;
    }
    char line[2048];
    int lineno = 0;
    sl_status rc = SL_OK;
    while (rc == SL_OK && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '#' || *p == 0)
            continue;
        char *eq = strchr(p, '=');
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        if (!eq) {
            snprintf(err, SL_ERR_LEN, "%s:%d: expected 'name = value'", path, lineno);
            rc = SL_EINVAL;
            break;
        }
        char *ke = eq;
        while (ke > p && isspace((unsigned char)ke[-1]))
            ke--;
        char *v = eq + 1;
        while (isspace((unsigned char)*v))
            v++;
        char *ve = v + strlen(v);
        while (ve > v && isspace((unsigned char)ve[-1]))
            *--ve = 0;
        const setting *s = find_flag(p, (size_t)(ke - p));
        char what[160];
        snprintf(what, sizeof what, "%s:%d %.*s", path, lineno, (int)(ke - p), p);
        if (!s) {
            snprintf(err, SL_ERR_LEN, "%s: unknown setting", what);
            rc = SL_EINVAL;
        } else if ((rc = set_value(cfg, s, v, what, cfg->source[s->key] == SL_CONFIG_SOURCE_FILE, err)) == SL_OK) {
            cfg->source[s->key] = SL_CONFIG_SOURCE_FILE;
        }
    }
    fclose(f);
    return rc;
}

static void usage_row(FILE *f, const setting *s)
{
    char flag[64];   /* "-m, --model V" or "    --port V": the long flags line up */
    if (s->short_flag)
        snprintf(flag, sizeof flag, "-%c, --%s%s", s->short_flag, s->flag, s->type == T_BOOL ? "" : " V");
    else
        snprintf(flag, sizeof flag, "    --%s%s", s->flag, s->type == T_BOOL ? "" : " V");
    fprintf(f, "  %-26s %s\n", flag, s->help);
    fprintf(f, "  %-26s [%s%s%s%s%s]\n", "", s->env, s->seed ? ", " : "", s->seed ? s->seed : "",
            s->def[0] ? "; default " : "", s->def);
}

/* How many groups of the table list `flag`. */
static size_t groups_listing(const sl_config_group *groups, size_t n_groups, const char *flag)
{
    size_t n = 0;
    for (size_t g = 0; g < n_groups; g++)
        for (size_t k = 0; k < SL_CONFIG_GROUP_FLAGS_MAX && groups[g].flags[k] != NULL; k++)
            n += strcmp(groups[g].flags[k], flag) == 0;
    return n;
}

sl_status sl_config_groups_check(const sl_config_group *groups, size_t n_groups, char err[SL_ERR_LEN])
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        size_t n = groups_listing(groups, n_groups, settings[i].flag);
        if (n != 1) {
            snprintf(err, SL_ERR_LEN, "--%s is in %zu --help groups, not 1 (master/config_groups.c)",
                     settings[i].flag, n);
            return SL_EINVAL;
        }
    }
    for (size_t g = 0; g < n_groups; g++) {
        size_t k = 0;
        for (; k < SL_CONFIG_GROUP_FLAGS_MAX && groups[g].flags[k] != NULL; k++) {
            const char *fl = groups[g].flags[k];
            if (find_flag(fl, strlen(fl)) == NULL) {
                snprintf(err, SL_ERR_LEN, "--help group %s lists --%s, which is no setting", groups[g].title, fl);
                return SL_EINVAL;
            }
        }
        if (k == 0 || k == SL_CONFIG_GROUP_FLAGS_MAX) {
            snprintf(err, SL_ERR_LEN, "--help group %s is empty or has no NULL end", groups[g].title);
            return SL_EINVAL;
        }
    }
    return SL_OK;
}

void sl_config_usage(FILE *f)
{
    fprintf(f, "usage: sluice serve [-m MODEL.gguf] [options]\n"
               "Serves the model over an OpenAI-compatible HTTP API.\n\n"
               "Every option can also come from its environment variable or from a\n"
               "--config FILE of 'name = value' lines (name = the long option).\n"
               "Precedence: option > SLUICE_* variable > seed alias > file > default.\n");
    for (size_t g = 0; g < sl_config_n_groups; g++) {
        fprintf(f, "\n%s:\n", sl_config_groups[g].title);
        for (size_t k = 0; k < SL_CONFIG_GROUP_FLAGS_MAX && sl_config_groups[g].flags[k] != NULL; k++) {
            const char *fl = sl_config_groups[g].flags[k];
            const setting *s = find_flag(fl, strlen(fl));
            if (s != NULL)
                usage_row(f, s);
        }
    }
    /* A setting no group lists (a test fails on it) is still shown. */
    bool header = false;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (groups_listing(sl_config_groups, sl_config_n_groups, settings[i].flag) > 0)
            continue;
        if (!header)
            fprintf(f, "\nOther:\n");
        header = true;
        usage_row(f, &settings[i]);
    }
    fprintf(f, "\n  %-26s %s\n", "--config FILE", "read settings from FILE");
    fprintf(f, "  %-26s %s\n", "-h, --help", "this text");
}

static void set_defaults(sl_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    char err[SL_ERR_LEN];
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (settings[i].def[0])
            set_value(cfg, &settings[i], settings[i].def, "default", false, err);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->n_frontends = n > 0 ? (uint32_t)(n < 64 ? n : 64) : 1;
    cfg->threads = sl_worker_default_threads();   /* affinity and cgroup quota, not the online cores */
}

sl_status sl_config_parse(int argc, char **argv, sl_config *cfg, char err[SL_ERR_LEN])
{
    set_defaults(cfg);
    err[0] = 0;
    /* --config first: flags override the file wherever they appear */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *file = NULL;
        if (!strcmp(a, "--config")) {
            if (i + 1 >= argc) {
                snprintf(err, SL_ERR_LEN, "--config needs a file");
                return SL_EINVAL;
            }
            file = argv[++i];
        } else if (!strncmp(a, "--config=", 9)) {
            file = a + 9;
        }
        if (file && read_file(cfg, file, err) < 0)
            return SL_EINVAL;
    }
    for (int pass = 0; pass < 2; pass++) {   /* seed aliases, then SLUICE_* */
        for (size_t i = 0; i < N_SETTINGS; i++) {
            const setting *s = &settings[i];
            const char *name = pass == 0 ? s->seed : s->env;
            const char *v = name ? getenv(name) : NULL;
            if (!v)
                continue;
            if (set_value(cfg, s, v, name, false, err) < 0)
                return SL_EINVAL;
            cfg->source[s->key] = pass == 0 ? SL_CONFIG_SOURCE_SEED_ALIAS : SL_CONFIG_SOURCE_ENV;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            sl_config_usage(stdout);
            return SL_AGAIN;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9))
            continue;
        const setting *s = NULL;
        const char *value = NULL;
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            s = find_flag(a + 2, len);
            value = eq ? eq + 1 : NULL;
            if (!s && len > 3 && !strncmp(a + 2, "no-", 3)) {   /* --no-FLAG: a switch set to 0 */
                s = find_flag(a + 5, len - 3);
                if (s && (s->type != T_BOOL || eq)) {
                    snprintf(err, SL_ERR_LEN, "'%s': only on/off settings take the no- form, without a value", a);
                    return SL_EINVAL;
                }
                value = "0";
            }
        } else if (a[0] == '-' && a[1] && !a[2]) {
            for (size_t k = 0; k < N_SETTINGS; k++)
                if (settings[k].short_flag == a[1])
                    s = &settings[k];
        }
        if (!s) {
            snprintf(err, SL_ERR_LEN, "unknown option '%s' (sluice serve --help lists them)", a);
            return SL_EINVAL;
        }
        if (!value) {
            if (s->type == T_BOOL && (i + 1 >= argc || argv[i + 1][0] == '-'))
                value = "1";
            else if (i + 1 < argc)
                value = argv[++i];
            else {
                snprintf(err, SL_ERR_LEN, "%s needs a value", a);
                return SL_EINVAL;
            }
        }
        char what[96];
        snprintf(what, sizeof what, "--%s", s->flag);
        if (set_value(cfg, s, value, what, cfg->source[s->key] == SL_CONFIG_SOURCE_FLAG, err) < 0)
            return SL_EINVAL;
        cfg->source[s->key] = SL_CONFIG_SOURCE_FLAG;
    }
    if (strcmp(cfg->device, "auto") && strcmp(cfg->device, "cpu") && strcmp(cfg->device, "cuda")) {
        snprintf(err, SL_ERR_LEN, "--device: '%s' is not one of auto, cpu, cuda", cfg->device);
        return SL_EINVAL;
    }
    sl_kv_type kt;
    if (sl_kv_type_parse(cfg->kv_type, &kt) < 0) {
        snprintf(err, SL_ERR_LEN, "--kv-type: '%s' is not one of auto, f32, f16, q8_0", cfg->kv_type);
        return SL_EINVAL;
    }
    if (strcmp(cfg->metrics_names, "sluice") && strcmp(cfg->metrics_names, "vllm")) {
        snprintf(err, SL_ERR_LEN, "--metrics-names: '%s' is not one of sluice, vllm", cfg->metrics_names);
        return SL_EINVAL;
    }
    if (!cfg->admin_socket[0])
        snprintf(cfg->admin_socket, sizeof cfg->admin_socket, "/tmp/sluice-%u.sock", cfg->port);
    return SL_OK;
}

void sl_config_value_text(const sl_config *cfg, sl_config_key k, char *buf, size_t cap)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        if (s->key != k)
            continue;
        const char *field = (const char *)cfg + s->offset;
        if (k == SL_CFG_API_KEY)
            snprintf(buf, cap, "%s", field[0] ? "(set)" : "");
        else if (s->type == T_STR || s->type == T_LIST)
            snprintf(buf, cap, "%s", field);
        else if (s->type == T_FRACTION)
            snprintf(buf, cap, "%g", *(const double *)field);
        else if (s->size == 8)
            snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)field);
        else
            snprintf(buf, cap, "%u", *(const uint32_t *)field);
        return;
    }
    snprintf(buf, cap, "?");
}
