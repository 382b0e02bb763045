"""tools/kernellab, the CPU matmul A/B of docs/PERF.md: the engine's two ways
of handing weight rows to the 8-bit dot kernels (row by row, four-row register
tiles) give bitwise the same outputs on every tiled type and on shapes with
leftover rows and tokens, and every bad argument is a usage error (exit 2)."""
import subprocess

import pytest

from paths import tool


def run(*args):
    return subprocess.run([tool("kernellab"), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q5_0"])
def test_tiles_are_bitwise_the_row_by_row_path(qtype):
    # 38 rows: two tasks of 16 and one of 6 (a tile and two leftover rows);
    # 37 tokens: two tiles of 16 and one of 5 (an odd tail)
    r = run("--type", qtype, "--rows", "38", "--cols", "768", "--tokens", "37", "--reps", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs bitwise equal" in r.stdout and f"kernellab {qtype} 38 x 768" in r.stdout


@pytest.mark.parametrize("args", [
    ["--type", "F32"], ["--type", "Q9_9"], ["--rows", "0"], ["--rows", "12x"], ["--tokens", "65537"],
    ["--cols", "100"], ["--type", "Q4_K", "--cols", "288"], ["--rows", "65536", "--cols", "8192"],
    ["--reps"], ["--bogus", "1"],
])
def test_bad_arguments_are_usage_errors(args):
    r = run(*args)
    assert r.returncode == 2 and "usage: kernellab" in r.stderr, (args, r.stdout, r.stderr)


def test_a_type_without_a_quantizer_is_a_clear_error():
    r = run("--type", "IQ2_XXS", "--rows", "16", "--cols", "256", "--tokens", "2", "--reps", "1")
    assert r.returncode == 2 and "no quantizer for IQ2_XXS" in r.stderr, r.stderr
