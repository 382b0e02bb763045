/* tests/unit/kernels/act_rows.h: the test rows shared by vec_dot_q8_test.c
 * and vec_dot_q16_test.c: a quantized weight row with its dequantization,
 * MAXM activation rows in one quantized format (8- or 16-bit) together with
 * the float rows they came from, and the check that the batched dot path
 * gives every row bitwise what the one-row path gives it. */
#ifndef SL_TEST_ACT_ROWS_H
#define SL_TEST_ACT_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/act_quant.h"

enum { ACT_ROWS_MAXM = 40 };

/* The weight types the quantized-activation dots take. */
extern const uint32_t act_rows_qtypes[];
enum { ACT_ROWS_NQ = 23 };

/* sl_vec_dot_q8_multi_* and sl_vec_dot_q16_multi_*. */
typedef void (*act_rows_dot_fn)(uint32_t, const void *, const void *, size_t, int, float *, int64_t);

typedef struct {
    int64_t n;
    enum sl_act_format f;
    size_t lda;
    void *q;        /* quantized weights */
    float *w;       /* dequantized */
    char *a;        /* ACT_ROWS_MAXM activation rows, stride lda */
    float *x;       /* the float rows they came from, stride n */
} act_rows;

/* Fills r (OUT) for weight type `type`, n elements, activations in format f:
 * weights from the seeded N(0,1) stream `seed`, activations from seed + 1.
 * lda is 4-aligned but not 32 (Q8_K holds a float; misaligned rows are
 * part of the test). Asserts on allocation or quantizer failure. */
void act_rows_make(uint32_t type, int64_t n, enum sl_act_format f, uint64_t seed, act_rows *r);
void act_rows_free(act_rows *r);

/* For each type and a few lengths and batch sizes: fn over m rows at once
 * is memcmp-equal, row by row, to fn over each row alone. f_of gives each
 * type its activation format. */
void act_rows_check_multi_bitwise(act_rows_dot_fn fn, enum sl_act_format (*f_of)(uint32_t), const char *isa);

#endif
