"""`sluice generate --grammar FILE`: the output follows the GBNF grammar in
FILE (greedy and sampled, with and without --ignore-eos) and stops when the
grammar is complete; a bad grammar or a missing file is exit code 2 with a
message naming it."""
import re
import subprocess

import pytest

from paths import SLUICE, data_path


@pytest.fixture(scope="module")
def vocab_model(make_model):
    return make_model("tiny-llama", "Q4_K", tokenizer=str(data_path("tokenizers/mistral/tokenizer.json")), peak=8)


def gen(*args):
    return subprocess.run([SLUICE, "generate", *args], capture_output=True, text=True, timeout=60)


def run_grammar(model, tmp_path, grammar, *args):
    path = tmp_path / "g.gbnf"
    path.write_text(grammar)
    r = gen("-m", str(model), "-p", "Once upon a time", "-t", "1", "--grammar", str(path), *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("\n")
    return r.stdout[:-1]


JSON_GRAMMAR = r'''
root   ::= "{" ws pair ("," ws pair)* ws "}"
pair   ::= string ws ":" ws value
string ::= "\"" [a-z]{1,8} "\""
value  ::= [0-9]{1,4} | "true" | "false" | string
ws     ::= " "?
'''
JSON_RE = r'\{ ?"[a-z]{1,8}" ?: ?([0-9]{1,4}|true|false|"[a-z]{1,8}")(, ?"[a-z]{1,8}" ?: ?([0-9]{1,4}|true|false|"[a-z]{1,8}"))* ?\}'

CASES = [
    ('root ::= "yes" | "no"', r"yes|no"),
    ("root ::= [0-9]{1,5}", r"[0-9]{1,5}"),
    (JSON_GRAMMAR, JSON_RE),
]


@pytest.mark.parametrize("grammar,pattern", CASES, ids=["yes-no", "digits", "json"])
@pytest.mark.parametrize("sampling", [["--temp", "0"], ["--temp", "1", "--seed", "3"], ["--temp", "1.5", "--seed", "11", "--top-k", "0", "--top-p", "1", "--min-p", "0"]],
                         ids=["greedy", "seeded", "hot"])
def test_output_matches_the_grammar(vocab_model, tmp_path, grammar, pattern, sampling):
    out = run_grammar(vocab_model, tmp_path, grammar, "-n", "200", *sampling)
    assert re.fullmatch(pattern, out), repr(out)


def test_ignore_eos_runs_until_the_grammar_is_complete(vocab_model, tmp_path):
    for seed in range(4):
        out = run_grammar(vocab_model, tmp_path, "root ::= [0-9]{5}", "-n", "100", "--ignore-eos",
                          "--temp", "1", "--seed", str(seed))
        assert re.fullmatch(r"[0-9]{5}", out), repr(out)


def test_many_seeds_stay_inside_yes_no(vocab_model, tmp_path):
    for seed in range(6):
        out = run_grammar(vocab_model, tmp_path, 'root ::= "yes" | "no"', "-n", "50", "--temp", "2",
                          "--seed", str(seed), "--top-k", "0", "--top-p", "1", "--min-p", "0")
        assert out in ("yes", "no"), repr(out)


@pytest.mark.parametrize("grammar,needle", [
    ('root ::= "unterminated', "grammar: "),
    ("root ::= missing_rule", "grammar: "),
    ("", "grammar: "),
])
def test_bad_grammar_is_refused(vocab_model, tmp_path, grammar, needle):
    path = tmp_path / "bad.gbnf"
    path.write_text(grammar)
    r = gen("-m", str(vocab_model), "-p", "x", "--grammar", str(path))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


def test_missing_grammar_file(vocab_model, tmp_path):
    r = gen("-m", str(vocab_model), "-p", "x", "--grammar", str(tmp_path / "nope.gbnf"))
    assert r.returncode == 2
    assert "--grammar" in r.stderr and "No such file" in r.stderr
