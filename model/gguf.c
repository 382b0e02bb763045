/* model/gguf.c: the GGUF reader (validating, over mmap).
 * Runs in every process that opens a model: the worker, each front end (for
 * the tokenizer) and the tools.
 * Trade-off: open() validates the whole header up front (one pass, plus an
 * index of string-array offsets and hash tables of keys and tensor names) so
 * that no later accessor needs a bounds check or can fail on a bad file. Only
 * the header is touched; tensor data is paged in when the backend reads it. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/ggml_types.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_MAX_TENSOR_NAME 64  /* the spec's limit on tensor names */
#define GGUF_MIN_KV_BYTES 12     /* u64 key length + u32 type, empty value impossible but bounds counts */
#define GGUF_MIN_TENSOR_BYTES 32 /* u64 name length + u32 n_dims + u64 ne + u32 type + u64 offset */

typedef struct {
    sl_gguf_str key;
    uint32_t type;
    const uint8_t *value;   /* first byte of the value (fixed types, string) */
    sl_gguf_arr arr;        /* type == ARRAY */
} kv_entry;

struct sl_gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    bool mapped;            /* base came from mmap (else caller memory) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_start;
    uint64_t n_kv;
    kv_entry *kv;
    uint64_t n_tensors;
    sl_gguf_tensor *tensors;
    /* open-addressing hash tables of indices + 1 (0 = empty); size a power of two */
    uint64_t *kv_hash, kv_hash_mask;
    uint64_t *tensor_hash, tensor_hash_mask;
};

/* ------------------------------------------------------------------------ */
/* A bounds-checked cursor over the file. Every read checks that the bytes  */
/* exist; the first failure records where and why, and later reads fail.   */

typedef struct {
    const uint8_t *base;
    size_t size, pos;
    const char *name;
    char *err;
    bool failed;
} cursor;

static void cur_fail(cursor *c, size_t at, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->err, SL_ERR_LEN, "%s: offset %zu: %s", c->name, at, what);
}

static bool cur_need(cursor *c, uint64_t n, const char *what)
{
    if (c->failed)
        return false;
    if (n > c->size - c->pos) {
        cur_fail(c, c->pos, "%s runs past the end of the file (%zu bytes)", what, c->size);
        return false;
    }
    return true;
}

static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static bool cur_u32(cursor *c, uint32_t *v, const char *what)
{
    if (!cur_need(c, 4, what)) return false;
    *v = rd_u32(c->base + c->pos);
    c->pos += 4;
    return true;
}

static bool cur_u64(cursor *c, uint64_t *v, const char *what)
{
    if (!cur_need(c, 8, what)) return false;
    *v = rd_u64(c->base + c->pos);
    c->pos += 8;
    return true;
}

static bool cur_str(cursor *c, sl_gguf_str *s, const char *what)
{
    uint64_t len;
    size_t at = c->pos;
    if (!cur_u64(c, &len, what)) return false;
    if (len > c->size - c->pos) {
        cur_fail(c, at, "%s length %llu runs past the end of the file", what, (unsigned long long)len);
        return false;
    }
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return true;
}

