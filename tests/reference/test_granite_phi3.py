"""Granite and Phi-3 specifics on mkmodel's tiny-granite and tiny-phi3 files
(the whole preset x type matrix against float64 and llama.cpp is in
test_forward.py and test_llamacpp.py): each of Granite's four scalars moves
the logits far, so the match shows each is applied where llama.cpp applies
it; Phi-3's fused matrices are split in the right order and its partial
rotary and longrope are what llama.cpp computes; what sluice does not
compute (Granite without rope) and broken files are refused by name."""
import os
import subprocess

import gguf
import numpy as np
import pytest

from numpy_forward import Model
from paths import tool

PROMPT = [1, 17, 254, 3, 99, 512, 7, 42, 300, 11, 600, 2, 77, 123, 901, 5]
F32 = {"SLUICE_CPU_ACT": "f32"}


def engine(path, tmp_path, prompt, env=None):
    out = tmp_path / "logits.bin"
    r = subprocess.run([tool("fwdump"), "-m", str(path), "--tokens", ",".join(map(str, prompt)),
                        "--out", str(out), "--chunk", "5"], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32).reshape(len(prompt), -1)


def refused(path):
    """fwdump's stderr for a file it must refuse."""
    r = subprocess.run([tool("fwdump"), "-m", str(path), "--tokens", "1,2"], capture_output=True, text=True)
    assert r.returncode != 0, r.stdout
    return r.stderr


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def llamacpp_logits(path, prompt):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    llm.eval(prompt)
    return np.array(llm.scores[:llm.n_tokens])


def test_granite_scalars_each_move_the_logits(make_model, tmp_path):
    """Float32 activations: the engine within 1e-5 of the float64 reference
    and 1e-4 of llama.cpp (measured ~1e-7 both), while the reference with any
    one scalar left at llama's value is at least 1e-3 away (measured: 7.9e-3
    without the attention scale, 6.9e-2 to 7 without the others)."""
    path = make_model("tiny-granite", "F32", n_vocab=1024, peak=4)
    ours = engine(path, tmp_path, PROMPT, env=F32)
    ref = Model(str(path), act_quant=False)
    assert (ref.embd_scale, ref.residual_scale, ref.attn_scale, ref.logit_scale) == \
        (pytest.approx(12.0), pytest.approx(0.22), 0.0078125, 8.0)
    base = ref.logits(PROMPT)
    theirs = llamacpp_logits(path, PROMPT)
    print(f"tiny-granite: ours-float64 {rel(ours, base):.2e}, ours-llama.cpp {rel(ours, theirs):.2e}")
    assert rel(ours, base) < 1e-5
    assert rel(ours, theirs) < 1e-4
    for attr, llama_value in (("embd_scale", 1.0), ("residual_scale", 1.0), ("attn_scale", 1 / np.sqrt(64)),
                              ("logit_scale", 1.0)):
        kept = getattr(ref, attr)
        setattr(ref, attr, llama_value)
        off = ref.logits(PROMPT)
        setattr(ref, attr, kept)
        print(f"  without {attr}: {rel(off, ours):.2e} from ours")
        assert rel(off, ours) > 1e-3


def test_phi3_split_order_and_partial_rotary_match_llamacpp(make_model, tmp_path):
    """tiny-phi3 (fused attn_qkv over 4 query and 2 KV heads, fused gate|up,
    48 of 64 dims rotated): the engine within 1e-5 of the float64 reference
    and 1e-4 of llama.cpp, while the reference with full rotary, or with
    gate and up swapped, or with K and V swapped, is far from both."""
    path = make_model("tiny-phi3", "F32", n_vocab=1024, peak=4)
    ours = engine(path, tmp_path, PROMPT, env=F32)
    theirs = llamacpp_logits(path, PROMPT)
    ref = Model(str(path), act_quant=False)
    assert ref.n_rot == 48 and ref.head_dim == 64
    base = ref.logits(PROMPT)
    print(f"tiny-phi3: ours-float64 {rel(ours, base):.2e}, ours-llama.cpp {rel(ours, theirs):.2e}")
    assert rel(ours, base) < 1e-5
    assert rel(ours, theirs) < 1e-4

    ref.n_rot = 64
    full = ref.logits(PROMPT)
    ref.n_rot = 48
    t = ref.t
    t["blk.0.ffn_gate.weight"], t["blk.0.ffn_up.weight"] = t["blk.0.ffn_up.weight"], t["blk.0.ffn_gate.weight"]
    gate_up = ref.logits(PROMPT)
    t["blk.0.ffn_gate.weight"], t["blk.0.ffn_up.weight"] = t["blk.0.ffn_up.weight"], t["blk.0.ffn_gate.weight"]
    t["blk.0.attn_k.weight"], t["blk.0.attn_v.weight"] = t["blk.0.attn_v.weight"], t["blk.0.attn_k.weight"]
    k_v = ref.logits(PROMPT)
    for what, wrong in (("full rotary", full), ("gate/up swapped", gate_up), ("K/V swapped", k_v)):
        print(f"  {what}: {rel(wrong, theirs):.2e} from llama.cpp")
        assert rel(wrong, theirs) > 1e-2


