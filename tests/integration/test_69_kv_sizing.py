"""The KV pool sized per backend: on the CPU, what max-seqs sequences of the
full context need, at most half the memory available to the process
(MemAvailable, or a cgroup's memory.max - memory.current: a fake tree under
SLUICE_CGROUP_ROOT here); --kv-memory wins; effective-config names the bound
and its inputs, and the max_seqs the scheduler runs with. --kv-type and
--gpu-memory-fraction are validated at config time, and a K/V type the CPU
does not store stops startup with the backend's reason."""
import os
import re
import subprocess

import pytest

from paths import BUILD, REPO, SLUICE
from serve import Server

DEFAULT = REPO / "models/default/sluice-default-q8_0.gguf"
MIB = 1 << 20

pytestmark = pytest.mark.skipif(not DEFAULT.exists(), reason="models/default is not there")

# Server passes --kv-memory 256M; a later 0 takes it back to "sized per backend".
UNSIZED = ["--device", "cpu", "--kv-memory", "0"]


def ready_line(s):
    m = re.search(r"sluice worker: ready: .* (\d+) KV blocks \((\d+) MiB of (\w+), bound: (\w+)\), \d+ threads, "
                  r"up to (\d+) sequences \(([\w-]+)\)", s.log_path.read_text())
    assert m, s.log_path.read_text()
    return {"blocks": int(m[1]), "mib": int(m[2]), "type": m[3], "bound": m[4], "max_seqs": int(m[5]),
            "source": m[6]}


def worker_config(s):
    return s.admin("effective-config")["worker"]


