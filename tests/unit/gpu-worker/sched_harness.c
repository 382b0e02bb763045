/* tests/unit/gpu-worker/sched_harness.c: see sched_harness.h. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "sched_harness.h"

void sched_harness_run(sched_harness *h)
{
    while (!h->io->stop) {   /* sl_sched_run, checking the invariants after every step */
        sl_status rc = sl_sched_step(h->s);
        cr_assert(sl_sched_check(h->s), "step %llu", (unsigned long long)h->io->steps);
        if (rc == SL_AGAIN && !h->io->stop)
            fake_io_table(h->io).wait(h->io, sl_sched_wait_ns(h->s));
    }
    cr_assert_eq(h->io->n_finished, h->io->n_reqs, "every request finishes");
}

void sched_harness_close(sched_harness *h)
{
    sl_sched_stats st;
    sl_sched_stats_get(h->s, &st);
    cr_assert_eq(st.kv_blocks_free, st.kv_blocks_total, "every block is back after the run");
    sl_sched_destroy(h->s);
    fake_backend_fini(&h->be);
    free(h->io);
}
