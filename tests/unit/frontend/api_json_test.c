/* tests/unit/frontend/api_json_test.c: frontend/api_json.c (UTF-8 checks). */
#include <criterion/criterion.h>
#include <string.h>

#include "frontend/api_json.h"

Test(api_json, utf8_prefix_and_floor)
{
    cr_expect_eq(sl_api_utf8_valid_prefix("abc", 3), 3);
    cr_expect_eq(sl_api_utf8_valid_prefix("a\xc3\xa9", 3), 3);
    cr_expect_eq(sl_api_utf8_valid_prefix("a\xc3", 2), 1);
    cr_expect_eq(sl_api_utf8_valid_prefix("a\xc0\xaf", 3), 1);            /* overlong */
    cr_expect_eq(sl_api_utf8_valid_prefix("\xed\xa0\x80", 3), 0);         /* surrogate */
    cr_expect_eq(sl_api_utf8_valid_prefix("\xf4\x90\x80\x80", 4), 0);     /* > U+10FFFF */
    cr_expect_eq(sl_api_utf8_valid_prefix("\xf0\x9f\x98\x80", 4), 4);
    cr_expect_eq(sl_api_utf8_floor("ab\xe2\x82", 4), 2);
    cr_expect_eq(sl_api_utf8_floor("ab\xe2\x82\xac", 5), 5);
    cr_expect_eq(sl_api_utf8_floor("ab\xf0\x9f\x98", 5), 2);
    cr_expect_eq(sl_api_utf8_floor("abc", 3), 3);
}


Test(api_json, lossy_strings_replace_maximal_invalid_subparts)
{
    /* as Python's bytes.decode("utf-8", errors="replace") */
    static const struct { const char *in; size_t n; const char *want; } t[] = {
        {"plain", 5, "plain"},
        {"a\xff" "b", 3, "a\xef\xbf\xbd" "b"},
        {"a\xe2\x82" "b", 4, "a\xef\xbf\xbd" "b"},              /* truncated 3-byte: one U+FFFD */
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},             /* overlong: two */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  /* surrogate: three */
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd"},
        {"\xe2\x82\xac", 3, "\xe2\x82\xac"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        json_t *v = sl_api_json_string_lossy(t[i].in, t[i].n);
        cr_assert_not_null(v);
        cr_expect_str_eq(json_string_value(v), t[i].want, "case %zu", i);
        json_decref(v);
    }
}
