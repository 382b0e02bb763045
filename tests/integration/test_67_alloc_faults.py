"""Host allocation failure, swept (docs/RELIABILITY.md): the real `sluice
serve` runs with SLUICE_FAIL_ALLOC="ROLE:1+" (shared/alloc.h), so its
requests 1, 3, 5, ... fail their 1st, 2nd, 3rd, ... allocation in that
process (ROLE: the front end or the worker) and the requests between run
unarmed. For each N, one chat request with logprobs (streamed or not) must
get a 500/503 OpenAI error (a status and an error body, or a final error
event once the stream has begun) or a correct answer; the next request must
succeed, the worker and the front end must be the same processes, and every
mailbox must be free again. The sweep ends at the first armed request that
injects nothing (its N is past the request's last allocation)."""
import json
import os
import urllib.error
import urllib.request

import pytest

from serve import Server, wait_for

MAX_N = 600      # a bound, well above a request's allocations
MAX_TOKENS = 3
BODY = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
        "max_tokens": MAX_TOKENS, "ignore_eos": True, "logprobs": True, "top_logprobs": 2}


def post(base, body, timeout=20):
    """(status, body bytes) of a chat completion; a streamed body is whole."""
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def events(raw):
    return [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")]


def is_error_body(status, raw):
    if status not in (500, 503):
        return False
    e = json.loads(raw)["error"]
    return isinstance(e["message"], str) and e["message"] and e["type"] in ("server_error", "unavailable_error")


def check_answer(status, raw, stream):
    """A correct answer (True), a clean 500/503 error (False), or it fails."""
    if status != 200:
        assert is_error_body(status, raw), (status, raw[:300])
        return False
    if not stream:
        r = json.loads(raw)
        assert len(r["choices"][0]["logprobs"]["content"]) == MAX_TOKENS, r
        assert r["usage"]["completion_tokens"] == MAX_TOKENS, r
        return True
    ev = events(raw)
    if ev and ev[-1] == "[DONE]":
        chunks = [json.loads(e) for e in ev[:-1]]
        n = sum(len((c["choices"][0].get("logprobs") or {}).get("content") or [])
                for c in chunks if c.get("choices"))
        assert n == MAX_TOKENS, ev
        return True
    assert ev, raw[:300]
    e = json.loads(ev[-1])["error"]   # an error begun mid-stream ends it as its last event
    assert e["message"] and e["type"] in ("server_error", "unavailable_error"), ev[-1]
    return False


def injected(server):
    return server.log_path.read_text().count("sluice: injected allocation failure")


def idle(server):
    mb = server.admin("stats")["mailboxes"]
    return mb["free"] == sum(mb.values())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("role", ["frontend", "worker"])
def test_alloc_fault_sweep(chat_model, tmp_path, role, stream):
    env = dict(os.environ, SLUICE_FAIL_ALLOC=f"{role}:1+")
    s = Server(chat_model, tmp_path, frontends=1, env=env)
    try:
        pids = s.pids()
        body = dict(BODY, stream=stream)
        errors = 0
        for n in range(1, MAX_N + 1):
            before = injected(s)
            status, raw = post(s.base, body)            # armed: fails its Nth allocation
            ok = check_answer(status, raw, stream)
            errors += not ok
            fired = wait_for(lambda: injected(s) > before, 0.5 if ok else 5)
            assert ok or fired, f"N={n}: an error but nothing was injected: {raw[:300]}"
            status, raw = post(s.base, body)            # unarmed: must be served
            assert check_answer(status, raw, stream), f"after N={n}: {status} {raw[:300]}"
            assert wait_for(lambda: idle(s), 5), f"after N={n}: {s.admin('stats')}"
            assert s.pids() == pids, f"after N={n}: a process was restarted"
            if not fired:
                break
        else:
            pytest.fail(f"{role}: still injecting at N={MAX_N}")
        assert errors > 0, f"{role}: no injected failure ended a request"
    finally:
        s.stop()
    log = s.log_path.read_text()   # an ASan build reports leaks at exit
    for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert bad not in log, log[-4000:]
