"""`echo` on /v1/completions, as OpenAI's legacy completions API has it and
lm-eval-harness's loglikelihood reads it: the prompt leads the text (the
string as sent, or a token prompt detokenized), every choice echoes, a stream
sends the prompt first; with `logprobs` the logprobs cover the prompt's tokens
first (token 0 unscored: null) and then the generated ones; `max_tokens: 0`
with echo is the prompt alone, finish_reason "length".

Two servers: tools/fe-harness, whose echo worker honours echo_logprobs (its
"generation" is the prompt again, then EOS, so every answer is known), tests
the front end's side of the contract exactly; the real `sluice serve` on the
shipped 12M model checks the same shapes end to end, and that the generated
part of an echo answer is the answer without echo at temperature 0."""
import json

import openai
import pytest

from fe_harness import Harness, qwen3_model, sse_events
from paths import REPO
from serve import Server, wait_for

DEFAULT = REPO / "models/default/sluice-default-q8_0.gguf"
PROMPT = "The river ran past the old mill"


def completion(h, body):
    s, _, b = h.post("/v1/completions", body)
    return s, json.loads(b) if s != 200 or not body.get("stream") else b


def stream_texts(raw, n):
    """Per choice: its text chunks in order, the concatenated logprobs and the finish."""
    texts = [[] for _ in range(n)]
    lps = [{"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []} for _ in range(n)]
    fins = [None] * n
    for ev in sse_events(raw):
        if ev == "[DONE]":
            continue
        o = json.loads(ev)
        for c in o["choices"]:
            i = c["index"]
            if c["text"]:
                texts[i].append(c["text"])
            if c["logprobs"]:
                for k in lps[i]:
                    lps[i][k] += c["logprobs"][k]
            if c["finish_reason"]:
                fins[i] = c["finish_reason"]
    return texts, lps, fins


# ---------------------------------------------------------------- fe-harness (echo worker)

@pytest.fixture(scope="module")
def hmodel(make_model, tmp_path_factory):
    return qwen3_model(make_model, tmp_path_factory)


@pytest.fixture(scope="module")
def h(hmodel):
    s = Harness(hmodel, n=1)
    yield s
    assert s.stop() == 0


def tokens_of(h, text):
    s, _, b = h.post("/tokenize", {"content": text})
    assert s == 200
    return json.loads(b)["tokens"]


def test_harness_echo_text_string_prompt_n2(h):
    s, plain = completion(h, {"prompt": PROMPT, "max_tokens": 4, "n": 2})
    assert s == 200
    s, r = completion(h, {"prompt": PROMPT, "max_tokens": 4, "n": 2, "echo": True})
    assert s == 200, r
    assert [c["index"] for c in r["choices"]] == [0, 1]
    for c, p in zip(r["choices"], plain["choices"]):
        assert c["text"] == PROMPT + p["text"]
        assert c["finish_reason"] == p["finish_reason"] == "length"
        assert c["logprobs"] is None
    assert r["usage"] == plain["usage"]      # prompt_tokens unchanged, the echo is not generated


def test_harness_echo_text_token_prompt(h):
    toks = tokens_of(h, PROMPT)
    s, plain = completion(h, {"prompt": toks, "max_tokens": 3})
    s, r = completion(h, {"prompt": toks, "max_tokens": 3, "echo": True})
    assert s == 200, r
    s, _, b = h.post("/detokenize", {"tokens": toks})
    assert r["choices"][0]["text"] == json.loads(b)["content"] + plain["choices"][0]["text"]


def test_harness_echo_stream_sends_the_prompt_first_in_every_choice(h):
    s, whole = completion(h, {"prompt": PROMPT, "max_tokens": 4, "n": 2, "echo": True})
    s, raw = completion(h, {"prompt": PROMPT, "max_tokens": 4, "n": 2, "echo": True, "stream": True})
    assert s == 200
    texts, _, fins = stream_texts(raw, 2)
    for i in range(2):
        assert texts[i][0].startswith(PROMPT)
        assert "".join(texts[i]) == whole["choices"][i]["text"]
        assert fins[i] == "length"


def test_harness_echo_logprobs_max_tokens_0(h):
    s, r = completion(h, {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 2})
    assert s == 200, r
    c = r["choices"][0]
    lp = c["logprobs"]
    n = r["usage"]["prompt_tokens"]
    assert c["text"] == PROMPT and c["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 0
    # what lm-eval-harness reads
    assert len(lp["token_logprobs"]) == n and lp["token_logprobs"][0] is None
    assert all(isinstance(x, float) for x in lp["token_logprobs"][1:])
    assert lp["top_logprobs"][0] is None and all(isinstance(t, dict) for t in lp["top_logprobs"][1:])
    assert "".join(lp["tokens"]) == PROMPT          # Qwen3 adds no BOS: the tokens spell the prompt
    assert lp["text_offset"][0] == 0
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(n)]


def test_harness_echo_logprobs_then_generated(h):
    s, plain = completion(h, {"prompt": PROMPT, "max_tokens": 3, "logprobs": 1})
    s, r = completion(h, {"prompt": PROMPT, "max_tokens": 3, "echo": True, "logprobs": 1})
    assert s == 200, r
    n = r["usage"]["prompt_tokens"]
    lp, plp = r["choices"][0]["logprobs"], plain["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == n + 3
    assert lp["tokens"][n:] == plp["tokens"] and lp["token_logprobs"][n:] == plp["token_logprobs"]
    assert r["choices"][0]["text"] == PROMPT + plain["choices"][0]["text"]
    # the generated tokens' offsets point into the echoed text
    assert lp["text_offset"][n:] == [len(PROMPT) + o for o in plp["text_offset"]]
    # streamed: the same entries, the prompt's first
    s, raw = completion(h, {"prompt": PROMPT, "max_tokens": 3, "echo": True, "logprobs": 1, "stream": True,
                            "n": 2})
    texts, lps, fins = stream_texts(raw, 2)
    for i in range(2):
        assert lps[i] == lp and "".join(texts[i]) == r["choices"][0]["text"] and fins[i] == "length"


def test_harness_echo_max_tokens_0_without_logprobs(h):
    for stream in (False, True):
        s, r = completion(h, {"prompt": PROMPT, "max_tokens": 0, "echo": True, "stream": stream, "n": 2})
        assert s == 200
        if stream:
            texts, _, fins = stream_texts(r, 2)
            assert ["".join(t) for t in texts] == [PROMPT, PROMPT] and fins == ["length", "length"]
        else:
            assert [c["text"] for c in r["choices"]] == [PROMPT, PROMPT]
            assert [c["finish_reason"] for c in r["choices"]] == ["length", "length"]
            assert r["usage"]["completion_tokens"] == 0
    assert h.wait_mailboxes_free(64)["free"] == 64     # the cancelled mailboxes came back


def test_harness_refusals(h):
    s, e = completion(h, {"prompt": PROMPT, "max_tokens": 0})
    assert s == 400 and e["error"]["param"] == "max_tokens"
    s, e = completion(h, {"prompt": PROMPT, "max_tokens": 0, "echo": False})
    assert s == 400 and e["error"]["param"] == "max_tokens"
    s, e = completion(h, {"prompt": PROMPT, "echo": "yes"})
    assert s == 400 and e["error"]["param"] == "echo"
    s, _, b = h.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "echo": True})
    assert s == 400 and json.loads(b)["error"]["param"] == "echo"


def test_harness_without_logprobs_support(hmodel):
    s = Harness(hmodel, "--no-logprobs", n=1)
    try:
        st, e = completion(s, {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 1})
        assert st == 400 and e["error"]["param"] == "logprobs" and "without logprobs" in e["error"]["message"]
        st, r = completion(s, {"prompt": PROMPT, "max_tokens": 2, "echo": True})
        assert st == 200 and r["choices"][0]["text"].startswith(PROMPT)
    finally:
        assert s.stop() == 0


def test_harness_echo_counts_toward_max_response(hmodel):
    long_prompt = "word " * 120                       # 600 bytes of echo
    s = Harness(hmodel, "--max-response", "700", n=1)
    try:
        st, r = completion(s, {"prompt": long_prompt, "max_tokens": 1})
        assert st == 200, r
        st, e = completion(s, {"prompt": long_prompt, "max_tokens": 1, "echo": True})
        assert st == 400 and e["error"]["code"] == "response_too_large", e
    finally:
        assert s.stop() == 0


# ---------------------------------------------------------------- the real server, 12M model

real = pytest.mark.skipif(not DEFAULT.exists(), reason="models/default is not there")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not DEFAULT.exists():
        pytest.skip("models/default is not there")
    s = Server(DEFAULT, tmp_path_factory.mktemp("t71"), frontends=1, extra=["--ctx-size", "512"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def worker_scores(client, model):
    """The worker honours echo_logprobs (shared/shm.h): with max_tokens 1, an
    echo + logprobs answer holds one entry per prompt token plus the
    generated one."""
    r = client.completions.create(model=model, prompt=PROMPT, echo=True, logprobs=2, temperature=0, max_tokens=1)
    n, gen = r.usage.prompt_tokens, r.usage.completion_tokens
    got = len(r.choices[0].logprobs.token_logprobs)
    assert got == n + gen, f"{got} logprobs entries for {n} prompt and {gen} generated tokens"


def generated_counter(server):
    _, body = server.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith("sluice_generation_tokens_total"):
            return float(line.split()[-1])
    raise AssertionError("sluice_generation_tokens_total not on /metrics")


@real
def test_real_echo_text(client, model):
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, n=2)
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, n=2, echo=True)
    assert [c.text for c in r.choices] == [PROMPT + c.text for c in plain.choices]
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, n=2,
                                            echo=True, stream=True))
    for i in range(2):
        t = [c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i and c.choices[0].text]
        assert t[0].startswith(PROMPT) and "".join(t) == r.choices[i].text


