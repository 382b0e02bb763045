/* kernels/cpu/threadpool.c: fork-join loop over a fixed set of threads.
 * A job is published under a new generation; every thread claims task
 * indices for that generation until they run out, and the thread finishing
 * the last task ends the job. The caller waits for the tasks to be done,
 * not for the workers to check in: a worker that never got a core during a
 * job (the machine is oversubscribed) costs that job nothing.
 * Trade-off: waiting is bounded spinning, then sched_yield, then a futex.
 * Spinning bridges the microseconds between the jobs of one forward pass
 * on an idle machine; on an oversubscribed one it would burn the time slice
 * a descheduled peer needs to finish its task, so it stops early and hands
 * the core over. Which tasks exist and what each computes never depends on
 * the waiting, so results stay bitwise the same at any thread count. */
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/threadpool.h"

/* Waiting, in three stages: pause-spin for SPIN_NS (the gap between the
 * jobs of one step is a few microseconds), then sched_yield until YIELD_NS
 * (a peer on this core runs; on an idle machine yield returns at once, so
 * this is still a spin), then sleep on the futex until woken. */
#define SPIN_NS 20000
#define YIELD_NS 200000
#define CLOCK_EVERY 64   /* pause iterations between clock reads */

/* The claim word: generation in the high 32 bits, next task index in the
 * low 32 (a job has fewer than 2^32 tasks). A claim is a CAS that fails
 * once the generation moved on, so a worker that slept through a job can
 * never take a task of the next one with the old job's function. */
#define CLAIM(gen, i) (((uint64_t)(gen) << 32) | (uint64_t)(i))

struct sl_threadpool {
    int n_threads;
    pthread_t *threads;
    _Alignas(64) _Atomic uint32_t generation;   /* the current job; futex word the workers sleep on */
    _Alignas(64) _Atomic uint64_t claim;        /* CLAIM(generation, next task index): every claim writes it */
    _Alignas(64) _Atomic int64_t done;          /* tasks of the current job finished */
    _Atomic uint32_t finished;     /* generation of the last job finished; futex word the caller sleeps on */
    _Atomic int sleepers;          /* workers in (or entering) futex_wait on generation */
    _Atomic int caller_sleeping;   /* the caller is in (or entering) futex_wait on finished */
    _Atomic int stop;
    _Atomic(sl_task_fn) fn;        /* the job: atomics because a late worker may read them as the next job is set */
    _Atomic(void *) ctx;
    _Atomic int64_t n_tasks;
};

typedef struct { sl_threadpool *p; int index; } worker_arg;

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One waiting round: returns 1 to keep spinning or yielding, 0 once the
 * caller should sleep. *t0 is 0 before the first round. */
static int wait_round(uint64_t *t0, int *spins)
{
    if (++*spins % CLOCK_EVERY) {
        cpu_relax();
        return 1;
    }
    uint64_t t = now_ns();
    if (!*t0)
        *t0 = t;
    if (t - *t0 < SPIN_NS) {
        cpu_relax();
        return 1;
    }
    if (t - *t0 < YIELD_NS) {
        sched_yield();
        return 1;
    }
    return 0;
}

/* Claims and runs tasks of job gen until none is left (or the job is
 * over), then counts them into `done` at once (one shared write per thread
 * and job, not per task); the thread that brings `done` to n_tasks marks
 * the job finished and wakes a sleeping caller. */
static void run_tasks(sl_threadpool *p, uint32_t gen, int thread)
{
    int64_t ran = 0, n = 0;
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        /* acquire: a count of a newer job brings that job's claim word with it, so the CAS below fails */
        n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
        if ((uint32_t)(c >> 32) != gen || (int64_t)(uint32_t)c >= n)
            break;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        /* The job cannot end before this thread counts its tasks in, so
         * fn, ctx and n_tasks are still this job's. */
        sl_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        fn(atomic_load_explicit(&p->ctx, memory_order_relaxed), (int64_t)(uint32_t)c, thread);
        ran++;
    }
    if (ran && atomic_fetch_add_explicit(&p->done, ran, memory_order_acq_rel) + ran == n) {
        atomic_store_explicit(&p->finished, gen, memory_order_seq_cst);
        if (atomic_load_explicit(&p->caller_sleeping, memory_order_seq_cst))
            futex_wake_all(&p->finished);
    }
}

static void *worker_main(void *argp)
{
    worker_arg *arg = argp;
    sl_threadpool *p = arg->p;
    int index = arg->index;
    free(arg);
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen;
        uint64_t t0 = 0;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_relaxed))
                return NULL;
            if (!wait_round(&t0, &spins)) {
                /* announce, then re-check: a publisher that bumped generation
                 * before seeing us count ourselves in makes futex_wait return */
                atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
                futex_wait(&p->generation, seen);
                atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
                t0 = 0;
                spins = 0;
            }
        }
        seen = gen;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            return NULL;
        run_tasks(p, gen, index);
    }
}

sl_status sl_threadpool_create(int n_threads, sl_threadpool **out)
{
    *out = NULL;
    if (n_threads < 1)
        return SL_EINVAL;
    sl_threadpool *p = aligned_alloc(64, sizeof *p);   /* the hot words sit on their own cache lines */
    if (!p)
        return SL_ENOMEM;
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return SL_ENOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || pthread_create(&p->threads[i], NULL, worker_main, (*a = (worker_arg){p, i}, a)) != 0) {
            free(a);
            p->n_threads = i;   /* destroy joins the ones started */
            sl_threadpool_destroy(p);
            return SL_ENOMEM;
        }
    }
    *out = p;
    return SL_OK;
}

void sl_threadpool_destroy(sl_threadpool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->generation, 1);
    futex_wake_all(&p->generation);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}

int sl_threadpool_size(const sl_threadpool *p)
{
    return p->n_threads;
}

void sl_threadpool_run(sl_threadpool *p, sl_task_fn fn, void *ctx, int64_t n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (p->n_threads == 1 || n_tasks == 1 || n_tasks >= (int64_t)UINT32_MAX) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    /* Only the caller writes these, and no task of the previous job is
     * still running (run returned after all were done). But a worker that
     * woke late for the previous job may still be in run_tasks for it,
     * between reading the claim word and its CAS. So the claim word moves
     * to the new generation first, and n_tasks is published after it
     * (release; run_tasks reads it with acquire): a late worker that sees
     * the new count also fails its CAS, instead of taking the new job's
     * tasks under the old generation (they would run twice, and `done`
     * would pass n_tasks without ever equalling it: the caller would wait
     * forever). */
    uint32_t gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->claim, CLAIM(gen, 0), memory_order_relaxed);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&p->generation, gen, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst))
        futex_wake_all(&p->generation);
    run_tasks(p, gen, 0);
    /* Wait for tasks other threads still hold, never for workers that hold
     * none: spin, yield (a descheduled peer may be waiting for this core),
     * then sleep until the thread finishing the last task wakes us. */
    uint64_t t0 = 0;
    int spins = 0;
    while (atomic_load_explicit(&p->finished, memory_order_acquire) != gen) {
        if (wait_round(&t0, &spins))
            continue;
        /* announce, then re-check (as the workers do on generation); the
         * word holds the previous job's generation until this one ends */
        atomic_store_explicit(&p->caller_sleeping, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->finished, memory_order_seq_cst) != gen)
            futex_wait(&p->finished, gen - 1);
        atomic_store_explicit(&p->caller_sleeping, 0, memory_order_relaxed);
        t0 = 0;
        spins = 0;
    }
}
