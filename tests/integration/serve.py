"""Starts the real `sluice serve` (master + front ends + worker on the CPU
backend) on a free loopback port for integration tests, and talks to its
admin socket."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

from paths import SLUICE


def wait_for(cond, timeout, step=0.02):
    """Polls cond() until it is true or timeout seconds pass; its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Server:
    def __init__(self, model, tmp_path, frontends=2, extra=(), env=None):
        self.admin_path = str(tmp_path / f"admin-{os.getpid()}-{id(self)}.sock")
        self.log_path = tmp_path / f"serve-{id(self)}.log"
        cmd = [SLUICE, "serve", *(["-m", str(model)] if model else []), "--port", "0", "--frontends", str(frontends), "--threads", "1",
               "--kv-memory", "256M", "--admin-socket", self.admin_path, "--drain-delay", "0",
               "--drain-timeout", "5", *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_path.read_text())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError(f"sluice serve exited {self.proc.returncode}: {self.log_path.read_text()}")
            else:
                time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"
        self.wait_ready()

    def get(self, path, timeout=5):
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.get("/ready", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"not ready within {timeout}s: {self.log_path.read_text()}")

    def admin(self, cmd):
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.admin_path)
        s.sendall(cmd.encode() + b"\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        return json.loads(data)

    def pids(self):
        m = self.admin("effective-config")["master"]
        return m["worker"]["pid"], m["frontend_pids"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def stream(base, body, events, done, timeout=60):
    """POSTs a streaming request; appends each SSE data payload to `events`
    and sets `done` when the stream ends (any way)."""
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: "):
                    events.append(line[6:])
    except Exception as e:  # noqa: BLE001 - a reset connection is one way to end
        events.append(f"<{type(e).__name__}>")
    finally:
        done.set()


def start_streams(server, n, max_tokens=3000):
    body = {"messages": [{"role": "user", "content": "tell me a long story"}], "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True}
    streams = []
    for _ in range(n):
        ev, done = [], threading.Event()
        t = threading.Thread(target=stream, args=(server.base, body, ev, done), daemon=True)
        t.start()
        streams.append((ev, done))
    return streams
