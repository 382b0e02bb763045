/* frontend/tool_calls.c: finds tool calls in generated text (streamed or
 * whole) and builds the grammar that forces one.
 * Runs in the front ends, per chat request with tools. The trade-off: the
 * parser keeps the undecided tail of the answer and re-scans it on each feed
 * instead of running a byte state machine; the tail is at most one call (or,
 * for the whole-answer formats, the answer), and one code path for streamed
 * and whole answers is what makes every split give the same result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "frontend/api_json.h"
#include "frontend/tool_calls.h"
#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "shared/alloc.h"

static const char HERMES_OPEN[] = "<tool_call>";
static const char HERMES_CLOSE[] = "</tool_call>";
static const char LLAMA3_TAG[] = "<|python_tag|>";
static const char MISTRAL_TAG[] = "[TOOL_CALLS]";
static const char MISTRAL_ARGS[] = "[ARGS]";

/* ================================================================ detection */

static const char *find_mem(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0 || hn < nn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && memcmp(h + i, n, nn) == 0)
            return h + i;
    return NULL;
}

static bool has(const char *src, size_t len, const char *lit)
{
    return find_mem(src, len, lit, strlen(lit)) != NULL;
}

/* `tools` as a name of its own, not inside tool_calls or a longer name. */
static bool reads_tools(const char *src, size_t len)
{
    for (const char *p = src, *end = src + len; (p = find_mem(p, (size_t)(end - p), "tools", 5)) != NULL; p += 5) {
        char before = p > src ? p[-1] : ' ';
        char after = p + 5 < end ? p[5] : ' ';
        bool word_b = (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') || before == '_' ||
                      (before >= '0' && before <= '9');
        bool word_a = (after >= 'a' && after <= 'z') || (after >= 'A' && after <= 'Z') || after == '_' ||
                      (after >= '0' && after <= '9');
        if (!word_b && !word_a)
            return true;
    }
    return false;
}

sl_tool_format sl_tool_format_detect(const char *src, size_t len)
{
    if (src == NULL)
        return SL_TOOL_FORMAT_NONE;
    if (has(src, len, HERMES_OPEN))
        return SL_TOOL_FORMAT_HERMES;
    if (has(src, len, MISTRAL_TAG))
        return SL_TOOL_FORMAT_MISTRAL;
    if (has(src, len, LLAMA3_TAG) || has(src, len, "ipython"))
        return SL_TOOL_FORMAT_LLAMA3;
    return reads_tools(src, len) ? SL_TOOL_FORMAT_HERMES : SL_TOOL_FORMAT_NONE;
}

const char *sl_tool_format_name(sl_tool_format f)
{
    switch (f) {
    case SL_TOOL_FORMAT_HERMES:  return "hermes";
    case SL_TOOL_FORMAT_LLAMA3:  return "llama3";
    case SL_TOOL_FORMAT_MISTRAL: return "mistral";
    default:                     return "none";
    }
}

/* ================================================================ parser state */

struct sl_tool_parser {
    sl_tool_format fmt;
    char **names;               /* the request's tool names (copies) */
    size_t n_names;
    char *buf;                  /* the undecided tail of the answer */
    size_t len, cap;
    char *ws;                   /* trailing whitespace of the content so far, held */
    size_t ws_len, ws_cap;
    bool content_seen;          /* non-whitespace content was reported */
    bool at_start;              /* nothing but whitespace has been decided yet */
    bool region;                /* LLAMA3/MISTRAL: buf from region_at on is calls, to the end */
    size_t region_at;           /* where the call text starts (after the marker) */
    bool finished;
    bool oom;                   /* an allocation failed inside jansson's parser */
    int32_t n_calls;
    sl_tool_on_event on_event;
    void *ctx;
};

static bool grow(char **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 128;
    while (c < need)
        c *= 2;
    char *p = sl_realloc(*b, c);
    if (p == NULL)
        return false;
    *b = p;
    *cap = c;
    return true;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

sl_status sl_tool_parser_create(sl_tool_format f, const json_t *tools, sl_tool_parser **out)
{
    *out = NULL;
    if (f == SL_TOOL_FORMAT_NONE)
        return SL_EINVAL;
    sl_tool_parser *p = sl_calloc(1, sizeof *p);
    if (p == NULL)
        return SL_ENOMEM;
    p->fmt = f;
    p->at_start = true;
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    p->names = n ? sl_calloc(n, sizeof *p->names) : NULL;
    if (n && p->names == NULL) {
        free(p);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"),
                                                             "name"));
        if (name == NULL)
            continue;
        size_t l = strlen(name);
        char *c = sl_malloc(l + 1);
        if (c == NULL) {
            sl_tool_parser_destroy(p);
            return SL_ENOMEM;
        }
        memcpy(c, name, l + 1);
        p->names[p->n_names++] = c;
    }
    *out = p;
    return SL_OK;
}

