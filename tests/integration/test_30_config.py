"""`sluice serve` configuration: flags, SLUICE_* variables, the seed's
variable names and a config file, each value's source in effective-config,
and a clear exit 2 for anything that does not parse."""
import os
import subprocess

import pytest

from paths import SLUICE
from serve import Server


@pytest.fixture(scope="module")
def model(make_model):
    return make_model("tiny-llama", "Q8_0", n_vocab=1024)


def serve_fails(args, env_extra=None, tmp_path=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([SLUICE, "serve", *args], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize("args,env,needle", [
    (["--max-seqs", "abc"], {}, "--max-seqs: 'abc' is not a non-negative integer"),
    (["--max-seqs", "0"], {}, "out of range"),
    (["--port", "70000"], {}, "--port"),
    (["--bogus"], {}, "unknown option '--bogus'"),
    (["--no-port"], {}, "only on/off settings take the no- form"),
    (["--no-prefix-cache=1"], {}, "only on/off settings take the no- form"),
    (["--no-bogus"], {}, "unknown option '--no-bogus'"),
    ([], {"SLUICE_PREFIX_CACHE": "maybe"}, "SLUICE_PREFIX_CACHE"),
    (["--device", "tpu"], {}, "--device"),
    (["--kv-memory", "12Q"], {}, "--kv-memory"),
    (["--metrics-names", "prom"], {}, "--metrics-names: 'prom' is not one of sluice, vllm"),
    ([], {"CUDA_MAX_BATCH": "lots"}, "CUDA_MAX_BATCH: 'lots'"),
    ([], {"SLUICE_BATCH_WINDOW_MS": "-3"}, "SLUICE_BATCH_WINDOW_MS"),
    (["-m", "/nonexistent.gguf"], {}, "/nonexistent.gguf: cannot open"),
])
def test_bad_configuration_is_exit_2(model, args, env, needle):
    r = serve_fails(["-m", str(model), *args] if "-m" not in args else args, env)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


def test_sources_are_reported(model, tmp_path):
    conf = tmp_path / "sluice.conf"
    conf.write_text("# a comment\nprefill-chunk = 64\ntoken-budget = 128\n")
    env = dict(os.environ, CUDA_MAX_BATCH="6", SLUICE_TOKEN_BUDGET="96", STAGGERED_PREFILL="1")
    s = Server(model, tmp_path, frontends=1, extra=["--config", str(conf), "--batch-window-ms", "2"], env=env)
    try:
        ec = s.admin("effective-config")
        cfg, worker = ec["config"], ec["worker"]
        assert cfg["max-seqs"] == {"value": "6", "source": "seed-alias"}
        assert cfg["token-budget"] == {"value": "96", "source": "env"}
        assert cfg["prefill-chunk"] == {"value": "64", "source": "file"}
        assert cfg["batch-window-ms"] == {"value": "2", "source": "flag"}
        assert cfg["staggered-prefill"]["source"] == "seed-alias"
        assert cfg["api-key"]["value"] == ""
        assert worker["max_in_flight"] == {"value": 6, "source": "seed-alias"}
        assert worker["token_budget"] == {"value": 96, "source": "env"}
        assert worker["prefill_chunk_size"] == {"value": 64, "source": "file"}
        assert worker["window_ms"] == {"value": 2, "source": "flag"}
        assert worker["staggered_prefill"]["value"] == 1
        for key in ("kind", "slots_admitted", "admission_ceiling_reason", "in_flight_now", "peak_in_flight",
                    "kv_blocks", "kv_bytes", "backend", "model", "queue_capacity"):
            assert key in worker
        out = subprocess.run([SLUICE, "admin", "--socket", s.admin_path, "effective-config"], capture_output=True,
                             text=True, check=True).stdout
        assert '"seed-alias"' in out
    finally:
        s.stop()


def test_help_is_readable():
    r = subprocess.run([SLUICE, "serve", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for flag in ("--model", "--port", "--frontends", "--api-key", "--max-seqs", "CUDA_MAX_BATCH", "--config"):
        assert flag in r.stdout
