"""Loading shows progress: on a terminal (a pty here) `sluice generate`
redraws one line in place with '\\r' (stage, percent, MiB) and ends with the
total time; into a pipe or a log file it writes one line per stage and no
'\\r' at all (the worker of `sluice serve` likewise)."""
import os
import pty
import re
import subprocess

import pytest

from fe_harness import qwen3_model
from paths import SLUICE
from serve import Server


@pytest.fixture(scope="module")
def model(make_model, tmp_path_factory):
    return qwen3_model(make_model, tmp_path_factory)


def run_on_pty(cmd, timeout=60):
    """Runs cmd with stderr on a pty (stdout discarded); returns (rc, bytes written to the pty)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            d = os.read(master, 4096)
        except OSError:          # EIO: the child closed its end
            break
        if not d:
            break
        out += d
    os.close(master)
    return p.wait(timeout), out


def test_generate_on_a_tty_redraws_in_place(model):
    rc, out = run_on_pty([SLUICE, "generate", "-m", str(model), "-p", "Once upon", "-n", "3", "-t", "1"])
    text = out.decode("utf-8", "replace")
    assert rc == 0, text
    assert "\r" in text.replace("\r\n", "")                        # redrawn in place
    assert "sluice generate: opening " + str(model) in text
    assert re.search(r"reading weights \(\d+ MiB\) +100\.0% \(\d+ / \d+ MiB\)", text), text
    assert re.search(r"creating the (auto|cpu) backend", text), text
    assert re.search(r"sluice generate: loaded .* on cpu in \d+\.\d\d s\r?\n", text), text


def test_generate_into_a_pipe_has_one_line_per_stage(model):
    r = subprocess.run([SLUICE, "generate", "-m", str(model), "-p", "Once upon", "-n", "3", "-t", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "\033" not in r.stderr
    lines = r.stderr.splitlines()
    assert re.fullmatch(r"sluice generate: opening .* \(\d+\.\d\d s\)", lines[0]), lines
    assert re.fullmatch(r"sluice generate: reading weights \(\d+ MiB\) \(\d+\.\d\d s\)", lines[1]), lines
    assert re.fullmatch(r"sluice generate: creating the (auto|cpu) backend \(\d+\.\d\d s\)", lines[2]), lines
    assert re.fullmatch(r"sluice generate: loaded .* on cpu in \d+\.\d\d s", lines[3]), lines


def test_failed_load_is_one_error_line_on_a_tty(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(100))
    rc, out = run_on_pty([SLUICE, "generate", "-m", str(bad), "-p", "x"])
    text = out.decode("utf-8", "replace")
    assert rc == 2
    # the in-place line is cleared, so the error stands alone on its line
    last = text.rstrip("\r\n").split("\r\n")[-1].split("\r")[-1]
    assert last.replace("\033[K", "").startswith("sluice generate: ") and "bad magic" in last


def test_serve_worker_log_has_stage_lines_without_cr(model, tmp_path):
    s = Server(model, tmp_path, frontends=1)
    try:
        log = s.log_path.read_text()
    finally:
        s.stop()
    assert "\r" not in log
    assert re.search(r"sluice worker: reading weights \(\d+ MiB\) \(\d+\.\d\d s\)\n", log), log
    assert re.search(r"sluice worker: creating the \w+ backend .*\(\d+\.\d\d s\)\n", log), log
    assert re.search(r"sluice worker: loaded .* in \d+\.\d\d s\n", log), log
