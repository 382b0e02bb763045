/* kernels/cpu/threadpool.c: fork-join loop over a fixed set of threads.
 * A job is published by bumping `generation` (and waking sleepers); every
 * thread claims task indices from `next` until they run out and counts
 * itself out through `pending`. The caller waits for pending == 0. */
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/threadpool.h"

/* Spin iterations before a worker sleeps; ~50 us on current x86. Long
 * enough to bridge the gap between the jobs of one forward pass. */
#define SPIN_BEFORE_SLEEP 20000

struct sl_threadpool {
    int n_threads;
    pthread_t *threads;
    _Atomic uint32_t generation;   /* bumped per job; futex word */
    _Atomic int64_t next;          /* next task index to claim */
    _Atomic int pending;           /* workers still inside the current job */
    _Atomic int stop;
    sl_task_fn fn;
    void *ctx;
    int64_t n_tasks;
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

static void run_tasks(sl_threadpool *p, int thread)
{
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks)
            break;
        p->fn(p->ctx, i, thread);
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
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_relaxed))
                return NULL;
            if (++spins < SPIN_BEFORE_SLEEP)
                cpu_relax();
            else
                futex_wait(&p->generation, seen);
        }
        seen = gen;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            return NULL;
        run_tasks(p, index);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

sl_status sl_threadpool_create(int n_threads, sl_threadpool **out)
{
    *out = NULL;
    if (n_threads < 1)
        return SL_EINVAL;
    sl_threadpool *p = calloc(1, sizeof *p);
    if (!p)
        return SL_ENOMEM;
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
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    futex_wake_all(&p->generation);
    run_tasks(p, 0);
    /* Wait for the stragglers; yield once spinning stops paying, so that on
     * an oversubscribed machine a descheduled worker gets the core back. */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < SPIN_BEFORE_SLEEP)
            cpu_relax();
        else
            sched_yield();
    }
}
