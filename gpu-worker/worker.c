/* gpu-worker/worker.c: the worker process: glue between the scheduler and
 * the shared segment.
 * The scheduler talks to the world through sl_sched_io; here each callback
 * maps onto one shm call (pop, push, finish, cancel flag, doorbell), so the
 * scheduler stays testable with fakes and this file holds no policy of its
 * own beyond sizing (the KV pool per backend, size_and_create) and publishing
 * (heartbeat every step, the effective-config snapshot). The shm library
 * keeps the request and token counters itself. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "shared/alloc.h"
#include "gpu-worker/cpu_quota.h"
#include "gpu-worker/kv_sizing.h"
#include "gpu-worker/load_progress.h"
#include "gpu-worker/scheduler.h"
#include "gpu-worker/step_bound.h"
#include "gpu-worker/worker.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "shared/shm.h"

#define IDLE_BEAT_NS 100000000ull        /* beat at least every 100 ms while idle */
#define SNAPSHOT_EVERY_NS 200000000ull   /* republish effective-config at most 5 times a second */
#define FLOOR_FLOPS_PER_THREAD 1e9       /* first-step guess: a slow, loaded core (ASan builds reach ~3e9) */
#define PAUSED_TICK_NS 10000000ull       /* while paused: cancels and intake every 10 ms */
#define TYPICAL_SEQ_TOKENS 1024          /* default --max-seqs: sequences of this length the KV pool holds */
#define MAX_SEQS_FLOOR 16                /* ... but never fewer (a small pool preempts rather than queues) */

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* A request the scheduler holds: its ticket and a private copy of the prompt
 * (the shm prompt arena is not contiguous). */
typedef struct {
    sl_shm_ticket ticket;
    int32_t *prompt;
    uint64_t first_emit_ns;      /* when the first generated token went out (echo: or the last prompt record) */
    uint32_t n_emits;            /* entries pushed */
    uint32_t n_first;            /* entries up to and including the first generated token: 1, or n_prompt with echo */
    bool used;
} held;

typedef struct {
    sl_shm_t *shm;
    const sl_config *cfg;
    held *held;                  /* indexed by slot in this table; id = slot */
    uint32_t n_held;
    sl_step_bound bound;         /* the heartbeat's step bound over the recent steps */
    uint64_t last_snapshot_ns;
    bool paused;                 /* this worker has seen the pause flag and runs no step */
    sl_sched *sched;
    const sl_model *model;
    const char *backend_name;
    struct {                     /* how the KV pool was sized, for effective-config and the ready line */
        sl_kv_sizing_in in;      /* the host sizing's inputs (read on every backend) */
        sl_kv_bound bound;       /* what chose the size (SL_KV_BOUND_DEVICE: the CUDA backend did) */
        uint32_t n_blocks;       /* the scheduler's pool */
        uint64_t bytes;          /* the backend's pool (be->kv_bytes) */
        sl_kv_type type;         /* as the backend resolved it */
        bool max_seqs_computed;  /* max-seqs unset: derived from the blocks */
        int exit_code;           /* size_and_create failed: the worker's exit code */
    } kv;
    uint64_t grammar_mask_ns;    /* the scheduler's totals already added to the segment's counters */
    uint64_t n_constrained;
} worker;

static held *held_of(worker *w, uint64_t id)
{
    return id < w->n_held && w->held[id].used ? &w->held[id] : NULL;
}

/* ------------------------------------------------------------------------ */
/* sl_sched_io over the segment                                              */

static sl_status io_poll(void *ctx, sl_sched_request *out)
{
    worker *w = ctx;
    uint32_t slot;
    for (slot = 0; slot < w->n_held && w->held[slot].used; slot++)
        ;
    if (slot == w->n_held)
        return SL_AGAIN;   /* the scheduler holds as many as it can: leave the rest queued */
    sl_shm_ticket t;
    for (;;) {
        sl_status rc = sl_shm_worker_pop(w->shm, &t);
        if (rc == SL_ESTALE)
            stop_flag = 1;   /* a newer worker generation exists: this process must go */
        if (rc != SL_OK)
            return SL_AGAIN;
        sl_alloc_fault_begin();   /* a fault-injection sweep counts this sequence's allocations */
        uint32_t n_prompt, ignore_eos;
        uint64_t request_id;
        memset(out, 0, sizeof *out);
        rc = sl_shm_request_get(w->shm, t, &out->params, &out->max_tokens, &out->min_tokens, &ignore_eos,
                                &request_id, &n_prompt);
        const sl_mailbox_shm *mb = sl_shm_mailbox(w->shm, t);
        held *h = &w->held[slot];
        const char *grammar;
        uint32_t grammar_len;
        const char *why = "invalid request in shared memory";
        bool echo = sl_shm_request_echo(w->shm, t) != 0;
        if (echo && !sl_shm_get_limits(w->shm)->logprobs) {
            why = "the prompt's logprobs (echo) need a segment that carries logprob records";
            rc = SL_EINVAL;
        }
        /* a grammar that cannot be read fails the request: it must never run unconstrained */
        if (rc == SL_OK && sl_shm_grammar_get(w->shm, t, &grammar, &grammar_len) == SL_OK && mb && n_prompt >= 1 && n_prompt <= (uint32_t)w->model->hp.n_ctx_train &&
            (h->prompt = sl_malloc(n_prompt * sizeof(int32_t))) != NULL &&
            sl_shm_prompt_copy(w->shm, t, 0, n_prompt, h->prompt) == SL_OK) {
            h->ticket = t;
            h->used = true;
            h->first_emit_ns = 0;
            h->n_emits = 0;
            out->echo_logprobs = echo;   /* max_tokens 0 then: the scheduler checks */
            h->n_first = out->echo_logprobs ? n_prompt : 1;
            out->id = slot;
            out->prompt = h->prompt;
            out->n_prompt = (int32_t)n_prompt;
            out->ignore_eos = ignore_eos != 0;
            out->grammar = grammar;   /* compiled by the scheduler's intake, inside this poll's caller */
            out->grammar_len = grammar_len;
            sl_shm_result_info info;
            out->submit_ns = sl_shm_result(w->shm, t, &info) == SL_OK && info.timings.queued_ns
                                 ? info.timings.queued_ns : sl_shm_now_ns();
            return SL_OK;
        }
        free(h->prompt);
        h->prompt = NULL;
        /* a request we cannot even read fails alone, with a reason */
        sl_shm_worker_finish(w->shm, t, SL_FINISH_REASON_ERROR, why);
    }
}

