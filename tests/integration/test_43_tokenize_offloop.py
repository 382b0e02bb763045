"""43-level: rendering and tokenizing a large body runs on the front end's
tokenize pool (frontend/jobs.c), not on its event loop. Against the real
`sluice serve` with 1 front end (so every /health probe reaches the busy one)
and --max-body 16M:
  - two ~8 MB /tokenize bodies and an ~8 MB chat body, while another process
    polls /health every 20 ms: every probe answers within 100 ms, and the big
    requests get the right answers (the big /tokenize equals the small inline
    one repeated; the chat body gets its context_length_exceeded);
  - a padded (> 64 KiB) chat body takes the pool path through to submission;
  - clients that hang up while their job runs leave the server healthy, the
    pool and the mailboxes idle, and the process exits 0.
SLUICE_TEST_TOKENIZE_THREADS=0 runs the same with everything on the loop (the
"before" figures; the latency bound is then only printed). Run with -s."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from serve import Server, wait_for

THREADS = int(os.environ.get("SLUICE_TEST_TOKENIZE_THREADS", "1"))
HEALTH_MAX_S = 0.100
HEALTH_MAX_SANITIZED_S = 0.300   # ASan: the loop's own share (reading 24 MB of bodies, copying answers) is ~5x slower
CHUNK = " The quick brown fox jumps over the lazy dog."   # pretoken boundaries at both ends

# Polls /health every 20 ms on fresh connections until stdin closes; prints
# the count, the slowest answer and the failures as one JSON line.
POLLER = r"""
import http.client, json, sys, threading, time
port = int(sys.argv[1]); lat = []; fails = []; stop = threading.Event()
def run():
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health"); r = c.getresponse(); r.read(); c.close()
            lat.append(time.monotonic() - t0)
            if r.status != 200: fails.append(r.status)
        except OSError as e:
            fails.append(str(e))
        time.sleep(0.02)
t = threading.Thread(target=run); t.start()
print("ready", flush=True); sys.stdin.read(); stop.set(); t.join()
print(json.dumps({"n": len(lat), "max": max(lat) if lat else None, "fails": fails}), flush=True)
"""


@pytest.fixture(scope="module")
def server(chat_model, tmp_path_factory):
    s = Server(chat_model, tmp_path_factory.mktemp("offloop"), frontends=1,
               extra=["--max-body", "16M", "--tokenize-threads", str(THREADS), "--ctx-size", "256"])
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log_path.read_text()[-4000:]
    log = s.log_path.read_text()
    assert "Sanitizer" not in log and "runtime error" not in log, log[-6000:]


def post(base, path, body, timeout=120):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sanitized(server):
    """An ASan build (libasan mapped into the front end)."""
    with open(f"/proc/{server.pids()[1][0]}/maps") as f:
        return "libasan" in f.read()


def frontend_state(server):
    s, b = server.get("/v1/effective-config")
    assert s == 200
    return json.loads(b)["frontend"]


def idle(server):
    f = frontend_state(server)
    m = f["mailboxes"]
    return (f["tokenize_jobs"] == 0 and f["streams"] == 0 and f["pending_releases"] == 0 and
            m["claimed"] == m["submitted"] == m["running"] == m["cancelled"] == 0)


def with_health_poll(server, fn):
    p = subprocess.Popen([sys.executable, "-c", POLLER, str(server.port)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        t0 = time.time()
        out = fn()
        elapsed = time.time() - t0
        time.sleep(0.1)
        res, _ = p.communicate("", timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return out, elapsed, json.loads(res.strip().splitlines()[-1])


def test_large_bodies_leave_health_responsive(server):
    n_rep = 8_000_000 // len(CHUNK)
    small = CHUNK * 100                                            # inline (< 64 KiB)
    s, b = post(server.base, "/tokenize", {"content": small})
    assert s == 200
    small_toks = json.loads(b)["tokens"]
    assert len(small_toks) % 100 == 0
    per_chunk = small_toks[: len(small_toks) // 100]
    assert small_toks == per_chunk * 100
    big_tok = json.dumps({"content": CHUNK * n_rep}).encode()
    big_chat = json.dumps({"messages": [{"role": "user", "content": CHUNK * n_rep}], "max_tokens": 1}).encode()
    results = {}

    def one(key, path, body):
        results[key] = post(server.base, path, body, timeout=300)

    def run_all():
        ts = [threading.Thread(target=one, args=(k, p, b)) for k, p, b in
              (("tok1", "/tokenize", big_tok), ("tok2", "/tokenize", big_tok), ("chat", "/v1/chat/completions", big_chat))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)

    _, elapsed, health = with_health_poll(server, run_all)
    print(f"\n--tokenize-threads {THREADS}: 2 x {len(big_tok)} B /tokenize + {len(big_chat)} B chat in "
          f"{elapsed:.2f} s; /health polled {health['n']} times, slowest {health['max'] * 1000:.1f} ms, "
          f"failures {len(health['fails'])}")
    for k in ("tok1", "tok2"):
        s, b = results[k]
        assert s == 200, b[:300]
        assert json.loads(b)["tokens"] == per_chunk * n_rep
    s, b = results["chat"]
    assert s == 400 and json.loads(b)["error"]["code"] == "context_length_exceeded", b[:300]
    assert health["fails"] == [] and health["n"] > 0
    if THREADS > 0:
        assert health["max"] < (HEALTH_MAX_SANITIZED_S if sanitized(server) else HEALTH_MAX_S)


def test_padded_chat_body_goes_through_the_pool(server):
    msg = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    inline = post(server.base, "/v1/chat/completions", msg)
    padded = json.dumps(msg).encode().replace(b"{", b"{" + b" " * 100_000, 1)   # 100 KB: offloaded
    s, b = post(server.base, "/v1/chat/completions", padded)
    assert s == inline[0] == 200, b[:300]
    assert json.loads(b)["usage"]["prompt_tokens"] == json.loads(inline[1])["usage"]["prompt_tokens"]
    s, b = post(server.base, "/detokenize", json.dumps({"tokens": [1, 2, 3]}).encode() + b" " * 100_000)
    assert s == 200 and json.loads(b) == json.loads(post(server.base, "/detokenize", {"tokens": [1, 2, 3]})[1])


def send_and_hang_up(port, path, body):
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    time.sleep(0.2)                                                # the job is running
    c.close()


def test_client_gone_mid_tokenization(server):
    big_tok = json.dumps({"content": CHUNK * (4_000_000 // len(CHUNK))}).encode()
    padded_stream = (json.dumps({"messages": [{"role": "user", "content": "tell me a story"}],
                                 "max_tokens": 200, "stream": True, "ignore_eos": True}).encode()
                     .replace(b"{", b"{" + b" " * 100_000, 1))
    for _ in range(2):
        send_and_hang_up(server.port, "/tokenize", big_tok)
        send_and_hang_up(server.port, "/v1/chat/completions", padded_stream)
    assert server.get("/health")[0] == 200
    assert wait_for(lambda: idle(server), 60, step=0.2), frontend_state(server)
    s, b = post(server.base, "/tokenize", {"content": "hello"})
    assert s == 200 and json.loads(b)["tokens"]
    assert post(server.base, "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})[0] == 200
