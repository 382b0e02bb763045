/* tests/unit/frontend/api_sse_test.c: frontend/api_sse.c event framing. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_error.h"
#include "frontend/api_sse.h"
#include "tests/unit/frontend/json_expect.h"

Test(api_sse, frames_data_events)
{
    char out[64];
    size_t n = sl_api_sse_frame(out, sizeof out, "{\"a\":1}", 7);
    cr_assert_eq(n, strlen("data: {\"a\":1}\n\n"));
    cr_expect(memcmp(out, "data: {\"a\":1}\n\n", n) == 0);
    n = sl_api_sse_frame(out, sizeof out, "l1\nl2\r\nl3", 9);
    cr_assert_eq(n, strlen("data: l1\ndata: l2\ndata: l3\n\n"));
    cr_expect(memcmp(out, "data: l1\ndata: l2\ndata: l3\n\n", n) == 0);
    /* size query and truncation never write past cap */
    cr_expect_eq(sl_api_sse_frame(NULL, 0, "xyz", 3), 11);
    memset(out, '#', sizeof out);
    cr_expect_eq(sl_api_sse_frame(out, 4, "xyz", 3), 11);
    cr_expect_eq(out[4], '#');
    size_t m;
    char *d = sl_api_sse_frame_dup("", 0, &m);
    cr_expect_str_eq(d, "data: \n\n");
    cr_expect_eq(m, 8);
    free(d);
    cr_expect_str_eq(SL_API_SSE_DONE, "data: [DONE]\n\n");
    cr_expect_str_eq(SL_API_SSE_PING, ": ping\n\n");
}

Test(api_sse, error_event_is_one_data_line_with_error_object)
{
    sl_api_error e;
    sl_api_error_set(&e, SL_API_ERR_INTERNAL, NULL, "worker died\nmid-stream");
    size_t n;
    char *s = sl_api_sse_error(&e, &n);
    cr_assert_not_null(s);
    cr_expect_eq(strncmp(s, "data: {\"error\":", 15), 0, "%s", s);
    cr_expect_eq(strlen(s), n);
    cr_expect_str_eq(s + n - 2, "\n\n");
    cr_expect_null(strchr(s, '\n') == s + n - 2 ? NULL : strchr(s, '\n'));  /* one line only */
    json_t *o = json_expect_load(s + 6);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "type")), "server_error");
    json_decref(o);
    free(s);
}

