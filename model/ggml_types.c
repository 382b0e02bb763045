/* model/ggml_types.c: block geometry and names of GGUF tensor types. */
#include "model/ggml_types.h"

struct type_info { const char *name; uint32_t elems, bytes; };

static const struct type_info types[SL_GGML_TYPE_COUNT] = {
    [SL_GGML_TYPE_F32]     = {"F32", 1, 4},
    [SL_GGML_TYPE_F16]     = {"F16", 1, 2},
    [SL_GGML_TYPE_Q4_0]    = {"Q4_0", 32, 18},
    [SL_GGML_TYPE_Q4_1]    = {"Q4_1", 32, 20},
    [SL_GGML_TYPE_Q5_0]    = {"Q5_0", 32, 22},
    [SL_GGML_TYPE_Q5_1]    = {"Q5_1", 32, 24},
    [SL_GGML_TYPE_Q8_0]    = {"Q8_0", 32, 34},
    [SL_GGML_TYPE_Q8_1]    = {"Q8_1", 32, 36},
    [SL_GGML_TYPE_Q2_K]    = {"Q2_K", 256, 84},
    [SL_GGML_TYPE_Q3_K]    = {"Q3_K", 256, 110},
    [SL_GGML_TYPE_Q4_K]    = {"Q4_K", 256, 144},
    [SL_GGML_TYPE_Q5_K]    = {"Q5_K", 256, 176},
    [SL_GGML_TYPE_Q6_K]    = {"Q6_K", 256, 210},
    [SL_GGML_TYPE_Q8_K]    = {"Q8_K", 256, 292},
    [SL_GGML_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [SL_GGML_TYPE_IQ2_XS]  = {"IQ2_XS", 256, 74},
    [SL_GGML_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [SL_GGML_TYPE_IQ1_S]   = {"IQ1_S", 256, 50},
    [SL_GGML_TYPE_IQ4_NL]  = {"IQ4_NL", 32, 18},
    [SL_GGML_TYPE_IQ3_S]   = {"IQ3_S", 256, 110},
    [SL_GGML_TYPE_IQ2_S]   = {"IQ2_S", 256, 82},
    [SL_GGML_TYPE_IQ4_XS]  = {"IQ4_XS", 256, 136},
    [SL_GGML_TYPE_I8]      = {"I8", 1, 1},
    [SL_GGML_TYPE_I16]     = {"I16", 1, 2},
    [SL_GGML_TYPE_I32]     = {"I32", 1, 4},
    [SL_GGML_TYPE_I64]     = {"I64", 1, 8},
    [SL_GGML_TYPE_F64]     = {"F64", 1, 8},
    [SL_GGML_TYPE_IQ1_M]   = {"IQ1_M", 256, 56},
    [SL_GGML_TYPE_BF16]    = {"BF16", 1, 2},
    [SL_GGML_TYPE_TQ1_0]   = {"TQ1_0", 256, 54},
    [SL_GGML_TYPE_TQ2_0]   = {"TQ2_0", 256, 66},
    [SL_GGML_TYPE_MXFP4]   = {"MXFP4", 32, 17},
};

uint32_t sl_ggml_block_elems(uint32_t type)
{
    return type < SL_GGML_TYPE_COUNT ? types[type].elems : 0;
}

uint32_t sl_ggml_block_bytes(uint32_t type)
{
    return type < SL_GGML_TYPE_COUNT ? types[type].bytes : 0;
}

const char *sl_ggml_type_name(uint32_t type)
{
    return type < SL_GGML_TYPE_COUNT ? types[type].name : NULL;
}

bool sl_ggml_type_supported(uint32_t type)
{
    switch (type) {
    case SL_GGML_TYPE_F32: case SL_GGML_TYPE_F16: case SL_GGML_TYPE_BF16:
    case SL_GGML_TYPE_Q8_0: case SL_GGML_TYPE_Q4_0:
    case SL_GGML_TYPE_Q4_K: case SL_GGML_TYPE_Q5_K: case SL_GGML_TYPE_Q6_K:
    case SL_GGML_TYPE_Q5_0: case SL_GGML_TYPE_Q4_1: case SL_GGML_TYPE_Q5_1: case SL_GGML_TYPE_IQ4_NL:
    case SL_GGML_TYPE_Q2_K: case SL_GGML_TYPE_Q3_K: case SL_GGML_TYPE_IQ4_XS:
    case SL_GGML_TYPE_IQ2_XXS: case SL_GGML_TYPE_IQ2_XS: case SL_GGML_TYPE_IQ2_S:
    case SL_GGML_TYPE_IQ3_XXS: case SL_GGML_TYPE_IQ3_S: case SL_GGML_TYPE_IQ1_S: case SL_GGML_TYPE_IQ1_M:
    case SL_GGML_TYPE_TQ1_0: case SL_GGML_TYPE_TQ2_0:
    case SL_GGML_TYPE_Q8_1: case SL_GGML_TYPE_MXFP4:
        return true;
    }
    return false;
}

size_t sl_ggml_row_bytes(uint32_t type, uint64_t n)
{
    uint32_t be = sl_ggml_block_elems(type);
    if (be == 0 || n % be != 0)
        return 0;
    return (size_t)(n / be) * sl_ggml_block_bytes(type);
}
