/* frontend/jobs.c: the front end's tokenize pool. Rendering a chat template
 * and tokenizing (and /tokenize, /detokenize) are pure and can take seconds on
 * a body of a few MB; run on the event loop they would stall every connection
 * of the process, /health included. So requests above SL_FE_JOBS_INLINE_MAX
 * body bytes run that step on one of --tokenize-threads threads, and the loop
 * continues the request (limits, submit, respond) when the result comes back.
 * Runs in each front-end process: the loop submits and finishes jobs, the
 * pool threads only run job->work.
 * The trade-off: a mutex-guarded FIFO plus an eventfd that the loop watches
 * like the worker's wake fd (h2o_multithread_queue would do the same with a
 * pipe, but its teardown is tied to the loop's; ours is joined explicitly in
 * sl_fe_jobs_destroy). Small bodies stay inline: a thread round trip costs
 * tens of microseconds, more than tokenizing a short prompt.
 *
 * Invariants:
 *   1. h2o objects (the request, its pool, generators, sockets) and every
 *      mutable sl_fe field are touched on the loop thread only. job->work
 *      sees a const sl_fe and reads what is fixed after start (cfg, tok,
 *      tmpl, bos/eos text, n_vocab, limits), plus what the job owns.
 *   2. A job owns its inputs (the body is copied) and its outputs; it never
 *      points into the request. The request knows its job through a ref
 *      allocated in the request's pool: when h2o tears the request down
 *      (on_ref_dispose) the job is orphaned (_req = NULL, _cancelled set),
 *      and its result is discarded when it arrives.
 *   3. Before job->done continues a live request, the ref is cut (ref->job =
 *      NULL): a response may dispose the request synchronously, and the
 *      dispose must then not touch the job that done is freeing.
 *   4. fe->n_jobs counts jobs whose request still waits (the live list);
 *      the drain waits for them, and at its deadline sl_fe_jobs_abort_all
 *      answers them 503 and orphans them.
 * States: queued (todo) -> running (a thread) -> done (done list, eventfd
 * written) -> finished (on_jobs_done calls job->done, which frees it). A
 * cancelled job skips work. sl_fe_jobs_destroy joins the threads and hands
 * every job still queued or done to job->done with req NULL. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <jansson.h>

#include "frontend/server_internal.h"
#include "shared/alloc.h"

struct sl_fe_jobs {
    sl_fe *fe;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sl_fe_job *todo_head, *todo_tail;   /* FIFO, under mu */
    sl_fe_job *done_head, *done_tail;   /* FIFO, under mu */
    bool stop;                          /* under mu: threads exit, queued jobs stay queued */
    pthread_t threads[SL_FE_JOBS_THREADS_MAX];
    uint32_t n_threads;
    h2o_socket_t *sock;                 /* the eventfd, watched by the loop */
    sl_fe_job *live;                    /* loop only: jobs whose request waits (doubly linked) */
};

/* Lives in the request's pool; the request's link to its job. */
typedef struct {
    sl_fe_job *job;                     /* NULL once cut (invariant 3) */
} job_ref;

static void push(sl_fe_job **head, sl_fe_job **tail, sl_fe_job *job)
{
    job->_next = NULL;
    if (*tail != NULL)
        (*tail)->_next = job;
    else
        *head = job;
    *tail = job;
}

/* ================================================================ pool threads */

static void *thread_main(void *arg)
{
    sl_fe_jobs *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->todo_head == NULL)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        sl_fe_job *job = p->todo_head;
        p->todo_head = job->_next;
        if (p->todo_head == NULL)
            p->todo_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        if (!atomic_load_explicit(&job->_cancelled, memory_order_relaxed))
            job->work(p->fe, job);
        pthread_mutex_lock(&p->mu);
        push(&p->done_head, &p->done_tail, job);
        uint64_t one = 1;
        /* A full counter (2^64 - 2 writes unread) cannot happen; EAGAIN would still leave the fd readable. */
        if (write(h2o_socket_get_fd(p->sock), &one, sizeof one) < 0 && errno != EAGAIN)
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": jobs: write(eventfd): %s\n", p->fe->slot, strerror(errno));
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ================================================================ loop side */

static void live_unlink(sl_fe_jobs *p, sl_fe_job *job)
{
    if (job->_live_prev != NULL)
        job->_live_prev->_live_next = job->_live_next;
    else
        p->live = job->_live_next;
    if (job->_live_next != NULL)
        job->_live_next->_live_prev = job->_live_prev;
    job->_live_prev = job->_live_next = NULL;
    p->fe->n_jobs--;
}

/* Cuts the job from its request (both ways); returns the request. */
static h2o_req_t *detach(sl_fe_jobs *p, sl_fe_job *job)
{
    h2o_req_t *req = job->_req;
    if (req == NULL)
        return NULL;
    ((job_ref *)job->_ref)->job = NULL;
    job->_ref = NULL;
    job->_req = NULL;
    live_unlink(p, job);
    return req;
}

static void on_ref_dispose(void *arg)
{
    job_ref *ref = arg;
    sl_fe_job *job = ref->job;
    if (job == NULL)
        return;
    atomic_store_explicit(&job->_cancelled, true, memory_order_relaxed);
    detach(job->_pool, job);
}

