/* kernels/backend_check.c: see backend_check.h. Pure functions of the model,
 * the config and the batch; called on the thread that drives the backend.
 * Trade-off: every step is checked in full (O(tokens + blocks) integer
 * compares), so a backend may trust what reaches it and index without
 * bounds checks of its own. */
#include <stdio.h>
#include <string.h>

#include "kernels/backend_check.h"

uint64_t sl_backend_kv_block_bytes(const sl_model *m, uint32_t block_size, sl_kv_type type)
{
    const sl_hparams *hp = &m->hp;
    uint64_t values = 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim * block_size;
    switch (type) {
    case SL_KV_TYPE_F16: return values * 2;
    case SL_KV_TYPE_Q8_0: return values / 32 * 34;   /* 2-byte scale + 32 int8 per 32 values */
    default: return values * sizeof(float);
    }
}

const char *sl_kv_type_name(sl_kv_type t)
{
    switch (t) {
    case SL_KV_TYPE_AUTO: return "auto";
    case SL_KV_TYPE_F32: return "f32";
    case SL_KV_TYPE_F16: return "f16";
    case SL_KV_TYPE_Q8_0: return "q8_0";
    }
    return "?";
}

sl_status sl_kv_type_parse(const char *name, sl_kv_type *out)
{
    static const sl_kv_type all[] = {SL_KV_TYPE_AUTO, SL_KV_TYPE_F32, SL_KV_TYPE_F16, SL_KV_TYPE_Q8_0};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, sl_kv_type_name(all[i])) == 0) {
            *out = all[i];
            return SL_OK;
        }
    return SL_EINVAL;
}

int64_t sl_batch_logit_rows(const sl_batch_seq *seqs, int32_t n_seqs)
{
    int64_t rows = 0;
    for (int32_t i = 0; i < n_seqs; i++)
        rows += seqs[i].logits_all ? seqs[i].n_tokens : 1;
    return rows;
}

int32_t sl_backend_max_batch_seqs(const sl_backend_config *cfg)
{
    return cfg->max_batch_seqs > 0 ? cfg->max_batch_seqs : cfg->max_batch_tokens;
}

sl_status sl_backend_check_config(const sl_backend_config *cfg, bool gpu_ok, char err[SL_ERR_LEN])
{
    if (cfg->n_threads < 1 || cfg->kv_block_size < 1 || (cfg->n_kv_blocks < 1 && !gpu_ok) ||
        cfg->max_batch_tokens < 1 || cfg->max_ctx < 1 || cfg->max_batch_seqs < 0 ||
        cfg->max_batch_seqs > cfg->max_batch_tokens) {
        snprintf(err, SL_ERR_LEN, "backend: invalid configuration (threads %d, block size %u, blocks %u, "
                 "batch tokens %d, batch sequences %d, context %d)", cfg->n_threads, cfg->kv_block_size,
                 cfg->n_kv_blocks, cfg->max_batch_tokens, cfg->max_batch_seqs, cfg->max_ctx);
        return SL_EINVAL;
    }
    return SL_OK;
}

sl_status sl_backend_check_batch(const sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs)
{
    if (n_seqs < 1 || n_seqs > sl_backend_max_batch_seqs(&b->cfg))
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
    return SL_OK;
}

sl_status sl_backend_check_sample(const sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                  const sl_sample_req *reqs)
{
    int32_t n_vocab = b->model->hp.n_vocab;
    for (int32_t i = 0; i < n_seqs; i++) {
        const sl_sample_req *r = &reqs[i];
        if (seqs[i].logits_all)
            return SL_EINVAL;
        if (!r->params)
            continue;
        if (sl_sampling_validate(r->params, n_vocab, NULL) < 0 || r->n_history < 0 ||
            (r->n_history > 0 && !r->history) || r->n_ban < 0 || (r->n_ban > 0 && !r->ban) ||
            (r->params->n_logprobs >= 0 && !r->record))
            return SL_EINVAL;
        for (int32_t j = 0; j < r->n_ban; j++)
            if (r->ban[j] < 0 || r->ban[j] >= n_vocab)
                return SL_EINVAL;
    }
    return SL_OK;
}
