/* tests/unit/kernels/threadpool_test.c: kernels/cpu/threadpool.c, the
 * fork-join pool: every task of every job runs exactly once, with its own
 * job's function, also with more threads than CPUs (late workers) and with
 * pauses long enough for every thread to fall asleep between jobs, and
 * with a worker that wakes late for a small job while the next, larger one
 * is being published. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/threadpool.h"

typedef struct {
    _Atomic int *hits;    /* (n_tasks) */
    int job;
    _Atomic int *wrong;   /* a task ran with another job's context */
    int n_threads;
} job_ctx;

static void count_task(void *ctxp, int64_t i, int thread)
{
    job_ctx *c = ctxp;
    if (thread < 0 || thread >= c->n_threads)
        atomic_fetch_add(c->wrong, 1);
    atomic_fetch_add(&c->hits[i], 1 + 1000 * c->job);
}

static void run_jobs(int n_threads, int n_jobs, int sleep_every)
{
    sl_threadpool *p;
    cr_assert_eq(sl_threadpool_create(n_threads, &p), SL_OK);
    cr_assert_eq(sl_threadpool_size(p), n_threads);
    _Atomic int wrong = 0;
    _Atomic int *hits = calloc(4096, sizeof *hits);
    for (int job = 0; job < n_jobs; job++) {
        int64_t n = 1 + (job * 37) % 700;
        for (int64_t i = 0; i < n; i++)
            atomic_store(&hits[i], 0);
        job_ctx c = {hits, job % 7, &wrong, n_threads};
        sl_threadpool_run(p, count_task, &c, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(atomic_load(&hits[i]), 1 + 1000 * (job % 7), "job %d task %lld", job, (long long)i);
        if (sleep_every && job % sleep_every == 0) {   /* every worker goes to the futex */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert_eq(atomic_load(&wrong), 0);
    free(hits);
    sl_threadpool_destroy(p);
}

Test(threadpool, every_task_runs_once_per_job)
{
    run_jobs(2, 2000, 0);
    run_jobs(4, 2000, 0);
}

Test(threadpool, more_threads_than_cpus_still_finish_every_job)
{
    run_jobs(16, 1000, 0);
}

Test(threadpool, jobs_after_the_workers_fell_asleep)
{
    run_jobs(3, 200, 1);
    run_jobs(8, 200, 7);
}

/* A worker that woke late for a 2-task job could read its exhausted claim
 * word, then the next job's larger n_tasks, and claim the new tasks under
 * the old generation: they ran twice and the job's done count passed
 * n_tasks without equalling it, so the caller slept forever (seen in
 * `sluice generate -t 2` on a loaded 2-core machine; this loop hung 1 run
 * in 4 there before the claim word moved first). Alternating 2 and up to
 * 200 tasks with more threads than CPUs makes late workers common. */
static void small_then_large(int n_threads, int n_jobs)
{
    sl_threadpool *p;
    cr_assert_eq(sl_threadpool_create(n_threads, &p), SL_OK);
    _Atomic int wrong = 0;
    _Atomic int *hits = calloc(256, sizeof *hits);
    for (int job = 0; job < n_jobs; job++) {
        int64_t n = job & 1 ? 2 : 2 + (job * 37) % 200;
        for (int64_t i = 0; i < 256; i++)
            atomic_store(&hits[i], 0);
        job_ctx c = {hits, 0, &wrong, n_threads};
        sl_threadpool_run(p, count_task, &c, n);
        for (int64_t i = 0; i < 256; i++)
            if (atomic_load(&hits[i]) != (i < n))
                cr_assert_fail("job %d (%lld tasks): task %lld ran %d times", job, (long long)n, (long long)i,
                         atomic_load(&hits[i]));
    }
    cr_assert_eq(atomic_load(&wrong), 0);
    free(hits);
    sl_threadpool_destroy(p);
}

Test(threadpool, a_late_worker_never_takes_the_next_jobs_tasks, .timeout = 120)
{
    small_then_large(8, 200000);
    small_then_large(3, 200000);
}

Test(threadpool, one_thread_and_empty_jobs)
{
    run_jobs(1, 50, 0);
    sl_threadpool *p;
    cr_assert_eq(sl_threadpool_create(0, &p), SL_EINVAL);
    cr_assert_null(p);
    cr_assert_eq(sl_threadpool_create(3, &p), SL_OK);
    sl_threadpool_run(p, count_task, NULL, 0);   /* no task: fn never called */
    sl_threadpool_destroy(p);
}
