/* tests/unit/shared/shm_test.c: segment lifecycle, attach refusals, the header's
 * worker fields, config snapshot, counters and histograms. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/shm.h"
#include "shared/shm_layout.h"
#include "shm_testlib.h"

static sl_shm_limits small_limits(void)
{
    sl_shm_limits l;
    sl_shm_limits_default(&l);
    l.n_slots = 2;
    l.n_mailboxes = 8;
    l.submit_ring_entries = 4;
    l.token_ring_entries = 8;
    l.prompt_tokens_max = 64;
    l.prompt_block_tokens = 16;
    l.prompt_arena_blocks = 16;
    return l;
}

/* Overwrites `n` bytes at `off` of segment `name` (to fake a foreign or corrupted one). */
static void poke(const char *name, size_t off, const void *bytes, size_t n)
{
    int fd = shm_open(name, O_RDWR, 0);
    cr_assert(fd >= 0);
    char *p = mmap(NULL, off + n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert(p != MAP_FAILED);
    memcpy(p + off, bytes, n);
    munmap(p, off + n);
    close(fd);
}

Test(shm, create_attach_roundtrip)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "rt");
    sl_shm_limits l = small_limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 1, err);
    cr_assert_not_null(fe, "%s", err);
    cr_assert_eq(sl_shm_get_limits(fe)->n_mailboxes, 8);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(w, "%s", err);
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(m, &wi);
    cr_assert_eq(wi.worker_pid, getpid());
    cr_assert_eq(wi.worker_state, SL_WORKER_STATE_STARTING);
    sl_shm_detach(fe);
    sl_shm_detach(w);
    sl_shm_t *admin = sl_shm_attach(name, SL_SHM_ROLE_MASTER, 0, err);
    cr_assert_not_null(admin, "%s", err);
    sl_shm_destroy(admin);
    cr_assert_not_null(m, "only the creator's destroy unlinks");
    sl_shm_t *again = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(again, "%s", err);
    sl_shm_detach(again);
    sl_shm_destroy(m);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err), "destroy unlinks");
}

Test(shm, segment_is_0600)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "mode");
    sl_shm_limits l = small_limits();
    mode_t old = umask(0);
    sl_shm_t *m = sl_shm_create(name, &l, err);
    umask(old);
    cr_assert_not_null(m, "%s", err);
    int fd = shm_open(name, O_RDONLY, 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    close(fd);
    sl_shm_destroy(m);
}

Test(shm, bad_limits_refused)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "lim");
    sl_shm_limits l = small_limits();
    l.token_ring_entries = 6;
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert(strstr(err, "token_ring_entries"), "%s", err);
    l = small_limits();
    l.prompt_arena_blocks = 3; /* one 64-token prompt needs 4 blocks */
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert(strstr(err, "prompt_arena_blocks"), "%s", err);
    l = small_limits();
    l.n_slots = 0;
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert_null(sl_shm_create("no-slash", &l, err));
}

Test(shm, too_big_for_dev_shm_fails_at_create)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "big");
    sl_shm_limits l = small_limits();
    l.prompt_block_tokens = 65536;
    l.prompt_arena_blocks = 1u << 24; /* 4 TiB of arena: more than any /dev/shm */
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert(strstr(err, "posix_fallocate"), "%s", err);
    cr_assert(strstr(err, "MiB"), "%s", err);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err), "nothing left behind");
}

Test(shm, stale_segment_of_dead_master_is_replaced)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "stale");
    sl_shm_limits l = small_limits();
    pid_t pid = fork();
    if (pid == 0) {
        /* a master that dies without cleaning up */
        sl_shm_t *m = sl_shm_create(name, &l, err);
        _exit(m ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);
    sl_shm_destroy(m);
}

Test(shm, live_instance_segment_refused)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "live");
    sl_shm_limits l = small_limits();
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        sl_shm_t *m = sl_shm_create(name, &l, err);
        char c = m ? 1 : 0;
        (void)!write(pfd[1], &c, 1);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char c = 0;
    cr_assert_eq(read(pfd[0], &c, 1), 1);
    cr_assert_eq(c, 1);
    cr_assert_null(sl_shm_create(name, &l, err));
    cr_assert(strstr(err, "in use"), "%s", err);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "after the owner died: %s", err);
    sl_shm_destroy(m);
    close(pfd[0]);
}

