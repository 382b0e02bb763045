"""Prompt logprobs through the whole server (/v1/completions with echo,
logprobs and max_tokens 0: what lm-eval-harness's loglikelihood sends)
against llama.cpp (llama-cpp-python, logits_all) on the same mkmodel file:
each prompt token's logprob is the log-softmax of the row before it, and the
two engines' vectors agree within test_llamacpp.py's 1e-2 relative L2 (an
F32 file: float32 noise only). Skips while the front end refuses echo."""
import json
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from paths import REPO, data_path

llama_cpp = pytest.importorskip("llama_cpp")
sys.path.insert(0, str(REPO / "tests" / "integration"))
from serve import Server  # noqa: E402  (the integration tests' server harness)

PROMPT = [128000, 17, 254, 3, 99, 512, 7, 42, 300, 11, 600, 2, 77, 123, 901, 5, 64, 250, 18, 333]


def log_softmax(rows):
    rows = np.asarray(rows, dtype=np.float64)
    m = rows.max(axis=1, keepdims=True)
    return rows - m - np.log(np.exp(rows - m).sum(axis=1, keepdims=True))


def llamacpp_prompt_logprobs(path, prompt):
    """log p(prompt[i + 1] | prompt[:i + 1]) for i in 0..n-2, from llama.cpp's rows."""
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    llm.reset()
    llm.eval(prompt)
    lp = log_softmax(np.array(llm.scores[:len(prompt)]))
    return np.array([lp[i, prompt[i + 1]] for i in range(len(prompt) - 1)])


def post(s, body):
    req = urllib.request.Request(s.base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_prompt_logprobs_match_llamacpp(make_model, tmp_path):
    path = make_model("tiny-llama3", "F32", peak=8, tokenizer=str(data_path("tokenizers/llama3/tokenizer.json")),
                      tokenizer_config=str(data_path("tokenizers/llama3/tokenizer_config.json")))
    theirs = llamacpp_prompt_logprobs(path, PROMPT)
    assert np.all(np.isfinite(theirs)) and np.all(theirs <= 0)
    s = Server(path, tmp_path, frontends=1)
    try:
        status, r = post(s, {"prompt": PROMPT, "echo": True, "logprobs": 2, "max_tokens": 0, "temperature": 0})
        assert status == 200, r
        c = r["choices"][0]
        assert c["finish_reason"] == "length"
        assert r["usage"]["prompt_tokens"] == len(PROMPT)
        assert r["usage"]["completion_tokens"] == 0
        lps = c["logprobs"]["token_logprobs"]
        assert len(lps) == len(PROMPT), "one entry per prompt token (the first has none), nothing generated"
        assert lps[0] is None
        ours = np.array(lps[1:], dtype=np.float64)
        rel = float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))
        print(f"prompt logprobs: relative L2 ours-llama.cpp {rel:.2e}, max abs {np.abs(ours - theirs).max():.2e}")
        assert rel < 1e-2
    finally:
        s.stop()
