/* tests/unit/kernels/backend_sample_test.c: sl_backend_forward_sample
 * (kernels/backend.c, backend_check.c). A backend that samples trusts what
 * reaches it, so every malformed request must stop here, before the
 * backend's slot is called: a logits_all sequence, parameters out of range,
 * a banned id outside the vocabulary, logprobs without a record, a history
 * pointer missing, and whatever sl_backend_forward refuses. A backend
 * without the slot gets the default: its forward's rows drawn by the
 * reference sampler, the same tokens and records as drawing them by hand.
 * sl_backend_forward_sample_overlap on a backend without its slot writes the
 * masks first: the draw sees them, and a refused batch never calls fill. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/sampler.h"

typedef struct {
    sl_backend base;
    sl_model model;
    int calls;
} probe_backend;

/* Row i: a pattern of the sequence's first token, so rows differ. */
static void probe_row(const sl_batch_seq *s, int32_t V, float *row)
{
    for (int32_t v = 0; v < V; v++)
        row[v] = sinf(0.37f * (float)v + (float)s->tokens[0]) * 3.0f;
}

static sl_status probe_forward(sl_backend *b, const sl_batch_seq *s, int32_t n, float *logits)
{
    int32_t V = b->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        probe_row(&s[i], V, logits + (size_t)i * (size_t)V);
    return SL_OK;
}

static sl_status probe_sample(sl_backend *b, const sl_batch_seq *s, int32_t n, const sl_sample_req *r,
                              int32_t *tokens)
{
    (void)s, (void)r;
    ((probe_backend *)b)->calls++;
    for (int32_t i = 0; i < n; i++)
        tokens[i] = 0;
    return SL_OK;
}

static void probe_destroy(sl_backend *b)
{
    (void)b;
}

static const sl_backend_ops ops_sampling = {"probe", probe_forward, probe_destroy, probe_sample, NULL};
static const sl_backend_ops ops_plain = {"probe", probe_forward, probe_destroy, NULL, NULL};

static void probe_init(probe_backend *p, const sl_backend_ops *ops)
{
    memset(p, 0, sizeof *p);
    p->model.hp.n_vocab = 100;
    p->base.ops = ops;
    p->base.model = &p->model;
    p->base.cfg = (sl_backend_config){.device = "probe", .n_threads = 1, .kv_block_size = 16, .n_kv_blocks = 8,
                                      .max_batch_tokens = 32, .max_ctx = 128};
}

static const int32_t tokens[2] = {5, 6}, blocks[1] = {0}, history[3] = {1, 2, 3};

static sl_batch_seq seq(void)
{
    return (sl_batch_seq){.tokens = tokens, .n_tokens = 2, .pos = 0, .blocks = blocks, .n_blocks = 1};
}

Test(backend_sample, without_the_slot_the_default_draws_with_the_reference_sampler)
{
    probe_backend p;
    probe_init(&p, &ops_plain);
    cr_assert_not(sl_backend_samples(&p.base));
    cr_assert_str_eq(sl_backend_describe(&p.base), "probe");
    int32_t V = p.model.hp.n_vocab;
    sl_sampling_params sp[3];
    for (int k = 0; k < 3; k++) {
        sl_sampling_params_default(&sp[k]);
        sp[k].seed = 11 + (uint64_t)k;
    }
    sp[0].temperature = 0.0f;
    sp[0].n_logprobs = 3;
    sp[2].repetition_penalty = 1.5f;
    int32_t t2[2] = {7, 8}, ban[1] = {0};
    sl_batch_seq s[4] = {seq(), seq(), seq(), seq()};
    s[2].tokens = t2;
    sl_logprob_record rec[4];
    sl_sample_req r[4] = {
        {.params = &sp[0], .history = history, .n_history = 3, .draw_index = 0, .record = &rec[0]},
        {.params = NULL},   /* draws nothing: -1 */
        {.params = &sp[1], .history = history, .n_history = 3, .draw_index = 5, .ban = ban, .n_ban = 1},
        {.params = &sp[2], .history = history, .n_history = 2, .draw_index = 2},
    };
    int32_t tok[4];
    cr_assert_eq(sl_backend_forward_sample(&p.base, s, 4, r, tok), SL_OK);
    cr_assert_eq(tok[1], -1);
    sl_sampler_scratch *scr;
    cr_assert_eq(sl_sampler_scratch_create(V, &scr), SL_OK);
    float row[100];
    for (int i = 0; i < 4; i++) {
        if (!r[i].params)
            continue;
        probe_row(&s[i], V, row);
        for (int32_t j = 0; j < r[i].n_ban; j++)
            row[r[i].ban[j]] = -INFINITY;
        int32_t want;
        sl_logprob_record ref;
        cr_assert_eq(sl_sampler_sample(r[i].params, row, V, r[i].history, r[i].n_history, r[i].draw_index, scr, &want,
                                       r[i].params->n_logprobs >= 0 ? &ref : NULL), SL_OK);
        cr_assert_eq(tok[i], want, "sequence %d", i);
        if (r[i].params->n_logprobs >= 0) {
            cr_assert_eq(rec[i].token, ref.token);
            cr_assert_eq(rec[i].n_top, ref.n_top);
            cr_assert_eq(rec[i].logprob, ref.logprob);
        }
    }
    sl_sampler_scratch_destroy(scr);
    sl_backend_destroy(&p.base);   /* frees the default's rows */
}

