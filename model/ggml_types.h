/* model/ggml_types.h: the tensor element types of the GGUF format.
 * Where:  model/, kernels/, tools/ (a pure table, no state).
 * The ids are GGUF's (ggml's `enum ggml_type`); a type is stored in blocks of
 * `block_elems` elements taking `block_bytes` bytes. Every type GGUF defines
 * is listed so the reader can size any tensor; sl_ggml_type_supported() says
 * which ones the engine computes with. */
#ifndef SL_GGML_TYPES_H
#define SL_GGML_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sl_ggml_type {
    SL_GGML_TYPE_F32     = 0,
    SL_GGML_TYPE_F16     = 1,
    SL_GGML_TYPE_Q4_0    = 2,
    SL_GGML_TYPE_Q4_1    = 3,
    SL_GGML_TYPE_Q5_0    = 6,
    SL_GGML_TYPE_Q5_1    = 7,
    SL_GGML_TYPE_Q8_0    = 8,
    SL_GGML_TYPE_Q8_1    = 9,
    SL_GGML_TYPE_Q2_K    = 10,
    SL_GGML_TYPE_Q3_K    = 11,
    SL_GGML_TYPE_Q4_K    = 12,
    SL_GGML_TYPE_Q5_K    = 13,
    SL_GGML_TYPE_Q6_K    = 14,
    SL_GGML_TYPE_Q8_K    = 15,
    SL_GGML_TYPE_IQ2_XXS = 16,
    SL_GGML_TYPE_IQ2_XS  = 17,
    SL_GGML_TYPE_IQ3_XXS = 18,
    SL_GGML_TYPE_IQ1_S   = 19,
    SL_GGML_TYPE_IQ4_NL  = 20,
    SL_GGML_TYPE_IQ3_S   = 21,
    SL_GGML_TYPE_IQ2_S   = 22,
    SL_GGML_TYPE_IQ4_XS  = 23,
    SL_GGML_TYPE_I8      = 24,
    SL_GGML_TYPE_I16     = 25,
    SL_GGML_TYPE_I32     = 26,
    SL_GGML_TYPE_I64     = 27,
    SL_GGML_TYPE_F64     = 28,
    SL_GGML_TYPE_IQ1_M   = 29,
    SL_GGML_TYPE_BF16    = 30,
    SL_GGML_TYPE_TQ1_0   = 34,
    SL_GGML_TYPE_TQ2_0   = 35,
    SL_GGML_TYPE_MXFP4   = 39,
    SL_GGML_TYPE_COUNT   = 40,
};

/* Elements per block and bytes per block of `type`. Both 0 for an id GGUF
 * does not define (a removed or unknown type). */
uint32_t sl_ggml_block_elems(uint32_t type);
uint32_t sl_ggml_block_bytes(uint32_t type);

/* The type's name as GGUF tools print it ("Q4_K"), or NULL if unknown. */
const char *sl_ggml_type_name(uint32_t type);

/* True for the types the engine computes with: F32, F16, BF16, Q8_0, Q4_0,
 * Q4_K, Q5_K, Q6_K, Q5_0, Q4_1, Q5_1, IQ4_NL, Q8_1, Q2_K, Q3_K, IQ4_XS, the
 * grid formats IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and the
 * ternary TQ1_0, TQ2_0, and MXFP4 (some on the CPU only: each backend checks its own). */
bool sl_ggml_type_supported(uint32_t type);

/* Bytes of one row of `n` elements, or 0 if `n` is not a multiple of the
 * type's block size or the type is unknown. */
size_t sl_ggml_row_bytes(uint32_t type, uint64_t n);

#endif
