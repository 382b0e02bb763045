/* model/jinja/jinja_lexer.c: template source -> tokens, with jinja2's whitespace
 * control as transformers configures it (trim_blocks, lstrip_blocks,
 * keep_trailing_newline off). Runs once per template at load.
 * Trade-off: newlines are normalised like jinja2 for "\r\n" and "\r" only;
 * the rarer separators Python's splitlines() also honours (\v, \f, \x1c-\x1e,
 * U+0085, U+2028, U+2029) are kept as text. */
#include "model/jinja/jinja.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    jj_ctx *c;
    jj_tok *v;
    size_t n, cap;
} toks;

static int push(toks *t, jj_tok tok)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        jj_tok *nv = jj_alloc(t->c->ar, cap * sizeof(jj_tok));
        if (!nv)
            return jj_fail(t->c, SL_ENOMEM, "template too large");
        if (t->n)
            memcpy(nv, t->v, t->n * sizeof(jj_tok));
        t->v = nv;
        t->cap = cap;
    }
    t->v[t->n++] = tok;
    return 0;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }
static bool is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f)); return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A quoted literal at s[*i] (the quote); Python "unicode-escape" rules. */
static int lex_string(toks *t, const char *s, size_t n, size_t *i, int line)
{
    char q = s[*i];
    size_t j = *i + 1;
    char *o = jj_alloc(t->c->ar, n - *i + 1);
    if (!o)
        return jj_fail(t->c, SL_ENOMEM, "template too large");
    size_t on = 0;
    for (;;) {
        if (j >= n)
            return jj_fail(t->c, SL_EFORMAT, "template line %d: unterminated string", line);
        char ch = s[j];
        if (ch == q) {
            j++;
            break;
        }
        if (ch != '\\' || j + 1 >= n) {
            o[on++] = ch;
            j++;
            continue;
        }
        char e = s[j + 1];
        j += 2;
        int hex_len = 0;
        switch (e) {
        case 'n': o[on++] = '\n'; break;
        case 't': o[on++] = '\t'; break;
        case 'r': o[on++] = '\r'; break;
        case 'a': o[on++] = '\a'; break;
        case 'b': o[on++] = '\b'; break;
        case 'f': o[on++] = '\f'; break;
        case 'v': o[on++] = '\v'; break;
        case '\\': o[on++] = '\\'; break;
        case '\'': o[on++] = '\''; break;
        case '"': o[on++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': hex_len = 2; break;
        case 'u': hex_len = 4; break;
        case 'U': hex_len = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && j < n && s[j] >= '0' && s[j] <= '7'; k++)
                    v = v * 8 + (uint32_t)(s[j++] - '0');
                on += put_utf8(o + on, v);
            } else {
                o[on++] = '\\'; /* unknown escapes keep their backslash */
                o[on++] = e;
            }
        }
        if (hex_len) {
            uint32_t v = 0;
            for (int k = 0; k < hex_len; k++) {
                int h = j < n ? hexval(s[j]) : -1;
                if (h < 0)
                    return jj_fail(t->c, SL_EFORMAT, "template line %d: bad \\%c escape", line, e);
                v = v * 16 + (uint32_t)h;
                j++;
            }
            if (v > 0x10ffff)
                return jj_fail(t->c, SL_EFORMAT, "template line %d: bad \\%c escape", line, e);
            on += put_utf8(o + on, v); /* never longer than its escape */
        }
    }
    jj_tok tok = {.t = JJ_T_STR, .line = line, .s = {.p = o, .n = on}};
    *i = j;
    return push(t, tok);
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char ops1[] = "+-*/%~<>=()[]{},.:|";

/* Lexes one tag body from s[*i]; stops after the closing delimiter. Sets
 * *strip_after for '-' and *trim_nl when the tag may eat one newline. */
