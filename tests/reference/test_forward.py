"""The engine's logits against a float64 numpy forward pass that reads the
file only through the `gguf` package, for every architecture x tensor type,
on tiny shapes with real ratios, over a multi-token prompt and several greedy
decode steps; and batch invariance of the engine itself."""
import subprocess

import numpy as np
import pytest

from paths import tool
from numpy_forward import Model

PRESETS = ["tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3"]
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M"]
PROMPT = [1, 17, 254, 3, 99, 512, 7, 42, 300, 11, 600, 2]
STEPS = 6
N_VOCAB = 1024


def run_engine(path, tmp_path, tokens, steps, **kw):
    out = tmp_path / "logits.bin"
    cmd = [tool("fwdump"), "-m", str(path), "--tokens", ",".join(map(str, tokens)),
           "--steps", str(steps), "--out", str(out)]
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    fed = [int(t) for t in res.stdout.strip().split(",")]
    logits = np.fromfile(out, dtype=np.float32)
    return fed, logits, out.read_bytes()


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("preset", PRESETS)
def test_logits_match_numpy_float64(make_model, tmp_path, preset, qtype):
    path = make_model(preset, qtype, n_vocab=N_VOCAB)
    fed, logits, _ = run_engine(path, tmp_path, PROMPT, STEPS, chunk=5)
    assert fed[:len(PROMPT)] == PROMPT and len(fed) == len(PROMPT) + STEPS
    ref = Model(str(path)).logits(fed)
    ours = logits.reshape(ref.shape)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    bound = 1e-4 if qtype in ("F32", "F16", "BF16") else 1e-3
    print(f"{preset} {qtype}: relative L2 {rel:.2e}")
    assert rel < bound
    # greedy continuation agrees with the reference's argmax where it is clear
    for i in range(len(PROMPT) - 1, len(fed) - 1):
        top2 = np.sort(ref[i])[-2:]
        if top2[1] - top2[0] > 1e-3:
            assert fed[i + 1] == int(np.argmax(ref[i]))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("preset,qtype", [("tiny-llama", "Q4_K"), ("tiny-qwen3", "Q8_0"), ("tiny-qwen2", "F16")])
def test_batch_of_eight_is_bitwise_alone(make_model, tmp_path, preset, qtype, threads):
    """Each sequence's logits are bitwise the same alone or batched with 7
    others of different lengths, at 1 and 2 threads, whatever the chunking."""
    path = make_model(preset, qtype, n_vocab=N_VOCAB)
    alone = run_engine(path, tmp_path, PROMPT, 8, threads=1, chunk=512)
    batched = run_engine(path, tmp_path, PROMPT, 8, threads=threads, chunk=3, batch_with=7)
    assert alone[0] == batched[0]
    assert alone[2] == batched[2]
