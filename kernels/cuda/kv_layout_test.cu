/* kernels/cuda/kv_layout_test.cu: host-side check of the paged K/V
 * layout (paged.cuh), runnable without a GPU (ctest test_cuda_kv_layout in
 * a SLUICE_CUDA build). For f32, f16 and q8_0 over a range of shapes:
 *   - the bytes of one cache block, 2 * n_layer * n_head_kv * block_size *
 *     sl_kv_row_bytes(), equal sl_backend_kv_block_bytes(), the figure the
 *     worker sizes the pool by (backend.cu computes its own, since the
 *     library links nothing of the host binary);
 *   - sl_kv_slot() maps every (layer, K/V, block, kv head, position) to its
 *     own row, the rows tiling the cache exactly, and a V row lies
 *     sl_kv_v_offset() after its K row;
 *   - a type the cache does not store, and q8_0 at a head_dim that is not a
 *     multiple of 32, have no row size (0: create and the kernels refuse).
 * Exit 0 when all hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {   /* before paged.cuh includes kernels/backend.h with C++ linkage */
#include "kernels/backend_check.h"
}
#include "kernels/cuda/paged.cuh"

static int check_shape(sl_kv_type t, int n_layer, int n_head_kv, int head_dim, int bs, int n_blocks)
{
    sl_model m;
    memset(&m, 0, sizeof m);
    m.hp.n_layer = n_layer;
    m.hp.n_head_kv = n_head_kv;
    m.hp.head_dim = head_dim;
    int64_t rb = sl_kv_row_bytes(t, head_dim);
    uint64_t block = 2ull * n_layer * n_head_kv * bs * (uint64_t)rb;
    int bad = 0;
    if (block != sl_backend_kv_block_bytes(&m, (uint32_t)bs, t)) {
        printf("type %d, %d layers x %d kv heads x head_dim %d, block %d: %llu bytes per block, "
               "sl_backend_kv_block_bytes says %llu\n", (int)t, n_layer, n_head_kv, head_dim, bs,
               (unsigned long long)block, (unsigned long long)sl_backend_kv_block_bytes(&m, (uint32_t)bs, t));
        bad++;
    }
    /* every row once: a shuffled table over all blocks, one sequence per layer walk */
    int64_t rows = (int64_t)n_layer * 2 * n_blocks * n_head_kv * bs;
    unsigned char *seen = (unsigned char *)calloc((size_t)rows, 1);
    int32_t *table = (int32_t *)malloc((size_t)n_blocks * sizeof *table);
    uint8_t *cache = (uint8_t *)malloc((size_t)(rows * rb));   /* only addressed, never touched */
    int32_t dummy = 0;
    if (!seen || !table || !cache) {
        free(seen);
        free(table);
        free(cache);
        return bad + 1;
    }
    for (int i = 0; i < n_blocks; i++)
        table[i] = (int32_t)((i * 7 + 3) % n_blocks);   /* n_blocks is not a multiple of 7 */
    sl_cuda_kv c = {cache, n_blocks, bs, n_head_kv, head_dim, t};
    sl_cuda_batch b = {&dummy, &dummy, table};
    for (int l = 0; l < n_layer; l++)
        for (int v = 0; v < 2; v++)
            for (int h = 0; h < n_head_kv; h++)
                for (int32_t p = 0; p < n_blocks * bs; p++) {
                    int64_t off = sl_kv_slot(c, b, l, v, 0, p, h, rb) - c.kv;
                    if (off % rb != 0 || off < 0 || off / rb >= rows || seen[off / rb]++) {
                        bad++;
                        continue;
                    }
                    if (v == 0 && sl_kv_slot(c, b, l, 1, 0, p, h, rb) - c.kv != off + sl_kv_v_offset(c, rb))
                        bad++;
                }
    for (int64_t r = 0; r < rows; r++)
        bad += seen[r] != 1;
    if (bad)
        printf("type %d, %d layers x %d kv heads x head_dim %d, block %d: %d layout errors\n", (int)t, n_layer,
               n_head_kv, head_dim, bs, bad);
    free(seen);
    free(table);
    free(cache);
    return bad;
}

int main(void)
{
    int fails = 0, n = 0;
    for (sl_kv_type t : {SL_KV_TYPE_F32, SL_KV_TYPE_F16, SL_KV_TYPE_Q8_0})
        for (int layers : {1, 3})
            for (int nkv : {1, 2, 8})
                for (int hd : {32, 64, 96, 128, 256})
                    for (int bs : {1, 16}) {
                        fails += check_shape(t, layers, nkv, hd, bs, 5) != 0;
                        n++;
                    }
    /* no row size: create and every kernel refuse these */
    fails += sl_kv_row_bytes(SL_KV_TYPE_Q8_0, 48) != 0 || sl_kv_row_bytes(SL_KV_TYPE_Q8_0, 100) != 0;
    fails += sl_kv_row_bytes(SL_KV_TYPE_AUTO, 64) != 0 || sl_kv_row_bytes((sl_kv_type)9, 64) != 0;
    fails += sl_kv_row_bytes(SL_KV_TYPE_F16, 48) != 96 || sl_kv_row_bytes(SL_KV_TYPE_Q8_0, 96) != 102;
    printf("kv_layout_test: %d shapes, %s\n", n, fails ? "FAILED" : "all ok");
    return fails != 0;
}