static int lex_tag(toks *t, const char *s, size_t n, size_t *i, int *line, char kind,
                   bool *strip_after, bool *no_trim)
{
    int depth = 0; /* open brackets: "}}" inside a dict literal is not the end */
    size_t j = *i;
    char close = kind == '{' ? '}' : '%';
    for (;;) {
        while (j < n && is_ws(s[j])) {
            if (s[j] == '\n')
                (*line)++;
            j++;
        }
        if (j >= n)
            return jj_fail(t->c, SL_EFORMAT, "template line %d: unclosed tag", *line);
        if (depth == 0) {
            size_t k = j;
            char sign = 0;
            if ((s[k] == '-' || s[k] == '+') && k + 2 < n + 0 && s[k + 1] == close && s[k + 2] == '}')
                sign = s[k++];
            if (k + 1 < n && s[k] == close && s[k + 1] == '}') {
                *strip_after = sign == '-';
                *no_trim = sign == '+';
                jj_tok tok = {.t = kind == '{' ? JJ_T_VEND : JJ_T_BEND, .line = *line};
                *i = k + 2;
                return push(t, tok);
            }
        }
        char ch = s[j];
        jj_tok tok = {.line = *line};
        if (is_name0(ch)) {
            size_t k = j;
            while (k < n && (is_name0(s[k]) || is_digit(s[k])))
                k++;
            tok.t = JJ_T_NAME;
            tok.s = (jj_str){.p = s + j, .n = k - j};
            j = k;
        } else if (is_digit(ch)) {
            size_t k = j;
            bool is_float = false;
            char buf[64];
            size_t bn = 0;
            while (k < n && (is_digit(s[k]) || s[k] == '_'))
                if (s[k++] != '_' && bn < 63) buf[bn++] = s[k - 1];
            if (k + 1 < n && s[k] == '.' && is_digit(s[k + 1])) {
                is_float = true;
                buf[bn < 63 ? bn++ : bn] = '.';
                k++;
                while (k < n && (is_digit(s[k]) || s[k] == '_'))
                    if (s[k++] != '_' && bn < 63) buf[bn++] = s[k - 1];
            }
            if (k < n && (s[k] == 'e' || s[k] == 'E')) {
                size_t m = k + 1;
                if (m < n && (s[m] == '+' || s[m] == '-'))
                    m++;
                if (m < n && is_digit(s[m])) {
                    is_float = true;
                    for (size_t x = k; x < m && bn < 63; x++)
                        buf[bn++] = s[x];
                    k = m;
                    while (k < n && is_digit(s[k]))
                        if (bn < 63) buf[bn++] = s[k++]; else k++;
                }
            }
            buf[bn] = 0;
            if (is_float) {
                tok.t = JJ_T_FLOAT;
                tok.f = strtod(buf, NULL);
            } else {
                tok.t = JJ_T_INT;
                if (bn > 18)
                    return jj_fail(t->c, SL_EUNSUPPORTED, "template line %d: integer literal too large", *line);
                tok.i = strtoll(buf, NULL, 10);
            }
            j = k;
        } else if (ch == '\'' || ch == '"') {
            if (lex_string(t, s, n, &j, *line) < 0)
                return -1;
            continue;
        } else {
            size_t len = 0;
            for (int k = 0; ops2[k]; k++)
                if (j + 1 < n && s[j] == ops2[k][0] && s[j + 1] == ops2[k][1])
                    len = 2;
            if (!len && strchr(ops1, ch) && ch)
                len = 1;
            if (!len)
                return jj_fail(t->c, SL_EFORMAT, "template line %d: unexpected character '%c'",
                               *line, ch);
            if (ch == '(' || ch == '[' || ch == '{')
                depth++;
            if ((ch == ')' || ch == ']' || ch == '}') && depth > 0)
                depth--;
            tok.t = JJ_T_OP;
            tok.s = (jj_str){.p = s + j, .n = len};
            j += len;
        }
        if (push(t, tok) < 0)
            return -1;
    }
}

/* Normalise newlines like jinja2 (splitlines + join) and drop one trailing
 * newline (keep_trailing_newline=False). */
