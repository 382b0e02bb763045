/* kernels/cuda/decode_test.cu: host-side check of the CUDA kernels' weight
 * decoders, runnable on a machine without a GPU (ctest test_cuda_decode in a
 * SLUICE_CUDA build). For each type, rows quantized by model/quant.c are
 * decoded unit by unit with the matmul's decode_unit and element by element
 * with the embedding's sl_dev_dequant_elem, and compared with the reference
 * dequantizer; the units' fixed-order dot products are compared with a
 * float64 dot of the dequantized row, and with float4 loads bitwise equal to
 * scalar ones. The formats model/quant.c may not quantize (Q4_1, Q5_0,
 * Q5_1, IQ4_NL, Q8_1, Q2_K, Q3_K, IQ4_XS, MXFP4) are checked on random blocks
 * (random_blocks.cuh): decode_unit's unit_elem and sl_dev_dequant_elem must
 * give the same float bit for bit, and both equal model/quant.c's when it
 * dequantizes the type; the small-batch kernel's lane decoding of the
 * nibble formats, IQ4_XS, Q2_K and Q3_K (mmv_nib.cuh, mmv_q23k.cuh) must
 * match decode_unit bit for bit. Exit 0
 * when all pass.
 *
 *   test_cuda_decode --decode TYPE IN OUT   decodes the raw blocks of file IN
 *   (whole rows of 256 elements) with decode_unit to float32 file OUT, for
 *   tests/reference/test_cuda_decode.py to compare with gguf's dequantizer;
 *   exit 1 when sl_dev_dequant_elem disagrees with decode_unit. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cuda/matmul_unit.cuh"
#include "kernels/cuda/mmv_nib.cuh"
#include "kernels/cuda/mmv_q23k.cuh"
#include "kernels/cuda/random_blocks.cuh"
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

/* decode_unit and unit_elem over a row of n elements into out[0..n) */
template <int TYPE>
static void decode_row_t(const uint8_t *row, int64_t n, float *out)
{
    unit d;
    for (int64_t u = 0; u * UNIT < n; u++) {
        decode_unit<TYPE>(row, u, n, d);
        for (int i = 0; i < UNIT && u * UNIT + i < n; i++)
            out[u * UNIT + i] = unit_elem(d, i);
    }
}

#define RANDOM_TYPES(X) X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(Q8_1) X(Q2_K) X(Q3_K) X(IQ4_XS) X(MXFP4)

static bool decode_row(uint32_t type, const uint8_t *row, int64_t n, float *out)
{
    switch (type) {
#define CASE(T)                                      \
    case SL_GGML_TYPE_##T:                           \
        decode_row_t<SL_GGML_TYPE_##T>(row, n, out); \
        return true;
        RANDOM_TYPES(CASE)
#undef CASE
    default:
        return false;
    }
}

/* Random blocks of a format without a quantizer here: decode_unit (through
 * unit_elem), sl_dev_dequant_elem and, where it knows the type,
 * sl_quant_dequantize_row give the same bits; the unit dots match a
 * float64 dot and are the same with float4 and scalar loads. */
