"""Shared fixtures for the reference tests: paths to the repo, the team test
data beside it, the release build, and a session-wide model cache written by
mkmodel."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTDATA = REPO.parent / "shared" / "testdata"
BUILD = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", REPO / "build"))


def tool(name):
    path = BUILD / "tools" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build the project first (tools/setup.sh)")
    return str(path)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def make_model(model_dir):
    """make_model(preset, type, **opts) -> path of a cached mkmodel file."""
    cache = {}

    def make(preset, qtype, **opts):
        key = (preset, qtype, tuple(sorted(opts.items())))
        if key not in cache:
            name = f"{preset}-{qtype}-{abs(hash(key[2])) % 10**8}.gguf"
            path = model_dir / name
            cmd = [tool("mkmodel"), "-o", str(path), "--preset", preset, "--type", qtype]
            for k, v in opts.items():
                cmd += [f"--{k.replace('_', '-')}", str(v)]
            subprocess.run(cmd, check=True)
            cache[key] = path
        return cache[key]

    return make
