"""Where things are, for every Python test: the repository, the team test
data beside it, and the build under test (SLUICE_BUILD_DIR, default build/)."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTDATA = REPO.parent / "shared" / "testdata"
BUILD = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", REPO / "build"))
SLUICE = str(BUILD / "sluice")


def tool(name):
    """Path of a tools/ executable of the build under test."""
    path = BUILD / "tools" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build the project first (tools/setup.sh)")
    return str(path)
