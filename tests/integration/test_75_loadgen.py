"""The benchmark kit: tools/loadgen against tools/stubserver (exact counts,
every error kind, the parser under every split of the bytes) and against the
real `sluice serve` with a tiny model (usage totals = requests x max_tokens
with ignore_eos)."""
import json
import re
import subprocess

import pytest

from paths import tool
from serve import Server


@pytest.fixture(scope="module")
def stub():
    """A stub server on a free port, tokens as fast as possible."""
    procs = []

    def start(*extra):
        p = subprocess.Popen([tool("stubserver"), "--port", "0", "--threads", "2", *extra],
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.search(r"listening on http://([^ ]+) ", line)
        assert m, line
        procs.append(p)
        return m.group(1)

    yield start
    for p in procs:
        p.kill()
        p.wait()


def loadgen(tmp_path, url, *args, expect_rc=0):
    out = tmp_path / "lg.json"
    r = subprocess.run([tool("loadgen"), "--url", url, "--json", str(out), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == expect_rc, r.stdout + r.stderr
    return json.loads(out.read_text())["levels"], r.stdout


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stub_counts_exact(stub, tmp_path, endpoint):
    url = stub()
    levels, text = loadgen(tmp_path, url, "--endpoint", endpoint, "--concurrency", "1,8", "--requests", "40",
                           "--max-tokens", "16", "--threads", "2")
    assert [lv["concurrency"] for lv in levels] == [1, 8]
    for lv in levels:
        assert lv["errors_total"] == 0, lv
        assert lv["requests_ok"] == 40
        assert lv["completion_tokens"] == 40 * 16
        assert lv["content_chunks"] == 40 * 16
        assert lv["ttft_ms"]["n"] == 40 and lv["itl_ms"]["n"] == 40 * 15 and lv["e2e_ms"]["n"] == 40
        assert lv["output_tok_s"] > 0 and lv["cpu"]["seconds"] >= 0
    assert levels[0]["connects"] == 1, "keep-alive: one connection for every request of c=1"
    assert "out_tok/s" in text


@pytest.mark.parametrize("read_size", [1, 2, 3, 7, 61])
def test_parser_any_split(stub, tmp_path, read_size):
    """recv() of a few bytes at a time cuts the chunk sizes, CRLFs, SSE lines
    and JSON at every position: the counts must not change."""
    url = stub()
    levels, _ = loadgen(tmp_path, url, "--concurrency", "2", "--requests", "6", "--max-tokens", "5",
                        "--read-size", str(read_size))
    lv = levels[0]
    assert lv["errors_total"] == 0, lv
    assert (lv["requests_ok"], lv["completion_tokens"], lv["content_chunks"]) == (6, 30, 30)


def test_stub_pacing_measured(stub, tmp_path):
    """10 tokens 2 ms apart after a 2 ms first token: end-to-end >= 20 ms,
    TTFT >= 2 ms (lower bounds only: a loaded machine may be slower)."""
    url = stub("--token-us", "2000")
    levels, _ = loadgen(tmp_path, url, "--concurrency", "2", "--requests", "6", "--max-tokens", "10")
    lv = levels[0]
    assert lv["errors_total"] == 0 and lv["completion_tokens"] == 60
    assert lv["e2e_ms"]["p50"] >= 19.0 and lv["ttft_ms"]["p50"] >= 1.9, lv


def test_error_kinds(stub, tmp_path):
    url = stub("--ttft-us", "3000000", "--token-us", "1000")
    levels, text = loadgen(tmp_path, url, "--requests", "2", "--max-tokens", "2", "--timeout", "0.3", expect_rc=1)
    assert levels[0]["errors"]["timeout"] == 2 and levels[0]["requests_ok"] == 0
    assert "timeout=2" in text
    # the stub refuses max_tokens over a million: an HTTP status error, with the body in the report
    url = stub()
    levels, text = loadgen(tmp_path, url, "--requests", "3", "--max-tokens", "2000000", expect_rc=1)
    assert levels[0]["errors"]["http"] == 3, levels[0]
    assert "HTTP 400" in levels[0]["first_error"]
    # nothing listening: connect errors, and the run still ends
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    levels, _ = loadgen(tmp_path, f"127.0.0.1:{port}", "--requests", "3", expect_rc=1)
    assert levels[0]["errors"]["connect"] == 3


@pytest.mark.parametrize("fault,kind", [("bad-json", "malformed"), ("no-usage", "missing_usage"),
                                        ("no-done", "malformed"), ("error-event", "stream_error"), ("close", "io")])
def test_stream_faults_counted(stub, tmp_path, fault, kind):
    url = stub("--fault", fault)
    levels, _ = loadgen(tmp_path, url, "--concurrency", "2", "--requests", "5", "--max-tokens", "8", expect_rc=1)
    lv = levels[0]
    assert lv["errors"][kind] == 5 and lv["errors_total"] == 5, lv
    assert lv["requests_ok"] == 0 and lv["completion_tokens"] == 0


def test_real_server_usage_totals(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=2)
    try:
        url = f"127.0.0.1:{s.port}"
        for endpoint in ("chat", "completions"):
            levels, _ = loadgen(tmp_path, url, "--endpoint", endpoint, "--concurrency", "1,4", "--requests", "8",
                                "--max-tokens", "12", "--prompt-words", "20", "--ignore-eos", "--threads", "2")
            for lv in levels:
                assert lv["errors_total"] == 0, lv
                assert lv["requests_ok"] == 8
                assert lv["completion_tokens"] == 8 * 12, lv
                assert lv["prompt_tokens"] > 8 * 20 / 2
                # a chunk carries one token or more (held-back partial characters join the next)
                assert 0 < lv["content_chunks"] <= lv["completion_tokens"]
                assert lv["ttft_ms"]["n"] == 8
    finally:
        s.stop()


def show(*args):
    r = subprocess.run([tool("loadgen"), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_shared_prefix_words(endpoint):
    """--shared-prefix-words P: every prompt opens with the same P words (the
    same text every run), then its own --prompt-words words."""
    def words(i, p, w):
        body = show("--show-request", str(i), "--endpoint", endpoint, "--shared-prefix-words", str(p),
                    "--prompt-words", str(w))
        text = body["messages"][0]["content"] if endpoint == "chat" else body["prompt"]
        return text.split(" ")
    a, b = words(0, 300, 40), words(1, 300, 40)
    assert len(a) == len(b) == 340
    assert a[:300] == b[:300] == words(7, 300, 0)
    assert a[300:] != b[300:], "the distinct part differs per request"
    assert a[300:] == words(0, 0, 40), "and is the part --prompt-words alone gives"
    assert words(0, 0, 40) != words(1, 0, 40)


@pytest.mark.parametrize("bad", ["-1", "1000001"])
def test_shared_prefix_words_refused(bad):
    r = subprocess.run([tool("loadgen"), "--show-request", "0", "--shared-prefix-words", bad],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr
