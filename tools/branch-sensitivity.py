#!/usr/bin/env python3
"""How sensitive are mkmodel's random test models to small activation errors,
as a function of --branch-scale? Not a test: a measurement for
docs/CPU-ACTIVATIONS.md ("The two accuracy bounds the tests hold").

For each branch scale X, preset and type it measures, with the prompts, steps
and helpers of tests/reference/test_llamacpp.py and test_forward.py:

  (i)   llama.cpp vs the plain float64 pass (act_quant=False), relative L2
        over the 16 prompt positions (peak-16 model, as test_llamacpp);
  (ii)  the q16 engine path (SLUICE_CPU_ACT=q16) vs the plain float64 pass, on the same
        peak-16 model (ii_llamacpp_setup), and on test_forward's setup
        (peak 1, 12-token prompt + 6 greedy steps, chunk 5: ii_forward_setup);
  (iii) the q16 path vs llama.cpp, relative L2 over the prompt positions,
        and whether the 32-token greedy continuations are identical
        (also the q8 path vs llama.cpp, as test_logits_and_greedy_match_llamacpp);
  (iv)  the q8 path vs the float64 pass that applies the same 8-bit rounding,
        largest per-position relative L2 (test_forward's setup).

  SLUICE_BUILD_DIR=build .venv/bin/python tools/branch-sensitivity.py \\
      --scales 1,0.3,0.1 --out results.jsonl
  .venv/bin/python tools/branch-sensitivity.py --table results.jsonl

One JSON object per case is appended to --out as it finishes (a run can be
resumed: cases already in the file are skipped)."""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "reference")]

import numpy as np  # noqa: E402

import test_forward as tf  # noqa: E402
import test_llamacpp as tl  # noqa: E402
from numpy_forward import Model  # noqa: E402
from paths import tool  # noqa: E402


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def mkmodel(path, preset, qtype, scale, seed, **opts):
    cmd = [tool("mkmodel"), "-o", str(path), "--preset", preset, "--type", qtype,
           "--n-vocab", str(tf.N_VOCAB), "--branch-scale", repr(scale), "--seed", str(seed)]
    for k, v in opts.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    subprocess.run(cmd, check=True)
    return path


def measure(tmp, preset, qtype, scale, seed=1):
    r = {"scale": scale, "seed": seed, "preset": preset, "type": qtype}
    n = len(tl.PROMPT)

    # test_llamacpp's setup: peak-16 model, 16-token prompt, 32 greedy steps
    path = mkmodel(tmp / "peak.gguf", preset, qtype, scale, seed, peak=tl.PEAK)
    theirs, their_toks = tl.llamacpp_greedy(tl.load(path), tl.PROMPT, tl.GREEDY)
    theirs = theirs[:n]
    ours, our_toks = tl.engine(path, tmp, tl.PROMPT, tl.GREEDY, env=tl.Q16)
    ours = ours.reshape(-1, theirs.shape[1])[:n]
    ours8, our8_toks = tl.engine(path, tmp, tl.PROMPT, tl.GREEDY, env=tl.Q8)
    ours8 = ours8.reshape(-1, theirs.shape[1])[:n]
    m = Model(str(path), act_quant=False)
    plain = m.logits(tl.PROMPT)
    r["i_llamacpp_float64"] = rel(theirs, plain)
    r["ii_llamacpp_setup"] = rel(ours, plain)
    r["iii_default_llamacpp"] = rel(ours, theirs)
    r["iii_greedy_same"] = our_toks == their_toks
    r["iii_greedy_first_diff"] = next((i - n for i, (a, b) in enumerate(zip(our_toks, their_toks)) if a != b), None)
    r["q8_llamacpp"] = rel(ours8, theirs)
    r["q8_greedy_same"] = our8_toks == their_toks
    # greedy picks of the plain float64 pass along llama.cpp's continuation
    # (teacher-forced): does llama.cpp itself follow float64?
    ref_all = m.logits(their_toks[:-1])
    r["llamacpp_greedy_is_float64_argmax"] = bool(
        all(int(np.argmax(ref_all[i])) == their_toks[i + 1] for i in range(n - 1, len(their_toks) - 1)))

    # test_forward's setup: peak 1, 12-token prompt + 6 steps, chunk 5
    path = mkmodel(tmp / "flat.gguf", preset, qtype, scale, seed)
    fed, logits, _ = tf.run_engine(path, tmp, tf.PROMPT, tf.STEPS, env={"SLUICE_CPU_ACT": "q16"}, chunk=5)
    m = Model(str(path), act_quant=False)
    ref = m.logits(fed)
    r["ii_forward_setup"] = rel(logits.reshape(ref.shape), ref)
    fed8, logits8, _ = tf.run_engine(path, tmp, tf.PROMPT, tf.STEPS, env=tf.Q8, chunk=5)
    m.act_quant = True
    ref8 = m.logits(fed8)
    o8 = logits8.reshape(ref8.shape)
    per_pos = np.linalg.norm(o8 - ref8, axis=1) / np.linalg.norm(ref8, axis=1)
    r["iv_q8_rounded_max"] = float(per_pos.max())
    r["iv_q8_pos0"] = float(per_pos[0])
    return r


COLS = [("i_llamacpp_float64", "(i) llama.cpp-f64"), ("ii_llamacpp_setup", "(ii) ours-f64 peak16"),
        ("ii_forward_setup", "(ii) ours-f64 fwd"), ("iii_default_llamacpp", "(iii) ours-llama.cpp"),
        ("iii_greedy_same", "(iii) greedy same"), ("q8_llamacpp", "q8-llama.cpp"),
        ("q8_greedy_same", "q8 greedy same"), ("iv_q8_rounded_max", "(iv) q8-rounded max")]


def table(rows):
    head = "| X | preset | type | " + " | ".join(c[1] for c in COLS) + " |"
    out = [head, "|" + " --- |" * (3 + len(COLS))]
    for r in rows:
        cells = []
        for k, _ in COLS:
            v = r[k]
            cells.append(("yes" if v else f"no ({r.get('iii_greedy_first_diff')})" if k == "iii_greedy_same"
                          else "yes" if v else "no") if isinstance(v, bool) else f"{v:.2e}")
        seed = r.get("seed", 1)
        out.append(f"| {r['scale']:g}{'' if seed == 1 else f' (seed {seed})'} | {r['preset']} | {r['type']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,0.3,0.1")
    ap.add_argument("--presets", default=",".join(tl.PRESETS))
    ap.add_argument("--types", default=",".join(tl.TYPES))
    ap.add_argument("--seeds", default="1", help="mkmodel seeds (the tests use 1)")
    ap.add_argument("--out", default="branch-sensitivity.jsonl")
    ap.add_argument("--table", help="print the markdown table of a results file and exit")
    a = ap.parse_args()
    if a.table:
        print(table([json.loads(line) for line in open(a.table)]))
        return
    done = set()
    if pathlib.Path(a.out).exists():
        done = {(r["scale"], r.get("seed", 1), r["preset"], r["type"]) for r in map(json.loads, open(a.out))}
    with tempfile.TemporaryDirectory() as d:
        cases = [(float(x), int(s), p, t) for s in a.seeds.split(",") for x in a.scales.split(",")
                 for p in a.presets.split(",") for t in a.types.split(",")]
        for case in cases:
            if case in done:
                continue
            r = measure(pathlib.Path(d), case[2], case[3], case[0], case[1])
            print(json.dumps(r), flush=True)
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
