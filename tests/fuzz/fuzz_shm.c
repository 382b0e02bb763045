/* tests/fuzz/fuzz_shm.c: libFuzzer target `shm`: a real segment (made by
 * shared/shm.c and populated by fz_shm_populated) is corrupted with fuzzed
 * bytes, then everything that reads it runs: the attach checks, the worker
 * (pop, request and prompt reads, push, finish), a front end (token reads,
 * result, cancel, release, a new submit), the master (census, invariant
 * check, both recovery sweeps) and the admin's readers (worker info,
 * config snapshot, counters, histograms). Each may refuse; none may crash,
 * hang or touch memory outside the mapping.
 * Input: a list of patches, each [region u8][offset u32][len u8][bytes]:
 * region picks header, slots, ring, mailboxes, block tables, tokens,
 * records, block owners or arena (the offset wraps inside it); region
 * values 9.. write one mailbox control word (state, owner, incarnation)
 * from the next 8 bytes, the most useful corruption being well-formed-
 * looking words. The last 8 bytes also name an extra ticket to use.
 * Oracle beyond memory safety: a segment sl_shm_check accepts before a
 * recovery sweep is still accepted after it (recovery keeps invariants).
 * Includes shared/shm_impl.h (private to shared/) for the mapping's base
 * and size only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/shm_impl.h"
#include "shared/shm_layout.h"
#include "tests/fuzz/fuzz_common.h"

static sl_shm_t *M;
static sl_shm_ticket tickets[FZ_SHM_TICKETS];
static uint8_t *pristine;
static uint64_t region_off[10];   /* start of each region; [9] = segment size */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    M = fz_shm_populated("shm", tickets);
    pristine = malloc(M->size);
    if (pristine == NULL)
        abort();
    memcpy(pristine, M->hdr, M->size);
    const sl_header_shm *h = M->hdr;
    uint64_t offs[10] = {0,
                         h->off_slots,
                         h->off_ring,
                         h->off_mailboxes,
                         h->off_block_tables,
                         h->off_tokens,
                         h->off_records,
                         h->off_block_owners,
                         h->off_arena,
                         M->size};
    memcpy(region_off, offs, sizeof offs);
    return 0;
}

static void corrupt(fz_in *in)
{
    uint8_t *base = (uint8_t *)M->hdr;
    int guard = 0;
    while (in->n > 8 && guard++ < 64) {
        uint8_t region = fz_u8(in);
        if (region >= 9) {
            uint32_t idx = fz_u8(in) % M->limits.n_mailboxes;
            uint8_t state = fz_u8(in);
            uint32_t owner = fz_u8(in);
            uint32_t inc = fz_u32(in);
            /* small owners and states most of the time: near-miss words */
            if (owner >= 0xf0)
                owner = owner == 0xff ? SL_SHM_OWNER_ORPHAN : SL_SHM_OWNER_NONE;
            atomic_store(&M->mailboxes[idx].word, sl_word_make(state % 9, owner, inc % 4));
            continue;
        }
        uint64_t start = region_off[region], end = region_off[region + 1];
        if (region == 6 && start == 0)
            continue;
        uint32_t off = fz_u32(in);
        size_t len;
        const uint8_t *b = fz_bytes(in, fz_u8(in), &len);
        if (end <= start)
            continue;
        uint64_t at = start + off % (end - start);
        if (len > end - at)
            len = end - at;
        memcpy(base + at, b, len);
    }
}

static volatile uint64_t sink;

static void frontend_reads(sl_shm_t *fe, const sl_shm_ticket *ts, size_t n)
{
    int32_t toks[8];
    sl_logprob_record recs[8];
    for (size_t i = 0; i < n; i++) {
        uint32_t got = 0;
        sl_mailbox_state st;
        sl_shm_read_tokens(fe, ts[i], toks, recs, 8, &got, &st);
        if (got > 8)
            abort();
        sl_shm_result_info info;
        sl_shm_result(fe, ts[i], &info);
        sink += info.error[SL_SHM_ERROR_LEN - 1] == 0;
        if (i & 1)
            sl_shm_cancel(fe, ts[i]);
        sl_shm_release(fe, ts[i]);
    }
}

