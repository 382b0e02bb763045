"""Operations: /metrics passes `promtool check metrics`, and deploy/haproxy.cfg
in front of two real `sluice serve` instances streams SSE through, takes a
draining instance out, and keeps serving while one instance's worker is
killed and restarted."""
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from paths import REPO
from serve import Server, stream, wait_for


def find_tool(name):
    """Debian puts haproxy in /usr/sbin, which a user's PATH may lack."""
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}")
                                       if os.access(p, os.X_OK)), None)


HAPROXY = find_tool("haproxy")
PROMTOOL = find_tool("promtool")
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def post(base, body, timeout=30):
    """Returns (status, headers, body bytes) of a POST to /v1/chat/completions."""
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_metrics_pass_promtool(chat_model, tmp_path):
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (Debian package 'prometheus'; tools/setup.sh installs it)")
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        for i in range(3):   # fill counters and histograms, streaming and not
            assert post(s.base, {**CHAT, "stream": bool(i % 2)})[0] == 200
        status, text = s.get("/metrics")
    finally:
        s.stop()
    assert status == 200
    assert b"sluice_time_to_first_token_seconds_bucket" in text
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert r.returncode == 0, f"promtool: {r.stdout.decode()}{r.stderr.decode()}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HAProxy:
    """deploy/haproxy.cfg with the test's ports, a tmp stats socket and check
    timings short enough for a test (every other line as shipped)."""

    def __init__(self, tmp_path, a, b):
        cfg = (REPO / "deploy/haproxy.cfg").read_text()
        self.sock = str(tmp_path / "haproxy.sock")
        self.port = free_port()
        subs = [("/run/haproxy/sluice.sock", self.sock), ("bind :8080", f"bind 127.0.0.1:{self.port}"),
                ("127.0.0.1:8081", f"127.0.0.1:{a.port}"), ("127.0.0.1:8082", f"127.0.0.1:{b.port}"),
                ("inter 1s fastinter 500ms downinter 1s", "inter 100ms fastinter 100ms downinter 100ms")]
        for old, new in subs:
            assert old in cfg, f"deploy/haproxy.cfg no longer has {old!r}"
            cfg = cfg.replace(old, new)
        path = tmp_path / "haproxy.cfg"
        path.write_text(cfg)
        self.log_path = tmp_path / "haproxy.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(path)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        if not wait_for(lambda: self.states() == {"a": "UP", "b": "UP"}, 15):
            self.stop()
            raise RuntimeError(f"haproxy did not come up: {self.log_path.read_text()}")

    def states(self):
        """{server name: "UP" or "DOWN"...} of the sluice backend."""
        return {name: row["status"].split()[0] for name, row in self.rows().items()}   # "UP 1/2" -> "UP"

    def rows(self):
        """{server name: {column: value}} from the runtime API's `show stat` CSV."""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(self.sock)
                s.sendall(b"show stat\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except OSError:
            return {}
        lines = data.decode().splitlines()
        if not lines or not lines[0].startswith("# "):
            return {}
        cols = lines[0][2:].split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(cols, line.split(",")))
            if row.get("pxname") == "sluice" and row.get("svname") in ("a", "b"):
                out[row["svname"]] = row
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def cluster(chat_model, tmp_path):
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (Debian package 'haproxy'; tools/setup.sh installs it)")
    # a's workers start 1 s late, as a real model's load takes seconds: a
    # worker killed on a then leaves a window of 503s that HAProxy must meet
    # (the test model loads in milliseconds, so without it the window can
    # fall between two requests and the failover path goes untested)
    slow_start = tmp_path / "slow-start.sh"
    slow_start.write_text('#!/bin/sh\nsleep 1\nexec "$@"\n')
    slow_start.chmod(0o755)
    env = dict(os.environ, SLUICE_WORKER_WRAPPER=str(slow_start))
    a = Server(chat_model, tmp_path, frontends=1, extra=("--drain-delay", "2"), env=env)
    b = Server(chat_model, tmp_path, frontends=1)
    try:
        h = HAProxy(tmp_path, a, b)
    except Exception:
        a.stop()
        b.stop()
        raise
    yield a, b, h
    h.stop()
    a.stop()
    b.stop()


