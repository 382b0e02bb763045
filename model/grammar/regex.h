/* model/grammar/regex.h: a regular expression -> GBNF rules (model/grammar/grammar.h)
 * matching exactly the strings the regex matches in full (anchored at both
 * ends, as JSON Schema's pattern is used by the schema compiler: the pattern
 * constrains the string's content only).
 * Subset:    literals and escapes (\n \t \r \\ \. \xHH \uHHHH ...), `.`,
 *            classes [..] [^..] with ranges, \d \w \s \D \W \S, groups ( )
 *            and (?: ), alternation |, * + ? {m} {m,} {m,n}, ^ and $ at the
 *            ends only. Backreferences, lookaround, lazy or possessive
 *            quantifiers and flags are refused (SL_EINVAL naming the construct
 *            and offset).
 * Where:     the schema compiler (pattern) and front ends (the regex field).
 * Errors:    SL_OK; SL_EINVAL with err; SL_ENOMEM. *out NULL on failure. */
#ifndef SL_REGEX_H
#define SL_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/status.h"

/* Allocates *out (malloc'd, NUL-terminated): GBNF rules, start rule
 * `root_name`, helper rules `root_name`-<something>. When json_string is
 * true the rules produce the match as the inside of a JSON string: '"' and
 * '\\' and control characters appear escaped (\" \\ \n \uXXXX), so a schema's
 * pattern constrains the decoded value; U+0000 is left out (jansson refuses
 * \u0000), and a regex that needs it is SL_EINVAL. */
sl_status sl_regex_to_gbnf(const char *re, size_t len, const char *root_name, bool json_string, char **out,
                           char *err, size_t err_len);

#endif
