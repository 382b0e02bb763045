#!/usr/bin/env python3
"""tools/train/train.py: trains sluice's default model and exports it as GGUF.

Runs on the GPU machine with its python3 (torch + numpy; the `gguf` package
for export travels as a wheel), on the folder prepare.py wrote:
    python3 tools/train/train.py --data .train --out $OUT --minutes 5
and, as a CPU dry run of the whole path (tiny config, seconds):
    python3 tools/train/train.py --data .train --out /tmp/dry --device cpu --minutes 0.3 --tiny

The model is llama as llama.cpp and sluice read it: RMSNorm (eps 1e-5),
rope base 10000 on ADJACENT pairs (x[2i], x[2i+1]) so the weights export
without the q/k permutation HF checkpoints need, grouped-query attention,
SwiGLU, tied input/output embeddings, Mistral's 32k vocabulary.

Trade-off: the corpus is small (2.6M tokens) next to what the GPU could
chew in the time budget. So each run is a fixed number of steps (the cosine
schedule and the result depend only on the seed), three runs differ in
length and dropout (VARIANTS), and the weights kept are those of the best
held-out evaluation of any; --minutes is a safety stop that still exports, not
the schedule. The price: the held-out loss picked the checkpoint, so it is a
slightly optimistic estimate (the bigram baseline's k is picked the same way).

Writes into --out: train_log.json (config, loss curve, validation curve,
best validation loss, timings) and sluice-default-f16.gguf /
sluice-default-q8_0.gguf (see export.py); a file over --split-mb (15 MiB: the
GPU machine hands back files of at most 16 MiB) is cut into NAME.part0,
NAME.part1, ..., rejoined with `cat NAME.part* > NAME`.
"""
import argparse
import json
import math
import os
import sys
import time

# Deterministic cuBLAS needs this before CUDA initialises.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export as gguf_export  # noqa: E402

CONFIGS = {
    # ~12.1M parameters, 8.2M of them the (tied) embedding table.
    "default": dict(dim=256, n_layer=5, n_head=4, n_kv_head=2, head_dim=64, ffn=768, ctx=512,
                    batch=32, steps=3000, lr=2e-3, warmup=100, eval_every=100, dropout=0.1),
    # Same shapes, shrunk, for the CPU dry run.
    "tiny": dict(dim=64, n_layer=2, n_head=2, n_kv_head=1, head_dim=32, ffn=256, ctx=64,
                 batch=8, steps=200, lr=3e-3, warmup=10, eval_every=20, dropout=0.0, val_windows_max=16),
}
# Runs of one invocation; the one with the best held-out loss is exported.
# The corpus is small, so the question is how long to train and how hard to
# regularise: a short run, and longer ones with more dropout (about 9, 25
# and 37 passes over the data).
VARIANTS = {
    "a": dict(steps=1500, dropout=0.1),
    "b": dict(steps=4000, dropout=0.2),
    "c": dict(steps=6000, dropout=0.3),
}
COMMON = dict(vocab=32000, norm_eps=1e-5, rope_base=10000.0, weight_decay=0.1, grad_clip=1.0,
              min_lr_frac=0.1, val_windows_max=4096)


# ---------------------------------------------------------------- the model

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).type_as(x)


