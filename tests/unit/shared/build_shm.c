/* The test build of shared/shm.c, compiled with its crash points (the library
 * sl_shared is built without them). This object defines the same symbols, so the
 * linker takes it instead of the archive member. */
#define SLUICE_CRASH_POINTS 1
#include "shared/shm.c"
