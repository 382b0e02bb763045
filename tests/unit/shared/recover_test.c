/* tests/unit/shared/recover_test.c: the master's recovery calls, step by step. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shared/shm_layout.h"
#include "shm_testlib.h"

static sl_shm_limits limits(void)
{
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 2;
    l.n_mailboxes = 8;
    l.submit_ring_entries = 8;
    l.token_ring_entries = 8;
    l.prompt_tokens_max = 64;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 32;
    return l;
}

static sl_status submit(sl_shm_t *fe, uint64_t rid, uint32_t n, sl_shm_ticket *t)
{
    int32_t prompt[64];
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = tl_token(rid, i);
    sl_shm_request req;
    memset(&req, 0, sizeof(req));
    sl_sampling_params_default(&req.params);
    req.request_id = rid;
    req.prompt = prompt;
    req.n_prompt = n;
    return sl_shm_submit(fe, &req, t);
}

Test(recover, worker_death_fails_taken_keeps_submitted)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "wd");
    sl_shm_limits l = limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    int efd = eventfd(0, EFD_NONBLOCK);
    int fds[2] = {efd, -1};
    sl_shm_set_eventfds(m, fds, 2);
    sl_shm_ticket a, b, wa;
    cr_assert_eq(submit(fe, 1, 20, &a), SL_OK);
    cr_assert_eq(submit(fe, 2, 20, &b), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(w, &wa), SL_OK);
    cr_assert_eq(wa.index, a.index);
    cr_assert_eq(sl_shm_worker_push(w, wa, 5, NULL), SL_OK);

    uint32_t failed = 0;
    cr_assert_eq(sl_shm_recover_worker_death(m, &failed), SL_OK);
    cr_assert_eq(failed, 1);
    uint64_t v = 0;
    cr_assert_eq(read(efd, &v, 8), 8, "front ends are woken");
    sl_shm_result_info res;
    sl_shm_result(fe, a, &res);
    cr_assert_eq(res.state, SL_MAILBOX_STATE_FAILED);
    cr_assert_eq(res.finish_reason, SL_FINISH_REASON_ERROR);
    cr_assert(strstr(res.error, "worker"), "%s", res.error);
    sl_shm_result(fe, b, &res);
    cr_assert_eq(res.state, SL_MAILBOX_STATE_SUBMITTED, "never taken: kept for the next worker");
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(m, &wi);
    cr_assert_eq(wi.worker_state, SL_WORKER_STATE_DEAD);
    cr_assert_eq(wi.worker_generation, 2);

    /* the old worker is stale now: its late writes are dropped */
    cr_assert_eq(sl_shm_worker_push(w, wa, 6, NULL), SL_ESTALE);
    sl_shm_ticket x;
    cr_assert_eq(sl_shm_worker_pop(w, &x), SL_ESTALE);

    /* the next worker takes b, never a */
    sl_shm_t *w2 = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    sl_shm_ticket wb;
    cr_assert_eq(sl_shm_worker_pop(w2, &wb), SL_OK);
    cr_assert_eq(wb.index, b.index);
    cr_assert_eq(sl_shm_worker_pop(w2, &x), SL_AGAIN);
    int32_t tok[8];
    uint32_t n;
    sl_mailbox_state st;
    cr_assert_eq(sl_shm_read_tokens(fe, a, tok, NULL, 8, &n, &st), SL_OK);
    cr_assert(n == 1 && tok[0] == 5 && st == SL_MAILBOX_STATE_FAILED);
    cr_assert_eq(sl_shm_release(fe, a), SL_OK);
    close(efd);
    sl_shm_detach(w2);
    sl_shm_detach(w);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
}

