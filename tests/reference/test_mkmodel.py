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


@pytest.mark.parametrize("qtype,file_type", [("Q2_K", 10), ("Q3_K", 11), ("IQ4_XS", 30), ("TQ1_0", 36),
                                             ("TQ2_0", 37)])
def test_low_bit_types_write_every_matrix_in_the_type(tmp_path, qtype, file_type):
    path = tmp_path / f"{qtype}.gguf"
    subprocess.run([tool("mkmodel"), "-o", str(path), "--preset", "tiny-llama", "--type", qtype, "--n-vocab", "256",
                    "--threads", "1"], check=True, capture_output=True)
    r = gguf.GGUFReader(str(path))
    kinds = {t.tensor_type.name for t in r.tensors if len(t.shape) == 2}
    assert kinds == {qtype}
    assert int(r.fields["general.file_type"].parts[-1][0]) == file_type


@pytest.mark.parametrize("qtype", ["IQ3_S", "IQ1_S", "IQ1_M"])
def test_grid_types_have_no_writer(tmp_path, qtype):
    """IQ1/IQ2/IQ3 grids are read-only (llama.cpp needs an importance matrix)."""
    r = subprocess.run([tool("mkmodel"), "-o", str(tmp_path / "x.gguf"), "--n-vocab", "256", "--type", qtype],
                       capture_output=True, text=True)
    assert r.returncode == 2 and f"unknown type '{qtype}'" in r.stderr
