"""The mixture-of-experts architectures (qwen3moe, qwen2moe with its shared
expert, Mixtral = llama with experts) on mkmodel's tiny presets: the
engine's logits against the float64 numpy pass (numpy_forward.py, the same
bounds as test_forward.py), against llama.cpp on the same files (the rule of
test_llamacpp.py: logits within 1e-2 relative L2 or a flip's size, greedy
continuations identical, plus the first generated token's log-probability
within 0.1), and bitwise batch and thread invariance.

A handful of types per preset: the expert matmuls are the dense kernels on
per-expert views, so the type coverage of test_forward.py carries over;
Q4_1 is here for its block mins (the reference reads them per expert) and
Q4_K_M for the mixed types (ffn_down_exps in Q6_K on some layers), MXFP4 for
llama.cpp's MXFP4_MOE files (experts MXFP4, the other matrices Q8_0)."""
import numpy as np
import pytest

try:
    from test_llamacpp import greedy_agrees
except pytest.skip.Exception:   # no llama_cpp: its tests skip below
    greedy_agrees = None

from numpy_forward import Model
from test_forward import FLIP, N_VOCAB, PROMPT, STEPS, check_against_float64, rounded_path_errors, run_engine

PRESETS = ["tiny-qwen3moe", "tiny-qwen2moe", "tiny-mixtral", "tiny-gpt-oss"]
TYPES = ["F32", "F16", "Q8_0", "Q4_K", "Q4_1", "Q4_K_M", "MXFP4"]
CASES = [(p, t) for p in PRESETS for t in TYPES]


@pytest.mark.parametrize("act", ["", "q16", "f32"])
@pytest.mark.parametrize("preset,qtype", CASES)
def test_moe_matches_numpy_float64(make_model, tmp_path, preset, qtype, act):
    """Default (8-bit), q16 and f32 paths against the plain float64 pass
    (each at its bound in test_forward.check_against_float64). The 8-bit
    path's quantized bound is 1.5e-1 here, not 5e-2: its rounding noise can
    tip a near tie of the top-k routing to another expert (measured up to
    7.4e-2, tiny-mixtral and tiny-qwen3moe Q8_0, where llama.cpp's logits
    are bitwise ours: test_moe_matches_llamacpp)."""
    check_against_float64(make_model, tmp_path, preset, qtype, env={"SLUICE_CPU_ACT": act}, rounded_bound=1.5e-1)


@pytest.mark.parametrize("preset,qtype", CASES)
def test_moe_q8_matches_numpy_with_llamacpp_rounding(make_model, tmp_path, preset, qtype):
    """The q8 path against the reference that rounds matmul inputs as llama.cpp does."""
    rel = rounded_path_errors(make_model, tmp_path, preset, qtype)
    print(f"{preset} {qtype}: per-position relative L2 max {rel.max():.2e}, position 0 {rel[0]:.2e}")
    assert rel.max() < FLIP


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act", ["", "q16"])
@pytest.mark.parametrize("preset,qtype", [("tiny-qwen3moe", "Q4_K"), ("tiny-qwen2moe", "Q8_0"),
                                          ("tiny-mixtral", "Q4_K_M"), ("tiny-gpt-oss", "MXFP4"),
                                          ("tiny-gpt-oss", "Q4_K")])
def test_moe_batch_of_eight_is_bitwise_alone(make_model, tmp_path, preset, qtype, act, threads):
    """A sequence's logits are bitwise the same alone (1 thread, one chunk)
    or batched with 7 others that route to other experts, chunked by 3, at 1
    and 2 threads."""
    path = make_model(preset, qtype, n_vocab=N_VOCAB)
    env = {"SLUICE_CPU_ACT": act}
    alone = run_engine(path, tmp_path, PROMPT, 8, env=env, threads=1, chunk=512)
    batched = run_engine(path, tmp_path, PROMPT, 8, env=env, threads=threads, chunk=3, batch_with=7)
    assert alone[0] == batched[0]
    assert alone[2] == batched[2]


def test_moe_routing_spreads_over_experts(make_model):
    """The tiny presets route tokens to many experts (a test model whose
    router picked the same two experts for every token would check little)."""
    m = Model(str(make_model("tiny-qwen3moe", "F32", n_vocab=N_VOCAB)), act_quant=False)
    h = m._norm(m.t["token_embd.weight"][np.array(PROMPT)], m.t["blk.0.ffn_norm.weight"])
    chosen = np.argsort(-(h @ m.t["blk.0.ffn_gate_inp.weight"].T), axis=1)[:, :m.n_expert_used]
    assert len(set(chosen.ravel().tolist())) >= 6


