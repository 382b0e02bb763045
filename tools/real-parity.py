#!/usr/bin/env python3
"""tools/real-parity.py: the real-model parity check of
tests/reference/test_real_models.py, split so that the engine side can run on
another machine (the GPU machine has neither llama.cpp nor the registry):

  real-parity.py run --build DIR --models DIR --device cpu|cuda --out RUN.npz
      tokenizes each prompt of tests/reference/real_models.py with the
      build's tokcheck, runs the build's fwdump on the device (STEPS greedy
      tokens, logits of the first generated position) and saves the lot;
  real-parity.py compare RUN.npz [--against OTHER.npz] [--models DIR]
      without --against: RUN against llama.cpp (llama-cpp-python, here) by
      the parity rule (prompt tokens identical; greedy continuations
      identical on at least 60% of the prompts; first-token logprob within
      0.1 plus llama.cpp's own float16/float32-KV spread); with --against:
      two runs of sluice (CUDA against CPU), prompt by prompt: greedy
      agreement and the first position's largest logit and logprob gaps.

Models are looked up by tools/fetch-models.py's file names in --models
(default: the user's model cache, ~/.cache/sluice/models). Exit 0 when the
rule holds (compare) or every run succeeded (run), 1 otherwise, 2 on usage.
Needs numpy; compare without --against needs llama_cpp."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "reference"))
from real_models import FILES, MODELS, STEPS, first_logprob, llama_greedy, open_llama  # noqa: E402

AGREE = 0.6
LOGPROB_TOL = 0.1


def default_models():
    return Path(os.environ.get("SLUICE_MODEL_CACHE") or Path.home() / ".cache" / "sluice" / "models")


def tokenize(build, path, mode, prompt):
    p = subprocess.run([str(build / "tools" / "tokcheck"), "encode", str(path), mode],
                       input=json.dumps(prompt, ensure_ascii=False) + "\n", capture_output=True, text=True,
                       encoding="utf-8", timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"tokcheck: {p.stderr.strip()}")
    return [int(x) for x in p.stdout.split("\n")[0].split()]


def run(a):
    build, models = Path(a.build), Path(a.models)
    saved, meta = {}, {"device": a.device, "steps": STEPS, "models": {}}
    for name, spec in MODELS.items():
        path = models / FILES[name]
        if not path.exists():
            print(f"real-parity: {path} is missing", file=sys.stderr)
            return 1
        meta["models"][name] = len(spec["prompts"])
        for i, (mode, prompt) in enumerate(spec["prompts"]):
            ids = tokenize(build, path, "prompt" if mode == "plain" else "special-bos", prompt)
            out = Path(a.scratch) / "logits.bin"
            r = subprocess.run([str(build / "tools" / "fwdump"), "-m", str(path), "--device", a.device,
                                "--tokens", ",".join(map(str, ids)), "--steps", str(STEPS), "--threads",
                                str(a.threads), "--out", str(out)], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(f"real-parity: fwdump on {name} prompt {i}: {r.stderr.strip()}", file=sys.stderr)
                return 1
            fed = [int(t) for t in r.stdout.strip().split(",")]
            raw = np.fromfile(out, dtype=np.float32)
            n_vocab = raw.size // (len(ids) + STEPS)
            out.unlink()
            saved[f"{name}/{i}/ids"] = np.asarray(ids, dtype=np.int32)
            saved[f"{name}/{i}/greedy"] = np.asarray(fed[len(ids):], dtype=np.int32)
            saved[f"{name}/{i}/row"] = raw[(len(ids) - 1) * n_vocab:len(ids) * n_vocab]
            print(f"{a.device} {name} prompt {i}: {len(ids)} tokens, greedy {fed[len(ids):len(ids) + 8]}...")
    saved["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez_compressed(a.out, **saved)
    return 0


def logprobs(row):
    row = np.asarray(row, dtype=np.float64)
    return row - np.logaddexp.reduce(row)


def compare_runs(mine, other):
    ok = True
    for name, spec in MODELS.items():
        same, gaps = 0, []
        for i in range(len(spec["prompts"])):
            k = f"{name}/{i}"
            if not np.array_equal(mine[k + "/ids"], other[k + "/ids"]):
                print(f"{name} prompt {i}: prompt tokens differ")
                ok = False
                continue
            g = np.array_equal(mine[k + "/greedy"], other[k + "/greedy"])
            same += g
            d_logit = float(np.max(np.abs(mine[k + "/row"].astype(np.float64) - other[k + "/row"])))
            top = int(np.argmax(other[k + "/row"]))
            d_lp = abs(float(logprobs(mine[k + "/row"])[top] - logprobs(other[k + "/row"])[top]))
            gaps.append(d_lp)
            first = next((j for j, (x, y) in enumerate(zip(mine[k + "/greedy"], other[k + "/greedy"]))
                          if x != y), STEPS)
            print(f"  {name} prompt {i}: greedy {'same' if g else f'differs from token {first}'}; first "
                  f"position: largest logit gap {d_logit:.4f}, top token's logprob gap {d_lp:.5f}")
        n = len(spec["prompts"])
        print(f"{name}: greedy continuations identical on {same} of {n}; first-token logprob gap max "
              f"{max(gaps) if gaps else float('nan'):.5f}")
        ok &= same >= AGREE * n and all(x <= LOGPROB_TOL for x in gaps)
    return ok


def compare_llamacpp(mine, models):
    import llama_cpp
    ok = True
    for name, spec in MODELS.items():
        path = models / FILES[name]
        llm = open_llama(llama_cpp, path)
        llm32 = None
        agree, deltas, over = 0, [], []
        for i, (mode, prompt) in enumerate(spec["prompts"]):
            k = f"{name}/{i}"
            ids = llm.tokenize(prompt.encode(), add_bos=True, special=mode == "special")
            if ids != mine[k + "/ids"].tolist():
                print(f"  {name} prompt {i}: prompt tokens differ from llama.cpp's")
                ok = False
                continue
            theirs, (tok, lp16) = llama_greedy(llm, ids)
            ours = mine[k + "/greedy"].tolist()
            same = llm.detokenize(ours) == llm.detokenize(theirs)
            agree += same
            lp = float(logprobs(mine[k + "/row"])[tok])
            deltas.append(abs(lp - lp16))
            note = ""
            if abs(lp - lp16) > LOGPROB_TOL:
                llm32 = llm32 or open_llama(llama_cpp, path, f32_kv=True)
                spread = abs(first_logprob(llm32, ids, tok) - lp16)
                note = f"; llama.cpp float16 vs float32 KV spread {spread:.4f}"
                if abs(lp - lp16) > LOGPROB_TOL + spread:
                    over.append(abs(lp - lp16))
            first = next((j for j, (x, y) in enumerate(zip(ours, theirs)) if x != y), STEPS)
            print(f"  {name} prompt {i} {prompt[:32]!r}: {'same' if same else f'differs from token {first}'}; "
                  f"first-token logprob sluice {lp:.4f} llama.cpp {lp16:.4f} (delta {abs(lp - lp16):.4f}){note}")
        n = len(spec["prompts"])
        print(f"{name}: greedy {STEPS}-token continuations identical to llama.cpp's on {agree} of {n}; "
              f"first-token logprob delta max {max(deltas) if deltas else float('nan'):.4f}")
        ok &= agree >= AGREE * n and not over
        llm.close()
        if llm32:
            llm32.close()
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", default=str(REPO / "build"))
    r.add_argument("--models", default=str(default_models()))
    r.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--scratch", default=os.environ.get("TMPDIR", "/tmp"))
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("run")
    c.add_argument("--against")
    c.add_argument("--models", default=str(default_models()))
    a = p.parse_args(argv)
    if a.cmd == "run":
        return run(a)
    mine = np.load(a.run)
    meta = json.loads(bytes(mine["meta"]).decode())
    if a.against:
        other = np.load(a.against)
        print(f"{meta['device']} ({a.run}) against {json.loads(bytes(other['meta']).decode())['device']} "
              f"({a.against})")
        ok = compare_runs(mine, other)
    else:
        print(f"{meta['device']} ({a.run}) against llama.cpp {__import__('llama_cpp').__version__}")
        ok = compare_llamacpp(mine, Path(a.models))
    print("parity rule holds" if ok else "parity rule FAILS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
