/* kernels/cpu/cpu_backend.h: the CPU implementation of kernels/backend.h.
 * Threads from a sleeping pool, weights read in their GGUF types through
 * kernels/cpu/vec_dot.h (AVX2+FMA or portable, chosen at run time), matmul
 * inputs prepared as llama.cpp does (8-bit for quantized weights,
 * kernels/cpu/act_quant.h), float32 elsewhere and a float32 paged KV cache.
 * forward_sample draws each asked row with the reference sampler on the
 * same threads (kernels/cpu/sample_batch.h); the description is the
 * dot-product ISA chosen (sl_vec_dot_isa). */
#ifndef SL_CPU_BACKEND_H
#define SL_CPU_BACKEND_H

#include "kernels/backend.h"

sl_status sl_cpu_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out,
                                char err[SL_ERR_LEN]);

#endif
