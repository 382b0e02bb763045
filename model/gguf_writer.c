/* model/gguf_writer.c: the streaming GGUF v3 writer (mkmodel, tests, tools).
 * Key/values and tensor infos are collected in memory; tensor data is streamed
 * to the file one tensor at a time, so a model larger than memory can be
 * written. Offsets are aligned to SL_GGUF_DEFAULT_ALIGNMENT. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/ggml_types.h"

typedef struct {
    char *key;
    uint32_t type;
    unsigned char *blob;   /* the value, GGUF-encoded */
    size_t len;
} wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[SL_GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
} wtensor;

struct sl_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    FILE *f;
    uint64_t next;         /* next tensor to write */
    uint64_t pos;          /* bytes written into the data section */
};

sl_gguf_writer *sl_gguf_writer_create(void)
{
    return calloc(1, sizeof(sl_gguf_writer));
}

void sl_gguf_writer_destroy(sl_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].blob);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    if (w->f)
        fclose(w->f);
    free(w);
}

/* Takes ownership of blob. */
static sl_status put_kv(sl_gguf_writer *w, const char *key, uint32_t type, unsigned char *blob, size_t len)
{
    if (!blob)
        return SL_ENOMEM;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].blob);
            w->kv[i].type = type;
            w->kv[i].blob = blob;
            w->kv[i].len = len;
            return SL_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *n = realloc(w->kv, cap * sizeof *n);
        if (!n) {
            free(blob);
            return SL_ENOMEM;
        }
        w->kv = n;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(blob);
        return SL_ENOMEM;
    }
    w->kv[w->n_kv++] = (wkv){k, type, blob, len};
    return SL_OK;
}

static sl_status put_scalar(sl_gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n)
{
    unsigned char *b = malloc(n);
    if (b)
        memcpy(b, v, n);
    return put_kv(w, key, type, b, n);
}

sl_status sl_gguf_writer_set_u32(sl_gguf_writer *w, const char *key, uint32_t v)
{ return put_scalar(w, key, SL_GGUF_TYPE_UINT32, &v, 4); }
sl_status sl_gguf_writer_set_i32(sl_gguf_writer *w, const char *key, int32_t v)
{ return put_scalar(w, key, SL_GGUF_TYPE_INT32, &v, 4); }
sl_status sl_gguf_writer_set_u64(sl_gguf_writer *w, const char *key, uint64_t v)
{ return put_scalar(w, key, SL_GGUF_TYPE_UINT64, &v, 8); }
sl_status sl_gguf_writer_set_f32(sl_gguf_writer *w, const char *key, float v)
{ return put_scalar(w, key, SL_GGUF_TYPE_FLOAT32, &v, 4); }
sl_status sl_gguf_writer_set_bool(sl_gguf_writer *w, const char *key, bool v)
{ uint8_t b = v; return put_scalar(w, key, SL_GGUF_TYPE_BOOL, &b, 1); }

sl_status sl_gguf_writer_set_strn(sl_gguf_writer *w, const char *key, const char *v, size_t len)
{
    unsigned char *b = malloc(8 + len);
    if (b) {
        uint64_t l = len;
        memcpy(b, &l, 8);
        memcpy(b + 8, v, len);
    }
    return put_kv(w, key, SL_GGUF_TYPE_STRING, b, 8 + len);
}

sl_status sl_gguf_writer_set_str(sl_gguf_writer *w, const char *key, const char *v)
{
    return sl_gguf_writer_set_strn(w, key, v, strlen(v));
}

sl_status sl_gguf_writer_set_arr(sl_gguf_writer *w, const char *key, uint32_t type, const void *data, uint64_t n)
{
    uint32_t es = sl_gguf_value_size(type);
    if (es == 0)
        return SL_EINVAL;
    size_t len = 12 + (size_t)n * es;
    unsigned char *b = malloc(len);
    if (b) {
        memcpy(b, &type, 4);
        memcpy(b + 4, &n, 8);
        if (n)
            memcpy(b + 12, data, (size_t)n * es);
    }
    return put_kv(w, key, SL_GGUF_TYPE_ARRAY, b, len);
}

sl_status sl_gguf_writer_set_arr_str(sl_gguf_writer *w, const char *key, const char *const *strs,
                                     const size_t *lens, uint64_t n)
{
    size_t len = 12;
    for (uint64_t i = 0; i < n; i++)
        len += 8 + (lens ? lens[i] : strlen(strs[i]));
    unsigned char *b = malloc(len);
    if (b) {
        uint32_t t = SL_GGUF_TYPE_STRING;
        memcpy(b, &t, 4);
        memcpy(b + 4, &n, 8);
        size_t p = 12;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t l = lens ? lens[i] : strlen(strs[i]);
            memcpy(b + p, &l, 8);
            memcpy(b + p + 8, strs[i], l);
            p += 8 + l;
        }
    }
    return put_kv(w, key, SL_GGUF_TYPE_ARRAY, b, len);
}

int64_t sl_gguf_writer_arr_len(const sl_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key) && w->kv[i].type == SL_GGUF_TYPE_ARRAY) {
            uint64_t n;
            memcpy(&n, w->kv[i].blob + 4, 8);
            return (int64_t)n;
        }
    }
    return -1;
}

