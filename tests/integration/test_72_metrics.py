"""GET /metrics after a few requests on the real server: every series carries
model_name; the histograms are cumulative, end with +Inf = _count, and their
counts and sums match the requests, choices and tokens sent; the finish
reasons are counted (abort too, for a client that leaves); sluice_build_info
names the build; `promtool check metrics` passes; --metrics-names vllm writes
vLLM's names only (every one in vLLM's list below, every one vLLM's Grafana
dashboard reads); deploy/grafana/sluice-dashboard.json reads only series that
/metrics has."""
import json
import re
import socket
import subprocess
import urllib.request

import pytest

from paths import REPO, SLUICE
from serve import Server, wait_for
from test_70_ops import PROMTOOL

# The names vLLM's Prometheus logger exposes, as its /metrics spells them
# (counters with their _total), from vLLM 0.11's vllm/v1/metrics/loggers.py
# (https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/v1/metrics/loggers.py;
# the file's comments date it: "Deprecated in 0.11", "With 0.11.x you can
# enable with --show-hidden-metrics-for-version=0.10"). The speculative
# decoding and KV-transfer series of other files are left out: sluice has
# neither.
VLLM_0_11_NAMES = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:iteration_tokens_total",
    "vllm:request_max_num_generation_tokens", "vllm:request_params_n", "vllm:request_params_max_tokens",
    "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:cache_config_info",
    "vllm:lora_requests_info",
    # deprecated in 0.9.2, shown in 0.11 with --show-hidden-metrics-for-version=0.10
    "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
}

