/* frontend/api_json.h: small jansson helpers the API files share.
 * Where:     front ends. Who: any thread; no state.
 * Why:       jansson refuses to build a string from invalid UTF-8, but a
 *            token's bytes (one half of a multi-byte character) are not
 *            always valid; these helpers make such text safe to send.
 * Ownership: returned json_t are new references; strings are malloc'd. */
#ifndef SL_API_JSON_H
#define SL_API_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Length of the longest prefix of s[0..len) that is valid UTF-8 (shortest
 * form, no surrogates, <= U+10FFFF). Equal to len when all of it is valid. */
size_t sl_api_utf8_valid_prefix(const char *s, size_t len);

/* Largest n <= len such that s[0..n) does not end inside a character. */
size_t sl_api_utf8_floor(const char *s, size_t len);

/* A JSON string from bytes: valid UTF-8 is kept as is, each invalid
 * sequence becomes U+FFFD (one per maximal invalid subpart, as Python's
 * bytes.decode(errors="replace") does). NULL only on allocation failure. */
json_t *sl_api_json_string_lossy(const char *s, size_t len);

/* json_dumps(v, JSON_COMPACT) (UTF-8 out, not \u-escaped). NULL on failure. */
char *sl_api_json_dump(const json_t *v);

/* Routes jansson's allocations through sl_malloc (shared/alloc.h), so that
 * fault injection reaches them; called once at front-end start. */
void sl_api_json_use_sl_alloc(void);

#endif
