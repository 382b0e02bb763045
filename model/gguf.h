/* model/gguf.h: GGUF v2/v3 files: a validating reader over mmap, and a
 * streaming writer.
 * Where:     model code, tools (mkmodel), tests. Both front ends and the
 *            worker open model files through this reader.
 * Safety:    sl_gguf_open() checks every count, length, offset, type and
 *            shape against the file size before anything is used; after it
 *            succeeds, every pointer handed out lies inside the mapping.
 *            A malformed file is one error line naming the file, the offset
 *            or key, and what is wrong. Never a read outside the mapping.
 * Ownership: strings and tensor data point into the mapping and live until
 *            sl_gguf_close(). The reader is read-only and may be shared by
 *            threads once opened.
 * Errors:    SL_OK; SL_EFORMAT (malformed), SL_EIO (open/mmap), SL_ENOMEM;
 *            getters return SL_EINVAL for a missing key or a wrong type. */
#ifndef SL_GGUF_H
#define SL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/status.h"

/* GGUF metadata value types (the file's ids). */
enum sl_gguf_type {
    SL_GGUF_TYPE_UINT8   = 0,
    SL_GGUF_TYPE_INT8    = 1,
    SL_GGUF_TYPE_UINT16  = 2,
    SL_GGUF_TYPE_INT16   = 3,
    SL_GGUF_TYPE_UINT32  = 4,
    SL_GGUF_TYPE_INT32   = 5,
    SL_GGUF_TYPE_FLOAT32 = 6,
    SL_GGUF_TYPE_BOOL    = 7,
    SL_GGUF_TYPE_STRING  = 8,
    SL_GGUF_TYPE_ARRAY   = 9,
    SL_GGUF_TYPE_UINT64  = 10,
    SL_GGUF_TYPE_INT64   = 11,
    SL_GGUF_TYPE_FLOAT64 = 12,
    SL_GGUF_TYPE_COUNT   = 13,
};

#define SL_GGUF_MAX_DIMS 4
#define SL_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapping: NOT NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t len;
} sl_gguf_str;

/* An array value. For fixed-size element types `data` points at `n`
 * little-endian elements (possibly unaligned: read with memcpy). For string
 * arrays use sl_gguf_arr_str(). Nested arrays are refused at open. */
typedef struct {
    uint32_t type;        /* element type, never SL_GGUF_TYPE_ARRAY */
    uint64_t n;           /* element count */
    const void *data;     /* first element */
    const uint64_t *_str_offsets; /* string arrays: offset of each string's length field from data */
} sl_gguf_arr;

typedef struct {
    sl_gguf_str name;
    uint32_t n_dims;                  /* 1..SL_GGUF_MAX_DIMS */
    uint64_t ne[SL_GGUF_MAX_DIMS];    /* elements per dim, ne[0] fastest; unused dims are 1 */
    uint32_t type;                    /* enum sl_ggml_type; any type GGUF defines */
    uint64_t offset;                  /* from the start of the data section */
    const void *data;                 /* inside the mapping */
    uint64_t nbytes;
} sl_gguf_tensor;

typedef struct sl_gguf sl_gguf;   /* opaque */

/* Bytes one value of a fixed-size type takes in a file; 0 for STRING, ARRAY
 * and unknown types. */
uint32_t sl_gguf_value_size(uint32_t type);

/* Opens and validates `path`. On success *out is the reader; on failure *out
 * is NULL, `err` holds one line ("FILE: offset N: what"), and the status is
 * negative. Checks include: magic, version (2 or 3), counts vs file size,
 * every string and array inside the file, value types, duplicate keys and
 * tensor names, alignment (a power of two), tensor dims/shape products, known
 * tensor types, row sizes a multiple of the block size, data inside the file,
 * and no two tensors overlapping. */
sl_status sl_gguf_open(const char *path, sl_gguf **out, char err[SL_ERR_LEN]);

/* Same, over a caller-owned buffer (for fuzzing and tests); the buffer must
 * outlive the reader. */
sl_status sl_gguf_open_memory(const void *buf, size_t len, const char *name,
                              sl_gguf **out, char err[SL_ERR_LEN]);

/* Unmaps and frees. NULL is a no-op. */
void sl_gguf_close(sl_gguf *g);

uint32_t sl_gguf_version(const sl_gguf *g);
uint32_t sl_gguf_alignment(const sl_gguf *g);
const char *sl_gguf_path(const sl_gguf *g);
size_t sl_gguf_file_size(const sl_gguf *g);

/* ---- metadata ---- */

uint64_t sl_gguf_n_kv(const sl_gguf *g);
/* Index of `key`, or -1 if absent. */
int64_t sl_gguf_find_key(const sl_gguf *g, const char *key);
sl_gguf_str sl_gguf_kv_key(const sl_gguf *g, uint64_t idx);
uint32_t sl_gguf_kv_type(const sl_gguf *g, uint64_t idx);

