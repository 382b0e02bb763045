#!/usr/bin/env python3
"""The CPU engine against llama.cpp on the same GGUF files (docs/PERF.md,
"CPU engine"): single-sequence prefill and decode tok/s, both engines back
to back and alternately, R repetitions, at each thread count, then one
markdown table of the figures and the median ratios.

    .venv/bin/python tools/cpu-bench.py [--build build] [--reps 3] [--threads 1,2]
        [--modes default,q16] [--models-dir /tmp/bench-cpu] [MODEL.gguf ...]

Without MODEL arguments: the 1B-shape Q4_K_M and Q8_0 mkmodel files (made
in --models-dir if absent, 0.8 and 1.3 GB) and the real Qwen2.5-Coder 0.5B
Q4_K_M file when the model cache has it (tools/fetch-models.py).

Ours: `enginebench -m MODEL --batch 1 --prompt 64 --gen 32 --threads T`
(best of its 2 repetitions), once per mode of --modes (`default` leaves
SLUICE_CPU_ACT and SLUICE_CPU_ISA unset; `avx2` sets SLUICE_CPU_ISA=avx2,
the AVX2 kernels on an AVX-512 CPU; any other value is passed as
SLUICE_CPU_ACT).
llama.cpp: llama-cpp-python in this interpreter, F32 KV cache, the same
prompt length and steps, best of 2 (the PERF.md snippet). The load average
is read before each group, since the machine may be shared; the table
gives each repetition's figure and the median of the per-repetition ratios
(each ratio from runs made back to back)."""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
REAL = pathlib.Path.home() / ".cache" / "sluice" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

LLAMA = r"""
import sys, time, llama_cpp
path, t = sys.argv[1], int(sys.argv[2])
llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=t, n_threads_batch=t,
                      verbose=False, type_k=0, type_v=0)
toks = [(i * 7919 + 13) % 32000 + 100 for i in range(64)]
bp = bd = 0
for _ in range(2):
    llm.reset(); t0 = time.perf_counter(); llm.eval(toks); t1 = time.perf_counter()
    for i in range(32): llm.eval([1000 + i])
    t2 = time.perf_counter(); bp = max(bp, 64 / (t1 - t0)); bd = max(bd, 32 / (t2 - t1))
print(f"prefill {bp:.1f} tok/s, decode {bd:.1f} tok/s")
"""


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_llama(model, threads):
    r = subprocess.run([sys.executable, "-c", LLAMA, str(model), str(threads)], capture_output=True, text=True,
                       env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    m = re.search(r"prefill ([\d.]+) tok/s, decode ([\d.]+) tok/s", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit(f"cpu-bench: llama.cpp failed on {model}: {r.stderr.strip()[-400:]}")
    return float(m.group(1)), float(m.group(2))


def run_ours(build, model, threads, mode):
    env = dict(os.environ)
    env.pop("SLUICE_CPU_ACT", None)
    env.pop("SLUICE_CPU_ISA", None)
    if mode == "avx2":   # the default activations on the AVX2 kernels of an AVX-512 CPU
        env["SLUICE_CPU_ISA"] = "avx2"
    elif mode != "default":
        env["SLUICE_CPU_ACT"] = mode
    cmd = [str(build / "tools" / "enginebench"), "-m", str(model), "--batch", "1", "--prompt", "64", "--gen", "32",
           "--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    p = re.search(r"prefill[^\n]*?([\d.]+) tok/s", r.stdout)
    d = re.search(r"decode[^\n]*?([\d.]+) tok/s", r.stdout)
    if r.returncode != 0 or not p or not d:
        sys.exit(f"cpu-bench: enginebench failed on {model}: {r.stdout[-400:]} {r.stderr.strip()[-400:]}")
    return float(p.group(1)), float(d.group(1))


def default_models(build, models_dir):
    models_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for qtype, name in (("Q4_K_M", "1b-q4km.gguf"), ("Q8_0", "1b-q8_0.gguf")):
        path = models_dir / name
        if not path.is_file():
            print(f"making {path}", file=sys.stderr)
            subprocess.run([str(build / "tools" / "mkmodel"), "-o", str(path), "--preset", "1b", "--type", qtype,
                            "--n-vocab", "128256"], check=True)
        out.append(path)
    if REAL.is_file():
        out.append(REAL)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=pathlib.Path)
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--modes", default="default", help="comma-separated: default, avx2, q8, q16, f32")
    ap.add_argument("--models-dir", type=pathlib.Path, default=pathlib.Path("/tmp/bench-cpu"))
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    modes = a.modes.split(",")
    models = a.models or default_models(a.build, a.models_dir)
    # res[(model, t)] = {"llama": [(p, d)...], mode: [(p, d)...]}, index = repetition
    res = {}
    loads = []
    for rep in range(a.reps):
        for model in models:
            for t in threads:
                load = loadavg()
                loads.append(load)
                row = res.setdefault((model, t), {"llama": []})
                row["llama"].append(run_llama(model, t))
                for mode in modes:
                    row.setdefault(mode, []).append(run_ours(a.build, model, t, mode))
                print(f"rep {rep + 1} {model.name} t={t} load {load}: llama.cpp {row['llama'][-1]}, "
                      + ", ".join(f"{m} {row[m][-1]}" for m in modes), file=sys.stderr, flush=True)
    fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
    for phase, k in (("prefill", 0), ("decode", 1)):
        print(f"\n{phase} tok/s, repetitions 1 / 2 / ...; ratio = median over repetitions of ours / llama.cpp\n")
        head = "| model | threads | llama.cpp | " + " | ".join(f"ours {m} | ratio" for m in modes) + " |"
        print(head)
        print("|" + " --- |" * (3 + 2 * len(modes)))
        for (model, t), row in res.items():
            ll = [r[k] for r in row["llama"]]
            cells = [model.name, str(t), fmt(ll)]
            for m in modes:
                ours = [r[k] for r in row[m]]
                cells += [fmt(ours), f"{statistics.median(o / l for o, l in zip(ours, ll)):.2f}"]
            print("| " + " | ".join(cells) + " |")
    print(f"\nload average before each group: {', '.join(loads)}; after: {loadavg()}")


if __name__ == "__main__":
    main()
