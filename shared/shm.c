/* shared/shm.c: segment lifecycle (create, attach, destroy), the header's worker
 * fields (state, heartbeat), the config snapshot and the shared counters and
 * histograms. Runs in every process; create/destroy only in the master.
 * Trade-off: the segment is sized once from sl_shm_limits and never grows, so no
 * pointer into it can move; the price is choosing the limits at startup. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shared/shm_impl.h"

_Static_assert(sizeof(sl_logprob_record) == 172, "logprob record changed: bump SL_SHM_LAYOUT_VERSION");

/* ---- limits and layout ------------------------------------------------------------ */

void sl_shm_limits_default(sl_shm_limits *l)
{
    l->n_slots = 8;
    l->n_mailboxes = 1024;
    l->submit_ring_entries = 256;
    l->token_ring_entries = 256;
    l->prompt_tokens_max = 32768;
    l->prompt_block_tokens = 256;
    l->prompt_arena_blocks = 4096;
    l->logprobs = 1;
    l->submit_queue_depth = 0;
    l->grammar_bytes_max = 65536;
}

static int is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

/* Offsets of every region, in header order, and the total size. */
typedef struct {
    uint64_t off_slots, off_ring, off_mailboxes, off_block_tables, off_tokens, off_records,
        off_block_owners, off_arena, off_grammar, size;
    uint64_t reserved;       /* bytes posix_fallocate backs: all but the grammar region */
    uint32_t blocks_per_mailbox;
} shm_layout;

static sl_status shm_layout_compute(const sl_shm_limits *l, shm_layout *out, char err[SL_ERR_LEN])
{
    const char *why = NULL;
    if (l->n_slots < 1 || l->n_slots > SL_SHM_SLOTS_MAX)
        why = "n_slots must be 1..256";
    else if (l->n_mailboxes < 1 || l->n_mailboxes > SL_SHM_MAILBOXES_MAX)
        why = "n_mailboxes must be 1..65535";
    else if (!is_pow2(l->submit_ring_entries) || l->submit_ring_entries < 2 || l->submit_ring_entries > 65536)
        why = "submit_ring_entries must be a power of two in 2..65536";
    else if (!is_pow2(l->token_ring_entries) || l->token_ring_entries < 2 || l->token_ring_entries > 65536)
        why = "token_ring_entries must be a power of two in 2..65536";
    else if (l->prompt_tokens_max < 1 || l->prompt_tokens_max > (1u << 24))
        why = "prompt_tokens_max must be 1..16777216";
    else if (l->prompt_block_tokens < 16 || l->prompt_block_tokens > 65536)
        why = "prompt_block_tokens must be 16..65536";
    else if (l->logprobs > 1)
        why = "logprobs must be 0 or 1";
    else if (l->submit_queue_depth > l->submit_ring_entries)
        why = "submit_queue_depth must be at most submit_ring_entries";
    else if (l->grammar_bytes_max > SL_SHM_GRAMMAR_BYTES_MAX)
        why = "grammar_bytes_max must be at most 262144";
    if (why == NULL) {
        uint32_t bpm = (l->prompt_tokens_max + l->prompt_block_tokens - 1) / l->prompt_block_tokens;
        if (l->prompt_arena_blocks < bpm || l->prompt_arena_blocks > (1u << 24))
            why = "prompt_arena_blocks must hold one longest prompt and be at most 16777216";
        out->blocks_per_mailbox = bpm;
    }
    if (why) {
        snprintf(err, SL_ERR_LEN, "shm limits: %s", why);
        return SL_EINVAL;
    }
    /* Every factor is bounded above, so these products fit in 64 bits. */
    uint64_t off = align64(sizeof(sl_header_shm));
    out->off_slots = off;
    off = align64(off + (uint64_t)l->n_slots * sizeof(sl_slot_shm));
    out->off_ring = off;
    off = align64(off + (uint64_t)l->n_slots * l->submit_ring_entries * 8);
    out->off_mailboxes = off;
    off = align64(off + (uint64_t)l->n_mailboxes * sizeof(struct sl_mailbox_shm));
    out->off_block_tables = off;
    off = align64(off + (uint64_t)l->n_mailboxes * out->blocks_per_mailbox * 4);
    out->off_tokens = off;
    off = align64(off + (uint64_t)l->n_mailboxes * l->token_ring_entries * 4);
    out->off_records = l->logprobs ? off : 0;
    if (l->logprobs)
        off = align64(off + (uint64_t)l->n_mailboxes * l->token_ring_entries * sizeof(sl_logprob_record));
    out->off_block_owners = off;
    off = align64(off + (uint64_t)l->prompt_arena_blocks * 8);
    out->off_arena = off;
    off = align64(off + (uint64_t)l->prompt_arena_blocks * l->prompt_block_tokens * 4);
    out->reserved = off;
    out->off_grammar = l->grammar_bytes_max ? off : 0;
    if (l->grammar_bytes_max)
        off = align64(off + (uint64_t)l->n_mailboxes * l->grammar_bytes_max);
    out->size = off;
    return SL_OK;
}

