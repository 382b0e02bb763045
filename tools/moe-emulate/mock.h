/* tools/moe-emulate/mock.h: the CUDA features the MoE kernels use
 * (kernels/cuda/moe.cu, mmv_moe.cu and the mmv_dot.cuh code they run),
 * emulated on the host so their own source runs without a GPU (run.sh).
 * A block's threads are pthreads, one block at a time: __syncthreads is a
 * block barrier, __syncwarp a barrier of the thread's warp, shuffles and
 * __match_any_sync go through per-warp arrays between two warp barriers
 * (so every lane of the warp must call them, as the kernels do), shared
 * arrays are static (the dynamic one a static buffer), atomics are host
 * atomics.
 * What this cannot check: timing, the real scheduler's interleavings beyond
 * the barriers, shared-memory limits, register spills. */
#pragma once
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define EMU_MAX_WARPS 16
extern thread_local uint3 threadIdx, blockIdx;
extern pthread_barrier_t emu_block_bar, emu_warp_bar[EMU_MAX_WARPS];
extern uint64_t emu_xchg[EMU_MAX_WARPS][32];
/* a block's dynamic shared memory (extern __shared__, run.sh points it
 * here): the most an H200 block may opt in to */
#define EMU_DYN_SHARED_BYTES (227 * 1024)
extern float4 emu_dyn_shared[EMU_DYN_SHARED_BYTES / 16];

static inline void __syncthreads() { pthread_barrier_wait(&emu_block_bar); }
static inline void __syncwarp(unsigned = 0xffffffffu) { pthread_barrier_wait(&emu_warp_bar[threadIdx.x / 32]); }

/* lane l publishes v, then reads lane src's value */
template <class V>
static inline V emu_exchange(V v, int src)
{
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    emu_xchg[w][l] = b;
    __syncwarp();
    uint64_t r = emu_xchg[w][src & 31];
    __syncwarp();
    V out;
    memcpy(&out, &r, sizeof out);
    return out;
}
template <class V>
static inline V __shfl_xor_sync(unsigned, V v, int o) { return emu_exchange(v, (int)(threadIdx.x % 32) ^ o); }
template <class V>
static inline V __shfl_sync(unsigned, V v, int src) { return emu_exchange(v, src); }
template <class V>
static inline V __shfl_up_sync(unsigned, V v, unsigned o)
{
    int l = threadIdx.x % 32;
    V r = emu_exchange(v, l >= (int)o ? l - (int)o : l);
    return r;
}
static inline unsigned __match_any_sync(unsigned, int v)
{
    int w = threadIdx.x / 32;
    emu_xchg[w][threadIdx.x % 32] = (uint64_t)(uint32_t)v;
    __syncwarp();
    unsigned m = 0;
    for (int i = 0; i < 32; i++)
        if (emu_xchg[w][i] == (uint64_t)(uint32_t)v)
            m |= 1u << i;
    __syncwarp();
    return m;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
/* byte i of the result: byte (s >> 4i) & 7 of the 8 bytes y:x (x the low four) */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