static void on_jobs_done(h2o_socket_t *sock, const char *err)
{
    sl_fe_jobs *p = sock->data;
    (void)err;
    uint64_t v;
    while (read(h2o_socket_get_fd(sock), &v, sizeof v) == (ssize_t)sizeof v) {
    }
    pthread_mutex_lock(&p->mu);
    sl_fe_job *list = p->done_head;
    p->done_head = p->done_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (list != NULL) {
        sl_fe_job *job = list;
        list = job->_next;
        h2o_req_t *req = detach(p, job);
        job->done(p->fe, job, req);
    }
    sl_fe_conn_rearm_all(p->fe);
}

void sl_fe_jobs_create(sl_fe *fe)
{
    uint32_t n = fe->cfg->tokenize_threads;
    fe->jobs = NULL;
    if (n == 0)
        return;
    if (n > SL_FE_JOBS_THREADS_MAX)
        n = SL_FE_JOBS_THREADS_MAX;
    /* jansson seeds its hash function on the first object; do it here, before
     * any thread parses (json_object_seed sets the seed only once). */
    json_object_seed(0);
    sl_fe_jobs *p = sl_calloc(1, sizeof *p);
    int efd = p != NULL ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
    if (efd < 0) {
        fprintf(stderr, "sluice-fe slot=%" PRIu32 ": jobs: %s: %s; tokenizing on the event loop\n", fe->slot,
                p == NULL ? "calloc" : "eventfd", strerror(p == NULL ? ENOMEM : errno));
        free(p);
        return;
    }
    p->fe = fe;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->sock = h2o_evloop_socket_create(fe->loop, efd, H2O_SOCKET_FLAG_DONT_READ);
    p->sock->data = p;
    h2o_socket_read_start(p->sock, on_jobs_done);
    /* Pool threads take no signals: the loop's signalfd is the one reader. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (uint32_t i = 0; i < n; i++) {
        int rc = pthread_create(&p->threads[i], NULL, thread_main, p);
        if (rc != 0) {
            fprintf(stderr, "sluice-fe slot=%" PRIu32 ": jobs: pthread_create: %s (%" PRIu32 " of %" PRIu32
                    " threads)\n", fe->slot, strerror(rc), i, n);
            break;
        }
        p->n_threads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fe->jobs = p;
    if (p->n_threads == 0)
        sl_fe_jobs_destroy(fe);   /* inline from here on */
}

bool sl_fe_jobs_wanted(const sl_fe *fe, size_t bytes)
{
    return fe->jobs != NULL && bytes >= SL_FE_JOBS_INLINE_MAX;
}

sl_fe_job *sl_fe_jobs_new(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, size_t size)
{
    size_t len = req->entity.base ? req->entity.len : 0;
    bool offload = sl_fe_jobs_wanted(fe, len);
    sl_fe_job *job = sl_calloc(1, size);
    char *copy = offload && job != NULL ? sl_malloc(len ? len : 1) : NULL;
    if (job == NULL || (offload && copy == NULL)) {
        free(job);
        sl_api_error e;
        sl_api_error_set(&e, SL_API_ERR_INTERNAL, NULL, "out of memory");
        sl_fe_respond_error(fe, req, ri, &e);
        return NULL;
    }
    job->ri = *ri;
    job->len = len;
    job->_offload = offload;
    if (offload) {
        memcpy(copy, req->entity.base, len);
        job->body = job->body_owned = copy;
    } else {
        job->body = req->entity.base ? req->entity.base : "";
    }
    return job;
}

void sl_fe_jobs_run(sl_fe *fe, h2o_req_t *req, sl_fe_job *job)
{
    if (!job->_offload || fe->jobs == NULL) {
        job->work(fe, job);
        job->done(fe, job, req);
        return;
    }
    sl_fe_jobs *p = fe->jobs;
    job_ref *ref = h2o_mem_alloc_shared(&req->pool, sizeof *ref, on_ref_dispose);
    ref->job = job;
    job->_pool = p;
    job->_ref = ref;
    job->_req = req;
    atomic_init(&job->_cancelled, false);
    job->_live_prev = NULL;
    job->_live_next = p->live;
    if (p->live != NULL)
        p->live->_live_prev = job;
    p->live = job;
    fe->n_jobs++;
    pthread_mutex_lock(&p->mu);
    push(&p->todo_head, &p->todo_tail, job);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void sl_fe_jobs_abort_all(sl_fe *fe, const char *why)
{
    sl_fe_jobs *p = fe->jobs;
    if (p == NULL)
        return;
    while (p->live != NULL) {
        sl_fe_job *job = p->live;
        atomic_store_explicit(&job->_cancelled, true, memory_order_relaxed);
        h2o_req_t *req = detach(p, job);
        sl_api_error e;
        sl_api_error_set(&e, SL_API_ERR_UNAVAILABLE, NULL, "%s", why);
        e.code = "shutting_down";
        e.retry_after_s = 1;
        sl_fe_respond_error(fe, req, &job->ri, &e);   /* the job itself finishes later, orphaned */
    }
}

void sl_fe_jobs_destroy(sl_fe *fe)
{
    sl_fe_jobs *p = fe->jobs;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    /* A running job is not interruptible: this waits for it (seconds at most,
     * bounded by the body limit and the template's render deadline). */
    for (uint32_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    sl_fe_job *lists[2] = {p->done_head, p->todo_head};
    for (int l = 0; l < 2; l++) {
        while (lists[l] != NULL) {
            sl_fe_job *job = lists[l];
            lists[l] = job->_next;
            detach(p, job);
            job->done(fe, job, NULL);
        }
    }
    h2o_socket_read_stop(p->sock);
    h2o_socket_close(p->sock);   /* closes the eventfd */
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    fe->jobs = NULL;
}
