/* tests/unit/model/gguf_test.c: the GGUF reader on crafted files, good and
 * bad (every bad one must fail with one precise line, never crash), and the
 * writer round trip. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ggml_types.h"
#include "model/gguf.h"

/* A tiny byte builder for hand-made files. */
typedef struct { unsigned char b[4096]; size_t n; } buf;
static void put(buf *b, const void *p, size_t n) { memcpy(b->b + b->n, p, n); b->n += n; }
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void header(buf *b, uint32_t version, uint64_t nt, uint64_t nkv)
{
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, nt);
    u64(b, nkv);
}
static void align32(buf *b) { while (b->n % 32) b->b[b->n++] = 0; }

static sl_status open_buf(buf *b, char *err)
{
    sl_gguf *g = NULL;
    sl_status rc = sl_gguf_open_memory(b->b, b->n, "t.gguf", &g, err);
    if (rc == SL_OK)
        cr_assert_not_null(g);
    else
        cr_assert_null(g);
    sl_gguf_close(g);
    return rc;
}

static void expect_bad(buf *b, const char *needle)
{
    char err[SL_ERR_LEN];
    sl_status rc = open_buf(b, err);
    cr_assert_lt(rc, 0, "expected failure containing '%s'", needle);
    cr_assert(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
    cr_assert(strncmp(err, "t.gguf: ", 8) == 0, "error '%s' does not name the file", err);
}

Test(gguf, reads_every_value_type)
{
    buf b;
    header(&b, 3, 0, 8);
    str(&b, "a.u8"); u32(&b, SL_GGUF_TYPE_UINT8); b.b[b.n++] = 200;
    str(&b, "a.i16"); u32(&b, SL_GGUF_TYPE_INT16); int16_t i16 = -5; put(&b, &i16, 2);
    str(&b, "a.f32"); u32(&b, SL_GGUF_TYPE_FLOAT32); float f = 0.5f; put(&b, &f, 4);
    str(&b, "a.bool"); u32(&b, SL_GGUF_TYPE_BOOL); b.b[b.n++] = 1;
    str(&b, "a.str"); u32(&b, SL_GGUF_TYPE_STRING); str(&b, "hello");
    str(&b, "a.u64"); u32(&b, SL_GGUF_TYPE_UINT64); u64(&b, 1ull << 40);
    str(&b, "a.arr"); u32(&b, SL_GGUF_TYPE_ARRAY); u32(&b, SL_GGUF_TYPE_INT32); u64(&b, 3);
    u32(&b, 7); u32(&b, (uint32_t)-8); u32(&b, 9);
    str(&b, "a.strs"); u32(&b, SL_GGUF_TYPE_ARRAY); u32(&b, SL_GGUF_TYPE_STRING); u64(&b, 2);
    str(&b, "x"); str(&b, "yz");

    char err[SL_ERR_LEN];
    sl_gguf *g;
    cr_assert_eq(sl_gguf_open_memory(b.b, b.n, "t.gguf", &g, err), SL_OK, "%s", err);
    int64_t v; double d; bool bo; sl_gguf_str s; sl_gguf_arr a;
    cr_assert_eq(sl_gguf_get_int(g, "a.u8", &v), SL_OK); cr_assert_eq(v, 200);
    cr_assert_eq(sl_gguf_get_int(g, "a.i16", &v), SL_OK); cr_assert_eq(v, -5);
    cr_assert_eq(sl_gguf_get_float(g, "a.f32", &d), SL_OK); cr_assert_eq(d, 0.5);
    cr_assert_eq(sl_gguf_get_bool(g, "a.bool", &bo), SL_OK); cr_assert(bo);
    cr_assert_eq(sl_gguf_get_str(g, "a.str", &s), SL_OK); cr_assert(sl_gguf_str_eq(s, "hello"));
    cr_assert_eq(sl_gguf_get_int(g, "a.u64", &v), SL_OK); cr_assert_eq(v, 1ll << 40);
    cr_assert_eq(sl_gguf_get_arr(g, "a.arr", &a), SL_OK); cr_assert_eq(a.n, 3);
    cr_assert_eq(sl_gguf_arr_int(&a, 1, &v), SL_OK); cr_assert_eq(v, -8);
    cr_assert_eq(sl_gguf_arr_int(&a, 3, &v), SL_ERANGE);
    cr_assert_eq(sl_gguf_get_arr(g, "a.strs", &a), SL_OK);
    cr_assert_eq(sl_gguf_arr_str(&a, 1, &s), SL_OK); cr_assert(sl_gguf_str_eq(s, "yz"));
    /* wrong kinds and missing keys leave the output untouched */
    v = 42;
    cr_assert_eq(sl_gguf_get_int(g, "a.str", &v), SL_EINVAL); cr_assert_eq(v, 42);
    cr_assert_eq(sl_gguf_get_int(g, "nope", &v), SL_EINVAL);
    cr_assert_eq(sl_gguf_get_float(g, "a.u8", &d), SL_EINVAL);
    cr_assert_eq(sl_gguf_find_key(g, "a.bool"), 3);
    sl_gguf_close(g);
}

static void one_tensor(buf *b, uint32_t type, uint64_t ne0, uint64_t ne1, uint64_t offset)
{
    str(b, "w"); u32(b, 2); u64(b, ne0); u64(b, ne1); u32(b, type); u64(b, offset);
}

Test(gguf, reads_tensors)
{
    buf b;
    header(&b, 3, 2, 0);
    one_tensor(&b, SL_GGML_TYPE_F32, 4, 2, 0);
    str(&b, "q"); u32(&b, 1); u64(&b, 32); u32(&b, SL_GGML_TYPE_Q8_0); u64(&b, 32);
    align32(&b);
    size_t data = b.n;
    for (int i = 0; i < 8; i++) { float f = (float)i; put(&b, &f, 4); }
    align32(&b);
    memset(b.b + b.n, 0, 34); b.n += 34;
    char err[SL_ERR_LEN];
    sl_gguf *g;
    cr_assert_eq(sl_gguf_open_memory(b.b, b.n, "t.gguf", &g, err), SL_OK, "%s", err);
    const sl_gguf_tensor *t = sl_gguf_find_tensor(g, "w");
    cr_assert_not_null(t);
    cr_assert_eq(t->nbytes, 32);
    cr_assert_eq((const unsigned char *)t->data, b.b + data);
    cr_assert_eq(((const float *)t->data)[5], 5.0f);
    t = sl_gguf_find_tensor(g, "q");
    cr_assert_eq(t->nbytes, 34);
    cr_assert_null(sl_gguf_find_tensor(g, "nope"));
    sl_gguf_close(g);
}

Test(gguf, version_2_accepted) { buf b; header(&b, 2, 0, 0); char e[SL_ERR_LEN]; cr_assert_eq(open_buf(&b, e), SL_OK, "%s", e); }
Test(gguf, bad_magic) { buf b; header(&b, 3, 0, 0); b.b[0] = 'X'; expect_bad(&b, "bad magic"); }
Test(gguf, version_1_refused) { buf b; header(&b, 1, 0, 0); expect_bad(&b, "unsupported GGUF version 1"); }
Test(gguf, version_4_refused) { buf b; header(&b, 4, 0, 0); expect_bad(&b, "unsupported GGUF version 4"); }
Test(gguf, truncated_header) { buf b; header(&b, 3, 0, 0); b.n = 12; expect_bad(&b, "past the end"); }
Test(gguf, absurd_kv_count) { buf b; header(&b, 3, 0, 1ull << 60); expect_bad(&b, "key/value count"); }
Test(gguf, absurd_tensor_count) { buf b; header(&b, 3, 1ull << 62, 0); expect_bad(&b, "tensor count"); }

Test(gguf, string_length_past_end)
{
    buf b; header(&b, 3, 0, 1);
    str(&b, "k"); u32(&b, SL_GGUF_TYPE_STRING); u64(&b, 1000);
    expect_bad(&b, "past the end");
}

Test(gguf, key_length_past_end)
{
    buf b; header(&b, 3, 0, 1); u64(&b, ~0ull); u64(&b, 0); expect_bad(&b, "past the end");
}

Test(gguf, unknown_value_type)
{
    buf b; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, 99); u32(&b, 0);
    expect_bad(&b, "unknown value type 99");
}

