"""40-level: the front end's HTTP protocol and malformed input, end to end over
loopback against tools/fe-harness (front ends + echo worker): every bad
request gets the right 4xx with an OpenAI error body and the server keeps
serving; limits, auth, readiness, request ids, raw malformed HTTP."""
import json
import socket
import time

import pytest

from fe_harness import Harness, qwen3_model, sse_events

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def model(make_model, tmp_path_factory):
    return qwen3_model(make_model, tmp_path_factory)


@pytest.fixture(scope="module")
def srv(model):
    h = Harness(model, "--ctx-size", 256, "--max-body", 65536, n=2)
    yield h
    assert h.stop() == 0


def error_of(body):
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert isinstance(e["message"], str) and e["message"]
    return e


def test_health_ready_models(srv):
    s, h, b = srv.request("GET", "/health")
    assert s == 200 and json.loads(b) == {"status": "ok"}
    assert h["content-type"] == "application/json"
    s, _, b = srv.request("GET", "/ready")
    assert s == 200
    s, _, b = srv.request("GET", "/v1/models")
    m = json.loads(b)
    assert s == 200 and m["object"] == "list" and m["data"][0]["object"] == "model"
    name = m["data"][0]["id"]
    s, _, b = srv.request("GET", "/v1/models/" + name)
    assert s == 200 and json.loads(b)["id"] == name
    s, _, b = srv.request("GET", "/v1/models/nope")
    assert s == 404 and error_of(b)["code"] == "model_not_found"


def test_request_id_echoed_or_generated(srv):
    s, h, _ = srv.request("GET", "/health", headers={"X-Request-ID": "abc-123"})
    assert h["x-request-id"] == "abc-123"
    s, h, _ = srv.request("GET", "/health")
    assert len(h["x-request-id"]) == 32
    s, h, _ = srv.request("GET", "/health", headers={"X-Request-ID": "x" * 200})
    assert len(h["x-request-id"]) == 32            # too long: replaced
    s, h, _ = srv.post(COMP, {"prompt": "hi", "stream": True}, headers={"X-Request-ID": "stream-1"})
    assert s == 200 and h["x-request-id"] == "stream-1"
    assert "request_id=stream-1" in srv.stderr()


def test_unknown_route_and_method(srv):
    s, _, b = srv.request("GET", "/v2/nothing")
    assert s == 404 and error_of(b)["type"] == "not_found_error"
    s, h, b = srv.request("GET", CHAT)
    assert s == 405 and error_of(b)["code"] == "method_not_allowed" and h["allow"] == "POST"
    s, h, b = srv.request("DELETE", "/health")
    assert s == 405 and h["allow"] == "GET, HEAD"


