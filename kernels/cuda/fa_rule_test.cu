/* kernels/cuda/fa_rule_test.cu: host-side check of the flash-attention
 * query grouping and shared-memory sizing (attention_fa.cuh), runnable
 * without a GPU (ctest test_cuda_fa_rule in a SLUICE_CUDA build). On
 * random steps (1 to 6 sequences, each a chunk at any position or a decode
 * row, GQA ratios 1..8 and a few others):
 *   - the groups partition the rows in order, none empty;
 *   - a group never spans two sequences, so grouping sequence by sequence
 *     (forward.cu, which leaves decode rows out) cuts the same;
 *   - a group is one sequence, consecutive positions, at most
 *     group_positions(G) of them, inside one aligned window of that many;
 *   - whether a row starts a group depends only on it and the row before:
 *     the same sequence chunked differently cuts at the same positions;
 *   - 64 rows per block: positions x G <= 64;
 * and the shared memory of each head_dim fits an H200 block (227 KiB),
 * two blocks per SM at head_dim 128. Exit 0 when all hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention_fa.cuh"

static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* positions of one sequence's chunk [p0, p1) cut by the grouping, as a
 * bitmap of the positions that start a group */
static void cuts(int32_t p0, int32_t p1, int qp, int chunk, unsigned char *start)
{
    int32_t pos[4096], tab[4096], b[2 * 4096];
    for (int32_t c0 = p0; c0 < p1; c0 += chunk) {
        int32_t n = p1 - c0 < chunk ? p1 - c0 : chunk;
        for (int32_t i = 0; i < n; i++) {
            pos[i] = c0 + i;
            tab[i] = 5;
        }
        int64_t g = sl_cuda_fa_groups(pos, tab, n, qp, b);
        for (int64_t i = 0; i < g; i++)
            start[pos[b[2 * i]]] = 1;
    }
}

int main(void)
{
    int fails = 0;
    uint64_t seed = 1;
    static const int Gs[] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 64};
    for (int it = 0; it < 20000 && fails < 10; it++) {
        int G = Gs[rnd(&seed) % (sizeof Gs / sizeof Gs[0])], qp = sl_cuda_fa_group_positions(G);
        int32_t pos[2048], tab[2048], b[2 * 2048];
        int64_t T = 0, starts[7];
        int ns = 1 + (int)(rnd(&seed) % 6);
        for (int s = 0; s < ns; s++) {
            int32_t p0 = (int32_t)(rnd(&seed) % 3000), n = rnd(&seed) % 3 ? 1 + (int32_t)(rnd(&seed) % 300) : 1;
            starts[s] = T;
            for (int32_t i = 0; i < n; i++, T++) {
                pos[T] = p0 + i;
                tab[T] = 100 * s;
            }
        }
        starts[ns] = T;
        int64_t g = sl_cuda_fa_groups(pos, tab, T, qp, b);
        /* sequence by sequence, offset: the same list */
        int32_t bs[2 * 2048];
        int64_t gs = 0;
        for (int s = 0; s < ns; s++) {
            int64_t n = sl_cuda_fa_groups(pos + starts[s], tab + starts[s], starts[s + 1] - starts[s], qp, bs + 2 * gs);
            for (int64_t j = 0; j < 2 * n; j++)
                bs[2 * gs + j] += (int32_t)starts[s];
            gs += n;
        }
        if (gs != g || memcmp(bs, b, (size_t)(2 * g) * sizeof(int32_t)) != 0) {
            printf("fa groups: step %d: sequence by sequence cuts differently\n", it);
            fails++;
        }
        bool ok = qp >= 1 && qp * G <= SL_CUDA_FA_ROWS && g >= 1 && g <= T && b[0] == 0 && b[2 * g - 1] == T;
        for (int64_t i = 0; ok && i < g; i++) {
            int32_t t0 = b[2 * i], t1 = b[2 * i + 1];
            ok = i == 0 || t0 == b[2 * i - 1];   /* consecutive, covering every row */
            ok = ok && t1 > t0 && t1 - t0 <= qp && pos[t0] / qp == pos[t1 - 1] / qp;
            for (int32_t t = t0 + 1; ok && t < t1; t++)
                ok = tab[t] == tab[t0] && pos[t] == pos[t - 1] + 1;
        }
        if (!ok) {
            printf("fa groups: step %d (G %d, %lld rows) cut wrongly\n", it, G, (long long)T);
            fails++;
        }
    }
    /* one prompt, chunked three ways: the same cuts */
    for (int qp : {64, 21, 16, 8}) {
        static unsigned char a[5000], c[5000], d[5000];
        for (int i = 0; i < 5000; i++)
            a[i] = c[i] = d[i] = 0;
        cuts(37, 4900, qp, 4096, a);
        cuts(37, 4900, qp, 512, c);
        cuts(37, 4900, qp, 29, d);
        for (int32_t p = 38; p < 4900; p++) {
            /* a cut the chunking forces at a chunk's start is not a group rule cut */
            if ((a[p] && p % qp != 0 && p != 37 + 4096) || (!a[p] && p % qp == 0) ||
                (c[p] && p % qp != 0 && (p - 37) % 512 != 0) ||
                (d[p] && p % qp != 0 && (p - 37) % 29 != 0) || (p % qp == 0 && (!c[p] || !d[p]))) {
                printf("fa groups: qp %d: position %d cut differently across chunkings\n", qp, (int)p);
                fails++;
                break;
            }
        }
    }
    int64_t s64 = sl_cuda_fa_smem_bytes(64), s128 = sl_cuda_fa_smem_bytes(128), s256 = sl_cuda_fa_smem_bytes(256);
    /* an H200's per-block and per-SM limits; stat: a block's static shared memory and reserve, rounded up */
    const int64_t block_max = 227 * 1024, sm = 228 * 1024, stat = 2048;
    if (sl_cuda_fa_smem_bytes(96) != 0 || s64 + stat > block_max || s256 + stat > block_max ||
        2 * (s128 + stat) > sm) {
        printf("fa smem: %lld / %lld / %lld bytes do not fit\n", (long long)s64, (long long)s128, (long long)s256);
        fails++;
    }
    printf("fa_rule_test: %s\n", fails ? "FAIL" : "all ok");
    return fails != 0;
}
