/* frontend/api_tokenize.c: the /tokenize and /detokenize bodies. Runs in the
 * front ends. Trade-off: tokenization is sized by a first call into a stack
 * buffer and repeated into a heap buffer only when the text is long, so short
 * requests allocate nothing for ids. */
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_json.h"
#include "frontend/api_request.h"
#include "frontend/api_tokenize.h"

static bool oom(sl_api_error *err)
{
    sl_api_error_set(err, SL_API_ERR_INTERNAL, NULL, "out of memory");
    return false;
}

/* Refuses an answer of `bytes` (at least) past max_out (0 = no limit). */
static bool too_large(uint64_t bytes, uint64_t max_out, sl_api_error *err)
{
    if (max_out == 0 || bytes <= max_out)
        return false;
    sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, NULL,
                     "The response would be at least %llu bytes; this server sends at most %llu (--max-response).",
                     (unsigned long long)bytes, (unsigned long long)max_out);
    err->code = "response_too_large";
    return true;
}

/* Bytes of s[0..n) as a JSON string body (jansson: \uXXXX for control
 * characters, a backslash before '"' and '\\'; UTF-8 passes as is): an upper bound. */
static uint64_t json_string_bytes(const char *s, size_t n)
{
    uint64_t b = 2;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        b += c < 0x20 ? 6 : (c == '"' || c == '\\') ? 2 : 1;
    }
    return b;
}

static unsigned digits(int32_t v)
{
    unsigned d = 1;
    for (uint32_t u = (uint32_t)(v < 0 ? -(int64_t)v : v); u >= 10; u /= 10)
        d++;
    return d + (v < 0);
}

static bool get_flag(const json_t *o, const char *key, bool *out, sl_api_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, key, "Invalid type for '%s': expected a boolean", key);
        err->code = "invalid_type";
        return false;
    }
    *out = json_is_true(v);
    return true;
}

sl_status sl_api_tokenize_parse(sl_api_tokenize_req *r, const char *body, size_t len,
                                sl_api_error *err)
{
    memset(r, 0, sizeof *r);
    r->parse_special = true;
    r->_root = sl_api_json_parse_body(body, len, err);
    if (!r->_root) return SL_EINVAL;
    json_t *c = json_object_get(r->_root, "content");
    if (!json_is_string(c)) {
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, "content",
                         c ? "Invalid type for 'content': expected a string"
                           : "'content' is a required property");
        err->code = c ? "invalid_type" : "invalid_value";
        sl_api_tokenize_fini(r);
        return SL_EINVAL;
    }
    r->content = json_string_value(c);
    r->content_len = json_string_length(c);
    if (!get_flag(r->_root, "add_special", &r->add_special, err) ||
        !get_flag(r->_root, "parse_special", &r->parse_special, err) ||
        !get_flag(r->_root, "with_pieces", &r->with_pieces, err)) {
        sl_api_tokenize_fini(r);
        return SL_EINVAL;
    }
    return SL_OK;
}

void sl_api_tokenize_fini(sl_api_tokenize_req *r)
{
    json_decref(r->_root);
    memset(r, 0, sizeof *r);
}

static int64_t run_tokenizer(const sl_tokenizer *t, const sl_api_tokenize_req *r,
                             int32_t *out, size_t cap)
{
    if (r->parse_special)
        return sl_tokenize_special(t, r->content, r->content_len, r->add_special, out, cap);
    /* Plain text with BOS/EOS: the whole content is an untrusted range. */
    sl_tok_span all = {0, r->content_len};
    return sl_tokenize_rendered(t, r->content, r->content_len, &all, 1, r->add_special, out, cap);
}

