/* frontend/routes.c: the route table and every endpoint that answers without
 * the worker: /health, /ready, /metrics, /v1/models, /v1/effective-config,
 * /tokenize, /detokenize (the last two as jobs, jobs.c), the chat page
 * (webui.c); every /v1 route also without its /v1 (/chat/completions,
 * /models, ...); the body limit; bearer auth; CORS (--cors-origin: the
 * headers, and preflights answered before auth, as browsers send them
 * without credentials); 404/405 in OpenAI's error shape.
 * Runs on each front-end process's event loop; server.c registers it, and it
 * hands the generation routes to generate.c. The trade-off: one handler owns
 * "/" and dispatches on the exact normalized path (a table scan per request
 * instead of h2o's path matching), so a path h2o would match by prefix
 * ("/v1/models/x/y") still gets a precise 404, and every error has a JSON body. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_error.h"
#include "frontend/api_json.h"
#include "frontend/api_metrics.h"
#include "frontend/api_tokenize.h"
#include "frontend/server_internal.h"
#include "frontend/webui.h"

typedef struct {
    h2o_handler_t super;
    sl_fe *fe;
} fe_handler;

static bool path_is(h2o_req_t *req, const char *p)
{
    return h2o_memis(req->path_normalized.base, req->path_normalized.len, p, strlen(p));
}

/* The path names `route`, or a /v1 route without its "/v1": clients given
 * a base URL without /v1 (base_url="http://host:8080") send those. */
static bool route_is(h2o_req_t *req, const char *route)
{
    return path_is(req, route) || (strncmp(route, "/v1/", 4) == 0 && path_is(req, route + 3));
}

static bool method_is(h2o_req_t *req, const char *m)
{
    return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

static void respond_json(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, int status, json_t *obj)
{
    char *s = obj ? sl_api_json_dump(obj) : NULL;
    json_decref(obj);
    if (s == NULL) {
        sl_api_error e;
        sl_api_error_set(&e, SL_API_ERR_INTERNAL, NULL, "out of memory");
        sl_fe_respond_error(fe, req, ri, &e);
        return;
    }
    sl_fe_respond(fe, req, ri, status, "application/json", s, strlen(s), 0);
    free(s);
}

/* ================================================================ auth */

/* Constant time in the key's length: every byte of the longer of the two is
 * looked at, so the time says nothing about how much of the key matched. */
static bool auth_ok(const sl_fe *fe, h2o_req_t *req)
{
    const char *key = fe->cfg->api_key;
    size_t klen = strnlen(key, SL_CONFIG_KEY_MAX);
    if (klen == 0)
        return true;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i < 0)
        return false;
    h2o_iovec_t v = req->headers.entries[i].value;
    if (v.len < 7 || strncasecmp(v.base, "bearer ", 7) != 0)
        return false;
    const unsigned char *got = (const unsigned char *)v.base + 7;
    size_t glen = v.len - 7;
    unsigned diff = (unsigned)(glen ^ klen);
    size_t n = glen > klen ? glen : klen;
    for (size_t k = 0; k < n; k++) {
        unsigned char a = k < glen ? got[k] : 0;
        unsigned char b = k < klen ? (unsigned char)key[k] : 0;
        diff |= (unsigned)(a ^ b);
    }
    return diff == 0;
}

/* ================================================================ health, ready, models */

static void on_health(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri)
{
    respond_json(fe, req, ri, 200, json_pack("{s:s}", "status", "ok"));
}

static void on_ready(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri)
{
    uint64_t slack = (uint64_t)(fe->cfg->heartbeat_timeout_ms ? fe->cfg->heartbeat_timeout_ms : 5000) * 1000000ull;
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(fe->shm, &wi);
    const char *why = NULL;
    if (fe->draining)
        why = "draining";
    else if (wi.worker_state != SL_WORKER_STATE_READY)
        why = wi.worker_state == SL_WORKER_STATE_LOADING ? "worker loading" : "worker not ready";
    else if (!sl_shm_worker_alive(fe->shm, sl_shm_now_ns(), slack))
        why = "worker heartbeat stale";
    if (why == NULL) {
        respond_json(fe, req, ri, 200, json_pack("{s:s}", "status", "ready"));
        return;
    }
    json_t *o = json_pack("{s:s,s:s}", "status", "unavailable", "reason", why);
    char *body = o ? sl_api_json_dump(o) : NULL;
    json_decref(o);
    sl_fe_respond_counted(fe, req, ri, 503, "application/json", body ? body : "", body ? strlen(body) : 0, 1, 0, 0,
                          NULL, "unavailable");
    free(body);
}