void sl_tool_parser_destroy(sl_tool_parser *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_names; i++)
        free(p->names[i]);
    free(p->names);
    free(p->buf);
    free(p->ws);
    free(p);
}

int32_t sl_tool_parser_n_calls(const sl_tool_parser *p)
{
    return p->n_calls;
}

static bool known(const sl_tool_parser *p, const char *name)
{
    for (size_t i = 0; i < p->n_names; i++)
        if (strcmp(p->names[i], name) == 0)
            return true;
    return false;
}

/* ================================================================ events */

/* Content: whitespace at its end is held until more content follows, so the
 * whitespace between calls never becomes a delta of its own. */
static sl_status emit_content(sl_tool_parser *p, const char *s, size_t n)
{
    size_t keep = n;
    while (keep > 0 && is_ws(s[keep - 1]))
        keep--;
    if (keep == 0) {
        if (!grow(&p->ws, &p->ws_cap, p->ws_len + n + 1))
            return SL_ENOMEM;
        memcpy(p->ws + p->ws_len, s, n);
        p->ws_len += n;
        return SL_OK;
    }
    sl_status rc = SL_OK;
    sl_tool_event ev = {.kind = SL_TOOL_EVENT_CONTENT};
    if (p->ws_len > 0) {
        if (!grow(&p->ws, &p->ws_cap, p->ws_len + keep + 1))
            return SL_ENOMEM;
        memcpy(p->ws + p->ws_len, s, keep);
        ev.text = p->ws;
        ev.len = p->ws_len + keep;
        rc = p->on_event(p->ctx, &ev);
        p->ws_len = 0;
    } else {
        ev.text = s;
        ev.len = keep;
        rc = p->on_event(p->ctx, &ev);
    }
    p->content_seen = true;
    if (rc < 0)
        return rc;
    if (!grow(&p->ws, &p->ws_cap, n - keep + 1))
        return SL_ENOMEM;
    memcpy(p->ws, s + keep, n - keep);
    p->ws_len = n - keep;
    return SL_OK;
}

static void make_id(char id[SL_TOOL_CALL_ID_LEN])
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint8_t r[24];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* No entropy yet: the clock and a counter keep ids distinct. */
        static unsigned counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)++counter << 50);
        for (size_t i = 0; i < sizeof r; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (uint8_t)(x >> 56);
        }
    }
    memcpy(id, "call_", 5);
    for (size_t i = 0; i < sizeof r; i++)
        id[5 + i] = abc[r[i] % (sizeof abc - 1)];
    id[5 + sizeof r] = '\0';
}

/* One parsed call object: {"name": known tool, "arguments"|"parameters": {...}}.
 * Returns the arguments object (borrowed from o) or NULL when it is no call. */
static json_t *call_args(const sl_tool_parser *p, json_t *o, const char **name)
{
    if (!json_is_object(o))
        return NULL;
    const char *n = json_string_value(json_object_get(o, "name"));
    if (n == NULL || !known(p, n))
        return NULL;
    json_t *a = json_object_get(o, "arguments");
    if (a == NULL)
        a = json_object_get(o, "parameters");
    if (!json_is_object(a))
        return NULL;
    *name = n;
    return a;
}

static sl_status emit_call(sl_tool_parser *p, const char *name, const json_t *args)
{
    char *a = sl_api_json_dump(args);
    if (a == NULL)
        return SL_ENOMEM;
    char id[SL_TOOL_CALL_ID_LEN];
    make_id(id);
    sl_tool_event ev = {.kind = SL_TOOL_EVENT_CALL, .index = p->n_calls, .id = id, .name = name, .arguments = a};
    p->n_calls++;
    sl_status rc = p->on_event(p->ctx, &ev);
    free(a);
    return rc;
}

/* jansson's parser, held from fault injection as in api_request.c (it
 * writes out of bounds after an allocation fails mid-parse); a real failure
 * shows in the allocator's count and marks the parser out of memory, so an
 * allocation failure is never taken for "not a call". */