static sl_status io_emit(void *ctx, uint64_t id, int32_t token, const sl_logprob_record *rec)
{
    worker *w = ctx;
    held *h = held_of(w, id);
    if (!h)
        return SL_ESTALE;
    sl_status rc = sl_shm_worker_push(w->shm, h->ticket, token, rec);
    if (rc == SL_OK) {
        /* finish back-dates admission by prompt_ms from here: the first generated
         * token, or with max_tokens 0 the last prompt record */
        if (h->n_emits++ < h->n_first)
            h->first_emit_ns = sl_shm_now_ns();
    } else if (rc == SL_ESTALE || rc == SL_ESTATE) {
        free(h->prompt);
        memset(h, 0, sizeof *h);
        return SL_ESTALE;
    }
    return rc;
}

static uint32_t io_ring_space(void *ctx, uint64_t id)
{
    worker *w = ctx;
    held *h = held_of(w, id);
    return h ? sl_shm_worker_ring_space(w->shm, h->ticket) : 0;
}

static void io_finish(void *ctx, uint64_t id, int reason, const char *error, const sl_sched_timings *t)
{
    sl_alloc_fault_end();   /* the sequence a sweep armed is over */
    worker *w = ctx;
    held *h = held_of(w, id);
    if (!h)
        return;
    sl_finish_reason r = reason == SL_SCHED_FINISH_STOP     ? SL_FINISH_REASON_STOP
                         : reason == SL_SCHED_FINISH_LENGTH ? SL_FINISH_REASON_LENGTH
                         : reason == SL_SCHED_FINISH_CANCELLED ? SL_FINISH_REASON_CANCELLED
                                                            : SL_FINISH_REASON_ERROR;
    /* The computation began prompt_ms before the first token reached the client. */
    if (h->first_emit_ns && t->prompt_ms > 0)
        sl_shm_worker_set_admitted(w->shm, h->ticket, h->first_emit_ns - (uint64_t)(t->prompt_ms * 1e6));
    if (t->n_lookup_tokens > 0) {
        sl_shm_counter_add(w->shm, SL_COUNTER_PREFIX_QUERY_TOKENS, (uint64_t)t->n_lookup_tokens);
        sl_shm_counter_add(w->shm, SL_COUNTER_PREFIX_HIT_TOKENS, (uint64_t)t->n_cached_tokens);
    }
    sl_shm_worker_finish(w->shm, h->ticket, r, error);   /* counts the request in the segment */
    free(h->prompt);
    memset(h, 0, sizeof *h);
}

static void io_admitted(void *ctx, uint64_t id, int32_t n_cached_tokens)
{
    worker *w = ctx;
    held *h = held_of(w, id);
    if (h && n_cached_tokens > 0)
        sl_shm_worker_set_cached(w->shm, h->ticket, (uint32_t)n_cached_tokens);
}

static bool io_cancelled(void *ctx, uint64_t id)
{
    worker *w = ctx;
    held *h = held_of(w, id);
    return !h || sl_shm_worker_cancelled(w->shm, h->ticket);
}

static void publish_snapshot(worker *w, const sl_sched_stats *st);

static void io_wait(void *ctx, uint64_t timeout_ns)
{
    worker *w = ctx;
    uint64_t now = sl_shm_now_ns();
    sl_shm_heartbeat(w->shm, now, 0);
    /* no step ran: cancellations and finishes since the last one still show */
    if (now - w->last_snapshot_ns >= SNAPSHOT_EVERY_NS / 4) {
        sl_sched_stats st;
        sl_sched_stats_get(w->sched, &st);
        publish_snapshot(w, &st);
        w->last_snapshot_ns = now;
    }
    sl_shm_worker_flush_wakeups(w->shm);
    if (stop_flag)
        return;
    sl_shm_worker_wait(w->shm, timeout_ns < IDLE_BEAT_NS ? timeout_ns : IDLE_BEAT_NS);
}

