"""Chat bodies built to make the front end's render and tokenize step slow,
against the real `sluice serve` (1 front end, so /health probes reach the
front end that does the work; Qwen3's tokenizer and template):
  - 10^5 short messages in one request (~3.7 MB, under the default 8 MiB
    --max-body) and 4x10^4 messages: every message makes two untrusted spans
    and two control tokens, so a tokenizer that checks every span at every
    control token costs n^2;
  - one message with 10^5 extra keys (~1.6 MB): a template dict that checks
    for duplicates on every insert costs n^2.
Each gets its answer (200, or the 400 context_length_exceeded that a prompt
past the context earns) within a few seconds, and /health stays answered
while it is worked on. Run with -s to see the figures."""
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from serve import Server

LIMIT_S = 5.0         # answer bound per request; the quadratic paths took 10-60 s
HEALTH_GAP_S = 5.0    # longest /health silence allowed while one is worked on


@pytest.fixture(scope="module")
def server(chat_model, tmp_path_factory):
    s = Server(chat_model, tmp_path_factory.mktemp("tokdos"), frontends=1)
    yield s
    s.stop()


def post(base, body, timeout=120):
    req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def timed_with_health(server, body):
    """POSTs body while probing /health every 20 ms; returns the status, the
    answer, seconds to the answer and the longest gap between /health answers."""
    answers, stop = [time.time()], threading.Event()

    def probe():
        while not stop.is_set():
            try:
                if server.get("/health", timeout=HEALTH_GAP_S * 4)[0] == 200:
                    answers.append(time.time())
            except OSError:
                pass
            time.sleep(0.02)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t0 = time.time()
    status, answer = post(server.base, body)
    elapsed = time.time() - t0
    stop.set()
    t.join(HEALTH_GAP_S * 5)
    answers.append(time.time())
    gap = max(b - a for a, b in zip(answers, answers[1:]))
    return status, answer, elapsed, gap


def check(status, answer):
    if status == 400:
        assert answer["error"]["code"] == "context_length_exceeded", answer
    else:
        assert status == 200, answer


@pytest.mark.parametrize("n", [40000, 100000])
def test_many_short_messages(server, n):
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"hi {i % 100}"} for i in range(n)]
    body = json.dumps({"messages": msgs, "max_tokens": 1}).encode()
    status, answer, elapsed, gap = timed_with_health(server, body)
    print(f"\n{n} messages, {len(body)} bytes: HTTP {status} in {elapsed:.3f} s; longest /health gap {gap:.3f} s")
    check(status, answer)
    assert elapsed < LIMIT_S
    assert gap < HEALTH_GAP_S
    assert post(server.base, json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                         "max_tokens": 1}).encode())[0] == 200


def test_one_message_with_many_keys(server):
    m = {f"k{i}": i for i in range(100000)}
    m.update(role="user", content="hi")
    body = json.dumps({"messages": [m], "max_tokens": 1}).encode()
    status, answer, elapsed, gap = timed_with_health(server, body)
    print(f"\n1 message with 10^5 keys, {len(body)} bytes: HTTP {status} in {elapsed:.3f} s; "
          f"longest /health gap {gap:.3f} s")
    check(status, answer)
    assert elapsed < LIMIT_S
    assert gap < HEALTH_GAP_S
