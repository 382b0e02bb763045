/* tests/unit/shared/threads_test.c: the threaded harness under criterion (ASan
 * in CI); tools/tsan-shared.sh runs the same harness under ThreadSanitizer. */
#include <criterion/criterion.h>

#include "threads_harness.h"

Test(threads, producers_worker_and_readers, .timeout = 120)
{
    char why[512];
    cr_assert(tl_threads_run(why, sizeof(why)), "%s", why);
}