static uint64_t io_now(void *ctx)
{
    (void)ctx;
    return sl_shm_now_ns();
}

/* How long the next step may take before the master calls the worker wedged
 * (it adds --heartbeat-timeout-ms): sl_step_bound over the recent steps, so
 * a slow but progressing CPU prefill is not a wedge while a stopped worker
 * under steady decode load is seen within about twice its p99 step. The
 * worker beats twice per step: before it plans the step (the size is not
 * known yet: the recent steps' bound) and, in io_step_begin, with the bound
 * for the planned batch's token count. Before any step it guesses from the
 * model's size (first_step_bound). */
static uint64_t step_bound(const worker *w)
{
    return sl_step_bound_get(&w->bound, 0);
}

/* The first step's bound: a full token budget at FLOOR_FLOPS_PER_THREAD,
 * counting 2 flops per weight of the layers (the output layer runs for one
 * row per sequence only and is left out). */
static uint64_t first_step_bound(const sl_hparams *hp, int32_t token_budget, int n_threads)
{
    double q = (double)hp->n_head * hp->head_dim, kv = (double)hp->n_head_kv * hp->head_dim;
    /* a MoE layer: the router and the experts a token is routed to (plus a shared one) */
    double ffn = hp->n_expert > 0 ? (double)hp->n_embd * hp->n_expert +
                                        3.0 * hp->n_embd * ((double)hp->n_expert_used * hp->n_ff_exp + hp->n_ff_shexp)
                                  : 3.0 * hp->n_embd * hp->n_ff;
    double per_layer = (double)hp->n_embd * (2 * q + 2 * kv) + ffn;
    double flops = 2.0 * per_layer * hp->n_layer * token_budget;
    double s = flops / (FLOOR_FLOPS_PER_THREAD * (n_threads > 0 ? n_threads : 1));
    return s > 3600.0 ? 3600000000000ull : (uint64_t)(s * 1e9);
}

static void io_step_begin(void *ctx, int32_t n_seqs, int32_t n_tokens)
{
    worker *w = ctx;
    (void)n_seqs;
    sl_shm_heartbeat(w->shm, sl_shm_now_ns(), sl_step_bound_get(&w->bound, n_tokens));
}

static void io_step_done(void *ctx, const sl_sched_stats *st)
{
    worker *w = ctx;
    sl_step_bound_record(&w->bound, st->step_ns, st->step_tokens);
    if (st->grammar_mask_ns > w->grammar_mask_ns || st->n_constrained > w->n_constrained) {
        sl_shm_counter_add(w->shm, SL_COUNTER_GRAMMAR_MASK_NS, st->grammar_mask_ns - w->grammar_mask_ns);
        sl_shm_counter_add(w->shm, SL_COUNTER_GRAMMAR_REQUESTS, st->n_constrained - w->n_constrained);
        w->grammar_mask_ns = st->grammar_mask_ns;
        w->n_constrained = st->n_constrained;
    }
    sl_shm_heartbeat(w->shm, sl_shm_now_ns(), step_bound(w));
    sl_shm_worker_flush_wakeups(w->shm);
    uint64_t now = sl_shm_now_ns();
    if (now - w->last_snapshot_ns >= SNAPSHOT_EVERY_NS) {
        publish_snapshot(w, st);
        w->last_snapshot_ns = now;
    }
}

/* ------------------------------------------------------------------------ */
/* the loop: steps, or holding while paused                                  */

/* One tick while paused (admin `pause`): no forward, so held requests make
 * no progress, but cancellations end them and free slots take in new
 * requests exactly as a running worker would; the beat is an idle one, so
 * the master and /ready see a live worker. */
static void hold(worker *w)
{
    sl_sched_step_paused(w->sched);
    uint64_t now = sl_shm_now_ns();
    sl_shm_heartbeat(w->shm, now, 0);
    sl_shm_worker_flush_wakeups(w->shm);
    if (!w->paused || now - w->last_snapshot_ns >= SNAPSHOT_EVERY_NS / 4) {
        w->paused = true;   /* before publishing: the snapshot says "paused" from the first tick */
        sl_sched_stats st;
        sl_sched_stats_get(w->sched, &st);
        publish_snapshot(w, &st);
        w->last_snapshot_ns = now;
    }
    /* a plain sleep, not the doorbell: queued requests the full scheduler
     * cannot take would make the doorbell wait return at once */
    struct timespec ts = {0, (long)PAUSED_TICK_NS};
    nanosleep(&ts, NULL);
}

static void run(worker *w)
{
    while (!stop_flag) {
        if (sl_shm_paused(w->shm)) {
            hold(w);
            continue;
        }
        if (w->paused) {
            w->paused = false;
            sl_sched_stats st;
            sl_sched_stats_get(w->sched, &st);
            publish_snapshot(w, &st);
            w->last_snapshot_ns = sl_shm_now_ns();
        }
        /* A step may start a forward right away: beat with its bound first,
         * or a long step right after an idle beat (bound 0) would look
         * wedged after --heartbeat-timeout-ms. */
        sl_shm_heartbeat(w->shm, sl_shm_now_ns(), step_bound(w));
        if (sl_sched_step(w->sched) == SL_AGAIN && !stop_flag)
            io_wait(w, sl_sched_wait_ns(w->sched));
    }
}

