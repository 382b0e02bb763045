/* frontend/api_json.c: UTF-8 checks and lossy JSON strings for the API files.
 * Runs in the front ends. Trade-off: the decoder is a plain byte loop, not a
 * table-driven DFA; API texts are short and this is easy to check. */
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_json.h"

/* Length of the valid character at s[0..len), or 0 if the bytes there do
 * not start one (then *bad gets how many bytes form the invalid subpart). */
static size_t utf8_char(const unsigned char *s, size_t len, size_t *bad)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;   /* allowed range of the second byte */
    *bad = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;          /* no overlong forms */
        if (c == 0xED) hi = 0x9F;          /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;          /* <= U+10FFFF */
    } else return 0;
    for (size_t i = 1; i <= need; i++) {
        if (i >= len) { *bad = i; return 0; }
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) { *bad = i; return 0; }
    }
    return need + 1;
}

size_t sl_api_utf8_valid_prefix(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, bad;
    while (i < len) {
        size_t n = utf8_char(u + i, len - i, &bad);
        if (!n) return i;
        i += n;
    }
    return i;
}

size_t sl_api_utf8_floor(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = len;
    /* Step back over at most 3 continuation bytes to the lead byte, then
     * keep the character only if it is complete. */
    size_t back = 0;
    while (n > 0 && back < 4 && (u[n - 1] & 0xC0) == 0x80) { n--; back++; }
    if (n == 0) return back ? 0 : len;
    unsigned c = u[n - 1];
    size_t want = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return (back + 1 >= want) ? len : n - 1;
}

json_t *sl_api_json_string_lossy(const char *s, size_t len)
{
    size_t ok = sl_api_utf8_valid_prefix(s, len);
    if (ok == len) return json_stringn(s, len);
    /* Worst case each byte becomes the 3-byte U+FFFD. */
    char *buf = sl_malloc(len * 3 + 1);
    if (!buf) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0, bad;
    while (i < len) {
        size_t n = utf8_char(u + i, len - i, &bad);
        if (n) { memcpy(buf + o, s + i, n); o += n; i += n; continue; }
        memcpy(buf + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += bad;
    }
    json_t *v = json_stringn(buf, o);
    free(buf);
    return v;
}

char *sl_api_json_dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT);
}

void sl_api_json_use_sl_alloc(void)
{
    json_set_alloc_funcs(sl_malloc, free);
}
