/* tools/loadgen/event.c: a validating JSON scanner that picks the load
 * generator's fields out of a streamed chunk (see event.h). Recursive
 * descent over RFC 8259 syntax; only the paths usage.*, choices[0].delta
 * .content / choices[0].text and error are looked at, everything else is
 * skipped but still checked. Strings are not decoded: a non-empty raw string
 * is a non-empty string, since every escape stands for at least one char.
 * UTF-8 is not validated (the server's business, not the benchmark's). */
#include "tools/loadgen/event.h"

#include <string.h>

#define DEPTH_MAX 64

typedef struct {
    const char *p, *end;
} scan;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int eat(scan *s, char c)
{
    ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

static int hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string at s->p (after whitespace); OUT its raw bytes between the quotes. */
static int string(scan *s, const char **str, size_t *len)
{
    ws(s);
    if (s->p >= s->end || *s->p != '"')
        return 0;
    const char *b = ++s->p;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            *str = b;
            *len = (size_t)(s->p - b);
            s->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (++s->p >= s->end)
                return 0;
            c = (unsigned char)*s->p;
            if (c == 'u') {
                if (s->end - s->p < 5 || !hex(s->p[1]) || !hex(s->p[2]) || !hex(s->p[3]) || !hex(s->p[4]))
                    return 0;
                s->p += 4;
            } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
                return 0;
            }
        }
        s->p++;
    }
    return 0;
}

/* A number; OUT *ival its value when it is an integer that fits, else -1. */
static int number(scan *s, int64_t *ival)
{
    ws(s);
    const char *b = s->p;
    int neg = 0, frac = 0, overflow = 0;
    int64_t v = 0;
    if (s->p < s->end && *s->p == '-')
        neg = 1, s->p++;
    if (s->p >= s->end || *s->p < '0' || *s->p > '9')
        return 0;
    if (*s->p == '0') {
        s->p++;
    } else {
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                overflow = 1;
            else
                v = v * 10 + (*s->p - '0');
            s->p++;
        }
    }
    if (s->p < s->end && *s->p == '.') {
        frac = 1;
        if (++s->p >= s->end || *s->p < '0' || *s->p > '9')
            return 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        frac = 1;
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (ival)
        *ival = frac || overflow || neg ? -1 : v;
    return s->p > b;
}

static int literal(scan *s, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
        return 0;
    s->p += n;
    return 1;
}

static int value(scan *s, int depth);

/* Members of an object after its '{', each value handed to member(). */
typedef int (*member_fn)(scan *s, const char *key, size_t klen, void *ctx, int depth);

static int object(scan *s, int depth, member_fn member, void *ctx)
{
    if (depth > DEPTH_MAX || !eat(s, '{'))
        return 0;
    if (eat(s, '}'))
        return 1;
    do {
        const char *k;
        size_t kl;
        if (!string(s, &k, &kl) || !eat(s, ':'))
            return 0;
        if (!(member ? member(s, k, kl, ctx, depth + 1) : value(s, depth + 1)))
            return 0;
    } while (eat(s, ','));
    return eat(s, '}');
}

static int array(scan *s, int depth, int (*first)(scan *, void *, int), void *ctx)
{
    if (depth > DEPTH_MAX || !eat(s, '['))
        return 0;
    if (eat(s, ']'))
        return 1;
    int i = 0;
    do {
        if (!(i++ == 0 && first ? first(s, ctx, depth + 1) : value(s, depth + 1)))
            return 0;
    } while (eat(s, ','));
    return eat(s, ']');
}

static int value(scan *s, int depth)
{
    ws(s);
    if (s->p >= s->end)
        return 0;
    const char *str;
    size_t len;
    switch (*s->p) {
    case '{': return object(s, depth, NULL, NULL);
    case '[': return array(s, depth, NULL, NULL);
    case '"': return string(s, &str, &len);
    case 't': return literal(s, "true");
    case 'f': return literal(s, "false");
    case 'n': return literal(s, "null");
    default:  return number(s, NULL);
    }
}

static int key_is(const char *k, size_t kl, const char *want)
{
    return kl == strlen(want) && memcmp(k, want, kl) == 0;
}

/* ---- the paths we read --------------------------------------------------- */

typedef struct {
    lg_event *ev;
    int chat;
} ctx_t;

static int content_value(scan *s, lg_event *ev, int depth)
{
    ws(s);
    if (s->p < s->end && *s->p == '"') {
        const char *str;
        size_t len;
        if (!string(s, &str, &len))
            return 0;
        ev->content = len > 0;
        return 1;
    }
    return value(s, depth);
}

static int delta_member(scan *s, const char *k, size_t kl, void *c, int depth)
{
    if (key_is(k, kl, "content"))
        return content_value(s, ((ctx_t *)c)->ev, depth);
    return value(s, depth);
}

static int choice_member(scan *s, const char *k, size_t kl, void *c, int depth)
{
    ctx_t *x = c;
    if (x->chat && key_is(k, kl, "delta")) {
        ws(s);
        if (s->p < s->end && *s->p == '{')
            return object(s, depth, delta_member, c);
    } else if (!x->chat && key_is(k, kl, "text")) {
        return content_value(s, x->ev, depth);
    }
    return value(s, depth);
}

static int first_choice(scan *s, void *c, int depth)
{
    ws(s);
    if (s->p < s->end && *s->p == '{')
        return object(s, depth, choice_member, c);
    return value(s, depth);
}

static int usage_member(scan *s, const char *k, size_t kl, void *c, int depth)
{
    lg_event *ev = ((ctx_t *)c)->ev;
    int64_t *dst = key_is(k, kl, "completion_tokens") ? &ev->completion_tokens
                   : key_is(k, kl, "prompt_tokens")   ? &ev->prompt_tokens
                                                      : NULL;
    ws(s);
    if (dst && s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')))
        return number(s, dst);
    return value(s, depth);
}

static int top_member(scan *s, const char *k, size_t kl, void *c, int depth)
{
    ctx_t *x = c;
    ws(s);
    char next = s->p < s->end ? *s->p : 0;
    if (key_is(k, kl, "error")) {
        x->ev->error = 1;
    } else if (key_is(k, kl, "usage") && next == '{') {
        x->ev->usage = 1;
        return object(s, depth, usage_member, c);
    } else if (key_is(k, kl, "choices") && next == '[') {
        return array(s, depth, first_choice, c);
    }
    return value(s, depth);
}

sl_status lg_event_parse(const char *p, size_t n, int chat, lg_event *ev)
{
    *ev = (lg_event){.completion_tokens = -1, .prompt_tokens = -1};
    ctx_t c = {.ev = ev, .chat = chat};
    scan s = {.p = p, .end = p + n};
    if (!object(&s, 0, top_member, &c)) {
        *ev = (lg_event){.completion_tokens = -1, .prompt_tokens = -1};
        return SL_EFORMAT;
    }
    ws(&s);
    if (s.p != s.end) {
        *ev = (lg_event){.completion_tokens = -1, .prompt_tokens = -1};
        return SL_EFORMAT;
    }
    return SL_OK;
}
