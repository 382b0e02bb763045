/* frontend/api_cors.h: CORS (the Fetch standard's cross-origin checks) for
 * browser clients: which origins --cors-origin allows, and the header
 * values a preflight answers with.
 * Where:     front ends; the policy is filled once at start, read-only
 *            afterwards; routes.c adds the headers.
 * Who:       the event loop.
 * Ownership: sl_api_cors is caller storage holding a copy of the list.
 * Errors:    sl_api_cors_init: SL_OK, or SL_EINVAL with err naming the
 *            origin that is not scheme://host[:port] or "*". */
#ifndef SL_API_CORS_H
#define SL_API_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/config.h"
#include "shared/status.h"

#define SL_API_CORS_MAX_AGE "600"   /* seconds a browser may keep a preflight's answer */
/* Request headers every preflight allows: the ones the API reads. */
#define SL_API_CORS_BASE_HEADERS "authorization, content-type, x-request-id"
/* Response headers a browser script may read (beyond the CORS-safelisted). */
#define SL_API_CORS_EXPOSE_HEADERS "x-request-id, retry-after"
#define SL_API_CORS_HEADERS_MAX 1024 /* an Access-Control-Allow-Headers value's bytes at most */

typedef struct {
    char origins[SL_CONFIG_LIST_MAX];  /* the list as configured (comma-joined), "" = CORS off */
    bool any;                          /* "*" is in the list */
} sl_api_cors;

/* Fills c from --cors-origin's list. Each item is "*" or an origin as
 * browsers send it: http:// or https://, a host, an optional :port, and
 * nothing after (no path, no trailing '/'). */
sl_status sl_api_cors_init(sl_api_cors *c, const char *list, char err[SL_ERR_LEN]);

/* Whether CORS is on (some origin configured). */
bool sl_api_cors_enabled(const sl_api_cors *c);

/* Whether a request's Origin (len bytes) may read responses: "*" allows
 * any; otherwise an exact match (ASCII case ignored: origins are
 * lowercase as browsers serialise them, a configured one may not be). */
bool sl_api_cors_allows(const sl_api_cors *c, const char *origin, size_t len);

/* The Access-Control-Allow-Headers value for a preflight whose
 * Access-Control-Request-Headers is `requested` (len bytes; NULL = none):
 * SL_API_CORS_BASE_HEADERS, then each requested name that is a valid
 * header name (RFC 9110 token) and not listed yet, lowercased. The origin
 * is trusted by configuration, so what its script asks to send is allowed:
 * the OpenAI SDKs add their own x-stainless-* headers. Names that would not
 * fit in cap bytes are left out. Writes a NUL-terminated value to out. */
void sl_api_cors_allow_headers(const char *requested, size_t len, char *out, size_t cap);

#endif
