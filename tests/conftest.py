"""Session fixtures shared by the reference and integration tests."""
import subprocess

import pytest

from paths import tool


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def make_model(model_dir):
    """make_model(preset, type, **opts) -> path of a model written by mkmodel
    once per session (opts become --flags: n_vocab=1024 -> --n-vocab 1024)."""
    cache = {}

    def make(preset, qtype, **opts):
        key = (preset, qtype, tuple(sorted(opts.items())))
        if key not in cache:
            path = model_dir / f"m{len(cache)}-{preset}-{qtype}.gguf"
            cmd = [tool("mkmodel"), "-o", str(path), "--preset", preset, "--type", qtype]
            for k, v in opts.items():
                cmd += [f"--{k.replace('_', '-')}", str(v)]
            subprocess.run(cmd, check=True)
            cache[key] = path
        return cache[key]

    return make