Test(shm, foreign_or_corrupted_segments_refused)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "bad");
    sl_shm_limits l = small_limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_not_null(m, "%s", err);

    uint64_t magic = 0x1122334455667788ull, good_magic = SL_SHM_MAGIC;
    poke(name, offsetof(sl_header_shm, magic), &magic, 8);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err));
    cr_assert(strstr(err, "not a sluice segment"), "%s", err);
    poke(name, offsetof(sl_header_shm, magic), &good_magic, 8);

    uint32_t v = SL_SHM_LAYOUT_VERSION + 1, good_v = SL_SHM_LAYOUT_VERSION;
    poke(name, offsetof(sl_header_shm, layout_version), &v, 4);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err));
    cr_assert(strstr(err, "layout version"), "%s", err);
    poke(name, offsetof(sl_header_shm, layout_version), &good_v, 4);

    uint32_t ms = 100, good_ms = sizeof(struct sl_mailbox_shm);
    poke(name, offsetof(sl_header_shm, mailbox_size), &ms, 4);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err));
    cr_assert(strstr(err, "struct sizes"), "%s", err);
    poke(name, offsetof(sl_header_shm, mailbox_size), &good_ms, 4);

    uint32_t nm = 4000, good_nm = l.n_mailboxes;
    poke(name, offsetof(sl_header_shm, limits) + offsetof(sl_shm_limits, n_mailboxes), &nm, 4);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err));
    cr_assert(strstr(err, "disagree"), "%s", err);
    poke(name, offsetof(sl_header_shm, limits) + offsetof(sl_shm_limits, n_mailboxes), &good_nm, 4);

    uint64_t off = 12345;
    sl_shm_t *probe = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    cr_assert_not_null(probe, "restored header attaches: %s", err);
    sl_shm_detach(probe);
    poke(name, offsetof(sl_header_shm, off_tokens), &off, 8);
    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err));

    cr_assert_null(sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 2, err), "slot out of range");
    sl_shm_destroy(m);
}

Test(shm, heartbeat_tells_busy_from_wedged)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "hb");
    sl_shm_limits l = small_limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    uint64_t t0 = 1000000000ull;
    cr_assert_eq(sl_shm_worker_alive(m, t0, 0), 0, "not READY yet");
    sl_shm_set_worker_state(w, SL_WORKER_STATE_READY, "test-model");
    sl_shm_heartbeat(w, t0, 5000000000ull); /* a 5 s CPU prefill step */
    cr_assert_eq(sl_shm_worker_alive(m, t0 + 4000000000ull, 100000000ull), 1, "busy, within its budget");
    cr_assert_eq(sl_shm_worker_alive(m, t0 + 6000000000ull, 100000000ull), 0, "past budget + slack: wedged");
    sl_shm_heartbeat(w, t0 + 6000000000ull, 0); /* idle beat */
    cr_assert_eq(sl_shm_worker_alive(m, t0 + 6050000000ull, 100000000ull), 1);
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(m, &wi);
    cr_assert_eq(wi.step, 2);
    cr_assert_str_eq(wi.model_id, "test-model");
    sl_shm_detach(w);
    sl_shm_destroy(m);
}

Test(shm, config_snapshot_roundtrip)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "cfg");
    sl_shm_limits l = small_limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *w = sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err);
    char buf[SL_SHM_CONFIG_MAX + 1];
    size_t len;
    cr_assert_eq(sl_shm_config_read(m, buf, sizeof(buf), &len), SL_AGAIN, "nothing published");
    const char *a = "{\"kind\":\"continuous\",\"max_in_flight\":64}";
    cr_assert_eq(sl_shm_config_publish(w, a, strlen(a)), SL_OK);
    cr_assert_eq(sl_shm_config_read(m, buf, sizeof(buf), &len), SL_OK);
    cr_assert_str_eq(buf, a);
    cr_assert_eq(len, strlen(a));
    cr_assert_eq(sl_shm_config_read(m, buf, 4, &len), SL_ERANGE);
    static char big[SL_SHM_CONFIG_MAX + 2];
    memset(big, 'x', sizeof(big));
    cr_assert_eq(sl_shm_config_publish(w, big, SL_SHM_CONFIG_MAX + 1), SL_ERANGE);
    cr_assert_eq(sl_shm_config_publish(w, big, SL_SHM_CONFIG_MAX), SL_OK);
    cr_assert_eq(sl_shm_config_read(m, buf, sizeof(buf), &len), SL_OK);
    cr_assert_eq(len, SL_SHM_CONFIG_MAX);
    sl_shm_detach(w);
    sl_shm_destroy(m);
}

