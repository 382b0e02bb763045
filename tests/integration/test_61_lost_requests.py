"""60-level: requests lost to a worker death are retryable. When the worker
is killed, recovery fails every running mailbox (shared/recover.c); a
request that has sent nothing to its client yet (non-streamed, or a stream
still waiting for its first token: its headers wait for it) gets 503 with
Retry-After: 1 and code worker_lost, which a proxy such as HAProxy
(`retry-on 503`) replays. A stream that already sent tokens keeps the final
error event (test_60_crash.py)."""
import http.client
import json
import os
import signal
import threading
import time

import pytest

from serve import Server, wait_for


@pytest.fixture
def server(chat_model, tmp_path):
    # Small prefill steps, so that a long prompt stays in prefill (taken by
    # the worker, nothing generated) for a while.
    s = Server(chat_model, tmp_path, frontends=2,
               extra=["--ctx-size", "4096", "--prefill-chunk", "8", "--token-budget", "16"])
    yield s
    s.stop()


def request(port, body, out, key):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
        r = c.getresponse()
        out[key] = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    except Exception as e:  # noqa: BLE001 - recorded, asserted below
        out[key] = (None, {}, repr(e).encode())
    finally:
        c.close()


def in_flight(server):
    return server.admin("effective-config")["worker"]["in_flight_now"]


def run_and_kill(server, bodies):
    worker, _ = server.pids()
    out, threads = {}, []
    for i, b in enumerate(bodies):
        t = threading.Thread(target=request, args=(server.port, b, out, i), daemon=True)
        t.start()
        threads.append(t)
    assert wait_for(lambda: in_flight(server) == len(bodies), 30), f"the worker did not take the requests: {out}"
    os.kill(worker, signal.SIGKILL)
    for t in threads:
        t.join(20)
    return out


def assert_retryable(res):
    status, hdrs, body = res
    assert status == 503, (status, body[:300])
    assert hdrs.get("retry-after") == "1", hdrs
    e = json.loads(body)["error"]
    assert e["type"] == "unavailable_error" and e["code"] == "worker_lost", e
    assert "died" in e["message"]


def test_non_streamed_requests_lost_to_a_worker_death_get_503(server):
    body = {"messages": [{"role": "user", "content": "tell me a long story"}], "max_tokens": 3000,
            "ignore_eos": True}
    out = run_and_kill(server, [body] * 4)
    for i in range(4):
        assert_retryable(out[i])
    server.wait_ready(30)
    r = {}
    request(server.port, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, r, 0)
    assert r[0][0] == 200


def test_stream_lost_before_its_first_token_gets_503(server):
    # ~2000 tokens: seconds of 8-token prefill steps. Two different prompts: the same one twice would
    # have the second wait for the first one's blocks (docs/SCHEDULER.md §5a), not prefill beside it
    bodies = [{"messages": [{"role": "user", "content": f"v{k} " + " ".join(f"w{i}" for i in range(700))}],
               "max_tokens": 10, "stream": True} for k in range(2)]
    out = run_and_kill(server, bodies)
    for i in range(2):
        assert_retryable(out[i])
    server.wait_ready(30)
