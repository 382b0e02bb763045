/* tests/unit/shared/queue_depth_test.c: the submission ring holds exactly
 * limits.submit_queue_depth requests even though the ring itself is a power of
 * two, the limit is validated, and the pause flag round-trips. */
#include <criterion/criterion.h>
#include <string.h>

#include "shared/sampling.h"
#include "shared/shm.h"
#include "shm_testlib.h"

static sl_status submit_one(sl_shm_t *fe, uint64_t rid, sl_shm_ticket *t)
{
    int32_t prompt[4] = {1, 2, 3, 4};
    sl_shm_request req;
    memset(&req, 0, sizeof req);
    sl_sampling_params_default(&req.params);
    req.max_tokens = 1;
    req.request_id = rid;
    req.prompt = prompt;
    req.n_prompt = 4;
    return sl_shm_submit(fe, &req, t);
}

static sl_shm_limits limits_with_depth(uint32_t ring, uint32_t depth)
{
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 1;
    l.n_mailboxes = 64;
    l.submit_ring_entries = ring;
    l.submit_queue_depth = depth;
    l.prompt_tokens_max = 64;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 128;
    return l;
}

/* Submits until SL_AGAIN; returns how many went in. */
static uint32_t fill(sl_shm_t *fe)
{
    sl_shm_ticket t;
    uint32_t n = 0;
    while (n < 1000 && submit_one(fe, n, &t) == SL_OK)
        n++;
    return n;
}

Test(queue_depth, ring_holds_exactly_the_depth_not_the_power_of_two)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof name, "qdepth");
    sl_shm_limits l = limits_with_depth(8, 5);
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert(fe && w, "%s", err);
    cr_assert_eq(fill(fe), 5);
    cr_assert_eq(sl_shm_counter_get(m, SL_COUNTER_REQUESTS_REJECTED_FULL), 1);
    /* the worker takes two: exactly two more fit */
    sl_shm_ticket t;
    cr_assert_eq(sl_shm_worker_pop(w, &t), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(w, &t), SL_OK);
    cr_assert_eq(fill(fe), 2);
    sl_shm_detach(w);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
}

Test(queue_depth, zero_means_the_whole_ring)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof name, "qdepth0");
    sl_shm_limits l = limits_with_depth(4, 0);
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err);
    cr_assert_not_null(fe, "%s", err);
    cr_assert_eq(fill(fe), 4);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
}

Test(queue_depth, deeper_than_the_ring_is_refused)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof name, "qdeep");
    sl_shm_limits l = limits_with_depth(4, 5);
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert(strstr(err, "submit_queue_depth"), "%s", err);
}

Test(queue_depth, pause_flag_is_shared)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof name, "pause");
    sl_shm_limits l = limits_with_depth(4, 3);
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(w, "%s", err);
    cr_assert_eq(sl_shm_paused(w), 0);
    sl_shm_set_paused(m, 1);
    cr_assert_eq(sl_shm_paused(w), 1);
    /* a worker death does not clear it: the successor starts paused */
    sl_shm_recover_worker_death(m, NULL);
    sl_shm_t *w2 = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(w2, "%s", err);
    cr_assert_eq(sl_shm_paused(w2), 1);
    sl_shm_set_paused(m, 0);
    cr_assert_eq(sl_shm_paused(w2), 0);
    sl_shm_detach(w2);
    sl_shm_detach(w);
    sl_shm_destroy(m);
}
