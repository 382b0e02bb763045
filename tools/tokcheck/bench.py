"""Tokenizer throughput, sluice vs HF `tokenizers`, single-threaded.

Usage: RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
         .venv/bin/python tools/tokcheck/bench.py [BUILD_DIR]
Builds 1 MB of English (Python standard-library docstrings) and 1 MB of
mixed-script text (a fixed-seed mix of 15 scripts, emoji, code, digits and
whitespace), converts the llama3 and qwen3 tokenizers with mkvocab, and
prints MB/s of CPU time (best of 5, so per core and robust to a busy
machine) for both implementations on the same input.
"""
import inspect
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from paths import data_path  # noqa: E402  (tests/data, expanded)
BUILD = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "build"
MB = 1 << 20


def english():
    import argparse, asyncio, collections, email, http.server, json, logging, os as _os, pathlib
    import re, socket, subprocess as sp, threading, typing, unittest, urllib.request, xml.dom.minidom
    mods = [argparse, asyncio, collections, email, http.server, json, logging, _os, pathlib, re, socket,
            sp, threading, typing, unittest, urllib.request, xml.dom.minidom]
    parts = []
    for m in mods:
        for _, obj in sorted(inspect.getmembers(m), key=lambda x: x[0]):
            d = inspect.getdoc(obj)
            if d:
                parts.append(d)
    text = "\n\n".join(parts)
    while len(text.encode()) < MB:
        text += "\n\n" + text
    return text.encode()[:MB].decode("utf-8", "ignore")


def mixed():
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    import test_tokenizer as tt
    rng = random.Random(7)
    pools = [tt.SCRIPTS, tt.EMOJI, tt.CODE, tt.WORDS]
    out, n = [], 0
    while n < MB:
        s = rng.choice(rng.choice(pools)) + rng.choice(tt.WS)
        out.append(s)
        n += len(s.encode())
    return unicodedata.normalize("NFC", "".join(out)).encode()[:MB].decode("utf-8", "ignore")


def main():
    tmp = Path(tempfile.mkdtemp())
    texts = {"english": english(), "mixed": mixed()}
    for name, t in texts.items():
        (tmp / f"{name}.txt").write_text(t, encoding="utf-8")
    print("| vocabulary | text | bytes | sluice MB/s | HF MB/s (one call) | HF MB/s (4 KB calls) | tokens |")
    print("|---|---|---|---|---|---|---|")
    for voc in ["llama3", "qwen3"]:
        tj = data_path(f"tokenizers/{voc}/tokenizer.json")
        gguf = tmp / f"{voc}.gguf"
        subprocess.run([BUILD / "tools" / "mkvocab", tj, data_path(f"tokenizers/{voc}/tokenizer_config.json"),
                        gguf], check=True, capture_output=True)
        tok = Tokenizer.from_file(str(tj))
        tok.encode_special_tokens = True
        for name, t in texts.items():
            nbytes = len(t.encode())
            r = subprocess.run([BUILD / "tools" / "tokcheck", "bench", gguf, tmp / f"{name}.txt", "5"],
                               check=True, capture_output=True, text=True).stdout
            ours = float(r.split(",")[-1].split()[0])
            ids = tok.encode(t, add_special_tokens=False).ids
            mine = subprocess.run([BUILD / "tools" / "tokcheck", "encode", gguf], input=json.dumps(t) + "\n",
                                  check=True, capture_output=True, text=True).stdout.split()
            same = "same ids" if [int(x) for x in mine] == ids else "IDS DIFFER"
            best = 1e9
            for _ in range(5):
                a = time.process_time()
                tok.encode(t, add_special_tokens=False)
                best = min(best, time.process_time() - a)
            # HF is much faster on many short inputs than on one long one:
            # also time it on ~4 KB chunks (cut at newlines), one call each
            chunks, cur = [], ""
            for line in t.split("\n"):
                cur += line + "\n"
                if len(cur) >= 4096:
                    chunks.append(cur)
                    cur = ""
            chunks.append(cur)
            best_c = 1e9
            for _ in range(3):
                a = time.process_time()
                for c in chunks:
                    tok.encode(c, add_special_tokens=False)
                best_c = min(best_c, time.process_time() - a)
            print(f"| {voc} | {name} | {nbytes} | {ours:.1f} | {nbytes / best / 1e6:.1f} | "
                  f"{nbytes / best_c / 1e6:.1f} | {len(ids)} ({same}) |")


if __name__ == "__main__":
    main()
