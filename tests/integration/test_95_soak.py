"""Soak and leak runs, CI-sized (tools/soak.py; docs/RELIABILITY.md has
the full 50,000-request figures): 2,000 mixed requests against the release
build go back to idle with no process's heap growing; a few hundred, with a
worker kill, against the ASan+UBSan build end in a clean SIGTERM exit with no
LeakSanitizer or sanitizer report from any process."""
import json
import os
import subprocess
import sys

import pytest

from paths import REPO, SLUICE

SOAK = REPO / "tools" / "soak.py"
ASAN_SLUICE = REPO / "build-asan" / "sluice"


def soak(tmp_path, *args, env=None, timeout=300):
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, str(SOAK), "--json", str(out), "--log", str(tmp_path / "serve.log"), *args],
                       capture_output=True, text=True, timeout=timeout, env=env)
    print(r.stdout[-4000:], r.stderr[-2000:])
    assert out.exists(), f"soak.py wrote no result (exit {r.returncode}): {r.stderr[-2000:]}"
    return r.returncode, json.loads(out.read_text())


def test_soak_release_goes_back_to_idle_without_growth(tmp_path):
    rc, res = soak(tmp_path, "--sluice", SLUICE, "-n", "2000", "--warmup", "300")
    assert res["problems"] == [] and rc == 0, res["problems"]
    assert res["requests"] == 2000 and all(n > 0 for n in res["by_kind"].values()), res["by_kind"]
    assert res["failures"] == 0
    for name, mem in res["rss_kib"]["end"].items():   # the same bound soak.py applied, restated
        # the worker's also allows the KV blocks it first wrote after the warm-up
        late = res["kv_late_kib"] if name == "worker" else 0
        assert mem["RssAnon"] - res["rss_kib"]["warm"][name]["RssAnon"] <= 2 * 1024 + late, name


@pytest.mark.skipif(not ASAN_SLUICE.exists(), reason="no build-asan (tools/test.sh builds it)")
def test_leak_run_asan_every_process_exits_clean(tmp_path):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")
    rc, res = soak(tmp_path, "--sluice", str(ASAN_SLUICE), "-n", "400", "--warmup", "50", "--bound-mb", "0",
                   "--kill-worker-at", "0.5", "--stop-timeout", "60", env=env)
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert res["worker_killed"], "the worker kill did not happen"
    assert res["exit"] == 0, log[-3000:]
    assert res["sanitizer_reports"] == [], log[-6000:]
    assert "LeakSanitizer" not in log and "runtime error:" not in log
    assert res["problems"] == [] and rc == 0, res["problems"]
    # every front end and the restarted worker ran their leak check and exited 0 (a
    # child that fails LSan exits 23, which the master logs)
    assert "exited with status" not in log, [ln for ln in log.splitlines() if "exited with status" in ln]
