"""Supervision details: a restart is counted once (/metrics and `sluice
admin stats` agree, a worker kill moves the counter by exactly 1, a front-end
kill likewise); with --port 0 the default admin socket is named after the
port the kernel chose; SIGHUP to the whole process group (a closed
terminal) is ignored by the master and every child."""
import glob
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from paths import SLUICE
from serve import Server, wait_for


@pytest.fixture
def server(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=2)
    yield s
    s.stop()


def metric(server, name):
    text = server.get("/metrics")[1].decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\d+)", text, re.M)
    assert m, f"{name} not in /metrics"
    return int(m.group(1))


def counters(server):
    c = server.admin("stats")["counters"]
    return {"worker": c["worker_restarts"], "frontend": c["frontend_restarts"],
            "worker_metric": metric(server, "sluice_worker_restarts_total"),
            "frontend_metric": metric(server, "sluice_frontend_restarts_total")}


def post(base):
    req = urllib.request.Request(base + "/v1/chat/completions",
                                 data=json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": 3}).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def test_one_worker_kill_counts_one_restart(server):
    c0 = counters(server)
    assert c0 == {"worker": 0, "frontend": 0, "worker_metric": 0, "frontend_metric": 0}, c0
    worker, _ = server.pids()
    os.kill(worker, signal.SIGKILL)
    assert wait_for(lambda: server.pids()[0] not in (0, worker), 10)
    server.wait_ready(30)
    c1 = counters(server)
    assert c1["worker"] == 1 and c1["worker_metric"] == 1, c1
    assert c1["frontend"] == 0 and c1["frontend_metric"] == 0, c1
    assert server.admin("effective-config")["master"]["worker"]["restarts"] == 1


def test_one_frontend_kill_counts_one_restart(server):
    _, fes = server.pids()
    os.kill(fes[0], signal.SIGKILL)
    assert wait_for(lambda: server.pids()[1][0] not in (0, fes[0]), 10)
    server.wait_ready(10)
    c1 = counters(server)
    assert c1["frontend"] == 1 and c1["worker"] == 0, c1
    # either front end answers /metrics for the instance
    assert all(metric(server, "sluice_frontend_restarts_total") == 1 for _ in range(6))


def test_port_0_names_the_admin_socket_after_the_real_port(chat_model, tmp_path):
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        p = subprocess.Popen([SLUICE, "serve", "-m", str(chat_model), "--port", "0", "--frontends", "1",
                              "--threads", "1", "--kv-memory", "256M", "--drain-delay", "0"],
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_for(lambda: "listening on" in log.read_text() or p.poll() is not None, 30)
        m = re.search(r"listening on http://[^:]+:(\d+) .*admin socket (\S+)", log.read_text())
        assert m, log.read_text()
        port, path = int(m.group(1)), m.group(2)
        assert path == f"/tmp/sluice-{port}.sock", path
        assert not os.path.exists("/tmp/sluice-0.sock") or path == "/tmp/sluice-0.sock"
        assert wait_for(lambda: subprocess.run([SLUICE, "admin", "--port", str(port), "health"],
                                               capture_output=True).returncode == 0, 10)
        r = subprocess.run([SLUICE, "admin", "--port", str(port), "effective-config"], capture_output=True,
                           text=True, timeout=10)
        cfg = json.loads(r.stdout)["config"]["admin-socket"]["value"]
        assert cfg == path
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for seg in glob.glob(f"/dev/shm/sluice-*-{p.pid}") + glob.glob(f"/dev/shm/sluice-{p.pid}"):
            os.unlink(seg)
    assert not os.path.exists(path)


def test_sighup_to_the_process_group_is_ignored(server):
    worker, fes = server.pids()
    os.killpg(server.proc.pid, signal.SIGHUP)   # start_new_session: the group is the master's
    time.sleep(1.0)
    assert server.proc.poll() is None
    assert server.pids() == (worker, fes), "a child died of SIGHUP and was restarted"
    c = counters(server)
    assert c["worker"] == 0 and c["frontend"] == 0, c
    assert server.get("/health")[0] == 200 and server.get("/ready")[0] == 200
    for _ in range(4):
        assert post(server.base) == 200
    assert "SIGHUP" in server.log_path.read_text()
