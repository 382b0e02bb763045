/* model/grammar/json_schema_ctx.c: the schema compiler's context helpers
 * that every one of its files calls: the first error wins (later ones are
 * dropped, so a message always names the innermost cause), long JSON
 * Pointers are cut from the front for messages, and shared rules are marked
 * used with what they depend on. */
#include <stdarg.h>
#include <stdio.h>

#include "model/grammar/json_schema_internal.h"

/* The path for a message: long ones keep their last 100 bytes, so the
 * reason after them still fits an SL_ERR_LEN buffer. */
const char *sl_js_path_text(js_ctx *c)
{
    if (c->path_len == 0)
        return "root";
    if (c->path_len <= 100)
        return c->path;
    snprintf(c->path_shown, sizeof c->path_shown, "...%s", c->path + c->path_len - 100);
    return c->path_shown;
}

sl_status sl_js_fail(js_ctx *c, const char *fmt, ...)
{
    if (c->rc == SL_OK) {
        c->rc = SL_EINVAL;
        if (c->err && c->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err, c->err_len, fmt, ap);
            va_end(ap);
        }
    }
    return c->rc;
}

sl_status sl_js_bad_value(js_ctx *c, const char *kw, const char *why)
{
    return sl_js_fail(c, "invalid keyword '%s' at %s: %s", kw, sl_js_path_text(c), why);
}

void sl_js_use(js_ctx *c, unsigned what)
{
    if (what & (USE_VALUE | USE_OBJECT | USE_ARRAY))
        what |= USE_VALUE | USE_OBJECT | USE_ARRAY | USE_STRING | USE_NUMBER | USE_WS;
    if (what & USE_STRING)
        what |= USE_CHAR;
    if (what & USE_CHAR)
        what |= USE_HEX;
    if (what & USE_DATETIME)
        what |= USE_DATE | USE_TIME;
    if (what & USE_UUID)
        what |= USE_HEX;
    c->used |= what;
}

void sl_js_ref_common(js_ctx *c, sl_gbnf_buf *b, unsigned what, const char *suffix)
{
    sl_js_use(c, what);
    sl_gbnf_printf(b, "%s-%s", c->rn, suffix);
}