/* ------------------------------------------------------------------------ */
/* effective-config                                                          */

static const char *source_name(uint32_t s)
{
    switch (s) {
    case SL_CONFIG_SOURCE_FILE: return "file";
    case SL_CONFIG_SOURCE_ENV: return "env";
    case SL_CONFIG_SOURCE_SEED_ALIAS: return "seed-alias";
    case SL_CONFIG_SOURCE_FLAG: return "flag";
    }
    return "default";
}

/* Where the max-seqs the scheduler runs with came from: the setting's
 * source, or "computed" when it was derived from the KV blocks. */
static const char *max_seqs_source(const worker *w)
{
    return w->kv.max_seqs_computed ? "computed" : source_name(w->cfg->source[SL_CFG_MAX_SEQS]);
}

/* A byte figure, or null for one that could not be read. */
static json_t *bytes_or_null(uint64_t v)
{
    return v == SL_KV_UNKNOWN ? json_null() : json_integer((json_int_t)v);
}

/* effective-config's kv_sizing: the pool, the bound that chose it, and
 * every input of the choice (docs/OPERATIONS.md, "The KV cache"). */
static json_t *kv_sizing_json(const worker *w)
{
    const sl_kv_sizing_in *in = &w->kv.in;
    const sl_config *c = w->cfg;
    uint64_t headroom = sl_kv_cgroup_headroom(in->cgroup_limit, in->cgroup_usage);
    json_t *inputs = json_pack("{s:I, s:I, s:I, s:I, s:o, s:o, s:I, s:o, s:f, s:{s:f, s:s}}",
                               "kv_memory", (json_int_t)in->flag_bytes,
                               "block_bytes", (json_int_t)in->block_bytes,
                               "need_bytes", (json_int_t)(in->need_blocks * in->block_bytes),
                               "min_bytes", (json_int_t)(in->min_blocks * in->block_bytes),
                               "mem_available", bytes_or_null(in->mem_available),
                               "cgroup_limit", bytes_or_null(in->cgroup_limit),
                               "cgroup_usage", (json_int_t)in->cgroup_usage,
                               "cgroup_headroom", bytes_or_null(headroom),
                               "host_fraction", in->fraction,
                               "gpu_memory_fraction", "value", c->gpu_memory_fraction,
                               "source", source_name(c->source[SL_CFG_GPU_MEMORY_FRACTION]));
    return json_pack("{s:I, s:i, s:I, s:s, s:o}", "bytes", (json_int_t)w->kv.bytes, "blocks", (int)w->kv.n_blocks,
                     "block_bytes", (json_int_t)(w->kv.n_blocks ? w->kv.bytes / w->kv.n_blocks : 0),
                     "bound", sl_kv_bound_name(w->kv.bound), "inputs", inputs);
}

/* A knob's value as the scheduler uses it, with the source of the setting
 * that gave it (the config knows file vs env, the scheduler does not). */
static json_t *knob_of(const worker *w, const sl_sched_knob *k, int key)
{
    return json_pack("{s:I, s:s}", "value", (json_int_t)k->value, "source",
                     key < 0 ? "default" : source_name(w->cfg->source[key]));
}
#define knob(k, key) knob_of(w, (k), (key))

