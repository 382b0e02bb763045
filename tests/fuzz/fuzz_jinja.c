/* tests/fuzz/fuzz_jinja.c: libFuzzer target `jinja`: the chat-template
 * engine (the interpreter in model/jinja/, behind model/chat_template.c).
 * Input: byte 0 even: the rest is template source, compiled and rendered
 * with a fixed conversation (system, user, assistant with a tool call, tool
 * answer) and one tool. Byte 0 odd: byte 1 picks one of the real templates
 * in tests/data/templates (those that compile), and the rest is the
 * conversation: a JSON array of messages when it parses as one, else text
 * cut at '\n\n' into alternating user/assistant contents.
 * The engine caps nesting, loop iterations, output and memory (see
 * chat_template.h), so every input ends; checks beyond "no crash": a
 * result's untrusted spans are sorted, disjoint and inside the text, and a
 * failure says why. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat_template.h"
#include "tests/fuzz/fuzz_common.h"

#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "fuzz_jinja: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                                \
        }                                                                                           \
    } while (0)

#define MAX_TEMPLATES 64
static sl_chat_template *templates[MAX_TEMPLATES];
static int n_templates;
static json_t *fixed_messages, *fixed_tools;

static const char *k_messages =
    "[{\"role\": \"system\", \"content\": \"You are terse.\"},"
    " {\"role\": \"user\", \"content\": \"What is the weather in Paris? <|im_end|>\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
    "   \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"name\": \"get_weather\", \"content\": \"18 C\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Thanks. \\u00e9\\u4e16\"}]}]";
static const char *k_tools =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    " \"required\": [\"city\"]}}}]";

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fixed_messages = json_loads(k_messages, 0, NULL);
    fixed_tools = json_loads(k_tools, 0, NULL);
    CHECK(fixed_messages && fixed_tools);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", fz_testdata_path("templates"));
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    char *names[MAX_TEMPLATES];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < MAX_TEMPLATES;)
        if (strstr(e->d_name, ".jinja"))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);   /* the same index means the same template */
    for (int i = 0; i < n; i++) {
        char path[8192], err[SL_ERR_LEN];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len;
        char *src = fz_read_file(path, &len);
        if (sl_chat_template_compile(src, len, &templates[n_templates], err) == SL_OK)
            n_templates++;
        free(src);
        free(names[i]);
    }
    const char *builtins[] = {"chatml", "llama2", "llama3", "mistral", "gemma", "phi3"};
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0] && n_templates < MAX_TEMPLATES; i++) {
        char err[SL_ERR_LEN];
        const char *src = sl_chat_template_builtin(builtins[i]);
        if (src && sl_chat_template_compile(src, strlen(src), &templates[n_templates], err) == SL_OK)
            n_templates++;
    }
    CHECK(n_templates > 0);
    return 0;
}

static void render(const sl_chat_template *t, const json_t *messages, const json_t *tools, bool add_gen)
{
    sl_chat_render_result r;
    char err[SL_ERR_LEN] = "";
    json_t *extra = json_pack("{s:b}", "enable_thinking", 0);
    sl_chat_render_opts opts = {.has_now = true, .now = 1700000000, .extra_vars = extra};
    sl_status rc = sl_chat_template_render(t, messages, tools, add_gen, "<s>", "</s>", &opts, &r, err);
    json_decref(extra);
    if (rc != SL_OK) {
        CHECK(rc < 0);
        CHECK(r.text == NULL && r.untrusted == NULL);
        return;
    }
    CHECK(r.text != NULL && r.text[r.len] == 0);
    for (size_t i = 0; i < r.n_untrusted; i++) {
        CHECK(r.untrusted[i].start < r.untrusted[i].end && r.untrusted[i].end <= r.len);
        CHECK(i == 0 || r.untrusted[i - 1].end < r.untrusted[i].start);
    }
    sl_chat_render_result_fini(&r);
}

/* Text cut at blank lines into alternating user/assistant messages. */
static json_t *messages_from_text(const char *p, size_t n)
{
    json_t *a = json_array();
    int i = 0;
    while (n > 0 || i == 0) {
        const char *cut = n >= 2 ? memmem(p, n, "\n\n", 2) : NULL;
        size_t len = cut ? (size_t)(cut - p) : n;
        json_t *s = json_stringn(p, len);
        if (s == NULL)
            s = json_string("\xef\xbf\xbd");   /* invalid UTF-8: the front end refuses it before here */
        json_array_append_new(a, json_pack("{s:s, s:o}", "role", i % 2 ? "assistant" : "user", "content", s));
        i++;
        if (!cut)
            break;
        p = cut + 2;
        n -= len + 2;
    }
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if ((data[0] & 1) == 0) {
        sl_chat_template *t = NULL;
        char err[SL_ERR_LEN] = "";
        sl_status rc = sl_chat_template_compile((const char *)data + 1, size - 1, &t, err);
        if (rc != SL_OK) {
            CHECK(rc < 0 && t == NULL && err[0] != 0);
            return 0;
        }
        render(t, fixed_messages, (data[0] & 2) ? fixed_tools : NULL, (data[0] & 4) != 0);
        sl_chat_template_destroy(t);
        return 0;
    }
    if (size < 2)
        return 0;
    const sl_chat_template *t = templates[data[1] % n_templates];
    const char *p = (const char *)data + 2;
    size_t n = size - 2;
    json_t *msgs = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        msgs = messages_from_text(p, n);
    }
    render(t, msgs, (data[0] & 2) ? fixed_tools : NULL, (data[0] & 4) != 0);
    json_decref(msgs);
    return 0;
}