static char *normalise(jj_ctx *c, const char *src, size_t len, size_t *out_len)
{
    char *o = jj_alloc(c->ar, len + 1);
    if (!o)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            o[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            o[n++] = src[i];
        }
    }
    if (n && o[n - 1] == '\n')
        n--;
    *out_len = n;
    return o;
}

int jj_lex(jj_ctx *c, const char *src, size_t len, jj_tok **out, size_t *n_out)
{
    toks t = {.c = c};
    size_t n;
    const char *s = normalise(c, src, len, &n);
    if (!s)
        return jj_fail(c, SL_ENOMEM, "template too large");
    size_t pos = 0;
    int line = 1;
    bool strip_next = false;   /* previous tag ended with '-' */
    bool line_starting = true; /* text begins at the start of a line */
    while (pos <= n) {
        /* find the next tag opener */
        size_t at = pos;
        char kind = 0;
        for (; at + 1 < n; at++)
            if (s[at] == '{' && (s[at + 1] == '{' || s[at + 1] == '%' || s[at + 1] == '#')) {
                kind = s[at + 1];
                break;
            }
        if (!kind)
            at = n;
        size_t tb = pos, te = at;
        if (strip_next)
            while (tb < te && is_ws(s[tb]))
                tb++;
        char sign = kind && at + 2 < n ? s[at + 2] : 0;
        if (sign != '-' && sign != '+')
            sign = 0;
        if (kind && sign == '-') {
            while (te > tb && is_ws(s[te - 1]))
                te--;
        } else if (kind && sign != '+' && kind != '{') {
            /* lstrip_blocks: drop spaces/tabs between line start and the tag */
            size_t l = te;
            while (l > tb && s[l - 1] != '\n')
                l--;
            if (l > tb || line_starting) {
                size_t k = l;
                while (k < te && (s[k] == ' ' || s[k] == '\t'))
                    k++;
                if (k == te)
                    te = l;
            }
        }
        if (te > tb) {
            jj_tok tok = {.t = JJ_T_TEXT, .line = line, .s = {.p = s + tb, .n = te - tb}};
            if (push(&t, tok) < 0)
                return -1;
        }
        for (size_t k = pos; k < at; k++)
            if (s[k] == '\n')
                line++;
        if (!kind)
            break;
        size_t i = at + 2 + (sign ? 1 : 0);
        bool strip_after = false, no_trim = false;
        if (kind == '#') {
            size_t k = i;
            while (k + 1 < n && !(s[k] == '#' && s[k + 1] == '}'))
                k++;
            if (k + 1 >= n)
                return jj_fail(c, SL_EFORMAT, "template line %d: unclosed comment", line);
            for (size_t x = i; x < k; x++)
                if (s[x] == '\n')
                    line++;
            strip_after = k > i && s[k - 1] == '-';
            no_trim = k > i && s[k - 1] == '+';
            i = k + 2;
        } else {
            jj_tok tok = {.t = kind == '{' ? JJ_T_VBEGIN : JJ_T_BBEGIN, .line = line};
            if (push(&t, tok) < 0)
                return -1;
            if (lex_tag(&t, s, n, &i, &line, kind, &strip_after, &no_trim) < 0)
                return -1;
        }
        line_starting = false;
        if (kind != '{' && !strip_after && !no_trim && i < n && s[i] == '\n') {
            i++; /* trim_blocks */
            line++;
            line_starting = true;
        }
        strip_next = strip_after;
        if (strip_after) {
            size_t k = i;
            while (k < n && is_ws(s[k]))
                k++;
            if (k > i && s[k - 1] == '\n')
                line_starting = true;
        }
        pos = i;
        if (pos >= n)
            break;
    }
    jj_tok eof = {.t = JJ_T_EOF, .line = line};
    if (push(&t, eof) < 0)
        return -1;
    *out = t.v;
    *n_out = t.n;
    return 0;
}
