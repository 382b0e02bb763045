"""The shipped default model (models/default/, trained by tools/train/train.py).
Greedy continuations of fixed prompts read as English: at least 80% of their
words are in /usr/share/dict/words (Debian's wamerican, installed by
tools/setup.sh). llama.cpp (llama-cpp-python), reading the same files,
tokenizes the prompts as sluice does and picks the same 48 greedy tokens,
with logits within 1e-2 relative L2. The greedy continuations do not change
with the batch around them or the prefill chunk size. Skipped while the
trained files are not committed."""
import json
import os
import re
import subprocess

import numpy as np

import pytest

from paths import REPO, SLUICE, tool
from test_llamacpp import greedy_agrees

MODEL_DIR = REPO / "models" / "default"
FILES = sorted(MODEL_DIR.glob("*.gguf"))
DICT = "/usr/share/dict/words"
PROMPTS = [
    "In the beginning",
    "The king said unto",
    "A wise man once said",
    "Love is",
    "The computer",
    "When I was young",
    "And it came to pass",
    "The best thing about life is",
    "Never trust a",
    "Once upon a time",
]

pytestmark = pytest.mark.skipif(not FILES, reason="models/default/*.gguf not committed yet")


def words_of(text):
    # Any script's letters count, so output in another alphabet is a miss, not skipped.
    return re.findall(r"[^\W\d_]+(?:'[^\W\d_]+)?", text)


@pytest.fixture(scope="module")
def dictionary():
    try:
        with open(DICT, encoding="utf-8", errors="replace") as fh:
            words = {w.strip() for w in fh if w.strip()}
    except OSError:
        pytest.skip(f"{DICT} missing (apt-get install wamerican)")
    return words | {w.lower() for w in words}


def in_dict(word, words):
    # A possessive counts when its stem does ("Israel's"; wamerican lists many, not all).
    return word in words or word.lower() in words or (word.endswith("'s") and word[:-2] in words)