uint32_t sl_gguf_value_size(uint32_t t)
{
    switch (t) {
    case SL_GGUF_TYPE_UINT8: case SL_GGUF_TYPE_INT8: case SL_GGUF_TYPE_BOOL: return 1;
    case SL_GGUF_TYPE_UINT16: case SL_GGUF_TYPE_INT16: return 2;
    case SL_GGUF_TYPE_UINT32: case SL_GGUF_TYPE_INT32: case SL_GGUF_TYPE_FLOAT32: return 4;
    case SL_GGUF_TYPE_UINT64: case SL_GGUF_TYPE_INT64: case SL_GGUF_TYPE_FLOAT64: return 8;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Hash tables over the mapping's strings, so duplicate checks and lookups  */
/* stay linear even for hostile counts.                                     */

static uint64_t hash_bytes(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;          /* FNV-1a */
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static uint64_t *hash_create(uint64_t n, uint64_t *mask)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    *mask = cap - 1;
    return calloc(cap, sizeof(uint64_t));
}

static bool str_eq(sl_gguf_str a, const char *b, uint64_t blen)
{
    return a.len == blen && memcmp(a.ptr, b, blen) == 0;
}

/* Looks `name` up in a table whose slots hold index+1 into an array of names
 * reached through get_name. Returns the index or -1. */
typedef sl_gguf_str (*name_fn)(const sl_gguf *g, uint64_t i);

static int64_t hash_find(const sl_gguf *g, const uint64_t *tab, uint64_t mask, name_fn get_name,
                         const char *name, uint64_t len)
{
    if (!tab)
        return -1;
    for (uint64_t h = hash_bytes(name, len) & mask;; h = (h + 1) & mask) {
        if (tab[h] == 0)
            return -1;
        if (str_eq(get_name(g, tab[h] - 1), name, len))
            return (int64_t)(tab[h] - 1);
    }
}

/* Inserts index i; returns false if the name is already present. */
static bool hash_insert(const sl_gguf *g, uint64_t *tab, uint64_t mask, name_fn get_name, uint64_t i)
{
    sl_gguf_str s = get_name(g, i);
    for (uint64_t h = hash_bytes(s.ptr, s.len) & mask;; h = (h + 1) & mask) {
        if (tab[h] == 0) {
            tab[h] = i + 1;
            return true;
        }
        if (str_eq(get_name(g, tab[h] - 1), s.ptr, s.len))
            return false;
    }
}

static sl_gguf_str kv_name(const sl_gguf *g, uint64_t i) { return g->kv[i].key; }
static sl_gguf_str tensor_name(const sl_gguf *g, uint64_t i) { return g->tensors[i].name; }

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */

static bool parse_value(cursor *c, sl_gguf *g, kv_entry *e)
{
    size_t at = c->pos;
    e->value = c->base + c->pos;
    if (e->type == SL_GGUF_TYPE_STRING) {
        sl_gguf_str s;
        return cur_str(c, &s, "string value");
    }
    if (e->type != SL_GGUF_TYPE_ARRAY) {
        uint32_t sz = sl_gguf_value_size(e->type);
        if (sz == 0) {
            cur_fail(c, at - 4, "key '%.*s' has unknown value type %u", (int)e->key.len, e->key.ptr, e->type);
            return false;
        }
        if (!cur_need(c, sz, "value"))
            return false;
        if (e->type == SL_GGUF_TYPE_BOOL && c->base[c->pos] > 1) {
            cur_fail(c, c->pos, "key '%.*s' holds bool value %u", (int)e->key.len, e->key.ptr, c->base[c->pos]);
            return false;
        }
        c->pos += sz;
        return true;
    }
    uint32_t et;
    uint64_t n;
    if (!cur_u32(c, &et, "array element type") || !cur_u64(c, &n, "array length"))
        return false;
    e->arr.type = et;
    e->arr.n = n;
    e->arr.data = c->base + c->pos;
    if (et == SL_GGUF_TYPE_ARRAY) {
        cur_fail(c, at, "key '%.*s' is a nested array (not supported)", (int)e->key.len, e->key.ptr);
        return false;
    }
    if (et == SL_GGUF_TYPE_STRING) {
        /* each string takes at least its 8-byte length field */
        if (n > (c->size - c->pos) / 8) {
            cur_fail(c, at, "key '%.*s': array of %llu strings cannot fit in the file",
                     (int)e->key.len, e->key.ptr, (unsigned long long)n);
            return false;
        }
        uint64_t *offs = malloc((n ? n : 1) * sizeof *offs);
        if (!offs) {
            cur_fail(c, at, "out of memory indexing %llu strings", (unsigned long long)n);
            return false;
        }
        e->arr._str_offsets = offs;
        size_t start = c->pos;
        for (uint64_t i = 0; i < n; i++) {
            sl_gguf_str s;
            offs[i] = c->pos - start;
            if (!cur_str(c, &s, "array string"))
                return false;
        }
        (void)g;
        return true;
    }
    uint32_t sz = sl_gguf_value_size(et);
    if (sz == 0) {
        cur_fail(c, at, "key '%.*s': array of unknown type %u", (int)e->key.len, e->key.ptr, et);
        return false;
    }
    if (n > (c->size - c->pos) / sz) {
        cur_fail(c, at, "key '%.*s': array of %llu elements runs past the end of the file",
                 (int)e->key.len, e->key.ptr, (unsigned long long)n);
        return false;
    }
    c->pos += n * sz;
    return true;
}

static bool parse_kvs(cursor *c, sl_gguf *g)
{
    if (g->n_kv > (c->size - c->pos) / GGUF_MIN_KV_BYTES) {
        cur_fail(c, 16, "key/value count %llu cannot fit in the file", (unsigned long long)g->n_kv);
        return false;
    }
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->kv_hash = hash_create(g->n_kv, &g->kv_hash_mask);
    if (!g->kv || !g->kv_hash) {
        cur_fail(c, 16, "out of memory for %llu keys", (unsigned long long)g->n_kv);
        return false;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        kv_entry *e = &g->kv[i];
        size_t at = c->pos;
        if (!cur_str(c, &e->key, "key") || !cur_u32(c, &e->type, "value type"))
            return false;
        if (e->key.len == 0 || e->key.len > 65535 || memchr(e->key.ptr, 0, e->key.len)) {
            cur_fail(c, at, "key %llu has an invalid name (empty, too long or holding NUL)",
                     (unsigned long long)i);
            return false;
        }
        if (!parse_value(c, g, e))
            return false;
        if (!hash_insert(g, g->kv_hash, g->kv_hash_mask, kv_name, i)) {
            cur_fail(c, at, "duplicate key '%.*s'", (int)e->key.len, e->key.ptr);
            return false;
        }
    }
    return true;
}

static bool parse_alignment(cursor *c, sl_gguf *g)
{
    g->alignment = SL_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = sl_gguf_find_key(g, "general.alignment");
    if (i < 0)
        return true;
    const kv_entry *e = &g->kv[i];
    if (e->type != SL_GGUF_TYPE_UINT32) {
        cur_fail(c, (size_t)(e->value - c->base), "general.alignment has type %u, expected uint32", e->type);
        return false;
    }
    uint32_t a = rd_u32(e->value);
    if (a == 0 || (a & (a - 1)) != 0) {
        cur_fail(c, (size_t)(e->value - c->base), "general.alignment %u is not a power of two", a);
        return false;
    }
    g->alignment = a;
    return true;
}

static bool parse_tensor_infos(cursor *c, sl_gguf *g)
{
    if (g->n_tensors > (c->size - c->pos) / GGUF_MIN_TENSOR_BYTES) {
        cur_fail(c, 8, "tensor count %llu cannot fit in the file", (unsigned long long)g->n_tensors);
        return false;
    }
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    g->tensor_hash = hash_create(g->n_tensors, &g->tensor_hash_mask);
    if (!g->tensors || !g->tensor_hash) {
        cur_fail(c, 8, "out of memory for %llu tensors", (unsigned long long)g->n_tensors);
        return false;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sl_gguf_tensor *t = &g->tensors[i];
        size_t at = c->pos;
        if (!cur_str(c, &t->name, "tensor name"))
            return false;
        int nl = (int)(t->name.len < 64 ? t->name.len : 64);
        if (t->name.len == 0 || t->name.len > GGUF_MAX_TENSOR_NAME || memchr(t->name.ptr, 0, t->name.len)) {
            cur_fail(c, at, "tensor %llu has an invalid name (empty, over %d bytes or holding NUL)",
                     (unsigned long long)i, GGUF_MAX_TENSOR_NAME);
            return false;
        }
        size_t dims_at = c->pos;
        if (!cur_u32(c, &t->n_dims, "tensor dimension count"))
            return false;
        if (t->n_dims < 1 || t->n_dims > SL_GGUF_MAX_DIMS) {
            cur_fail(c, dims_at, "tensor '%.*s' has %u dimensions (1..%d allowed)", nl, t->name.ptr,
                     t->n_dims, SL_GGUF_MAX_DIMS);
            return false;
        }
        uint64_t n_elems = 1;
        for (uint32_t d = 0; d < SL_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d >= t->n_dims)
                continue;
            size_t ne_at = c->pos;
            if (!cur_u64(c, &t->ne[d], "tensor dimension"))
                return false;
            if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX ||
                __builtin_mul_overflow(n_elems, t->ne[d], &n_elems) || n_elems > (uint64_t)INT64_MAX) {
                cur_fail(c, ne_at, "tensor '%.*s' has an invalid shape (dimension %u = %llu)", nl,
                         t->name.ptr, d, (unsigned long long)t->ne[d]);
                return false;
            }
        }
        size_t type_at = c->pos;
        if (!cur_u32(c, &t->type, "tensor type"))
            return false;
        uint32_t be = sl_ggml_block_elems(t->type);
        if (be == 0) {
            cur_fail(c, type_at, "tensor '%.*s' has unknown type id %u", nl, t->name.ptr, t->type);
            return false;
        }
        if (t->ne[0] % be != 0) {
            cur_fail(c, type_at, "tensor '%.*s': row of %llu elements is not a multiple of %s's block of %u",
                     nl, t->name.ptr, (unsigned long long)t->ne[0], sl_ggml_type_name(t->type), be);
            return false;
        }
        uint64_t rows = n_elems / t->ne[0];
        uint64_t row_bytes = t->ne[0] / be * sl_ggml_block_bytes(t->type);
        if (__builtin_mul_overflow(rows, row_bytes, &t->nbytes)) {
            cur_fail(c, type_at, "tensor '%.*s' is too large", nl, t->name.ptr);
            return false;
        }
        size_t off_at = c->pos;
        if (!cur_u64(c, &t->offset, "tensor offset"))
            return false;
        if (t->offset % g->alignment != 0) {
            cur_fail(c, off_at, "tensor '%.*s' offset %llu is not a multiple of the alignment %u", nl,
                     t->name.ptr, (unsigned long long)t->offset, g->alignment);
            return false;
        }
        if (!hash_insert(g, g->tensor_hash, g->tensor_hash_mask, tensor_name, i)) {
            cur_fail(c, at, "duplicate tensor name '%.*s'", nl, t->name.ptr);
            return false;
        }
    }
    return true;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const sl_gguf_tensor *x = *(const sl_gguf_tensor *const *)a, *y = *(const sl_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places tensor data: inside the file, and no two tensors overlapping. */
static bool place_tensor_data(cursor *c, sl_gguf *g)
{
    uint64_t start = c->pos;
    uint64_t rem = start % g->alignment;
    if (rem)
        start += g->alignment - rem;
    if (g->n_tensors > 0 && start > c->size) {
        cur_fail(c, c->pos, "data section starts past the end of the file");
        return false;
    }
    g->data_start = start;
    uint64_t avail = c->size > start ? c->size - start : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sl_gguf_tensor *t = &g->tensors[i];
        int nl = (int)(t->name.len < 64 ? t->name.len : 64);
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            cur_fail(c, (size_t)(start + (t->offset < avail ? t->offset : avail)),
                     "tensor '%.*s' (%llu bytes at data offset %llu) lies outside the file", nl, t->name.ptr,
                     (unsigned long long)t->nbytes, (unsigned long long)t->offset);
            return false;
        }
        t->data = c->base + start + t->offset;
    }
    if (g->n_tensors < 2)
        return true;
    const sl_gguf_tensor **order = malloc(g->n_tensors * sizeof *order);
    if (!order) {
        cur_fail(c, 0, "out of memory");
        return false;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_by_offset);
    bool ok = true;
    for (uint64_t i = 0; i + 1 < g->n_tensors && ok; i++) {
        if (order[i]->offset + order[i]->nbytes > order[i + 1]->offset) {
            cur_fail(c, (size_t)(start + order[i + 1]->offset), "tensors '%.*s' and '%.*s' overlap",
                     (int)(order[i]->name.len), order[i]->name.ptr, (int)(order[i + 1]->name.len),
                     order[i + 1]->name.ptr);
            ok = false;
        }
    }
    free(order);
    return ok;
}

