/* kernels/backend.c: backend selection and the batch checks every backend
 * relies on, so no backend reads outside its KV cache on a bad batch.
 * The CUDA backend is a shared library loaded here on demand (dlopen), so
 * the binary itself never links CUDA: "auto" on a host without the library
 * or without a GPU quietly (library absent) or with a note (library present,
 * no device) runs on the CPU. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

uint64_t sl_backend_kv_block_bytes(const sl_model *m, uint32_t block_size)
{
    const sl_hparams *hp = &m->hp;
    return 2ull * hp->n_layer * hp->n_head_kv * hp->head_dim * block_size * sizeof(float);
}

/* Finds libsluice_cuda.so: $SLUICE_CUDA_LIB if set, else next to the
 * executable, else one folder up (the build root, for the tools that live in
 * build/tools/). Returns false with err filled when none exists. */
static bool cuda_lib_path(char *path, size_t len, char err[SL_ERR_LEN])
{
    const char *env = getenv("SLUICE_CUDA_LIB");
    if (env && *env) {
        snprintf(path, len, "%s", env);
        if (access(path, R_OK) == 0)
            return true;
        snprintf(err, SL_ERR_LEN, "backend: SLUICE_CUDA_LIB=%.180s: %s", env, strerror(errno));
        return false;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(err, SL_ERR_LEN, "backend: cannot locate the executable to find %s", SL_CUDA_BACKEND_LIB);
        return false;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    static const char *const rel[] = {"", "/.."};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(path, len, "%s%s/%s", exe, rel[i], SL_CUDA_BACKEND_LIB);
        if (access(path, R_OK) == 0)
            return true;
    }
    snprintf(err, SL_ERR_LEN, "backend: no CUDA backend: %s not found next to %.120s (build with -DSLUICE_CUDA=ON, "
             "or set SLUICE_CUDA_LIB)", SL_CUDA_BACKEND_LIB, exe);
    return false;
}

/* Loads the CUDA library once per process (never unloaded: CUDA does not
 * support unloading a runtime mid-process) and creates the backend.
 * *found says whether the library was there at all. */
static sl_status cuda_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out, bool *found,
                             char err[SL_ERR_LEN])
{
    static sl_cuda_backend_create_fn create;
    char path[4200];
    *found = false;
    if (!create) {
        if (!cuda_lib_path(path, sizeof path, err))
            return SL_EUNSUPPORTED;
        *found = true;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(err, SL_ERR_LEN, "backend: cannot load the CUDA backend: %s", dlerror());
            return SL_EUNSUPPORTED;
        }
        *(void **)&create = dlsym(h, SL_CUDA_BACKEND_SYMBOL);
        if (!create) {
            snprintf(err, SL_ERR_LEN, "backend: %.180s lacks %s", path, SL_CUDA_BACKEND_SYMBOL);
            dlclose(h);
            return SL_EUNSUPPORTED;
        }
    }
    *found = true;
    return create(m, cfg, out, err);
}

sl_status sl_backend_create(const sl_model *m, const sl_backend_config *cfg, sl_backend **out,
                            char err[SL_ERR_LEN])
{
    *out = NULL;
    const char *dev = cfg->device ? cfg->device : "auto";
    bool gpu_ok = !strcmp(dev, "cuda") || !strcmp(dev, "auto");
    /* n_kv_blocks 0 = "size the KV cache from free device memory": CUDA only */
    if (cfg->n_threads < 1 || cfg->kv_block_size < 1 || (cfg->n_kv_blocks < 1 && !gpu_ok) ||
        cfg->max_batch_tokens < 1 || cfg->max_ctx < 1) {
        snprintf(err, SL_ERR_LEN, "backend: invalid configuration (threads %d, block size %u, blocks %u, "
                 "batch tokens %d, context %d)", cfg->n_threads, cfg->kv_block_size, cfg->n_kv_blocks,
                 cfg->max_batch_tokens, cfg->max_ctx);
        return SL_EINVAL;
    }
    if (!strcmp(dev, "cpu"))
        return sl_cpu_backend_create(m, cfg, out, err);
    if (gpu_ok) {
        bool found;
        sl_status rc = cuda_create(m, cfg, out, &found, err);
        if (rc >= 0 || !strcmp(dev, "cuda") || rc != SL_EUNSUPPORTED)
            return rc;
        /* auto: no library (a CPU-only install: quiet) or no usable device (say so) */
        if (found)
            fprintf(stderr, "sluice: %s; using the CPU backend\n", err);
        if (cfg->n_kv_blocks < 1) {
            snprintf(err, SL_ERR_LEN, "backend: 0 KV blocks (size from device memory) needs the CUDA backend");
            return SL_EINVAL;
        }
        return sl_cpu_backend_create(m, cfg, out, err);
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

static sl_status check_batch(const sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs)
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
    return SL_OK;
}

sl_status sl_backend_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    sl_status rc = check_batch(b, seqs, n_seqs);
    return rc < 0 ? rc : b->ops->forward(b, seqs, n_seqs, logits);
}

bool sl_backend_samples(const sl_backend *b)
{
    return b && b->ops->forward_sample;
}

sl_status sl_backend_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                    const sl_sample_req *reqs, int32_t *tokens)
{
    if (!sl_backend_samples(b))
        return SL_EUNSUPPORTED;
    sl_status rc = check_batch(b, seqs, n_seqs);
    if (rc < 0)
        return rc;
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
    return b->ops->forward_sample(b, seqs, n_seqs, reqs, tokens);
}

void sl_backend_destroy(sl_backend *b)
{
    if (b)
        b->ops->destroy(b);
}