# What vLLM's Grafana dashboard reads (the list in vLLM's docs/design/metrics.md,
# "Grafana Dashboard", https://github.com/vllm-project/vllm/blob/main/docs/design/metrics.md;
# num_requests_swapped is the V0 engine's and has no V1 series).
VLLM_DASHBOARD_NAMES = {
    "vllm:e2e_request_latency_seconds", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:inter_token_latency_seconds", "vllm:time_to_first_token_seconds", "vllm:num_requests_running",
    "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens", "vllm:request_success_total", "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    "vllm:request_max_num_generation_tokens",
}

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{family: {"type": t, "samples": [(name, labels dict, value)]}} of an exposition."""
    families, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            families[name] = {"type": kind, "samples": []}
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))
            fam = next((f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in families), None)
            assert fam is not None, f"{name} has no TYPE line"
            families[fam]["samples"].append((name, labels, value))
    return families


def histogram(families, name):
    """(count, sum, cumulative bucket counts in order) of a histogram with one series; asserts its shape."""
    samples = families[name]["samples"]
    buckets = [v for n, l, v in samples if n == name + "_bucket"]
    les = [l["le"] for n, l, v in samples if n == name + "_bucket"]
    count = next(v for n, l, v in samples if n == name + "_count")
    total = next(v for n, l, v in samples if n == name + "_sum")
    assert les[-1] == "+Inf", f"{name}: last bucket is le={les[-1]}"
    assert buckets == sorted(buckets), f"{name}: buckets not cumulative: {buckets}"
    assert buckets[-1] == count, f"{name}: +Inf bucket {buckets[-1]} != _count {count}"
    return count, total, buckets


def value(families, name, **labels):
    return next(v for n, l, v in families[name]["samples"] if all(l.get(k) == x for k, x in labels.items()))


def post(s, path, body):
    req = urllib.request.Request(s.base + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()


def model_id(s):
    _, body = s.get("/v1/models")
    return json.loads(body)["data"][0]["id"]


# Three requests, four choices, every one to its max_tokens (ignore_eos):
# 5 + 3 + 4 + 4 = 16 tokens, 4 + 2 + 3 + 3 = 12 gaps between tokens.
REQUESTS = [
    ("/v1/completions", {"prompt": "In the beginning", "max_tokens": 5, "ignore_eos": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                              "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"prompt": "Once upon a time there was", "n": 2, "max_tokens": 4, "ignore_eos": True}),
]


def prompt_tokens(path, body, answer):
    if body.get("stream"):
        usage = [json.loads(line[6:]) for line in answer.splitlines()
                 if line.startswith("data: {") and '"usage"' in line]
        return usage[-1]["usage"]["prompt_tokens"]
    return json.loads(answer)["usage"]["prompt_tokens"]


@pytest.fixture(scope="module")
def scraped(chat_model, tmp_path_factory):
    """The sluice-named /metrics text after REQUESTS, the model's id and the
    prompt tokens of each choice."""
    s = Server(chat_model, tmp_path_factory.mktemp("metrics"), frontends=1)
    try:
        prompts = []
        for path, body in REQUESTS:
            answer = post(s, path, body)
            prompts += [prompt_tokens(path, body, answer)] * body.get("n", 1)
        status, text = s.get("/metrics")
        assert status == 200
        yield text.decode(), model_id(s), prompts
    finally:
        s.stop()


def test_every_series_has_model_name(scraped):
    text, model, _ = scraped
    families = parse(text)
    assert len(families) > 20
    for fam in families.values():
        for name, labels, _ in fam["samples"]:
            assert labels.get("model_name") == model, f"{name} {labels}"


def test_histograms_match_the_requests_and_tokens(scraped):
    text, _, prompts = scraped
    f = parse(text)
    choices, requests, tokens, gaps = 4, 3, 16, 12
    for name in ("sluice_time_to_first_token_seconds", "sluice_e2e_request_latency_seconds",
                 "sluice_request_queue_time_seconds", "sluice_request_prefill_time_seconds",
                 "sluice_request_decode_time_seconds", "sluice_request_inference_time_seconds",
                 "sluice_request_mean_inter_token_latency_seconds"):
        count, total, _ = histogram(f, name)
        assert count == choices, f"{name}: {count} observations for {choices} choices"
        assert total > 0, name
    count, total, _ = histogram(f, "sluice_inter_token_latency_seconds")
    assert count == gaps, f"one observation per gap between tokens: {count}, want {gaps}"
    count, total, buckets = histogram(f, "sluice_request_generation_tokens")
    assert (count, total) == (choices, tokens)
    assert buckets[:4] == [0, 0, 4, 4], buckets   # le=1, 2, 5, 10: 3, 4, 4 and 5 tokens
    count, total, _ = histogram(f, "sluice_request_prompt_tokens")
    assert (count, total) == (choices, sum(prompts))
    count, total, _ = histogram(f, "sluice_request_max_generation_tokens")
    assert (count, total) == (requests, 5 + 3 + 4)
    # decode + prefill = inference, per choice, so also in sum (ns rounding aside)
    inf = histogram(f, "sluice_request_inference_time_seconds")[1]
    parts = histogram(f, "sluice_request_prefill_time_seconds")[1] + histogram(f, "sluice_request_decode_time_seconds")[1]
    assert abs(inf - parts) < 1e-6
    assert value(f, "sluice_generation_tokens_total") == tokens
    assert value(f, "sluice_prompt_tokens_total") == sum(prompts)   # submitted once per choice
    assert value(f, "sluice_request_success_total", finished_reason="length") == choices
    for reason in ("stop", "tool_calls", "abort"):
        assert value(f, "sluice_request_success_total", finished_reason=reason) == 0


def test_build_info(scraped):
    f = parse(scraped[0])
    [(_, labels, v)] = f["sluice_build_info"]["samples"]
    assert v == 1
    assert set(labels) == {"model_name", "version", "commit", "build_type", "cuda"}
    assert labels["cuda"] in ("true", "false") and re.match(r"\d+\.\d+", labels["version"])
    out = subprocess.run([str(SLUICE), "--version"], capture_output=True, text=True).stdout
    assert labels["version"] in out and labels["commit"] in out


def test_promtool_passes(scraped):
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (Debian package 'prometheus'; tools/setup.sh installs it)")
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=scraped[0].encode(), capture_output=True, timeout=30)
    assert r.returncode == 0, f"promtool: {r.stdout.decode()}{r.stderr.decode()}"


def test_a_client_that_leaves_counts_as_abort(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        d = json.dumps({"prompt": "hello", "max_tokens": 400, "stream": True, "ignore_eos": True}).encode()
        c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(d)).encode() + b"\r\n\r\n" + d)
        got = b""
        while got.count(b"data: ") < 2:
            got += c.recv(4096)
        c.close()

        def aborted():
            return value(parse(s.get("/metrics")[1].decode()), "sluice_request_success_total",
                         finished_reason="abort")
        assert wait_for(lambda: aborted() == 1, 10), aborted()
        f = parse(s.get("/metrics")[1].decode())
        assert value(f, "sluice_request_success_total", finished_reason="length") == 0
    finally:
        s.stop()


def test_vllm_names(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1, extra=["--metrics-names", "vllm"])
    try:
        for path, body in REQUESTS[:2]:
            post(s, path, body)
        status, raw = s.get("/metrics")
        model = model_id(s)
    finally:
        s.stop()
    text = raw.decode()
    f = parse(text)
    names = set(f)
    assert names <= VLLM_0_11_NAMES, f"not vLLM names: {sorted(names - VLLM_0_11_NAMES)}"
    assert VLLM_DASHBOARD_NAMES <= names, f"missing for vLLM's dashboard: {sorted(VLLM_DASHBOARD_NAMES - names)}"
    for fam in f.values():
        for name, labels, _ in fam["samples"]:
            assert labels.get("model_name") == model, f"{name} {labels}"
    # the same numbers as sluice's names: 2 choices, 5 + 3 tokens, 4 + 2 gaps
    assert histogram(f, "vllm:request_generation_tokens")[:2] == (2, 8)
    assert histogram(f, "vllm:inter_token_latency_seconds")[0] == 6
    assert histogram(f, "vllm:time_per_output_token_seconds")[:2] == histogram(f, "vllm:inter_token_latency_seconds")[:2]
    assert value(f, "vllm:request_success_total", finished_reason="length") == 2
    assert value(f, "vllm:generation_tokens_total") == 8
    assert value(f, "vllm:kv_cache_usage_perc") == value(f, "vllm:gpu_cache_usage_perc")
    if PROMTOOL is not None:
        # promtool parses it (exit 1 would be a format error) and its lint
        # (exit 3) flags only the colons, which a scrape of vLLM gets too.
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=raw, capture_output=True, timeout=30)
        complaints = (r.stdout + r.stderr).decode().splitlines()
        assert r.returncode in (0, 3), complaints
        assert complaints, "promtool no longer minds colons: say so in docs/OPERATIONS.md"
        for line in complaints:
            assert re.fullmatch(r"vllm:\S+ metric names should not contain ':'", line), line


# PromQL words that look like metric names in an expression.
PROMQL_WORDS = {
    "sum", "rate", "irate", "increase", "histogram_quantile", "by", "without", "on", "ignoring", "le",
    "avg", "max", "min", "count", "clamp_min", "clamp_max", "and", "or", "unless", "offset", "bool",
    "group_left", "group_right", "model_name", "finished_reason", "vector", "scalar", "topk", "abs",
}


def dashboard_exprs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                yield v
            else:
                yield from dashboard_exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from dashboard_exprs(v)


def test_dashboard_reads_only_series_that_exist(scraped):
    dash = json.loads((REPO / "deploy/grafana/sluice-dashboard.json").read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert "model_name" in variables
    assert "label_values(sluice_build_info, model_name)" in json.dumps(variables["model_name"])
    exprs = list(dashboard_exprs(dash["panels"]))
    assert len(exprs) >= 8
    have = set(parse(scraped[0]))
    used = set()
    for e in exprs:
        assert 'model_name=~"$model_name"' in e or 'model_name="$model_name"' in e, e
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)            # label values
        bare = re.sub(r"\[[^\]]*\]", "", bare)                   # range selectors
        for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
            if word in PROMQL_WORDS or re.fullmatch(r"\d.*", word):
                continue
            used.add(word)
            base = re.sub(r"_(bucket|sum|count)$", "", word)
            assert word in have or base in have, f"{word} (in {e}) is not on /metrics"
    for needed in ("sluice_requests_running", "sluice_requests_waiting", "sluice_kv_cache_usage_ratio",
                   "sluice_time_to_first_token_seconds_bucket", "sluice_inter_token_latency_seconds_bucket",
                   "sluice_generation_tokens_total", "sluice_prefix_cache_hits_total",
                   "sluice_prefix_cache_queries_total", "sluice_requests_failed_total"):
        assert needed in used, f"the dashboard does not read {needed}"
