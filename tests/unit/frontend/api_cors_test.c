/* tests/unit/frontend/api_cors_test.c: frontend/api_cors.c: which
 * --cors-origin values are origins, which request Origins they allow, and
 * the Access-Control-Allow-Headers value of a preflight. */
#include <criterion/criterion.h>
#include <string.h>

#include "frontend/api_cors.h"

static bool allows(const sl_api_cors *c, const char *origin)
{
    return sl_api_cors_allows(c, origin, strlen(origin));
}

Test(api_cors, a_list_allows_exactly_its_origins)
{
    sl_api_cors c;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_api_cors_init(&c, "http://localhost:3000,https://App.Example.com,http://[::1]:8000", err),
                 SL_OK, "%s", err);
    cr_expect(sl_api_cors_enabled(&c));
    cr_expect_not(c.any);
    cr_expect(allows(&c, "http://localhost:3000"));
    cr_expect(allows(&c, "https://app.example.com"));   /* browsers send it lowercase */
    cr_expect(allows(&c, "http://[::1]:8000"));
    cr_expect_not(allows(&c, "http://localhost:3001"));
    cr_expect_not(allows(&c, "https://localhost:3000"));
    cr_expect_not(allows(&c, "http://localhost"));
    cr_expect_not(allows(&c, "null"));
    cr_expect_not(allows(&c, ""));
}

Test(api_cors, star_allows_any_and_empty_is_off)
{
    sl_api_cors c;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_api_cors_init(&c, "*", err), SL_OK);
    cr_expect(c.any && sl_api_cors_enabled(&c));
    cr_expect(allows(&c, "https://anything.test"));
    cr_assert_eq(sl_api_cors_init(&c, "", err), SL_OK);
    cr_expect_not(sl_api_cors_enabled(&c));
    cr_expect_not(allows(&c, "http://localhost:3000"));
}

Test(api_cors, what_is_not_an_origin_is_refused)
{
    const char *bad[] = {"localhost:3000", "http://", "ftp://a.test", "http://a.test/", "http://a.test/path",
                         "http://a.test:", "http://a.test:123456", "http://a b", "http://[::1", "https://a.test?x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_api_cors c;
        char err[SL_ERR_LEN] = "";
        cr_expect_eq(sl_api_cors_init(&c, bad[i], err), SL_EINVAL, "%s", bad[i]);
        cr_expect(strstr(err, "is not an origin") != NULL, "%s", err);
    }
}

static void allow_headers(const char *requested, char *out, size_t cap)
{
    sl_api_cors_allow_headers(requested, requested ? strlen(requested) : 0, out, cap);
}

Test(api_cors, allow_headers_adds_what_was_asked_once_lowercased)
{
    char out[SL_API_CORS_HEADERS_MAX];
    allow_headers(NULL, out, sizeof out);
    cr_expect_str_eq(out, "authorization, content-type, x-request-id");
    allow_headers("Authorization, X-Stainless-OS,x-stainless-lang , Content-Type,X-Stainless-OS", out, sizeof out);
    cr_expect_str_eq(out, "authorization, content-type, x-request-id, x-stainless-os, x-stainless-lang");
    /* not header names: left out */
    allow_headers("bad header, a\"b, ok-one, (x)", out, sizeof out);
    cr_expect_str_eq(out, "authorization, content-type, x-request-id, ok-one");
    /* what does not fit is left out, the base always stays */
    allow_headers("x-aaaaaaaaaa, x-b", out, 50);
    cr_expect_str_eq(out, "authorization, content-type, x-request-id, x-b");
}
