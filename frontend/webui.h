/* frontend/webui.h: the chat page served at / (docs/FRONTEND.md, "The chat
 * page"): its files, embedded in the binary at build time, and the response
 * that sends one.
 * Where:     front-end processes; routes.c looks a path up and answers with
 *            it when --webui is on (the default).
 * Who:       the event loop; the files are read-only bytes, no state.
 * Ownership: the bytes are static (generated from frontend/webui/ by
 *            cmake/embed.cmake); nothing is allocated or freed.
 * Errors:    none: a path that is not a page file is simply not found. */
#ifndef SL_FRONTEND_WEBUI_H
#define SL_FRONTEND_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

#include "frontend/server_internal.h"

/* One file of the page as served. */
typedef struct {
    const char *content_type;       /* with its charset: "text/html; charset=utf-8" */
    const unsigned char *bytes;     /* the file's bytes, exactly as in frontend/webui/ */
    size_t len;
} sl_fe_webui_asset;

/* Looks up a normalized request path ("/", "/index.html", "/webui/app.js",
 * "/webui/style.css"). Returns true and fills *out (OUT); false, with *out
 * zeroed, for any other path. */
bool sl_fe_webui_find(const char *path, size_t len, sl_fe_webui_asset *out);

/* Sends `a` with status 200, its content type and the page's security and
 * caching headers (a strict Content-Security-Policy, nosniff, no referrer,
 * Cache-Control: no-cache); logs the request line as sl_fe_respond does. */
void sl_fe_webui_respond(sl_fe *fe, h2o_req_t *req, const sl_fe_reqinfo *ri, const sl_fe_webui_asset *a);

#endif
