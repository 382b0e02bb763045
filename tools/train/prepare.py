#!/usr/bin/env python3
"""tools/train/prepare.py: builds the training data of the default model.

Runs on a developer machine (not the GPU machine), with the project's venv:
    apt-get install -y bible-kjv bible-kjv-text fortunes fortunes-min r-cran-janeaustenr
    .venv/bin/python tools/train/prepare.py --out .train

Corpus: the King James Bible (public domain; read through the `bible` program
of Debian's bible-kjv, one chapter per document, verse numbers dropped), Jane
Austen's six novels (public domain; Debian's r-cran-janeaustenr, read with
Rscript, one chapter per document) and the English fortune cookie files of
Debian's fortunes/fortunes-min (BSD licence on the collection; one fortune
per document). Every 20th document of each source is held out for
validation, so every source is in both splits; a split by position would
hold out Revelation and Persuasion alone.

Writes into --out:
    train.bin, val.bin  uint16 token ids, documents as <s> text </s>
    vocab.gguf          tokenizer-only GGUF written by build/tools/mkvocab
    meta.json           sources, sizes, and the add-k bigram baseline
The trade-off: the tokenizer is Mistral's 32k one, not one fitted to this
corpus; it keeps sluice's real-vocabulary paths exercised and the embedding
table small enough for a file under 30 MB.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
from tokenizers import Tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests"))
from paths import data_path  # noqa: E402  (tests/data, expanded)

TOKENIZER = "tokenizers/mistral"
FORTUNE_DIR = "/usr/share/games/fortunes"
VAL_EVERY = 20
BOS, EOS = 1, 2


def normalise(text):
    """Tabs and runs of spaces become one space, lines are stripped, and at
    most one empty line separates paragraphs."""
    text = text.replace("\r", "")
    lines = [re.sub(r"[ \t\f\v]+", " ", ln).strip() for ln in text.split("\n")]
    out = "\n".join(lines)
    out = re.sub(r"\n{3,}", "\n\n", out)
    return out.strip()


def kjv_documents():
    """One document per chapter: the `bible` program prints "Book N" headings
    and "  V text" verse lines (-l wide enough that no verse wraps)."""
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], capture_output=True, text=True,
                         check=True).stdout
    docs, cur = [], []
    for line in out.split("\n"):
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            cur.append(m.group(1))
        elif line.strip():
            if cur:
                docs.append(" ".join(cur))
            cur = []
    if cur:
        docs.append(" ".join(cur))
    return [normalise(d) for d in docs]


def fortune_documents():
    """One document per fortune; the files separate them with lines "%"."""
    docs = []
    names = sorted(f for f in glob.glob(os.path.join(FORTUNE_DIR, "*"))
                   if os.path.isfile(f) and not os.path.islink(f) and not f.endswith(".dat"))
    for path in names:
        with open(path, encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
        for part in re.split(r"^%\s*$", raw, flags=re.M):
            d = normalise(part)
            if len(d) >= 20:
                docs.append(d)
    return docs, [os.path.basename(n) for n in names]


AUSTEN = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"]


def austen_documents():
    """One document per chapter of Jane Austen's six novels (Project
    Gutenberg texts that Debian's r-cran-janeaustenr ships as R data; Rscript
    prints them). Hard-wrapped lines are joined into paragraphs, one per line;
    _underscores_ marking italics are dropped; titles and VOLUME lines go."""
    script = ("library(janeaustenr); for (n in c(%s)) { cat('@@BOOK', n, '\\n'); writeLines(get(n)) }"
              % ",".join(f"'{n}'" for n in AUSTEN))
    out = subprocess.run(["Rscript", "-e", script], capture_output=True, text=True, check=True).stdout
    heading = re.compile(r"^\s*chapter\s+([0-9]+|[ivxlc]+)\.?\s*$", re.I)
    docs = []
    for book in out.split("@@BOOK")[1:]:
        chapters, cur = [], None
        for line in book.split("\n")[1:]:
            if heading.match(line):
                cur = []
                chapters.append(cur)
            elif cur is not None and not re.match(r"^\s*(VOLUME|END OF|THE END)\b", line):
                cur.append(line)
        for lines in chapters:
            paras = [" ".join(p.split()) for p in "\n".join(lines).split("\n\n")]
            text = "\n".join(p for p in paras if p).replace("_", "")
            if text:
                docs.append(normalise(text))
    return docs


def encode(tok, docs):
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.append(BOS)
        ids.extend(enc.ids)
        ids.append(EOS)
    return np.asarray(ids, dtype=np.uint16)


def bigram_ce(train, val, n_vocab, k):
    """Cross-entropy (nats/token) on val of an add-k bigram fitted on train:
    p(b|a) = (c(a,b) + k) / (c(a) + k V), pairs taken over the whole stream."""
    tr = train.astype(np.int64)
    va = val.astype(np.int64)
    pair = tr[:-1] * n_vocab + tr[1:]
    keys, counts = np.unique(pair, return_counts=True)
    prev = np.bincount(tr[:-1], minlength=n_vocab).astype(np.float64)
    vpair = va[:-1] * n_vocab + va[1:]
    pos = np.searchsorted(keys, vpair)
    pos = np.minimum(pos, len(keys) - 1)
    c = np.where(keys[pos] == vpair, counts[pos], 0).astype(np.float64)
    p = (c + k) / (prev[va[:-1]] + k * n_vocab)
    return float(-np.mean(np.log(p)))


def write_vocab_gguf(out_path, build_dir):
    mkvocab = os.path.join(build_dir, "tools", "mkvocab")
    if not os.access(mkvocab, os.X_OK):
        sys.exit(f"prepare: {mkvocab} not found: build sluice first (tools/setup.sh)")
    tj = str(data_path(f"{TOKENIZER}/tokenizer.json"))
    subprocess.run([mkvocab, tj, str(data_path(f"{TOKENIZER}/tokenizer_config.json")), out_path], check=True,
                   stdout=subprocess.DEVNULL)
    return Tokenizer.from_file(tj)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, ".train"))
    ap.add_argument("--build", default=os.environ.get("SLUICE_BUILD_DIR", os.path.join(REPO, "build")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tok = write_vocab_gguf(os.path.join(args.out, "vocab.gguf"), args.build)
    n_vocab = tok.get_vocab_size()
    assert tok.token_to_id("<s>") == BOS and tok.token_to_id("</s>") == EOS

    kjv = kjv_documents()
    fort, fort_files = fortune_documents()
    austen = austen_documents()
    sources = [("kjv", kjv), ("austen", austen), ("fortunes", fort)]
    train_docs, val_docs, stats = [], [], {}
    for name, docs in sources:
        tr = [d for i, d in enumerate(docs) if i % VAL_EVERY != VAL_EVERY - 1]
        va = [d for i, d in enumerate(docs) if i % VAL_EVERY == VAL_EVERY - 1]
        train_docs += tr
        val_docs += va
        stats[name] = {"documents": len(docs), "chars": sum(len(d) for d in docs),
                       "train_documents": len(tr), "val_documents": len(va)}
    # Interleave the sources in training order deterministically: the train
    # script samples random windows anyway, but a fixed order makes the files
    # byte-identical from run to run.
    train = encode(tok, train_docs)
    val = encode(tok, val_docs)
    train.tofile(os.path.join(args.out, "train.bin"))
    val.tofile(os.path.join(args.out, "val.bin"))

    ks = [1.0, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0003]
    ces = {str(k): bigram_ce(train, val, n_vocab, k) for k in ks}
    best_k = min(ks, key=lambda k: ces[str(k)])
    meta = {
        "tokenizer": "mistral (tests/data/tokenizers/mistral), 32000 tokens",
        "n_vocab": n_vocab, "bos": BOS, "eos": EOS, "dtype": "uint16",
        "split": f"every {VAL_EVERY}th document of each source is validation",
        "sources": {
            "kjv": dict(stats["kjv"], package="bible-kjv-text (read with bible-kjv's `bible`)",
                        licence="public domain (translation of 1611)", document="chapter"),
            "austen": dict(stats["austen"], package="r-cran-janeaustenr (read with Rscript)",
                           licence="public domain texts (1811-1818; Project Gutenberg); package MIT",
                           document="chapter", novels=AUSTEN),
            "fortunes": dict(stats["fortunes"], package="fortunes, fortunes-min",
                             licence="BSD (collection, Debian main)", document="fortune",
                             files=fort_files),
        },
        "train_tokens": int(train.size), "val_tokens": int(val.size),
        "sha256": {"train.bin": hashlib.sha256(train.tobytes()).hexdigest(),
                   "val.bin": hashlib.sha256(val.tobytes()).hexdigest()},
        "bigram": {"val_ce_nats": ces[str(best_k)], "k": best_k, "by_k": ces,
                   "how": "add-k bigram fitted on train.bin, cross-entropy over all consecutive pairs of val.bin; "
                          "k is the best of by_k on val (the strongest baseline)"},
    }
    with open(os.path.join(args.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print(f"prepare: train {train.size} tokens, val {val.size} tokens, "
          f"bigram val CE {ces[str(best_k)]:.4f} nats (k={best_k}) -> {args.out}")


if __name__ == "__main__":
    main()
