"""50-level: end to end with the official `openai` Python client against
tools/fe-harness (front ends + echo worker). Every response must parse into the
client's types; the echo worker makes each output predictable: it answers with
the prompt's own tokens, then EOS. Also what such clients rely on around the
calls: the model's names (--model-alias, repeatable; --accept-any-model), the
routes without /v1 (a base_url without it), and system_fingerprint."""
import json
import re
import subprocess

import openai
import pytest

from fe_harness import Harness, qwen3_model, sse_events


@pytest.fixture(scope="module")
def model(make_model, tmp_path_factory):
    return qwen3_model(make_model, tmp_path_factory)


@pytest.fixture(scope="module")
def srv(model):
    h = Harness(model, "--model-alias", "tiny", "--model-alias", "gpt-4o-mini", "--api-key", "k-50", n=2)
    yield h
    assert h.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="k-50", max_retries=0, timeout=30)


def effective_config(srv):
    st, _, b = srv.request("GET", "/v1/effective-config", headers={"Authorization": "Bearer k-50"})
    assert st == 200, b
    return json.loads(b)


MSG = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]


def test_models(client):
    # Every name, the primary (the one responses report) first.
    ms = client.models.list()
    assert [m.id for m in ms.data] == ["tiny", "gpt-4o-mini"]
    assert client.models.retrieve("tiny").id == "tiny"
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_an_alias_is_served_under_the_primary_name(client, srv):
    r = client.chat.completions.create(model="gpt-4o-mini", messages=MSG)
    assert r.model == "tiny" and r.choices[0].finish_reason == "stop"
    # No model, null and "" mean the served model; another name is a 404 naming it.
    for body in ({}, {"model": None}, {"model": ""}):
        st, _, b = srv.post("/v1/completions", {**body, "prompt": "hi"}, {"Authorization": "Bearer k-50"})
        assert st == 200 and json.loads(b)["model"] == "tiny", (body, b)
    st, _, b = srv.post("/v1/completions", {"model": "Tiny", "prompt": "hi"}, {"Authorization": "Bearer k-50"})
    err = json.loads(b)["error"]
    assert st == 404 and err["code"] == "model_not_found" and err["param"] == "model" and "`Tiny`" in err["message"]
    cfg = effective_config(srv)["frontend"]
    assert cfg["model_names"] == ["tiny", "gpt-4o-mini"] and cfg["model_name"] == "tiny"
    assert cfg["accept_any_model"] is False


def test_accept_any_model_serves_every_name(model):
    h = Harness(model, "--model-alias", "tiny", "--accept-any-model", n=1)
    try:
        c = openai.OpenAI(base_url=h.base + "/v1", api_key="none", max_retries=0, timeout=30)
        r = c.chat.completions.create(model="gpt-4-turbo-whatever", messages=MSG)
        assert r.model == "tiny" and r.choices[0].finish_reason == "stop"
        assert [m.id for m in c.models.list().data] == ["tiny"]
        with pytest.raises(openai.NotFoundError):   # what it serves is still only its names
            c.models.retrieve("gpt-4-turbo-whatever")
        assert h.config()["frontend"]["accept_any_model"] is True
    finally:
        assert h.stop() == 0