Test(gguf, nested_array_refused)
{
    buf b; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, SL_GGUF_TYPE_ARRAY);
    u32(&b, SL_GGUF_TYPE_ARRAY); u64(&b, 1);
    expect_bad(&b, "nested array");
}

Test(gguf, huge_array_refused)
{
    buf b; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, SL_GGUF_TYPE_ARRAY);
    u32(&b, SL_GGUF_TYPE_UINT32); u64(&b, 1ull << 61);
    expect_bad(&b, "runs past the end");
}

Test(gguf, huge_string_array_refused)
{
    buf b; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, SL_GGUF_TYPE_ARRAY);
    u32(&b, SL_GGUF_TYPE_STRING); u64(&b, 1ull << 40);
    expect_bad(&b, "cannot fit");
}

Test(gguf, bad_bool)
{
    buf b; header(&b, 3, 0, 1); str(&b, "k"); u32(&b, SL_GGUF_TYPE_BOOL); b.b[b.n++] = 7;
    expect_bad(&b, "bool value 7");
}

Test(gguf, duplicate_key)
{
    buf b; header(&b, 3, 0, 2);
    str(&b, "k"); u32(&b, SL_GGUF_TYPE_UINT8); b.b[b.n++] = 1;
    str(&b, "k"); u32(&b, SL_GGUF_TYPE_UINT8); b.b[b.n++] = 2;
    expect_bad(&b, "duplicate key 'k'");
}