def greedy(model, prompt, n=200):
    r = subprocess.run([SLUICE, "generate", "-m", str(model), "-p", prompt, "--temp", "0", "-n", str(n),
                        "--ignore-eos", "-t", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("model", FILES, ids=lambda p: p.name)
def test_greedy_samples_are_mostly_dictionary_words(model, dictionary):
    texts = [greedy(model, p) for p in PROMPTS]
    words = [w for t in texts for w in words_of(t)]
    assert len(words) >= 10 * 60, f"too few words in 10 x 200 tokens: {len(words)}"
    share = sum(in_dict(w, dictionary) for w in words) / len(words)
    assert share >= 0.8, f"{share:.3f} of {len(words)} words in {DICT}; first sample: {texts[0][:300]!r}"
    # A model that repeats one word would pass the share: an untrained one does.
    distinct = {w.lower() for w in words if in_dict(w, dictionary)}
    assert len(distinct) >= 100, f"only {len(distinct)} distinct dictionary words; first sample: {texts[0][:300]!r}"


# "<s> In the beginning God created", "<s> Once upon a time there was" (Mistral
# ids; test_prompt_ids_are_the_texts checks them against llama.cpp)
ID_TEXTS = ["In the beginning God created", "Once upon a time there was"]
ID_PROMPTS = ["1,560,272,5398,2499,3859", "1,5713,3714,264,727,736,403"]
STEPS = 48


@pytest.mark.parametrize("model", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("prompt", ID_PROMPTS)
def test_greedy_same_across_batch_sizes_and_chunks(model, prompt):
    def run(*extra):
        r = subprocess.run([tool("fwdump"), "-m", str(model), "--tokens", prompt, "--steps", "48",
                            "--threads", "2", *extra], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    alone = run()
    assert len(alone.split(",")) == len(prompt.split(",")) + 48
    assert run("--batch-with", "5") == alone
    assert run("--chunk", "1") == alone


# ---------------------------------------------------------------- llama.cpp

@pytest.fixture(scope="module")
def llamacpp():
    """file -> llama_cpp.Llama on it, loaded once per module."""
    llama_cpp = pytest.importorskip("llama_cpp")
    loaded = {}

    def load(path):
        if path not in loaded:
            # F32 KV cache: llama.cpp's default F16 cache only adds noise
            loaded[path] = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=2,
                                           logits_all=True, verbose=False, type_k=0, type_v=0)
        return loaded[path]

    return load


def test_prompt_ids_are_the_texts(llamacpp):
    llm = llamacpp(FILES[0])
    for text, ids in zip(ID_TEXTS, ID_PROMPTS):
        assert llm.tokenize(text.encode(), add_bos=True, special=False) == [int(t) for t in ids.split(",")]


@pytest.mark.parametrize("model", FILES, ids=lambda p: p.name)
def test_tokenizer_matches_llamacpp(model, llamacpp):
    """The prompts and a harder line (digits, punctuation, non-ASCII, runs of
    spaces) tokenize as llama.cpp's SentencePiece tokenizer does."""
    texts = PROMPTS + ["Hello world! In 2024, 10x better;  two  spaces, \u00fcn\u00efc\u00f6d\u00e9 and \u4e2d\u6587."]
    r = subprocess.run([tool("tokcheck"), "encode", str(model), "plain"],
                       input="".join(json.dumps(t) + "\n" for t in texts), capture_output=True, text=True,
                       timeout=60, check=True)
    ours = [[int(t) for t in line.split()] for line in r.stdout.splitlines()]
    llm = llamacpp(model)
    theirs = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in texts]
    assert len(ours) == len(texts)
    for text, a, b in zip(texts, ours, theirs):
        assert a == b, f"{text!r}: sluice {a}, llama.cpp {b}"


@pytest.mark.parametrize("model", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("prompt", ID_PROMPTS)
def test_greedy_and_logits_match_llamacpp(model, prompt, llamacpp, tmp_path):
    """With llama.cpp's activation rounding (SLUICE_CPU_ACT=q8: 8-bit blocks
    into Q8_0 matmuls, fp16 into F16 ones) the 48 greedy tokens are identical
    and the prompt logits agree: Q8_0 bit for bit, F16 within 3e-4 relative
    L2 (measured); 1e-2 is test_llamacpp.py's bound. q8 is the default,
    named here so that the environment cannot change it. On the 16-bit path
    (SLUICE_CPU_ACT=q16) the Q8_0 file's greedy picks part from llama.cpp's after 8 and 13
    generated tokens on these prompts, as test_llamacpp.py describes for
    quantized types.
    Bit for bit holds against llama.cpp's AVX2 kernels. A llama.cpp built
    for AVX-512 (its build is native; seen on an Intel Xeon with AVX-512
    VNNI) rounds an occasional near-boundary activation code of a decode
    step the other way, and a near tie then follows it (seen: the second
    prompt, 20th position, the two picks 8e-3 apart in our logits): the
    greedy tokens must then agree by test_llamacpp.py's rule (ours the
    float64 rounding reference's pick, every earlier position of ours within
    float32 noise of it, llama.cpp's not)."""
    ids = [int(t) for t in prompt.split(",")]
    out = tmp_path / "logits.bin"
    r = subprocess.run([tool("fwdump"), "-m", str(model), "--tokens", prompt, "--steps", str(STEPS),
                        "--threads", "2", "--out", str(out)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "SLUICE_CPU_ACT": "q8"})
    assert r.returncode == 0, r.stderr
    ours = [int(t) for t in r.stdout.strip().split(",")]
    llm = llamacpp(model)
    llm.reset()
    llm.eval(ids)
    theirs = list(ids)
    for _ in range(STEPS):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        theirs.append(nxt)
        llm.eval([nxt])
    n_vocab = llm.n_vocab()
    logits = np.fromfile(out, dtype=np.float32).reshape(-1, n_vocab)
    assert greedy_agrees(model, ours, theirs, logits, np.asarray(llm.scores[:len(theirs)])), \
        (llm.detokenize(ours[len(ids):]), llm.detokenize(theirs[len(ids):]))
    a = logits[:len(ids)]
    b = np.array(llm.scores[:len(ids)])
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    print(f"{model.name} {prompt}: prompt logits relative L2 sluice - llama.cpp {rel:.2e}")
    assert rel < 1e-2