static json_t *load(sl_tool_parser *p, const char *s, size_t n, size_t flags, json_error_t *je)
{
    unsigned nulls = sl_alloc_nulls();
    sl_alloc_fault_hold(true);
    json_t *o = json_loadb(s, n, flags | JSON_REJECT_DUPLICATES, je);
    sl_alloc_fault_hold(false);
    if (o == NULL && sl_alloc_nulls() != nulls)
        p->oom = true;
    return o;
}

/* ================================================================ region parsers */

/* A list of calls, each a JSON object, in s: every object must be a call, and
 * only `sep` characters and whitespace may lie between them. Reports them all
 * or, returning SL_AGAIN, none. */
typedef struct {
    json_t *objs[64];
    const char *names[64];
    json_t *args[64];
    size_t n;
} call_list;

static void call_list_fini(call_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        json_decref(l->objs[i]);
    l->n = 0;
}

static bool call_list_add(const sl_tool_parser *p, call_list *l, json_t *o)
{
    const char *name = NULL;
    json_t *a = call_args(p, o, &name);
    if (a == NULL || l->n == sizeof l->objs / sizeof l->objs[0]) {
        json_decref(o);
        return false;
    }
    l->objs[l->n] = o;
    l->names[l->n] = name;
    l->args[l->n] = a;
    l->n++;
    return true;
}

static sl_status call_list_emit(sl_tool_parser *p, call_list *l)
{
    sl_status rc = SL_OK;
    for (size_t i = 0; i < l->n && rc == SL_OK; i++)
        rc = emit_call(p, l->names[i], l->args[i]);
    call_list_fini(l);
    return rc;
}

/* Objects separated by whitespace and `sep` (0: whitespace only). */
static bool parse_objects(sl_tool_parser *p, const char *s, size_t n, char sep, call_list *l)
{
    size_t i = 0;
    for (;;) {
        while (i < n && (is_ws(s[i]) || (sep && s[i] == sep)))
            i++;
        if (i == n)
            return l->n > 0;
        if (s[i] != '{')
            return false;
        json_error_t je;
        json_t *o = load(p, s + i, n - i, JSON_DISABLE_EOF_CHECK, &je);
        if (o == NULL || !call_list_add(p, l, o))
            return false;
        i += (size_t)je.position;
    }
}

static bool parse_llama3(sl_tool_parser *p, const char *s, size_t n, call_list *l)
{
    return parse_objects(p, s, n, ';', l);
}

/* [{...}, ...]  or  name[ARGS]{...} ([TOOL_CALLS] again before each next one). */
static bool parse_mistral(sl_tool_parser *p, const char *s, size_t n, call_list *l)
{
    size_t i = 0;
    while (i < n && is_ws(s[i]))
        i++;
    if (i < n && s[i] == '[') {
        json_error_t je;
        json_t *a = load(p, s + i, n - i, JSON_DISABLE_EOF_CHECK, &je);
        if (!json_is_array(a) || json_array_size(a) == 0) {
            json_decref(a);
            return false;
        }
        for (size_t j = (size_t)je.position + i; j < n; j++)
            if (!is_ws(s[j])) {
                json_decref(a);
                return false;
            }
        size_t k;
        json_t *o;
        json_array_foreach(a, k, o) {
            if (!call_list_add(p, l, json_incref(o))) {
                json_decref(a);
                return false;
            }
        }
        json_decref(a);
        return true;
    }
    for (;;) {
        while (i < n && is_ws(s[i]))
            i++;
        if (i == n)
            return l->n > 0;
        if (n - i >= sizeof MISTRAL_TAG - 1 && memcmp(s + i, MISTRAL_TAG, sizeof MISTRAL_TAG - 1) == 0) {
            i += sizeof MISTRAL_TAG - 1;
            continue;
        }
        const char *args = find_mem(s + i, n - i, MISTRAL_ARGS, sizeof MISTRAL_ARGS - 1);
        if (args == NULL)
            return false;
        size_t nl = (size_t)(args - (s + i));
        json_t *name = json_stringn(s + i, nl);  /* NULL for invalid UTF-8: not a call */
        i += nl + sizeof MISTRAL_ARGS - 1;
        json_error_t je;
        json_t *a = i < n && s[i] == '{' ? load(p, s + i, n - i, JSON_DISABLE_EOF_CHECK, &je)
                                         : NULL;
        json_t *o = name && a ? json_pack("{s:O,s:O}", "name", name, "arguments", a) : NULL;
        json_decref(name);
        json_decref(a);
        if (o == NULL || !call_list_add(p, l, o))
            return false;
        i += (size_t)je.position;
    }
}

