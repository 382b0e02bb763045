/* kernels/cpu/sample_batch.c: see sample_batch.h. Runs on the thread that
 * drives the backend, fanning the rows out to a thread pool.
 * Trade-off: a row is the unit of work (one request's draw), so a step with
 * one sequence samples on one thread; splitting a row would make its result
 * depend on the thread count, which the sampler's guarantee forbids. */
#include "kernels/cpu/sample_batch.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/sampler.h"

struct sl_sample_batch {
    int32_t n_vocab;
    int32_t max_rows;
    float *rows;                   /* (max_rows, n_vocab) */
    sl_threadpool *pool;           /* NULL: the caller draws alone */
    bool own_pool;                 /* created here, destroyed with the batch */
    int n_scratch;                 /* the pool's threads, or 1 */
    sl_sampler_scratch **scratch;  /* (n_scratch) one per thread */
    int32_t *todo;                 /* (max_rows) this draw's rows with params */

    /* the draw in progress (sl_sample_batch_draw) */
    const sl_sample_req *reqs;
    int32_t *tokens;
};

sl_status sl_sample_batch_create(int32_t n_vocab, int32_t max_rows, sl_threadpool *pool, int n_threads,
                                 sl_sample_batch **out)
{
    *out = NULL;
    if (n_vocab < 1 || max_rows < 1 || (!pool && n_threads < 1))
        return SL_EINVAL;
    sl_sample_batch *sb = calloc(1, sizeof *sb);
    if (!sb)
        return SL_ENOMEM;
    sb->n_vocab = n_vocab;
    sb->max_rows = max_rows;
    sb->pool = pool;
    if (!pool && n_threads > 1) {
        if (sl_threadpool_create(n_threads, &sb->pool) < 0)
            goto nomem;
        sb->own_pool = true;
    }
    sb->n_scratch = sb->pool ? sl_threadpool_size(sb->pool) : 1;
    sb->rows = malloc((size_t)max_rows * (size_t)n_vocab * sizeof *sb->rows);
    sb->todo = malloc((size_t)max_rows * sizeof *sb->todo);
    sb->scratch = calloc((size_t)sb->n_scratch, sizeof *sb->scratch);
    if (!sb->rows || !sb->todo || !sb->scratch)
        goto nomem;
    for (int i = 0; i < sb->n_scratch; i++)
        if (sl_sampler_scratch_create(n_vocab, &sb->scratch[i]) < 0)
            goto nomem;
    *out = sb;
    return SL_OK;
nomem:
    sl_sample_batch_destroy(sb);
    return SL_ENOMEM;
}

void sl_sample_batch_destroy(sl_sample_batch *sb)
{
    if (!sb)
        return;
    for (int i = 0; sb->scratch && i < sb->n_scratch; i++)
        sl_sampler_scratch_destroy(sb->scratch[i]);
    free(sb->scratch);
    if (sb->own_pool)
        sl_threadpool_destroy(sb->pool);
    free(sb->rows);
    free(sb->todo);
    free(sb);
}

float *sl_sample_batch_rows(sl_sample_batch *sb)
{
    return sb->rows;
}

/* Sets every logit the allow bitmap leaves out to -inf (the grammar mask, as
 * ban does for single ids); a word of all ones costs one compare. */
static void apply_allow(float *row, int32_t n_vocab, const uint32_t *allow)
{
    for (int32_t w = 0; w * 32 < n_vocab; w++) {
        uint32_t bits = allow[w];
        if (bits == UINT32_MAX)
            continue;
        int32_t end = w * 32 + 32 < n_vocab ? w * 32 + 32 : n_vocab;
        for (int32_t t = w * 32; t < end; t++)
            if (!(bits >> (t & 31) & 1u))
                row[t] = -INFINITY;
    }
}

/* 1 when some logit of the row can still be drawn (NaN counts as -inf). */
static bool any_drawable(const float *row, int32_t n_vocab)
{
    for (int32_t t = 0; t < n_vocab; t++)
        if (row[t] > -INFINITY)
            return true;
    return false;
}

/* Draws row sb->todo[k] with thread's scratch: writes only that row, its
 * request's record and its token, so rows may be drawn on any threads. */
static void draw_row(void *ctx, int64_t k, int thread)
{
    sl_sample_batch *sb = ctx;
    int32_t i = sb->todo[k];
    const sl_sample_req *r = &sb->reqs[i];
    float *row = sb->rows + (size_t)i * (size_t)sb->n_vocab;
    if (r->allow)
        apply_allow(row, sb->n_vocab, r->allow);
    for (int32_t j = 0; j < r->n_ban; j++)
        row[r->ban[j]] = -INFINITY;
    bool want = r->params->n_logprobs >= 0;
    if (want)
        r->record->token = -1;
    /* the sampler's all -inf fallback (argmax, token 0) would pick a token the
     * mask forbids: a constrained row with nothing left draws -1 instead */
    if (r->allow && !any_drawable(row, sb->n_vocab)) {
        sb->tokens[i] = -1;
        return;
    }
    int32_t tok = -1;
    sl_status rc = sl_sampler_sample(r->params, row, sb->n_vocab, r->history, r->n_history, r->draw_index,
                                     sb->scratch[thread], &tok, want ? r->record : NULL);
    sb->tokens[i] = rc < 0 || tok < 0 || tok >= sb->n_vocab ? -1 : tok;
}

void sl_sample_batch_draw(sl_sample_batch *sb, const sl_sample_req *reqs, int32_t n_rows, int32_t *tokens)
{
    int32_t n_todo = 0;
    for (int32_t i = 0; i < n_rows && i < sb->max_rows; i++) {
        tokens[i] = -1;
        if (reqs[i].params)
            sb->todo[n_todo++] = i;
    }
    sb->reqs = reqs;
    sb->tokens = tokens;
    if (sb->pool && n_todo > 1)
        sl_threadpool_run(sb->pool, draw_row, sb, n_todo);
    else
        for (int32_t k = 0; k < n_todo; k++)
            draw_row(sb, k, 0);
    sb->reqs = NULL;
    sb->tokens = NULL;
}