static void worker_steps(sl_shm_t *w, const sl_shm_ticket *ts, size_t n)
{
    int32_t prompt[64];
    for (uint32_t k = 0; k < M->limits.n_mailboxes + 2; k++) {
        sl_shm_ticket t;
        if (sl_shm_worker_pop(w, &t) != SL_OK)
            break;
        sl_sampling_params p;
        int32_t max_tokens, min_tokens;
        uint32_t ignore_eos, n_prompt = 0;
        uint64_t rid;
        if (sl_shm_request_get(w, t, &p, &max_tokens, &min_tokens, &ignore_eos, &rid, &n_prompt) == SL_OK &&
            n_prompt <= 64)
            sl_shm_prompt_copy(w, t, 0, n_prompt, prompt);
        sl_shm_prompt_copy(w, t, n_prompt / 2, 64, prompt);  /* past the end: must be refused */
        sink += sl_shm_mailbox(w, t) != NULL;
        sl_shm_worker_set_admitted(w, t, sl_shm_now_ns());
        sl_shm_worker_push(w, t, 42, NULL);
        sink += sl_shm_worker_ring_space(w, t) + (uint64_t)sl_shm_worker_cancelled(w, t);
        if (k & 1)
            sl_shm_worker_finish(w, t, SL_FINISH_REASON_LENGTH, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        sl_shm_worker_push(w, ts[i], 43, NULL);
        sl_shm_worker_finish(w, ts[i], (i & 1) ? SL_FINISH_REASON_ERROR : SL_FINISH_REASON_STOP, "fuzz");
    }
    sl_shm_worker_flush_wakeups(w);
}

static void readers(void)
{
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(M, &wi);
    if (memchr(wi.model_id, 0, sizeof wi.model_id) == NULL)
        abort();  /* a reader must hand out a terminated string */
    sink += (uint64_t)sl_shm_worker_alive(M, sl_shm_now_ns(), 1000000000ull);
    char buf[SL_SHM_CONFIG_MAX + 1];
    size_t len = 0;
    if (sl_shm_config_read(M, buf, sizeof buf, &len) == SL_OK && (len >= sizeof buf || buf[len] != 0))
        abort();
    for (int c = 0; c < SL_COUNTER_COUNT; c++)
        sink += sl_shm_counter_get(M, (sl_counter)c);
    uint64_t cum[SL_SHM_HISTOGRAM_BUCKETS + 1], sum;
    for (int hh = 0; hh < SL_HISTOGRAM_COUNT; hh++)
        sl_shm_histogram_read(M, (sl_histogram)hh, cum, &sum);
    sl_shm_census_info census;
    sl_shm_census(M, &census);
}

/* Recovery, with its oracle: what check accepted before, it accepts after. */
static void recover(sl_status (*sweep)(sl_shm_t *))
{
    char err[SL_ERR_LEN];
    int ok_before = sl_shm_check(M, 0, err) == SL_OK;
    sweep(M);
    if (ok_before && sl_shm_check(M, 0, err) != SL_OK) {
        fprintf(stderr, "fuzz_shm: recovery broke an invariant: %s\n", err);
        abort();
    }
}

static sl_status sweep_worker(sl_shm_t *m) { return sl_shm_recover_worker_death(m, NULL); }
static sl_status sweep_fe0(sl_shm_t *m) { return sl_shm_recover_frontend_death(m, 0, NULL); }
static sl_status sweep_fe1(sl_shm_t *m) { return sl_shm_recover_frontend_death(m, 1, NULL); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memcpy(M->hdr, pristine, M->size);
    fz_in in = {data, size};
    sl_shm_ticket ts[FZ_SHM_TICKETS + 1];
    memcpy(ts, tickets, sizeof tickets);
    if (size >= 8) {
        memcpy(&ts[FZ_SHM_TICKETS].index, data + size - 8, 4);
        memcpy(&ts[FZ_SHM_TICKETS].incarnation, data + size - 4, 4);
        in.n -= 8;
    } else {
        ts[FZ_SHM_TICKETS] = (sl_shm_ticket){UINT32_MAX, 0};
    }
    corrupt(&in);

    char err[SL_ERR_LEN];
    readers();
    sl_shm_check(M, 1, err);
    sl_shm_t *w = sl_shm_attach(M->name, SL_SHM_ROLE_WORKER, 0, err);
    sl_shm_t *fe = sl_shm_attach(M->name, SL_SHM_ROLE_FRONTEND, 0, err);
    if (w != NULL)
        worker_steps(w, ts, FZ_SHM_TICKETS + 1);
    if (fe != NULL) {
        frontend_reads(fe, ts, FZ_SHM_TICKETS + 1);
        int32_t prompt[40] = {1, 2, 3};
        sl_shm_request r;
        memset(&r, 0, sizeof r);
        sl_sampling_params_default(&r.params);
        r.max_tokens = 4;
        r.prompt = prompt;
        r.n_prompt = 40;
        sl_shm_ticket t;
        if (sl_shm_submit(fe, &r, &t) == SL_OK && w != NULL)
            worker_steps(w, &t, 1);
    }
    sl_shm_detach(fe);
    sl_shm_detach(w);
    recover(sweep_worker);
    recover(sweep_fe0);
    recover(sweep_fe1);
    sl_shm_recover_frontend_death(M, ts[FZ_SHM_TICKETS].index, NULL);  /* any slot number */
    readers();
    return 0;
}
