"""Gemma specifics on mkmodel's tiny-gemma2/tiny-gemma3 files (window 8,
prompt 16): the sliding window is real (llama.cpp agrees with the engine,
and a full-attention pass of the reference would not), the engine matches
the float64 reference, and a file missing a gemma key or tensor is refused
with its name."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from numpy_forward import Model
from paths import tool

PROMPT = [1, 17, 254, 3, 99, 512, 7, 42, 300, 11, 600, 2, 77, 123, 901, 5]   # 16 > window 8


def engine(path, tmp_path, prompt, steps, env=None):
    out = tmp_path / "logits.bin"
    r = subprocess.run([tool("fwdump"), "-m", str(path), "--tokens", ",".join(map(str, prompt)),
                        "--steps", str(steps), "--out", str(out), "--chunk", "5"], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    fed = [int(t) for t in r.stdout.strip().split(",")]
    return np.fromfile(out, dtype=np.float32).reshape(len(fed), -1), fed


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("preset", ["tiny-gemma2", "tiny-gemma3"])
def test_sliding_window_is_what_llamacpp_computes(make_model, tmp_path, preset):
    """Float32 activations on both sides: the engine within 1e-3 of llama.cpp
    at every position (measured 1.3e-4 gemma2, 2.1e-4 gemma3: llama.cpp's GELU goes through an fp16
    table), while the reference with the window turned off is far from both
    from position 8 on (and equal before it: the window only cuts history)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    path = make_model(preset, "F32", n_vocab=1024, peak=4)
    ours, fed = engine(path, tmp_path, PROMPT, 0, env={"SLUICE_CPU_ACT": "f32"})
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    llm.eval(PROMPT)
    theirs = np.array(llm.scores[:llm.n_tokens])
    ref = Model(str(path), act_quant=False)
    windowed = ref.logits(PROMPT)
    ref.window = 1 << 30   # sliding layers keep their rope base but see everything
    full = ref.logits(PROMPT)
    per_pos = lambda a, b: np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
    ours_theirs, full_theirs = per_pos(ours, theirs), per_pos(full, theirs)
    print(f"{preset}: ours-llama.cpp max {ours_theirs.max():.2e}, ours-float64 {rel(ours, windowed):.2e}, "
          f"full attention-llama.cpp from position 8: min {full_theirs[8:].min():.2e}")
    assert ours_theirs.max() < 1e-3
    assert rel(ours, windowed) < 1e-5
    assert full_theirs[:8].max() < 1e-3          # positions 0-7 see all of their history anyway
    assert full_theirs[8:].min() > 30 * ours_theirs.max()


@pytest.mark.parametrize("preset,qtype", [("tiny-gemma3", "Q8_0"), ("tiny-gemma2", "Q4_K")])
def test_decode_past_the_window_matches_float64(make_model, tmp_path, preset, qtype):
    """Decode steps at positions 16-23 (each a one-token call reading a
    window that starts mid-block) agree with the reference."""
    path = make_model(preset, qtype, n_vocab=1024)
    ours, fed = engine(path, tmp_path, PROMPT, 8, env={"SLUICE_CPU_ACT": "f32"})
    ref = Model(str(path), act_quant=False).logits(fed)
    print(f"{preset} {qtype}: relative L2 {rel(ours, ref):.2e}")
    assert rel(ours, ref) < 1e-3


