"""Where things are, for every Python test and tool: the repository, its test
data (tests/data, read through data_path()), the build under test
(SLUICE_BUILD_DIR, default build/) and the real-model cache."""
import hashlib
import lzma
import os
import pathlib
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTDATA = REPO / "tests" / "data"
BUILD = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", REPO / "build"))
SLUICE = str(BUILD / "sluice")
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "sluice" / "testdata"
# The user's model cache (tools/fetch-models.py), read before tests/conftest.py
# points SLUICE_MODEL_CACHE at an empty folder for everything the tests start.
MODEL_CACHE = pathlib.Path(os.environ.get("SLUICE_MODEL_CACHE") or
                           pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
                           / "sluice" / "models")


def data_path(rel):
    """Path of the plain file tests/data/<rel>, for reading only. A file kept
    there as-is is returned in place; one kept as <rel>.xz is expanded once
    into CACHE/<hash of the .xz bytes>/, so a changed file gets a new entry
    and a stale one is never read. Each writer expands into its own temporary
    file and renames it into place, so processes racing on the same entry
    all end up with the complete file. Raises FileNotFoundError when neither
    exists."""
    src = TESTDATA / rel
    if src.is_file():
        return src
    packed = src.with_name(src.name + ".xz")
    if not packed.is_file():
        raise FileNotFoundError(f"{src} (or {packed.name}) is not in tests/data")
    data = packed.read_bytes()
    out = CACHE / hashlib.sha256(data).hexdigest()[:24] / src.name
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{src.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lzma.decompress(data))
            os.replace(tmp, out)
        except BaseException:
            os.unlink(tmp)
            raise
    return out


def tokenizer_names():
    """The tokenizer sets in tests/data/tokenizers, sorted."""
    return sorted(p.name for p in (TESTDATA / "tokenizers").iterdir() if p.is_dir())


def tool(name):
    """Path of a tools/ executable of the build under test."""
    import pytest

    path = BUILD / "tools" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build the project first (tools/setup.sh)")
    return str(path)