Test(gguf, empty_key)
{
    buf b; header(&b, 3, 0, 1); str(&b, ""); u32(&b, SL_GGUF_TYPE_UINT8); b.b[b.n++] = 1;
    expect_bad(&b, "invalid name");
}

Test(gguf, bad_alignment)
{
    buf b; header(&b, 3, 0, 1); str(&b, "general.alignment"); u32(&b, SL_GGUF_TYPE_UINT32); u32(&b, 48);
    expect_bad(&b, "not a power of two");
}

Test(gguf, alignment_wrong_type)
{
    buf b; header(&b, 3, 0, 1); str(&b, "general.alignment"); u32(&b, SL_GGUF_TYPE_UINT64); u64(&b, 32);
    expect_bad(&b, "expected uint32");
}

Test(gguf, unknown_tensor_type)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, 4, 32, 1, 0); align32(&b); b.n += 64;
    expect_bad(&b, "unknown type id 4");
}

Test(gguf, row_not_multiple_of_block)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, SL_GGML_TYPE_Q4_K, 100, 1, 0); align32(&b); b.n += 256;
    expect_bad(&b, "not a multiple of Q4_K");
}

Test(gguf, too_many_dims)
{
    buf b; header(&b, 3, 1, 0); str(&b, "w"); u32(&b, 5); b.n += 64;
    expect_bad(&b, "5 dimensions");
}

Test(gguf, zero_dim)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, SL_GGML_TYPE_F32, 0, 1, 0); align32(&b);
    expect_bad(&b, "invalid shape");
}

Test(gguf, shape_overflow)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, SL_GGML_TYPE_F32, 1ull << 40, 1ull << 40, 0); align32(&b);
    expect_bad(&b, "invalid shape");
}

Test(gguf, tensor_outside_file)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, SL_GGML_TYPE_F32, 64, 64, 0); align32(&b); b.n += 32;
    expect_bad(&b, "lies outside the file");
}

Test(gguf, tensor_offset_outside_file)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, SL_GGML_TYPE_F32, 8, 1, 1ull << 50); align32(&b); b.n += 32;
    expect_bad(&b, "lies outside the file");
}

Test(gguf, misaligned_offset)
{
    buf b; header(&b, 3, 1, 0); one_tensor(&b, SL_GGML_TYPE_F32, 8, 1, 4); align32(&b); b.n += 64;
    expect_bad(&b, "not a multiple of the alignment");
}

Test(gguf, overlapping_tensors)
{
    buf b; header(&b, 3, 2, 0);
    one_tensor(&b, SL_GGML_TYPE_F32, 16, 1, 0);
    str(&b, "v"); u32(&b, 1); u64(&b, 16); u32(&b, SL_GGML_TYPE_F32); u64(&b, 32);
    align32(&b); b.n += 128;
    expect_bad(&b, "overlap");
}

Test(gguf, duplicate_tensor_name)
{
    buf b; header(&b, 3, 2, 0);
    one_tensor(&b, SL_GGML_TYPE_F32, 8, 1, 0);
    one_tensor(&b, SL_GGML_TYPE_F32, 8, 1, 32);
    align32(&b); b.n += 64;
    expect_bad(&b, "duplicate tensor name 'w'");
}

Test(gguf, long_tensor_name)
{
    buf b; header(&b, 3, 1, 0);
    char name[70]; memset(name, 'a', 69); name[69] = 0;
    str(&b, name); u32(&b, 1); u64(&b, 8); u32(&b, 0); u64(&b, 0); align32(&b); b.n += 32;
    expect_bad(&b, "invalid name");
}