@pytest.mark.parametrize("preset,name,needle", [
    ("tiny-gemma3", b"gemma3.attention.sliding_window", "missing required key gemma3.attention.sliding_window"),
    ("tiny-gemma3", b"blk.2.post_ffw_norm.weight", "missing tensor 'blk.2.post_ffw_norm.weight'"),
    ("tiny-gemma3", b"blk.0.attn_q_norm.weight", "missing tensor 'blk.0.attn_q_norm.weight'"),
    ("tiny-gemma2", b"blk.1.post_attention_norm.weight", "missing tensor 'blk.1.post_attention_norm.weight'"),
])
def test_missing_gemma_key_or_tensor_is_named(make_model, tmp_path, preset, name, needle):
    data = bytearray(make_model(preset, "F32", n_vocab=1024).read_bytes())
    i = data.find(name)
    assert i >= 0
    data[i + len(name) - 1] ^= 0x20   # one letter's case: the name no longer matches
    p = tmp_path / "broken.gguf"
    p.write_bytes(bytes(data))
    r = subprocess.run([tool("fwdump"), "-m", str(p), "--tokens", "1,2"], capture_output=True, text=True)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr


REAL = pathlib.Path(os.environ.get("SLUICE_GEMMA3_GGUF",
                                   pathlib.Path.home() / ".cache" / "sluice" / "models" / "gemma-3-270m-q4_k_m.gguf"))
real = pytest.mark.skipif(not REAL.is_file(), reason=f"{REAL} not present")
REAL_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
                "1, 2, 3, 4, 5,"]


@real
def test_real_gemma3_f32_path_matches_float64(tmp_path):
    """Gemma 3 270M (Q5_0/Q8_0/Q4_K/Q6_K, tied 262144-row Q8_0 output):
    float32 activations within 1e-5 of the float64 reference (measured
    5.2e-7), the 16-bit path (SLUICE_CPU_ACT=q16) within 1e-3 (measured
    1.8e-4), the default 8-bit path within 1e-1 (measured 4.8e-2: its
    rounding noise; llama.cpp's own logits are 0.1 away, the test below).
    Loads the whole file into float64: ~3 GB and ~40 s."""
    toks = [2, 818, 5279, 529, 7001, 563]   # <bos>The capital of France is
    ref = Model(str(REAL), act_quant=False).logits(toks)
    for act, bound in (("f32", 1e-5), ("q16", 1e-3), ("", 1e-1)):
        ours, _ = engine(REAL, tmp_path, toks, 0, env={"SLUICE_CPU_ACT": act})
        print(f"gemma-3-270m SLUICE_CPU_ACT={act or 'default'}: relative L2 vs float64 {rel(ours, ref):.2e}")
        assert rel(ours, ref) < bound


@real
@pytest.mark.parametrize("text", REAL_PROMPTS)
def test_real_gemma3_against_llamacpp(tmp_path, text):
    """The same prompts through llama.cpp: the same tokens, the same first 5
    greedy tokens, logits within 0.1 relative L2. Its 8-bit activations put
    llama.cpp 3.3e-2 from the float64 reference on the first prompt, where
    our q16 path is 1.8e-4 from it, and near-ties then part the
    continuations after a few tokens (measured with q16: 5 to 24 identical
    tokens; the counting prompt's 24 all identical). The default 8-bit path
    rounds like llama.cpp but not bit for bit here (the K-quant float sums
    run in another order, and a near-tie code that rounds the other way
    moves the rest): 2.9e-2 to 8.0e-2 from llama.cpp over these prompts."""
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(REAL), n_ctx=128, n_batch=128, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    toks = llm.tokenize(text.encode(), add_bos=True, special=False)
    r = subprocess.run([tool("tokcheck"), "encode", str(REAL), "plain"], input=json.dumps(text) + "\n",
                       capture_output=True, text=True, check=True)
    assert [llm.token_bos()] + [int(t) for t in r.stdout.split()] == toks
    steps = 5
    llm.eval(toks)
    theirs = np.array(llm.scores[:len(toks)])
    greedy = []
    for _ in range(steps):
        greedy.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([greedy[-1]])
    ours, fed = engine(REAL, tmp_path, toks, steps)
    print(f"{text!r}: relative L2 vs llama.cpp {rel(ours[:len(toks)], theirs):.2e}, "
          f"greedy {fed[len(toks):]} vs {greedy}")
    assert fed[len(toks):] == greedy
    assert rel(ours[:len(toks)], theirs) < 0.1