/* ================================================================ segmenting */

/* How many bytes at the end of s[0..n) are a proper prefix of lit: text that
 * may be the start of a marker and so is held. */
static size_t held_prefix(const char *s, size_t n, const char *lit)
{
    size_t ll = strlen(lit);
    for (size_t k = ll - 1 < n ? ll - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, lit, k) == 0)
            return k;
    return 0;
}

/* HERMES: content up to <tool_call>; a block up to </tool_call> is a call if
 * its JSON is one, else content. Returns bytes decided (consumed). */
static sl_status step_hermes(sl_tool_parser *p, bool final, size_t *used)
{
    const size_t ol = sizeof HERMES_OPEN - 1, cl = sizeof HERMES_CLOSE - 1;
    size_t pos = 0;
    sl_status rc = SL_OK;
    while (rc == SL_OK && pos < p->len) {
        const char *s = p->buf + pos;
        size_t n = p->len - pos;
        const char *q = find_mem(s, n, HERMES_OPEN, ol);
        if (q == NULL) {
            size_t h = final ? 0 : held_prefix(s, n, HERMES_OPEN);
            if (n - h > 0)
                rc = emit_content(p, s, n - h);
            pos += n - h;
            break;
        }
        size_t qo = (size_t)(q - s);
        if (qo > 0 && (rc = emit_content(p, s, qo)) < 0)
            break;
        pos += qo;
        s = p->buf + pos;
        n = p->len - pos;
        const char *e = find_mem(s + ol, n - ol, HERMES_CLOSE, cl);
        if (e == NULL && !final)
            break;      /* an open block: held until it closes or the answer ends */
        size_t body = ol, body_end = e ? (size_t)(e - s) : n, raw_end = e ? body_end + cl : n;
        json_error_t je;
        json_t *o = load(p, s + body, body_end - body, 0, &je);
        const char *name = NULL;
        json_t *a = call_args(p, o, &name);
        if (a != NULL)
            rc = emit_call(p, name, a);
        else
            rc = emit_content(p, s, raw_end);
        json_decref(o);
        pos += raw_end;
    }
    *used = pos;
    return rc;
}

/* LLAMA3 and MISTRAL: the calls run from a marker (or a bare opening bracket
 * at the very start of the answer) to its end, so that region is decided only
 * by the final feed. */
static sl_status step_region(sl_tool_parser *p, bool final, size_t *used)
{
    const char *tag = p->fmt == SL_TOOL_FORMAT_LLAMA3 ? LLAMA3_TAG : MISTRAL_TAG;
    char bare = p->fmt == SL_TOOL_FORMAT_LLAMA3 ? '{' : '[';
    size_t tl = strlen(tag);
    sl_status rc = SL_OK;
    *used = 0;
    if (!p->region) {
        size_t t = 0;
        if (p->at_start) {
            while (t < p->len && is_ws(p->buf[t]))
                t++;
            if (t == p->len) {
                if (final && p->len > 0) {
                    rc = emit_content(p, p->buf, p->len);
                    *used = p->len;
                }
                return rc;   /* whitespace so far: a call may still come */
            }
            size_t rest = p->len - t;
            bool tagged = memcmp(p->buf + t, tag, rest < tl ? rest : tl) == 0;
            if (tagged && rest < tl && !final)
                return SL_OK;   /* "[TOOL_C...": the marker or a bare array, not known yet */
            if (p->buf[t] == bare && !(tagged && rest >= tl)) {
                p->region = true;
                p->region_at = t;
            }
            p->at_start = false;
        }
        if (!p->region) {
            const char *q = find_mem(p->buf, p->len, tag, tl);
            if (q == NULL) {
                size_t h = final ? 0 : held_prefix(p->buf, p->len, tag);
                if (p->len - h > 0)
                    rc = emit_content(p, p->buf, p->len - h);
                *used = p->len - h;
                return rc;
            }
            size_t qo = (size_t)(q - p->buf);
            if (qo > 0 && (rc = emit_content(p, p->buf, qo)) < 0)
                return rc;
            /* The region keeps its marker in buf, for the case it is no call. */
            memmove(p->buf, p->buf + qo, p->len - qo);
            p->len -= qo;
            p->region = true;
            p->region_at = tl;
        }
    }
    if (!final)
        return SL_OK;
    call_list l = {0};
    const char *s = p->buf + p->region_at;
    size_t n = p->len - p->region_at;
    bool ok = p->fmt == SL_TOOL_FORMAT_LLAMA3 ? parse_llama3(p, s, n, &l) : parse_mistral(p, s, n, &l);
    if (ok) {
        /* whitespace before a bare call is not content */
        rc = call_list_emit(p, &l);
    } else {
        call_list_fini(&l);
        rc = emit_content(p, p->buf, p->len);
    }
    *used = p->len;
    return rc;
}

