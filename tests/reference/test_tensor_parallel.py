"""Tensor parallelism, simulated: the whole forward pass of mkmodel's tiny
models computed as N shards would compute it, with the weights sliced by the
plan that model/tp_plan.c makes (printed by tools/tpplan, so the plan code
itself is under test, not a restatement of its rules), against the unsharded
float64 pass of numpy_forward.py on the same file.

Each shard holds its q heads and the KV heads they read, its range of n_ff
(n_ff_exp of every expert, n_ff_shexp) and its slice of the vocabulary; it
computes attn_output's and ffn_down's partial sums from its columns alone.
The partials are summed where the all-reduce goes (after attn_output, after
the FFN), the biases, post-norms and residual scale applied once after the
sum, and the shards' logit slices are concatenated (the gather). Routers,
norms and embeddings are replicated: every shard computes the routing itself.

Bound: the sharded logits are the unsharded ones to 1e-12 of their largest
magnitude. Both passes are float64 and do the same products; only the order
of the sums differs (a matmul's inner sum split N ways, then the N partials
added), so the difference is float64 rounding: measured at most 2.3e-15
over every case below (2026-12-02, `pytest -s`, this file). A slicing
mistake (a block of rows or a KV head off by one) moves the logits by more
than 1e-3 (test_a_wrong_plan_is_caught). With act_quant (the inputs rounded
as the engine feeds each weight type: Q8_0 blocks of 32, Q8_K of 256, Q8_1
sums for Q4_1's mins) the bound is the same (measured 0 on most quantized
cases, 7.4e-16 at most): a shard's columns start on a block boundary of the
weight, so each activation block it rounds is one the unsharded pass rounds
too. That is why the plan refuses any other cut."""
import copy
import json
import subprocess

import numpy as np
import pytest

from numpy_forward import MIN_TYPES, Model, act_round, q8_1_sum_error
from paths import tool

PROMPT = [1, 17, 254, 3, 99, 512, 7, 42, 300, 11, 600, 2]
N_VOCAB = 1024
BOUND = 1e-12


def tp_plan(path, n):
    """The plan of tools/tpplan as a dict, or raises with its stderr."""
    r = subprocess.run([tool("tpplan"), str(path), str(n)], capture_output=True, text=True)
    if r.returncode:
        raise ValueError(r.stderr.strip())
    return json.loads(r.stdout)


