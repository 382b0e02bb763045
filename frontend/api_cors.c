/* frontend/api_cors.c: the --cors-origin policy and a preflight's allowed
 * headers. Runs in each front end (init at start, the rest per request).
 * The trade-off: an allowed origin may send any well-formed header it asks
 * for in a preflight, instead of a fixed list the browser SDKs outgrow;
 * the origin list is the security boundary, and every request is still
 * authenticated (--api-key) as any other. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "frontend/api_cors.h"

/* scheme://host[:port]: http or https, a host of letters, digits, '-', '.'
 * (or a bracketed IPv6 literal), digits after ':'. */
static bool origin_valid(const char *o, size_t len)
{
    size_t p;
    if (len > 7 && strncmp(o, "http://", 7) == 0)
        p = 7;
    else if (len > 8 && strncmp(o, "https://", 8) == 0)
        p = 8;
    else
        return false;
    size_t host = p;
    if (o[p] == '[') {
        const char *close = memchr(o + p, ']', len - p);
        if (close == NULL)
            return false;
        for (size_t k = p + 1; k < (size_t)(close - o); k++)
            if (!isxdigit((unsigned char)o[k]) && o[k] != ':' && o[k] != '.')
                return false;
        p = (size_t)(close - o) + 1;
    } else {
        while (p < len && (isalnum((unsigned char)o[p]) || o[p] == '-' || o[p] == '.'))
            p++;
    }
    if (p == host)
        return false;
    if (p < len && o[p] == ':') {
        size_t port = ++p;
        while (p < len && isdigit((unsigned char)o[p]))
            p++;
        if (p == port || p - port > 5)
            return false;
    }
    return p == len;
}

sl_status sl_api_cors_init(sl_api_cors *c, const char *list, char err[SL_ERR_LEN])
{
    memset(c, 0, sizeof *c);
    size_t pos = 0, len = 0;
    for (const char *item; (item = sl_config_list_next(list, &pos, &len)) != NULL;) {
        if (len == 1 && item[0] == '*') {
            c->any = true;
            continue;
        }
        if (!origin_valid(item, len)) {
            snprintf(err, SL_ERR_LEN,
                     "--cors-origin: '%.*s' is not an origin (http[s]://host[:port], no path) or *",
                     (int)(len > 200 ? 200 : len), item);
            return SL_EINVAL;
        }
    }
    snprintf(c->origins, sizeof c->origins, "%s", list);
    return SL_OK;
}

bool sl_api_cors_enabled(const sl_api_cors *c)
{
    return c->origins[0] != '\0';
}

bool sl_api_cors_allows(const sl_api_cors *c, const char *origin, size_t len)
{
    if (c->any)
        return true;
    size_t pos = 0, n = 0;
    for (const char *item; (item = sl_config_list_next(c->origins, &pos, &n)) != NULL;)
        if (n == len && strncasecmp(item, origin, len) == 0)
            return true;
    return false;
}

/* RFC 9110 tchar */
static bool token_char(unsigned char ch)
{
    return isalnum(ch) || (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Whether the comma list `list` holds `name` (n bytes, lowercase). */
static bool listed(const char *list, const char *name, size_t n)
{
    for (const char *p = list; *p != '\0';) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t k = strcspn(p, ",");
        if (k == n && memcmp(p, name, n) == 0)
            return true;
        p += k;
    }
    return false;
}

void sl_api_cors_allow_headers(const char *requested, size_t len, char *out, size_t cap)
{
    size_t o = (size_t)snprintf(out, cap, "%s", SL_API_CORS_BASE_HEADERS);
    if (o >= cap) {
        out[0] = '\0';
        return;
    }
    for (size_t i = 0; requested != NULL && i < len;) {
        while (i < len && (requested[i] == ',' || requested[i] == ' ' || requested[i] == '\t'))
            i++;
        size_t start = i;
        while (i < len && requested[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (requested[end - 1] == ' ' || requested[end - 1] == '\t'))
            end--;
        size_t n = end - start;
        if (n == 0 || o + 2 + n >= cap)
            continue;
        char name[256];
        bool ok = n < sizeof name;
        for (size_t k = 0; ok && k < n; k++) {
            unsigned char ch = (unsigned char)requested[start + k];
            ok = token_char(ch);
            name[k] = (char)tolower(ch);
        }
        if (!ok || listed(out, name, n))
            continue;
        memcpy(out + o, ", ", 2);
        memcpy(out + o + 2, name, n);
        o += 2 + n;
        out[o] = '\0';
    }
}
