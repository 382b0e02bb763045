/* tests/unit/gpu-worker/fake_io.c: see fake_io.h. */
#include "fake_io.h"

#include <string.h>

void fake_io_init(fake_io *f, fake_req *reqs, int n)
{
    memset(f, 0, sizeof *f);
    f->reqs = reqs;
    f->n_reqs = n;
    f->clock_limit_ns = 1000ull * 1000000000ull;
    for (int i = 0; i < n; i++) {
        reqs[i].req.id = (uint64_t)i;
        reqs[i].req.submit_ns = reqs[i].arrive_ns;
    }
}

static sl_status io_poll(void *ctx, sl_sched_request *out)
{
    fake_io *f = ctx;
    if (f->next >= f->n_reqs || f->reqs[f->next].arrive_ns > f->clock)
        return SL_AGAIN;
    fake_req *r = &f->reqs[f->next++];
    r->polled = true;
    *out = r->req;
    return SL_OK;
}

static sl_status io_emit(void *ctx, uint64_t id, int32_t token, const sl_logprob_record *rec)
{
    fake_io *f = ctx;
    fake_req *r = &f->reqs[id];
    if (r->again_count > 0 && r->n_tokens == r->again_at) {
        r->again_count--;
        return SL_AGAIN;
    }
    if (r->ring_cap > 0 && r->n_tokens - r->n_read >= r->ring_cap) {
        r->n_full++;
        return SL_AGAIN;
    }
    if (r->fail_emit_at > 0 && r->n_tokens == r->fail_emit_at - 1)
        return SL_EIO;
    r->n_records += rec != NULL;
    if (r->req.params.n_logprobs >= 0 && (!rec || rec->token != token))
        r->rec_missing = true;
    if (r->n_tokens < FAKE_MAX_TOKENS) {
        r->token_ns[r->n_tokens] = f->clock;
        r->tokens[r->n_tokens] = token;
        if (rec) {
            r->logprob[r->n_tokens] = rec->logprob;
            r->top_logprob[r->n_tokens] = rec->n_top > 0 ? rec->top[0].logprob : 0.0f;
            if (r->records)
                r->records[r->n_tokens] = *rec;
        }
    }
    r->n_tokens++;
    if (r->cancel_after > 0 && r->n_tokens >= r->cancel_after && !r->cancel) {
        r->cancel = true;
        r->cancel_step = f->steps;
    }
    return SL_OK;
}

/* The reader takes one entry of every small ring. */
static void ring_read(fake_io *f)
{
    for (int i = 0; i < f->n_reqs; i++)
        if (f->reqs[i].ring_cap > 0 && f->reqs[i].n_read < f->reqs[i].n_tokens)
            f->reqs[i].n_read++;
}

static uint32_t io_ring_space(void *ctx, uint64_t id)
{
    fake_io *f = ctx;
    fake_req *r = &f->reqs[id];
    if (r->ring_cap <= 0)
        return 1u << 20;
    int32_t used = r->n_tokens - r->n_read;
    return used < r->ring_cap ? (uint32_t)(r->ring_cap - used) : 0;
}

static void io_finish(void *ctx, uint64_t id, int reason, const char *error, const sl_sched_timings *t)
{
    fake_io *f = ctx;
    fake_req *r = &f->reqs[id];
    r->finished = true;
    r->reason = reason;
    r->t = *t;
    r->finish_ns = f->clock;
    r->finish_step = f->steps;
    if (error)
        strncpy(r->error, error, sizeof r->error - 1);
    if (++f->n_finished == f->n_reqs)
        f->stop = 1;
}

static bool io_cancelled(void *ctx, uint64_t id)
{
    fake_io *f = ctx;
    fake_req *r = &f->reqs[id];
    if (r->cancel_at_ns && f->clock >= r->cancel_at_ns && !r->cancel) {
        r->cancel = true;
        r->cancel_step = f->steps;
    }
    return r->cancel;
}

static void io_wait(void *ctx, uint64_t timeout_ns)
{
    fake_io *f = ctx;
    uint64_t until = f->clock + timeout_ns;
    if (f->next < f->n_reqs && f->reqs[f->next].arrive_ns < until)
        until = f->reqs[f->next].arrive_ns > f->clock ? f->reqs[f->next].arrive_ns : f->clock;
    f->clock = until;
    ring_read(f);
    if (f->clock > f->clock_limit_ns)
        f->stop = 1;
}

static uint64_t io_now(void *ctx)
{
    return ((fake_io *)ctx)->clock;
}

static void io_step_done(void *ctx, const sl_sched_stats *s)
{
    fake_io *f = ctx;
    if (f->steps < FAKE_MAX_STEPS) {
        f->stats[f->steps] = *s;
        f->step_end_ns[f->steps] = f->clock;
    }
    f->steps++;
    ring_read(f);
    if (f->steps > 10 * FAKE_MAX_STEPS)
        f->stop = 1;
}

sl_sched_io fake_io_table(fake_io *f)
{
    return (sl_sched_io){.ctx = f, .poll = io_poll, .emit = io_emit, .finish = io_finish, .cancelled = io_cancelled,
                         .wait = io_wait, .now_ns = io_now, .step_done = io_step_done,
                         .ring_space = io_ring_space};
}
