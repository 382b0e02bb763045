"""The engine against llama.cpp (through the llama-cpp-python package, built
from source by pip), loading the same mkmodel files unchanged: logits within
1e-2 relative L2 and identical 32-token greedy continuations on peaked models,
for every architecture x tensor type. Also: files written by llama.cpp's own
quantizer load in sluice and match the float64 reference, and llama.cpp
tokenizes our real-vocabulary files as we do."""
import ctypes
import os
import json
import subprocess

import numpy as np
import pytest

from numpy_forward import Model
from paths import data_path, tool

llama_cpp = pytest.importorskip("llama_cpp")

PRESETS = ["tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-granite",
           "tiny-phi3"]
# Not Q8_1: llama.cpp's CPU backend has no dot for Q8_1 weights (only for
# Q8_1 activations) and dies of a segfault on such a file.
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M", "Q5_0", "Q4_1", "Q5_1",
         "IQ4_NL"]
# The low-bit 256-element types on two presets only, as in test_forward.py
# (same kernels for every architecture; each case costs two engine runs).
LOW_TYPES = ["Q2_K", "Q3_K", "IQ4_XS", "TQ1_0", "TQ2_0"]
CASES = ([(p, t) for p in PRESETS for t in TYPES]
         + [(p, t) for p in ("tiny-llama", "tiny-qwen2") for t in LOW_TYPES])
PROMPT = [1, 17, 254, 3, 99, 512, 7, 42, 300, 11, 600, 2, 77, 123, 901, 5]
GREEDY = 32
PEAK = 16   # peaked next-token distributions: greedy ties are far apart


def load(path, n_ctx=128):
    # F32 KV cache: llama.cpp's default F16 cache only adds noise to the comparison
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=2, logits_all=True,
                           verbose=False, type_k=0, type_v=0)


def llamacpp_greedy(llm, prompt, steps):
    """Logits of every prompt position and of each greedy step, and the tokens."""
    llm.reset()
    llm.eval(prompt)
    toks = list(prompt)
    for _ in range(steps):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        toks.append(nxt)
        llm.eval([nxt])
    return np.array(llm.scores[:llm.n_tokens]), toks


# llama.cpp's own activation rounding, the engine's default: named, so
# that these tests hold it whatever the environment says
Q8 = {"SLUICE_CPU_ACT": "q8"}
Q16 = {"SLUICE_CPU_ACT": "q16"}


