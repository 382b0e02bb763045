#!/usr/bin/env python3
"""tools/train/parity.py: does sluice compute what train.py trained?

Runs train.py's torch model (float32, weights rounded to F16 as exported)
and sluice's forward pass (build/tools/fwdump) on the same token ids and
compares the logits of every position. A wrong rope pairing, GQA head map,
norm or tied-output convention shows up as a large error; F16 rounding and
summation order stay below 1e-2 relative L2.
    python3 tools/train/parity.py --gguf models/default/sluice-default-f16.gguf
(weights and shapes read back from the F16 file), or --ckpt OUT/model.npz
(train.py --save-npz). With --random-scale S it first multiplies every 2-D
weight by S and exports a fresh F16 file, so that an untrained checkpoint
still gives peaked logits. Needs torch (Debian's python3-torch) and gguf.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export as gguf_export  # noqa: E402
import train as tr  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def torch_model(weights, cfg):
    m = tr.Llama(dict(cfg, dropout=0.0), torch.device("cpu"))
    names = dict(attn_norm="attn_norm", wq="attn_q", wk="attn_k", wv="attn_v", wo="attn_output",
                 ffn_norm="ffn_norm", w_gate="ffn_gate", w_up="ffn_up", w_down="ffn_down")
    f16 = lambda a: torch.from_numpy(a.astype(np.float16).astype(np.float32) if a.ndim == 2 else a)
    with torch.no_grad():
        m.tok_embd.weight.copy_(f16(weights["token_embd.weight"]))
        m.output_norm.weight.copy_(f16(weights["output_norm.weight"]))
        for i, b in enumerate(m.blocks):
            for attr, g in names.items():
                getattr(b, attr).weight.copy_(f16(weights[f"blk.{i}.{g}.weight"]))
    return m.eval()


def main():
    ap = argparse.ArgumentParser(description="torch model vs sluice forward on the exported file")
    ap.add_argument("--ckpt", help="model.npz of train.py --save-npz (default: read --gguf)")
    ap.add_argument("--gguf", help="exported F16 file (default: export one from the checkpoint)")
    ap.add_argument("--vocab", default=os.path.join(REPO, ".train", "vocab.gguf"))
    ap.add_argument("--random-scale", type=float, default=0.0)
    ap.add_argument("--build", default=os.environ.get("SLUICE_BUILD_DIR", os.path.join(REPO, "build")))
    ap.add_argument("--tokens", default="1,560,272,5398,3580,5483,272,12599,304,272,6340,28723,13,2,1,22557")
    args = ap.parse_args()
    if args.ckpt:
        weights, cfg = gguf_export.load_ckpt(args.ckpt)
    elif args.gguf:
        weights, cfg = gguf_export.load_gguf(args.gguf)
    else:
        sys.exit("parity: give --ckpt or --gguf")
    td = tempfile.mkdtemp()
    if args.random_scale:
        weights = {k: (v * args.random_scale if v.ndim == 2 else v) for k, v in weights.items()}
    path = args.gguf
    if not path or args.random_scale:
        path = os.path.join(td, "parity.gguf")
        gguf_export.export(weights, cfg, args.vocab, path, "F16")
    toks = [int(t) for t in args.tokens.split(",")]
    out = os.path.join(td, "logits.f32")
    subprocess.run([os.path.join(args.build, "tools", "fwdump"), "-m", path, "--tokens", args.tokens,
                    "--out", out, "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
    got = np.fromfile(out, dtype=np.float32).reshape(len(toks), -1)
    with torch.no_grad():
        want = torch_model(weights, cfg)(torch.tensor([toks]))[0].double().numpy()
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    same_argmax = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    print(f"parity: relative L2 {rel:.2e}, argmax agreement {same_argmax:.3f} over {len(toks)} positions")
    sys.exit(0 if rel < 1e-2 else 1)


if __name__ == "__main__":
    main()