/* A piece as a string when it is valid UTF-8 alone, else as its bytes. */
static json_t *piece_json(const sl_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    sl_detok d;
    sl_detok_init(&d);
    d._started = true;   /* a piece keeps its leading space (see api_response.c) */
    size_t n = sl_detok_push(&d, t, id, true, buf, cap);
    if (n > cap) n = cap;
    size_t held = d._n_held;
    if (held > cap - n) held = cap - n;
    memcpy(buf + n, d._held, held);
    n += held;
    if (sl_api_utf8_valid_prefix(buf, n) == n) return json_stringn(buf, n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

sl_status sl_api_tokenize_respond(const sl_tokenizer *t, const sl_api_tokenize_req *r, uint64_t max_out,
                                  char **out, sl_api_error *err)
{
    *out = NULL;
    int32_t stack[256];
    int32_t *ids = stack;
    int64_t n = run_tokenizer(t, r, stack, 256);
    if (n > 256) {
        ids = sl_malloc((size_t)n * sizeof *ids);
        if (!ids) return oom(err), SL_ENOMEM;
        n = run_tokenizer(t, r, ids, (size_t)n);
    }
    if (n < 0) {
        if (ids != stack) free(ids);
        sl_api_error_set(err, n == SL_ENOMEM ? SL_API_ERR_INTERNAL : SL_API_ERR_INVALID_REQUEST,
                         "content", "tokenization failed: %s", sl_status_name((sl_status)n));
        return n == SL_ENOMEM ? SL_ENOMEM : SL_EINVAL;
    }
    size_t cap = sl_detok_max_piece(t) + 64;
    /* The answer's size before it is built (a JSON tree costs far more than
     * its text): exact for bare ids; with pieces, each piece as its bytes
     * (up to 4 per byte), at most. */
    uint64_t bound = 14;
    for (int64_t i = 0; i < n; i++) {
        bound += digits(ids[i]) + 1;
        if (r->with_pieces) {
            size_t len = 0;
            sl_tokenizer_text(t, ids[i], &len);
            bound += 20 + 4 * (uint64_t)(len + 8);
        }
    }
    if (too_large(bound, max_out, err)) {
        if (ids != stack) free(ids);
        return SL_ERANGE;
    }
    char *piece = r->with_pieces ? sl_malloc(cap) : NULL;
    json_t *arr = json_array();
    json_t *root = json_pack("{s:o}", "tokens", arr);
    bool ok = root && (!r->with_pieces || piece);
    for (int64_t i = 0; ok && i < n; i++) {
        json_t *e = r->with_pieces
            ? json_pack("{s:i,s:o}", "id", (int)ids[i], "piece", piece_json(t, ids[i], piece, cap))
            : json_integer(ids[i]);
        ok = e && json_array_append_new(arr, e) == 0;
    }
    if (ok) *out = sl_api_json_dump(root);
    json_decref(root);
    free(piece);
    if (ids != stack) free(ids);
    if (!*out) return oom(err), SL_ENOMEM;
    return SL_OK;
}

sl_status sl_api_detokenize_parse(sl_api_detokenize_req *r, const char *body, size_t len,
                                  int32_t n_vocab, sl_api_error *err)
{
    memset(r, 0, sizeof *r);
    json_t *root = sl_api_json_parse_body(body, len, err);
    if (!root) return SL_EINVAL;
    json_t *a = json_object_get(root, "tokens");
    sl_status rc = SL_OK;
    if (!json_is_array(a)) {
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, "tokens",
                         a ? "Invalid type for 'tokens': expected an array of token ids"
                           : "'tokens' is a required property");
        err->code = a ? "invalid_type" : "invalid_value";
        rc = SL_EINVAL;
        goto done;
    }
    size_t n = json_array_size(a);
    r->tokens = sl_malloc((n ? n : 1) * sizeof *r->tokens);
    if (!r->tokens) { oom(err); rc = SL_ENOMEM; goto done; }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) {
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, "tokens",
                             "tokens[%zu] is not a token id in 0..%d", i, n_vocab - 1);
            err->code = "invalid_value";
            rc = SL_EINVAL;
            goto done;
        }
        r->tokens[i] = (int32_t)json_integer_value(v);
    }
    r->n_tokens = n;
done:
    json_decref(root);
    if (rc < 0) sl_api_detokenize_fini(r);
    return rc;
}

void sl_api_detokenize_fini(sl_api_detokenize_req *r)
{
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

sl_status sl_api_detokenize_respond(const sl_tokenizer *t, const sl_api_detokenize_req *r, uint64_t max_out,
                                    char **out, sl_api_error *err)
{
    *out = NULL;
    /* A few ids can stand for a lot of text (a token of 128 spaces): the
     * size is known before any of it is made, and checked again escaped. */
    size_t need = sl_detokenize(t, r->tokens, r->n_tokens, true, NULL, 0);
    if (too_large((uint64_t)need + 14, max_out, err)) return SL_ERANGE;
    char *text = sl_malloc(need + 1);
    if (!text) return oom(err), SL_ENOMEM;
    sl_detokenize(t, r->tokens, r->n_tokens, true, text, need);
    if (too_large(json_string_bytes(text, need) + 12, max_out, err)) {
        free(text);
        return SL_ERANGE;
    }
    /* The detokenizer emits valid UTF-8 (U+FFFD for broken bytes); lossy
     * conversion is only a guard. */
    json_t *root = json_pack("{s:o}", "content", sl_api_json_string_lossy(text, need));
    free(text);
    if (root) *out = sl_api_json_dump(root);
    json_decref(root);
    if (!*out) return oom(err), SL_ENOMEM;
    return SL_OK;
}