static void publish_snapshot(worker *w, const sl_sched_stats *st)
{
    sl_sched_snapshot snap;
    sl_sched_snapshot_fill(w->sched, &snap);
    if (w->cfg->model_alias[0])   /* the name responses report: the list's first */
        snprintf(snap.model, sizeof snap.model, "%.*s", (int)strcspn(w->cfg->model_alias, ","),
                 w->cfg->model_alias);
    const sl_config *c = w->cfg;
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:s, s:i, s:i, s:i, "
                          "s:i, s:i, s:I, s:{s:i, s:s}, s:{s:I, s:s}}",
                          "kind", snap.kind, "model", snap.model, "backend", snap.backend,
                          "max_in_flight", knob(&snap.max_in_flight, SL_CFG_MAX_SEQS), "window_ms", knob(&snap.window_ms, SL_CFG_BATCH_WINDOW_MS),
                          "prefill_chunk_size", knob(&snap.prefill_chunk_size, SL_CFG_PREFILL_CHUNK),
                          "token_budget", knob(&snap.token_budget, SL_CFG_TOKEN_BUDGET),
                          "staggered_prefill", knob(&snap.staggered_prefill, SL_CFG_STAGGERED_PREFILL),
                          "ttft_trace", knob(&snap.ttft_trace, SL_CFG_TTFT_TRACE), "kv_block_size", knob(&snap.kv_block_size, -1),
                          "kv_blocks", knob(&snap.kv_blocks, SL_CFG_KV_MEMORY), "slots_admitted", snap.slots_admitted,
                          "admission_ceiling_reason", snap.admission_ceiling_reason,
                          "in_flight_now", snap.in_flight_now, "peak_in_flight", snap.peak_in_flight,
                          "queue_capacity", snap.queue_capacity, "n_vocab", snap.n_vocab, "n_ctx", snap.n_ctx,
                          "kv_bytes", (json_int_t)snap.kv_bytes,
                          "threads", "value", (int)c->threads, "source", source_name(c->source[SL_CFG_THREADS]),
                          "kv_memory", "value", (json_int_t)c->kv_memory, "source",
                          source_name(c->source[SL_CFG_KV_MEMORY]));
    if (o) {
        json_object_set_new(o, "prefix_cache", knob(&snap.prefix_cache, SL_CFG_PREFIX_CACHE));
        /* max_in_flight's source is the setting's unless the worker derived it */
        json_object_set_new(o, "max_seqs", json_pack("{s:i, s:s}", "value", (int)snap.max_in_flight.value,
                                                     "source", max_seqs_source(w)));
        if (w->kv.max_seqs_computed)
            json_object_set_new(o, "max_in_flight", json_pack("{s:i, s:s}", "value", (int)snap.max_in_flight.value,
                                                              "source", "computed"));
        json_object_set_new(o, "kv_type", json_pack("{s:s, s:s}", "value", sl_kv_type_name(w->kv.type), "source",
                                                    source_name(w->cfg->source[SL_CFG_KV_TYPE])));
        json_object_set_new(o, "kv_sizing", kv_sizing_json(w));
        json_object_set_new(o, "paused", json_boolean(w->paused));
        /* what the master allows the next step, before --heartbeat-timeout-ms */
        json_object_set_new(o, "step_bound_ms", json_integer((json_int_t)(step_bound(w) / 1000000)));
        json_object_set_new(o, "step_p99_ms", json_real(sl_step_bound_p99(&w->bound) / 1e6));
    }
    if (o && st) {
        json_object_set_new(o, "waiting_now", json_integer(st->n_waiting));
        json_object_set_new(o, "parked_now", json_integer(st->n_parked));
        json_object_set_new(o, "parkings", json_integer((json_int_t)st->n_parkings));
        json_object_set_new(o, "park_drops", json_integer((json_int_t)st->n_park_drops));
        json_object_set_new(o, "kv_blocks_free", json_integer(st->kv_blocks_free));
        json_object_set_new(o, "kv_blocks_total", json_integer(st->kv_blocks_total));
        json_object_set_new(o, "kv_blocks_touched", json_integer(st->kv_blocks_touched));
        json_object_set_new(o, "kv_blocks_used", json_integer(st->kv_blocks_total - st->kv_blocks_free));
        json_object_set_new(o, "kv_cache_usage", json_real(st->kv_blocks_total ?
            (double)(st->kv_blocks_total - st->kv_blocks_free) / st->kv_blocks_total : 0.0));
        json_object_set_new(o, "steps", json_integer((json_int_t)st->steps));
        json_object_set_new(o, "preemptions", json_integer((json_int_t)st->n_preemptions));
        json_object_set_new(o, "step_failures", json_integer((json_int_t)st->n_step_failures));
        json_object_set_new(o, "prefix_cache_blocks", json_integer(st->prefix.n_cached));
        json_object_set_new(o, "prefix_cache_evictable_blocks", json_integer(st->prefix.n_evictable));
        json_object_set_new(o, "prefix_cache_query_tokens", json_integer((json_int_t)st->prefix.query_tokens));
        json_object_set_new(o, "prefix_cache_hit_tokens", json_integer((json_int_t)st->prefix.hit_tokens));
        json_object_set_new(o, "prefix_cache_evictions", json_integer((json_int_t)st->prefix.n_evicted));
        json_object_set_new(o, "prefix_deferred", json_integer(st->n_deferred));
        json_object_set_new(o, "prefix_deferrals", json_integer((json_int_t)st->n_deferrals));
    }
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text)
        sl_shm_config_publish(w->shm, text, strlen(text));
    free(text);
    json_decref(o);
}

/* ------------------------------------------------------------------------ */
/* startup                                                                   */

/* The default --max-seqs: as many sequences as the KV pool holds at
 * TYPICAL_SEQ_TOKENS each (the context, if shorter), within
 * [MAX_SEQS_FLOOR, ceiling]; the ceiling is the setting's default (256,
 * vLLM's max_num_seqs), which also sized the mailbox pool in the master.
 * Longer sequences than typical simply preempt (docs/SCHEDULER.md section 5). */
static int32_t default_max_seqs(uint64_t n_blocks, int32_t n_ctx, uint32_t ceiling)
{
    uint64_t typical = n_ctx < TYPICAL_SEQ_TOKENS ? (uint64_t)n_ctx : TYPICAL_SEQ_TOKENS;
    uint64_t per_seq = (typical + SL_KV_BLOCK_TOKENS - 1) / SL_KV_BLOCK_TOKENS;
    uint64_t n = n_blocks / (per_seq ? per_seq : 1);
    if (n > ceiling)
        n = ceiling;
    if (n < MAX_SEQS_FLOOR)
        n = MAX_SEQS_FLOOR < ceiling ? MAX_SEQS_FLOOR : ceiling;
    return (int32_t)n;
}

