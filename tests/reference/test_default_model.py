"""The shipped default model (models/default/, trained by tools/train/train.py)
against the issue's bar: its recorded held-out loss beats the add-k bigram
baseline of the same split by at least 1 nat, and greedy continuations of
fixed prompts read as English: at least 80% of their words are in
/usr/share/dict/words (Debian's wamerican, installed by tools/setup.sh).
Also: its greedy continuations do not change with the batch around them or
the prefill chunk size. Skipped while the trained files are not committed."""
import json
import re
import subprocess

import pytest

from paths import REPO, SLUICE, tool

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


def test_recorded_validation_loss_beats_bigram_by_one_nat():
    log_path = MODEL_DIR / "train_log.json"
    assert log_path.exists(), "models/default/train_log.json (train.py's log) must ship with the model"
    log = json.loads(log_path.read_text())
    val, bigram = log["val_loss_nats"], log["data"]["bigram_val_ce_nats"]
    assert val <= bigram - 1.0, f"validation loss {val:.4f} nats, bigram baseline {bigram:.4f}"


# "<s> In the beginning God created", "<s> Once upon a time there was" (Mistral ids)
ID_PROMPTS = ["1,560,272,5398,2499,3859", "1,5713,3714,264,727,736,403"]


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