def served_by(h, n, body=CHAT):
    """Sends n requests through HAProxy; every one must succeed. Returns the
    X-Served-By names."""
    names = []
    for _ in range(n):
        status, headers, data = post(h.base, body)
        assert status == 200, (status, data[:200])
        assert json.loads(data)["choices"][0]["finish_reason"] == "length"
        names.append(headers.get("X-Served-By"))
    return names


def test_sse_streams_through_haproxy(cluster):
    a, b, h = cluster
    body = {"messages": [{"role": "user", "content": "tell me a story"}], "max_tokens": 40,
            "stream": True, "ignore_eos": True}
    arrivals = []

    class Log(list):   # stamps each event as it arrives
        def append(self, x):
            arrivals.append(time.time())
            super().append(x)

    ev, done = Log(), threading.Event()
    stream(h.base, body, ev, done)
    assert done.is_set() and ev[-1] == "[DONE]", ev[-3:]
    chunks = [json.loads(e) for e in ev[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert len(chunks) >= 40 and text
    # Not held back: the events arrive one by one as tokens are made (40 tokens
    # on one CPU thread take about 200 ms), not in a few bursts. Without
    # `option http-no-delay` HAProxy's MSG_MORE sends bunched them (spans of
    # 16-100 ms, sometimes one burst).
    span = arrivals[-1] - arrivals[0]
    apart = sum(1 for x, y in zip(arrivals, arrivals[1:]) if y - x > 0.001)
    assert span > 0.1 and apart >= 10, f"events arrived in bursts: span {span:.3f}s, {apart} gaps over 1 ms"
    assert set(served_by(h, 4)) == {"a", "b"}, "leastconn should use both instances when idle"


def test_draining_instance_is_taken_out(cluster):
    a, b, h = cluster
    a.proc.send_signal(signal.SIGTERM)   # /ready is 503 for --drain-delay 2, then a closes and exits
    t0 = time.time()
    assert wait_for(lambda: h.states().get("a") == "DOWN", 2), f"a still {h.states()}"
    taken_out = time.time() - t0
    # during the rest of the delay, after the listener closes and after a exits
    names = []
    while time.time() - t0 < 3.5 or a.proc.poll() is None:
        names += served_by(h, 1)
        assert time.time() - t0 < 30, "instance a did not exit"
    assert a.proc.returncode == 0
    assert names and set(names) == {"b"}, names
    assert h.states() == {"a": "DOWN", "b": "UP"}
    print(f"haproxy took the draining instance out after {taken_out:.2f}s; {len(names)} requests served by b")


def test_worker_kill_requests_keep_succeeding(cluster):
    a, b, h = cluster
    worker, _ = a.pids()
    names, errors, stop = [], [], threading.Event()

    def client():   # three at once, so leastconn keeps picking a too
        try:
            while not stop.is_set():
                names.extend(served_by(h, 1))
        except AssertionError as e:
            errors.append(e)

    # The clients are already sending when the worker dies, so requests meet
    # the death itself (in flight: 503 worker_lost) and the restart window
    # (503 worker_unavailable) before HAProxy's check takes a out; killing
    # first let the check win that race on a loaded machine. a's /ready is 503
    # until its new worker is READY: HAProxy retries those 503s on b and every
    # request succeeds meanwhile.
    clients = [threading.Thread(target=client) for _ in range(3)]
    for c in clients:
        c.start()
    assert wait_for(lambda: "a" in names or errors, 10), "a served nothing before the kill"
    os.kill(worker, signal.SIGKILL)
    t0 = time.time()
    time.sleep(1.5)
    stop.set()
    for c in clients:
        c.join()
    assert not errors, errors[0]
    assert wait_for(lambda: h.states().get("a") == "UP", 30), f"a did not come back: {h.states()}"
    back = time.time() - t0
    assert a.pids()[0] != worker
    later = served_by(h, 6)
    assert "a" in later, f"a serves again after its restart: {later}"
    row = h.rows()["a"]
    # a retried 503 counts on a as a retry (wretr) and, sent on to b, a redispatch (wredis)
    met = int(row["wretr"]) + int(row["wredis"])
    assert met > 0, "no request met a's restart: the failover path was not exercised"
    print(f"{len(names)} requests served around a's worker restart (HAProxy retries on a: {row['wretr']}, "
          f"redispatches: {row['wredis']}); a back in rotation after {back:.2f}s")
