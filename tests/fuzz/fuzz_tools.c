/* tests/fuzz/fuzz_tools.c: libFuzzer target `tools`: the tool call parser
 * (frontend/tool_calls.c) and the <think> splitter (frontend/reasoning.c).
 * Input: byte 0 picks the format (hermes, llama3, mistral) and whether the
 * splitter starts inside a block; bytes 1-2 a split offset; the rest is the
 * answer. Checks beyond "no crash": the answer fed whole and fed in two
 * pieces at the offset gives the same content, calls and reasoning, and
 * every call names one of the two tools. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/reasoning.h"
#include "frontend/tool_calls.h"

#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "fuzz_tools: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                                \
        }                                                                                           \
    } while (0)

static json_t *tools;

typedef struct {
    char *s;
    size_t n, cap;
} acc;

static void acc_add(acc *a, const char *s, size_t n)
{
    if (a->n + n + 1 > a->cap) {
        a->cap = (a->n + n + 1) * 2;
        a->s = realloc(a->s, a->cap);
        CHECK(a->s != NULL);
    }
    memcpy(a->s + a->n, s, n);
    a->n += n;
}

typedef struct {
    acc content, calls;
} tool_out;

static sl_status on_tool(void *ctx, const sl_tool_event *ev)
{
    tool_out *o = ctx;
    if (ev->kind == SL_TOOL_EVENT_CONTENT) {
        acc_add(&o->content, ev->text, ev->len);
        return SL_OK;
    }
    CHECK(strcmp(ev->name, "add") == 0 || strcmp(ev->name, "get_weather") == 0);
    acc_add(&o->calls, ev->name, strlen(ev->name));
    acc_add(&o->calls, "=", 1);
    acc_add(&o->calls, ev->arguments, strlen(ev->arguments));
    acc_add(&o->calls, ";", 1);
    return SL_OK;
}

static tool_out run_tools(sl_tool_format f, const char *s, size_t n, size_t cut)
{
    tool_out o = {{0}, {0}};
    sl_tool_parser *p;
    CHECK(sl_tool_parser_create(f, tools, &p) == SL_OK);
    CHECK(sl_tool_parser_feed(p, s, cut, false, on_tool, &o) == SL_OK);
    CHECK(sl_tool_parser_feed(p, s + cut, n - cut, true, on_tool, &o) == SL_OK);
    sl_tool_parser_destroy(p);
    return o;
}

typedef struct {
    acc reasoning, content;
} think_out;

static sl_status on_think(void *ctx, sl_reasoning_event_kind k, const char *s, size_t n)
{
    think_out *o = ctx;
    acc_add(k == SL_REASONING_EVENT_REASONING ? &o->reasoning : &o->content, s, n);
    return SL_OK;
}

static think_out run_think(bool open, const char *s, size_t n, size_t cut)
{
    think_out o = {{0}, {0}};
    sl_reasoning r;
    sl_reasoning_init(&r, open);
    CHECK(sl_reasoning_feed(&r, s, cut, false, on_think, &o) == SL_OK);
    CHECK(sl_reasoning_feed(&r, s + cut, n - cut, true, on_think, &o) == SL_OK);
    sl_reasoning_fini(&r);
    return o;
}

static bool same(const acc *a, const acc *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->s, b->s, a->n) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"add\"}},"
                       "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]", 0, NULL);
    CHECK(tools != NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const sl_tool_format fmts[] = {SL_TOOL_FORMAT_HERMES, SL_TOOL_FORMAT_LLAMA3, SL_TOOL_FORMAT_MISTRAL};
    sl_tool_format f = fmts[(data[0] & 0x7f) % 3];
    bool open = data[0] & 0x80;
    const char *s = (const char *)data + 3;
    size_t n = size - 3;
    size_t cut = n ? ((size_t)data[1] | (size_t)data[2] << 8) % (n + 1) : 0;

    tool_out w = run_tools(f, s, n, 0), c = run_tools(f, s, n, cut);
    CHECK(same(&w.content, &c.content));
    CHECK(same(&w.calls, &c.calls));
    free(w.content.s); free(w.calls.s); free(c.content.s); free(c.calls.s);

    think_out tw = run_think(open, s, n, 0), tc = run_think(open, s, n, cut);
    CHECK(same(&tw.reasoning, &tc.reasoning));
    CHECK(same(&tw.content, &tc.content));
    free(tw.reasoning.s); free(tw.content.s); free(tc.reasoning.s); free(tc.content.s);
    return 0;
}
