"""`sluice serve` configuration: flags, SLUICE_* variables, the seed's
variable names and a config file, each value's source in effective-config,
and a clear exit 2 for anything that does not parse."""
import json
import os
import subprocess
import urllib.request

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
    (["--model-alias", "a,,b"], {}, "--model-alias: 'a,,b' has an empty item"),
    ([], {"SLUICE_CORS_ORIGIN": "http://a.test,"}, "SLUICE_CORS_ORIGIN: 'http://a.test,' has an empty item"),
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
    # In groups, in this order, the most used first within each (tests/unit/master checks
    # that every setting is in exactly one).
    heads = [ln[:-1] for ln in r.stdout.splitlines() if ln and not ln.startswith(" ") and ln.endswith(":")]
    assert heads == ["Model", "Server", "Scheduler", "Limits", "Operations", "Debugging"]
    model = r.stdout.split("\nModel:\n")[1].split("\n\n")[0]
    assert model.index("--model V") < model.index("--model-alias V") < model.index("--accept-any-model")


def test_model_names_from_repeated_flags(model, tmp_path):
    """Repeated --model-alias: every name is accepted and listed, the first reported; the
    admin socket and the worker's snapshot show them."""
    s = Server(model, tmp_path, frontends=1, extra=["--model-alias", "main", "--model-alias", "alt,other"])
    try:
        with urllib.request.urlopen(s.base + "/v1/models", timeout=5) as r:
            assert [m["id"] for m in json.load(r)["data"]] == ["main", "alt", "other"]
        req = urllib.request.Request(s.base + "/v1/completions", data=json.dumps(
            {"model": "other", "prompt": "hi", "max_tokens": 2}).encode(), headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.load(r)["model"] == "main"
        ec = s.admin("effective-config")
        assert ec["config"]["model-alias"] == {"value": "main,alt,other", "source": "flag"}
        assert ec["worker"]["model"] == "main"
    finally:
        s.stop()
