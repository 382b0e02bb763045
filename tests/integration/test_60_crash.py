"""Crashes and disconnects against the real server: a killed worker ends
every stream cleanly and comes back; a killed front end is respawned while
the others keep streaming; departed clients free their sequences; counters
stay monotonic across front ends."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from paths import SLUICE
from serve import Server, start_streams, wait_for


@pytest.fixture
def server(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=2)
    yield s
    s.stop()


def content_events(ev):
    """Events carrying generated text (not the role chunk): the worker has the request."""
    return [e for e in ev if '"delta":{"content":' in e]


def error_of(payload):
    """The error object of an SSE payload or a response body, or None."""
    try:
        e = json.loads(payload)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return e if isinstance(e, dict) else None


# docs/API.md: a request lost to a worker death is 503 unavailable_error
# `worker_lost` when nothing was sent, and the same error as the final event
# of a stream that had started.
DEATH = "the worker process died while running this request"


def is_documented_loss(e):
    return e["type"] == "unavailable_error" and e.get("code") == "worker_lost" and DEATH in e["message"]


def test_worker_kill_ends_streams_and_recovers(server):
    worker, fes = server.pids()
    streams = start_streams(server, 16)
    assert wait_for(lambda: all(content_events(ev) for ev, _ in streams), 30), "streams did not start"
    # 3000 tokens each: every stream is still running at the kill
    assert not [ev[-1] for ev, d in streams if d.is_set()], "a stream ended before the kill"
    os.kill(worker, signal.SIGKILL)
    t0 = time.time()
    ended = wait_for(lambda: all(d.is_set() for _, d in streams), 2.0)
    elapsed = time.time() - t0
    if not ended:
        wait_for(lambda: all(d.is_set() for _, d in streams), 20)
        pytest.fail(f"a client hung after the worker died: {time.time() - t0:.2f}s for all; "
                    f"{[ev[-1][:60] for ev, _ in streams]}")
    # docs/API.md: a failure after the stream started (HTTP 200 sent) is a
    # final error event, and the stream ends without [DONE].
    for ev, _ in streams:
        assert "[DONE]" not in ev, ev[-3:]
        e = error_of(ev[-1])
        assert e is not None, f"the stream did not end with an error event: {ev[-3:]}"
        assert is_documented_loss(e), e
    assert elapsed < 2.0
    # front ends untouched, worker replaced, service back
    assert server.get("/health")[0] == 200
    server.wait_ready(30)
    new_worker, new_fes = server.pids()
    assert new_fes == fes and new_worker != worker
    status, body = server.get("/v1/models")
    assert status == 200
    ev = start_streams(server, 1, max_tokens=5)[0]
    assert ev[1].wait(30) and ev[0][-1] == "[DONE]"


def test_worker_kill_fails_a_non_streaming_request_at_once(server):
    """A non-streaming request has sent nothing when its worker dies: it gets
    an error status and an OpenAI error body at once, 503 unavailable_error
    (docs/API.md)."""
    worker, _ = server.pids()
    body = json.dumps({"messages": [{"role": "user", "content": "go"}], "max_tokens": 3000,
                       "ignore_eos": True}).encode()
    out = {}

    def call():
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        r = c.getresponse()
        out["status"], out["body"], out["t"] = r.status, r.read(), time.time()
        c.close()

    t = threading.Thread(target=call, daemon=True)
    t.start()
    running = lambda: server.admin("effective-config")["worker"]["in_flight_now"] == 1
    assert wait_for(running, 20), "the request did not reach the worker"
    os.kill(worker, signal.SIGKILL)
    t0 = time.time()
    t.join(20)
    assert "status" in out, "the client hung after the worker died"
    assert out["t"] - t0 < 2.0
    e = error_of(out["body"])
    assert e is not None, out
    server.wait_ready(30)
    assert server.pids()[0] != worker
    assert out["status"] == 503 and is_documented_loss(e), out


def test_frontend_kill_is_respawned_others_keep_streaming(server):
    worker, fes = server.pids()
    streams = start_streams(server, 8, max_tokens=400)
    assert wait_for(lambda: all(content_events(ev) for ev, _ in streams), 30)
    os.kill(fes[0], signal.SIGKILL)
    assert wait_for(lambda: all(d.is_set() for _, d in streams), 60)
    finished = [ev for ev, _ in streams if ev[-1] == "[DONE]"]
    assert finished, "no stream on the surviving front end completed"
    assert wait_for(lambda: server.pids()[1][0] not in (0, fes[0]), 10), "slot 0 was not respawned"
    assert server.pids()[1][1] == fes[1] and server.pids()[0] == worker
    server.wait_ready(10)
    for _ in range(4):   # new connections land on either front end
        ev = start_streams(server, 1, max_tokens=3)[0]
        assert ev[1].wait(30) and ev[0][-1] == "[DONE]"


def test_disconnects_free_the_sequences(server):
    import http.client
    import json
    conns = []
    body = json.dumps({"messages": [{"role": "user", "content": "go"}], "max_tokens": 3000, "stream": True,
                       "ignore_eos": True})
    for _ in range(16):
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        r = c.getresponse()
        r.read1(64)   # the first event arrived: the request is live
        conns.append((c, r))
    in_flight = lambda: server.admin("effective-config")["worker"]["in_flight_now"]
    assert wait_for(lambda: in_flight() == 16, 20)
    for c, r in conns:   # the response holds a reference to the socket: shut it down for real
        c.sock.shutdown(socket.SHUT_RDWR)
        r.close()
        c.close()
    t0 = time.time()
    assert wait_for(lambda: in_flight() == 0, 0.5 + 0.3), f"in-flight still {in_flight()}"
    print(f"in-flight fell to zero {time.time() - t0:.3f}s after the disconnects")
    stats = server.admin("stats")
    assert wait_for(lambda: server.admin("stats")["mailboxes"]["free"] == sum(stats["mailboxes"].values()), 5)


def test_metrics_counters_monotonic_across_frontends(server):
    seen = {}
    for i in range(20):
        if i % 4 == 0:
            ev = start_streams(server, 1, max_tokens=3)[0]
            ev[1].wait(30)
        status, text = server.get("/metrics")
        assert status == 200
        for line in text.decode().splitlines():
            m = re.match(r"^(sluice_\w+_total)(\{[^}]*\})? (\S+)$", line)
            if m:
                key = m.group(1) + (m.group(2) or "")
                v = float(m.group(3))
                assert v >= seen.get(key, 0), f"{key} went back from {seen[key]} to {v}"
                seen[key] = v
    assert any(k.startswith("sluice_generation_tokens_total") and v > 0 for k, v in seen.items())


def test_sigterm_drains_and_exits_zero(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        ev = start_streams(s, 1, max_tokens=40)[0]
        wait_for(lambda: content_events(ev[0]), 20)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=30) == 0
        assert ev[1].wait(5) and ev[0][-1] == "[DONE]", ev[0][-2:]
    finally:
        s.stop()


def test_exec_worker_serves_and_recovers(chat_model, tmp_path):
    """SLUICE_WORKER_EXEC=1 (master/worker_exec.h): the worker is exec'd
    (`sluice __worker`, for tools that follow only exec'd children), serves
    like the forked one, and a killed one comes back the same way."""
    s = Server(chat_model, tmp_path, frontends=1, env={**os.environ, "SLUICE_WORKER_EXEC": "1"})
    try:
        worker, _ = s.pids()
        with open(f"/proc/{worker}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[1] == b"__worker"
        ev = start_streams(s, 1, max_tokens=5)[0]
        assert ev[1].wait(30) and ev[0][-1] == "[DONE]"
        os.kill(worker, signal.SIGKILL)
        assert wait_for(lambda: s.get("/ready", timeout=1)[0] != 200 or s.pids()[0] != worker, 10)
        s.wait_ready(30)
        assert s.pids()[0] != worker
        ev = start_streams(s, 1, max_tokens=5)[0]
        assert ev[1].wait(30) and ev[0][-1] == "[DONE]"
    finally:
        s.stop()


def process_state(pid):
    """The state letter of /proc/PID/stat (R, S, T, Z...), None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


WRAPPER = """#!/usr/bin/env python3
# runs the worker as its child, as compute-sanitizer does (descriptors
# inherited), and writes a "report" once the worker has exited
import os, signal, sys
mark = sys.argv[1]
open(mark, "w").write(" ".join(sys.argv[2:]) + "\\n")
signal.signal(signal.SIGTERM, lambda *_: open(mark, "a").write("wrapper got SIGTERM\\n"))
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.execv(sys.argv[2], sys.argv[2:])
_, status = os.waitpid(pid, 0)
open(mark, "a").write(f"worker exit {os.waitstatus_to_exitcode(status)}\\n")
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def test_worker_wrapper_serves_and_stops(chat_model, tmp_path):
    """SLUICE_WORKER_WRAPPER (master/worker_exec.h) puts a command in front of
    the exec'd worker, the way compute-sanitizer is run on a serving worker:
    the worker gets its descriptors through it and serves; on SIGTERM the
    master stops the worker itself (not the wrapper, which would quit before
    its report), the wrapper sees it exit 0, and the server exits 0."""
    wrapper, mark = tmp_path / "wrap.py", tmp_path / "wrapped"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    s = Server(chat_model, tmp_path, frontends=1,
               env={**os.environ, "SLUICE_WORKER_WRAPPER": f"{wrapper}  {mark}"})
    try:
        args = mark.read_text().split()
        assert os.path.realpath(args[0]) == os.path.realpath(SLUICE) and args[1] == "__worker", args
        ev = start_streams(s, 1, max_tokens=5)[0]
        assert ev[1].wait(30) and ev[0][-1] == "[DONE]"
    finally:
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=60) == 0
        s.log.close()
    lines = mark.read_text().splitlines()
    assert lines[1:] == ["worker exit 0"], lines


def test_wedged_wrapped_worker_is_killed_not_orphaned(chat_model, tmp_path):
    """Under a wrapper, a worker that stops beating is killed itself (the
    pid from the segment), not only its wrapper: a stopped worker orphaned
    by a killed wrapper would never run its death signal and would outlive
    the recovery. The master then starts a new wrapped worker."""
    wrapper, mark = tmp_path / "wrap.py", tmp_path / "wrapped"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    s = Server(chat_model, tmp_path, frontends=1, extra=["--heartbeat-timeout-ms", "500"],
               env={**os.environ, "SLUICE_WORKER_WRAPPER": f"{wrapper} {mark}"})
    try:
        w0 = s.admin("effective-config")["master"]["worker"]["pid"]
        with open(f"/proc/{w0}/task/{w0}/children") as f:
            (real,) = [int(p) for p in f.read().split()]
        os.kill(real, signal.SIGSTOP)
        assert wait_for(lambda: s.admin("effective-config")["master"]["worker"]["pid"] not in (0, w0), 15)
        s.wait_ready(30)
        with pytest.raises(ProcessLookupError):
            os.kill(w0, 0)   # the wrapper: reaped by the master
        # the worker: dead (gone, or a zombie until init reaps the dead wrapper's child), not stopped
        assert wait_for(lambda: process_state(real) in (None, "Z", "X"), 10), process_state(real)
        ev = start_streams(s, 1, max_tokens=5)[0]
        assert ev[1].wait(30) and ev[0][-1] == "[DONE]"
    finally:
        s.stop()


def test_missing_worker_wrapper_is_logged_and_server_stays_up(chat_model, tmp_path):
    """A wrapper that cannot be run: the failed start is logged with the
    command's name, the master keeps running (not ready), and SIGTERM stops it."""
    env = {**os.environ, "SLUICE_WORKER_WRAPPER": "/nonexistent/wrapper --flag"}
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        p = subprocess.Popen([SLUICE, "serve", "-m", str(chat_model), "--port", "0", "--frontends", "1",
                              "--threads", "1", "--admin-socket", str(tmp_path / "a.sock"), "--drain-delay", "0"],
                             stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            assert wait_for(lambda: "/nonexistent/wrapper" in log.read_text(), 20), log.read_text()
            assert p.poll() is None
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
    assert "exec of the worker (/nonexistent/wrapper)" in log.read_text()


@pytest.mark.parametrize("args", [[], ["x", "1"], ["3", "1,x"], ["99", "1"]])
def test_worker_entry_refuses_bad_arguments(args):
    """`sluice __worker` is for the master only: anything else is a clear exit 2."""
    r = subprocess.run([SLUICE, "__worker", *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2, r.stderr
    assert "sluice __worker" in r.stderr
