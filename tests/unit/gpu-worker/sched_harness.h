/* tests/unit/gpu-worker/sched_harness.h: one scheduler under test with its
 * fake backend and fake io, shared by the scheduler test files. Each file
 * opens it its own way (its backend costs, io callbacks, prompts); running
 * and closing are the same everywhere: the run ends with every request
 * finished, the scheduler's invariants held and every KV block back. */
#ifndef SL_TEST_SCHED_HARNESS_H
#define SL_TEST_SCHED_HARNESS_H

#include "fake_backend.h"
#include "fake_io.h"
#include "gpu-worker/scheduler.h"

typedef struct {
    fake_backend be;
    fake_io *io;      /* heap: large; freed by sched_harness_close */
    sl_sched *s;
} sched_harness;

/* Runs until the fake io stops, as sl_sched_run does; asserts sl_sched_check
 * after every step and that every scripted request finished. */
void sched_harness_run(sched_harness *h);

/* Asserts no block is held, then destroys the scheduler, the backend and
 * the io. */
void sched_harness_close(sched_harness *h);

#endif
