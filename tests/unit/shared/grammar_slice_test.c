/* tests/unit/shared/grammar_slice_test.c: the grammar-text region: submit copies
 * the text into the mailbox's slice, the worker reads it back in place, and bad
 * texts or a disabled region are refused without taking anything. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shared/shm_layout.h"
#include "shm_testlib.h"

typedef struct {
    char name[64];
    sl_shm_t *m, *fe, *w;
} fixture;

static void setup_with(fixture *f, const char *tag, uint32_t grammar_bytes_max)
{
    char err[SL_ERR_LEN];
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 1;
    l.n_mailboxes = 4;
    l.submit_ring_entries = 4;
    l.token_ring_entries = 4;
    l.prompt_tokens_max = 64;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 8;
    l.grammar_bytes_max = grammar_bytes_max;
    tl_name(f->name, sizeof(f->name), tag);
    f->m = sl_shm_create(f->name, &l, err);
    cr_assert_not_null(f->m, "%s", err);
    f->fe = sl_shm_attach(f->name, SL_SHM_ROLE_FRONTEND, 0, err);
    f->w = sl_shm_attach(f->name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert(f->fe && f->w, "%s", err);
}

static void teardown(fixture *f)
{
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_shm_check(f->m, 1, err), SL_OK, "%s", err);
    sl_shm_census_info c;
    sl_shm_census(f->m, &c);
    sl_shm_detach(f->fe);
    sl_shm_detach(f->w);
    sl_shm_destroy(f->m);
}

static sl_status submit(sl_shm_t *fe, const char *grammar, uint32_t len, sl_shm_ticket *t)
{
    static const int32_t prompt[3] = {1, 2, 3};
    sl_shm_request r;
    memset(&r, 0, sizeof(r));
    sl_sampling_params_default(&r.params);
    r.max_tokens = 4;
    r.prompt = prompt;
    r.n_prompt = 3;
    r.grammar = grammar;
    r.grammar_len = len;
    return sl_shm_submit(fe, &r, t);
}

static void assert_nothing_taken(fixture *f)
{
    sl_shm_census_info c;
    sl_shm_census(f->m, &c);
    cr_assert_eq(c.mailboxes[SL_MAILBOX_STATE_FREE], 4, "no mailbox kept");
    cr_assert_eq(c.blocks_free, 8, "no prompt block kept");
}

Test(grammar_slice, submit_then_worker_reads_the_text)
{
    fixture f;
    setup_with(&f, "gram", 256);
    static const char g[] = "root ::= \"yes\" | \"no\"";
    sl_shm_ticket t, wt, t2, wt2;
    cr_assert_eq(submit(f.fe, g, (uint32_t)strlen(g), &t), SL_OK);
    cr_assert_eq(submit(f.fe, NULL, 0, &t2), SL_OK);
    const char *text;
    uint32_t len;
    cr_assert_eq(sl_shm_grammar_get(f.w, t, &text, &len), SL_ESTATE, "not before the worker took it");
    cr_assert_null(text);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt2), SL_OK);
    cr_assert_eq(sl_shm_grammar_get(f.w, wt, &text, &len), SL_OK);
    cr_assert_eq(len, strlen(g));
    cr_assert(memcmp(text, g, len) == 0);
    cr_assert_eq(sl_shm_grammar_get(f.w, wt2, &text, &len), SL_OK);
    cr_assert(text == NULL && len == 0, "an unconstrained request has no text");
    sl_shm_ticket bad = {.index = 99, .incarnation = wt.incarnation};
    cr_assert_eq(sl_shm_grammar_get(f.w, bad, &text, &len), SL_ERANGE);
    sl_shm_ticket stale = {.index = wt.index, .incarnation = wt.incarnation + 7};
    cr_assert_eq(sl_shm_grammar_get(f.w, stale, &text, &len), SL_ESTALE);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, NULL), SL_OK);
    cr_assert_eq(sl_shm_grammar_get(f.w, wt, &text, &len), SL_ESTATE, "not after finish");
    cr_assert_eq(sl_shm_worker_finish(f.w, wt2, SL_FINISH_REASON_STOP, NULL), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t2), SL_OK);

    /* the next request in the same mailbox sees its own (shorter) text only */
    static const char g2[] = "root ::= [0-9]";
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(submit(f.fe, g2, (uint32_t)strlen(g2), &t), SL_OK);
        cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
        cr_assert_eq(sl_shm_grammar_get(f.w, wt, &text, &len), SL_OK);
        cr_assert(len == strlen(g2) && memcmp(text, g2, len) == 0);
        cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, NULL), SL_OK);
        cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    }
    teardown(&f);
}

