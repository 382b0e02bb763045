/* tests/seeded.h: reproducible pseudo-random test data (splitmix64), for the
 * C unit tests, the CUDA host checks and the tools that write test inputs
 * (quantdump, mkmodel).
 * Who:       any test or tool thread; the state is the caller's uint64_t.
 * Why here:  the Python reference tests read what quantdump writes, and the
 *            unit tests quantize the same kind of rows, so the one generator
 *            is defined once, without libc's rand state. Header-only (static
 *            inline, C and CUDA C++) so that it links into no library. */
#ifndef SL_SEEDED_H
#define SL_SEEDED_H

#include <math.h>
#include <stdint.h>

/* The next 64-bit word of the stream whose state is *s (advances *s). */
static inline uint64_t sl_seeded_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A float uniform in [-1, 1): 53 random bits, scaled. */
static inline float sl_seeded_uniform_pm1(uint64_t *s)
{
    return (float)((double)(sl_seeded_next(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* x[0..n) = N(0,1) samples of the stream seeded with `seed`, by Box-Muller:
 * each pair of words gives x[i] (cosine) and x[i+1] (sine). */
static inline void sl_seeded_normal(float *x, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(sl_seeded_next(&seed) >> 11) + 0.5) * 0x1p-53;
        double u2 = (double)(sl_seeded_next(&seed) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

#endif