template <int TYPE>
static int check_random(int64_t n, uint64_t seed, int expect_bb)
{
    const char *name = sl_ggml_type_name(TYPE);
    size_t rb = sl_ggml_row_bytes(TYPE, (uint64_t)n);
    uint8_t *row = (uint8_t *)malloc(rb ? rb : 1);
    float *dec = (float *)malloc((size_t)n * sizeof(float)), *ref = (float *)malloc((size_t)n * sizeof(float));
    float *x = (float *)malloc((size_t)n * sizeof(float));
    int bad = 0;
    bool host_ref = false;
    if ((int)sl_ggml_block_bytes(TYPE) != expect_bb || !sl_random_blocks_row(TYPE, row, rb, n, &seed)) {
        printf("%s: block bytes %u in model/ggml_types.c, %d in the decoder\n", name, sl_ggml_block_bytes(TYPE),
               expect_bb);
        bad = 1;
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = sl_seeded_uniform_pm1(&seed);
    decode_row_t<TYPE>(row, n, dec);
    host_ref = sl_quant_dequantize_row(TYPE, row, ref, n) == SL_OK;
    {
        double ref_dot = 0, dot = 0, xnorm = 0, wnorm = 0;
        for (int64_t e = 0; e < n; e++) {
            float w = sl_dev_dequant_elem(TYPE, row, e);
            if ((memcmp(&w, &dec[e], sizeof w) != 0 || (host_ref && memcmp(&ref[e], &dec[e], sizeof w) != 0)) &&
                bad++ < 5)
                printf("%s n=%lld: element %lld: unit %.9g, elem %.9g, model/quant.c %.9g\n", name, (long long)n,
                       (long long)e, dec[e], w, host_ref ? ref[e] : NAN);
            ref_dot += (double)dec[e] * x[e];
            xnorm += (double)x[e] * x[e];
            wnorm += (double)dec[e] * dec[e];
        }
        unit d;
        for (int64_t u = 0; u * UNIT < n; u++) {
            decode_unit<TYPE>(row, u, n, d);
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
    printf("%-6s n=%-5lld random blocks, %s: %s\n", name, (long long)n,
           host_ref ? "unit == elem == model/quant.c" : "unit == elem (no host dequantizer)", bad ? "FAIL" : "ok");
    free(row);
    free(dec);
    free(ref);
    free(x);
    return bad != 0;
}

/* The small-batch kernel's lane decoding of a nibble format (mmv_nib.cuh):
 * each lane's 16 codes times d, plus m, equal decode_unit's elements bit
 * for bit, on random blocks. */
template <int TYPE>
static int check_nib(int64_t n, uint64_t seed)
{
    const char *name = sl_ggml_type_name(TYPE);
    size_t rb = sl_ggml_row_bytes(TYPE, (uint64_t)n);
    uint8_t *row = (uint8_t *)malloc(rb ? rb : 1);
    int bad = 0;
    if (!sl_random_blocks_row(TYPE, row, rb, n, &seed)) {
        bad = 1;
        goto out;
    }
    for (int64_t blk = 0; blk < n / 32; blk++) {
        unit d;
        decode_unit<TYPE>(row, blk, n, d);
        for (int hf = 0; hf < 2; hf++) {
            raw_nib r = load_nib<TYPE>(row, (int)blk, hf);
            float q[16];
            nib_values<TYPE>(r, hf, q);
            float dd = nib_scale<TYPE>(r), m = nib_fmt<TYPE>::M ? sl_dev_fp16(r.m) : 0.0f;
            for (int i = 0; i < 16; i++) {
                int e = i < 8 ? 8 * hf + i : 16 + 8 * hf + i - 8;
                float v = nib_fmt<TYPE>::M ? sl_dev_add(sl_dev_mul(dd, q[i]), m) : sl_dev_mul(dd, q[i]);
                float u = unit_elem(d, e);
                if (memcmp(&v, &u, sizeof v) != 0 && bad++ < 5)
                    printf("%s block %lld lane %d element %d: lane %.9g, unit %.9g\n", name, (long long)blk, hf, e,
                           v, u);
            }
        }
    }
out:
    printf("%-6s n=%-5lld small-batch lane decoding == decode_unit: %s\n", name, (long long)n, bad ? "FAIL" : "ok");
    free(row);
    return bad != 0;
}

/* The same for Q2_K/Q3_K (mmv_q23k.cuh): each lane's 16 codes times the
 * sub-block's scale, minus its min, equal decode_unit's elements. */
template <int TYPE>
static int check_q23k(int64_t n, uint64_t seed)
{
    const char *name = sl_ggml_type_name(TYPE);
    size_t rb = sl_ggml_row_bytes(TYPE, (uint64_t)n);
    uint8_t *row = (uint8_t *)malloc(rb ? rb : 1);
    int bad = 0;
    if (!sl_random_blocks_row(TYPE, row, rb, n, &seed)) {
        bad = 1;
        goto out;
    }
    for (int64_t run = 0; run < n / 32; run++) {
        unit d;
        decode_unit<TYPE>(row, run, n, d);
        for (int hf = 0; hf < 2; hf++) {
            raw_q23k r = load_q23k<TYPE>(row, (int)run, hf);
            float q[16];
            q23k_values<TYPE>(r, (int)run, q);
            float dl = q23k_scale<TYPE>(r), ml = q23k_min<TYPE>(r);
            for (int i = 0; i < 16; i++) {
                float v = sl_dev_add(sl_dev_mul(dl, q[i]), -ml), u = unit_elem(d, 16 * hf + i);
                if (memcmp(&v, &u, sizeof v) != 0 && bad++ < 5)
                    printf("%s run %lld lane %d element %d: lane %.9g, unit %.9g\n", name, (long long)run, hf,
                           16 * hf + i, v, u);
            }
        }
    }
out:
    printf("%-6s n=%-5lld small-batch lane decoding == decode_unit: %s\n", name, (long long)n, bad ? "FAIL" : "ok");
    free(row);
    return bad != 0;
}

/* --decode TYPE IN OUT (see the header) */
static int decode_file(const char *type_name, const char *in, const char *out)
{
    uint32_t type = SL_GGML_TYPE_COUNT;
    for (uint32_t t = 0; t < SL_GGML_TYPE_COUNT; t++)
        if (sl_ggml_type_name(t) && !strcmp(sl_ggml_type_name(t), type_name))
            type = t;
    FILE *f = fopen(in, "rb");
    if (type == SL_GGML_TYPE_COUNT || !f) {
        fprintf(stderr, "test_cuda_decode: unknown type %s or unreadable %s\n", type_name, in);
        if (f)
            fclose(f);
        return 2;
    }
    const int64_t n = 256;
    size_t rb = sl_ggml_row_bytes(type, n);
    uint8_t *row = (uint8_t *)malloc(rb ? rb : 1);
    float dec[256];
    FILE *o = fopen(out, "wb");
    int rc = o && rb ? 0 : 2;
    int64_t rows = 0;
    while (rc == 0 && fread(row, 1, rb, f) == rb) {
        if (!decode_row(type, row, n, dec)) {
            fprintf(stderr, "test_cuda_decode: --decode does not take %s\n", type_name);
            rc = 2;
            break;
        }
        for (int64_t e = 0; e < n; e++) {
            float w = sl_dev_dequant_elem(type, row, e);
            if (memcmp(&w, &dec[e], sizeof w) != 0) {
                fprintf(stderr, "%s row %lld element %lld: unit %.9g, elem %.9g\n", type_name, (long long)rows,
                        (long long)e, dec[e], w);
                rc = 1;
            }
        }
        if (fwrite(dec, sizeof(float), (size_t)n, o) != (size_t)n)
            rc = 2;
        rows++;
    }
    fclose(f);
    if (o && fclose(o) != 0)
        rc = 2;
    free(row);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--decode"))
        return decode_file(argv[2], argv[3], argv[4]);
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
    for (int k = 0; k < 3; k++) {
        int64_t n = lens[k];
        uint64_t seed = 99 + (uint64_t)k;
        fails += check_random<SL_GGML_TYPE_Q4_1>(n, seed, SL_BB_Q4_1);
        fails += check_random<SL_GGML_TYPE_Q5_0>(n, seed, SL_BB_Q5_0);
        fails += check_random<SL_GGML_TYPE_Q5_1>(n, seed, SL_BB_Q5_1);
        fails += check_random<SL_GGML_TYPE_IQ4_NL>(n, seed, SL_BB_IQ4_NL);
        fails += check_random<SL_GGML_TYPE_Q8_1>(n, seed, SL_BB_Q8_1);
        fails += check_random<SL_GGML_TYPE_Q2_K>(n, seed, SL_BB_Q2_K);
        fails += check_random<SL_GGML_TYPE_Q3_K>(n, seed, SL_BB_Q3_K);
        fails += check_random<SL_GGML_TYPE_IQ4_XS>(n, seed, SL_BB_IQ4_XS);
        fails += check_random<SL_GGML_TYPE_MXFP4>(n, seed, SL_BB_MXFP4);
        /* the older K-quants too: their units' upper halves take dmb */
        fails += check_random<SL_GGML_TYPE_Q4_K>(n, seed, (int)sizeof(sl_block_q4_K));
        fails += check_random<SL_GGML_TYPE_Q5_K>(n, seed, (int)sizeof(sl_block_q5_K));
        fails += check_random<SL_GGML_TYPE_Q6_K>(n, seed, (int)sizeof(sl_block_q6_K));
        fails += check_nib<SL_GGML_TYPE_Q4_0>(n, seed);
        fails += check_nib<SL_GGML_TYPE_Q4_1>(n, seed);
        fails += check_nib<SL_GGML_TYPE_Q5_0>(n, seed);
        fails += check_nib<SL_GGML_TYPE_Q5_1>(n, seed);
        fails += check_nib<SL_GGML_TYPE_IQ4_NL>(n, seed);
        fails += check_nib<SL_GGML_TYPE_IQ4_XS>(n, seed);
        fails += check_nib<SL_GGML_TYPE_MXFP4>(n, seed);
        fails += check_q23k<SL_GGML_TYPE_Q2_K>(n, seed);
        fails += check_q23k<SL_GGML_TYPE_Q3_K>(n, seed);
    }
    printf("decode_test: %s\n", fails ? "FAIL" : "all ok");
    return fails != 0;
}
