"""deploy/container/Containerfile, checked without a container engine (none
can build or run images on the test machines: docs/OPERATIONS.md,
Deployment): every COPY source is in the repository, the runtime stage runs
as a numeric non-root user with EXPOSE, STOPSIGNAL SIGTERM, a HEALTHCHECK on
/health and --host 0.0.0.0, its entry point is where `cmake --install` puts
the binary, its packages exist in Debian 12 and cover what the binary links,
and the HEALTHCHECK command itself tells a live /health from a dead port."""
import json
import os
import re
import shlex
import shutil
import socket
import subprocess

import pytest

from deploy_files import DEFAULT_MODEL
from paths import REPO, SLUICE
from serve import Server

CONTAINERFILE = REPO / "deploy" / "container" / "Containerfile"
INSTALL_PREFIX = "/opt/sluice"


def instructions():
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in CONTAINERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Containerfile ends in a continuation"
    return out


def stages():
    """The stages as lists of instructions, and the ARG defaults (global and
    per stage, later ones win) with which to expand ${NAME}."""
    result, args = [], {}
    for word, rest in instructions():
        if word == "FROM":
            result.append([])
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
        if result:
            result[-1].append((word, rest))
    return result, args


def expand(text, args):
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)


def runtime_stage():
    st, args = stages()
    assert len(st) >= 2, "a build stage and a runtime stage"
    return {w: [r for ww, r in st[-1] if ww == w] for w in {w for w, _ in st[-1]}}, args


def runtime_debs():
    stage, args = runtime_stage()
    installs = [expand(r, args) for r in stage["RUN"] if "apt-get install" in r]
    assert len(installs) == 1, installs
    words = installs[0].split("apt-get install", 1)[1].split("&&")[0].split()
    return [w for w in words if not w.startswith("-")]


def test_copy_sources_exist_in_the_repository():
    copies = [rest for st in stages()[0] for word, rest in st if word == "COPY"]
    assert copies
    for rest in copies:
        parts = shlex.split(rest)
        if any(p.startswith("--from=") for p in parts):
            continue
        for src in [p for p in parts if not p.startswith("--")][:-1]:
            assert (REPO / src).exists(), f"COPY {src}: not in the repository"


def test_every_build_input_is_copied():
    # the folders the top-level CMakeLists.txt adds (tests/ aside: the image builds with SLUICE_TESTS=OFF)
    copied = {shlex.split(rest)[0].rstrip("/") for st in stages()[0] for word, rest in st if word == "COPY"}
    top = (REPO / "CMakeLists.txt").read_text()
    for sub in re.findall(r"^add_subdirectory\(([\w-]+)\)", top, re.M):
        assert sub in copied, f"add_subdirectory({sub}) but no COPY {sub}/"
    assert "models/default" in copied and "cmake" in copied


def test_runtime_stage_runs_unprivileged_with_health_and_drain():
    stage, _ = runtime_stage()
    user = stage["USER"][0].split(":")
    assert user[0].isdigit() and int(user[0]) != 0, "numeric, not root (runAsNonRoot checks a number)"
    assert "8080" in stage["EXPOSE"][0].split()
    assert stage["STOPSIGNAL"] == ["SIGTERM"]
    assert "/health" in stage["HEALTHCHECK"][0] and "8080" in stage["HEALTHCHECK"][0]
    entry = json.loads(stage["ENTRYPOINT"][0])
    cmd = json.loads(stage["CMD"][0])
    assert entry == [f"{INSTALL_PREFIX}/bin/sluice", "serve"]
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--port") + 1] == "8080"
    copies = [shlex.split(r) for r in stage["COPY"]]
    assert ["--from=build", INSTALL_PREFIX, INSTALL_PREFIX] in copies
    build_runs = " ".join(r for word, r in stages()[0][0] if word == "RUN")
    assert f"cmake --install build --prefix {INSTALL_PREFIX}" in build_runs
    assert "tools/setup.sh --serve-only" in build_runs


def test_runtime_packages_exist_in_debian():
    if shutil.which("apt-cache") is None:
        pytest.skip("no apt-cache (not a Debian machine)")
    for deb in runtime_debs():
        r = subprocess.run(["apt-cache", "show", "--no-all-versions", deb], capture_output=True, text=True,
                           timeout=20)
        assert r.returncode == 0 and f"Package: {deb}" in r.stdout, f"{deb}: not a Debian package here"


def test_runtime_packages_cover_what_the_binary_links():
    if shutil.which("dpkg") is None or shutil.which("apt-cache") is None or shutil.which("ldd") is None:
        pytest.skip("needs dpkg, apt-cache and ldd")
    debs = runtime_debs()
    # the runtime packages and what they pull in, one level down
    have = set(debs) | {"libc6"}
    r = subprocess.run(["apt-cache", "depends", "--no-recommends", "--no-suggests", *debs], capture_output=True,
                       text=True, timeout=20)
    have |= {m.group(1).split(":")[0] for m in re.finditer(r"^\s+\|?Depends: <?([\w.+:-]+)>?", r.stdout, re.M)}
    ldd = subprocess.run(["ldd", SLUICE], capture_output=True, text=True, timeout=20).stdout
    if re.search(r"lib[at]san\.so", ldd):
        pytest.skip(f"{SLUICE} is a sanitizer build: the image holds a release build")
    for lib in re.findall(r"=> (/\S+)", ldd):
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True, text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
        assert owner.returncode == 0, f"{lib}: no Debian package owns it"
        pkg = owner.stdout.split(":")[0]
        assert pkg in have, f"{SLUICE} links {lib} from {pkg}, which the runtime stage does not install"


def healthcheck(port):
    """Runs the HEALTHCHECK's command with the port substituted."""
    stage, _ = runtime_stage()
    argv = json.loads(stage["HEALTHCHECK"][0].split("CMD", 1)[1])
    argv = [a.replace("127.0.0.1/8080", f"127.0.0.1/{port}") for a in argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10).returncode


def test_healthcheck_command_tells_live_from_dead(tmp_path):
    s = Server(DEFAULT_MODEL, tmp_path, frontends=1)
    try:
        assert healthcheck(s.port) == 0
    finally:
        s.stop()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    assert healthcheck(dead) != 0