def rope_tables(ctx, head_dim, base, device):
    """cos/sin of position * base^(-2i/d), (ctx, head_dim/2): sluice's inv_freq."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float().to(device), torch.sin(ang).float().to(device)


def apply_rope(x, cos, sin):
    """x: (B, T, H, D); rotates the adjacent pairs (x[2i], x[2i+1])."""
    B, T, H, D = x.shape
    xp = x.float().view(B, T, H, D // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c, s = cos[:T][None, :, None, :], sin[:T][None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.view(B, T, H, D).type_as(x)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, hd = c["dim"], c["head_dim"]
        self.attn_norm = RMSNorm(d, c["norm_eps"])
        self.wq = nn.Linear(d, c["n_head"] * hd, bias=False)
        self.wk = nn.Linear(d, c["n_kv_head"] * hd, bias=False)
        self.wv = nn.Linear(d, c["n_kv_head"] * hd, bias=False)
        self.wo = nn.Linear(c["n_head"] * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, c["norm_eps"])
        self.w_gate = nn.Linear(d, c["ffn"], bias=False)
        self.w_up = nn.Linear(d, c["ffn"], bias=False)
        self.w_down = nn.Linear(c["ffn"], d, bias=False)
        self.drop = nn.Dropout(c["dropout"])

    def attention(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        q = apply_rope(self.wq(x).view(B, T, c["n_head"], c["head_dim"]), cos, sin)
        k = apply_rope(self.wk(x).view(B, T, c["n_kv_head"], c["head_dim"]), cos, sin)
        v = self.wv(x).view(B, T, c["n_kv_head"], c["head_dim"])
        rep = c["n_head"] // c["n_kv_head"]
        # query head h reads kv head h // rep, as llama.cpp and sluice do
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k = k[:, :, None].expand(B, c["n_kv_head"], rep, T, c["head_dim"]).reshape(B, -1, T, c["head_dim"])
        v = v[:, :, None].expand(B, c["n_kv_head"], rep, T, c["head_dim"]).reshape(B, -1, T, c["head_dim"])
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x (Debian's python3-torch, the CPU dry run)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(c["head_dim"])
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attention(self.attn_norm(x), cos, sin))
        h = self.ffn_norm(x)
        return x + self.drop(self.w_down(F.silu(self.w_gate(h)) * self.w_up(h)))


class Llama(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.c = c
        self.tok_embd = nn.Embedding(c["vocab"], c["dim"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.output_norm = RMSNorm(c["dim"], c["norm_eps"])
        self.drop = nn.Dropout(c["dropout"])  # on the embeddings too: rare tokens overfit first
        cos, sin = rope_tables(c["ctx"], c["head_dim"], c["rope_base"], device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # residual projections shrink with depth (GPT-2's scheme)
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if name.endswith(("wo.weight", "w_down.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets=None):
        x = self.drop(self.tok_embd(idx))
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        logits = F.linear(self.output_norm(x), self.tok_embd.weight)
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))

    def gguf_weights(self):
        """GGUF name -> float32 numpy array, torch layout (out, in) = GGUF (ne1, ne0)."""
        m = {"token_embd.weight": self.tok_embd.weight, "output_norm.weight": self.output_norm.weight}
        names = dict(attn_norm="attn_norm", wq="attn_q", wk="attn_k", wv="attn_v", wo="attn_output",
                     ffn_norm="ffn_norm", w_gate="ffn_gate", w_up="ffn_up", w_down="ffn_down")
        for i, b in enumerate(self.blocks):
            for attr, g in names.items():
                m[f"blk.{i}.{g}.weight"] = getattr(b, attr).weight
        return {k: v.detach().float().cpu().numpy().copy() for k, v in m.items()}


# ---------------------------------------------------------------- training

def lr_at(step, c):
    if step < c["warmup"]:
        return c["lr"] * (step + 1) / c["warmup"]
    t = min(1.0, (step - c["warmup"]) / max(1, c["steps"] - c["warmup"]))
    lo = c["lr"] * c["min_lr_frac"]
    return lo + 0.5 * (c["lr"] - lo) * (1 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate(model, val, c, device, autocast):
    """Mean cross-entropy (nats/token) over non-overlapping val windows."""
    model.eval()
    T = c["ctx"]
    n = min((val.numel() - 1) // T, c["val_windows_max"])
    total, count = 0.0, 0
    for s in range(0, n, 64):
        e = min(n, s + 64)
        starts = torch.arange(s, e) * T
        x = torch.stack([val[i:i + T] for i in starts]).to(device)
        y = torch.stack([val[i + 1:i + 1 + T] for i in starts]).to(device)
        with autocast():
            loss = model(x, y)
        total += loss.item() * y.numel()
        count += y.numel()
    model.train()
    return total / count


def train_run(c, train, val, dev, deadline):
    """One training run of config c until c["steps"] or the deadline.
    Returns (best val loss, its step, its weights, the run's log)."""
    cuda = dev.type == "cuda"

    def autocast():
        if cuda:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    torch.manual_seed(c["seed"])
    model = Llama(c, dev).to(dev)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": c["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    kw = {"fused": True} if cuda and torch.__version__ >= "2" else {}
    opt = torch.optim.AdamW(groups, lr=c["lr"], betas=(0.9, 0.95), eps=1e-8, **kw)
    fwd = torch.compile(model) if c.get("compile") else model

    # Windows come from a CPU generator, so their sequence is the same on
    # every device for a seed.
    gen = torch.Generator().manual_seed(c["seed"])
    T, B = c["ctx"], c["batch"]
    train_dev = train.to(dev)
    offs = torch.arange(T + 1, device=dev)
    # drawn up front: a small host-to-device copy every step would wait for the GPU
    all_starts = torch.randint(0, train.numel() - T - 1, (c["steps"], B), generator=gen).to(dev)
    log = {"variant": c["variant"], "steps": c["steps"], "dropout": c["dropout"], "lr": c["lr"],
           "loss_curve": [], "val_curve": []}
    best = (float("inf"), -1, None)
    t0 = time.time()
    run_loss, run_n, step = torch.zeros((), device=dev), 0, 0
    stopped = "steps"
    for step in range(c["steps"]):
        chunk = train_dev[all_starts[step][:, None] + offs[None, :]]
        x, y = chunk[:, :-1], chunk[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, c)
        with autocast():
            loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        run_loss += loss.detach()
        run_n += 1
        last = step == c["steps"] - 1
        late = time.time() > deadline
        if (step + 1) % c["eval_every"] == 0 or last or late:
            vl = evaluate(model, val, c, dev, autocast)
            tl = run_loss.item() / run_n
            el = time.time() - t0
            log["loss_curve"].append({"step": step + 1, "train_loss": tl, "seconds": round(el, 2)})
            log["val_curve"].append({"step": step + 1, "val_loss": vl})
            if vl < best[0]:
                best = (vl, step + 1, model.gguf_weights())
            print(f"[{c['variant']}] step {step + 1:5d}  train {tl:.4f}  val {vl:.4f}  "
                  f"lr {lr_at(step, c):.2e}  {el:.1f}s", flush=True)
            run_loss, run_n = torch.zeros((), device=dev), 0
            if late and not last:
                stopped = "time limit"
                break
    if cuda:
        torch.cuda.synchronize()
    log.update({"stopped_by": stopped, "steps_run": step + 1, "best_step": best[1], "best_val_loss": best[0],
                "final_train_loss": log["loss_curve"][-1]["train_loss"], "seconds": round(time.time() - t0, 1),
                "tokens_seen": (step + 1) * B * T})
    return best[0], best[1], best[2], log


def main():
    ap = argparse.ArgumentParser(description="train the default model (see the file's top comment)")
    ap.add_argument("--data", required=True, help="folder written by prepare.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=5.0,
                    help="time for all training runs; each run stops at its share and the best is exported")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny config for a CPU dry run")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--variants", help="comma-separated names from VARIANTS (default: all)")
    ap.add_argument("--steps", type=int, help="override every variant's step count")
    ap.add_argument("--batch", type=int, help="override the windows per step")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (costs start-up time)")
    ap.add_argument("--save-npz", action="store_true", help="also write model.npz (float32 weights, 48 MB)")
    ap.add_argument("--split-mb", type=float, default=15.0,
                    help="cut exported files larger than this into .partN pieces (0: never)")
    args = ap.parse_args()
    t_start = time.time()

    base = dict(COMMON)
    base.update(CONFIGS["tiny" if args.tiny else "default"])
    base.update(seed=args.seed, compile=args.compile, name="sluice-default" + ("-tiny" if args.tiny else ""))
    base["file_stem"] = base["name"]
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.data, "meta.json")) as fh:
        meta = json.load(fh)
    assert meta["n_vocab"] == base["vocab"], "prepare.py used another vocabulary"

    np.random.seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device(args.device)
    train = torch.from_numpy(np.fromfile(os.path.join(args.data, "train.bin"), dtype=np.uint16).astype(np.int64))
    val = torch.from_numpy(np.fromfile(os.path.join(args.data, "val.bin"), dtype=np.uint16).astype(np.int64))
    bigram = meta["bigram"]["val_ce_nats"]

    deadline = t_start + args.minutes * 60
    runs, best = [], None
    for i, name in enumerate(names):
        c = dict(base, variant=name)
        if not args.tiny:
            c.update(VARIANTS[name])
        if args.steps:
            c["steps"] = args.steps
        if args.batch:
            c["batch"] = args.batch
        # each run gets an equal share of the time left
        run_deadline = time.time() + (deadline - time.time()) / (len(names) - i)
        n_params = sum(p.numel() for p in Llama(c, torch.device("cpu")).parameters())
        print(f"train: run {name}: {n_params / 1e6:.2f}M parameters, {train.numel()} train / {val.numel()} val "
              f"tokens, {c['steps']} steps of {c['batch']}x{c['ctx']}, dropout {c['dropout']} on {dev}",
              flush=True)
        vl, step, weights, rlog = train_run(c, train, val, dev, run_deadline)
        runs.append(rlog)
        if best is None or vl < best[0]:
            best = (vl, step, weights, c, rlog)
    val_loss, best_step, weights, c, rlog = best

    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    log = {"config": c, "n_params": n_params, "device": device_name, "torch": torch.__version__,
           "data": {"train_tokens": int(train.numel()), "val_tokens": int(val.numel()),
                    "bigram_val_ce_nats": bigram, "sha256": meta.get("sha256")},
           "chosen_variant": c["variant"], "val_loss_nats": val_loss, "best_step": best_step,
           "bigram_minus_val": bigram - val_loss,
           "train_seconds": round(sum(r["seconds"] for r in runs), 1),
           "loss_curve": rlog["loss_curve"], "val_curve": rlog["val_curve"], "runs": runs}
    if args.save_npz:
        np.savez(os.path.join(args.out, "model.npz"), __config__=json.dumps(c), **weights)
    info = (f"sluice default model: llama, {n_params / 1e6:.1f}M parameters, trained {best_step} steps on "
            f"KJV Bible, Jane Austen, fortunes ({train.numel()} tokens), val CE {val_loss:.3f} nats")
    try:
        paths = gguf_export.export_all(weights, c, os.path.join(args.data, "vocab.gguf"), args.out, info)
        if args.split_mb > 0:
            paths = [q for p in paths
                     for q in (gguf_export.split_file(p, int(args.split_mb * 2**20))
                               if os.path.getsize(p) > args.split_mb * 2**20 else [p])]
        log["exported"] = [os.path.basename(p) for p in paths]
    except ImportError as e:
        print(f"train: gguf package missing ({e}); run export.py on model.npz", file=sys.stderr)
        log["exported"] = []
    log["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(args.out, "train_log.json"), "w") as fh:
        json.dump(log, fh, indent=1)
    print(f"train: best val {val_loss:.4f} nats (run {c['variant']}, step {best_step}; bigram {bigram:.4f}); "
          f"{log['train_seconds']}s training, {log['total_seconds']}s total; wrote {', '.join(log['exported'])}",
          flush=True)


if __name__ == "__main__":
    main()