static sl_status parse(sl_gguf *g, char err[SL_ERR_LEN])
{
    cursor c = {.base = g->base, .size = g->size, .name = g->path, .err = err};
    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        cur_fail(&c, 0, "not a GGUF file (bad magic)");
        return SL_EFORMAT;
    }
    c.pos = 4;
    if (!cur_u32(&c, &g->version, "version"))
        return SL_EFORMAT;
    if (g->version != 2 && g->version != 3) {
        cur_fail(&c, 4, "unsupported GGUF version %u (2 and 3 are supported)", g->version);
        return SL_EFORMAT;
    }
    if (!cur_u64(&c, &g->n_tensors, "tensor count") || !cur_u64(&c, &g->n_kv, "key/value count"))
        return SL_EFORMAT;
    if (!parse_kvs(&c, g) || !parse_alignment(&c, g) || !parse_tensor_infos(&c, g) ||
        !place_tensor_data(&c, g))
        return c.err[0] && strstr(c.err, "out of memory") ? SL_ENOMEM : SL_EFORMAT;
    return SL_OK;
}

static sl_status open_common(sl_gguf *g, sl_gguf **out, char err[SL_ERR_LEN])
{
    sl_status rc = parse(g, err);
    if (rc < 0) {
        sl_gguf_close(g);
        return rc;
    }
    *out = g;
    return SL_OK;
}