static void handle_point(sl_shm_t *h, const shm_layout *lay)
{
    char *b = (char *)h->hdr;
    h->blocks_per_mailbox = lay->blocks_per_mailbox;
    h->slots = (sl_slot_shm *)(b + lay->off_slots);
    h->ring = (_Atomic uint64_t *)(b + lay->off_ring);
    h->mailboxes = (struct sl_mailbox_shm *)(b + lay->off_mailboxes);
    h->block_tables = (uint32_t *)(b + lay->off_block_tables);
    h->tokens = (int32_t *)(b + lay->off_tokens);
    h->records = lay->off_records ? (sl_logprob_record *)(b + lay->off_records) : NULL;
    h->block_owners = (_Atomic uint64_t *)(b + lay->off_block_owners);
    h->arena = (int32_t *)(b + lay->off_arena);
    h->grammar = lay->off_grammar ? b + lay->off_grammar : NULL;
    h->off_grammar = lay->off_grammar;
    for (int i = 0; i < SL_SHM_SLOTS_MAX; i++)
        h->eventfds[i] = -1;
}

static int name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n >= 2 && n < 64 && name[0] == '/' && strchr(name + 1, '/') == NULL;
}

/* ---- create / attach / destroy ------------------------------------------------------ */

static void handle_take_role(sl_shm_t *h, sl_shm_role role, uint32_t slot);

/* A segment left by an earlier instance: ours if its header carries our magic and
 * its creator is alive (kill(pid, 0) works or says EPERM). A header we cannot read
 * or of another magic counts as stale too: the name is ours to use. The wart: a
 * reused pid of an unrelated process makes a stale segment look alive; the
 * operator then sees "in use by pid N" and can remove /dev/shm/<name>. */
static int segment_owner_alive(const char *name, int32_t *pid_out)
{
    *pid_out = 0;
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    struct stat st;
    int alive = 0;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(sl_header_shm)) {
        void *p = mmap(NULL, sizeof(sl_header_shm), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            const sl_header_shm *hdr = p;
            if (hdr->magic == SL_SHM_MAGIC) {
                int32_t pid = atomic_load(&hdr->master_pid);
                *pid_out = pid;
                if (pid > 0 && pid != getpid() && (kill(pid, 0) == 0 || errno == EPERM))
                    alive = 1;
            }
            munmap(p, sizeof(sl_header_shm));
        }
    }
    close(fd);
    return alive;
}