static json_t *model_object(const sl_fe *fe, const char *name)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:I}", "id", name, "object", "model", "created",
                     (json_int_t)fe->started, "owned_by", "sluice", "max_model_len", (json_int_t)fe->n_ctx);
}

/* Every name the model answers to, the primary (the one responses report)
 * first: OpenAI lists an alias and what it points to as separate models,
 * and clients that pick data[0] get the primary. */
static void on_models(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri)
{
    json_t *data = json_array();
    for (uint32_t i = 0; i < fe->models.n_names; i++)
        json_array_append_new(data, model_object(fe, fe->models.names[i]));
    respond_json(fe, req, ri, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* Only the listed names: --accept-any-model widens what generation accepts,
 * not what the server says it serves. */
static void on_model_one(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const char *name, size_t len)
{
    for (uint32_t i = 0; i < fe->models.n_names; i++) {
        if (strlen(fe->models.names[i]) == len && memcmp(fe->models.names[i], name, len) == 0) {
            respond_json(fe, req, ri, 200, model_object(fe, fe->models.names[i]));
            return;
        }
    }
    sl_api_error e;
    sl_api_error_set(&e, SL_API_ERR_NOT_FOUND, "model", "The model `%.*s` does not exist.",
                     (int)(len > 128 ? 128 : len), name);
    e.code = "model_not_found";
    sl_fe_respond_error(fe, req, ri, &e);
}

/* ================================================================ metrics */

static void on_metrics(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    sl_fe_metrics_render(fe, &m);   /* metrics.c: the series and their names */
    size_t len = 0;
    const char *text = sl_api_metrics_text(&m, &len);
    if (text == NULL) {
        sl_api_error e;
        sl_api_error_set(&e, SL_API_ERR_INTERNAL, NULL, "out of memory");
        sl_fe_respond_error(fe, req, ri, &e);
    } else {
        sl_fe_respond(fe, req, ri, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, 0);
    }
    sl_api_metrics_fini(&m);
}

/* ================================================================ effective-config */

static void on_effective_config(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri)
{
    static const char *source_names[] = {"default", "file", "env", "seed_alias", "flag"};
    const sl_config *c = fe->cfg;
    json_t *src = json_object();
    static const char *keys[] = {
        "model", "host", "port", "frontends", "api_key", "admin_socket", "device", "threads", "kv_memory",
        "ctx_size", "max_seqs", "token_budget", "prefill_chunk", "batch_window_ms", "staggered_prefill",
        "ttft_trace", "queue_depth", "max_body", "max_prompt_tokens", "default_max_tokens", "idle_timeout_ms",
        "write_timeout_ms", "drain_delay_s", "drain_timeout_s", "chat_template", "model_alias", "log_bodies",
        "heartbeat_timeout_ms", "admin_group", "max_response", "log_format", "log_health",
        "tokenize_threads", "prefix_cache", "grammar_bytes_max", "reasoning_format", "kv_type",
        "gpu_memory_fraction", "webui", "accept_any_model", "cors_origin", "metrics_names", "tensor_parallel"};
    _Static_assert(sizeof keys / sizeof keys[0] == SL_CFG_COUNT, "a source name for every sl_config_key");
    for (int i = 0; i < SL_CFG_COUNT; i++) {
        unsigned s = c->source[i];
        json_object_set_new(src, keys[i], json_string(s < 5 ? source_names[s] : "unknown"));
    }
    sl_shm_census_info *cen = sl_malloc(sizeof *cen);
    json_t *mail = json_null();
    if (cen != NULL) {
        sl_shm_census(fe->shm, cen);
        mail = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "free", (int)cen->mailboxes[0], "claimed",
                         (int)cen->mailboxes[1], "submitted", (int)cen->mailboxes[2], "running",
                         (int)cen->mailboxes[3], "finished", (int)cen->mailboxes[4], "failed",
                         (int)cen->mailboxes[5], "cancelled", (int)cen->mailboxes[6], "orphans",
                         (int)cen->orphans, "prompt_blocks_free", (int)cen->blocks_free);
        free(cen);
    }
    /* The API key is never shown: only whether one is set. */
    json_t *front = json_pack(
        "{s:i,s:s,s:s,s:s,s:i,s:i,s:b,s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:b,s:i,s:i,s:o,s:o}",
        "slot", (int)fe->slot, "model", c->model, "model_name", fe->model_name, "host", c->host, "port",
        (int)c->port, "frontends", (int)c->n_frontends, "api_key_set", c->api_key[0] != '\0', "max_body",
        (json_int_t)c->max_body, "ctx_size", (int)fe->n_ctx, "max_prompt_tokens", (int)fe->max_prompt,
        "default_max_tokens", (int)c->default_max_tokens, "queue_depth", (int)c->queue_depth, "idle_timeout_ms",
        (int)c->idle_timeout_ms, "write_timeout_ms", (int)c->write_timeout_ms, "drain_delay_s",
        (int)c->drain_delay_s, "drain_timeout_s", (int)c->drain_timeout_s, "chat_template",
        c->chat_template[0] ? c->chat_template : "(model)", "log_bodies", c->log_bodies != 0,
        "pending_releases", (int)fe->n_pending, "streams", (int)fe->n_streams, "mailboxes", mail, "sources", src);
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(fe->shm, &wi);
    static const char *states[] = {"starting", "loading", "ready", "dead"};
    json_t *winfo = json_pack("{s:s,s:i,s:i,s:I,s:s}", "state",
                              (unsigned)wi.worker_state < 4 ? states[wi.worker_state] : "unknown", "pid",
                              (int)wi.worker_pid, "generation", (int)wi.worker_generation, "step",
                              (json_int_t)wi.step, "model_id", wi.model_id);
    if (front != NULL) {
        json_object_set_new(front, "max_response", json_integer((json_int_t)sl_fe_max_response(c)));
        json_object_set_new(front, "log_format", json_string(c->log_format[0] ? c->log_format : "text"));
        json_object_set_new(front, "log_health", json_boolean(c->log_health != 0));
        json_object_set_new(front, "tokenize_threads", json_integer((json_int_t)c->tokenize_threads));
        json_object_set_new(front, "tokenize_jobs", json_integer((json_int_t)fe->n_jobs));
        json_object_set_new(front, "reasoning_format", json_string(fe->reasoning_inline ? "inline" : "separate"));
        json_object_set_new(front, "tool_format", json_string(sl_tool_format_name(fe->tool_format)));
        json_t *names = json_array(), *origins = json_array();
        for (uint32_t i = 0; i < fe->models.n_names; i++)
            json_array_append_new(names, json_string(fe->models.names[i]));
        size_t pos = 0, len = 0;
        for (const char *o; (o = sl_config_list_next(fe->cors.origins, &pos, &len)) != NULL;)
            json_array_append_new(origins, json_stringn(o, len));
        json_object_set_new(front, "model_names", names);
        json_object_set_new(front, "accept_any_model", json_boolean(fe->models.accept_any));
        json_object_set_new(front, "cors_origins", origins);
        json_object_set_new(front, "system_fingerprint", json_string(fe->fingerprint));
    }
    if (front != NULL)
        json_object_set_new(front, "worker_info", winfo ? winfo : json_null());
    else
        json_decref(winfo);
    json_t *snap = sl_fe_worker_snapshot(fe);
    respond_json(fe, req, ri, 200,
                 json_pack("{s:o,s:o}", "frontend", front ? front : json_null(), "worker", snap ? snap : json_null()));
}

/* ================================================================ tokenize */

/* /tokenize and /detokenize as one job (jobs.c): parse and answer in work,
 * send in done. A large body runs on a pool thread with its own copy. */
typedef struct {
    sl_fe_job job;                   /* first: jobs.c hands this back */
    bool detok;
    sl_status rc;                    /* outputs of work */
    char *out;
    sl_api_error e;
} tokenize_job;

static void tokenize_work(const sl_fe *fe, sl_fe_job *job)
{
    tokenize_job *j = (tokenize_job *)job;
    if (j->detok) {
        sl_api_detokenize_req r = {0};
        j->rc = sl_api_detokenize_parse(&r, j->job.body, j->job.len, fe->n_vocab, &j->e);
        if (j->rc == SL_OK)
            j->rc = sl_api_detokenize_respond(fe->tok, &r, sl_fe_max_response(fe->cfg), &j->out, &j->e);
        sl_api_detokenize_fini(&r);
    } else {
        sl_api_tokenize_req r = {0};
        j->rc = sl_api_tokenize_parse(&r, j->job.body, j->job.len, &j->e);
        if (j->rc == SL_OK)
            j->rc = sl_api_tokenize_respond(fe->tok, &r, sl_fe_max_response(fe->cfg), &j->out, &j->e);
        sl_api_tokenize_fini(&r);
    }
}

static void tokenize_done(sl_fe *fe, sl_fe_job *job, h2o_req_t *req)
{
    tokenize_job *j = (tokenize_job *)job;
    if (req != NULL) {
        if (j->rc != SL_OK)
            sl_fe_respond_error(fe, req, &job->ri, &j->e);
        else
            sl_fe_respond(fe, req, &job->ri, 200, "application/json", j->out, strlen(j->out), 0);
    }
    free(j->out);
    free(j->job.body_owned);
    free(j);
}

static void on_tokenize(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, bool detok)
{
    tokenize_job *j = (tokenize_job *)sl_fe_jobs_new(fe, req, ri, sizeof *j);
    if (j == NULL)
        return;
    j->job.work = tokenize_work;
    j->job.done = tokenize_done;
    j->detok = detok;
    sl_fe_jobs_run(fe, req, &j->job);
}

/* ================================================================ body limit */

/* h2o answers bodies over its own limit itself, with a plain-text 413. So its
 * limit sits above ours and on_req answers (max_body, h2o limit] with our JSON
 * 413. The margin is max_body again, at least 1 MiB: a client just over the
 * limit gets an error it can parse, while a body far over it is still refused
 * by h2o from Content-Length before it is read (h2o buffers whole bodies, so
 * the margin bounds the memory one connection can pin at about
 * 2 x max_body + 1 MiB). */

uint64_t sl_fe_routes_body_limit(const sl_config *cfg)
{
    return cfg->max_body > 0 ? cfg->max_body : 1 << 20;
}

size_t sl_fe_routes_h2o_body_limit(uint64_t max_body)
{
    uint64_t margin = max_body > SL_FE_BODY_MARGIN_MIN ? max_body : SL_FE_BODY_MARGIN_MIN;
    uint64_t lim = max_body + margin;
    return lim > SIZE_MAX ? SIZE_MAX : (size_t)lim;
}

/* ================================================================ CORS */

/* Headers for a request that carries an Origin --cors-origin allows, on
 * every response to it (errors and streams too: they are added before any
 * route runs, and every response path adds to req->res.headers). A list of
 * origins (not "*") makes the answer depend on Origin, so every response
 * says Vary: Origin for caches. Returns whether the origin is allowed. */
static bool cors_headers(const sl_fe *fe, h2o_req_t *req)
{
    if (!sl_api_cors_enabled(&fe->cors))
        return false;
    if (!fe->cors.any)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_VARY, NULL, H2O_STRLIT("origin"));
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1);
    if (i < 0)
        return false;
    h2o_iovec_t origin = req->headers.entries[i].value;   /* lives as long as the request */
    if (!sl_api_cors_allows(&fe->cors, origin.base, origin.len))
        return false;
    if (fe->cors.any)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN, NULL, H2O_STRLIT("*"));
    else
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN, NULL, origin.base,
                       origin.len);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("access-control-expose-headers"), 0, NULL,
                          H2O_STRLIT(SL_API_CORS_EXPOSE_HEADERS));
    return true;
}

