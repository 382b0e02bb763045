/* shared/alloc.c: the allocation wrappers and their countdown (alloc.h).
 * Trade-off: one process-wide countdown, atomic so that helper threads of a
 * front end count too; the sweep sends one request at a time, so the
 * allocations counted are that request's. */
#include "shared/alloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int countdown;     /* 0: off */
static atomic_int failures;
static atomic_uint nulls;         /* calls that returned NULL, injected or real */
static const char *fault_role;   /* NULL: not configured */
static int fault_n;              /* the first armed request's N */
static bool fault_step;          /* "N+": sweep, one armed request in two */
static unsigned long requests;   /* requests begun (event-loop thread only) */
static _Thread_local int held;   /* > 0: this thread's calls are not counted */

static bool fires(void)
{
    if (__builtin_expect(atomic_load_explicit(&countdown, memory_order_relaxed) == 0, 1) || held)
        return false;
    int left = atomic_fetch_sub(&countdown, 1);
    if (left != 1) {
        if (left <= 0)
            atomic_fetch_add(&countdown, 1);    /* another thread took the last one */
        return false;
    }
    int n = atomic_fetch_add(&failures, 1) + 1;
    char line[128];
    int len = snprintf(line, sizeof line, "sluice: injected allocation failure role=%s n=%d\n",
                       fault_role ? fault_role : "test", n);
    if (len > 0 && write(2, line, (size_t)len) < 0) {
        /* stderr gone: nothing to report to */
    }
    return true;
}

static void *counted(void *p)
{
    if (p == NULL)
        atomic_fetch_add_explicit(&nulls, 1, memory_order_relaxed);
    return p;
}

void *sl_malloc(size_t n)
{
    return counted(fires() ? NULL : malloc(n));
}

void *sl_calloc(size_t count, size_t size)
{
    return counted(fires() ? NULL : calloc(count, size));
}

void *sl_realloc(void *p, size_t n)
{
    return counted(fires() ? NULL : realloc(p, n));
}

char *sl_strdup(const char *s)
{
    return counted(fires() ? NULL : strdup(s));
}

unsigned sl_alloc_nulls(void)
{
    return atomic_load_explicit(&nulls, memory_order_relaxed);
}

void sl_alloc_fault_init(const char *role)
{
    const char *v = getenv("SLUICE_FAIL_ALLOC");
    size_t rl = strlen(role);
    if (v == NULL || strncmp(v, role, rl) != 0 || v[rl] != ':')
        return;
    char *end;
    long n = strtol(v + rl + 1, &end, 10);
    if (n <= 0 || n > 1000000 || (*end != '\0' && strcmp(end, "+") != 0)) {
        fprintf(stderr, "sluice: SLUICE_FAIL_ALLOC=%s: want %s:N or %s:N+ (N >= 1); ignored\n", v, role, role);
        return;
    }
    fault_role = role;
    fault_n = (int)n;
    fault_step = *end == '+';
    fprintf(stderr, "sluice: allocation fault injection armed role=%s n=%d%s\n", role, fault_n,
            fault_step ? " (sweep)" : "");
}

void sl_alloc_fault_begin(void)
{
    if (__builtin_expect(fault_role == NULL, 1))
        return;
    unsigned long k = requests++;
    int n = 0;
    if (fault_step && k % 2 == 0)
        n = fault_n + (int)(k / 2);
    else if (!fault_step && k == 0)
        n = fault_n;
    atomic_store(&countdown, n);
}

void sl_alloc_fault_end(void)
{
    if (__builtin_expect(fault_role == NULL, 1))
        return;
    atomic_store(&countdown, 0);
}

void sl_alloc_fault_hold(bool on)
{
    held += on ? 1 : -1;
}

void sl_alloc_fail_after(int n)
{
    atomic_store(&countdown, n > 0 ? n : 0);
}

int sl_alloc_failures(void)
{
    return atomic_load(&failures);
}
