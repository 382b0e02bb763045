/* tools/mmvq-emulate/mock.h: the CUDA features of the integer small-batch
 * matmul (kernels/cuda/mmvq.cu and the mmv_dot.cuh loads it reuses)
 * emulated on the host: the threads, barriers and shuffles of
 * tools/moe-emulate/mock.h, plus the integer intrinsics (__dp4a, __vsub4)
 * and the rounding conversions the quantizer uses.
 * What this cannot check: timing, register spills, the real scheduler. */
#pragma once
#include "tools/moe-emulate/mock.h"

/* sum of the four signed byte products of a and b, plus c */
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}

/* per-byte a - b, each byte wrapping on its own */
static inline unsigned __vsub4(unsigned a, unsigned b)
{
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= ((((a >> (8 * i)) & 0xFF) - ((b >> (8 * i)) & 0xFF)) & 0xFF) << (8 * i);
    return r;
}

/* round to nearest, ties to even (the host's default rounding mode);
 * NaN gives 0 and out-of-range values saturate, as on the GPU */
static inline int __float2int_rn(float v)
{
    if (v != v)
        return 0;
    if (v >= 2147483647.0f)
        return 2147483647;
    if (v <= -2147483648.0f)
        return (int)0x80000000u;
    return (int)nearbyintf(v);
}
