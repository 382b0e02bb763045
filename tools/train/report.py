#!/usr/bin/env python3
"""tools/train/report.py: train_log.json -> the results section of docs/MODELS.md.

    python3 tools/train/report.py models/default/train_log.json [--samples FILE]

Prints Markdown: the chosen run, held-out loss against the bigram baseline,
time, and the loss curve of every run (one row per evaluation)."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    args = ap.parse_args()
    with open(args.log) as fh:
        log = json.load(fh)
    c, d = log["config"], log["data"]
    print(f"- Parameters: {log['n_params']:,} ({c['n_layer']} layers, dim {c['dim']}, {c['n_head']} heads / "
          f"{c['n_kv_head']} KV heads of {c['head_dim']}, FFN {c['ffn']}, context {c['ctx']}, tied embeddings)")
    print(f"- Data: {d['train_tokens']:,} training tokens, {d['val_tokens']:,} held-out tokens")
    print(f"- Chosen run: {log['chosen_variant']} (dropout {c['dropout']}, {c['steps']} steps of "
          f"{c['batch']}x{c['ctx']} tokens, peak lr {c['lr']}), best held-out loss at step {log['best_step']}")
    print(f"- **Held-out validation loss: {log['val_loss_nats']:.4f} nats/token**; add-k bigram on the same split: "
          f"{d['bigram_val_ce_nats']:.4f}; margin {log['bigram_minus_val']:.4f} nats (bar: at least 1.0)")
    print(f"- Training time: {log['train_seconds']} s of training, {log['total_seconds']} s for the whole "
          f"script (start to exported files) on {log['device']}, torch {log['torch']}")
    for r in log["runs"]:
        print(f"\nRun {r['variant']} (dropout {r['dropout']}, {r['steps_run']}/{r['steps']} steps, stopped by "
              f"{r['stopped_by']}, {r['seconds']} s, {r['tokens_seen']:,} tokens seen; best val "
              f"{r['best_val_loss']:.4f} at step {r['best_step']}):\n")
        print("| step | train loss | val loss |\n| ---: | ---: | ---: |")
        vals = {v["step"]: v["val_loss"] for v in r["val_curve"]}
        curve = r["loss_curve"]
        keep = [p for i, p in enumerate(curve) if i % max(1, len(curve) // 10) == 0 or p is curve[-1]]
        for p in keep:
            print(f"| {p['step']} | {p['train_loss']:.4f} | {vals[p['step']]:.4f} |")


if __name__ == "__main__":
    main()