static uint8_t sched_source(uint8_t s)
{
    switch (s) {
    case SL_CONFIG_SOURCE_FLAG: return SL_SCHED_SOURCE_FLAG;
    case SL_CONFIG_SOURCE_ENV: case SL_CONFIG_SOURCE_FILE: return SL_SCHED_SOURCE_ENV;
    case SL_CONFIG_SOURCE_SEED_ALIAS: return SL_SCHED_SOURCE_SEED_ALIAS;
    }
    return SL_SCHED_SOURCE_DEFAULT;
}

/* Sizes the KV pool and creates the backend (docs/OPERATIONS.md, "The KV
 * cache"). --kv-memory gives the bytes on every backend. Otherwise the CPU
 * pool is sized here, before create (it needs n_kv_blocks), from the
 * workload and the memory available to this process (kv_sizing.h); the
 * CUDA backend sizes its own from the device when given 0 blocks
 * (--gpu-memory-fraction), and the count it chose is read back from
 * be->cfg. "auto" says which backend it is only once create returns, so
 * it tries CUDA first with 0 blocks: without a usable GPU,
 * sl_backend_create falls back to the CPU, which refuses 0 blocks with
 * SL_EINVAL, and then the host pool is sized and the CPU backend created
 * here. A config CUDA itself refuses (SL_EINVAL: a K/V type it does not
 * store) meets the same CPU attempt, which refuses it as well (the CPU
 * stores a subset of CUDA's types), so it still stops startup.
 * The backend is created for the most sequences the scheduler may run (a
 * set max-seqs; else its ceiling, within the token budget); an unset
 * max-seqs is derived from the blocks afterwards. On failure *be is NULL,
 * err says why and w->kv.exit_code is the exit code. */
