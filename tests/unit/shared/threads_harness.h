/* tests/unit/shared/threads_harness.h: the threaded harness (threads_harness.c). */
#ifndef SL_THREADS_HARNESS_H
#define SL_THREADS_HARNESS_H

#include <stddef.h>

/* Runs P front-end threads x K requests against an echo worker thread over one
 * mapping. Returns 1 if every stream was exact and the pool ended full; else 0
 * with `why` filled. */
int tl_threads_run(char *why, size_t cap);

#endif