sl_shm_t *sl_shm_create(const char *name, const sl_shm_limits *limits, char err[SL_ERR_LEN])
{
    shm_layout lay;
    if (!name_ok(name)) {
        snprintf(err, SL_ERR_LEN, "shm name must be \"/name\" (under 64 bytes, one slash)");
        return NULL;
    }
    if (shm_layout_compute(limits, &lay, err) < 0)
        return NULL;

    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
        int32_t pid;
        if (segment_owner_alive(name, &pid)) {
            snprintf(err, SL_ERR_LEN, "shm segment %s is in use by a live instance (master pid %d)", name, pid);
            return NULL;
        }
        shm_unlink(name); /* stale: a dead instance's, or not ours */
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    }
    if (fd < 0) {
        snprintf(err, SL_ERR_LEN, "shm_open(%s): %s", name, strerror(errno));
        return NULL;
    }
    (void)fchmod(fd, 0600); /* O_CREAT's mode is already masked; this only tightens */
    /* The grammar region stays a hole (shm_layout.h): reserve up to it, then extend. */
    int rc = posix_fallocate(fd, 0, (off_t)lay.reserved);
    if (rc == 0 && lay.size > lay.reserved && ftruncate(fd, (off_t)lay.size) != 0)
        rc = errno;
    if (rc != 0) {
        snprintf(err, SL_ERR_LEN,
                 "posix_fallocate(%s, %llu bytes): %s (the segment needs %.1f MiB of /dev/shm; "
                 "enlarge it, e.g. docker --shm-size, or lower the limits)",
                 name, (unsigned long long)lay.size, strerror(rc), (double)lay.size / (1024.0 * 1024.0));
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    void *p = mmap(NULL, lay.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, SL_ERR_LEN, "mmap(%s, %llu bytes): %s", name, (unsigned long long)lay.size, strerror(errno));
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    sl_shm_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, SL_ERR_LEN, "out of memory for the shm handle");
        munmap(p, lay.size);
        close(fd);
        shm_unlink(name);
        return NULL;
    }
    h->fd = fd;
    h->hdr = p;
    h->size = lay.size;
    h->owns_mapping = 1;
    h->creator = 1;
    h->role = SL_SHM_ROLE_MASTER;
    h->limits = *limits;
    snprintf(h->name, sizeof(h->name), "%s", name);
    handle_point(h, &lay);

    /* The fresh mapping is zeroed; fill what is not zero, identity last. */
    sl_header_shm *hdr = h->hdr;
    hdr->layout_version = SL_SHM_LAYOUT_VERSION;
    hdr->header_size = sizeof(sl_header_shm);
    hdr->segment_size = lay.size;
    hdr->limits = *limits;
    hdr->slot_size = sizeof(sl_slot_shm);
    hdr->mailbox_size = sizeof(struct sl_mailbox_shm);
    hdr->off_slots = lay.off_slots;
    hdr->off_ring = lay.off_ring;
    hdr->off_mailboxes = lay.off_mailboxes;
    hdr->off_block_tables = lay.off_block_tables;
    hdr->off_tokens = lay.off_tokens;
    hdr->off_records = lay.off_records;
    hdr->off_block_owners = lay.off_block_owners;
    hdr->off_arena = lay.off_arena;
    hdr->off_grammar = lay.off_grammar;
    atomic_store(&hdr->master_pid, (int32_t)getpid());
    atomic_store(&hdr->worker_generation, 1);
    atomic_store(&hdr->worker_state, SL_WORKER_STATE_STARTING);
    for (uint32_t s = 0; s < limits->n_slots; s++)
        atomic_store(&h->slots[s].generation, 1);
    for (uint32_t i = 0; i < limits->n_mailboxes; i++)
        atomic_store(&h->mailboxes[i].word, sl_word_make(SL_MAILBOX_STATE_FREE, SL_SHM_OWNER_NONE, 0));
    atomic_thread_fence(memory_order_release);
    hdr->magic = SL_SHM_MAGIC;
    return h;
}