Test(shm, token_histograms_count_tokens_on_a_1_2_5_scale)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "tok");
    sl_shm_limits l = small_limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    cr_assert_eq(sl_shm_histogram_unit(SL_HISTOGRAM_PROMPT_TOKENS), SL_SHM_HISTOGRAM_UNIT_TOKENS);
    cr_assert_eq(sl_shm_histogram_unit(SL_HISTOGRAM_GENERATION_TOKENS), SL_SHM_HISTOGRAM_UNIT_TOKENS);
    cr_assert_eq(sl_shm_histogram_unit(SL_HISTOGRAM_MAX_GENERATION_TOKENS), SL_SHM_HISTOGRAM_UNIT_TOKENS);
    cr_assert_eq(sl_shm_histogram_unit(SL_HISTOGRAM_INTER_TOKEN), SL_SHM_HISTOGRAM_UNIT_NS);
    const uint64_t *b = sl_shm_histogram_bounds(SL_HISTOGRAM_PROMPT_TOKENS);
    cr_assert(b[0] == 1 && b[1] == 2 && b[2] == 5 && b[3] == 10 && b[SL_SHM_HISTOGRAM_BUCKETS - 1] == 2000000);
    for (int i = 1; i < SL_SHM_HISTOGRAM_BUCKETS; i++)
        cr_assert_gt(b[i], b[i - 1]);
    cr_assert_eq(sl_shm_histogram_bounds(SL_HISTOGRAM_E2E)[0], 1000000, "1 ms");
    sl_shm_histogram_observe(m, SL_HISTOGRAM_PROMPT_TOKENS, 1);        /* le=1 */
    sl_shm_histogram_observe(m, SL_HISTOGRAM_PROMPT_TOKENS, 3);        /* le=5 */
    sl_shm_histogram_observe(m, SL_HISTOGRAM_PROMPT_TOKENS, 5000000);  /* +Inf */
    uint64_t cum[SL_SHM_HISTOGRAM_BUCKETS + 1], sum;
    sl_shm_histogram_read(m, SL_HISTOGRAM_PROMPT_TOKENS, cum, &sum);
    cr_assert(cum[0] == 1 && cum[1] == 1 && cum[2] == 2 && cum[SL_SHM_HISTOGRAM_BUCKETS - 1] == 2);
    cr_assert_eq(cum[SL_SHM_HISTOGRAM_BUCKETS], 3);
    cr_assert_eq(sum, 1 + 3 + 5000000);
    sl_shm_histogram_read(m, SL_HISTOGRAM_GENERATION_TOKENS, cum, &sum);
    cr_assert(cum[SL_SHM_HISTOGRAM_BUCKETS] == 0 && sum == 0, "histograms are separate");
    sl_shm_destroy(m);
}

Test(shm, counters_and_cumulative_histograms)
{
    char name[64], err[SL_ERR_LEN];
    tl_name(name, sizeof(name), "met");
    sl_shm_limits l = small_limits();
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *fe = sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err);
    sl_shm_counter_add(fe, SL_COUNTER_TOKENS_GENERATED, 5);
    sl_shm_counter_add(m, SL_COUNTER_TOKENS_GENERATED, 2);
    cr_assert_eq(sl_shm_counter_get(m, SL_COUNTER_TOKENS_GENERATED), 7);
    sl_shm_histogram_observe(fe, SL_HISTOGRAM_TTFT, 500000);      /* 0.5 ms: first bucket */
    sl_shm_histogram_observe(fe, SL_HISTOGRAM_TTFT, 3000000);     /* 3 ms: <= 5 ms */
    sl_shm_histogram_observe(fe, SL_HISTOGRAM_TTFT, 999000000000ull); /* +Inf */
    uint64_t cum[SL_SHM_HISTOGRAM_BUCKETS + 1], sum;
    sl_shm_histogram_read(m, SL_HISTOGRAM_TTFT, cum, &sum);
    cr_assert_eq(cum[0], 1);
    cr_assert_eq(cum[1], 1);
    cr_assert_eq(cum[2], 2);
    cr_assert_eq(cum[SL_SHM_HISTOGRAM_BUCKETS - 1], 2);
    cr_assert_eq(cum[SL_SHM_HISTOGRAM_BUCKETS], 3);
    cr_assert_eq(sum, 500000 + 3000000 + 999000000000ull);
    sl_shm_detach(fe);
    sl_shm_destroy(m);
}
