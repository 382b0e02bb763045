"""Reference check of the CUDA backend's weight decoders against the gguf
package, without a GPU.

test_cuda_decode --decode (a SLUICE_CUDA build's host check, built from the
same __host__ __device__ decoders the kernels run) decodes random blocks of
each format in FORMATS; the floats must equal gguf.quants.dequantize's bit
for bit (both compute d*q, then the min, in float32). Random bytes reach every code of every field; the
fp16 scales are set to finite values. Skipped unless SLUICE_BUILD_DIR is a
CUDA build (test_cuda_decode under kernels/cuda/).
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build"))
ROWS = 64  # rows of 256 elements per type

# type: (block bytes as model/ggml_types.c has them, offsets of its fp16 fields)
FORMATS = {
    "Q4_1": (20, (0, 2)), "Q5_0": (22, (0,)), "Q5_1": (24, (0, 2)), "IQ4_NL": (18, (0,)),
    "Q8_1": (36, (0, 2)), "Q2_K": (84, (80, 82)), "Q3_K": (110, (108,)), "IQ4_XS": (136, (0,)),
}


def _decoder():
    p = BUILD / "kernels" / "cuda" / "test_cuda_decode"
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.skip(f"test_cuda_decode not built under {BUILD} (a -DSLUICE_CUDA=ON build)")
    return p


def _random_blocks(name, rng):
    bb, fp16 = FORMATS[name]
    elems = 32 if bb < 84 else 256
    n_blocks = ROWS * 256 // elems
    raw = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    for off in fp16:
        # finite fp16, magnitude 2^-5 .. 2^3, random sign
        sign = rng.integers(0, 2, n_blocks).astype(np.uint16) << 15
        exp = rng.integers(10, 18, n_blocks).astype(np.uint16) << 10
        h = sign | exp | rng.integers(0, 1024, n_blocks).astype(np.uint16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return raw


def _reference(name, raw):
    if name == "Q8_1":
        # gguf has no Q8_1 dequantizer (and sizes it 40 bytes, d and s as
        # float32); the GGUF files hold ggml's 36-byte block: fp16 d, fp16 s
        # (the block's sum), 32 int8; the value is d * q
        d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = raw[:, 4:36].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)
    return gguf.quants.dequantize(raw.reshape(-1), getattr(T, name)).astype(np.float32).reshape(-1)


@pytest.mark.parametrize("name", list(FORMATS))
def test_cuda_decoder_matches_gguf(name, tmp_path):
    exe = _decoder()
    rng = np.random.default_rng(sum(map(ord, name)))
    raw = _random_blocks(name, rng)
    src, dst = tmp_path / "blocks.bin", tmp_path / "floats.bin"
    src.write_bytes(raw.tobytes())
    out = subprocess.run([str(exe), "--decode", name, str(src), str(dst)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    got = np.fromfile(dst, dtype=np.float32)
    ref = _reference(name, raw)
    assert got.shape == ref.shape
    bad = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
    assert bad.size == 0, f"{name}: {bad.size} elements differ, first {bad[:5]}: {got[bad[:5]]} vs {ref[bad[:5]]}"
