/* shared/crash.c: numbered crash points for the crash-sweep tests.
 * Runs in: any process of a test build (SLUICE_CRASH_POINTS defined); in other
 * builds arming is a no-op and SL_CRASH_POINT compiles to nothing.
 * Trade-off: SIGKILL (not abort) so nothing of the dying process runs after the
 * point: no atexit, no sanitizer report, exactly what a kill -9 or an OOM kill does. */
#include <signal.h>
#include <unistd.h>

#include "shared/shm_impl.h"

#ifdef SLUICE_CRASH_POINTS
static _Atomic int crash_point;
static _Atomic uint32_t crash_countdown;

void sl_shm_crash_hit(int point)
{
    if (atomic_load_explicit(&crash_point, memory_order_relaxed) == point &&
        atomic_fetch_sub_explicit(&crash_countdown, 1, memory_order_relaxed) == 1)
        kill(getpid(), SIGKILL);
}

void sl_shm_crash_arm(int point, uint32_t nth)
{
    atomic_store(&crash_countdown, nth);
    atomic_store(&crash_point, point);
}

int sl_shm_crash_points_enabled(void) { return 1; }
#else
void sl_shm_crash_arm(int point, uint32_t nth)
{
    (void)point;
    (void)nth;
}

int sl_shm_crash_points_enabled(void) { return 0; }
#endif