def test_base_url_without_v1(srv):
    """Clients configured with the server's root as base_url call /chat/completions,
    /completions, /models: the same routes."""
    c = openai.OpenAI(base_url=srv.base, api_key="k-50", max_retries=0, timeout=30)
    assert [m.id for m in c.models.list().data] == ["tiny", "gpt-4o-mini"]
    assert c.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    r = c.chat.completions.create(model="tiny", messages=MSG)
    assert r.object == "chat.completion" and r.choices[0].finish_reason == "stop"
    chunks = list(c.chat.completions.create(model="tiny", messages=MSG, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == r.choices[0].message.content
    r = c.completions.create(model="tiny", prompt="Once upon", max_tokens=8)
    assert r.choices[0].text == "Once upon"
    st, _, b = srv.request("GET", "/effective-config", headers={"Authorization": "Bearer k-50"})
    assert st == 200 and json.loads(b)["frontend"]["model_name"] == "tiny"
    # The prefix-less routes are exact names, like the rest: no /v1 twice, no other prefix.
    for path in ("/v1/v1/models", "/chat", "/models/"):
        assert srv.request("GET", path, headers={"Authorization": "Bearer k-50"})[0] == 404, path
    # Without the key they are refused as their /v1 twins are.
    assert srv.request("GET", "/models")[0] == 401


def test_system_fingerprint(client, srv):
    """One fingerprint per build and model, on whole responses and every chunk."""
    fp = effective_config(srv)["frontend"]["system_fingerprint"]
    assert re.fullmatch(r"fp_[0-9a-f]{12}", fp), fp
    assert client.chat.completions.create(model="tiny", messages=MSG).system_fingerprint == fp
    assert client.completions.create(model="tiny", prompt="hi").system_fingerprint == fp
    chunks = list(client.chat.completions.create(model="tiny", messages=MSG, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks and all(ch.system_fingerprint == fp for ch in chunks)
    assert all(ch.system_fingerprint == fp for ch in client.completions.create(model="tiny", prompt="hi", stream=True))


def test_chat_non_stream(client):
    r = client.chat.completions.create(model="tiny", messages=MSG)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant" and c.finish_reason == "stop"
    # The echo is the rendered prompt; control tokens (<|im_start|>) are not shown.
    assert "Be brief." in c.message.content and "Hello there" in c.message.content
    assert "<|im_start|>" not in c.message.content
    assert r.usage.completion_tokens == r.usage.prompt_tokens + 1      # prompt echoed, then EOS
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_non_stream(client):
    whole = client.chat.completions.create(model="tiny", messages=MSG).choices[0].message.content
    chunks = list(client.chat.completions.create(model="tiny", messages=MSG, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    fin = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(fin) == 1 and fin[0].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_completions(client):
    r = client.completions.create(model="tiny", prompt="The quick brown fox")
    assert r.object == "text_completion"
    assert r.choices[0].text == "The quick brown fox" and r.choices[0].finish_reason == "stop"
    s = list(client.completions.create(model="tiny", prompt="The quick brown fox", stream=True))
    assert "".join(c.choices[0].text for c in s if c.choices) == "The quick brown fox"
    assert s[-1].choices[0].finish_reason == "stop"


def test_max_tokens_length(client):
    r = client.completions.create(model="tiny", prompt="one two three four five six", max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    assert r.choices[0].text == "one two three"
    r = client.chat.completions.create(model="tiny", messages=MSG, max_completion_tokens=2)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_cut_exactly(client, stream):
    kw = dict(model="tiny", prompt="alpha beta gamma delta epsilon", stop=[" gamma", "zzz"])
    if stream:
        out = list(client.completions.create(stream=True, **kw))
        text = "".join(c.choices[0].text for c in out if c.choices)
        fin = out[-1].choices[0].finish_reason
    else:
        r = client.completions.create(**kw)
        text, fin = r.choices[0].text, r.choices[0].finish_reason
    assert text == "alpha beta" and fin == "stop"


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                       logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) >= 2
    for t in lp:
        assert t.logprob == pytest.approx(-0.25) and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob == pytest.approx(-0.25)
        assert isinstance(t.bytes, list)
    s = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            logprobs=True, top_logprobs=1, stream=True))
    n = sum(len(c.choices[0].logprobs.content) for c in s if c.choices and c.choices[0].logprobs)
    assert n == len(lp)


def test_completions_logprobs(client):
    r = client.completions.create(model="tiny", prompt="red green blue", logprobs=2)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == "red green blue"
    assert all(x == pytest.approx(-0.25) for x in lp.token_logprobs)
    assert all(len(d) <= 2 for d in lp.top_logprobs)
    assert lp.text_offset[0] == 0


def test_errors_map_to_client_exceptions(client, srv):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="hi", max_tokens=10 ** 6)
    assert e.value.code in ("context_length_exceeded", "invalid_value")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=MSG)
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MSG, n=17)
    assert e.value.param == "n"


def test_timings_and_seed_accepted(client):
    r = client.chat.completions.create(model="tiny", messages=MSG, seed=7, temperature=0.5, top_p=0.9,
                                       extra_body={"top_k": 20, "min_p": 0.05, "ignore_eos": False})
    extra = r.model_extra or {}
    assert "timings" in extra and extra["timings"]["predicted_n"] == r.usage.completion_tokens


def test_curl_sse(srv):
    out = subprocess.run(["curl", "-sN", "-H", "Authorization: Bearer k-50", "-H", "Content-Type: application/json",
                          "-d", json.dumps({"model": "tiny", "messages": MSG, "stream": True}),
                          srv.base + "/v1/chat/completions"], capture_output=True, timeout=30, check=True).stdout
    ev = sse_events(out)
    assert ev[-1] == "[DONE]"
    objs = [json.loads(e) for e in ev[:-1]]
    assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert objs[-1]["choices"][0]["finish_reason"] == "stop"
    assert out.endswith(b"data: [DONE]\n\n")


def test_many_concurrent_streams(client):
    import concurrent.futures as cf

    def one(i):
        s = client.completions.create(model="tiny", prompt=f"request number {i} here", stream=True)
        return "".join(c.choices[0].text for c in s if c.choices)

    with cf.ThreadPoolExecutor(16) as ex:
        got = list(ex.map(one, range(48)))
    assert got == [f"request number {i} here" for i in range(48)]
