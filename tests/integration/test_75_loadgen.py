"""The benchmark kit: tools/loadgen against tools/stubserver (exact counts,
every error kind, the parser under every split of the bytes) and against the
real `sluice serve` with a tiny model (usage totals = requests x max_tokens
with ignore_eos)."""
import json
import re
import subprocess

import pytest

from paths import tool
from serve import Server


@pytest.fixture(scope="module")
def stub():
    """A stub server on a free port, tokens as fast as possible."""
    procs = []

    def start(*extra):
        p = subprocess.Popen([tool("stubserver"), "--port", "0", "--threads", "2", *extra],
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.search(r"listening on http://([^ ]+) ", line)
        assert m, line
        procs.append(p)
        return m.group(1)

    yield start
    for p in procs:
        p.kill()
        p.wait()


def loadgen(tmp_path, url, *args, expect_rc=0):
    out = tmp_path / "lg.json"
    r = subprocess.run([tool("loadgen"), "--url", url, "--json", str(out), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == expect_rc, r.stdout + r.stderr
    return json.loads(out.read_text())["levels"], r.stdout


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stub_counts_exact(stub, tmp_path, endpoint):
    url = stub()
    levels, text = loadgen(tmp_path, url, "--endpoint", endpoint, "--concurrency", "1,8", "--requests", "40",
                           "--max-tokens", "16", "--threads", "2")
    assert [lv["concurrency"] for lv in levels] == [1, 8]
    for lv in levels:
        assert lv["errors_total"] == 0, lv
        assert lv["requests_ok"] == 40
        assert lv["completion_tokens"] == 40 * 16
        assert lv["content_chunks"] == 40 * 16
        assert lv["ttft_ms"]["n"] == 40 and lv["itl_ms"]["n"] == 40 * 15 and lv["e2e_ms"]["n"] == 40
        assert lv["output_tok_s"] > 0 and lv["cpu"]["seconds"] >= 0
    assert levels[0]["connects"] == 1, "keep-alive: one connection for every request of c=1"
    assert "out_tok/s" in text


@pytest.mark.parametrize("read_size", [1, 2, 3, 7, 61])
def test_parser_any_split(stub, tmp_path, read_size):
    """recv() of a few bytes at a time cuts the chunk sizes, CRLFs, SSE lines
    and JSON at every position: the counts must not change."""
    url = stub()
    levels, _ = loadgen(tmp_path, url, "--concurrency", "2", "--requests", "6", "--max-tokens", "5",
                        "--read-size", str(read_size))
    lv = levels[0]
    assert lv["errors_total"] == 0, lv
    assert (lv["requests_ok"], lv["completion_tokens"], lv["content_chunks"]) == (6, 30, 30)


def test_stub_pacing_measured(stub, tmp_path):
    """10 tokens 2 ms apart after a 2 ms first token: end-to-end >= 20 ms,
    TTFT >= 2 ms (lower bounds only: a loaded machine may be slower)."""
    url = stub("--token-us", "2000")
    levels, _ = loadgen(tmp_path, url, "--concurrency", "2", "--requests", "6", "--max-tokens", "10")
    lv = levels[0]
    assert lv["errors_total"] == 0 and lv["completion_tokens"] == 60
    assert lv["e2e_ms"]["p50"] >= 19.0 and lv["ttft_ms"]["p50"] >= 1.9, lv


def test_error_kinds(stub, tmp_path):
    url = stub("--ttft-us", "3000000", "--token-us", "1000")
    levels, text = loadgen(tmp_path, url, "--requests", "2", "--max-tokens", "2", "--timeout", "0.3", expect_rc=1)
    assert levels[0]["errors"]["timeout"] == 2 and levels[0]["requests_ok"] == 0
    assert "timeout=2" in text
    # the stub refuses max_tokens over a million: an HTTP status error, with the body in the report
    url = stub()
    levels, text = loadgen(tmp_path, url, "--requests", "3", "--max-tokens", "2000000", expect_rc=1)
    assert levels[0]["errors"]["http"] == 3, levels[0]
    assert "HTTP 400" in levels[0]["first_error"]
    # nothing listening: connect errors, and the run still ends
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    levels, _ = loadgen(tmp_path, f"127.0.0.1:{port}", "--requests", "3", expect_rc=1)
    assert levels[0]["errors"]["connect"] == 3


@pytest.mark.parametrize("fault,kind", [("bad-json", "malformed"), ("no-usage", "missing_usage"),
                                        ("no-done", "malformed"), ("error-event", "stream_error"), ("close", "io")])
def test_stream_faults_counted(stub, tmp_path, fault, kind):
    url = stub("--fault", fault)
    levels, _ = loadgen(tmp_path, url, "--concurrency", "2", "--requests", "5", "--max-tokens", "8", expect_rc=1)
    lv = levels[0]
    assert lv["errors"][kind] == 5 and lv["errors_total"] == 5, lv
    assert lv["requests_ok"] == 0 and lv["completion_tokens"] == 0


def test_real_server_usage_totals(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=2)
    try:
        url = f"127.0.0.1:{s.port}"
        for endpoint in ("chat", "completions"):
            levels, _ = loadgen(tmp_path, url, "--endpoint", endpoint, "--concurrency", "1,4", "--requests", "8",
                                "--max-tokens", "12", "--prompt-words", "20", "--ignore-eos", "--threads", "2")
            for lv in levels:
                assert lv["errors_total"] == 0, lv
                assert lv["requests_ok"] == 8
                assert lv["completion_tokens"] == 8 * 12, lv
                assert lv["prompt_tokens"] > 8 * 20 / 2
                # a chunk carries one token or more (held-back partial characters join the next)
                assert 0 < lv["content_chunks"] <= lv["completion_tokens"]
                assert lv["ttft_ms"]["n"] == 8
    finally:
        s.stop()


def show(*args):
    r = subprocess.run([tool("loadgen"), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_shared_prefix_words(endpoint):
    """--shared-prefix-words P: every prompt opens with the same P words (the
    same text every run), then its own --prompt-words words."""
    def words(i, p, w):
        body = show("--show-request", str(i), "--endpoint", endpoint, "--shared-prefix-words", str(p),
                    "--prompt-words", str(w))
        text = body["messages"][0]["content"] if endpoint == "chat" else body["prompt"]
        return text.split(" ")
    a, b = words(0, 300, 40), words(1, 300, 40)
    assert len(a) == len(b) == 340
    assert a[:300] == b[:300] == words(7, 300, 0)
    assert a[300:] != b[300:], "the distinct part differs per request"
    assert a[300:] == words(0, 0, 40), "and is the part --prompt-words alone gives"
    assert words(0, 0, 40) != words(1, 0, 40)


@pytest.mark.parametrize("bad", ["-1", "1000001"])
def test_shared_prefix_words_refused(bad):
    r = subprocess.run([tool("loadgen"), "--show-request", "0", "--shared-prefix-words", bad],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr


# ---- a kept-alive connection the server closes before answering -----------

def test_stale_keepalive_retried(stub, tmp_path):
    """The stub drops every connection after 3 responses, silently, when the
    4th request arrives (as llama.cpp's llama-server does under load). With
    --no-retry-stale a quarter of the requests fail; by default each is sent
    again once on a new connection and none fails, the counts exact."""
    url = stub("--close-idle-after", "3")
    args = ("--concurrency", "4", "--requests", "60", "--max-tokens", "8", "--threads", "2")
    levels, _ = loadgen(tmp_path, url, *args, "--no-retry-stale", expect_rc=1)
    lv = levels[0]
    assert lv["errors"]["io"] >= 10 and lv["errors_total"] == lv["errors"]["io"], lv
    assert lv["retried_stale"] == 0 and lv["requests_ok"] == 60 - lv["errors"]["io"]
    levels, text = loadgen(tmp_path, url, *args)
    lv = levels[0]
    assert lv["errors_total"] == 0, lv
    assert lv["requests_ok"] == 60 and lv["completion_tokens"] == 60 * 8 and lv["content_chunks"] == 60 * 8
    assert lv["ttft_ms"]["n"] == 60 and lv["e2e_ms"]["n"] == 60
    # every connection carries 3 requests; the 4th goes again on the next one.
    # Each of the 4 client connections opens one connection of its own and every
    # later one is a retry; a connection whose thread started after the others
    # had claimed all 60 requests opens none (seen on a loaded 2-core machine).
    fresh = lv["connects"] - lv["retried_stale"]
    assert lv["retried_stale"] >= 10 and 1 <= fresh <= 4, lv
    assert "retried" in text.splitlines()[1]


def _sse_response(n_tokens):
    """A chunked chat stream of n_tokens one-token chunks, usage, [DONE]."""
    events = ['{"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}'] * n_tokens
    events.append('{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d}}' % n_tokens)
    events.append("[DONE]")
    body = b""
    for e in events:
        data = f"data: {e}\n\n".encode()
        body += b"%x\r\n%s\r\n" % (len(data), data)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + body + b"0\r\n\r\n")


class ScriptedServer:
    """A one-connection-at-a-time HTTP server that answers the k-th request
    it reads (over all connections) as script[k] says: "ok" a full stream,
    ("close", delay_s) a close with no response byte after delay_s, "partial"
    a status line then a close, "reset" a TCP reset with no response byte.
    After the script, every request gets "ok"."""

    def __init__(self, script, n_tokens=4):
        import socket
        import threading
        self.script, self.n_tokens, self.seen = list(script), n_tokens, 0
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.url = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read_request(self, conn, pending):
        while b"\r\n\r\n" not in pending:
            got = conn.recv(65536)
            if not got:
                return None, b""
            pending += got
        head, rest = pending.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(rest) < length:
            got = conn.recv(65536)
            if not got:
                return None, b""
            rest += got
        return head, rest[length:]

    def _serve(self):
        import socket
        import struct
        import time
        while True:
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return                      # closed by stop()
            pending = b""
            with conn:
                while True:
                    head, pending = self._read_request(conn, pending)
                    if head is None:
                        break
                    action = self.script[self.seen] if self.seen < len(self.script) else "ok"
                    self.seen += 1
                    if action == "ok":
                        conn.sendall(_sse_response(self.n_tokens))
                        continue
                    if action == "partial":
                        conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    elif action == "reset":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    else:
                        time.sleep(action[1])
                    break                   # the with block closes the connection

    def stop(self):
        self.lsock.close()
        self.thread.join(timeout=10)


def test_stale_retry_once_only_reused_before_any_byte(tmp_path):
    """One connection, requests one after another, the server's k-th read
    request answered as the script says. Retried: a reused connection
    closed (after 0.25 s) or reset before any response byte. Errors: the
    retry closed too (once per request), a close on a fresh connection, a
    close after the status line. The retried request's TTFT runs from its
    first send, so it holds the 0.25 s the wasted attempt took."""
    script = ["ok",                      # req 0, fresh
              ("close", 0.25), "ok",     # req 1, reused: retried on a new connection
              ("close", 0), ("close", 0),  # req 2, reused, sent again, closed again: io error
              ("close", 0),              # req 3, fresh: io error
              "ok",                      # req 4, fresh
              "partial",                 # req 5, reused, a response byte came: io error
              "ok",                      # req 6, fresh
              "reset", "ok"]             # req 7, reused, reset: retried
    srv = ScriptedServer(script, n_tokens=4)
    try:
        levels, text = loadgen(tmp_path, srv.url, "--requests", "8", "--max-tokens", "4", "--threads", "1",
                               expect_rc=1)
    finally:
        srv.stop()
    lv = levels[0]
    assert srv.seen == len(script)
    assert lv["requests_ok"] == 5 and lv["errors"]["io"] == 3 and lv["errors_total"] == 3, lv
    # sent again: requests 1, 2 (whose second attempt failed) and 7; a new
    # connection for requests 0, 1's and 2's second attempts, 3, 4, 6, 7's
    assert lv["retried_stale"] == 3 and lv["connects"] == 7, lv
    assert lv["completion_tokens"] == 5 * 4 and lv["content_chunks"] == 5 * 4
    assert lv["ttft_ms"]["n"] == 5 and lv["ttft_ms"]["max"] >= 250 and lv["e2e_ms"]["max"] >= 250, lv
    assert lv["ttft_ms"]["p50"] < 250, "only the retried request waited"
    assert "io=3" in text
