/* tools/render-template: renders a chat template the way the server does,
 * for reference tests and for template authors.
 * Usage:  render-template [--ranges FILE] (TEMPLATE_FILE | --builtin NAME) < context.json
 * Input:  a JSON object: messages (array, required), tools (array or null),
 *         add_generation_prompt (bool), bos_token, eos_token (strings),
 *         now (int, seconds since the epoch, freezes strftime_now),
 *         extra (object of more template variables).
 * Output: the rendered text on stdout, byte for byte; with --ranges, the
 *         untrusted byte ranges as a JSON array of [start, end] pairs in FILE.
 * Exit:   0 ok; 1 bad usage or input; 2 the template does not compile;
 *         3 the render failed (raise_exception included); message on stderr. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat_template.h"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    const char *ranges_path = NULL, *builtin = NULL, *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranges") == 0 && i + 1 < argc)
            ranges_path = argv[++i];
        else if (strcmp(argv[i], "--builtin") == 0 && i + 1 < argc)
            builtin = argv[++i];
        else
            path = argv[i];
    }
    if (!path == !builtin) {
        fprintf(stderr, "usage: render-template [--ranges FILE] (TEMPLATE_FILE | --builtin NAME) < context.json\n");
        return 1;
    }
    char *src;
    size_t len;
    if (builtin) {
        const char *b = sl_chat_template_builtin(builtin);
        if (!b) {
            fprintf(stderr, "unknown built-in template '%s'\n", builtin);
            return 1;
        }
        src = strdup(b);
        len = strlen(b);
    } else {
        src = read_file(path, &len);
    }
    if (!src)
        return 1;
    json_error_t jerr;
    json_t *ctx = json_loadf(stdin, 0, &jerr);
    if (!ctx || !json_is_object(ctx)) {
        fprintf(stderr, "context: %s\n", ctx ? "not an object" : jerr.text);
        free(src);
        json_decref(ctx);
        return 1;
    }
    char err[SL_ERR_LEN];
    sl_chat_template *t;
    sl_status rc = sl_chat_template_compile(src, len, &t, err);
    free(src);
    if (rc < 0) {
        fprintf(stderr, "compile: %s: %s\n", sl_status_name(rc), err);
        json_decref(ctx);
        return 2;
    }
    json_t *now = json_object_get(ctx, "now");
    const json_t *bos = json_object_get(ctx, "bos_token"), *eos = json_object_get(ctx, "eos_token");
    sl_chat_render_opts opts = {
        .has_now = json_is_integer(now),
        .now = json_is_integer(now) ? (int64_t)json_integer_value(now) : 0,
        .extra_vars = json_object_get(ctx, "extra"),
    };
    sl_chat_render_result res;
    rc = sl_chat_template_render(t, json_object_get(ctx, "messages"), json_object_get(ctx, "tools"),
                                 json_is_true(json_object_get(ctx, "add_generation_prompt")),
                                 json_string_value(bos), json_string_value(eos), &opts, &res, err);
    sl_chat_template_destroy(t);
    json_decref(ctx);
    if (rc < 0) {
        fprintf(stderr, "render: %s: %s\n", sl_status_name(rc), err);
        return 3;
    }
    fwrite(res.text, 1, res.len, stdout);
    if (ranges_path) {
        FILE *f = fopen(ranges_path, "w");
        if (!f) {
            perror(ranges_path);
            sl_chat_render_result_fini(&res);
            return 1;
        }
        fputc('[', f);
        for (size_t i = 0; i < res.n_untrusted; i++)
            fprintf(f, "%s[%zu, %zu]", i ? ", " : "", res.untrusted[i].start, res.untrusted[i].end);
        fputs("]\n", f);
        fclose(f);
    }
    sl_chat_render_result_fini(&res);
    return 0;
}