sl_status sl_gguf_open(const char *path, sl_gguf **out, char err[SL_ERR_LEN])
{
    *out = NULL;
    err[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, SL_ERR_LEN, "%s: cannot open: %s", path, strerror(errno));
        return SL_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, SL_ERR_LEN, "%s: not a regular file", path);
        close(fd);
        return SL_EIO;
    }
    if (st.st_size < 24) {
        snprintf(err, SL_ERR_LEN, "%s: offset 0: file of %lld bytes is too short for a GGUF header",
                 path, (long long)st.st_size);
        close(fd);
        return SL_EFORMAT;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, SL_ERR_LEN, "%s: mmap failed: %s", path, strerror(errno));
        return SL_EIO;
    }
    sl_gguf *g = calloc(1, sizeof *g);
    char *name = strdup(path);
    if (!g || !name) {
        free(g);
        free(name);
        munmap(p, (size_t)st.st_size);
        snprintf(err, SL_ERR_LEN, "%s: out of memory", path);
        return SL_ENOMEM;
    }
    g->path = name;
    g->base = p;
    g->size = (size_t)st.st_size;
    g->mapped = true;
    return open_common(g, out, err);
}

sl_status sl_gguf_open_memory(const void *buf, size_t len, const char *name, sl_gguf **out,
                              char err[SL_ERR_LEN])
{
    *out = NULL;
    err[0] = 0;
    sl_gguf *g = calloc(1, sizeof *g);
    char *nm = strdup(name ? name : "<memory>");
    if (!g || !nm) {
        free(g);
        free(nm);
        snprintf(err, SL_ERR_LEN, "%s: out of memory", name ? name : "<memory>");
        return SL_ENOMEM;
    }
    g->path = nm;
    g->base = buf;
    g->size = len;
    return open_common(g, out, err);
}

