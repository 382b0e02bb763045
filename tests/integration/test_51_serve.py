"""50-level against the real `sluice serve` (master, CPU worker, front ends):
the openai client streams and not, greedy outputs agree, readiness, metrics,
a client gone mid-stream frees its mailbox, SIGTERM drains to exit 0."""
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import openai
import pytest

from fe_harness import qwen3_model
from paths import SLUICE


class Serve:
    def __init__(self, model, *args):
        self.proc = subprocess.Popen([SLUICE, "serve", "-m", str(model), "--port", "0", "--host", "127.0.0.1",
                                      "--frontends", "2", "-t", "1", "--ctx-size", "256", "--drain-delay", "0",
                                      "--model-alias", "tiny", "--admin-socket",
                                      os.path.join(tempfile.mkdtemp(prefix="sluice-t51-"), "admin.sock"),
                                      *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        got = threading.Event()

        def reader():
            for ln in self.proc.stderr:
                self.lines.append(ln)
                m = re.search(r"listening on http://[^:]+:(\d+)", ln)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    got.set()
            got.set()

        threading.Thread(target=reader, daemon=True).start()
        if not got.wait(60) or self.port is None:
            self.proc.kill()
            pytest.fail("sluice serve did not start:\n" + "".join(self.lines))
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(self.base + "/ready", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        pytest.fail("worker never became ready:\n" + "".join(self.lines))

    def get_json(self, path):
        return json.load(urllib.request.urlopen(self.base + path, timeout=10))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9


@pytest.fixture(scope="module")
def serve(make_model, tmp_path_factory):
    try:
        subprocess.run([SLUICE, "serve", "--help"], capture_output=True, timeout=10, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("this build has no `sluice serve`")
    s = Serve(qwen3_model(make_model, tmp_path_factory))
    yield s
    assert s.stop() == 0, "".join(s.lines[-30:])


@pytest.fixture(scope="module")
def client(serve):
    return openai.OpenAI(base_url=serve.base + "/v1", api_key="none", max_retries=0, timeout=120)


MSG = [{"role": "user", "content": "Count to five."}]


def test_greedy_stream_equals_non_stream(client):
    r = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=8, temperature=0)
    assert r.usage.completion_tokens >= 1 and r.choices[0].finish_reason in ("stop", "length")
    s = list(client.chat.completions.create(model="tiny", messages=MSG, max_tokens=8, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in s if c.choices) == r.choices[0].message.content
    assert s[-1].usage.completion_tokens == r.usage.completion_tokens


def test_completions_seeded_and_logprobs(client):
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=11, logprobs=2)
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text
    assert len(a.choices[0].logprobs.token_logprobs) >= 1
    assert all(x <= 0 for x in a.choices[0].logprobs.token_logprobs)


def test_health_metrics_config(serve):
    assert serve.get_json("/health") == {"status": "ok"}
    body = urllib.request.urlopen(serve.base + "/metrics", timeout=10).read().decode()
    assert "sluice_requests_submitted_total" in body and "sluice_time_to_first_token_seconds_bucket" in body
    c = serve.get_json("/v1/effective-config")
    assert c["frontend"]["frontends"] == 2 and c["worker"] is not None


def test_disconnect_mid_stream_frees_mailbox(serve):
    d = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 200, "stream": True,
                    "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", serve.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(d)).encode() + b"\r\n\r\n" + d)
    got = b""
    while got.count(b"data: ") < 2:
        got += s.recv(4096)
    s.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        m = serve.get_json("/v1/effective-config")["frontend"]["mailboxes"]
        if m["running"] == 0 and m["submitted"] == 0 and m["cancelled"] == 0 and m["finished"] == 0:
            break
        time.sleep(0.1)
    assert m["running"] == 0 and m["cancelled"] == 0, m


def test_worker_killed_mid_stream_gives_a_final_error_event(make_model, tmp_path_factory):
    s = Serve(qwen3_model(make_model, tmp_path_factory), "--ctx-size", "4096")
    try:
        pid = s.get_json("/v1/effective-config")["frontend"]["worker_info"]["pid"]
        assert pid > 0
        d = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 4000, "stream": True,
                        "ignore_eos": True}).encode()
        c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(d)).encode() + b"\r\n\r\n" + d)
        got = b""
        while got.count(b"data: ") < 3:
            got += c.recv(4096)
        os.kill(pid, signal.SIGKILL)
        while not got.endswith(b"0\r\n\r\n"):
            chunk = c.recv(65536)
            if not chunk:
                break
            got += chunk
        c.close()
        assert b"data: [DONE]" not in got
        last = [ln for ln in got.split(b"\n") if ln.startswith(b"data: ")][-1]
        assert json.loads(last[6:])["error"]["message"], last
        # The front ends kept serving; the master restarts the worker.
        assert s.get_json("/health") == {"status": "ok"}
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(s.base + "/ready", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        cl = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=120)
        r = cl.completions.create(model="tiny", prompt="again", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens >= 1
    finally:
        assert s.stop() == 0, "".join(s.lines[-30:])
