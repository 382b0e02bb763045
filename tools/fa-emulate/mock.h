/* tools/fa-emulate/mock.h: the CUDA features kernels/cuda/attention_fa.cu
 * uses, emulated on the host, so the kernel's own source runs without a GPU
 * (run.sh). A block's 128 threads are pthreads: __syncthreads and __syncwarp
 * are barriers, shuffles go through a per-warp array, cp.async is a plain
 * copy, __shared__ storage is static (one block runs at a time).
 * wmma: a matrix_a/matrix_b fragment holds the whole 16 x 16 matrix in every
 * lane; an accumulator holds 8 elements per lane in the sm_80 mma.sync
 * layout, which the kernel must not assume (it finds rows through its row
 * map), so a kernel that did would be caught only if it assumed another.
 * What this cannot check: the real fragment layouts, asynchronous copies in
 * flight (a missing wait), timing, shared-memory limits. */
#pragma once
#include <pthread.h>
#include <math.h>
#include <string.h>
#include <stdint.h>
#include <algorithm>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
using std::min; using std::max;
struct emu_dim { unsigned x, y, z; };
extern thread_local emu_dim threadIdx, blockIdx;
extern emu_dim gridDim;
extern pthread_barrier_t emu_block_bar, emu_warp_bar[4];
static inline void __syncthreads() { pthread_barrier_wait(&emu_block_bar); }
static inline void __syncwarp(unsigned = 0xffffffffu) { pthread_barrier_wait(&emu_warp_bar[threadIdx.x / 32]); }
extern float emu_shfl_f[4][32]; extern int emu_shfl_i[4][32];
static inline float __shfl_xor_sync(unsigned, float v, int o) {
  int w = threadIdx.x / 32, l = threadIdx.x % 32; emu_shfl_f[w][l] = v; __syncwarp(); float r = emu_shfl_f[w][l ^ o]; __syncwarp(); return r; }
static inline double __shfl_xor_sync(unsigned, double v, int o) { return v; }
static inline int __shfl_xor_sync(unsigned, int v, int o) {
  int w = threadIdx.x / 32, l = threadIdx.x % 32; emu_shfl_i[w][l] = v; __syncwarp(); int r = emu_shfl_i[w][l ^ o]; __syncwarp(); return r; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
#define __expf(a) expf(a)
static inline void __pipeline_memcpy_async(void *d, const void *s, size_t n) { memcpy(d, s, n); }
static inline void __pipeline_commit() {}
static inline void __pipeline_wait_prior(int) {}
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class L = void> struct fragment;
// a/b: each lane keeps the whole 16x16 matrix (as floats of the f16 values)
template <class Use, class L> struct fragment<Use, 16, 16, 16, __half, L> { float m[16][16]; enum { num_elements = 16 }; __half x[16]; };
// accumulator: the sm80 mma layout, 8 elements per lane
template <> struct fragment<accumulator, 16, 16, 16, float, void> { enum { num_elements = 8 }; float x[8]; };
static inline void emu_rc(int i, int &r, int &c) {
  int l = threadIdx.x % 32, g = l / 4, t = l % 4;
  r = g + ((i & 2) ? 8 : 0); c = 2 * t + (i & 1) + ((i & 4) ? 8 : 0); }
template <class Use, class L> static inline void load_matrix_sync(fragment<Use, 16, 16, 16, __half, L> &f, const __half *p, unsigned ld) {
  bool rowm = std::is_same<L, row_major>::value;
  for (int r = 0; r < 16; r++) for (int c = 0; c < 16; c++) f.m[r][c] = __half2float(rowm ? p[r * ld + c] : p[c * ld + r]);
  __syncwarp(); }
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float, void> &f, const float *p, unsigned ld, layout_t) {
  for (int i = 0; i < 8; i++) { int r, c; emu_rc(i, r, c); f.x[i] = p[r * ld + c]; } __syncwarp(); }
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float, void> &f, unsigned ld, layout_t) {
  __syncwarp(); for (int i = 0; i < 8; i++) { int r, c; emu_rc(i, r, c); p[r * ld + c] = f.x[i]; } __syncwarp(); }
static inline void fill_fragment(fragment<accumulator, 16, 16, 16, float, void> &f, float v) { for (int i = 0; i < 8; i++) f.x[i] = v; }
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float, void> &d, const fragment<matrix_a, 16, 16, 16, __half, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __half, LB> &b, const fragment<accumulator, 16, 16, 16, float, void> &c) {
  for (int i = 0; i < 8; i++) { int r, cc; emu_rc(i, r, cc); float s = c.x[i];
    for (int k = 0; k < 16; k++) s = fmaf(a.m[r][k], b.m[k][cc], s); d.x[i] = s; } }
}}
