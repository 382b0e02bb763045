/* tests/unit/frontend/webui_test.c: frontend/webui.c, the chat page's
 * files: which paths find which file, and that the bytes the build embedded
 * (cmake/embed.cmake) are exactly frontend/webui/'s. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/webui.h"

static bool find(const char *path, sl_fe_webui_asset *out)
{
    return sl_fe_webui_find(path, strlen(path), out);
}

/* The file frontend/webui/<name> of the source tree, malloc'd; *len its size. */
static unsigned char *source_file(const char *name, size_t *len)
{
    char path[1024];
    const char *root = getenv("SLUICE_SOURCE_DIR");
    if (root != NULL) {
        snprintf(path, sizeof path, "%s/frontend/webui/%s", root, name);
    } else {
        const char *cut = strstr(__FILE__, "tests/unit/");
        cr_assert_not_null(cut);
        snprintf(path, sizeof path, "%.*sfrontend/webui/%s", (int)(cut - __FILE__), __FILE__, name);
    }
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

Test(webui, embedded_bytes_are_the_source_files)
{
    static const struct { const char *path, *file, *type; } cases[] = {
        {"/", "index.html", "text/html; charset=utf-8"},
        {"/index.html", "index.html", "text/html; charset=utf-8"},
        {"/webui/app.js", "app.js", "text/javascript; charset=utf-8"},
        {"/webui/style.css", "style.css", "text/css; charset=utf-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_fe_webui_asset a;
        cr_assert(find(cases[i].path, &a), "%s", cases[i].path);
        cr_expect_str_eq(a.content_type, cases[i].type);
        size_t len;
        unsigned char *want = source_file(cases[i].file, &len);
        cr_assert_eq(a.len, len, "%s: %zu embedded bytes, the file has %zu", cases[i].file, a.len, len);
        cr_expect(memcmp(a.bytes, want, len) == 0, "%s differs from its embedded copy", cases[i].file);
        cr_expect_eq(a.bytes[len], 0);   /* embed.cmake's terminator, outside the length */
        free(want);
    }
}

Test(webui, other_paths_are_not_found_and_zero_the_output)
{
    static const char *paths[] = {"", "/webui", "/webui/", "/webui/app.j", "/webui/app.jsx", "/INDEX.HTML",
                                  "/index.htm", "//", "/app.js", "/v1/models"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        sl_fe_webui_asset a = {"x", (const unsigned char *)"y", 1};
        cr_expect(!find(paths[i], &a), "'%s' found", paths[i]);
        cr_expect(a.content_type == NULL && a.bytes == NULL && a.len == 0, "'%s': output not zeroed", paths[i]);
    }
    /* the length is what counts, not a NUL: "/index.html" cut to "/" is the page */
    sl_fe_webui_asset a;
    cr_expect(sl_fe_webui_find("/index.html", 1, &a) && a.len > 0);
}