/* Typed getters by key. Each returns SL_OK and fills *out, or SL_EINVAL if the
 * key is absent or holds another kind of value (then *out is untouched, so a
 * caller may preset a default). get_int accepts any integer type (and bool)
 * and fails with SL_ERANGE if the value does not fit int64; get_float accepts
 * FLOAT32 and FLOAT64. */
sl_status sl_gguf_get_int(const sl_gguf *g, const char *key, int64_t *out);
sl_status sl_gguf_get_float(const sl_gguf *g, const char *key, double *out);
sl_status sl_gguf_get_bool(const sl_gguf *g, const char *key, bool *out);
sl_status sl_gguf_get_str(const sl_gguf *g, const char *key, sl_gguf_str *out);
sl_status sl_gguf_get_arr(const sl_gguf *g, const char *key, sl_gguf_arr *out);

/* Element i of an array, converted; SL_ERANGE past the end, SL_EINVAL on a
 * wrong element type (get_int: any integer type; get_float: F32/F64). */
sl_status sl_gguf_arr_int(const sl_gguf_arr *a, uint64_t i, int64_t *out);
sl_status sl_gguf_arr_float(const sl_gguf_arr *a, uint64_t i, double *out);
sl_status sl_gguf_arr_str(const sl_gguf_arr *a, uint64_t i, sl_gguf_str *out);

/* Convenience: true if `s` equals the NUL-terminated `cstr`. */
bool sl_gguf_str_eq(sl_gguf_str s, const char *cstr);

/* ---- tensors ---- */

uint64_t sl_gguf_n_tensors(const sl_gguf *g);
const sl_gguf_tensor *sl_gguf_tensor_at(const sl_gguf *g, uint64_t i);
/* The tensor named `name`, or NULL. */
const sl_gguf_tensor *sl_gguf_find_tensor(const sl_gguf *g, const char *name);

/* ---- writer ----
 * Streaming: declare every key/value and tensor, then sl_gguf_writer_begin()
 * writes the header and tensor infos; then each tensor's bytes are written in
 * declaration order with sl_gguf_writer_write_tensor(), so a large model never
 * needs to be in memory at once. Always writes GGUF v3, little-endian. */
typedef struct sl_gguf_writer sl_gguf_writer;

sl_gguf_writer *sl_gguf_writer_create(void);
void sl_gguf_writer_destroy(sl_gguf_writer *w);   /* closes the file if open */

/* Key/values are copied. Setting a key twice replaces its value. */
sl_status sl_gguf_writer_set_u32(sl_gguf_writer *w, const char *key, uint32_t v);
sl_status sl_gguf_writer_set_i32(sl_gguf_writer *w, const char *key, int32_t v);
sl_status sl_gguf_writer_set_u64(sl_gguf_writer *w, const char *key, uint64_t v);
sl_status sl_gguf_writer_set_f32(sl_gguf_writer *w, const char *key, float v);
sl_status sl_gguf_writer_set_bool(sl_gguf_writer *w, const char *key, bool v);
sl_status sl_gguf_writer_set_str(sl_gguf_writer *w, const char *key, const char *v);
/* A string of explicit length (may hold NULs or invalid UTF-8, for tests). */
sl_status sl_gguf_writer_set_strn(sl_gguf_writer *w, const char *key, const char *v, size_t len);
/* An array of `n` fixed-size elements of `type` (host little-endian values). */
sl_status sl_gguf_writer_set_arr(sl_gguf_writer *w, const char *key, uint32_t type,
                                 const void *data, uint64_t n);
/* An array of `n` strings; lens may be NULL for NUL-terminated strings. */
sl_status sl_gguf_writer_set_arr_str(sl_gguf_writer *w, const char *key,
                                     const char *const *strs, const size_t *lens, uint64_t n);

/* Element count of the array value set under `key`, or -1 if `key` holds no
 * array. */
int64_t sl_gguf_writer_arr_len(const sl_gguf_writer *w, const char *key);

/* Declares a tensor of `type` and shape ne[0..n_dims-1]; returns its index
 * (declaration order) or a negative status. */
int64_t sl_gguf_writer_add_tensor(sl_gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne);
/* Bytes tensor i will take (from its type and shape). */
uint64_t sl_gguf_writer_tensor_bytes(const sl_gguf_writer *w, uint64_t i);

/* Creates `path` and writes header, key/values and tensor infos. */
sl_status sl_gguf_writer_begin(sl_gguf_writer *w, const char *path, char err[SL_ERR_LEN]);
/* Writes tensor i's data (exactly sl_gguf_writer_tensor_bytes(w, i) bytes);
 * tensors must be written in declaration order. */
sl_status sl_gguf_writer_write_tensor(sl_gguf_writer *w, uint64_t i, const void *data,
                                      char err[SL_ERR_LEN]);
/* Flushes and closes; fails if a tensor was not written. */
sl_status sl_gguf_writer_finish(sl_gguf_writer *w, char err[SL_ERR_LEN]);

#endif
