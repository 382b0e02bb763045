"""Generated text continues the prompt, so on a SentencePiece vocabulary its
first token keeps its leading space (" not", after "... life is"): the
whole-sequence rule that drops one leading space (add_space_prefix) is not
applied to it. Checked against llama.cpp (llama-cpp-python) on the shipped
12M model (Mistral's SentencePiece vocabulary): /v1/completions text,
streamed and not, equals llama.cpp's greedy completion of the same prompt and
the concatenation of its logprob tokens; chat logprob bytes concatenate to
the message content. The server runs with llama.cpp's activation rounding
(SLUICE_CPU_ACT=q8) so both pick the same greedy tokens
(test_default_model.py)."""
import json
import os
import urllib.request

import pytest

from paths import REPO
from serve import Server

MODEL = REPO / "models/default/sluice-default-q8_0.gguf"
PROMPTS = ["I believe the meaning of life is", "The king said unto", "The best thing about life is"]
N = 8

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="models/default is not there")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(MODEL, tmp_path_factory.mktemp("cont"), frontends=1,
               env={**os.environ, "SLUICE_CPU_ACT": "q8"})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def llm():
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(MODEL), n_ctx=128, n_threads=2, verbose=False, type_k=0, type_v=0)


def post(s, path, body):
    req = urllib.request.Request(s.base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()


def llama_text(llm, prompt):
    llm.reset()
    return llm.create_completion(prompt, max_tokens=N, temperature=0.0)["choices"][0]["text"]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_text_keeps_the_leading_space(server, llm, prompt):
    r = json.loads(post(server, "/v1/completions", {"prompt": prompt, "max_tokens": N, "temperature": 0,
                                                    "logprobs": 1}))
    c = r["choices"][0]
    want = llama_text(llm, prompt)
    assert want.startswith(" "), want      # the case this checks: a "▁word" first token
    assert c["text"] == want
    assert "".join(c["logprobs"]["tokens"]) == c["text"]
    assert c["logprobs"]["text_offset"][0] == 0


@pytest.mark.parametrize("prompt", PROMPTS[:1])
def test_streamed_completion_text_keeps_the_leading_space(server, llm, prompt):
    body = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": N, "temperature": 0, "stream": True})
    parts = [json.loads(line[6:])["choices"][0]["text"] for line in body.splitlines()
             if line.startswith("data: {")]
    assert "".join(parts) == llama_text(llm, prompt)
    assert parts[0].startswith(" ")


def test_chat_logprob_bytes_are_the_content(server):
    for content in ["I believe the meaning of life is", "Hello"]:
        r = json.loads(post(server, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": content}], "max_tokens": N, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}))
        ch = r["choices"][0]
        entries = ch["logprobs"]["content"]
        assert bytes(b for e in entries for b in e["bytes"]).decode() == ch["message"]["content"]
        for e in entries:
            assert bytes(e["bytes"]).decode() == e["token"]
            for alt in e["top_logprobs"]:
                assert bytes(alt["bytes"]).decode() == alt["token"]
