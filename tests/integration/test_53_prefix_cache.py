"""The worker's prefix cache through the real server on the CPU backend: a
prompt sent again reuses the KV of its full blocks, reports them as
usage.prompt_tokens_details.cached_tokens, and answers bitwise as it did cold
(same tokens, same logprobs); --no-prefix-cache reports 0; a second turn
that resends the first is computed only past what was resent; one prompt
sent by several clients at once is computed once; and a chat replayed turn
by turn (tools/prefix-replay.py) computes only its new tokens."""
import concurrent.futures
import importlib.util
import json
import os
import signal
import threading
import urllib.request

import pytest

from paths import REPO
from serve import Server, wait_for

DEFAULT = REPO / "models/default/sluice-default-q8_0.gguf"

BLOCK = 16   # SL_KV_BLOCK_TOKENS


def post(s, path, body):
    req = urllib.request.Request(s.base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def complete(s, prompt, **kw):
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3, **kw}
    return post(s, "/v1/completions", body)


def cached(r):
    return r["usage"]["prompt_tokens_details"]["cached_tokens"]


def answer(r):
    c = r["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]


def metric(s, name):
    _, body = s.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not on /metrics")


def worker_snapshot(s):
    return s.admin("effective-config")["worker"]


def prompt_ids(n, salt=0):
    return [(i * 37 + salt * 11 + 5) % 200 + 10 for i in range(n)]


def test_second_identical_prompt_is_cached_and_bitwise_equal(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        p = prompt_ids(300)
        cold = complete(s, p)
        warm = complete(s, p)
        assert cached(cold) == 0
        assert cached(warm) == (300 - 1) // BLOCK * BLOCK
        assert answer(warm) == answer(cold), "a cache hit answers bitwise as the cold run"
        assert warm["usage"]["prompt_tokens"] == 300
        # the streaming usage chunk carries it too
        body = json.dumps({"prompt": p, "max_tokens": 4, "temperature": 0, "stream": True,
                           "stream_options": {"include_usage": True}}).encode()
        req = urllib.request.Request(s.base + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        usage = None
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("data: {"):
                    ev = json.loads(line[6:])
                    if ev.get("usage"):
                        usage = ev["usage"]
        assert usage and usage["prompt_tokens_details"]["cached_tokens"] == 288
        # a stop string ends the request before the worker does: still reported
        full = complete(s, p, max_tokens=16)
        text = full["choices"][0]["text"]
        mid = len(text) // 2
        stop = text[mid:mid + 3]
        assert stop.strip(), f"need some text to cut at: {text!r}"
        cut = complete(s, p, max_tokens=16, stop=[stop])
        assert cut["choices"][0]["finish_reason"] == "stop"
        assert cached(cut) == 288
        # chat: the same conversation twice
        msgs = {"messages": [{"role": "user", "content": "tell me about rivers " * 20}], "max_tokens": 4,
                "temperature": 0}
        c1, c2 = post(s, "/v1/chat/completions", msgs), post(s, "/v1/chat/completions", msgs)
        assert cached(c1) == 0 and cached(c2) > 0
        assert c2["choices"][0]["message"]["content"] == c1["choices"][0]["message"]["content"]
        # counters and the worker's snapshot
        assert metric(s, "sluice_prefix_cache_hits_total") >= 2 * 288 + cached(c2)
        assert metric(s, "sluice_prefix_cache_queries_total") >= 3 * 300
        assert wait_for(lambda: worker_snapshot(s).get("prefix_cache_hit_tokens", 0) >= 2 * 288, 5)
        w = worker_snapshot(s)
        assert w["prefix_cache"] == {"value": 1, "source": "default"}
        assert w["prefix_cache_blocks"] > 0
    finally:
        s.stop()


def test_multi_turn_computes_only_what_was_not_resent(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        turn1 = prompt_ids(200, salt=1)
        complete(s, turn1)
        turn2 = turn1 + prompt_ids(57, salt=2)
        r2 = complete(s, turn2)
        assert cached(r2) == 200 // BLOCK * BLOCK, "what was resent, in whole blocks"
        turn3 = turn2 + prompt_ids(30, salt=3)
        r3 = complete(s, turn3)
        assert cached(r3) == 257 // BLOCK * BLOCK
    finally:
        s.stop()


def test_restarted_worker_starts_with_an_empty_cache(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        p = prompt_ids(120, salt=4)
        cold = complete(s, p)
        assert cached(complete(s, p)) == 112
        worker, _ = s.pids()
        os.kill(worker, signal.SIGKILL)
        assert wait_for(lambda: s.get("/ready")[0] == 200 and s.pids()[0] != worker, 30)
        again = complete(s, p)
        assert cached(again) == 0, "the cache lived in the dead worker"
        assert answer(again) == answer(cold)
        assert cached(complete(s, p)) == 112
    finally:
        s.stop()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_no_prefix_cache_reports_zero(chat_model, tmp_path, how):
    extra, env = (["--no-prefix-cache"], None) if how == "flag" else ([], dict(os.environ, SLUICE_PREFIX_CACHE="0"))
    s = Server(chat_model, tmp_path, frontends=1, extra=extra, env=env)
    try:
        p = prompt_ids(100)
        a, b = complete(s, p), complete(s, p)
        assert cached(a) == 0 and cached(b) == 0
        assert answer(a) == answer(b)
        assert metric(s, "sluice_prefix_cache_hits_total") == 0
        w = worker_snapshot(s)
        assert w["prefix_cache"] == {"value": 0, "source": how}
        assert w["prefix_cache_blocks"] == 0
    finally:
        s.stop()


def test_identical_prompts_sent_together_compute_the_prompt_once(chat_model, tmp_path):
    """Four clients send one prompt at the same moment: the worker prefills it
    once and the others wait for its blocks (or, if they came later, find
    them cached); every answer is the cold one, bitwise."""
    s = Server(chat_model, tmp_path, frontends=2)
    try:
        p = prompt_ids(300, salt=5)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            rs = list(pool.map(lambda _: complete(s, p), range(4)))
        assert sorted(cached(r) for r in rs) == [0, 288, 288, 288]
        assert metric(s, "sluice_prefix_cache_hits_total") == 3 * 288
        assert all(answer(r) == answer(rs[0]) for r in rs)
    finally:
        s.stop()
    s = Server(chat_model, tmp_path, frontends=1, extra=["--no-prefix-cache"])
    try:
        assert answer(complete(s, p)) == answer(rs[0]), "the cold run"
    finally:
        s.stop()


def test_n_choices_share_the_prompt_blocks(chat_model, tmp_path):
    """n = 3 is three sequences with one prompt. The worker is paused while
    they arrive, so all three wait in one step: on resume the first prefills
    the prompt, the other two are deferred until its blocks exist and then map
    them; each choice with seed s + i equals an n = 1 request with that seed."""
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        p = prompt_ids(300, salt=9)
        assert s.admin("pause") == {"paused": True}
        assert wait_for(lambda: worker_snapshot(s).get("paused") is True, 10)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=complete(s, p, n=3, temperature=1.0, seed=40)), daemon=True)
        t.start()
        assert wait_for(lambda: worker_snapshot(s).get("waiting_now") == 3, 10), worker_snapshot(s)
        assert s.admin("resume") == {"paused": False}
        t.join(60)
        r = out["r"]
        assert [c["index"] for c in r["choices"]] == [0, 1, 2]
        assert metric(s, "sluice_prefix_cache_hits_total") == 2 * 288
        assert worker_snapshot(s)["prefix_deferrals"] == 2
        for i, c in enumerate(r["choices"]):
            one = complete(s, p, temperature=1.0, seed=40 + i)["choices"][0]
            assert (c["text"], c["logprobs"]["token_logprobs"]) == (one["text"], one["logprobs"]["token_logprobs"])
    finally:
        s.stop()


def load_replay():
    spec = importlib.util.spec_from_file_location("prefix_replay", REPO / "tools/prefix-replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not DEFAULT.exists(), reason="models/default is not there")
def test_chat_replay_computes_only_the_new_tokens(tmp_path):
    """tools/prefix-replay.py on the shipped 12M model, greedy: from the
    second turn on, each request computes at most the tokens the previous
    request did not have plus one block (the partial block of the cached
    part, and the previous turn's last token, which was never fed)."""
    s = Server(DEFAULT, tmp_path, frontends=1)
    try:
        rows = load_replay().replay(s.base, turns=5, max_tokens=24, system_words=60, user_words=20)
    finally:
        s.stop()
    assert rows[0]["cached"] == 0 and rows[0]["computed"] == rows[0]["prompt"]
    for r in rows[1:]:
        assert r["cached"] > 0 and r["cached"] % BLOCK == 0, r
        assert r["computed"] <= r["new"] + BLOCK, rows