int64_t sl_gguf_writer_add_tensor(sl_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                  const uint64_t *ne)
{
    if (n_dims < 1 || n_dims > SL_GGUF_MAX_DIMS || strlen(name) > 64 || w->f)
        return SL_EINVAL;
    uint64_t row = sl_ggml_row_bytes(type, ne[0]);
    if (row == 0)
        return SL_EINVAL;
    uint64_t nbytes = row;
    for (uint32_t d = 1; d < n_dims; d++)
        nbytes *= ne[d];
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *n = realloc(w->t, cap * sizeof *n);
        if (!n)
            return SL_ENOMEM;
        w->t = n;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return SL_ENOMEM;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < SL_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    return (int64_t)w->n_t++;
}

uint64_t sl_gguf_writer_tensor_bytes(const sl_gguf_writer *w, uint64_t i)
{
    return i < w->n_t ? w->t[i].nbytes : 0;
}

static uint64_t align_up(uint64_t x)
{
    return (x + SL_GGUF_DEFAULT_ALIGNMENT - 1) / SL_GGUF_DEFAULT_ALIGNMENT * SL_GGUF_DEFAULT_ALIGNMENT;
}

static bool pad(FILE *f, uint64_t from, uint64_t to)
{
    static const char zeros[SL_GGUF_DEFAULT_ALIGNMENT];
    return to == from || fwrite(zeros, 1, to - from, f) == to - from;
}

sl_status sl_gguf_writer_begin(sl_gguf_writer *w, const char *path, char err[SL_ERR_LEN])
{
    if (w->f) {
        snprintf(err, SL_ERR_LEN, "%s: writer already begun", path);
        return SL_ESTATE;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, SL_ERR_LEN, "%s: cannot create: %s", path, strerror(errno));
        return SL_EIO;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off = align_up(off + w->t[i].nbytes);
    }
    uint32_t version = 3;
    uint64_t nt = w->n_t, nkv = w->n_kv, pos = 24;
    bool ok = fwrite("GGUF", 1, 4, f) == 4 && fwrite(&version, 4, 1, f) == 1 &&
              fwrite(&nt, 8, 1, f) == 1 && fwrite(&nkv, 8, 1, f) == 1;
    for (size_t i = 0; ok && i < w->n_kv; i++) {
        uint64_t kl = strlen(w->kv[i].key);
        ok = fwrite(&kl, 8, 1, f) == 1 && fwrite(w->kv[i].key, 1, kl, f) == kl &&
             fwrite(&w->kv[i].type, 4, 1, f) == 1 && fwrite(w->kv[i].blob, 1, w->kv[i].len, f) == w->kv[i].len;
        pos += 12 + kl + w->kv[i].len;
    }
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        ok = fwrite(&nl, 8, 1, f) == 1 && fwrite(t->name, 1, nl, f) == nl &&
             fwrite(&t->n_dims, 4, 1, f) == 1 && fwrite(t->ne, 8, t->n_dims, f) == t->n_dims &&
             fwrite(&t->type, 4, 1, f) == 1 && fwrite(&t->offset, 8, 1, f) == 1;
        pos += 8 + nl + 4 + 8 * t->n_dims + 4 + 8;
    }
    ok = ok && pad(f, pos, align_up(pos));
    if (!ok) {
        snprintf(err, SL_ERR_LEN, "%s: write failed: %s", path, strerror(errno));
        fclose(f);
        return SL_EIO;
    }
    w->f = f;
    w->next = 0;
    w->pos = 0;
    return SL_OK;
}

sl_status sl_gguf_writer_write_tensor(sl_gguf_writer *w, uint64_t i, const void *data, char err[SL_ERR_LEN])
{
    if (!w->f || i != w->next || i >= w->n_t) {
        snprintf(err, SL_ERR_LEN, "gguf writer: tensor %llu written out of order", (unsigned long long)i);
        return SL_ESTATE;
    }
    const wtensor *t = &w->t[i];
    if (!pad(w->f, w->pos, t->offset) || fwrite(data, 1, t->nbytes, w->f) != t->nbytes) {
        snprintf(err, SL_ERR_LEN, "gguf writer: writing tensor '%s' failed: %s", t->name, strerror(errno));
        return SL_EIO;
    }
    w->pos = t->offset + t->nbytes;
    w->next++;
    return SL_OK;
}

sl_status sl_gguf_writer_finish(sl_gguf_writer *w, char err[SL_ERR_LEN])
{
    if (!w->f || w->next != w->n_t) {
        snprintf(err, SL_ERR_LEN, "gguf writer: %llu of %zu tensors written", (unsigned long long)w->next, w->n_t);
        return SL_ESTATE;
    }
    /* pad the file so the last tensor's block is whole, as other writers do */
    bool ok = pad(w->f, w->pos, align_up(w->pos));
    ok = (fclose(w->f) == 0) && ok;
    w->f = NULL;
    if (!ok) {
        snprintf(err, SL_ERR_LEN, "gguf writer: closing failed: %s", strerror(errno));
        return SL_EIO;
    }
    return SL_OK;
}
