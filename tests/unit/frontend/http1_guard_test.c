/* tests/unit/frontend/http1_guard_test.c: frontend/http1_guard.c, the
 * HTTP/1.1 framing check in front of libh2o. */
#include <criterion/criterion.h>
#include <string.h>

#include "frontend/http1_guard.h"

#define LIMIT (1u << 20)

/* Feeds s whole, then again one byte at a time: both must agree. Returns
 * the verdict; *msg gets the refused (or next) message index. */
static sl_http1_guard_verdict feed(const char *s, uint64_t *msg)
{
    sl_http1_guard a, b;
    sl_http1_guard_init(&a, LIMIT);
    sl_http1_guard_init(&b, LIMIT);
    size_t n = strlen(s), used = 0;
    sl_http1_guard_verdict va = sl_http1_guard_feed(&a, s, n, &used);
    sl_http1_guard_verdict vb = SL_HTTP1_GUARD_OK;
    for (size_t i = 0; i < n && vb == SL_HTTP1_GUARD_OK; i++)
        vb = sl_http1_guard_feed(&b, s + i, 1, &used);
    cr_assert_eq(va, vb, "whole vs bytewise differ on %s", s);
    cr_assert_eq(a.msg, b.msg);
    if (msg)
        *msg = a.msg;
    return va;
}

Test(http1_guard, passes_plain_messages_and_counts_them)
{
    uint64_t msg = 0;
    cr_expect_eq(feed("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                      "POST /t HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc"
                      "\r\nPOST /t HTTP/1.0\nTransfer-Encoding:  Chunked \n\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"
                      "GET / HTTP/1.1\r\n\r\n",
                      &msg),
                 SL_HTTP1_GUARD_OK);
    cr_expect_eq(msg, 4);
}

Test(http1_guard, body_bytes_are_never_parsed)
{
    uint64_t msg = 0;
    cr_expect_eq(feed("POST /t HTTP/1.1\r\nContent-Length: 29\r\n\r\nGET / HTTP/9.9\r\n \r\n\r\n\r\n\r\n\r\n"
                      "GET / HTTP/1.1\r\n\r\n", &msg),
                 SL_HTTP1_GUARD_OK);
    cr_expect_eq(msg, 2);
}

Test(http1_guard, refuses_smuggling_primitives)
{
    static const char *bad[] = {
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\n",
        "POST / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length : 1\r\n\r\n",
        "GET / HTTP/1.9\r\n\r\n",
        "GET / HTTP/2.0\r\n\r\n",
        "GET /\r\n\r\n",
        "GET / HTTP/1.1\rX\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n100001\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000001\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naX\r\n",
        "\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(feed(bad[i], NULL), SL_HTTP1_GUARD_REFUSE, "accepted: %s", bad[i]);
    }
}

Test(http1_guard, reports_which_message_and_where)
{
    static const char s[] = "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n";
    sl_http1_guard g;
    sl_http1_guard_init(&g, LIMIT);
    size_t used = 0;
    cr_assert_eq(sl_http1_guard_feed(&g, s, sizeof s - 1, &used), SL_HTTP1_GUARD_REFUSE);
    cr_expect_eq(g.msg, 1);
    cr_expect_eq(s[used], ' ');
    cr_expect(strstr(g.why, "obs-fold") != NULL);
    cr_expect_eq(sl_http1_guard_feed(&g, "x", 1, &used), SL_HTTP1_GUARD_REFUSE);   /* stays refused */
    cr_expect_eq(used, 0);
}

Test(http1_guard, chunk_at_the_limit_passes)
{
    sl_http1_guard g;
    sl_http1_guard_init(&g, 16);
    size_t used;
    cr_expect_eq(sl_http1_guard_feed(&g, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n", 52, &used),
                 SL_HTTP1_GUARD_OK);
    sl_http1_guard_init(&g, 16);
    cr_expect_eq(sl_http1_guard_feed(&g, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n", 52, &used),
                 SL_HTTP1_GUARD_REFUSE);
}
