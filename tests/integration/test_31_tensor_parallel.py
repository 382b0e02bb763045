"""`sluice serve --tensor-parallel N`: 1, the default, serves as before and
effective-config reports it; N > 1 is planned against the model
(model/tp_plan.h) and refused with exit 2 either way: with the plan's reason
when the model cannot be split N ways, else because this build drives one
device. Never silently ignored. Values that are no count are refused too."""
import json
import os
import subprocess

import pytest

from paths import SLUICE
from serve import Server

ONE_DEVICE = "tensor parallelism needs {n} GPUs and the NCCL build; this build drives one device"


@pytest.fixture(scope="module")
def model(make_model):
    return make_model("tiny-llama", "Q8_0", n_vocab=1024)   # 4 heads, 2 KV heads


def serve(args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([SLUICE, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=30,
                          env=env)


@pytest.mark.parametrize("extra,source", [([], "default"), (["--tensor-parallel", "1"], "flag")])
def test_one_device_serves_and_is_reported(model, tmp_path, extra, source):
    s = Server(model, tmp_path, frontends=1, extra=extra)
    try:
        assert s.admin("effective-config")["config"]["tensor-parallel"] == {"value": "1", "source": source}
        st, body = s.get("/v1/effective-config")
        assert st == 200
        assert json.loads(body)["frontend"]["sources"]["tensor_parallel"] == source
        assert s.get("/ready")[0] == 200
    finally:
        s.stop()


@pytest.mark.parametrize("n", [2, 4])
def test_a_model_that_splits_is_refused_for_want_of_devices(model, n):
    r = serve(["-m", str(model), "--tensor-parallel", str(n)])
    assert r.returncode == 2, r.stderr
    assert ONE_DEVICE.format(n=n) in r.stderr
    assert "listening" not in r.stderr + r.stdout


def test_the_variable_is_refused_the_same_way(model):
    r = serve(["-m", str(model)], {"SLUICE_TENSOR_PARALLEL": "2"})
    assert r.returncode == 2, r.stderr
    assert ONE_DEVICE.format(n=2) in r.stderr


def test_heads_that_do_not_divide_name_the_reason(model):
    r = serve(["-m", str(model), "--tensor-parallel", "3"])
    assert r.returncode == 2, r.stderr
    assert f"{model} cannot be split 3 ways: n_head 4 is not divisible by --tensor-parallel 3" in r.stderr
    assert "NCCL" not in r.stderr


def test_kv_heads_that_do_not_replicate_evenly_name_the_reason(make_model):
    m = make_model("tiny-llama", "Q8_0", n_vocab=1024, n_head=6, n_head_kv=2, head_dim=32, n_embd=192)
    r = serve(["-m", str(m), "--tensor-parallel", "3"])
    assert r.returncode == 2, r.stderr
    assert "n_head_kv 2 is fewer than --tensor-parallel 3 and does not divide it" in r.stderr


def test_a_split_off_a_block_boundary_names_the_matrix(make_model):
    m = make_model("tiny-llama", "Q4_K", n_vocab=1024)   # 2 heads of 64 per shard: half a Q4_K block
    r = serve(["-m", str(m), "--tensor-parallel", "2"])
    assert r.returncode == 2, r.stderr
    assert "attn_output is Q4_K (blocks of 256): a shard's 128 columns (2 heads of 64)" in r.stderr


@pytest.mark.parametrize("value,needle", [
    ("0", "--tensor-parallel: 0 is out of range [1, 64]"),
    ("-1", "--tensor-parallel: '-1' is not a non-negative integer"),
    ("abc", "--tensor-parallel: 'abc' is not a non-negative integer"),
    ("99999", "--tensor-parallel: 99999 is out of range [1, 64]"),
    ("2x", "--tensor-parallel: '2x' is not a non-negative integer"),
    ("", "--tensor-parallel: '' is not a non-negative integer"),
])
def test_junk_values_are_refused(model, value, needle):
    r = serve(["-m", str(model), "--tensor-parallel", value])
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


def test_help_lists_it():
    r = subprocess.run([SLUICE, "serve", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    sched = r.stdout.split("\nScheduler:\n")[1].split("\n\n")[0]
    assert "--tensor-parallel" in sched and "SLUICE_TENSOR_PARALLEL" in sched
