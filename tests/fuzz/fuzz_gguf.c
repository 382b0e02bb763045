/* tests/fuzz/fuzz_gguf.c: libFuzzer target `gguf`: the fuzzed bytes are a
 * GGUF file. It is opened from memory (sl_gguf_open_memory, over a copy
 * aligned as an mmap'd file would be), every key and array element and
 * tensor is read back through the public getters, and what parses goes on
 * to the tokenizer (sl_tokenizer_create) and the model loader
 * (sl_model_from_gguf), so their key and tensor-shape checks see the same
 * hostile file. Set SL_FUZZ_VERBOSE=1 to print why a file was refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

static int verbose;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    verbose = getenv("SL_FUZZ_VERBOSE") != NULL;
    return 0;
}

static volatile uint64_t sink;

static void walk(const sl_gguf *g)
{
    sink += sl_gguf_version(g) + sl_gguf_alignment(g) + sl_gguf_file_size(g);
    uint64_t n_kv = sl_gguf_n_kv(g);
    char key[256];
    for (uint64_t i = 0; i < n_kv; i++) {
        sl_gguf_str k = sl_gguf_kv_key(g, i);
        if (k.len >= sizeof key)
            continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        int64_t iv;
        double fv;
        bool bv;
        sl_gguf_str sv;
        sl_gguf_arr av;
        if (sl_gguf_get_int(g, key, &iv) == SL_OK)
            sink += (uint64_t)iv;
        if (sl_gguf_get_float(g, key, &fv) == SL_OK)
            sink += (uint64_t)(fv == fv);
        if (sl_gguf_get_bool(g, key, &bv) == SL_OK)
            sink += bv;
        if (sl_gguf_get_str(g, key, &sv) == SL_OK && sv.len > 0)
            sink += (uint8_t)sv.ptr[sv.len - 1];
        if (sl_gguf_get_arr(g, key, &av) == SL_OK) {
            /* first and last elements, plus the one past the end (must be SL_ERANGE) */
            uint64_t idx[3] = {0, av.n ? av.n - 1 : 0, av.n};
            for (int j = 0; j < 3; j++) {
                if (sl_gguf_arr_int(&av, idx[j], &iv) == SL_OK)
                    sink += (uint64_t)iv;
                if (sl_gguf_arr_float(&av, idx[j], &fv) == SL_OK)
                    sink += (uint64_t)(fv == fv);
                if (sl_gguf_arr_str(&av, idx[j], &sv) == SL_OK && sv.len > 0)
                    sink += (uint8_t)sv.ptr[sv.len - 1];
            }
            if (sl_gguf_arr_int(&av, av.n, &iv) == SL_OK || sl_gguf_arr_str(&av, av.n, &sv) == SL_OK)
                abort();  /* an element past the end was handed out */
        }
        if (sl_gguf_find_key(g, key) < 0)
            abort();      /* a key we just listed is not found */
    }
    uint64_t n_t = sl_gguf_n_tensors(g);
    for (uint64_t i = 0; i < n_t; i++) {
        const sl_gguf_tensor *t = sl_gguf_tensor_at(g, i);
        if (t == NULL)
            abort();
        /* the reader promised the data lies inside the buffer: touch both ends */
        if (t->nbytes > 0) {
            const uint8_t *d = t->data;
            sink += d[0] + d[t->nbytes - 1];
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A real file is page-aligned by mmap; keep the 64-byte alignment GGUF
     * data sections assume, so a misaligned read is the file's fault. */
    void *buf = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    char err[SL_ERR_LEN] = "";
    sl_gguf *g = NULL;
    sl_status rc = sl_gguf_open_memory(buf, size, "fuzz.gguf", &g, err);
    if (rc != SL_OK) {
        if (g != NULL || err[0] == 0)
            abort();  /* a refusal must leave *out NULL and say why */
        if (verbose)
            fprintf(stderr, "gguf: %s\n", err);
        free(buf);
        return 0;
    }
    walk(g);
    sl_tokenizer *t = NULL;
    if (sl_tokenizer_create(g, &t, err) == SL_OK) {
        int32_t ids[64];
        sl_tokenize(t, "Hello, world! 123", 17, ids, 64);
        sl_tokenizer_destroy(t);
    } else if (verbose) {
        fprintf(stderr, "tokenizer: %s\n", err);
    }
    sl_model *m = NULL;
    err[0] = 0;
    if (sl_model_from_gguf(g, &m, err) == SL_OK) {
        sink += sl_model_flops_per_token(m);
        sl_model_destroy(m);  /* owns g now */
    } else {
        if (verbose)
            fprintf(stderr, "model: %s\n", err);
        sl_gguf_close(g);
    }
    free(buf);
    return 0;
}
