/* tests/unit/gpu-worker/fake_backend.c: see fake_backend.h. */
#include "fake_backend.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sampler.h"

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Logits of the position `last` of a sequence: a hash of the tokens at
 * positions [0, last] read through the block table. Values in [0, 8) with
 * enough spread that sampling at temperature 1 still varies. */
static sl_status logits_row(fake_backend *f, const sl_batch_seq *s, int32_t last, float *row)
{
    uint32_t bs = f->base.cfg.kv_block_size;
    uint64_t h = 0x12345678u;
    for (int32_t p = 0; p <= last; p++) {
        int32_t t = f->kv[(int64_t)s->blocks[p / bs] * bs + p % bs];
        if (t < 0)
            return SL_EINVAL;   /* read of a position never written: a scheduler bug */
        h = mix(h ^ ((uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1)));
    }
    for (int32_t v = 0; v < f->model.hp.n_vocab; v++)
        row[v] = (float)(mix(h + (uint64_t)v * 0x632be59bd9b4e019ull) >> 40) / (float)(1 << 24) * 8.0f;
    return SL_OK;
}

static sl_status fake_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    fake_backend *f = (fake_backend *)b;
    uint32_t bs = b->cfg.kv_block_size;
    int64_t tokens = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        tokens += seqs[i].n_tokens;
        f->prompt_tokens += seqs[i].prompt ? seqs[i].n_tokens : 0;
    }
    *f->clock += f->cost_fixed_ns + f->cost_token_ns * (uint64_t)tokens;
    if (f->calls++ == f->fail_at)
        return SL_EBACKEND;
    float *row = logits;
    for (int32_t i = 0; i < n_seqs; i++) {
        const sl_batch_seq *s = &seqs[i];
        for (int32_t j = 0; j < s->n_tokens; j++) {
            int32_t p = s->pos + j;
            f->kv[(int64_t)s->blocks[p / bs] * bs + p % bs] = s->tokens[j];
        }
        for (int32_t j = s->logits_all ? 0 : s->n_tokens - 1; j < s->n_tokens; j++) {
            sl_status rc = logits_row(f, s, s->pos + j, row);
            if (rc < 0)
                return rc;
            row += f->model.hp.n_vocab;
        }
    }
    return SL_OK;
}

static void fake_destroy(sl_backend *b)
{
    (void)b;
}

static const sl_backend_ops fake_ops = {.name = "fake", .forward = fake_forward, .destroy = fake_destroy};

/* What a device sampler does, with the reference sampler: the allow bitmap
 * and the ban, then one draw per asked sequence from its row. */
static sl_status fake_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                     const sl_sample_req *reqs, int32_t *tokens)
{
    fake_backend *f = (fake_backend *)b;
    sl_status rc = fake_forward(b, seqs, n_seqs, f->rows);
    if (rc < 0)
        return rc;
    int32_t V = f->model.hp.n_vocab;
    for (int32_t i = 0; i < n_seqs; i++) {
        const sl_sample_req *r = &reqs[i];
        tokens[i] = -1;
        if (!r->params)
            continue;
        float *row = f->rows + (size_t)i * (size_t)V;
        bool any = !r->allow;
        for (int32_t v = 0; r->allow && v < V; v++)
            if (!(r->allow[v / 32] >> (v % 32) & 1u))
                row[v] = -INFINITY;
        for (int32_t j = 0; j < r->n_ban; j++)
            row[r->ban[j]] = -INFINITY;
        for (int32_t v = 0; !any && v < V; v++)
            any = row[v] > -INFINITY;
        if (!any)
            continue;   /* nothing allowed: -1, as the device sampler */
        rc = sl_sampler_sample(r->params, row, V, r->history, r->n_history, r->draw_index, f->scratch, &tokens[i],
                               r->params->n_logprobs >= 0 ? r->record : NULL);
        if (rc < 0)
            return rc;
    }
    return SL_OK;
}

static const sl_backend_ops fake_ops_sampling = {
    .name = "fake", .forward = fake_forward, .destroy = fake_destroy, .forward_sample = fake_forward_sample};

sl_status fake_backend_sample_on_device(fake_backend *f)
{
    int32_t V = f->model.hp.n_vocab;
    f->rows = malloc((size_t)f->base.cfg.max_batch_tokens * (size_t)V * sizeof *f->rows);
    if (!f->rows || sl_sampler_scratch_create(V, &f->scratch) < 0)
        return SL_ENOMEM;
    f->base.ops = &fake_ops_sampling;
    return SL_OK;
}

sl_status fake_backend_init(fake_backend *f, int32_t n_vocab, uint32_t block_size, uint32_t n_blocks,
                            int32_t max_batch_tokens, int32_t max_ctx, uint64_t *clock)
{
    memset(f, 0, sizeof *f);
    f->model.hp.n_vocab = n_vocab;
    f->model.hp.n_ctx_train = max_ctx;
    strcpy(f->model.name, "fake-model");
    f->base.ops = &fake_ops;
    f->base.model = &f->model;
    f->base.cfg = (sl_backend_config){.device = "fake", .n_threads = 1, .kv_block_size = block_size,
                                      .n_kv_blocks = n_blocks, .max_batch_tokens = max_batch_tokens,
                                      .max_ctx = max_ctx};
    f->base.kv_bytes = (uint64_t)n_blocks * block_size * sizeof(int32_t);
    f->clock = clock;
    f->fail_at = -1;
    f->kv = malloc((size_t)n_blocks * block_size * sizeof *f->kv);
    if (!f->kv)
        return SL_ENOMEM;
    memset(f->kv, 0xff, (size_t)n_blocks * block_size * sizeof *f->kv);
    return SL_OK;
}

void fake_backend_fini(fake_backend *f)
{
    sl_backend_destroy(&f->base);   /* the default forward_sample's rows; fake_destroy frees nothing */
    free(f->kv);
    f->kv = NULL;
    free(f->rows);
    f->rows = NULL;
    sl_sampler_scratch_destroy(f->scratch);
    f->scratch = NULL;
}