def engine(path, tmp_path, prompt, steps, env=None):
    out = tmp_path / "logits.bin"
    r = subprocess.run([tool("fwdump"), "-m", str(path), "--tokens", ",".join(map(str, prompt)),
                        "--steps", str(steps), "--out", str(out)], check=True, capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    return np.fromfile(out, dtype=np.float32), [int(t) for t in r.stdout.strip().split(",")]


FLOAT_TYPES = ("F32", "F16", "BF16")
AGREE = 1e-5   # all rounded activation codes the same: float32 noise only
FLIP = 3e-2    # one near-tie code rounded the other way (see test_forward.py)


@pytest.mark.parametrize("preset,qtype", CASES)
def test_logits_and_greedy_match_llamacpp(make_model, tmp_path, preset, qtype):
    """Both engines round matmul inputs the same way (8-bit blocks for
    quantized weights, fp16/bf16 for F16/BF16), so the logits agree to float32
    noise (1e-7; Q8_0 models bit for bit) at every position where no rounded
    code differs, and within 1e-2 overall unless a near-tie activation rounds
    the other way on one side: then that position and later ones differ by
    up to a flip's size, and the float64 reference (same rounding) shows that
    llama.cpp flips against it as often as we do. Greedy continuations
    identical, unless llama.cpp flipped away from the reference during the
    continuation and a near tie then went its way (see greedy_agrees).
    "float64" below is that rounding reference."""
    path = make_model(preset, qtype, n_vocab=1024, peak=PEAK)
    ours, our_toks = engine(path, tmp_path, PROMPT, GREEDY, env=Q8)
    llm = load(path)
    theirs, their_toks = llamacpp_greedy(llm, PROMPT, GREEDY)
    n = len(PROMPT)
    ours_all, theirs_all = ours.reshape(-1, theirs.shape[1]), theirs
    ours = ours_all[:n]
    theirs = theirs[:n]
    ref = Model(str(path)).logits(PROMPT)
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
    ours_theirs, ours_ref, theirs_ref = rel(ours, theirs), rel(ours, ref), rel(theirs, ref)
    per_pos = np.linalg.norm(ours - theirs, axis=1) / np.linalg.norm(theirs, axis=1)
    print(f"{preset} {qtype}: relative L2 ours-llama.cpp {ours_theirs:.2e}, ours-float64 {ours_ref:.2e}, "
          f"llama.cpp-float64 {theirs_ref:.2e}; {int((per_pos < AGREE).sum())}/{n} positions agree < {AGREE:g}")
    assert ours_theirs < 1e-2 or per_pos.max() < FLIP
    assert greedy_agrees(path, our_toks, their_toks, ours_all, theirs_all)


def greedy_agrees(path, our_toks, their_toks, ours, theirs):
    """Identical greedy tokens; or, at the first token that differs, ours is
    the float64 rounding reference's pick on the shared prefix, every
    earlier position of ours is within float32 noise of the reference
    (AGREE), and llama.cpp's strays from it by a flip. That is the one
    divergence both engines' 8-bit rounding allows: llama.cpp rounded one
    near-boundary activation code the other way (it does so on its own:
    first seen on tiny-llama Q5_0, where its first 5 decode steps equal
    ours bit for bit and the 6th jumps 1e-2 from the reference while ours
    stays at 7e-8) and a later near tie followed it."""
    if our_toks == their_toks:
        return True
    k = next(i for i, (a, b) in enumerate(zip(our_toks, their_toks)) if a != b)
    ref = Model(str(path)).logits(their_toks[:k])
    err = lambda x: np.linalg.norm(x[:k] - ref, axis=1) / np.linalg.norm(ref, axis=1)
    ours_err, theirs_err = err(ours), err(theirs)
    print(f"greedy differs at token {k}: ours {our_toks[k]}, llama.cpp {their_toks[k]}, reference "
          f"{int(np.argmax(ref[k - 1]))}; max error vs reference before it: ours {ours_err.max():.1e}, "
          f"llama.cpp {theirs_err.max():.1e}")
    return our_toks[k] == int(np.argmax(ref[k - 1])) and ours_err.max() < AGREE and theirs_err.max() >= AGREE


@pytest.mark.parametrize("preset,qtype", CASES)
def test_q16_path_matches_llamacpp(make_model, tmp_path, preset, qtype):
    """SLUICE_CPU_ACT=q16 (16-bit activations) against llama.cpp on the same
    file: ours within 1e-3 of the plain float64 pass (1e-4 float types), and
    as far from llama.cpp as llama.cpp's own 8-bit activations put it from
    float64 (1.1e-2 to 1.9e-2 on these random models: the 1e-2 and
    identical greedy output hold for the default 8-bit path, the test above;
    on tiny-llama's quantized types llama.cpp's rounding also changes some
    greedy picks that float64 and the q16 path agree on). Measured
    figures: docs/CPU-ACTIVATIONS.md."""
    path = make_model(preset, qtype, n_vocab=1024, peak=PEAK)
    ours, our_toks = engine(path, tmp_path, PROMPT, GREEDY, env=Q16)
    theirs, their_toks = llamacpp_greedy(load(path), PROMPT, GREEDY)
    n = len(PROMPT)
    ours = ours.reshape(-1, theirs.shape[1])[:n]
    theirs = theirs[:n]
    plain = Model(str(path), act_quant=False).logits(PROMPT)
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
    ours_theirs, theirs_plain, ours_plain = rel(ours, theirs), rel(theirs, plain), rel(ours, plain)
    print(f"{preset} {qtype}: relative L2 ours (q16) - llama.cpp {ours_theirs:.2e}, "
          f"llama.cpp - float64 {theirs_plain:.2e}, ours - float64 {ours_plain:.2e}; "
          f"greedy {'same' if our_toks == their_toks else 'different'}")
    assert ours_plain < (1e-4 if qtype in FLOAT_TYPES else 1e-3)
    assert ours_theirs < theirs_plain + 2e-3
    if qtype in FLOAT_TYPES:
        assert our_toks == their_toks


@pytest.mark.parametrize("ftype,name", [(7, "Q8_0"), (2, "Q4_0"), (15, "Q4_K_M"), (17, "Q5_K_M"), (18, "Q6_K"),
                                        (8, "Q5_0"), (3, "Q4_1"), (9, "Q5_1"),
                                        (25, "IQ4_NL"),
                                        (10, "Q2_K"), (12, "Q3_K_M"), (30, "IQ4_XS"),
                                        # the one grid format llama.cpp writes without an importance
                                        # matrix (it refuses IQ3_XXS and IQ2_*)
                                        (26, "IQ3_S"),
                                        # ternary (llama.cpp keeps some matrices in other types)
                                        (36, "TQ1_0"), (37, "TQ2_0")])
def test_llamacpp_quantized_files_load(make_model, tmp_path, ftype, name):
    src = make_model("tiny-llama", "F32", n_vocab=1024, peak=8)
    dst = tmp_path / f"llamacpp-{name}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0
    # the q16 path: its 1e-3 from plain float64 checks every tensor of the
    # file tightly (the default path's rounding noise alone is ~1e-2; it is
    # checked against llama.cpp on mkmodel files above)
    ours, fed = engine(dst, tmp_path, PROMPT, 4, env=Q16)
    ref = Model(str(dst), act_quant=False).logits(fed)
    rel = np.linalg.norm(ours.reshape(ref.shape) - ref) / np.linalg.norm(ref)
    print(f"llama.cpp {name}: relative L2 vs numpy {rel:.2e}")
    assert rel < 1e-3


@pytest.fixture(scope="module")
def llama3_model(make_model):
    return make_model("tiny-llama3", "Q4_K_M", tokenizer=str(data_path("tokenizers/llama3/tokenizer.json")),
                      tokenizer_config=str(data_path("tokenizers/llama3/tokenizer_config.json")), peak=8)


def test_real_vocabulary_model_loads_and_agrees(llama3_model, tmp_path):
    llm = load(llama3_model)
    text = "Hello world! The year 2024 was 10x better; ünïcödé and 中文."
    theirs = llm.tokenize(text.encode(), add_bos=False, special=False)
    r = subprocess.run([tool("tokcheck"), "encode", str(llama3_model), "plain"], input=json.dumps(text) + "\n",
                       capture_output=True, text=True, check=True)
    assert [int(t) for t in r.stdout.split()] == theirs
    prompt = [llm.token_bos()] + theirs
    ours, our_toks = engine(llama3_model, tmp_path, prompt, 16, env=Q8)
    logits, their_toks = llamacpp_greedy(llm, prompt, 16)
    assert our_toks == their_toks
