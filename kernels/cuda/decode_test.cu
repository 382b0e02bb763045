/* kernels/cuda/decode_test.cu: host-side check of the CUDA kernels' weight
 * decoders, runnable on a machine without a GPU (ctest test_cuda_decode in a
 * SLUICE_CUDA build). For each type, rows quantized by model/quant.c are
 * decoded unit by unit with the matmul's decode_unit and element by element
 * with the embedding's sl_dev_dequant_elem, and compared with the reference
 * dequantizer; the units' fixed-order dot products are compared with a
 * float64 dot of the dequantized row, and with float4 loads bitwise equal to
 * scalar ones. Exit 0 when all pass. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cuda/matmul_unit.cuh"
#include "tests/seeded.h"

template <int TYPE>
static int check(int64_t n, uint64_t seed)
{
    const char *name = sl_ggml_type_name(TYPE);
    size_t rb = sl_ggml_row_bytes(TYPE, (uint64_t)n);
    float *src = (float *)malloc((size_t)n * sizeof(float)), *ref = (float *)malloc((size_t)n * sizeof(float));
    float *x = (float *)malloc((size_t)n * sizeof(float));
    uint8_t *row = (uint8_t *)malloc(rb);
    for (int64_t i = 0; i < n; i++) {
        src[i] = sl_seeded_uniform_pm1(&seed) * (1.0f + (float)(i % 7));
        x[i] = sl_seeded_uniform_pm1(&seed);
    }
    int bad = 0;
    if (sl_quant_quantize_row(TYPE, src, row, n) < 0 || sl_quant_dequantize_row(TYPE, row, ref, n) < 0) {
        printf("%s n=%lld: reference quantizer failed\n", name, (long long)n);
        bad = 1;
        goto out;
    }
    {
        double amax = 0, ref_dot = 0, dot = 0, xnorm = 0, wnorm = 0;
        for (int64_t i = 0; i < n; i++) {
            amax = fmax(amax, fabs((double)ref[i]));
            ref_dot += (double)ref[i] * x[i];
            xnorm += (double)x[i] * x[i];
            wnorm += (double)ref[i] * ref[i];
        }
        double tol = 1e-6 * (amax > 1 ? amax : 1);
        unit d;
        for (int64_t u = 0; u * UNIT < n; u++) {
            decode_unit<TYPE>(row, u, n, d);
            for (int i = 0; i < UNIT && u * UNIT + i < n; i++) {
                int64_t e = u * UNIT + i;
                float v = (i < 16 ? d.sa : d.sb) * d.q[i] - d.dm;
                float w = sl_dev_dequant_elem(TYPE, row, e);
                if (fabs((double)v - ref[e]) > tol || fabs((double)w - ref[e]) > tol) {
                    if (bad++ < 5)
                        printf("%s n=%lld: element %lld: unit %g, elem %g, reference %g\n", name, (long long)n,
                               (long long)e, v, w, ref[e]);
                }
            }
            float dv = unit_dot<TYPE>(d, x, u * UNIT, n, true), ds = unit_dot<TYPE>(d, x, u * UNIT, n, false);
            if (memcmp(&dv, &ds, sizeof dv) != 0 && bad++ < 5)
                printf("%s n=%lld: unit %lld: float4 and scalar loads differ (%.9g, %.9g)\n", name, (long long)n,
                       (long long)u, dv, ds);
            dot += dv;
        }
        double err = fabs(dot - ref_dot) / (sqrt(xnorm * wnorm) + 1e-30);
        if (err > 1e-6) {
            printf("%s n=%lld: unit dots %.9g vs float64 %.9g (relative %.3g)\n", name, (long long)n, dot, ref_dot,
                   err);
            bad++;
        }
    }
out:
    printf("%-5s n=%-5lld %s\n", name, (long long)n, bad ? "FAIL" : "ok");
    free(src);
    free(ref);
    free(x);
    free(row);
    return bad != 0;
}

int main(void)
{
    int fails = 0;
    const int64_t lens[] = {256, 512, 2304};
    for (int k = 0; k < 3; k++) {
        int64_t n = lens[k];
        uint64_t seed = 1234 + (uint64_t)k;
        fails += check<SL_GGML_TYPE_F32>(n, seed);
        fails += check<SL_GGML_TYPE_F16>(n, seed);
        fails += check<SL_GGML_TYPE_BF16>(n, seed);
        fails += check<SL_GGML_TYPE_Q8_0>(n, seed);
        fails += check<SL_GGML_TYPE_Q4_0>(n, seed);
        fails += check<SL_GGML_TYPE_Q4_K>(n, seed);
        fails += check<SL_GGML_TYPE_Q5_K>(n, seed);
        fails += check<SL_GGML_TYPE_Q6_K>(n, seed);
    }
    /* float rows whose length is not a multiple of the unit (tail guards) */
    fails += check<SL_GGML_TYPE_F32>(300, 7);
    fails += check<SL_GGML_TYPE_F16>(45, 8);
    fails += check<SL_GGML_TYPE_BF16>(7, 9);
    printf("decode_test: %s\n", fails ? "FAIL" : "all ok");
    return fails != 0;
}