def minimal_file(path, arch, keys, tensors):
    """A GGUF of `arch` with llama-style hyperparameters (n_embd 32, 2
    heads), the extra `keys` (name suffix -> value) and `tensors` (name ->
    float32 array): just enough for the loader to reach the check under test."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    for k, v in keys.items():
        key = f"{arch}.{k}"
        if isinstance(v, bool):
            w.add_bool(key, v)
        else:
            w.add_float32(key, v)
    for name, a in tensors.items():
        w.add_tensor(name, a.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


EMBED = {"token_embd.weight": np.zeros((16, 32)), "output_norm.weight": np.ones(32)}


@pytest.mark.parametrize("max_ctx,table", [(4096, "long"), (256, "short")])
def test_phi3_longrope_matches_llamacpp(make_model, tmp_path, max_ctx, table):
    """tiny-phi3-longrope (original context 512): served with a context past
    it the long factors apply, within it the short ones (llama.cpp's rule,
    by the configured context), with the attention factor on cos/sin either
    way. The engine within 1e-5 of the float64 reference and 1e-4 of
    llama.cpp run with the same context size (measured ~3e-7), while the
    reference with the other table, or without the attention factor, is far."""
    path = make_model("tiny-phi3-longrope", "F32", n_vocab=1024, peak=4)
    out = tmp_path / "logits.bin"
    subprocess.run([tool("fwdump"), "-m", str(path), "--tokens", ",".join(map(str, PROMPT)), "--out", str(out),
                    "--max-ctx", str(max_ctx)], check=True, capture_output=True, env={**os.environ, **F32})
    ours = np.fromfile(out, dtype=np.float32).reshape(len(PROMPT), -1)
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=max_ctx, n_batch=64, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    llm.eval(PROMPT)
    theirs = np.array(llm.scores[:llm.n_tokens])
    ref = Model(str(path), act_quant=False, max_ctx=max_ctx)
    assert ref.n_ctx_orig == 512 and ref.rope_mscale == pytest.approx(np.sqrt(1 + np.log(16) / np.log(512)))
    base = ref.logits(PROMPT)
    print(f"tiny-phi3-longrope max_ctx {max_ctx} ({table} factors): ours-float64 {rel(ours, base):.2e}, "
          f"ours-llama.cpp {rel(ours, theirs):.2e}")
    assert rel(ours, base) < 1e-5
    assert rel(ours, theirs) < 1e-4
    ref.max_ctx = 256 if max_ctx > 512 else 4096
    other = ref.logits(PROMPT)
    ref.max_ctx, ref.rope_mscale = max_ctx, 1.0
    no_mscale = ref.logits(PROMPT)
    for what, wrong in (("the other table", other), ("no attention factor", no_mscale)):
        print(f"  {what}: {rel(wrong, theirs):.2e} from llama.cpp")
        assert rel(wrong, theirs) > 1e-2


def test_longrope_table_alone_is_refused(tmp_path):
    p = tmp_path / "longrope.gguf"
    minimal_file(p, "phi3", {}, {**EMBED, "rope_factors_long.weight": np.ones(8)})
    assert "tensor 'rope_factors_long.weight' without 'rope_factors_short.weight' (longrope needs both)" in refused(p)


def test_granite_without_rope_is_refused(tmp_path):
    p = tmp_path / "norope.gguf"
    minimal_file(p, "granite", {"logit_scale": 8.0, "rope.scaling.finetuned": False}, EMBED)
    assert "granite.rope.scaling.finetuned = false (no rope) is not supported" in refused(p)


@pytest.mark.parametrize("preset,name,needle", [
    ("tiny-granite", b"granite.logit_scale", "missing required key granite.logit_scale"),
    ("tiny-phi3", b"blk.1.attn_qkv.weight", "missing tensor 'blk.1.attn_qkv.weight' (or attn_q, attn_k and attn_v)"),
    ("tiny-phi3", b"blk.0.ffn_up.weight", "missing tensor 'blk.0.ffn_up.weight'"),
])
def test_missing_key_or_tensor_is_named(make_model, tmp_path, preset, name, needle):
    data = bytearray(make_model(preset, "F32", n_vocab=1024).read_bytes())
    i = data.find(name)
    assert i >= 0
    data[i + len(name) - 1] ^= 0x20   # one letter's case: the name no longer matches
    p = tmp_path / "broken.gguf"
    p.write_bytes(bytes(data))
    err = refused(p)
    assert needle in err, err


def test_unknown_architecture_lists_the_supported_ones(make_model, tmp_path):
    data = make_model("tiny-phi3", "F32", n_vocab=1024).read_bytes().replace(b"phi3", b"phiX")
    p = tmp_path / "phiX.gguf"
    p.write_bytes(data)
    assert ("architecture 'phiX' is not supported (llama, qwen2, qwen3, gemma2, gemma3, granite, phi3, qwen2moe, "
            "qwen3moe, gpt-oss are)" in refused(p))


def test_longrope_with_llama3_table_is_refused(tmp_path):
    p = tmp_path / "two_scalings.gguf"
    minimal_file(p, "phi3", {}, {**EMBED, "rope_freqs.weight": np.ones(8), "rope_factors_long.weight": np.ones(8),
                                 "rope_factors_short.weight": np.ones(8)})
    assert "tensors 'rope_freqs.weight' and 'rope_factors_long.weight': two rope scalings" in refused(p)
