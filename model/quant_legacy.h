/* model/quant_legacy.h: private to model/quant.c: the 32-element block
 * formats other than Q8_0 and Q4_0 (Q5_0, Q4_1, Q5_1, Q8_1, IQ4_NL, MXFP4), kept
 * in model/quant_legacy.c; quant.c validates (type, n) and dispatches here.
 * Who: any thread; pure functions (no state, no allocation). */
#ifndef SL_QUANT_LEGACY_H
#define SL_QUANT_LEGACY_H

#include <stdint.h>

/* nb blocks of `type` (one of the six) from src into dst (32 * nb floats). */
void sl_quant_legacy_dequantize(uint32_t type, const void *src, float *dst /* OUT */, int64_t nb);

/* 32 * nb floats of src into nb blocks of `type` at dst. */
void sl_quant_legacy_quantize(uint32_t type, const float *src, void *dst /* OUT */, int64_t nb);

#endif