static sl_status size_and_create(worker *w, const sl_model *m, int32_t n_ctx, sl_sched_config *sc,
                                 sl_load_progress *lp, sl_backend **be, char err[SL_ERR_LEN])
{
    const sl_config *cfg = w->cfg;
    *be = NULL;
    w->kv.exit_code = SL_WORKER_EXIT_CONFIG;
    sl_kv_type type = SL_KV_TYPE_AUTO;
    (void)sl_kv_type_parse(cfg->kv_type, &type);   /* the master validated it; "" stays auto */
    bool seqs_set = cfg->source[SL_CFG_MAX_SEQS] != SL_CONFIG_SOURCE_DEFAULT;
    int32_t seq_cap = sc->max_seqs;   /* unset: the setting's default, its ceiling */
    if (!seqs_set && seq_cap > sc->token_budget)
        seq_cap = sc->token_budget;   /* a set budget wins over a computed default */
    if (seq_cap < 1)
        seq_cap = 1;
    if (sc->token_budget < seq_cap)
        sc->token_budget = seq_cap;
    uint64_t min_blocks = ((uint64_t)n_ctx + SL_KV_BLOCK_TOKENS - 1) / SL_KV_BLOCK_TOKENS;
    sl_kv_sizing_in *in = &w->kv.in;
    *in = (sl_kv_sizing_in){.block_bytes = sl_backend_kv_block_bytes(m, SL_KV_BLOCK_TOKENS, type),
                            .flag_bytes = cfg->kv_memory, .need_blocks = (uint64_t)seq_cap * min_blocks,
                            .min_blocks = min_blocks, .fraction = SL_KV_HOST_FRACTION};
    sl_kv_host_memory(&in->mem_available, &in->cgroup_limit, &in->cgroup_usage);

    const char *dev = cfg->device[0] ? cfg->device : "auto";
    sl_backend_config bc = {.device = dev, .n_threads = (int)(cfg->threads ? cfg->threads : 1),
                            .kv_block_size = SL_KV_BLOCK_TOKENS, .n_kv_blocks = 0,
                            .max_batch_tokens = sc->token_budget, .max_ctx = n_ctx, .max_batch_seqs = seq_cap,
                            .kv_type = type, .gpu_memory_fraction = cfg->gpu_memory_fraction};
    sl_status rc = SL_EINVAL;
    bool host = cfg->kv_memory || !strcmp(dev, "cpu");
    sl_kv_sizing hs = {0};
    if (cfg->kv_memory && strcmp(dev, "cpu") != 0) {
        /* The flag's bytes hold blocks of the type the backend stores, and
         * auto stores f16 on CUDA: size for CUDA and try it first; with
         * --device auto and no usable GPU (EUNSUPPORTED), the CPU path below
         * sizes again for f32. */
        sl_kv_sizing_in gin = *in;
        gin.block_bytes = sl_backend_kv_block_bytes(m, SL_KV_BLOCK_TOKENS,
                                                    type == SL_KV_TYPE_AUTO ? SL_KV_TYPE_F16 : type);
        if (sl_kv_size_host(&gin, &hs, err) < 0)
            return SL_EINVAL;
        bc.device = "cuda";
        bc.n_kv_blocks = (uint32_t)hs.n_blocks;
        sl_load_progress_stage(lp, !strcmp(dev, "auto") ? "looking for a CUDA device (%u KV blocks)"
                                                          : "creating the CUDA backend (%u KV blocks)", bc.n_kv_blocks);
        rc = sl_backend_create(m, &bc, be, err);
        if (rc >= 0 || rc != SL_EUNSUPPORTED || strcmp(dev, "auto") != 0) {
            host = false;   /* made, or a CUDA failure to report as it is */
            *in = gin;      /* effective-config shows the block size it was sized with */
        } else {
            bc.device = "cpu";
        }
    }
    if (!host && !cfg->kv_memory) {
        /* The CUDA backend uploads the weights inside this call (no finer
         * progress crosses the backend interface): the stage names the wait. */
        sl_load_progress_stage(lp, !strcmp(dev, "auto") ? "looking for a CUDA device (KV blocks from its memory)"
                                                          : "creating the cuda backend (KV blocks from device memory)");
        rc = sl_backend_create(m, &bc, be, err);
        if (rc == SL_EINVAL && !strcmp(dev, "auto")) {
            host = true;
            bc.device = "cpu";
        }
    }
    if (host) {
        if (sl_kv_size_host(in, &hs, err) < 0)
            return SL_EINVAL;
        bc.n_kv_blocks = (uint32_t)hs.n_blocks;
        sl_load_progress_stage(lp, "creating the %s backend (%u KV blocks)", bc.device, bc.n_kv_blocks);
        rc = sl_backend_create(m, &bc, be, err);
    }
    if (rc < 0) {
        *be = NULL;
        w->kv.exit_code = rc == SL_ENOMEM ? SL_WORKER_EXIT_FAILED : SL_WORKER_EXIT_CONFIG;
        return rc;
    }
    uint64_t blocks = (*be)->cfg.n_kv_blocks;
    if (blocks < min_blocks) {   /* the device's choice: a host pool always holds one sequence */
        snprintf(err, SL_ERR_LEN, "the %s backend's KV pool (%llu blocks, %llu MiB at --gpu-memory-fraction %.2f) "
                 "cannot hold one sequence of %d tokens (%llu blocks); raise --gpu-memory-fraction, set "
                 "--kv-memory or lower --ctx-size", (*be)->ops->name, (unsigned long long)blocks,
                 (unsigned long long)((*be)->kv_bytes >> 20), cfg->gpu_memory_fraction, n_ctx,
                 (unsigned long long)min_blocks);
        sl_backend_destroy(*be);
        *be = NULL;
        return SL_EINVAL;
    }
    if (blocks > SL_KV_BLOCKS_MAX)
        blocks = SL_KV_BLOCKS_MAX;   /* the scheduler may use fewer blocks than the backend has */
    sc->n_kv_blocks = (uint32_t)blocks;
    sc->source.n_kv_blocks = cfg->kv_memory ? sched_source(cfg->source[SL_CFG_KV_MEMORY]) : SL_SCHED_SOURCE_DEFAULT;
    if (!seqs_set)
        sc->max_seqs = default_max_seqs(blocks, n_ctx, (uint32_t)seq_cap);
    w->kv.bound = host || cfg->kv_memory ? hs.bound : SL_KV_BOUND_DEVICE;
    w->kv.n_blocks = sc->n_kv_blocks;
    w->kv.bytes = (*be)->kv_bytes;
    w->kv.type = (*be)->cfg.kv_type;
    w->kv.max_seqs_computed = !seqs_set;
    return SL_OK;
}

uint32_t sl_worker_default_threads(void)
{
    return (uint32_t)sl_cpu_quota_default_threads();
}

int sl_worker_main(const sl_config *cfg, const int *wake_fds, uint32_t n_fds)
{
    char err[SL_ERR_LEN];
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the master, even mid-step */
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sl_alloc_fault_init("worker");

    sl_shm_t *shm = sl_shm_attach(cfg->shm_name, SL_SHM_ROLE_WORKER, 0, err);
    if (!shm) {
        fprintf(stderr, "sluice worker: %s\n", err);
        return SL_WORKER_EXIT_FAILED;
    }
    sl_shm_set_eventfds(shm, wake_fds, n_fds);
    sl_shm_set_worker_state(shm, SL_WORKER_STATE_LOADING, NULL);
    sl_shm_heartbeat(shm, sl_shm_now_ns(), 0);

    int exit_code = SL_WORKER_EXIT_CONFIG;
    sl_model *m = NULL;
    sl_tokenizer *tok = NULL;
    sl_backend *be = NULL;
    sl_sched *sched = NULL;
    int32_t *eog = NULL;
    sl_constraint_vocab *gv = NULL;
    worker w = {.shm = shm, .cfg = cfg};
    sl_load_progress lp;
    sl_load_progress_init(&lp, stderr, isatty(STDERR_FILENO), "sluice worker");
    sl_load_progress_stage(&lp, "opening %.140s", cfg->model);
    if (sl_model_load(cfg->model, &m, err) < 0 || sl_tokenizer_create(m->gguf, &tok, err) < 0) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice worker: %s\n", err);
        goto out;
    }
    sl_load_progress_read_weights(&lp, m);
    w.model = m;
    int32_t n_ctx = cfg->ctx_size ? (int32_t)cfg->ctx_size : m->hp.n_ctx_train;
    if (n_ctx > m->hp.n_ctx_train)
        n_ctx = m->hp.n_ctx_train;
    int32_t n_eog = 0;
    eog = sl_malloc((size_t)m->hp.n_vocab * sizeof *eog);
    if (!eog) {   /* without the list no request would ever stop at end-of-generation */
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice worker: out of memory listing end-of-generation ids (%d tokens)\n", m->hp.n_vocab);
        exit_code = SL_WORKER_EXIT_FAILED;
        goto out;
    }
    for (int32_t id = 0; id < m->hp.n_vocab; id++)
        if (sl_tokenizer_is_eog(tok, id))
            eog[n_eog++] = id;
    /* constrained decoding's token trie: built at the first request with a grammar */
    if (sl_constraint_vocab_create(m->hp.n_vocab, eog, n_eog, sl_constraint_tokenizer_trie, tok, &gv) < 0) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice worker: out of memory for the grammar vocabulary\n");
        exit_code = SL_WORKER_EXIT_FAILED;
        goto out;
    }

    sl_sched_config sc;
    sl_sched_config_default(&sc);
