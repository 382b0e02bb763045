/* frontend/webui.c: the chat page's files and the headers they are sent with.
 * Runs on each front-end process's event loop, called by routes.c for GET or
 * HEAD of a page path when --webui is on. The files live in frontend/webui/
 * and are compiled in as arrays that cmake/embed.cmake generates at build
 * time, so the binary alone serves the page, offline, and the bytes served
 * are the repository's (tests/unit/frontend/webui_test.c compares them).
 * The trade-off: the page's script and style are separate files rather than
 * inline, one request each more, so the Content-Security-Policy can be the
 * simplest strict one ('self' only, no nonce or hash to keep in step with
 * the file). */
#include <string.h>

#include "frontend/webui.h"

/* generated into the build folder by cmake/embed.cmake (frontend/CMakeLists.txt) */
extern const unsigned char sl_fe_webui_index_html[], sl_fe_webui_app_js[], sl_fe_webui_style_css[];
extern const size_t sl_fe_webui_index_html_len, sl_fe_webui_app_js_len, sl_fe_webui_style_css_len;

/* Path -> file. The lengths are other translation units' constants, not
 * constant expressions, hence the pointers. */
static const struct {
    const char *path;
    const char *content_type;
    const unsigned char *bytes;
    const size_t *len;
} assets[] = {
    {"/", "text/html; charset=utf-8", sl_fe_webui_index_html, &sl_fe_webui_index_html_len},
    {"/index.html", "text/html; charset=utf-8", sl_fe_webui_index_html, &sl_fe_webui_index_html_len},
    {"/webui/app.js", "text/javascript; charset=utf-8", sl_fe_webui_app_js, &sl_fe_webui_app_js_len},
    {"/webui/style.css", "text/css; charset=utf-8", sl_fe_webui_style_css, &sl_fe_webui_style_css_len},
};

/* Only this origin's script, style and API (connect-src: fetch to /v1/...);
 * nothing else loads, nothing inline runs (what the model writes is shown
 * with textContent anyway), no <base> rewriting, no form posts, and no other
 * site may frame the page (clickjacking). img-src 'self' lets the browser's
 * own /favicon.ico request through (a 404 JSON body; harmless). */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                          "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

bool sl_fe_webui_find(const char *path, size_t len, sl_fe_webui_asset *out)
{
    for (size_t i = 0; i < sizeof assets / sizeof assets[0]; i++) {
        if (strlen(assets[i].path) == len && memcmp(assets[i].path, path, len) == 0) {
            *out = (sl_fe_webui_asset){assets[i].content_type, assets[i].bytes, *assets[i].len};
            return true;
        }
    }
    *out = (sl_fe_webui_asset){0};
    return false;
}

void sl_fe_webui_respond(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_fe_webui_asset *a)
{
    h2o_mem_pool_t *pool = &req->pool;
    h2o_headers_t *h = &req->res.headers;
    h2o_add_header_by_str(pool, h, H2O_STRLIT("content-security-policy"), 0, NULL, csp, sizeof csp - 1);
    /* a browser must not guess another type (a script served as text, say) */
    h2o_add_header_by_str(pool, h, H2O_STRLIT("x-content-type-options"), 0, NULL, H2O_STRLIT("nosniff"));
    h2o_add_header_by_str(pool, h, H2O_STRLIT("referrer-policy"), 0, NULL, H2O_STRLIT("no-referrer"));
    /* no-cache = revalidate each time: a restarted, upgraded server's page is
     * never mixed with an old cached script; the files are a few KiB. */
    h2o_add_header(pool, h, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    sl_fe_respond(fe, req, ri, 200, a->content_type, (const char *)a->bytes, a->len, 0);
}
