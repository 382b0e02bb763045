"""Starts tools/fe-harness (front ends + an echo worker) for the 40- and 50-
level tests, and talks HTTP to it. The echo worker answers each request with
its own prompt tokens, then EOS, so every output is known in advance."""
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from paths import data_path, tool


def qwen3_model(make_model, tmp_path_factory=None):
    """A tiny qwen3-shaped model with Qwen3's real tokenizer and chat template.
    tmp_path_factory is unused; the callers still pass it."""
    return make_model("tiny-qwen3", "F16", tokenizer=str(data_path("tokenizers/qwen3/tokenizer.json")),
                      tokenizer_config=str(data_path("tokenizers/qwen3/tokenizer_config.json")))


class Harness:
    def __init__(self, model, *args, n=2):
        self.log = tempfile.NamedTemporaryFile(prefix="fe-harness-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([tool("fe-harness"), "-m", str(model), "-p", "0", "-n", str(n), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port="):
            self.proc.kill()
            pytest.fail(f"fe-harness did not start: {self.stderr()}")
        self.port = int(line.strip().split("=")[1])
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)

    def stderr(self):
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def request(self, method, path, body=None, headers=None, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def post(self, path, obj, headers=None):
        s, h, b = self.request("POST", path, obj, {"Content-Type": "application/json", **(headers or {})})
        return s, h, b

    def config(self):
        s, _, b = self.request("GET", "/v1/effective-config")
        assert s == 200
        return json.loads(b)

    def wait_mailboxes_free(self, total, timeout=5.0):
        """Every front end sees the same segment: wait until all mailboxes are free."""
        deadline = time.time() + timeout
        while True:
            m = self.config()["frontend"]["mailboxes"]
            if m["free"] == total:
                return m
            if time.time() > deadline:
                return m
            time.sleep(0.05)

    def raw(self, data, read=True, timeout=5.0):
        """Sends raw bytes on a new connection; returns what came back until close or timeout."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.sendall(data)
        out = b""
        if read:
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
            except socket.timeout:
                pass
        s.close()
        return out

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        rc = self.proc.returncode
        os.unlink(self.log.name)
        return rc


def sse_events(raw):
    """Splits an SSE body into its data payloads (comments dropped)."""
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = [ln[6:] for ln in block.split("\n") if ln.startswith("data: ")]
        if lines:
            out.append("\n".join(lines))
    return out
