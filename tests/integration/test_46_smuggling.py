"""40-level: request-smuggling primitives against tools/fe-harness. libh2o
2.2.5 accepts each of these and frames it its own way (the first of two
Content-Lengths, chunked over Content-Length, an obs-fold, HTTP/1.9, a
16-hex-digit chunk size it then waits on); the front end refuses them with
400 and closes the connection (RFC 9112 section 6.3), so nothing after the
refused request is ever served as a second request. Raw sockets send the
exact bytes; each case checks the status line, that the connection closed,
and that exactly one response came back."""
import json
import socket
import time

import pytest

from fe_harness import Harness, qwen3_model


@pytest.fixture(scope="module")
def model(make_model, tmp_path_factory):
    return qwen3_model(make_model, tmp_path_factory)


@pytest.fixture(scope="module")
def srv(model):
    h = Harness(model, "--ctx-size", 256, "--max-body", 65536, n=1)
    yield h
    assert h.stop() == 0


TOK = b'{"content":"h"}'         # a /tokenize body, 15 bytes
SMUGGLED = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def exchange(port, data, timeout=3.0):
    """Sends data on a new connection and reads until the server closes it.
    Returns (bytes received, closed by the server, seconds until close)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.time()
    s.sendall(data)
    out, closed = b"", False
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            out += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return out, closed, time.time() - t0


def assert_refused(srv, data):
    out, closed, took = exchange(srv.port, data)
    assert out.startswith(b"HTTP/1.1 400 "), out[:200]
    assert out.count(b"HTTP/1.1 ") == 1, out          # nothing smuggled through
    assert closed and took < 2.0, (closed, took)
    head = out.split(b"\r\n\r\n", 1)[0].lower()
    assert b"connection: close" in head
    body = out.split(b"\r\n\r\n", 1)[1]
    e = json.loads(body)["error"]
    assert e["type"] == "invalid_request_error" and e["code"] == "bad_http_framing", e
    assert srv.request("GET", "/health")[0] == 200


def test_two_content_lengths(srv):
    # h2o takes the first (15) and would serve the rest as a second request.
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 15\r\nContent-Length: " + str(15 + len(SMUGGLED)).encode() + b"\r\n\r\n"
            + TOK + SMUGGLED)
    assert_refused(srv, data)


def test_two_equal_content_lengths(srv):
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-Length: 15\r\n\r\n" + TOK)
    assert_refused(srv, data)


def test_content_length_and_transfer_encoding(srv):
    # h2o reads chunked and keeps the connection alive; a front proxy that
    # reads Content-Length would see the chunk as the body.
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"f\r\n" + TOK + b"\r\n0\r\n\r\n" + SMUGGLED)
    assert_refused(srv, data)


def test_transfer_encoding_then_content_length(srv):
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 20\r\n\r\n"
            b"f\r\n" + TOK + b"\r\n0\r\n\r\n" + SMUGGLED)
    assert_refused(srv, data)


def test_two_transfer_encodings(srv):
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"f\r\n" + TOK + b"\r\n0\r\n\r\n")
    assert_refused(srv, data)


@pytest.mark.parametrize("fold", [b" ", b"\t"])
def test_obs_fold_before_content_length(srv, fold):
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nX-Pad: a\r\n" + fold + b"b\r\nContent-Length: 15\r\n\r\n"
            + TOK + SMUGGLED)
    assert_refused(srv, data)


@pytest.mark.parametrize("version", [b"HTTP/1.9", b"HTTP/1.2"])
def test_unknown_http_version(srv, version):
    assert_refused(srv, b"GET /health " + version + b"\r\nHost: x\r\n\r\n" + SMUGGLED)


@pytest.mark.parametrize("size", [b"ffffffffffffffff", b"10000000000", b"0000000000000000000001"])
def test_absurd_chunk_size(srv, size):
    # picohttpparser takes up to 16 hex digits; h2o then waits for 2^64-1
    # bytes until the idle timeout. Any chunk larger than the body limit can
    # never complete: refused as soon as its size line is seen.
    data = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nab")
    out, closed, took = exchange(srv.port, data)
    assert out.startswith(b"HTTP/1.1 400 "), out[:200]
    assert closed and took < 2.0, (closed, took)
    assert srv.request("GET", "/health")[0] == 200


def test_absurd_chunk_size_after_a_keepalive_request(srv):
    # The guard follows the connection from request to request.
    ok = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=3.0)
    s.sendall(ok)
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    t0 = time.time()
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab")
    out = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        out += c
    s.close()
    assert out.startswith(b"HTTP/1.1 400 ") and time.time() - t0 < 2.0, out[:200]


@pytest.mark.parametrize("bad", [
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab",
    b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
])
def test_pipelined_bad_request_after_a_good_one(srv, bad):
    # The bad request is read together with the good one: the good one is
    # answered, and the connection closes after it; the bad one never runs.
    ok = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    out, closed, took = exchange(srv.port, ok + bad)
    assert out.startswith(b"HTTP/1.1 200 ") and out.count(b"HTTP/1.1 ") == 1, out
    assert b"connection: close" in out.lower()
    assert closed and took < 2.0, (closed, took)


def test_good_requests_still_pass(srv):
    # The same shapes without the ambiguity are served, kept alive and pipelined.
    chunked = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n" + TOK[:8] + b"\r\n7;ext=1\r\n" + TOK[8:] + b"\r\n0\r\nX-Trailer: y\r\n\r\n"
    cl = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n" + TOK
    h10 = b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    out, closed, _ = exchange(srv.port, chunked + cl + h10 + chunked + last)
    assert out.count(b"HTTP/1.1 200 ") == 5 and closed, out
    # Split at every byte boundary of a chunked request: the guard keeps its
    # place, which the refused request after it proves.
    for tail, n200, refused in ((last, 2, False), (b"GET /health HTTP/1.9\r\n\r\n", 1, True)):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=3.0)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(chunked)):
            s.sendall(chunked[i:i + 1])
            time.sleep(0.002)
        time.sleep(0.1)
        s.sendall(tail)
        out = b""
        while c := s.recv(65536):
            out += c
        s.close()
        assert out.count(b"HTTP/1.1 200 ") == n200, out
        assert (b"bad_http_framing" in out) == refused, out
