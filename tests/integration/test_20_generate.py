"""`sluice generate`: text in, text out, and a clear message with exit code 2
for every kind of bad input (never a crash)."""
import subprocess

import pytest

from paths import SLUICE, data_path


@pytest.fixture(scope="module")
def vocab_model(make_model):
    return make_model("tiny-llama", "Q4_K", tokenizer=str(data_path("tokenizers/mistral/tokenizer.json")), peak=8)


def gen(*args, **kw):
    return subprocess.run([SLUICE, "generate", *args], capture_output=True, text=True, timeout=60, **kw)


def test_greedy_text_is_deterministic(vocab_model):
    a = gen("-m", str(vocab_model), "-p", "Once upon a time", "-n", "12", "--temp", "0", "-t", "1")
    b = gen("-m", str(vocab_model), "-p", "Once upon a time", "-n", "12", "--temp", "0", "-t", "2")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout and len(a.stdout.strip()) > 0
    assert "prompt: " in a.stderr and "decode: " in a.stderr and "tok/s" in a.stderr


def test_seeded_sampling_repeats(vocab_model):
    a = gen("-m", str(vocab_model), "-p", "Hello", "-n", "16", "--temp", "1.5", "--seed", "7", "--print-ids")
    b = gen("-m", str(vocab_model), "-p", "Hello", "-n", "16", "--temp", "1.5", "--seed", "7", "--print-ids")
    c = gen("-m", str(vocab_model), "-p", "Hello", "-n", "16", "--temp", "1.5", "--seed", "8", "--print-ids")
    assert a.returncode == 0 and a.stdout == b.stdout
    assert a.stdout != c.stdout


def test_token_id_prompt(vocab_model):
    r = gen("-m", str(vocab_model), "--tokens", "1,415,2936", "-n", "4", "--temp", "0", "--print-ids")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip().split(",")) == 4


@pytest.mark.parametrize("args,needle", [
    (["-p", "x", "--tokens", "1"], "exactly one"),
    (["--tokens", "1,99999999"], "not a token id"),
    (["--tokens", "1,abc"], "not a token id"),
    (["-p", "x", "--temp", "-1"], "--temp"),
    (["-p", "x", "--top-p", "0"], "--top-p"),
    (["-p", "x", "-n", "nan"], "-n"),
    (["-p", "x", "--bogus"], "unrecognized option"),
    (["-p", "x", "-n", "100000000"], "-n"),
    (["-p", "x", "--device", "tpu"], "--device expects auto, cpu or cuda"),
])
def test_bad_arguments(vocab_model, args, needle):
    r = gen("-m", str(vocab_model), *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


@pytest.mark.parametrize("content,needle", [
    (b"", "too short"),
    (b"NOPE" + bytes(100), "bad magic"),
    (b"GGUF" + (9).to_bytes(4, "little") + bytes(16), "unsupported GGUF version 9"),
])
def test_bad_model_files(tmp_path, content, needle):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    r = gen("-m", str(p), "-p", "x")
    assert r.returncode == 2
    assert needle in r.stderr and str(p) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_model_file(tmp_path):
    r = gen("-m", str(tmp_path / "none.gguf"), "-p", "x")
    assert r.returncode == 2 and "cannot open" in r.stderr


def test_truncated_model_every_cut_fails_cleanly(vocab_model, tmp_path):
    data = vocab_model.read_bytes()
    for cut in [24, 100, 1000, 50_000, len(data) // 2, len(data) - 1]:
        p = tmp_path / f"cut{cut}.gguf"
        p.write_bytes(data[:cut])
        r = gen("-m", str(p), "-p", "x")
        assert r.returncode == 2, (cut, r.stderr)
        assert r.stderr.startswith("sluice generate: ")


def test_missing_tensor_is_named(vocab_model, tmp_path):
    data = bytearray(vocab_model.read_bytes())
    i = data.find(b"blk.1.ffn_up.weight")
    data[i:i + 5] = b"blk.X"
    p = tmp_path / "renamed.gguf"
    p.write_bytes(bytes(data))
    r = gen("-m", str(p), "-p", "x")
    assert r.returncode == 2 and "missing tensor 'blk.1.ffn_up.weight'" in r.stderr