Test(backend_sample, a_good_request_reaches_the_backend)
{
    probe_backend p;
    probe_init(&p, &ops_sampling);
    cr_assert(sl_backend_samples(&p.base));
    sl_sampling_params sp;
    sl_sampling_params_default(&sp);
    sp.n_logprobs = 2;
    sl_logprob_record rec;
    int32_t ban[1] = {99};
    sl_batch_seq s[2] = {seq(), seq()};
    sl_sample_req r[2] = {{.params = &sp, .history = history, .n_history = 3, .ban = ban, .n_ban = 1, .record = &rec},
                          {.params = NULL}};   /* a prefill chunk that draws nothing */
    int32_t tok[2];
    cr_assert_eq(sl_backend_forward_sample(&p.base, s, 2, r, tok), SL_OK);
    cr_assert_eq(p.calls, 1);
}

Test(backend_sample, malformed_requests_stop_before_the_backend)
{
    probe_backend p;
    probe_init(&p, &ops_sampling);
    sl_sampling_params good, bad_temp, bad_bias;
    sl_sampling_params_default(&good);
    bad_temp = good;
    bad_temp.temperature = -1.0f;
    bad_bias = good;
    bad_bias.n_logit_bias = 1;
    bad_bias.logit_bias[0] = (sl_logit_bias){100, 1.0f};   /* one past the vocabulary */
    sl_sampling_params want_lp = good;
    want_lp.n_logprobs = 0;
    int32_t ban_out[1] = {100}, ban_neg[1] = {-1}, tok;
    struct {
        const char *what;
        sl_batch_seq s;
        sl_sample_req r;
    } cases[] = {
        {"logits_all", {.tokens = tokens, .n_tokens = 2, .blocks = blocks, .n_blocks = 1, .logits_all = true},
         {.params = &good}},
        {"temperature < 0", seq(), {.params = &bad_temp}},
        {"bias token outside the vocabulary", seq(), {.params = &bad_bias}},
        {"banned id past the vocabulary", seq(), {.params = &good, .ban = ban_out, .n_ban = 1}},
        {"negative banned id", seq(), {.params = &good, .ban = ban_neg, .n_ban = 1}},
        {"ban count without ids", seq(), {.params = &good, .n_ban = 1}},
        {"logprobs without a record", seq(), {.params = &want_lp}},
        {"history count without ids", seq(), {.params = &good, .n_history = 3}},
        {"negative history count", seq(), {.params = &good, .history = history, .n_history = -1}},
        {"token outside the vocabulary",
         {.tokens = (const int32_t[]){100}, .n_tokens = 1, .blocks = blocks, .n_blocks = 1},
         {.params = &good}},
        {"block outside the cache",
         {.tokens = tokens, .n_tokens = 2, .blocks = (const int32_t[]){8}, .n_blocks = 1},
         {.params = &good}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(sl_backend_forward_sample(&p.base, &cases[i].s, 1, &cases[i].r, &tok), SL_EINVAL, "%s",
                     cases[i].what);
    cr_assert_eq(p.calls, 0, "no malformed request reached the backend");
}

/* The fill of sl_backend_forward_sample_overlap: allows token 42 only, and
 * counts its calls and whether the sampling slot had run before it. */
typedef struct {
    uint32_t *allow;
    int calls;
    probe_backend *p;
    int slot_calls_seen;
} fill_probe;

static void fill_only_42(void *ctx)
{
    fill_probe *f = ctx;
    f->calls++;
    f->slot_calls_seen = f->p ? f->p->calls : 0;
    memset(f->allow, 0, 4 * sizeof *f->allow);
    f->allow[42 / 32] |= 1u << (42 % 32);
}

Test(backend_sample, overlap_without_its_slot_fills_the_masks_before_the_draw)
{
    uint32_t allow[4];
    memset(allow, 0xff, sizeof allow);   /* every token, until fill writes the mask */
    sl_sampling_params sp;
    sl_sampling_params_default(&sp);
    sp.seed = 3;
    sl_batch_seq s[1] = {seq()};
    sl_sample_req r[1] = {{.params = &sp, .history = history, .n_history = 3, .allow = allow}};
    int32_t tok[1];

    probe_backend p;   /* the default: forward, then the reference sampler */
    probe_init(&p, &ops_plain);
    fill_probe f = {allow, 0, NULL, 0};
    sl_allow_fill fill = {fill_only_42, &f};
    cr_assert_eq(sl_backend_forward_sample_overlap(&p.base, s, 1, r, tok, &fill), SL_OK);
    cr_assert_eq(f.calls, 1);
    cr_assert_eq(tok[0], 42, "the draw saw the mask fill wrote");
    sl_backend_destroy(&p.base);   /* frees the default's rows (probe_destroy frees nothing) */

    probe_init(&p, &ops_sampling);   /* a sampling slot without the overlap slot */
    f = (fill_probe){allow, 0, &p, -1};
    cr_assert_eq(sl_backend_forward_sample_overlap(&p.base, s, 1, r, tok, &fill), SL_OK);
    cr_assert_eq(f.calls, 1);
    cr_assert_eq(f.slot_calls_seen, 0, "fill ran before the slot");
    cr_assert_eq(p.calls, 1);

    f = (fill_probe){allow, 0, &p, -1};   /* refused: logits_all */
    s[0].logits_all = true;
    cr_assert_eq(sl_backend_forward_sample_overlap(&p.base, s, 1, r, tok, &fill), SL_EINVAL);
    cr_assert_eq(f.calls, 0);
    sl_backend_destroy(&p.base);
}