Test(recover, frontend_death_reclaims_and_orphans)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "fd");
    sl_shm_limits l = limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 1, err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    sl_shm_ticket run, sub, fin, wr, wf;
    cr_assert_eq(submit(fe, 1, 40, &run), SL_OK);
    cr_assert_eq(submit(fe, 2, 40, &fin), SL_OK);
    cr_assert_eq(submit(fe, 3, 40, &sub), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(w, &wr), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(w, &wf), SL_OK);
    cr_assert_eq(sl_shm_worker_finish(w, wf, SL_FINISH_REASON_STOP, NULL), SL_OK);

    uint32_t n = 0;
    cr_assert_eq(sl_shm_recover_frontend_death(m, 1, &n), SL_OK);
    cr_assert_eq(n, 3);
    sl_shm_census_info c;
    sl_shm_census(m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_FREE], 7);
    cr_assert_eq(c.orphans, 1);
    cr_assert_eq(c.blocks_free, 32 - 3, "only the running request keeps its blocks");
    cr_assert_eq(sl_shm_worker_cancelled(w, wr), 1, "the worker is told to stop");
    cr_assert_eq(sl_shm_worker_push(w, wr, 1, NULL), SL_OK, "harmless until it stops");
    cr_assert_eq(sl_shm_worker_finish(w, wr, SL_FINISH_REASON_CANCELLED, NULL), SL_OK);
    sl_shm_census(m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_FREE], 8, "the worker freed the orphan");
    cr_assert_eq(c.blocks_free, 32);

    /* the dead front end's handle is stale; its successor works */
    sl_shm_ticket x;
    cr_assert_eq(submit(fe, 9, 4, &x), SL_ESTALE);
    sl_shm_t *fe2 = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 1, err);
    cr_assert_eq(submit(fe2, 10, 4, &x), SL_OK);
    sl_shm_ticket wx;
    cr_assert_eq(sl_shm_worker_pop(w, &wx), SL_OK, "the stale entry is skipped");
    cr_assert_eq(wx.index, x.index);
    cr_assert_eq(sl_shm_recover_frontend_death(m, 2, &n), SL_ERANGE);
    sl_shm_detach(fe2);
    sl_shm_detach(fe);
    sl_shm_detach(w);
    sl_shm_destroy(m);
}

Test(recover, orphan_freed_by_worker_death_too)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "both");
    sl_shm_limits l = limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    sl_shm_ticket a, wa;
    cr_assert_eq(submit(fe, 1, 40, &a), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(w, &wa), SL_OK);
    sl_shm_recover_frontend_death(m, 0, NULL);
    uint32_t failed = 9;
    sl_shm_recover_worker_death(m, &failed);
    cr_assert_eq(failed, 0, "nobody to tell");
    sl_shm_census_info c;
    sl_shm_census(m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_FREE], 8);
    cr_assert_eq(c.blocks_free, 32);
    sl_shm_detach(fe);
    sl_shm_detach(w);
    sl_shm_destroy(m);
}

Test(recover, check_reports_broken_invariants)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "chk");
    sl_shm_limits l = limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_eq(sl_shm_check(m, 1, err), SL_OK, "%s", err);
    /* a FREE mailbox that still owns a block: what a death would leave before recovery */
    sl_header_shm *hdr = *(sl_header_shm **)m; /* the handle's first field is the mapping */
    _Atomic uint64_t *owners = (_Atomic uint64_t *)((char *)hdr + hdr->off_block_owners);
    atomic_store(&owners[3], ((uint64_t)0 << 32) | 1u);
    cr_assert_eq(sl_shm_check(m, 1, err), SL_EFORMAT);
    cr_assert(strstr(err, "block 3"), "%s", err);
    cr_assert_eq(sl_shm_check(m, 0, err), SL_OK, "not a violation while processes run");
    sl_shm_recover_frontend_death(m, 0, NULL);
    cr_assert_eq(sl_shm_check(m, 1, err), SL_OK, "the sweep freed it: %s", err);
    /* a malformed control word */
    struct sl_mailbox_shm *mbs = (struct sl_mailbox_shm *)((char *)hdr + hdr->off_mailboxes);
    atomic_store(&mbs[2].word, 0x77ull);
    cr_assert_eq(sl_shm_check(m, 0, err), SL_EFORMAT);
    cr_assert(strstr(err, "mailbox 2"), "%s", err);
    atomic_store(&mbs[2].word, ((uint64_t)SL_SHM_OWNER_NONE << 8));
    cr_assert_eq(sl_shm_check(m, 1, err), SL_OK, "%s", err);
    sl_shm_destroy(m);
}
