/* frontend/api_models.c: the served model's names, which `model` values a
 * request may give, and the system_fingerprint. Runs in each front end at
 * start (init, fingerprint) and per request (accepts). The trade-off: names
 * are compared exactly (bytes, case included), as OpenAI compares them, so
 * "Qwen" and "qwen" are two names; a client that needs both lists both. */
#include <stdio.h>
#include <string.h>

#include "frontend/api_models.h"
#include "shared/config.h"

static bool add_name(sl_api_models *m, const char *name, size_t len, char err[SL_ERR_LEN])
{
    if (sl_api_models_has(m, name, len))
        return true;
    if (len >= SL_API_MODEL_NAME_LEN) {
        snprintf(err, SL_ERR_LEN, "--model-alias: '%.40s...' is longer than %d bytes", name,
                 SL_API_MODEL_NAME_LEN - 1);
        return false;
    }
    if (m->n_names == SL_API_MODEL_NAMES_MAX) {
        snprintf(err, SL_ERR_LEN, "--model-alias: more than %d names", SL_API_MODEL_NAMES_MAX);
        return false;
    }
    memcpy(m->names[m->n_names], name, len);
    m->names[m->n_names][len] = '\0';
    m->n_names++;
    return true;
}

sl_status sl_api_models_init(sl_api_models *m, const char *list, const char *fallback, bool accept_any,
                             char err[SL_ERR_LEN])
{
    memset(m, 0, sizeof *m);
    m->accept_any = accept_any;
    size_t pos = 0, len = 0;
    for (const char *item; (item = sl_config_list_next(list, &pos, &len)) != NULL;)
        if (!add_name(m, item, len, err))
            return SL_EINVAL;
    if (m->n_names == 0) {
        /* the base name may be long: cut, as a report name it only needs to be recognisable */
        size_t n = strnlen(fallback, SL_API_MODEL_NAME_LEN - 1);
        add_name(m, fallback, n, err);
    }
    return SL_OK;
}

bool sl_api_models_has(const sl_api_models *m, const char *name, size_t len)
{
    for (uint32_t i = 0; i < m->n_names; i++)
        if (strlen(m->names[i]) == len && memcmp(m->names[i], name, len) == 0)
            return true;
    return false;
}

bool sl_api_models_accepts(const sl_api_models *m, const char *requested)
{
    if (requested == NULL || requested[0] == '\0' || m->accept_any)
        return true;
    return sl_api_models_has(m, requested, strlen(requested));
}

/* ================================================================ fingerprint */

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define FINGERPRINT_SAMPLE 4096   /* bytes of a tensor's data hashed */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));   /* little-endian whatever the host */
    return fnv(h, b, sizeof b);
}

static uint64_t fnv_tensor_sample(uint64_t h, const sl_gguf_tensor *t)
{
    size_t n = t->nbytes < FINGERPRINT_SAMPLE ? (size_t)t->nbytes : FINGERPRINT_SAMPLE;
    return fnv(fnv_u64(h, n), t->data, n);
}

void sl_api_models_fingerprint(const sl_gguf *g, const char *version, const char *commit,
                               char out[SL_API_FINGERPRINT_LEN])
{
    /* Each string ends with its NUL, so ("ab","c") and ("a","bc") differ. */
    uint64_t h = fnv(FNV_OFFSET, version, strlen(version) + 1);
    h = fnv(h, commit, strlen(commit) + 1);
    h = fnv_u64(h, g ? sl_gguf_file_size(g) : 0);
    uint64_t n = g ? sl_gguf_n_tensors(g) : 0;
    h = fnv_u64(h, n);
    for (uint64_t i = 0; i < n; i++) {
        const sl_gguf_tensor *t = sl_gguf_tensor_at(g, i);
        h = fnv_u64(fnv(h, t->name.ptr, (size_t)t->name.len), t->name.len);
        h = fnv_u64(fnv_u64(h, t->type), t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            h = fnv_u64(h, t->ne[d]);
        h = fnv_u64(h, t->offset);
    }
    if (n > 0) {
        h = fnv_tensor_sample(h, sl_gguf_tensor_at(g, 0));
        h = fnv_tensor_sample(h, sl_gguf_tensor_at(g, n - 1));
    }
    snprintf(out, SL_API_FINGERPRINT_LEN, "fp_%012llx", (unsigned long long)(h & 0xffffffffffffull));
}