sl_shm_t *sl_shm_attach(const char *name, sl_shm_role role, uint32_t slot, char err[SL_ERR_LEN])
{
    if (!name_ok(name)) {
        snprintf(err, SL_ERR_LEN, "shm name must be \"/name\" (under 64 bytes, one slash)");
        return NULL;
    }
    if (role != SL_SHM_ROLE_FRONTEND && role != SL_SHM_ROLE_WORKER && role != SL_SHM_ROLE_MASTER) {
        snprintf(err, SL_ERR_LEN, "shm attach: unknown role %d", (int)role);
        return NULL;
    }
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        snprintf(err, SL_ERR_LEN, "shm_open(%s): %s", name, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, SL_ERR_LEN, "fstat(%s): %s", name, strerror(errno));
        close(fd);
        return NULL;
    }
    if ((size_t)st.st_size < sizeof(sl_header_shm)) {
        snprintf(err, SL_ERR_LEN, "shm segment %s is %lld bytes, smaller than a sluice header (%zu)", name,
                 (long long)st.st_size, sizeof(sl_header_shm));
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, SL_ERR_LEN, "mmap(%s): %s", name, strerror(errno));
        close(fd);
        return NULL;
    }
    sl_header_shm *hdr = p;
    shm_layout lay;
    char why[SL_ERR_LEN];
    why[0] = 0;
    if (hdr->magic != SL_SHM_MAGIC)
        snprintf(why, sizeof(why), "not a sluice segment (magic %016llx)", (unsigned long long)hdr->magic);
    else if (hdr->layout_version != SL_SHM_LAYOUT_VERSION)
        snprintf(why, sizeof(why), "layout version %u, this binary speaks %u: run the same sluice build everywhere",
                 hdr->layout_version, SL_SHM_LAYOUT_VERSION);
    else if (hdr->header_size != sizeof(sl_header_shm) || hdr->slot_size != sizeof(sl_slot_shm) ||
             hdr->mailbox_size != sizeof(struct sl_mailbox_shm))
        snprintf(why, sizeof(why), "struct sizes differ (header %u/%zu, slot %u/%zu, mailbox %u/%zu): another build",
                 hdr->header_size, sizeof(sl_header_shm), hdr->slot_size, sizeof(sl_slot_shm), hdr->mailbox_size,
                 sizeof(struct sl_mailbox_shm));
    else if (shm_layout_compute(&hdr->limits, &lay, why) < 0)
        ;
    else if (lay.size != hdr->segment_size || lay.size != (uint64_t)st.st_size || lay.off_slots != hdr->off_slots ||
             lay.off_ring != hdr->off_ring || lay.off_mailboxes != hdr->off_mailboxes ||
             lay.off_block_tables != hdr->off_block_tables || lay.off_tokens != hdr->off_tokens ||
             lay.off_records != hdr->off_records || lay.off_block_owners != hdr->off_block_owners ||
             lay.off_arena != hdr->off_arena || lay.off_grammar != hdr->off_grammar)
        snprintf(why, sizeof(why), "sizes or offsets disagree with the limits (segment %lld bytes, expected %llu)",
                 (long long)st.st_size, (unsigned long long)lay.size);
    else if (role == SL_SHM_ROLE_FRONTEND && slot >= hdr->limits.n_slots)
        snprintf(why, sizeof(why), "front-end slot %u out of range (n_slots %u)", slot, hdr->limits.n_slots);
    if (why[0]) {
        snprintf(err, SL_ERR_LEN, "shm attach %.40s: %.200s", name, why);
        munmap(p, (size_t)st.st_size);
        close(fd);
        return NULL;
    }
    sl_shm_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, SL_ERR_LEN, "out of memory for the shm handle");
        munmap(p, (size_t)st.st_size);
        close(fd);
        return NULL;
    }
    h->fd = fd;
    h->hdr = hdr;
    h->size = (size_t)st.st_size;
    h->owns_mapping = 1;
    h->role = role;
    h->limits = hdr->limits;
    snprintf(h->name, sizeof(h->name), "%s", name);
    handle_point(h, &lay);
    handle_take_role(h, role, slot);
    return h;
}

