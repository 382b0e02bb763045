"""gpt-oss on tiny-gpt-oss, beyond what test_moe.py runs on every MoE preset
(the engine against the float64 numpy pass, llama.cpp parity, batch and
thread invariance): each feature the architecture adds must matter on the
test model, or those checks would not see it computed wrong. The numpy
pass with one feature switched off must miss the engine's logits by far
more than test_moe's bound (1e-4 relative L2 on F32 files): YaRN (the
reference computes it from its definition; llama.cpp agrees with both,
test_moe), the attention sinks, the sliding window (12 prompt tokens
reach past its 8 positions) and the biases. The SwiGLU clamp at +-7 is not
reached here (expert gate/up values stay below 5: wider experts made
one-code rounding flips swing greedy runs apart in the llama.cpp parity);
tests/unit/kernels/moe_route_test.c checks it on values past it."""
import numpy as np
import pytest

from numpy_forward import Model
from test_forward import N_VOCAB, PROMPT, STEPS, run_engine

BOUND = 1e-4    # test_moe's float64 bound on F32 files
MATTERS = 1e-2  # a feature switched off moves the logits at least this much


@pytest.fixture(scope="module")
def engine_logits(make_model, tmp_path_factory):
    path = make_model("tiny-gpt-oss", "F32", n_vocab=N_VOCAB)
    fed, logits, _ = run_engine(path, tmp_path_factory.mktemp("gptoss"), PROMPT, STEPS,
                                env={"SLUICE_CPU_ACT": "f32"}, chunk=5)
    return path, fed, logits.reshape(len(fed), -1)


def _rel(ref, ours):
    return float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))


def test_engine_matches_reference(engine_logits):
    path, fed, ours = engine_logits
    rel = _rel(Model(str(path), act_quant=False).logits(fed), ours)
    print(f"tiny-gpt-oss F32: relative L2 {rel:.2e}")
    assert rel < BOUND


def _without(m, feature):
    if feature == "yarn":
        m.yarn = None
    elif feature == "sinks":
        for k in [k for k in m.t if k.endswith("attn_sinks.weight")]:
            m.t[k] = np.full_like(m.t[k], -np.inf)   # exp(-inf) = 0: no extra mass
    elif feature == "window":
        m.window = 0
    elif feature == "biases":
        for k in [k for k in m.t if k.endswith(".bias")]:
            m.t[k] = np.zeros_like(m.t[k])
    return m


@pytest.mark.parametrize("feature", ["yarn", "sinks", "window", "biases"])
def test_each_feature_matters(engine_logits, feature):
    path, fed, ours = engine_logits
    rel = _rel(_without(Model(str(path), act_quant=False), feature).logits(fed), ours)
    print(f"tiny-gpt-oss without {feature}: relative L2 {rel:.2e}")
    assert rel > MATTERS


@pytest.mark.parametrize("preset", ["tiny-qwen2", "tiny-llama"])
def test_yarn_on_a_dense_model_matches_llamacpp(make_model, tmp_path, preset):
    """YaRN is not gpt-oss's own: a qwen2 (NEOX rope) and a llama (adjacent
    pairs) file with rope.scaling.type yarn, factor 4 from 1024 positions,
    against llama.cpp on the 8-bit path (test_llamacpp.py's rule on the
    prompt: within 1e-2 relative L2 or a flip's size) and the float64 pass."""
    pytest.importorskip("llama_cpp")
    from test_llamacpp import FLIP, PEAK, PROMPT as LPROMPT, Q8, engine, load
    path = make_model(preset, "Q8_0", n_vocab=1024, peak=PEAK, yarn_factor=4, yarn_orig=1024)
    ours, _ = engine(path, tmp_path, LPROMPT, 1, env=Q8)
    llm = load(path)
    llm.eval(LPROMPT)
    n = len(LPROMPT)
    theirs = np.array(llm.scores[:n])
    ours = ours.reshape(-1, theirs.shape[1])[:n]
    per_pos = np.linalg.norm(ours - theirs, axis=1) / np.linalg.norm(theirs, axis=1)
    ref = Model(str(path)).logits(LPROMPT)
    plain = _rel(ref, ours)
    print(f"{preset} YaRN x4: vs llama.cpp per-position max {per_pos.max():.2e}; vs rounding reference {plain:.2e}")
    assert per_pos.max() < FLIP
    noyarn = Model(str(path))
    noyarn.yarn = None
    assert _rel(noyarn.logits(LPROMPT), ours) > MATTERS   # and YaRN matters on this file