void sl_gguf_close(sl_gguf *g)
{
    if (!g)
        return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free((void *)g->kv[i].arr._str_offsets);
    free(g->kv);
    free(g->tensors);
    free(g->kv_hash);
    free(g->tensor_hash);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

uint32_t sl_gguf_version(const sl_gguf *g) { return g->version; }
uint32_t sl_gguf_alignment(const sl_gguf *g) { return g->alignment; }
const char *sl_gguf_path(const sl_gguf *g) { return g->path; }
size_t sl_gguf_file_size(const sl_gguf *g) { return g->size; }
uint64_t sl_gguf_n_kv(const sl_gguf *g) { return g->n_kv; }
uint64_t sl_gguf_n_tensors(const sl_gguf *g) { return g->n_tensors; }

int64_t sl_gguf_find_key(const sl_gguf *g, const char *key)
{
    return hash_find(g, g->kv_hash, g->kv_hash_mask, kv_name, key, strlen(key));
}

sl_gguf_str sl_gguf_kv_key(const sl_gguf *g, uint64_t idx)
{
    return idx < g->n_kv ? g->kv[idx].key : (sl_gguf_str){"", 0};
}

uint32_t sl_gguf_kv_type(const sl_gguf *g, uint64_t idx)
{
    return idx < g->n_kv ? g->kv[idx].type : SL_GGUF_TYPE_COUNT;
}

bool sl_gguf_str_eq(sl_gguf_str s, const char *cstr)
{
    return str_eq(s, cstr, strlen(cstr));
}

/* Reads a fixed-size integer or float value of type t at p, widened. */
static bool read_int(uint32_t t, const uint8_t *p, int64_t *out)
{
    switch (t) {
    case SL_GGUF_TYPE_UINT8:  *out = *p; return true;
    case SL_GGUF_TYPE_BOOL:   *out = *p; return true;
    case SL_GGUF_TYPE_INT8:   *out = (int8_t)*p; return true;
    case SL_GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case SL_GGUF_TYPE_INT16:  { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case SL_GGUF_TYPE_UINT32: *out = rd_u32(p); return true;
    case SL_GGUF_TYPE_INT32:  *out = (int32_t)rd_u32(p); return true;
    case SL_GGUF_TYPE_INT64:  *out = (int64_t)rd_u64(p); return true;
    case SL_GGUF_TYPE_UINT64: {
        uint64_t v = rd_u64(p);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    }
    return false;
}

static bool is_int_type(uint32_t t)
{
    return t <= SL_GGUF_TYPE_INT32 || t == SL_GGUF_TYPE_BOOL || t == SL_GGUF_TYPE_UINT64 ||
           t == SL_GGUF_TYPE_INT64;
}

static const kv_entry *find(const sl_gguf *g, const char *key)
{
    int64_t i = sl_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

sl_status sl_gguf_get_int(const sl_gguf *g, const char *key, int64_t *out)
{
    const kv_entry *e = find(g, key);
    if (!e || !is_int_type(e->type))
        return SL_EINVAL;
    int64_t v;
    if (!read_int(e->type, e->value, &v))
        return SL_ERANGE;
    *out = v;
    return SL_OK;
}

sl_status sl_gguf_get_float(const sl_gguf *g, const char *key, double *out)
{
    const kv_entry *e = find(g, key);
    if (!e)
        return SL_EINVAL;
    if (e->type == SL_GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, e->value, 4);
        *out = f;
        return SL_OK;
    }
    if (e->type == SL_GGUF_TYPE_FLOAT64) {
        memcpy(out, e->value, 8);
        return SL_OK;
    }
    return SL_EINVAL;
}

sl_status sl_gguf_get_bool(const sl_gguf *g, const char *key, bool *out)
{
    const kv_entry *e = find(g, key);
    if (!e || e->type != SL_GGUF_TYPE_BOOL)
        return SL_EINVAL;
    *out = e->value[0] != 0;
    return SL_OK;
}

sl_status sl_gguf_get_str(const sl_gguf *g, const char *key, sl_gguf_str *out)
{
    const kv_entry *e = find(g, key);
    if (!e || e->type != SL_GGUF_TYPE_STRING)
        return SL_EINVAL;
    out->len = rd_u64(e->value);
    out->ptr = (const char *)e->value + 8;
    return SL_OK;
}

sl_status sl_gguf_get_arr(const sl_gguf *g, const char *key, sl_gguf_arr *out)
{
    const kv_entry *e = find(g, key);
    if (!e || e->type != SL_GGUF_TYPE_ARRAY)
        return SL_EINVAL;
    *out = e->arr;
    return SL_OK;
}

sl_status sl_gguf_arr_int(const sl_gguf_arr *a, uint64_t i, int64_t *out)
{
    if (i >= a->n)
        return SL_ERANGE;
    if (!is_int_type(a->type))
        return SL_EINVAL;
    int64_t v;
    if (!read_int(a->type, (const uint8_t *)a->data + i * sl_gguf_value_size(a->type), &v))
        return SL_ERANGE;
    *out = v;
    return SL_OK;
}

sl_status sl_gguf_arr_float(const sl_gguf_arr *a, uint64_t i, double *out)
{
    if (i >= a->n)
        return SL_ERANGE;
    const uint8_t *p = (const uint8_t *)a->data;
    if (a->type == SL_GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        *out = f;
        return SL_OK;
    }
    if (a->type == SL_GGUF_TYPE_FLOAT64) {
        memcpy(out, p + i * 8, 8);
        return SL_OK;
    }
    return SL_EINVAL;
}

sl_status sl_gguf_arr_str(const sl_gguf_arr *a, uint64_t i, sl_gguf_str *out)
{
    if (i >= a->n)
        return SL_ERANGE;
    if (a->type != SL_GGUF_TYPE_STRING || !a->_str_offsets)
        return SL_EINVAL;
    const uint8_t *p = (const uint8_t *)a->data + a->_str_offsets[i];
    out->len = rd_u64(p);
    out->ptr = (const char *)p + 8;
    return SL_OK;
}

const sl_gguf_tensor *sl_gguf_tensor_at(const sl_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sl_gguf_tensor *sl_gguf_find_tensor(const sl_gguf *g, const char *name)
{
    int64_t i = hash_find(g, g->tensor_hash, g->tensor_hash_mask, tensor_name, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
