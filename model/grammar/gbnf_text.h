/* model/grammar/gbnf_text.h: writing GBNF text (model/grammar/grammar.h's
 * format), shared by the schema and regex compilers: a growable buffer and
 * the escaping of literals and character classes.
 * Where:     model/grammar/json_schema.c, model/grammar/regex.c (private to
 *            model/grammar; not part of the library's interface).
 * Ownership: a buffer owns its text until sl_gbnf_buf_take hands it over.
 * Errors:    an allocation failure sticks: the buffer records it, later
 *            appends do nothing, and the writer checks `oom` once at the end. */
#ifndef SL_GBNF_TEXT_H
#define SL_GBNF_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *p;     /* NUL-terminated when len > 0 */
    size_t len;
    size_t cap;
    bool oom;    /* an append failed; the text is incomplete */
} sl_gbnf_buf;

/* A code point range [lo, hi], inclusive. */
typedef struct {
    uint32_t lo, hi;
} sl_gbnf_range;

void sl_gbnf_buf_fini(sl_gbnf_buf *b);
void sl_gbnf_puts(sl_gbnf_buf *b, const char *s);
void sl_gbnf_putn(sl_gbnf_buf *b, const char *s, size_t n);
void sl_gbnf_printf(sl_gbnf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The text (malloc'd, "" when empty), leaving b empty; NULL when b.oom or
 * an allocation fails (b is then emptied too). */
char *sl_gbnf_buf_take(sl_gbnf_buf *b);

/* Appends `"..."`: the n bytes (UTF-8) as one GBNF literal; '"', '\\' and
 * control characters escaped. */
void sl_gbnf_literal(sl_gbnf_buf *b, const char *s, size_t n);

/* Appends `[...]` for the union of n ranges (sorted or not, n >= 1). */
void sl_gbnf_class(sl_gbnf_buf *b, const sl_gbnf_range *r, size_t n);

/* Appends one code point as UTF-8 (no escaping). */
void sl_gbnf_utf8(sl_gbnf_buf *b, uint32_t cp);

/* Decodes one UTF-8 code point at s[0..n): returns its length (1..4) and
 * sets *cp, or 0 when the bytes are not valid UTF-8 (overlong, surrogate,
 * past U+10FFFF, truncated). */
size_t sl_gbnf_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Checks rules written by these compilers (one `name ::= body` per line,
 * bodies of literals, classes, names, groups, | and repetitions): every rule
 * must derive at least one finite string. Returns how many do not, and the
 * names of the first `max` of them (pointers into text, lengths in lens), so
 * the compiler can refuse a schema whose recursion never ends. A reference
 * to a rule not in text counts as unproductive. An allocation failure
 * returns 0 (unchecked: the grammar compiler checks again). */
size_t sl_gbnf_unproductive(const char *text, const char **names, size_t *lens, size_t max);

#endif