def _part(m, name, sl, e=None):
    """(weights, type, block mins) of tensor `name` (expert e of a 3-D one) as
    a shard holds it by slice sl."""
    w, mins = m.t[name], m.mins.get(name)
    if e is not None:
        w, mins = w[e], (mins[e] if mins is not None else None)
    b, end = sl["begin"], sl["end"]
    if sl["split"] == "out":
        w, mins = w[b:end], (mins[b:end] if mins is not None else None)
    elif sl["split"] == "in":
        if mins is not None:
            blk = w.shape[-1] // mins.shape[-1]
            assert b % blk == 0 and end % blk == 0, (name, b, end, blk)
            mins = mins[:, b // blk:end // blk]
        w = w[:, b:end]
    else:
        assert sl["split"] == "none", (name, sl)
    return w, m.types[name], mins


def _mm(m, x, name, sl, e=None):
    """x @ w.T for the shard's part of w, x rounded as numpy_forward rounds it."""
    w, wtype, mins = _part(m, name, sl, e)
    if not m.act_quant:
        return x @ w.T
    y = act_round(x, wtype) @ w.T
    if wtype in MIN_TYPES:
        y = y + q8_1_sum_error(x) @ mins.T
    return y


def _rows(v, sl):
    return v[sl["begin"]:sl["end"]]


def _shard_attention(m, sh, p, h, pos, slides, masks):
    """Shard sh's partial attention output (T, n_embd) of layer prefix p."""
    T, D, rep = h.shape[0], m.head_dim, m.n_head // m.n_head_kv
    S = sh["slices"]
    g = lambda n: m.t[p + n]
    q, k, v = (_mm(m, h, p + f"attn_{c}.weight", S[f"attn_{c}"]) for c in "qkv")
    if p + "attn_q.bias" in m.t:
        q, k, v = (x + _rows(g(f"attn_{c}.bias"), S[f"attn_{c}"]) for x, c in zip((q, k, v), "qkv"))
    hb, he = sh["head"]
    kvb, kve = sh["head_kv"]
    q, k, v = q.reshape(T, he - hb, D), k.reshape(T, kve - kvb, D), v.reshape(T, kve - kvb, D)
    if p + "attn_q_norm.weight" in m.t:
        q, k = m._norm(q, g("attn_q_norm.weight")), m._norm(k, g("attn_k_norm.weight"))
    base = m.swa_base if slides else m.rope_base
    q, k = m._rope(q, pos, base), m._rope(k, pos, base)
    kv_of = [hh // rep - kvb for hh in range(hb, he)]   # the local KV head each q head reads
    assert min(kv_of) >= 0 and max(kv_of) < kve - kvb, (sh["head"], sh["head_kv"])
    k, v = k[:, kv_of], v[:, kv_of]
    s = np.einsum("thd,shd->hts", q, k) * m.attn_scale
    if m.attn_cap:
        s = m.attn_cap * np.tanh(s / m.attn_cap)
    s = s + masks[slides]
    if m.gptoss:
        sink = g("attn_sinks.weight")[hb:he][:, None, None]
        mx = np.maximum(s.max(axis=-1, keepdims=True), sink)
        s = np.exp(s - mx)
        s /= s.sum(axis=-1, keepdims=True) + np.exp(sink - mx)
    else:
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
    att = np.einsum("hts,shd->thd", s, v).reshape(T, (he - hb) * D)
    return _mm(m, att, p + "attn_output.weight", S["attn_output"])


def _shard_moe(m, sh, p, h):
    """Shard sh's partial MoE output, and the part added once after the sum
    (the experts' down biases, weighted), of layer prefix p."""
    S = sh["slices"]
    logits = _mm(m, h, p + "ffn_gate_inp.weight", S["ffn_gate_inp"])
    if m.gptoss:
        logits = logits + m.t[p + "ffn_gate_inp.bias"]
    pr = np.exp(logits - logits.max(axis=-1, keepdims=True))
    pr /= pr.sum(axis=-1, keepdims=True)
    out, once = np.zeros_like(h), np.zeros_like(h)
    sg, sd = S["ffn_gate_exps"], S["ffn_down_exps"]
    for t in range(h.shape[0]):
        order = sorted(range(m.n_expert), key=lambda e: (-pr[t, e], e))[:m.n_expert_used]
        w = pr[t, order]
        if m.gptoss:
            z = np.exp(logits[t, order] - logits[t, order].max())
            w = z / z.sum()
        if m.moe_norm:
            w = w / max(w.sum(), 6.103515625e-5)
        x = h[t:t + 1]
        for e, we in zip(order, w):
            gate = _mm(m, x, p + "ffn_gate_exps.weight", sg, e)
            up = _mm(m, x, p + "ffn_up_exps.weight", S["ffn_up_exps"], e)
            if m.gptoss:
                gate = gate + _rows(m.t[p + "ffn_gate_exps.bias"][e], sg)
                up = up + _rows(m.t[p + "ffn_up_exps.bias"][e], S["ffn_up_exps"])
                gg, uu = np.minimum(gate, 7.0), np.clip(up, -7.0, 7.0)
                act = gg / (1 + np.exp(-1.702 * gg)) * (uu + 1)
                once[t] += we * m.t[p + "ffn_down_exps.bias"][e]
            else:
                act = gate / (1 + np.exp(-gate)) * up
            out[t] += we * _mm(m, act, p + "ffn_down_exps.weight", sd, e)[0]
    if p + "ffn_down_shexp.weight" in m.t:
        gate = _mm(m, h, p + "ffn_gate_shexp.weight", S["ffn_gate_shexp"])
        up = _mm(m, h, p + "ffn_up_shexp.weight", S["ffn_up_shexp"])
        part = _mm(m, gate / (1 + np.exp(-gate)) * up, p + "ffn_down_shexp.weight", S["ffn_down_shexp"])
        gi = _mm(m, h, p + "ffn_gate_inp_shexp.weight", {"split": "none", "begin": 0, "end": 1})
        out = out + part / (1 + np.exp(-gi))[:, None]   # a per-token scalar: linear in the partial
    return out, once


def _shard_ffn(m, sh, p, h):
    S = sh["slices"]
    gate = _mm(m, h, p + "ffn_gate.weight", S["ffn_gate"])
    up = _mm(m, h, p + "ffn_up.weight", S["ffn_up"])
    if m.gemma:
        act = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
    else:
        act = gate / (1 + np.exp(-gate))
    return _mm(m, act * up, p + "ffn_down.weight", S["ffn_down"])


def sharded_logits(m, plan, tokens):
    """numpy_forward.Model.logits computed shard by shard under `plan`."""
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = m.t["token_embd.weight"][np.array(tokens)]   # replicated: every shard looks up every row
    if m.gemma:
        x = x * np.sqrt(m.n_embd)
    x = x * m.embd_scale
    mask = np.triu(np.full((T, T), -np.inf), 1)
    swa = mask + np.where(np.subtract.outer(np.arange(T), np.arange(T)) >= max(m.window, 1), -np.inf, 0)
    masks = {False: mask, True: swa}
    shards = plan["shards"]
    for l in range(m.n_layer):
        p = f"blk.{l}."
        g = lambda n: m.t[p + n]
        h = m._norm(x, g("attn_norm.weight"))
        slides = m._slides(l)
        o = sum(_shard_attention(m, sh, p, h, pos, slides, masks) for sh in shards)   # all-reduce
        if m.gptoss:
            o = o + g("attn_output.bias")
        x = x + (m._norm(o, g("post_attention_norm.weight")) if m.gemma else o) * m.residual_scale
        h = m._norm(x, g("post_attention_norm.weight" if m.gptoss else "ffn_norm.weight"))
        if m.n_expert:
            parts = [_shard_moe(m, sh, p, h) for sh in shards]
            for a, b in zip(parts, parts[1:]):   # replicated routing: the same once-terms everywhere
                assert np.array_equal(a[1], b[1])
            o = sum(pt[0] for pt in parts) + parts[0][1]                              # all-reduce
        else:
            o = sum(_shard_ffn(m, sh, p, h) for sh in shards)                         # all-reduce
        x = x + (m._norm(o, g("post_ffw_norm.weight")) if m.gemma else o) * m.residual_scale
    hn = m._norm(x, m.t["output_norm.weight"])
    out = np.concatenate([_mm(m, hn, m.output_name, sh["slices"]["output"]) for sh in shards], axis=1)  # gather
    if m.final_cap:
        out = m.final_cap * np.tanh(out / m.final_cap)
    return out / m.logit_scale


def _compare(m, plan):
    ref = m.logits(PROMPT)
    got = sharded_logits(m, plan, PROMPT)
    assert got.shape == ref.shape
    return float(np.abs(got - ref).max() / np.abs(ref).max())


CASES = [
    ("tiny-llama", "F32", 2), ("tiny-llama", "Q8_0", 2), ("tiny-llama", "Q4_1", 2),
    ("tiny-qwen2", "Q8_0", 2),                 # q/k/v biases follow the heads
    ("tiny-qwen3", "Q8_0", 2), ("tiny-qwen3", "Q4_K", 2),
    ("tiny-qwen3", "Q4_K_M", 2),               # mixed types: n_ff cut in Q6_K blocks, 1 and 2 of them
    ("tiny-qwen3", "Q8_0", 4),                 # 2 KV heads on 4 shards: each replicated twice
    ("tiny-gemma2", "F32", 2), ("tiny-gemma3", "Q8_0", 2),   # gemma3: one KV head on both shards
    ("tiny-granite", "Q8_0", 2), ("tiny-phi3", "Q8_0", 2),   # phi3: the fused matrices' row views
    ("tiny-qwen3moe", "Q8_0", 2), ("tiny-qwen3moe", "F32", 4),
    ("tiny-qwen2moe", "Q8_0", 2),              # and its gated shared expert
    ("tiny-mixtral", "Q8_0", 2),
    ("tiny-gpt-oss", "F32", 2), ("tiny-gpt-oss", "Q8_0", 2),   # sinks by head, biases once
]


@pytest.mark.parametrize("act_quant", [False, True], ids=["float", "act-rounded"])
@pytest.mark.parametrize("preset,qtype,n", CASES)
def test_sharded_forward_equals_unsharded(make_model, preset, qtype, n, act_quant):
    path = make_model(preset, qtype, n_vocab=N_VOCAB)
    plan = tp_plan(path, n)
    assert plan["n_shard"] == n and len(plan["shards"]) == n
    m = Model(str(path), act_quant=act_quant)
    rel = _compare(m, plan)
    print(f"{preset} {qtype} N={n} act_quant={act_quant}: max |sharded - unsharded| / max |logit| = {rel:.1e}")
    assert rel < BOUND


def test_a_wrong_plan_is_caught(make_model):
    """The check has teeth: plans with the right shapes but the wrong rows
    are far outside the bound (shard 1's ffn_up one block early, so its
    gate and up rows no longer pair; shard 1 reading shard 0's KV head)."""
    path = make_model("tiny-llama", "Q8_0", n_vocab=N_VOCAB)
    m = Model(str(path), act_quant=False)
    plan = copy.deepcopy(tp_plan(path, 2))
    up = plan["shards"][1]["slices"]["ffn_up"]
    up["begin"] -= 32
    up["end"] -= 32
    assert _compare(m, plan) > 1e-3
    plan = copy.deepcopy(tp_plan(path, 2))
    plan["shards"][1]["slices"]["attn_k"] = dict(plan["shards"][0]["slices"]["attn_k"])
    assert _compare(m, plan) > 1e-3


def test_plan_json_lists_every_kind(make_model):
    path = make_model("tiny-qwen2moe", "Q8_0", n_vocab=N_VOCAB)
    plan = tp_plan(path, 2)
    assert plan["kv_replicas"] == 1
    kinds = plan["shards"][0]["slices"]
    assert kinds["ffn_down"]["split"] == "absent"
    assert kinds["ffn_gate_inp"]["split"] == "none" and kinds["token_embd"]["split"] == "none"
    assert kinds["ffn_down_shexp"]["split"] == "in" and kinds["output"]["split"] == "out"
    assert plan["shards"][1]["slices"]["output"] == {"split": "out", "begin": 512, "end": 1024}


@pytest.mark.parametrize("qtype,cut", [("F32", 384), ("Q8_0", 384), ("Q4_K_M", 256)])
def test_hidden_cut_follows_the_down_matrix_blocks(make_model, qtype, cut):
    """n_ff 768 split 2 ways: halves when ffn_down's blocks allow (F32: one
    element; Q8_0: 24 blocks of 32); in whole blocks of the file's coarsest
    ffn_down type when they do not (Q4_K_M: 3 blocks of 256, so 1 and 2)."""
    plan = tp_plan(make_model("tiny-qwen3", qtype, n_vocab=N_VOCAB), 2)
    s0, s1 = (sh["slices"] for sh in plan["shards"])
    for k in ("ffn_gate", "ffn_up", "ffn_down"):
        assert (s0[k]["begin"], s0[k]["end"], s1[k]["begin"], s1[k]["end"]) == (0, cut, cut, 768), (k, s0[k])


@pytest.mark.parametrize("preset,qtype,opts,n,needle", [
    ("tiny-llama", "Q8_0", {}, 3, "n_head 4 is not divisible by --tensor-parallel 3"),
    ("tiny-llama", "Q4_K", {}, 2, "attn_output is Q4_K (blocks of 256): a shard's 128 columns (2 heads of 64)"),
    ("tiny-qwen3moe", "Q4_K", {"head_dim": 128}, 2,
     "ffn_down_exps is Q4_K (blocks of 256): n_ff_exp 256 is 1 blocks, fewer than --tensor-parallel 2"),
    ("tiny-llama", "Q8_0", {}, 0, "--tensor-parallel 0 is out of range (1..64)"),
])
def test_plan_refusals_name_the_reason(make_model, preset, qtype, opts, n, needle):
    path = make_model(preset, qtype, n_vocab=N_VOCAB, **opts)
    with pytest.raises(ValueError) as e:
        tp_plan(path, n)
    assert needle in str(e.value)