Test(grammar_slice, text_of_exactly_the_limit_is_accepted)
{
    fixture f;
    setup_with(&f, "gramfull", 64);
    char g[64];
    memset(g, 'a', sizeof(g));
    sl_shm_ticket t, wt;
    cr_assert_eq(submit(f.fe, g, 64, &t), SL_OK);
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    const char *text;
    uint32_t len;
    cr_assert_eq(sl_shm_grammar_get(f.w, wt, &text, &len), SL_OK);
    cr_assert(len == 64 && memcmp(text, g, 64) == 0);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, NULL), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    teardown(&f);
}

Test(grammar_slice, refusals_take_nothing)
{
    fixture f;
    setup_with(&f, "gramrefuse", 64);
    char g[65];
    memset(g, 'a', sizeof(g));
    sl_shm_ticket t;
    cr_assert_eq(submit(f.fe, g, 65, &t), SL_EINVAL, "longer than grammar_bytes_max");
    cr_assert_eq(t.index, UINT32_MAX);
    g[10] = 0;
    cr_assert_eq(submit(f.fe, g, 20, &t), SL_EINVAL, "a NUL byte inside");
    cr_assert_eq(submit(f.fe, NULL, 5, &t), SL_EINVAL, "a length without text");
    assert_nothing_taken(&f);
    teardown(&f);
}

Test(grammar_slice, zero_limit_turns_grammars_off)
{
    fixture f;
    setup_with(&f, "gramoff", 0);
    sl_shm_ticket t, wt;
    cr_assert_eq(submit(f.fe, "root ::= \"a\"", 12, &t), SL_EINVAL);
    assert_nothing_taken(&f);
    cr_assert_eq(submit(f.fe, NULL, 0, &t), SL_OK, "unconstrained requests still run");
    cr_assert_eq(sl_shm_worker_pop(f.w, &wt), SL_OK);
    const char *text;
    uint32_t len;
    cr_assert_eq(sl_shm_grammar_get(f.w, wt, &text, &len), SL_OK);
    cr_assert(text == NULL && len == 0);
    cr_assert_eq(sl_shm_worker_finish(f.w, wt, SL_FINISH_REASON_STOP, NULL), SL_OK);
    cr_assert_eq(sl_shm_release(f.fe, t), SL_OK);
    teardown(&f);
}

Test(grammar_slice, limit_above_bound_is_refused_at_create)
{
    char name[64], err[SL_ERR_LEN];
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.grammar_bytes_max = SL_SHM_GRAMMAR_BYTES_MAX + 1;
    tl_name(name, sizeof(name), "grambig");
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert(strstr(err, "grammar_bytes_max") != NULL, "%s", err);
}

Test(grammar_slice, region_is_not_reserved_until_written)
{
    fixture f;
    setup_with(&f, "gramlazy", 65536);
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm%s", f.name);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    /* 4 x 64 KiB of grammar region is past the fallocated part: the file holds
     * fewer blocks than its size */
    cr_assert_lt((uint64_t)st.st_blocks * 512, (uint64_t)st.st_size - 4 * 65536 + 4096);
    teardown(&f);
}