#define KNOB(field, key, value) do { if (cfg->source[key] != SL_CONFIG_SOURCE_DEFAULT || (value)) { \
        sc.field = (value); sc.source.field = sched_source(cfg->source[key]); } } while (0)
    KNOB(max_seqs, SL_CFG_MAX_SEQS, (int32_t)cfg->max_seqs);
    KNOB(token_budget, SL_CFG_TOKEN_BUDGET, (int32_t)cfg->token_budget);
    KNOB(prefill_chunk, SL_CFG_PREFILL_CHUNK, (int32_t)cfg->prefill_chunk);
    KNOB(window_ms, SL_CFG_BATCH_WINDOW_MS, (int32_t)cfg->batch_window_ms);
    KNOB(staggered_prefill, SL_CFG_STAGGERED_PREFILL, cfg->staggered_prefill != 0);
    KNOB(ttft_trace, SL_CFG_TTFT_TRACE, cfg->ttft_trace != 0);
    KNOB(prefix_cache, SL_CFG_PREFIX_CACHE, cfg->prefix_cache != 0);
#undef KNOB
    sc.grammar_vocab = gv;
    sc.kv_block_size = SL_KV_BLOCK_TOKENS;
    if (size_and_create(&w, m, n_ctx, &sc, &lp, &be, err) < 0) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice worker: %s\n", err);
        exit_code = w.kv.exit_code;
        goto out;
    }
    sl_load_progress_done(&lp, "loaded %s (%.0f MiB of weights) on %s", m->name,
                          (double)m->weight_bytes / (1024.0 * 1024.0), be->ops->name);
    w.backend_name = be->ops->name;
    sl_step_bound_init(&w.bound, first_step_bound(&m->hp, sc.token_budget, be->cfg.n_threads));
    /* the scheduler holds what it can run, as many waiting again, and as
     * many parked (their consumers full) */
    w.n_held = (uint32_t)sc.max_seqs * 3;
    w.held = sl_calloc(w.n_held, sizeof *w.held);
    sl_sched_io io = {.ctx = &w, .poll = io_poll, .emit = io_emit, .finish = io_finish, .cancelled = io_cancelled,
                      .wait = io_wait, .now_ns = io_now, .step_done = io_step_done,
                      .step_begin = io_step_begin, .admitted = io_admitted, .ring_space = io_ring_space};
    if (!w.held || sl_sched_create(be, m->hp.n_vocab, n_ctx, eog, n_eog, &sc, &io, &sched, err) < 0) {
        fprintf(stderr, "sluice worker: %s\n", w.held ? err : "out of memory");
        goto out;
    }
    w.sched = sched;
    publish_snapshot(&w, NULL);
    sl_shm_set_worker_state(shm, SL_WORKER_STATE_READY, m->name);
    sl_shm_heartbeat(shm, sl_shm_now_ns(), 0);
    fprintf(stderr, "sluice worker: ready: %s on %s, %u KV blocks (%llu MiB of %s, bound: %s), %d threads, "
            "up to %d sequences (%s)\n", m->name, be->ops->name, sc.n_kv_blocks,
            (unsigned long long)(be->kv_bytes >> 20), sl_kv_type_name(w.kv.type), sl_kv_bound_name(w.kv.bound),
            be->cfg.n_threads, sc.max_seqs, max_seqs_source(&w));
    run(&w);
    exit_code = SL_WORKER_EXIT_OK;
out:
    sl_sched_destroy(sched);
    sl_constraint_vocab_destroy(gv);
    for (uint32_t i = 0; w.held && i < w.n_held; i++)
        free(w.held[i].prompt);
    free(w.held);
    free(eog);
    sl_backend_destroy(be);
    sl_tokenizer_destroy(tok);
    sl_model_destroy(m);
    sl_shm_detach(shm);
    return exit_code;
}