sl_shm_t *sl_shm_attach_shared(const sl_shm_t *base, sl_shm_role role, uint32_t slot, char err[SL_ERR_LEN])
{
    if (role != SL_SHM_ROLE_FRONTEND && role != SL_SHM_ROLE_WORKER && role != SL_SHM_ROLE_MASTER) {
        snprintf(err, SL_ERR_LEN, "shm attach: unknown role %d", (int)role);
        return NULL;
    }
    if (role == SL_SHM_ROLE_FRONTEND && slot >= base->limits.n_slots) {
        snprintf(err, SL_ERR_LEN, "front-end slot %u out of range (n_slots %u)", slot, base->limits.n_slots);
        return NULL;
    }
    sl_shm_t *h = malloc(sizeof(*h));
    if (h == NULL) {
        snprintf(err, SL_ERR_LEN, "out of memory for the shm handle");
        return NULL;
    }
    *h = *base;
    h->owns_mapping = 0;
    h->creator = 0;
    h->pop_cursor = 0;
    memset(h->dirty, 0, sizeof(h->dirty));
    for (int i = 0; i < SL_SHM_SLOTS_MAX; i++)
        h->eventfds[i] = -1;
    handle_take_role(h, role, slot);
    return h;
}

static void handle_take_role(sl_shm_t *h, sl_shm_role role, uint32_t slot)
{
    sl_header_shm *hdr = h->hdr;
    h->role = role;
    if (role == SL_SHM_ROLE_FRONTEND) {
        h->slot = slot;
        h->slot_generation = atomic_load(&h->slots[slot].generation);
        atomic_store(&h->slots[slot].pid, (int32_t)getpid());
    } else if (role == SL_SHM_ROLE_WORKER) {
        h->worker_generation = atomic_load(&hdr->worker_generation);
        atomic_store(&hdr->worker_pid, (int32_t)getpid());
    }
}

void sl_shm_detach(sl_shm_t *h)
{
    if (h == NULL)
        return;
    if (h->owns_mapping) {
        munmap(h->hdr, h->size);
        if (h->fd >= 0)
            close(h->fd);
    }
    free(h);
}

void sl_shm_destroy(sl_shm_t *h)
{
    if (h == NULL)
        return;
    if (h->creator && h->owns_mapping)
        shm_unlink(h->name);
    sl_shm_detach(h);
}

sl_status sl_shm_set_eventfds(sl_shm_t *h, const int *fds, uint32_t n)
{
    if (n > h->limits.n_slots)
        return SL_ERANGE;
    for (uint32_t i = 0; i < n; i++)
        h->eventfds[i] = fds[i];
    return SL_OK;
}

const sl_shm_limits *sl_shm_get_limits(const sl_shm_t *h) { return &h->limits; }

/* ---- worker state and heartbeat ---------------------------------------------------- */

uint64_t sl_shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The limit is stored before the start time, so a reader never pairs a fresh
 * start with a stale, smaller limit for long enough to matter: both are read
 * within nanoseconds of each other and the fresh start is recent anyway. */
void sl_shm_heartbeat(sl_shm_t *w, uint64_t now_ns, uint64_t max_step_ns)
{
    atomic_store_explicit(&w->hdr->hb_step_max_ns, max_step_ns, memory_order_relaxed);
    atomic_store_explicit(&w->hdr->hb_step_start_ns, now_ns, memory_order_release);
    atomic_fetch_add_explicit(&w->hdr->hb_step, 1, memory_order_release);
}

void sl_shm_set_worker_state(sl_shm_t *w, sl_worker_state state, const char *model_id)
{
    if (model_id) {
        /* Bytes written while nobody reads them: readers look only once state is READY. */
        memset(w->hdr->model_id, 0, sizeof(w->hdr->model_id));
        snprintf(w->hdr->model_id, sizeof(w->hdr->model_id), "%s", model_id);
    }
    atomic_store_explicit(&w->hdr->worker_state, (uint32_t)state, memory_order_release);
}