def serve_fails(args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([SLUICE, "serve", "-m", str(DEFAULT), "--port", "0", "--frontends", "1", "--threads", "1",
                           "--drain-delay", "0", *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_cpu_pool_is_the_workload_need_without_a_flag(tmp_path, device):
    if device == "auto" and (BUILD / "libsluice_cuda.so").exists():
        pytest.skip("auto may pick the CUDA backend")
    s = Server(DEFAULT, tmp_path, frontends=1, extra=[*UNSIZED, "--device", device])
    try:
        w = worker_config(s)
        k, line = w["kv_sizing"], ready_line(s)
        inp = k["inputs"]
        assert k["bound"] == "workload", k
        # the need: the max-seqs ceiling (256, unset) times one full-context sequence
        assert inp["need_bytes"] == 256 * inp["min_bytes"]
        assert inp["min_bytes"] == -(-w["n_ctx"] // 16) * inp["block_bytes"]
        assert k["bytes"] == inp["need_bytes"] == w["kv_bytes"]
        assert k["blocks"] == w["kv_blocks"]["value"] == w["kv_blocks_total"] == line["blocks"]
        assert k["bytes"] <= inp["host_fraction"] * inp["mem_available"]
        assert inp["kv_memory"] == 0 and inp["host_fraction"] == 0.5
        assert w["kv_type"] == {"value": "f32", "source": "default"}
        # max_seqs as the scheduler runs it: derived from the blocks, said so
        assert w["max_seqs"] == {"value": line["max_seqs"], "source": "computed"} == w["max_in_flight"]
        assert line["source"] == "computed" and line["bound"] == "workload" and line["type"] == "f32"
        assert s.get("/ready")[0] == 200
    finally:
        s.stop()


def test_set_max_seqs_sizes_the_need_and_keeps_its_source(tmp_path):
    s = Server(DEFAULT, tmp_path, frontends=1, extra=[*UNSIZED, "--max-seqs", "16"])
    try:
        w = worker_config(s)
        k = w["kv_sizing"]
        assert k["bound"] == "workload"
        assert k["bytes"] == 16 * k["inputs"]["min_bytes"] < 100 * MIB
        assert w["max_seqs"] == {"value": 16, "source": "flag"} == w["max_in_flight"]
        assert ready_line(s)["source"] == "flag"
    finally:
        s.stop()


def test_kv_memory_wins(tmp_path):
    s = Server(DEFAULT, tmp_path, frontends=1, extra=["--device", "cpu", "--kv-memory", "64M"])
    try:
        w = worker_config(s)
        k = w["kv_sizing"]
        assert k["bound"] == "flag" and k["inputs"]["kv_memory"] == 64 * MIB
        assert k["blocks"] == 64 * MIB // k["block_bytes"]
        line = ready_line(s)
        assert line["bound"] == "flag" and line["blocks"] == k["blocks"]
        # fewer blocks than 256 full sequences: max_seqs is derived from them
        assert w["max_seqs"]["source"] == "computed"
        assert w["max_seqs"]["value"] == line["max_seqs"] < 256
    finally:
        s.stop()


def fake_cgroup(tmp_path, limit, usage):
    root = tmp_path / "cgroup"
    root.mkdir()
    # a limit at the root of the tree binds whatever this process's cgroup path is
    (root / "memory.max").write_text(f"{limit}\n")
    (root / "memory.current").write_text(f"{usage}\n")
    return root


def test_a_cgroup_limit_bounds_the_pool(tmp_path):
    root = fake_cgroup(tmp_path, 1 << 40, (1 << 40) - 20 * MIB)   # 20 MiB of headroom
    s = Server(DEFAULT, tmp_path, frontends=1, extra=UNSIZED, env=dict(os.environ, SLUICE_CGROUP_ROOT=str(root)))
    try:
        k = worker_config(s)["kv_sizing"]
        inp = k["inputs"]
        assert k["bound"] == "cgroup", k
        assert inp["cgroup_limit"] == 1 << 40 and inp["cgroup_headroom"] == 20 * MIB
        assert k["blocks"] == 10 * MIB // k["block_bytes"]   # half the headroom
        assert ready_line(s)["bound"] == "cgroup"
    finally:
        s.stop()


def test_a_cgroup_over_its_limit_still_gets_one_sequence(tmp_path):
    root = fake_cgroup(tmp_path, 1000, 5000)
    s = Server(DEFAULT, tmp_path, frontends=1, extra=UNSIZED, env=dict(os.environ, SLUICE_CGROUP_ROOT=str(root)))
    try:
        w = worker_config(s)
        k = w["kv_sizing"]
        assert k["bound"] == "context" and k["inputs"]["cgroup_headroom"] == 0
        assert k["bytes"] == k["inputs"]["min_bytes"]
        assert w["max_seqs"]["value"] >= 1
    finally:
        s.stop()


def test_a_max_cgroup_limit_is_no_limit(tmp_path):
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text("max\n")
    (root / "memory.current").write_text("12345\n")
    s = Server(DEFAULT, tmp_path, frontends=1, extra=UNSIZED, env=dict(os.environ, SLUICE_CGROUP_ROOT=str(root)))
    try:
        k = worker_config(s)["kv_sizing"]
        assert k["bound"] == "workload" and k["inputs"]["cgroup_limit"] is None
    finally:
        s.stop()


def test_kv_type_f32_is_reported_with_its_source(tmp_path):
    s = Server(DEFAULT, tmp_path, frontends=1, extra=["--device", "cpu", "--kv-type", "f32"])
    try:
        ec = s.admin("effective-config")
        assert ec["worker"]["kv_type"] == {"value": "f32", "source": "flag"}
        assert ec["config"]["kv-type"] == {"value": "f32", "source": "flag"}
        assert ec["config"]["gpu-memory-fraction"] == {"value": "0.9", "source": "default"}
    finally:
        s.stop()


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_kv_type_the_cpu_does_not_store_stops_startup(device):
    if device == "auto" and (BUILD / "libsluice_cuda.so").exists():
        pytest.skip("auto may pick the CUDA backend, which stores f16")
    r = serve_fails(["--device", device, "--kv-type", "f16", "--kv-memory", "64M"])
    assert r.returncode == 2, r.stderr
    assert "cpu backend: K/V are stored as f32 only, not f16" in r.stderr
    assert "not restarting (bad config or model)" in r.stderr


def test_a_kv_memory_below_one_sequence_is_a_startup_error():
    r = serve_fails(["--device", "cpu", "--kv-memory", "1M"])
    assert r.returncode == 2, r.stderr
    assert re.search(r"--kv-memory 1048576 bytes holds \d+ KV blocks, but one sequence of the full context "
                     r"needs \d+ \(\d+ bytes\)", r.stderr), r.stderr


@pytest.mark.parametrize("args,env,needle", [
    (["--kv-type", "bogus"], {}, "--kv-type: 'bogus' is not one of auto, f32, f16, q8_0"),
    (["--kv-type", ""], {}, "--kv-type: '' is not one of auto, f32, f16, q8_0"),
    ([], {"SLUICE_KV_TYPE": "q4"}, "--kv-type: 'q4' is not one of auto, f32, f16, q8_0"),
    (["--gpu-memory-fraction", "0"], {}, "--gpu-memory-fraction: '0' is not a fraction in (0, 1]"),
    (["--gpu-memory-fraction", "1.01"], {}, "--gpu-memory-fraction: '1.01' is not a fraction in (0, 1]"),
    (["--gpu-memory-fraction", "-0.5"], {}, "is not a fraction in (0, 1]"),
    (["--gpu-memory-fraction", "nan"], {}, "is not a fraction in (0, 1]"),
    (["--gpu-memory-fraction", "0.9x"], {}, "is not a fraction in (0, 1]"),
    ([], {"SLUICE_GPU_MEMORY_FRACTION": "lots"}, "SLUICE_GPU_MEMORY_FRACTION: 'lots' is not a fraction"),
])
def test_bad_kv_settings_are_config_errors(args, env, needle):
    r = serve_fails(args, env)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


def test_gpu_memory_fraction_parses_and_is_reported(tmp_path):
    s = Server(DEFAULT, tmp_path, frontends=1, extra=["--device", "cpu", "--gpu-memory-fraction", "0.5"],
               env=dict(os.environ, SLUICE_KV_TYPE="auto"))
    try:
        ec = s.admin("effective-config")
        assert ec["config"]["gpu-memory-fraction"] == {"value": "0.5", "source": "flag"}
        assert ec["config"]["kv-type"] == {"value": "auto", "source": "env"}
        assert ec["worker"]["kv_sizing"]["inputs"]["gpu_memory_fraction"] == {"value": 0.5, "source": "flag"}
        assert ec["worker"]["kv_type"] == {"value": "f32", "source": "env"}   # auto, as the CPU resolved it
    finally:
        s.stop()


def test_help_lists_the_kv_flags():
    r = subprocess.run([SLUICE, "serve", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for needle in ("--kv-type", "SLUICE_KV_TYPE", "--gpu-memory-fraction", "default 0.90", "--kv-memory"):
        assert needle in r.stdout
