/* tests/unit/shared/shm_testlib.c: the echo worker and checking client (see header). */
#include "shm_testlib.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void tl_name(char *buf, size_t cap, const char *tag) { snprintf(buf, cap, "/sluice-test-%d-%s", (int)getpid(), tag); }

static void seq_remove(tl_worker *tw, int k) { tw->seqs[k] = tw->seqs[--tw->n]; }

int tl_worker_step(tl_worker *tw)
{
    int acts = 0;
    while (tw->n < TL_SEQS_MAX) {
        sl_shm_ticket t;
        sl_status rc = sl_shm_worker_pop(tw->w, &t);
        if (rc == SL_ESTALE)
            return -1;
        if (rc != SL_OK)
            break;
        acts++;
        tl_seq *s = &tw->seqs[tw->n];
        uint32_t n_prompt = 0;
        if (sl_shm_request_get(tw->w, t, NULL, NULL, NULL, NULL, NULL, &n_prompt) < 0 || n_prompt > TL_PROMPT_MAX ||
            sl_shm_prompt_copy(tw->w, t, 0, n_prompt, s->prompt) < 0) {
            sl_shm_worker_finish(tw->w, t, SL_FINISH_REASON_ERROR, "bad request");
            tw->finished++;
            continue;
        }
        s->t = t;
        s->n_prompt = n_prompt;
        s->pos = 0;
        tw->n++;
    }
    for (int k = 0; k < tw->n;) {
        tl_seq *s = &tw->seqs[k];
        if (sl_shm_worker_cancelled(tw->w, s->t)) {
            sl_shm_worker_finish(tw->w, s->t, SL_FINISH_REASON_CANCELLED, NULL);
            tw->finished++;
            seq_remove(tw, k);
            acts++;
            continue;
        }
        sl_status rc = SL_OK;
        for (uint32_t i = 0; i < tw->per_step && s->pos < s->n_prompt; i++) {
            sl_logprob_record rec;
            memset(&rec, 0, sizeof(rec));
            rec.token = s->prompt[s->pos];
            rec.logprob = -(float)s->pos;
            rec.n_top = 1;
            rec.top[0].token = rec.token;
            rc = sl_shm_worker_push(tw->w, s->t, s->prompt[s->pos], &rec);
            if (rc != SL_OK)
                break;
            s->pos++;
            acts++;
        }
        if (rc < 0) {
            seq_remove(tw, k); /* stale: not ours any more */
            continue;
        }
        if (s->pos == s->n_prompt) {
            sl_shm_worker_finish(tw->w, s->t, SL_FINISH_REASON_STOP, NULL);
            tw->finished++;
            seq_remove(tw, k);
            acts++;
            continue;
        }
        k++;
    }
    sl_shm_worker_flush_wakeups(tw->w);
    return acts;
}

static void fail(tl_client *c, const char *fmt, uint64_t a, uint64_t b, uint64_t d)
{
    if (c->errors++ == 0)
        snprintf(c->why, sizeof(c->why), fmt, (unsigned long long)a, (unsigned long long)b, (unsigned long long)d);
}

int tl_client_step(tl_client *c)
{
    int acts = 0;
    int32_t toks[32];
    sl_logprob_record recs[32];
    uint32_t max_out = c->max_out ? c->max_out : TL_OUT_MAX;
    for (uint32_t k = 0; k < max_out; k++) {
        tl_out *o = &c->out[k];
        if (!o->active)
            continue;
        for (;;) {
            uint32_t n = 0;
            sl_mailbox_state st;
            sl_status rc = sl_shm_read_tokens(c->fe, o->t, toks, recs, 32, &n, &st);
            if (rc < 0) {
                fail(c, "read_tokens rid %llu: status %lld (%llu)", o->rid, (uint64_t)(int64_t)rc, 0);
                o->active = 0;
                c->completed++;
                break;
            }
            for (uint32_t i = 0; i < n; i++) {
                if (o->got >= o->n_prompt || toks[i] != tl_token(o->rid, o->got))
                    fail(c, "rid %llu token %llu: got %llu", o->rid, o->got, (uint64_t)(uint32_t)toks[i]);
                else if (sl_shm_get_limits(c->fe)->logprobs && recs[i].token != toks[i])
                    fail(c, "rid %llu token %llu: record of %llu", o->rid, o->got, (uint64_t)(uint32_t)recs[i].token);
                o->got++;
            }
            c->tokens += n;
            acts += n > 0;
            if (n == 32)
                continue;
            if (st == SL_MAILBOX_STATE_FINISHED || st == SL_MAILBOX_STATE_FAILED || st == SL_MAILBOX_STATE_CANCELLED) {
                sl_shm_result_info res;
                sl_shm_result(c->fe, o->t, &res);
                if (st == SL_MAILBOX_STATE_FINISHED) {
                    c->finished++;
                    if (o->got != o->n_prompt)
                        fail(c, "rid %llu finished with %llu of %llu tokens", o->rid, o->got, o->n_prompt);
                    if (res.timings.n_generated != o->n_prompt)
                        fail(c, "rid %llu n_generated %llu of %llu", o->rid, res.timings.n_generated, o->n_prompt);
                } else if (st == SL_MAILBOX_STATE_FAILED) {
                    c->failed++;
                } else {
                    c->cancelled++;
                }
                rc = sl_shm_release(c->fe, o->t);
                if (rc < 0)
                    fail(c, "release rid %llu: status %lld (%llu)", o->rid, (uint64_t)(int64_t)rc, 0);
                o->active = 0;
                c->completed++;
                acts++;
            }
            break;
        }
    }
    for (uint32_t k = 0; k < max_out && c->submitted < c->to_submit; k++) {
        tl_out *o = &c->out[k];
        if (o->active)
            continue;
        uint64_t rid = c->rid_base + c->submitted;
        uint32_t n_prompt = 1 + (uint32_t)((rid * 7919u) % c->prompt_max);
        int32_t prompt[TL_PROMPT_MAX];
        for (uint32_t i = 0; i < n_prompt; i++)
            prompt[i] = tl_token(rid, i);
        sl_shm_request req;
        memset(&req, 0, sizeof(req));
        sl_sampling_params_default(&req.params);
        req.max_tokens = (int32_t)n_prompt;
        req.request_id = rid;
        req.prompt = prompt;
        req.n_prompt = n_prompt;
        sl_status rc = sl_shm_submit(c->fe, &req, &o->t);
        if (rc == SL_AGAIN) {
            c->rejected++;
            break;
        }
        if (rc < 0) {
            fail(c, "submit rid %llu: status %lld (%llu)", rid, (uint64_t)(int64_t)rc, 0);
            break;
        }
        o->rid = rid;
        o->n_prompt = n_prompt;
        o->got = 0;
        o->active = 1;
        c->submitted++;
        acts++;
        if (c->cancel_every && rid % c->cancel_every == 0)
            sl_shm_cancel(c->fe, o->t);
    }
    return acts;
}