void sl_shm_set_paused(sl_shm_t *m, int paused)
{
    atomic_store_explicit(&m->hdr->paused, paused ? 1u : 0u, memory_order_release);
}

int sl_shm_paused(const sl_shm_t *h)
{
    return atomic_load_explicit(&h->hdr->paused, memory_order_acquire) != 0;
}

void sl_shm_worker_info_get(const sl_shm_t *h, sl_shm_worker_info *out)
{
    sl_header_shm *hdr = h->hdr;
    out->worker_generation = atomic_load(&hdr->worker_generation);
    out->worker_state = (sl_worker_state)atomic_load(&hdr->worker_state);
    out->worker_pid = atomic_load(&hdr->worker_pid);
    out->step = atomic_load(&hdr->hb_step);
    out->step_start_ns = atomic_load(&hdr->hb_step_start_ns);
    out->step_max_ns = atomic_load(&hdr->hb_step_max_ns);
    out->model_id[0] = 0;
    if (out->worker_state == SL_WORKER_STATE_READY) { /* acquire: the id was written before READY */
        memcpy(out->model_id, hdr->model_id, SL_SHM_MODEL_ID_LEN);
        out->model_id[SL_SHM_MODEL_ID_LEN - 1] = 0;
    }
}

int sl_shm_worker_alive(const sl_shm_t *h, uint64_t now_ns, uint64_t slack_ns)
{
    sl_shm_worker_info wi;
    sl_shm_worker_info_get(h, &wi);
    if (wi.worker_state != SL_WORKER_STATE_READY)
        return 0;
    if (now_ns <= wi.step_start_ns)
        return 1;
    return now_ns - wi.step_start_ns <= wi.step_max_ns + slack_ns;
}

/* ---- config snapshot (seqlock) ------------------------------------------------------ */

/* The writer makes the counter odd, writes, then even. A writer that died mid-way
 * leaves it odd: readers give up with SL_AGAIN after a bounded number of tries, and
 * the next writer (the next worker) starts from the odd value, so no reader waits
 * forever. The words are atomics so readers racing a writer stay defined C. */
sl_status sl_shm_config_publish(sl_shm_t *w, const char *text, size_t len)
{
    if (len > SL_SHM_CONFIG_MAX)
        return SL_ERANGE;
    sl_header_shm *hdr = w->hdr;
    uint64_t s = atomic_load_explicit(&hdr->config_seq, memory_order_relaxed) | 1;
    atomic_store_explicit(&hdr->config_seq, s, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 0; i < (len + 7) / 8; i++) {
        uint64_t word = 0;
        size_t n = len - i * 8 < 8 ? len - i * 8 : 8;
        memcpy(&word, text + i * 8, n);
        atomic_store_explicit(&hdr->config_words[i], word, memory_order_relaxed);
    }
    atomic_store_explicit(&hdr->config_len, len, memory_order_relaxed);
    atomic_store_explicit(&hdr->config_seq, s + 1, memory_order_release);
    return SL_OK;
}

sl_status sl_shm_config_read(const sl_shm_t *h, char *buf, size_t cap, size_t *len)
{
    sl_header_shm *hdr = h->hdr;
    *len = 0;
    for (int tries = 0; tries < 10000; tries++) {
        uint64_t s1 = atomic_load_explicit(&hdr->config_seq, memory_order_acquire);
        if (s1 == 0)
            return SL_AGAIN;
        if (s1 & 1)
            continue;
        uint64_t n = atomic_load_explicit(&hdr->config_len, memory_order_relaxed);
        if (n > SL_SHM_CONFIG_MAX)
            continue;
        if (n + 1 > cap)
            return SL_ERANGE;
        for (size_t i = 0; i < (n + 7) / 8; i++) {
            uint64_t word = atomic_load_explicit(&hdr->config_words[i], memory_order_relaxed);
            size_t k = n - i * 8 < 8 ? n - i * 8 : 8;
            memcpy(buf + i * 8, &word, k);
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&hdr->config_seq, memory_order_relaxed) == s1) {
            buf[n] = 0;
            *len = n;
            return SL_OK;
        }
    }
    return SL_AGAIN;
}

