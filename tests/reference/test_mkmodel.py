"""mkmodel's --branch-scale: the default writes the same bytes as an explicit
1, a scale changes exactly the two residual-branch matrices (attn_output,
ffn_down) by that factor, and a value that is not a positive number is a
clear exit 2."""
import subprocess

import numpy as np
import pytest

from paths import tool

gguf = pytest.importorskip("gguf")


def make(tmp_path, name, *extra):
    path = tmp_path / name
    subprocess.run([tool("mkmodel"), "-o", str(path), "--preset", "tiny-llama", "--type", "F32", "--n-vocab", "256",
                    "--threads", "1", *extra], check=True, capture_output=True)
    return path


def tensors(path):
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(str(path)).tensors}


def test_branch_scale_scales_only_the_residual_branches(tmp_path):
    base, one, half = make(tmp_path, "a.gguf"), make(tmp_path, "b.gguf", "--branch-scale", "1"), \
        make(tmp_path, "c.gguf", "--branch-scale", "0.5")
    assert base.read_bytes() == one.read_bytes()
    a, c = tensors(base), tensors(half)
    assert a.keys() == c.keys()
    scaled = [n for n in a if n.endswith(("attn_output.weight", "ffn_down.weight"))]
    assert scaled
    for n in a:
        if n in scaled:   # the same draws, times 0.5 (exact in binary)
            np.testing.assert_array_equal(c[n], a[n] * np.float32(0.5))
        else:
            np.testing.assert_array_equal(c[n], a[n])


@pytest.mark.parametrize("value", ["0", "-1", "abc", "", "nan", "inf"])
def test_branch_scale_refuses_bad_values(tmp_path, value):
    r = subprocess.run([tool("mkmodel"), "-o", str(tmp_path / "x.gguf"), "--n-vocab", "256", "--branch-scale", value],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "--branch-scale" in r.stderr
    assert not (tmp_path / "x.gguf").exists()