sl_status sl_tool_parser_feed(sl_tool_parser *p, const char *s, size_t n, bool final, sl_tool_on_event on_event,
                              void *ctx)
{
    if (p->finished)
        return SL_ESTATE;
    if (!grow(&p->buf, &p->cap, p->len + n + 1))
        return SL_ENOMEM;
    if (n)
        memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->on_event = on_event;
    p->ctx = ctx;
    size_t used = 0;
    sl_status rc;
    unsigned nulls = sl_alloc_nulls();   /* jansson's packers fail quietly: the count tells */
    if (p->fmt == SL_TOOL_FORMAT_HERMES) {
        rc = step_hermes(p, final, &used);
    } else {
        rc = step_region(p, final, &used);
        if (p->at_start && used > 0)
            p->at_start = false;
    }
    memmove(p->buf, p->buf + used, p->len - used);
    p->len -= used;
    if (rc == SL_OK && (p->oom || sl_alloc_nulls() != nulls))
        rc = SL_ENOMEM;
    if (rc < 0)
        return rc;
    if (final) {
        p->finished = true;
        if (p->content_seen && p->ws_len > 0) {
            sl_tool_event ev = {.kind = SL_TOOL_EVENT_CONTENT, .text = p->ws, .len = p->ws_len};
            p->ws_len = 0;
            rc = on_event(ctx, &ev);
        }
    }
    return rc;
}

/* ================================================================ whole answers */

typedef struct {
    json_t *calls;
    char *content;
    size_t len, cap;
} collect_ctx;

static sl_status collect(void *ctx, const sl_tool_event *ev)
{
    collect_ctx *c = ctx;
    if (ev->kind == SL_TOOL_EVENT_CONTENT) {
        if (!grow(&c->content, &c->cap, c->len + ev->len + 1))
            return SL_ENOMEM;
        memcpy(c->content + c->len, ev->text, ev->len);
        c->len += ev->len;
        c->content[c->len] = '\0';
        return SL_OK;
    }
    if (c->calls == NULL && (c->calls = json_array()) == NULL)
        return SL_ENOMEM;
    json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", ev->id, "type", "function", "function", "name", ev->name,
                          "arguments", ev->arguments);
    return o && json_array_append_new(c->calls, o) == 0 ? SL_OK : SL_ENOMEM;
}

sl_status sl_tool_calls_parse(sl_tool_format f, const json_t *tools, const char *text, size_t len,
                              json_t **calls, char **content)
{
    *calls = NULL;
    *content = NULL;
    sl_tool_parser *p;
    sl_status rc = sl_tool_parser_create(f, tools, &p);
    if (rc < 0)
        return rc;
    collect_ctx c = {0};
    rc = sl_tool_parser_feed(p, text, len, true, collect, &c);
    sl_tool_parser_destroy(p);
    if (rc < 0) {
        json_decref(c.calls);
        free(c.content);
        return rc;
    }
    bool blank = true;
    for (size_t i = 0; i < c.len && blank; i++)
        blank = is_ws(c.content[i]);
    if (blank) {
        free(c.content);
        c.content = NULL;
    }
    *calls = c.calls;
    *content = c.content;
    return SL_OK;
}

/* ================================================================ grammar */

/* Appends printf output to a growing string. */
typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->oom || !grow(&b->s, &b->cap, b->len + n + 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* A GBNF literal's body for bytes s (quotes and backslashes escaped, control
 * bytes as \xHH). */
