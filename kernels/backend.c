/* kernels/backend.c: the backend registry (create by device name, destroy)
 * and the dispatch of each call: the checks of kernels/backend_check.h,
 * then the backend's slot or its documented default. Runs on the thread
 * that drives the backend (the worker's scheduler thread).
 * The CUDA backend is a shared library loaded here on demand (dlopen), so
 * the binary itself never links CUDA: "auto" on a host without the library
 * or without a GPU quietly (library absent) or with a note (library present,
 * no device) runs on the CPU.
 * Dependencies point down: this file uses backend_check.c and cpu/; neither
 * calls back here. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/backend_check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/sample_batch.h"
#include "kernels/cpu/sampler.h"
#include "kernels/cuda/cuda_backend.h"

/* ------------------------------------------------------------------------ */
/* registry                                                                  */

/* Finds libsluice_cuda.so: $SLUICE_CUDA_LIB if set, else next to the
 * executable, else one folder up (the build root, for the tools that live in
 * build/tools/), else ../lib/sluice (an installed tree: `cmake --install`
 * puts the binary in PREFIX/bin and the library in PREFIX/lib/sluice).
 * Returns false with err filled when none exists. */
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
    static const char *const rel[] = {"", "/..", "/../lib/sluice"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(path, len, "%s%s/%s", exe, rel[i], SL_CUDA_BACKEND_LIB);
        if (access(path, R_OK) == 0)
            return true;
    }
    snprintf(err, SL_ERR_LEN, "backend: no CUDA backend: %s not found next to %.100s, one folder up or in "
             "../lib/sluice (build with -DSLUICE_CUDA=ON, or set SLUICE_CUDA_LIB)", SL_CUDA_BACKEND_LIB, exe);
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
    sl_status crc = sl_backend_check_config(cfg, gpu_ok, err);
    if (crc < 0)
        return crc;
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

void sl_backend_destroy(sl_backend *b)
{
    if (!b)
        return;
    sl_sample_batch_destroy(b->_host_sampling);
    b->_host_sampling = NULL;
    b->ops->destroy(b);
}

/* ------------------------------------------------------------------------ */
/* dispatch                                                                  */

sl_status sl_backend_forward(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs, float *logits)
{
    sl_status rc = sl_backend_check_batch(b, seqs, n_seqs);
    return rc < 0 ? rc : b->ops->forward(b, seqs, n_seqs, logits);
}

bool sl_backend_samples(const sl_backend *b)
{
    return b && b->ops->forward_sample;
}

sl_status sl_backend_logprob_record(float *row, int32_t n_vocab, int32_t token, int32_t n_top,
                                    sl_logprob_record *record)
{
    return sl_sampler_logprob_record(row, n_vocab, token, n_top, record);
}

/* The default forward_sample: forward into host rows, then the reference
 * sampler on cfg.n_threads threads (a backend without the slot: a test's
 * fake, CUDA with SLUICE_CUDA_SAMPLE=0). Every seqs[i] has logits_all false,
 * so row i is sequence i's. */
static sl_status host_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                     const sl_sample_req *reqs, int32_t *tokens)
{
    if (!b->_host_sampling &&
        sl_sample_batch_create(b->model->hp.n_vocab, sl_backend_max_batch_seqs(&b->cfg), NULL, b->cfg.n_threads,
                               &b->_host_sampling) < 0)
        return SL_ENOMEM;
    sl_status rc = b->ops->forward(b, seqs, n_seqs, sl_sample_batch_rows(b->_host_sampling));
    if (rc < 0)
        return rc;
    sl_sample_batch_draw(b->_host_sampling, reqs, n_seqs, tokens);
    return SL_OK;
}

sl_status sl_backend_forward_sample(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                    const sl_sample_req *reqs, int32_t *tokens)
{
    sl_status rc = sl_backend_check_batch(b, seqs, n_seqs);
    if (rc >= 0)
        rc = sl_backend_check_sample(b, seqs, n_seqs, reqs);
    if (rc < 0)
        return rc;
    if (b->ops->forward_sample)
        return b->ops->forward_sample(b, seqs, n_seqs, reqs, tokens);
    return host_forward_sample(b, seqs, n_seqs, reqs, tokens);
}

sl_status sl_backend_forward_sample_overlap(sl_backend *b, const sl_batch_seq *seqs, int32_t n_seqs,
                                            const sl_sample_req *reqs, int32_t *tokens, const sl_allow_fill *fill)
{
    sl_status rc = sl_backend_check_batch(b, seqs, n_seqs);
    if (rc >= 0)
        rc = sl_backend_check_sample(b, seqs, n_seqs, reqs);
    if (rc < 0)
        return rc;
    if (b->ops->forward_sample_overlap)
        return b->ops->forward_sample_overlap(b, seqs, n_seqs, reqs, tokens, fill);
    fill->fn(fill->ctx);
    if (b->ops->forward_sample)
        return b->ops->forward_sample(b, seqs, n_seqs, reqs, tokens);
    return host_forward_sample(b, seqs, n_seqs, reqs, tokens);
}

const char *sl_backend_describe(const sl_backend *b)
{
    return b->description ? b->description : b->ops->name;
}
