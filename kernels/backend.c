/* kernels/backend.c: backend selection and the batch checks every backend
 * relies on, so no backend reads outside its KV cache on a bad batch. */
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

uint64_t sl_backend_kv_block_bytes(const sl_model *m, uint32_t block_size)
{
    const sl_hparams *hp = &m->hp;
    return 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim * block_size * sizeof(float);
}

sl_status sl_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out,
                            char err[SL_ERR_LEN])
{
    *out = NULL;
    if (cfg->n_threads < 1 || cfg->kv_block_size < 1 || cfg->n_kv_blocks < 1 || cfg->max_batch_tokens < 1 ||
        cfg->max_ctx < 1) {
        snprintf(err, SL_ERR_LEN, "backend: invalid configuration (threads %d, block size %u, blocks %u, "
                 "batch tokens %d, context %d)", cfg->n_threads, cfg->kv_block_size, cfg->n_kv_blocks,
                 cfg->max_batch_tokens, cfg->max_ctx);
        return SL_EINVAL;
    }
    const char *dev = cfg->device ? cfg->device : "auto";
    if (!strcmp(dev, "cpu") || !strcmp(dev, "auto"))
        return sl_cpu_backend_create(m, cfg, out, err);
    if (!strcmp(dev, "cuda")) {
        snprintf(err, SL_ERR_LEN, "backend: this build has no CUDA backend");
        return SL_EUNSUPPORTED;
    }
    snprintf(err, SL_ERR_LEN, "backend: unknown device '%s' (auto, cpu, cuda)", dev);
    return SL_EINVAL;
}

int64_t sl_batch_logit_rows(const sl_batch_seq *seqs, int32_t n_seqs)
{
    int64_t rows = 0;
    for (int32_t i = 0; i < n_seqs; i++)
        rows += seqs[i].logits_all ? seqs[i].n_tokens : 1;
    return rows;
}

sl_status sl_backend_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    if (n_seqs < 1)
        return SL_EINVAL;
    int64_t total = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const sl_batch_seq *s = &seqs[i];
        if (s->n_tokens < 1 || s->pos < 0 || (int64_t)s->pos + s->n_tokens > b->cfg.max_ctx)
            return SL_EINVAL;
        int64_t need = ((int64_t)s->pos + s->n_tokens + b->cfg.kv_block_size - 1) / b->cfg.kv_block_size;
        if (s->n_blocks < need)
            return SL_EINVAL;
        for (int32_t j = 0; j < need; j++)
            if (s->blocks[j] < 0 || (uint32_t)s->blocks[j] >= b->cfg.n_kv_blocks)
                return SL_EINVAL;
        for (int32_t j = 0; j < s->n_tokens; j++)
            if (s->tokens[j] < 0 || s->tokens[j] >= b->model->hp.n_vocab)
                return SL_EINVAL;
        total += s->n_tokens;
    }
    if (total > b->cfg.max_batch_tokens)
        return SL_EINVAL;
    return b->ops->forward(b, seqs, n_seqs, logits);
}

void sl_backend_destroy(sl_backend *b)
{
    if (b)
        b->ops->destroy(b);
}
