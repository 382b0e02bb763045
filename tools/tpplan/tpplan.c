/* tools/tpplan: prints the tensor-parallel plan of a model (model/tp_plan.h)
 * as JSON, so the float64 simulation of tests/reference/test_tensor_parallel.py
 * slices the weights with the plan code itself rather than a copy of its rules.
 *   tpplan GGUF N
 * stdout: {"n_shard": N, "kv_replicas": R, "shards": [{"head": [b, e],
 *          "head_kv": [b, e], "slices": {"attn_q": {"split": "out",
 *          "begin": b, "end": e}, ...}}, ...]}; every kind is listed, "absent"
 *          ones too.
 * Exit status 0; 1 when the file does not load; 2 when the plan is refused
 * (the reason on stderr, as `sluice serve --tensor-parallel N` words it). */
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "model/tp_plan.h"

static void print_plan(const sl_tp_plan *p)
{
    printf("{\"n_shard\": %d, \"kv_replicas\": %d, \"shards\": [", p->n_shard, p->kv_replicas);
    for (int32_t s = 0; s < p->n_shard; s++) {
        const sl_tp_shard *sh = &p->shard[s];
        printf("%s\n  {\"head\": [%d, %d], \"head_kv\": [%d, %d], \"slices\": {", s ? "," : "", sh->head_begin,
               sh->head_end, sh->head_kv_begin, sh->head_kv_end);
        for (int k = 0; k < SL_TP_KIND_COUNT; k++) {
            const sl_tp_slice *sl = &sh->slice[k];
            printf("%s\"%s\": {\"split\": \"%s\", \"begin\": %lld, \"end\": %lld}", k ? ", " : "",
                   sl_tp_kind_name((enum sl_tp_kind)k), sl_tp_split_name(sl->split), (long long)sl->begin,
                   (long long)sl->end);
        }
        printf("}}");
    }
    printf("\n]}\n");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: tpplan GGUF N\n");
        return 2;
    }
    char *end;
    long n = strtol(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end || n < -1000000 || n > 1000000) {
        fprintf(stderr, "tpplan: N '%s' is not an integer\n", argv[2]);
        return 2;
    }
    char err[SL_ERR_LEN];
    sl_model *m;
    if (sl_model_load(argv[1], &m, err) < 0) {
        fprintf(stderr, "tpplan: %s\n", err);
        return 1;
    }
    static sl_tp_plan plan;
    sl_status rc = sl_tp_plan_for_model(&plan, m, (int32_t)n, err);
    sl_model_destroy(m);
    if (rc < 0) {
        fprintf(stderr, "tpplan: %s\n", err);
        return 2;
    }
    print_plan(&plan);
    return 0;
}