@real
def test_real_echo_token_prompt(client, model, server):
    import urllib.request
    req = urllib.request.Request(server.base + "/tokenize", data=json.dumps({"content": PROMPT}).encode(),
                                 headers={"content-type": "application/json"})
    toks = json.loads(urllib.request.urlopen(req, timeout=30).read())["tokens"]
    plain = client.completions.create(model=model, prompt=toks, max_tokens=4, temperature=0)
    r = client.completions.create(model=model, prompt=toks, max_tokens=4, temperature=0, echo=True)
    assert r.choices[0].text.endswith(plain.choices[0].text)
    assert r.choices[0].text[:-len(plain.choices[0].text) or None].strip() == PROMPT.strip()


@real
def test_real_echo_logprobs_max_tokens_0_is_what_lm_eval_reads(client, model, worker_scores):
    r = client.completions.create(model=model, prompt=PROMPT, echo=True, logprobs=2, temperature=0, max_tokens=0)
    c = r.choices[0]
    n = r.usage.prompt_tokens
    assert c.text == PROMPT and c.finish_reason == "length" and r.usage.completion_tokens == 0
    assert len(c.logprobs.token_logprobs) == n and c.logprobs.token_logprobs[0] is None
    assert all(isinstance(x, float) and x <= 0 for x in c.logprobs.token_logprobs[1:])
    assert c.logprobs.top_logprobs[0] is None and len(c.logprobs.tokens) == n


@real
def test_real_echo_logprobs_then_generated_equals_no_echo(client, model, worker_scores):
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=2)
    r = client.completions.create(model=model, prompt=PROMPT, echo=True, logprobs=2, temperature=0, max_tokens=3)
    n = r.usage.prompt_tokens
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == n + 3
    assert r.choices[0].text == PROMPT + plain.choices[0].text
    assert lp.tokens[n:] == plain.choices[0].logprobs.tokens


@real
def test_real_echo_records_are_not_counted_as_generated_tokens(client, model, server, worker_scores):
    """The prompt's records travel in the token ring, but /metrics counts only
    generated tokens: a max_tokens 0 echo adds none, max_tokens 2 adds two."""
    before = generated_counter(server)
    client.completions.create(model=model, prompt=PROMPT, echo=True, logprobs=1, temperature=0, max_tokens=0)
    assert wait_for(lambda: generated_counter(server) == before, 5)
    client.completions.create(model=model, prompt=PROMPT, echo=True, logprobs=1, temperature=0, max_tokens=2,
                              extra_body={"ignore_eos": True})
    assert wait_for(lambda: generated_counter(server) == before + 2, 5)