Test(gguf, every_truncation_fails_cleanly)
{
    /* a valid file cut at every length must fail (or, at full length, open) */
    buf b; header(&b, 3, 1, 2);
    str(&b, "general.architecture"); u32(&b, SL_GGUF_TYPE_STRING); str(&b, "llama");
    str(&b, "toks"); u32(&b, SL_GGUF_TYPE_ARRAY); u32(&b, SL_GGUF_TYPE_STRING); u64(&b, 2); str(&b, "a"); str(&b, "b");
    one_tensor(&b, SL_GGML_TYPE_F32, 8, 1, 0); align32(&b); b.n += 32;
    size_t full = b.n;
    char err[SL_ERR_LEN];
    for (size_t n = 0; n < full; n++) {
        sl_gguf *g;
        cr_assert_lt(sl_gguf_open_memory(b.b, n, "t.gguf", &g, err), 0, "length %zu opened", n);
        cr_assert_null(g);
        cr_assert_gt(strlen(err), 0);
    }
    b.n = full;
    cr_assert_eq(open_buf(&b, err), SL_OK, "%s", err);
}

Test(gguf, missing_file_is_clear)
{
    char err[SL_ERR_LEN];
    sl_gguf *g;
    cr_assert_eq(sl_gguf_open("/nonexistent/x.gguf", &g, err), SL_EIO);
    cr_assert(strstr(err, "/nonexistent/x.gguf: cannot open") != NULL, "%s", err);
}

Test(gguf, writer_round_trip)
{
    char path[] = "/tmp/sl_gguf_test_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    sl_gguf_writer *w = sl_gguf_writer_create();
    cr_assert_eq(sl_gguf_writer_set_str(w, "general.architecture", "llama"), SL_OK);
    cr_assert_eq(sl_gguf_writer_set_u32(w, "llama.block_count", 2), SL_OK);
    cr_assert_eq(sl_gguf_writer_set_f32(w, "eps", 1e-5f), SL_OK);
    cr_assert_eq(sl_gguf_writer_set_u32(w, "llama.block_count", 3), SL_OK); /* replaces */
    const char *toks[] = {"<s>", "hello", ""};
    cr_assert_eq(sl_gguf_writer_set_arr_str(w, "toks", toks, NULL, 3), SL_OK);
    float scores[3] = {0, -1, -2};
    cr_assert_eq(sl_gguf_writer_set_arr(w, "scores", SL_GGUF_TYPE_FLOAT32, scores, 3), SL_OK);
    uint64_t ne[2] = {5, 3};
    cr_assert_eq(sl_gguf_writer_add_tensor(w, "a", SL_GGML_TYPE_F32, 2, ne), 0);
    uint64_t ne2[1] = {64};
    cr_assert_eq(sl_gguf_writer_add_tensor(w, "b", SL_GGML_TYPE_Q8_0, 1, ne2), 1);
    cr_assert_eq(sl_gguf_writer_tensor_bytes(w, 1), 68);
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_gguf_writer_begin(w, path, err), SL_OK, "%s", err);
    float a[15];
    for (int i = 0; i < 15; i++) a[i] = (float)i;
    unsigned char q[68];
    memset(q, 0x11, sizeof q);
    cr_assert_lt(sl_gguf_writer_write_tensor(w, 1, q, err), 0);   /* out of order */
    cr_assert_eq(sl_gguf_writer_write_tensor(w, 0, a, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_write_tensor(w, 1, q, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_finish(w, err), SL_OK, "%s", err);
    sl_gguf_writer_destroy(w);

    sl_gguf *g;
    cr_assert_eq(sl_gguf_open(path, &g, err), SL_OK, "%s", err);
    int64_t v;
    cr_assert_eq(sl_gguf_get_int(g, "llama.block_count", &v), SL_OK);
    cr_assert_eq(v, 3);
    sl_gguf_arr arr;
    sl_gguf_str s;
    cr_assert_eq(sl_gguf_get_arr(g, "toks", &arr), SL_OK);
    cr_assert_eq(sl_gguf_arr_str(&arr, 2, &s), SL_OK);
    cr_assert_eq(s.len, 0);
    const sl_gguf_tensor *t = sl_gguf_find_tensor(g, "a");
    cr_assert_eq(t->ne[0], 5);
    cr_assert_eq(t->ne[1], 3);
    cr_assert_eq(((const float *)t->data)[14], 14.0f);
    t = sl_gguf_find_tensor(g, "b");
    cr_assert_eq(((const unsigned char *)t->data)[67], 0x11);
    sl_gguf_close(g);
    unlink(path);
}