BAD = [
    # (path, body, status, param or None)
    (CHAT, b"", 400, None),
    (CHAT, b"{", 400, None),
    (CHAT, b"[]", 400, None),
    (CHAT, b"null", 400, None),
    (CHAT, b'"text"', 400, None),
    (CHAT, b"\xff\xfe{}", 400, None),
    (CHAT, b'{"messages": [{"role":"user","content":"a"}], "a": 1, "a": 2}', 400, None),
    (CHAT, b'{"messages": [{"role":"user","content":"\\ud800"}]}', 400, None),
    (CHAT, b'{"messages": [{"role":"user","content":"a"}], "temperature": NaN}', 400, None),
    (CHAT, b"[" * 100 + b"]" * 100, 400, None),
    (CHAT, {}, 400, "messages"),
    (CHAT, {"messages": []}, 400, "messages"),
    (CHAT, {"messages": "hi"}, 400, "messages"),
    (CHAT, {"messages": [1]}, 400, "messages[0]"),
    (CHAT, {"messages": [{"content": "x"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, 400, None),
    (CHAT, {"messages": MSG, "temperature": -1}, 400, "temperature"),
    (CHAT, {"messages": MSG, "temperature": 3}, 400, "temperature"),
    (CHAT, {"messages": MSG, "temperature": "hot"}, 400, "temperature"),
    (CHAT, {"messages": MSG, "top_p": 0}, 400, "top_p"),
    (CHAT, {"messages": MSG, "top_p": 1.5}, 400, "top_p"),
    (CHAT, {"messages": MSG, "top_k": -5}, 400, "top_k"),
    (CHAT, {"messages": MSG, "min_p": 2}, 400, "min_p"),
    (CHAT, {"messages": MSG, "presence_penalty": 5}, 400, "presence_penalty"),
    (CHAT, {"messages": MSG, "frequency_penalty": -5}, 400, "frequency_penalty"),
    (CHAT, {"messages": MSG, "max_tokens": 0}, 400, "max_tokens"),
    (CHAT, {"messages": MSG, "max_tokens": -1}, 400, "max_tokens"),
    (CHAT, {"messages": MSG, "max_tokens": 1.5}, 400, "max_tokens"),
    (CHAT, {"messages": MSG, "n": 17}, 400, "n"),
    (CHAT, {"messages": MSG, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    (CHAT, {"messages": MSG, "stop": [""]}, 400, None),
    (CHAT, {"messages": MSG, "stop": 7}, 400, "stop"),
    (CHAT, {"messages": MSG, "stream": "yes"}, 400, "stream"),
    (CHAT, {"messages": MSG, "stream_options": {"include_usage": True}}, 400, None),
    (CHAT, {"messages": MSG, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    (CHAT, {"messages": MSG, "top_logprobs": 2}, 400, None),
    (CHAT, {"messages": MSG, "logit_bias": {"abc": 1}}, 400, None),
    (CHAT, {"messages": MSG, "logit_bias": {"1": 500}}, 400, None),
    (CHAT, {"messages": MSG, "logit_bias": {"999999999": 1}}, 400, None),
    (CHAT, {"messages": MSG, "seed": "x"}, 400, "seed"),
    (CHAT, {"messages": MSG, "model": "not-this-one"}, 404, "model"),
    (CHAT, {"messages": MSG, "max_tokens": 1000}, 400, "max_tokens"),        # context 256
    (CHAT, {"messages": [{"role": "user", "content": "word " * 400}]}, 400, "messages"),
    (COMP, {}, 400, "prompt"),
    (COMP, {"prompt": 5}, 400, "prompt"),
    (COMP, {"prompt": ["a", "b"]}, 400, "prompt"),
    (COMP, {"prompt": [1, -2]}, 400, None),
    (COMP, {"prompt": [10 ** 9]}, 400, None),
    (COMP, {"prompt": "hi", "logprobs": 6}, 400, "logprobs"),
    (COMP, {"prompt": "hi", "max_tokens": 300}, 400, "max_tokens"),
    (COMP, {"prompt": "a" * 3000}, 400, "prompt"),
    ("/tokenize", b"{", 400, None),
    ("/tokenize", {"content": 5}, 400, None),
    ("/detokenize", {"tokens": "x"}, 400, None),
    ("/detokenize", {"tokens": [-1]}, 400, None),
]


@pytest.mark.parametrize("path,body,status,param", BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_request(srv, path, body, status, param):
    s, h, b = srv.post(path, body)
    assert s == status, b
    assert h["content-type"] == "application/json"
    e = error_of(b)
    if param is not None:
        assert e["param"] == param, e
    if status == 400 and param in ("max_tokens", "messages", "prompt") and "context" in e["message"]:
        assert e["code"] == "context_length_exceeded"
    # The server keeps serving.
    assert srv.request("GET", "/health")[0] == 200


def metric(srv, name):
    t = srv.request("GET", "/metrics")[2].decode()
    return float(next(ln.split()[-1] for ln in t.splitlines() if ln.startswith((name + " ", name + "{"))))


def test_bad_requests_on_one_connection_never_reach_the_worker(srv):
    """The whole table on one keep-alive connection: each bad request is
    answered by the front end (none is submitted to the worker, no mailbox is
    taken) and the connection stays open for the next one."""
    import http.client
    submitted = metric(srv, "sluice_requests_submitted_total")
    free = srv.wait_mailboxes_free(64)["free"]
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.connect()
    sock = c.sock
    for i, (path, body, status, _) in enumerate(BAD):
        c.request("POST", path, body=json.dumps(body) if isinstance(body, (dict, list)) else body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        b = r.read()
        assert r.status == status, (i, b)
        assert "error" in json.loads(b), (i, b)
        assert not r.will_close and c.sock is sock, f"request {i} closed the connection"
    c.close()
    assert metric(srv, "sluice_requests_submitted_total") == submitted
    assert srv.wait_mailboxes_free(free)["free"] == free


def test_n_choices(srv):
    # n=1 (or absent, or null) is one choice; n up to 16 is that many, each
    # its own mailbox (the echo worker answers each alike); past 16 is a 400
    # naming `n` and the limit (docs/API.md).
    for extra in ({}, {"n": 1}, {"n": None}):
        s, _, b = srv.post(CHAT, {"messages": MSG, **extra})
        r = json.loads(b)
        assert s == 200 and len(r["choices"]) == 1 and r["choices"][0]["index"] == 0, b
    s, _, b = srv.post(COMP, {"prompt": "hi", "n": 1})
    assert s == 200 and [c["index"] for c in json.loads(b)["choices"]] == [0]
    s, _, b = srv.post(COMP, {"prompt": "hi", "n": 3})
    r = json.loads(b)
    assert s == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2], b
    assert len({c["text"] for c in r["choices"]}) == 1
    assert r["usage"]["completion_tokens"] == 3 * (r["usage"]["prompt_tokens"] + 1)   # echo + EOS, each
    for route, body in ((CHAT, {"messages": MSG, "n": 17}), (COMP, {"prompt": "hi", "n": 0})):
        s, _, b = srv.post(route, body)
        e = error_of(b)
        assert s == 400 and e["param"] == "n" and "16" in e["message"]


def test_context_check_message(srv):
    s, _, b = srv.post(COMP, {"prompt": "hello", "max_tokens": 256})
    e = error_of(b)
    assert s == 400 and e["code"] == "context_length_exceeded" and "256" in e["message"]


LIMIT = 65536    # the srv fixture's --max-body


def padded_tokenize_body(size):
    """A valid /tokenize body of exactly `size` bytes."""
    head, tail = b'{"content": "x"', b"}"
    return head + b" " * (size - len(head) - len(tail)) + tail


def test_body_limit_413(srv):
    s, h, b = srv.post(CHAT, b"{" + b" " * 70000 + b"}")
    assert s == 413 and h["content-type"] == "application/json"
    e = error_of(b)
    assert e["type"] == "invalid_request_error" and e["code"] == "request_too_large"
    assert str(LIMIT) in e["message"]
    assert srv.request("GET", "/health")[0] == 200


def test_body_exactly_at_limit_is_accepted(srv):
    body = padded_tokenize_body(LIMIT)
    assert len(body) == LIMIT
    s, _, b = srv.post("/tokenize", body)
    assert s == 200, b
    s, _, b = srv.post("/tokenize", padded_tokenize_body(LIMIT + 1))
    assert s == 413 and error_of(b)["code"] == "request_too_large"


def raw_response(out):
    """Splits one raw HTTP/1.1 response into (status, headers, body), de-chunking if needed."""
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    if hdrs.get("transfer-encoding") == "chunked":
        out_body, rest = b"", body
        while rest:
            n, rest = rest.split(b"\r\n", 1)
            n = int(n, 16)
            if n == 0:
                break
            out_body += rest[:n]
            rest = rest[n + 2:]
        body = out_body
    elif "content-length" in hdrs:
        body = body[:int(hdrs["content-length"])]
    return int(lines[0].split()[1]), hdrs, body


def test_body_limit_413_chunked(srv):
    def chunked(data, piece=4096):
        out = b""
        for i in range(0, len(data), piece):
            c = data[i:i + piece]
            out += b"%x\r\n" % len(c) + c + b"\r\n"
        return out + b"0\r\n\r\n"
    head = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    s, h, b = raw_response(srv.raw(head + chunked(padded_tokenize_body(LIMIT + 1))))
    assert s == 413 and h["content-type"] == "application/json"
    e = error_of(b)
    assert e["type"] == "invalid_request_error" and e["code"] == "request_too_large"
    s, h, b = raw_response(srv.raw(head + chunked(padded_tokenize_body(LIMIT))))
    assert s == 200 and json.loads(b)["tokens"]
    assert srv.request("GET", "/health")[0] == 200


def test_body_far_over_limit_is_h2os_413(srv):
    # Beyond max_body + max(max_body, 1 MiB) h2o answers itself, from
    # Content-Length, before reading the body (docs/API.md: known limit).
    n = LIMIT + (1 << 20) + 1
    out = srv.raw(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(n).encode()
                  + b"\r\n\r\n", timeout=5.0)
    assert out.startswith(b"HTTP/1.1 413")
    assert srv.request("GET", "/health")[0] == 200


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"\x00\x01\x02\x03\r\n\r\n",
])
def test_malformed_http(srv, raw):
    out = srv.raw(raw, timeout=2.0)
    if out:
        assert out.startswith(b"HTTP/1.1 4"), out[:80]
    assert srv.request("GET", "/health")[0] == 200


def test_pipelined_and_keepalive(srv):
    req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3
    out = srv.raw(req + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200") == 4


def test_http10_stream_is_close_delimited(srv):
    body = json.dumps({"prompt": "one two three", "stream": True}).encode()
    out = srv.raw(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 200")
    assert out.endswith(b"data: [DONE]\n\n")


def test_stream_ends_with_done_and_is_chunked(srv):
    s, h, b = srv.post(COMP, {"prompt": "one two three", "stream": True})
    assert s == 200 and h["content-type"] == "text/event-stream"
    ev = sse_events(b)
    assert ev[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1] if json.loads(e)["choices"])
    assert text == "one two three"


def test_metrics(srv):
    srv.post(COMP, {"prompt": "metrics please"})
    s, h, b = srv.request("GET", "/metrics")
    t = b.decode()
    assert s == 200 and h["content-type"].startswith("text/plain; version=0.0.4")
    for name in ["sluice_requests_submitted_total", "sluice_requests_running", "sluice_requests_waiting",
                 "sluice_time_to_first_token_seconds_bucket", "sluice_e2e_request_latency_seconds_count",
                 "sluice_kv_cache_usage_ratio", "sluice_generation_tokens_total"]:
        assert name in t, name
    sub = [ln for ln in t.splitlines() if ln.startswith("sluice_requests_submitted_total{")]
    assert float(sub[0].split()[-1]) >= 1


def test_effective_config(srv):
    c = srv.config()
    assert c["worker"]["kind"] == "echo"
    f = c["frontend"]
    assert f["slot"] in (0, 1) and f["ctx_size"] == 256 and f["api_key_set"] is False
    assert f["mailboxes"]["free"] == 64


def test_tokenize_roundtrip(srv):
    s, _, b = srv.post("/tokenize", {"content": "Hello world"})
    toks = json.loads(b)["tokens"]
    assert s == 200 and len(toks) >= 2
    s, _, b = srv.post("/detokenize", {"tokens": toks})
    assert s == 200 and json.loads(b)["content"] == "Hello world"


# ---------------------------------------------------------------- servers with special settings

def test_api_key(model):
    h = Harness(model, "--api-key", "s3cret", n=1)
    try:
        assert h.request("GET", "/health")[0] == 200          # exempt
        assert h.request("GET", "/ready")[0] == 200           # exempt
        s, _, b = h.request("GET", "/v1/models")
        assert s == 401 and error_of(b)["type"] == "authentication_error"
        s, _, b = h.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert s == 401
        s, _, b = h.request("GET", "/v1/models", headers={"Authorization": "Bearer s3cret!"})
        assert s == 401
        s, _, b = h.request("GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert s == 200
        s, _, _ = h.post(COMP, {"prompt": "x"}, headers={"Authorization": "Bearer s3cret"})
        assert s == 200
        assert "s3cret" not in h.stderr()
        assert "s3cret" not in json.dumps(h.request("GET", "/v1/effective-config",
                                                     headers={"Authorization": "Bearer s3cret"})[2].decode())
    finally:
        assert h.stop() == 0


def test_not_ready_503(model):
    h = Harness(model, "--ready-after-ms", 600000, n=1)
    try:
        s, hd, b = h.request("GET", "/ready")
        assert s == 503 and json.loads(b)["status"] == "unavailable"
        s, hd, b = h.post(CHAT, {"messages": MSG})
        assert s == 503 and error_of(b)["type"] == "unavailable_error" and hd["retry-after"] == "1"
        assert h.request("GET", "/health")[0] == 200
    finally:
        assert h.stop() == 0


def open_stream(h, body):
    """Sends a streaming request on a raw socket and returns the socket."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", h.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def test_queue_full_429(model):
    h = Harness(model, "--mailboxes", 2, "--token-ms", 200, n=1)
    try:
        socks = [open_stream(h, {"prompt": "a b c d e f g h", "stream": True}) for _ in range(2)]
        for s in socks:
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        st, hd, b = h.post(COMP, {"prompt": "third"})
        assert st == 429 and hd["retry-after"] == "1" and error_of(b)["type"] == "rate_limit_error"
        for s in socks:
            s.close()
        assert h.wait_mailboxes_free(2)["free"] == 2
        assert h.post(COMP, {"prompt": "again"})[0] == 200
    finally:
        assert h.stop() == 0


def test_disconnect_mid_stream_frees_mailbox(model):
    h = Harness(model, "--token-ms", 50, n=2)
    try:
        for _ in range(3):
            s = open_stream(h, {"prompt": "word " * 100, "stream": True})
            got = b""
            while got.count(b"data: ") < 3:
                got += s.recv(4096)
            s.close()
        m = h.wait_mailboxes_free(64)
        assert m["free"] == 64, m
        assert "status=499" in h.stderr()
    finally:
        assert h.stop() == 0


def test_disconnect_while_queued_is_seen_by_the_probe(model):
    h = Harness(model, "--first-token-ms", 5000, n=1)
    try:
        t0 = time.time()
        s = open_stream(h, {"prompt": "hello", "stream": True})
        time.sleep(0.3)      # queued: the headers wait for the first token (or a ping at 5 s)
        s.close()
        m = h.wait_mailboxes_free(64, timeout=3)
        assert m["free"] == 64 and time.time() - t0 < 3, m
        # non-streaming too: nothing was sent yet when the client left
        s = socket.create_connection(("127.0.0.1", h.port))
        d = json.dumps({"prompt": "hello"}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(d)).encode()
                  + b"\r\n\r\n" + d)
        time.sleep(0.3)
        s.close()
        assert h.wait_mailboxes_free(64, timeout=3)["free"] == 64
    finally:
        assert h.stop() == 0


def test_ping_while_queued(model):
    h = Harness(model, "--first-token-ms", 6000, n=1)
    try:
        s = open_stream(h, {"prompt": "hello", "stream": True})
        got = b""
        t0 = time.time()
        while b": ping" not in got and time.time() - t0 < 8:
            got += s.recv(4096)
        assert b": ping\n\n" in got
        s.close()
    finally:
        assert h.stop() == 0


def test_slow_reader_loses_nothing(model):
    # A 4-entry token ring: the worker must pause while the client dawdles.
    h = Harness(model, "--token-ring", 4, n=1)
    try:
        prompt = " ".join(f"w{i}" for i in range(120))
        s = open_stream(h, {"prompt": prompt, "stream": True})
        s.settimeout(10)
        got = b""
        while not got.endswith(b"data: [DONE]\n\n\r\n") and b"0\r\n\r\n" not in got[-16:]:
            time.sleep(0.002)
            c = s.recv(512)
            if not c:
                break
            got += c
        s.close()
        body = got.split(b"\r\n\r\n", 1)[1]
        # de-chunk
        out, rest = b"", body
        while rest:
            n, rest = rest.split(b"\r\n", 1)
            n = int(n, 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        ev = sse_events(out)
        text = "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1] if json.loads(e)["choices"])
        assert text == prompt and ev[-1] == "[DONE]"
    finally:
        assert h.stop() == 0


def test_mid_stream_failure_is_a_final_error_event(model):
    h = Harness(model, "--fail-after", 3, n=1)
    try:
        s, _, b = h.post(COMP, {"prompt": "one two three four five six", "stream": True})
        ev = sse_events(b)
        assert s == 200 and "[DONE]" not in ev
        e = json.loads(ev[-1])["error"]
        assert "injected failure" in e["message"] and e["type"] == "server_error"
        s, _, b = h.post(COMP, {"prompt": "one two three four five six"})
        assert s == 500 and "injected failure" in error_of(b)["message"]
        assert h.wait_mailboxes_free(64)["free"] == 64
        assert h.request("GET", "/health")[0] == 200
    finally:
        assert h.stop() == 0


def test_drain_finishes_in_flight_stream(model):
    h = Harness(model, "--token-ms", 20, "--drain-delay-s", 0, n=1)
    s = open_stream(h, {"prompt": "word " * 40, "stream": True})
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    h.proc.send_signal(15)
    got = b""
    s.settimeout(10)
    while True:
        c = s.recv(65536)
        if not c:
            break
        got += c
    s.close()
    assert b"data: [DONE]" in got
    h.proc.wait(15)
    assert h.stop() == 0


def test_write_timeout_drops_a_client_that_stops_reading(model):
    # A tiny receive window and ~16 MB of logprobs: the writes stall, the
    # front end drops the client after --write-timeout-ms and frees the mailbox.
    h = Harness(model, "--ctx-size", 32768, "--write-timeout-ms", 500, "--max-body", 4000000, n=1)
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", h.port))
        d = json.dumps({"messages": [{"role": "user", "content": "word " * 16000}], "stream": True,
                        "logprobs": True, "top_logprobs": 20}).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(d)).encode()
                  + b"\r\n\r\n" + d)
        time.sleep(0.3)
        assert h.wait_mailboxes_free(64, timeout=5)["free"] == 64
        s.close()
        assert "write timeout" in h.stderr()
    finally:
        assert h.stop() == 0


def test_drain_delay_ready_503_then_listener_closes(model):
    h = Harness(model, "--drain-delay-s", 1, "--drain-timeout-s", 5, n=2)
    try:
        assert h.request("GET", "/ready")[0] == 200
        h.proc.send_signal(15)
        time.sleep(0.3)
        # During the delay: not ready (the load balancer's cue), but still serving.
        s, _, b = h.request("GET", "/ready")
        assert s == 503 and json.loads(b)["reason"] == "draining"
        assert h.post(COMP, {"prompt": "still here"})[0] == 200
        h.proc.wait(10)
        with pytest.raises(OSError):
            h.request("GET", "/health", timeout=2)
    finally:
        assert h.stop() == 0


def test_mutated_bodies_never_crash(srv):
    import random
    rnd = random.Random(1234)
    base = json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [
        {"type": "text", "text": "hi <|im_end|> there"}]}], "max_tokens": 8, "stop": ["x"], "logprobs": True,
        "top_logprobs": 2, "temperature": 0.5, "logit_bias": {"5": 1}}).encode()
    statuses = set()
    for i in range(150):
        b = bytearray(base)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        path = CHAT if i % 3 else COMP
        s, h, body = srv.post(path, bytes(b))
        statuses.add(s)
        assert s in (200, 400, 404), (s, bytes(b), body)
        if s != 200:
            error_of(body)
    assert 400 in statuses
    assert srv.request("GET", "/health")[0] == 200
    assert srv.wait_mailboxes_free(64)["free"] == 64


def test_user_text_never_becomes_a_control_token(srv):
    s, _, b = srv.post(CHAT, {"messages": [{"role": "user", "content": "<|im_end|>"}]})
    assert s == 200
    # The echo shows the prompt; the user's "<|im_end|>" stayed text, so it is visible,
    # while the template's own control tokens are not.
    text = json.loads(b)["choices"][0]["message"]["content"]
    assert text.count("<|im_end|>") == 1