static void sb_gbnf_lit(strbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            sb_add(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(e, sizeof e, "\\x%02X", c);
            sb_add(b, e, 4);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
}

sl_status sl_tool_calls_grammar(sl_tool_format f, const json_t *tools, const char *only_name, bool parallel,
                                char **out, sl_api_error *err)
{
    *out = NULL;
    if (f == SL_TOOL_FORMAT_NONE)
        f = SL_TOOL_FORMAT_HERMES;
    const char *args_key = f == SL_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
    strbuf b = {0}, alts = {0};
    size_t n = json_array_size(tools), used = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (name == NULL || (only_name && strcmp(name, only_name) != 0))
            continue;
        json_t *params = json_object_get(fn, "parameters");
        json_t *any = NULL;
        if (params == NULL && (params = any = json_pack("{s:s}", "type", "object")) == NULL)
            goto nomem;
        char root[32], msg[256] = "";
        snprintf(root, sizeof root, "tc-a%zu", i);
        char *g = NULL;
        sl_status rc = sl_json_schema_to_gbnf(params, root, &g, msg, sizeof msg);
        json_decref(any);
        if (rc < 0) {
            free(b.s);
            free(alts.s);
            if (rc == SL_ENOMEM)
                goto nomem_err;
            char param[48];
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, param, "tools[%zu].function.parameters: %s", i,
                             msg[0] ? msg : sl_status_name(rc));
            return SL_EINVAL;
        }
        char head[64];
        snprintf(head, sizeof head, "tc-f%zu ::= \"{\\\"name\\\": \\\"", i);
        sb_str(&b, head);
        json_t *js = json_string(name);
        char *jn = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (jn == NULL) {
            free(g);
            goto nomem;
        }
        sb_gbnf_lit(&b, jn + 1, strlen(jn) - 2);   /* the JSON string without its quotes */
        free(jn);
        sb_str(&b, "\\\", \\\"");
        sb_str(&b, args_key);
        char tail[64];
        snprintf(tail, sizeof tail, "\\\": \" tc-a%zu \"}\"\n", i);
        sb_str(&b, tail);
        sb_str(&b, g);
        sb_str(&b, "\n");
        free(g);
        char alt[32];
        snprintf(alt, sizeof alt, "%stc-f%zu", used ? " | " : "", i);
        sb_str(&alts, alt);
        used++;
    }
    if (b.oom || alts.oom)
        goto nomem;
    if (used == 0) {
        free(b.s);
        free(alts.s);
        if (only_name)
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, "tool_choice",
                             "tool_choice names `%.100s`, which is not in tools.", only_name);
        else
            sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, "tools", "tool_choice needs at least one tool.");
        return SL_EINVAL;
    }
    strbuf r = {0};
    switch (f) {
    case SL_TOOL_FORMAT_LLAMA3:
        sb_str(&r, parallel ? "root ::= tc-fn (\"; \" tc-fn)*\n" : "root ::= tc-fn\n");
        break;
    case SL_TOOL_FORMAT_MISTRAL:
        sb_str(&r, parallel ? "root ::= \"[\" tc-fn (\", \" tc-fn)* \"]\"\n" : "root ::= \"[\" tc-fn \"]\"\n");
        break;
    default:
        sb_str(&r, parallel ? "root ::= tc-call (\"\\n\" tc-call)*\n" : "root ::= tc-call\n");
        sb_str(&r, "tc-call ::= \"<tool_call>\\n\" tc-fn \"\\n</tool_call>\"\n");
        break;
    }
    sb_str(&r, "tc-fn ::= ");
    sb_add(&r, alts.s ? alts.s : "", alts.len);
    sb_str(&r, "\n");
    sb_add(&r, b.s ? b.s : "", b.len);
    free(b.s);
    free(alts.s);
    if (r.oom) {
        free(r.s);
        goto nomem_err;
    }
    /* Each schema's rules compiled alone; together they may still pass an
     * engine limit, which is the request's 400 here, not the worker's. */
    char msg[SL_ERR_LEN] = "";
    sl_grammar *gr = NULL;
    sl_status rc = sl_grammar_create(r.s, r.len, &gr, msg, sizeof msg);
    sl_grammar_destroy(gr);
    if (rc < 0) {
        free(r.s);
        if (rc == SL_ENOMEM)
            goto nomem_err;
        sl_api_error_set(err, SL_API_ERR_INVALID_REQUEST, "tools", "the tool calls cannot be enforced: %s", msg);
        return SL_EINVAL;
    }
    *out = r.s;
    return SL_OK;
nomem:
    free(b.s);
    free(alts.s);
nomem_err:
    sl_api_error_set(err, SL_API_ERR_INTERNAL, NULL, "out of memory");
    return SL_ENOMEM;
}
