/* kernels/cpu/threadpool.h: a fixed pool of compute threads for the CPU
 * backend.
 * Who:     one caller thread (the worker's scheduler loop) submits a parallel
 *          loop at a time; the caller takes part in the work.
 * Safety:  tasks are claimed from an atomic counter, so which thread runs a
 *          task varies run to run: a task must compute the same bytes
 *          whichever thread runs it (each writes only its own outputs).
 * Idle:    after a job, workers spin ~20 us (a decode step issues several
 *          jobs back to back), yield the core until ~200 us, then sleep on
 *          a futex, so an idle server leaves its cores to the front ends.
 * Oversubscribed: the caller waits for the job's tasks, not for every
 *          worker to check in, and waits the same bounded way, so a
 *          descheduled worker delays a job only by a task it holds. */
#ifndef SL_THREADPOOL_H
#define SL_THREADPOOL_H

#include <stdint.h>

#include "shared/status.h"

typedef struct sl_threadpool sl_threadpool;

/* Runs task(ctx, i) for i in [0, n_tasks). `thread` is the index of the
 * thread running it, in [0, n_threads): for per-thread scratch. */
typedef void (*sl_task_fn)(void *ctx, int64_t i, int thread);

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started. */
sl_status sl_threadpool_create(int n_threads, sl_threadpool **out);
void sl_threadpool_destroy(sl_threadpool *p);
int sl_threadpool_size(const sl_threadpool *p);

/* Runs the loop and returns when every task has finished. Blocks. */
void sl_threadpool_run(sl_threadpool *p, sl_task_fn fn, void *ctx, int64_t n_tasks);

#endif