/* ---- counters and histograms -------------------------------------------------------- */

void sl_shm_counter_add(sl_shm_t *h, sl_counter c, uint64_t n)
{
    if ((unsigned)c < SL_SHM_COUNTERS_MAX)
        atomic_fetch_add_explicit(&h->hdr->counters[c], n, memory_order_relaxed);
}

uint64_t sl_shm_counter_get(const sl_shm_t *h, sl_counter c)
{
    if ((unsigned)c >= SL_SHM_COUNTERS_MAX)
        return 0;
    return atomic_load_explicit(&h->hdr->counters[c], memory_order_relaxed);
}

/* vLLM's TTFT/latency bucket scale, in ns: 1 ms .. 80 s. */
static const uint64_t hist_bounds_ns[SL_SHM_HISTOGRAM_BUCKETS] = {
    1000000ull,     2500000ull,     5000000ull,     10000000ull,    20000000ull,
    40000000ull,    60000000ull,    80000000ull,    100000000ull,   250000000ull,
    500000000ull,   750000000ull,   1000000000ull,  2500000000ull,  5000000000ull,
    7500000000ull,  10000000000ull, 20000000000ull, 40000000000ull, 80000000000ull,
};

/* Token counts on vLLM's 1-2-5 scale; vLLM stops at the context length, these
 * stop at 2M tokens so that one layout serves every model. */
static const uint64_t hist_bounds_tokens[SL_SHM_HISTOGRAM_BUCKETS] = {
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000,
    2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000,
};

sl_shm_histogram_unit_t sl_shm_histogram_unit(sl_histogram which)
{
    switch (which) {
    case SL_HISTOGRAM_PROMPT_TOKENS:
    case SL_HISTOGRAM_GENERATION_TOKENS:
    case SL_HISTOGRAM_MAX_GENERATION_TOKENS: return SL_SHM_HISTOGRAM_UNIT_TOKENS;
    default: return SL_SHM_HISTOGRAM_UNIT_NS;
    }
}

const uint64_t *sl_shm_histogram_bounds(sl_histogram which)
{
    return sl_shm_histogram_unit(which) == SL_SHM_HISTOGRAM_UNIT_TOKENS ? hist_bounds_tokens : hist_bounds_ns;
}

void sl_shm_histogram_observe(sl_shm_t *h, sl_histogram which, uint64_t value)
{
    if ((unsigned)which >= SL_HISTOGRAM_COUNT)
        return;
    const uint64_t *bounds = sl_shm_histogram_bounds(which);
    int b = 0;
    while (b < SL_SHM_HISTOGRAM_BUCKETS && value > bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->hdr->hist_buckets[which][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->hdr->hist_sum[which], value, memory_order_relaxed);
}

void sl_shm_histogram_read(const sl_shm_t *h, sl_histogram which, uint64_t cumulative[SL_SHM_HISTOGRAM_BUCKETS + 1],
                           uint64_t *sum)
{
    uint64_t acc = 0;
    *sum = 0;
    for (int b = 0; b <= SL_SHM_HISTOGRAM_BUCKETS; b++) {
        if ((unsigned)which < SL_HISTOGRAM_COUNT)
            acc += atomic_load_explicit(&h->hdr->hist_buckets[which][b], memory_order_relaxed);
        cumulative[b] = acc;
    }
    if ((unsigned)which < SL_HISTOGRAM_COUNT)
        *sum = atomic_load_explicit(&h->hdr->hist_sum[which], memory_order_relaxed);
}
