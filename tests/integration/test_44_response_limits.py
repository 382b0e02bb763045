"""40-level, against the real `sluice serve`: responses are bounded too.
  - --max-response: a /detokenize whose text would pass it (a few ids can
    stand for a lot of text: a token of 128 spaces, repeated) is refused with
    400 response_too_large before the text is made; /tokenize likewise.
  - --write-timeout-ms covers every response, not only streams: a client that
    never reads a large non-streamed body is dropped, and the front end's
    memory comes back."""
import json
import socket
import time

import pytest

from serve import Server, wait_for

WRITE_MS = 1000


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(pid):
    """ASan keeps freed memory in quarantine: RSS does not come back there."""
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def post(srv, path, obj, timeout=30):
    import urllib.request
    req = urllib.request.Request(srv.base + path, data=json.dumps(obj).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def space_token(srv):
    """The id of a token whose text is many spaces, and that text's length."""
    for n in (128, 64, 32, 16):
        s, b = post(srv, "/tokenize", {"content": " " * n})
        toks = json.loads(b)["tokens"]
        if len(toks) == 1:
            return toks[0], n
    pytest.skip("no long whitespace token in this vocabulary")


@pytest.fixture
def server(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1,
               extra=["--max-response", "1M", "--write-timeout-ms", str(WRITE_MS), "--max-body", "16M"])
    yield s
    s.stop()


def test_detokenize_past_max_response_is_refused(server):
    tok, n = space_token(server)
    copies = (1 << 20) // n + 1
    s, b = post(server, "/detokenize", {"tokens": [tok] * copies})
    assert s == 400, b[:200]
    e = json.loads(b)["error"]
    assert e["code"] == "response_too_large" and "--max-response" in e["message"], e
    s, b = post(server, "/detokenize", {"tokens": [tok] * (copies // 2)})
    assert s == 200 and len(json.loads(b)["content"]) == n * (copies // 2)
    s, b = post(server, "/tokenize", {"content": "a b " * 200000})
    assert s == 400 and json.loads(b)["error"]["code"] == "response_too_large"
    assert server.get("/health")[0] == 200


def test_never_reading_client_of_a_large_body_is_dropped(chat_model, tmp_path):
    srv = Server(chat_model, tmp_path, frontends=1, extra=["--write-timeout-ms", str(WRITE_MS), "--max-body", "16M"])
    try:
        tok, n = space_token(srv)
        copies = (48 << 20) // n                      # a ~48 MiB body from ~1 MB of ids
        body = json.dumps({"tokens": [tok] * copies}).encode()
        fe = srv.pids()[1][0]
        base = rss_kib(fe)
        clients = []
        for _ in range(3):
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.connect(("127.0.0.1", srv.port))
            c.sendall(b"POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            clients.append(c)
        peak = 0
        t0 = time.time()
        while time.time() - t0 < 30:                   # (building each body takes seconds under ASan)
            peak = max(peak, rss_kib(fe))
            freed = sanitized(fe) or rss_kib(fe) < base + 64 * 1024
            if freed and srv.log_path.read_text().count("write timeout") >= 3:
                break
            time.sleep(0.1)
        took = time.time() - t0
        after = rss_kib(fe)
        log = srv.log_path.read_text()
        print(f"front end RSS: base {base // 1024} MiB, peak {peak // 1024} MiB, after {after // 1024} MiB, {took:.1f} s")
        assert peak > base + 100 * 1024               # the bodies were built
        assert log.count("write timeout") >= 3, log[-2000:]
        assert sanitized(fe) or after < base + 64 * 1024, (base, peak, after)
        for c in clients:                              # the server closed them
            # what the kernel still held of the response arrives before the
            # end of stream (more of it on a machine whose send buffers grow
            # larger), so drain until EOF or reset, with a deadline, rather
            # than stopping at the first momentarily empty receive buffer
            c.settimeout(10)
            gone = False
            try:
                while True:
                    d = c.recv(1 << 20)
                    if not d:
                        gone = True
                        break
            except socket.timeout:
                pass
            except ConnectionResetError:
                gone = True
            c.close()
            assert gone
        assert srv.get("/health")[0] == 200
    finally:
        srv.stop()