LLAMACPP_TYPES = ["F32", "Q8_0", "Q4_K", "Q5_1", "MXFP4"]


# tiny-gpt-oss Q5_1: prompt logits within 4.5e-3 of llama.cpp's, first-token
# log-probabilities equal to 4 digits, but the greedy runs part at token 43
# of 48 where both engines sit 1.5e-2 and 1.7e-2 from the float64 rounding
# reference (each rounded some near-boundary activation code its own way;
# gpt-oss's softmax over the top k only makes a routing near-tie weigh
# more), which no allowance of the rule covers.
GPT_OSS_Q5_1 = pytest.param("tiny-gpt-oss", "Q5_1", marks=pytest.mark.xfail(
    reason="greedy parts at token 43 of 48 with both engines a flip from the reference", strict=False))
LLAMACPP_CASES = [GPT_OSS_Q5_1 if (p, t) == ("tiny-gpt-oss", "Q5_1") else (p, t)
                  for p in PRESETS for t in LLAMACPP_TYPES]


@pytest.mark.parametrize("preset,qtype", LLAMACPP_CASES)
def test_moe_matches_llamacpp(make_model, tmp_path, preset, qtype):
    """llama.cpp loads mkmodel's MoE files unchanged and agrees with the q8
    path (llama.cpp's own activation rounding)."""
    pytest.importorskip("llama_cpp")
    from test_llamacpp import GREEDY, PEAK, PROMPT as LPROMPT, Q8, engine, llamacpp_greedy, load
    path = make_model(preset, qtype, n_vocab=1024, peak=PEAK)
    ours, our_toks = engine(path, tmp_path, LPROMPT, GREEDY, env=Q8)
    theirs, their_toks = llamacpp_greedy(load(path), LPROMPT, GREEDY)
    n = len(LPROMPT)
    ours_all = ours.reshape(-1, theirs.shape[1])
    assert our_toks[:n] == their_toks[:n] == LPROMPT
    per_pos = np.linalg.norm(ours_all[:n] - theirs[:n], axis=1) / np.linalg.norm(theirs[:n], axis=1)
    rel = float(np.linalg.norm(ours_all[:n] - theirs[:n]) / np.linalg.norm(theirs[:n]))
    logprob = lambda z, t: float(z[t] - z.max() - np.log(np.exp(z - z.max()).sum()))
    first = their_toks[n]
    lp_ours, lp_theirs = logprob(ours_all[n - 1], first), logprob(theirs[n - 1], first)
    print(f"{preset} {qtype}: relative L2 ours-llama.cpp {rel:.2e}, per-position max {per_pos.max():.2e}; "
          f"first token logprob ours {lp_ours:.4f} llama.cpp {lp_theirs:.4f}; "
          f"greedy {'same' if our_toks == their_toks else 'different'}")
    assert rel < 1e-2 or per_pos.max() < FLIP
    assert abs(lp_ours - lp_theirs) < 0.1
    assert our_toks == their_toks or moe_greedy_agrees(path, our_toks, their_toks, ours_all, theirs)


def moe_greedy_agrees(path, our_toks, their_toks, ours, theirs):
    """test_llamacpp.py's greedy_agrees, with one MoE allowance: at the
    first differing token ours is the float64 rounding reference's pick and
    llama.cpp strays from that reference by a flip (>= AGREE) and by more
    than ours does. The dense rule also wants ours within float32 noise
    (AGREE) of the reference; with routing, a code that one side rounds the
    other way can also swap a near-tie expert, so a flip of our own (seen:
    1.5e-3 on tiny-qwen3moe Q4_K at token 31, llama.cpp 1.5e-2) is allowed
    as long as llama.cpp's is larger."""
    from test_llamacpp import AGREE
    if greedy_agrees(path, our_toks, their_toks, ours, theirs):
        return True
    k = next(i for i, (a, b) in enumerate(zip(our_toks, their_toks)) if a != b)
    ref = Model(str(path)).logits(their_toks[:k])
    err = lambda x: float((np.linalg.norm(x[:k] - ref, axis=1) / np.linalg.norm(ref, axis=1)).max())
    return our_toks[k] == int(np.argmax(ref[k - 1])) and err(theirs) >= AGREE and err(theirs) > err(ours)
