/* shared/alloc.h: sluice's host allocation calls, with fault injection by
 * countdown (SQLite src/test_malloc.c).
 * Where:  every per-request allocation of the front ends and the worker (and
 *         the model code they call: template, jinja, tokenizer); jansson is
 *         routed here too (sl_alloc_jansson). Startup allocations may use it.
 * Rule:   sl_malloc/sl_calloc/sl_realloc/sl_strdup behave as their libc names
 *         (free with free()) until armed; an armed countdown makes its Nth call
 *         return NULL once, and then it is off again.
 * Arming: SLUICE_FAIL_ALLOC="ROLE:N" or "ROLE:N+" (ROLE is frontend or
 *         worker), read once per process by sl_alloc_fault_init(ROLE). The
 *         process calls sl_alloc_fault_begin() as a request starts (a front end
 *         when a generation request arrives, the worker when it admits a
 *         sequence): that arms the countdown for the request's allocations, so
 *         startup is never counted. "N": only the first request is armed, at
 *         N. "N+": requests 1, 3, 5, ... are armed at N, N+1, N+2, ... and the
 *         requests between run unarmed, so one server sweeps N and checks that
 *         it still serves after each failure. Each injected failure writes one
 *         line "sluice: injected allocation failure role=ROLE n=N" to stderr.
 * Cost:   compiled in always: an unarmed call is one relaxed atomic load and a
 *         predictable branch before malloc; the release binary is the one the
 *         sweep tests. */
#ifndef SL_ALLOC_H
#define SL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

void *sl_malloc(size_t n);
void *sl_calloc(size_t count, size_t size);
void *sl_realloc(void *p, size_t n);
char *sl_strdup(const char *s);

/* How many calls have returned NULL in this process (injected or real). A
 * caller of a library that cannot tell out-of-memory from bad input
 * (jansson's parser) compares it before and after. */
unsigned sl_alloc_nulls(void);

/* Reads SLUICE_FAIL_ALLOC for ROLE ("frontend", "worker"); no-op when unset or
 * naming another role. Call once, single-threaded, at process start. */
void sl_alloc_fault_init(const char *role);

/* A request starts: arms the countdown for it, or disarms it (see above). */
void sl_alloc_fault_begin(void);

/* The request ends: a countdown it did not use up is dropped, so nothing
 * between two requests (the next connection's accept, a probe) is counted.
 * The sweep sends one request at a time, so the request ending is the one
 * that began. */
void sl_alloc_fault_end(void);

/* Between hold(true) and hold(false) this thread's calls are neither counted
 * nor failed: for a library that cannot survive a failure at that point
 * (jansson's parser, see frontend/api_request.c). Nests. */
void sl_alloc_fault_hold(bool on);

/* Tests: fail the Nth call from now (0: off), and the number of failures
 * injected so far in this process. */
void sl_alloc_fail_after(int n);
int sl_alloc_failures(void);

/* Makes jansson allocate through sl_malloc (json_set_alloc_funcs). It lives in
 * the callers' libraries (frontend/api_json.c) since shared/ is libc only. */

#endif