/* A preflight (OPTIONS on a route, with CORS on): 204 with the route's
 * methods and the headers the script may send; nothing for an origin that
 * is not allowed beyond the 204 and Allow, so the browser refuses. */
static void on_preflight(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, bool allowed, const char *methods)
{
    char value[SL_API_CORS_HEADERS_MAX];
    h2o_iovec_t m = h2o_strdup(&req->pool, methods, SIZE_MAX);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, m.base, m.len);
    if (allowed) {
        ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("access-control-request-headers"), -1);
        h2o_iovec_t asked = i >= 0 ? req->headers.entries[i].value : h2o_iovec_init(NULL, 0);
        sl_api_cors_allow_headers(asked.base, asked.len, value, sizeof value);
        h2o_iovec_t v = h2o_strdup(&req->pool, value, SIZE_MAX);
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("access-control-allow-methods"), 0, NULL,
                              m.base, m.len);
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("access-control-allow-headers"), 0, NULL,
                              v.base, v.len);
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("access-control-max-age"), 0, NULL,
                              H2O_STRLIT(SL_API_CORS_MAX_AGE));
    }
    sl_fe_respond(fe, req, ri, 204, NULL, "", 0, 0);
}

/* ================================================================ dispatch */

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    sl_fe *fe = ((fe_handler *)self)->fe;
    sl_fe_conn_on_request(fe, req);
    sl_fe_reqinfo ri;
    sl_fe_respond_reqinfo_init(&ri, req);

    static const struct { const char *path, *method; bool auth; int id; } table[] = {
        {"/health", "GET", false, 1},          {"/ready", "GET", false, 2},
        {"/metrics", "GET", true, 3},          {"/v1/models", "GET", true, 4},
        {"/v1/effective-config", "GET", true, 5}, {"/tokenize", "POST", true, 6},
        {"/detokenize", "POST", true, 7},      {"/v1/chat/completions", "POST", true, 8},
        {"/v1/completions", "POST", true, 9},
    };
    int id = 0;
    bool auth = true, method_ok = false;
    const char *allow = "GET, HEAD";   /* the route's methods, for a 405's Allow header (RFC 9110) */
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (route_is(req, table[i].path)) {
            id = table[i].id;
            auth = table[i].auth;
            allow = table[i].method[0] == 'G' ? "GET, HEAD" : table[i].method;
            method_ok = method_is(req, table[i].method) || (table[i].method[0] == 'G' && method_is(req, "HEAD"));
            break;
        }
    }
    size_t mp = 0;   /* /v1/models/{id} or /models/{id}: the id's offset */
    static const char *const models_prefixes[] = {"/v1/models/", "/models/"};
    for (size_t k = 0; id == 0 && k < 2; k++) {
        size_t n = strlen(models_prefixes[k]);
        if (req->path_normalized.len > n && memcmp(req->path_normalized.base, models_prefixes[k], n) == 0) {
            id = 10;
            mp = n;
            method_ok = method_is(req, "GET");
        }
    }
    bool cors_ok = cors_headers(fe, req);
    if (id != 0 && method_is(req, "OPTIONS") && sl_api_cors_enabled(&fe->cors)) {
        char methods[32];
        snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
        on_preflight(fe, req, &ri, cors_ok, methods);
        return 0;
    }
    /* The chat page (webui.c) needs no key: the page is where one is typed in. */
    sl_fe_webui_asset page;
    if (id == 0 && fe->cfg->webui && sl_fe_webui_find(req->path_normalized.base, req->path_normalized.len, &page)) {
        id = 11;
        auth = false;
        method_ok = method_is(req, "GET") || method_is(req, "HEAD");
    }
    sl_api_error e;
    /* h2o let bodies up to its own, higher limit through (why: "body limit" above):
     * the configured limit is enforced here, with a JSON body. It comes before
     * auth as h2o's guard does, so the answer does not depend on the key. */
    uint64_t max_body = sl_fe_routes_body_limit(fe->cfg);
    if (req->entity.base != NULL && req->entity.len > max_body) {
        sl_api_error_set(&e, SL_API_ERR_TOO_LARGE, NULL,
                         "The request body is %zu bytes; this server accepts at most %" PRIu64 " (--max-body).",
                         req->entity.len, max_body);
        sl_fe_respond_error(fe, req, &ri, &e);
        return 0;
    }
    if (auth && !auth_ok(fe, req)) {
        sl_api_error_set(&e, SL_API_ERR_UNAUTHORIZED, NULL, "Incorrect or missing API key (send Authorization: Bearer <key>).");
        sl_fe_respond_error(fe, req, &ri, &e);
        return 0;
    }
    if (id == 0) {
        sl_api_error_set(&e, SL_API_ERR_NOT_FOUND, NULL, "No route for this path.");
        sl_fe_respond_error(fe, req, &ri, &e);
        return 0;
    }
    if (!method_ok) {
        sl_api_error_set(&e, SL_API_ERR_METHOD_NOT_ALLOWED, NULL, "Method %.*s is not allowed here.",
                         (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, allow, strlen(allow));
        sl_fe_respond_error(fe, req, &ri, &e);
        return 0;
    }
    switch (id) {
    case 1: on_health(fe, req, &ri); break;
    case 2: on_ready(fe, req, &ri); break;
    case 3: on_metrics(fe, req, &ri); break;
    case 4: on_models(fe, req, &ri); break;
    case 5: on_effective_config(fe, req, &ri); break;
    case 6: on_tokenize(fe, req, &ri, false); break;
    case 7: on_tokenize(fe, req, &ri, true); break;
    case 8: sl_fe_generate(fe, req, &ri, 1); break;
    case 9: sl_fe_generate(fe, req, &ri, 0); break;
    case 10: on_model_one(fe, req, &ri, req->path_normalized.base + mp, req->path_normalized.len - mp); break;
    case 11: sl_fe_webui_respond(fe, req, &ri, &page); break;
    }
    return 0;
}

void sl_fe_routes_register(sl_fe *fe, h2o_hostconf_t *host)
{
    h2o_pathconf_t *pc = h2o_config_register_path(host, "/", 0);
    fe_handler *h = (fe_handler *)h2o_create_handler(pc, sizeof *h);
    h->super.on_req = on_req;
    h->fe = fe;
}
