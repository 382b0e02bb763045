/* tests/fuzz/fuzz_common.c: data paths and the vocabularies the harnesses
 * share (see fuzz_common.h). Setup runs once per process, so it favours
 * plain code over speed: Llama 3's tokenizer.json is converted into a
 * temporary GGUF file and loaded from there, as the unit tests do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/vocab_json.h"
#include "tests/fuzz/fuzz_common.h"

#ifndef SL_FUZZ_SOURCE_DIR
#define SL_FUZZ_SOURCE_DIR "."
#endif
#ifndef SL_TESTDATA_DIR
#error "SL_TESTDATA_DIR must name the expanded tests/data (tests/fuzz/CMakeLists.txt sets it)"
#endif

const char *fz_repo_path(const char *rel)
{
    static char path[4096];
    const char *root = getenv("SLUICE_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/%s", root && root[0] ? root : SL_FUZZ_SOURCE_DIR, rel);
    return path;
}

const char *fz_testdata_path(const char *rel)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", SL_TESTDATA_DIR, rel);
    return path;
}

char *fz_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz setup: cannot open %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "fuzz setup: cannot read %s\n", path);
        abort();
    }
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

const char *fz_default_model_path(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s", fz_repo_path("models/default/sluice-default-q8_0.gguf"));
    return path;
}

static sl_tokenizer *tokenizer_from_gguf_path(const char *path)
{
    char err[SL_ERR_LEN];
    sl_gguf *g;
    sl_tokenizer *t;
    if (sl_gguf_open(path, &g, err) != SL_OK || sl_tokenizer_create(g, &t, err) != SL_OK) {
        fprintf(stderr, "fuzz setup: tokenizer from %s: %s\n", path, err);
        abort();
    }
    sl_gguf_close(g);
    return t;
}

sl_tokenizer *fz_tokenizer_default(void)
{
    static sl_tokenizer *t;
    if (t == NULL)
        t = tokenizer_from_gguf_path(fz_default_model_path());
    return t;
}

sl_tokenizer *fz_tokenizer_llama3(void)
{
    static sl_tokenizer *t;
    if (t != NULL)
        return t;
    char gguf[] = "/tmp/sl_fuzz_gguf_XXXXXX";
    int fd = mkstemp(gguf);
    if (fd < 0)
        abort();
    close(fd);
    char json[4096], cfg[4096], err[SL_ERR_LEN];
    snprintf(json, sizeof json, "%s", fz_testdata_path("tokenizers/llama3/tokenizer.json"));
    snprintf(cfg, sizeof cfg, "%s", fz_testdata_path("tokenizers/llama3/tokenizer_config.json"));
    sl_gguf_writer *w = sl_gguf_writer_create();
    if (w == NULL || sl_vocab_json_to_gguf(json, cfg, w, err) != SL_OK || sl_gguf_writer_begin(w, gguf, err) != SL_OK ||
        sl_gguf_writer_finish(w, err) != SL_OK) {
        fprintf(stderr, "fuzz setup: llama3 vocabulary: %s\n", err);
        abort();
    }
    sl_gguf_writer_destroy(w);
    t = tokenizer_from_gguf_path(gguf);
    unlink(gguf);
    return t;
}

uint8_t fz_u8(fz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

uint32_t fz_u32(fz_in *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fz_u8(in) << (8 * i);
    return v;
}

const uint8_t *fz_bytes(fz_in *in, size_t max, size_t *len)
{
    const uint8_t *p = in->p;
    *len = max < in->n ? max : in->n;
    in->p += *len;
    in->n -= *len;
    return p;
}

/* ---- a populated shared-memory segment ---- */

static sl_shm_t *shm_master;

static void shm_cleanup(void) { sl_shm_destroy(shm_master); }

static void submit(sl_shm_t *fe, uint32_t n_prompt, uint64_t rid, sl_shm_ticket *t)
{
    int32_t prompt[64];
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)(rid * 100 + i);
    sl_shm_request r;
    memset(&r, 0, sizeof r);
    sl_sampling_params_default(&r.params);
    r.max_tokens = 16;
    r.request_id = rid;
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    if (sl_shm_submit(fe, &r, t) != SL_OK)
        abort();
}

sl_shm_t *fz_shm_populated(const char *tag, sl_shm_ticket tickets[FZ_SHM_TICKETS])
{
    char name[64], err[SL_ERR_LEN];
    snprintf(name, sizeof name, "/sluice-fuzz-%s-%d", tag, (int)getpid());
    sl_shm_limits l = {
        .n_slots = 2, .n_mailboxes = 8, .submit_ring_entries = 4, .token_ring_entries = 4,
        .prompt_tokens_max = 64, .prompt_block_tokens = 16, .prompt_arena_blocks = 12, .logprobs = 1,
    };
    sl_shm_t *m = sl_shm_create(name, &l, err);
    sl_shm_t *fe0 = m ? sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 0, err) : NULL;
    sl_shm_t *fe1 = fe0 ? sl_shm_attach(name, SL_SHM_ROLE_FRONTEND, 1, err) : NULL;
    sl_shm_t *w = fe1 ? sl_shm_attach(name, SL_SHM_ROLE_WORKER, 0, err) : NULL;
    if (w == NULL) {
        fprintf(stderr, "fuzz setup: shm segment %s: %s\n", name, err);
        abort();
    }
    shm_master = m;
    atexit(shm_cleanup);
    static const char snapshot[] = "{\"model\": \"default\", \"max_seqs\": 4, \"n_ctx\": 64}";
    sl_shm_set_worker_state(w, SL_WORKER_STATE_READY, "sluice-default");
    sl_shm_config_publish(w, snapshot, sizeof snapshot - 1);
    sl_shm_heartbeat(w, sl_shm_now_ns(), 0);
    submit(fe0, 20, 1, &tickets[0]);
    submit(fe0, 40, 2, &tickets[1]);
    submit(fe0, 5, 3, &tickets[2]);
    submit(fe1, 30, 4, &tickets[3]);
    sl_shm_ticket a, b;
    if (sl_shm_worker_pop(w, &a) != SL_OK || sl_shm_worker_pop(w, &b) != SL_OK)
        abort();
    for (int i = 0; i < 3; i++)
        sl_shm_worker_push(w, a, 7 + i, NULL);
    sl_shm_worker_push(w, b, 11, NULL);
    sl_shm_worker_finish(w, a, SL_FINISH_REASON_STOP, NULL);
    sl_shm_counter_add(w, SL_COUNTER_TOKENS_GENERATED, 4);
    sl_shm_histogram_observe(w, SL_HISTOGRAM_TTFT, 1500000);
    /* a fifth, cancelled while SUBMITTED: the worker must skip its entry */
    submit(fe0, 3, 5, &tickets[4]);
    sl_shm_cancel(fe0, tickets[4]);
    sl_shm_detach(w);
    sl_shm_detach(fe1);
    sl_shm_detach(fe0);
    return m;
}
