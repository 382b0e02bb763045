"""Hostile admin clients cannot hold the master: a client that dribbles its
command line a byte at a time does not delay a worker restart, a crowd of
silent connections does not keep `sluice admin health` out, and
`--admin-socket` naming something that is not a stale socket is refused
(exit 2) and left as it was."""
import os
import socket
import stat
import subprocess
import threading
import time

import pytest

from paths import SLUICE
from serve import Server, wait_for


@pytest.fixture
def server(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1)
    yield s
    s.stop()


def dribble(path, stop, per_byte=0.5):
    """Sends 'h' bytes, never a newline, until stop is set or the master closes."""
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        while not stop.is_set():
            s.send(b"h")
            time.sleep(per_byte)
    except OSError:
        pass
    finally:
        s.close()


def ready_after_worker_kill(server, worker):
    """Seconds from SIGKILL of the worker until /ready is 200 again (asked
    of the front end: the admin socket may be the thing under test)."""
    os.kill(worker, 9)
    t0 = time.time()
    assert wait_for(lambda: server.get("/ready", timeout=1)[0] != 200, 10, step=0.01)
    assert wait_for(lambda: server.get("/ready", timeout=1)[0] == 200, 60, step=0.02)
    return time.time() - t0


def test_dribbling_client_does_not_delay_a_worker_restart(server):
    usual = ready_after_worker_kill(server, server.pids()[0])
    worker = server.pids()[0]
    stop = threading.Event()
    threads = [threading.Thread(target=dribble, args=(server.admin_path, stop), daemon=True) for _ in range(3)]
    try:
        for t in threads:
            t.start()
            time.sleep(0.3)
        time.sleep(0.5)   # the master is now reading from them
        took = ready_after_worker_kill(server, worker)
        t0 = time.time()
        health = server.admin("health")
        answered = time.time() - t0
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert took < usual + 1.5, f"restart took {took:.2f}s with dribbling clients, {usual:.2f}s without"
    print(f"worker restart: /ready back {took:.2f}s after the kill with 3 dribbling admin clients, "
          f"{usual:.2f}s without; health answered in {answered * 1000:.0f} ms")
    assert health["status"] == "ok" and answered < 0.5, answered
    assert server.admin("effective-config")["master"]["worker"]["restarts"] == 2


def test_silent_connections_do_not_block_admin_health(server):
    silent = []
    try:
        for _ in range(40):
            s = socket.socket(socket.AF_UNIX)
            s.setblocking(False)
            try:
                s.connect(server.admin_path)
            except BlockingIOError:
                pass   # the backlog is full: still one more waiting client
            silent.append(s)
        for _ in range(3):
            t0 = time.time()
            r = subprocess.run([SLUICE, "admin", "--socket", server.admin_path, "health"], capture_output=True,
                               text=True, timeout=10)
            took = time.time() - t0
            assert r.returncode == 0 and '"status": "ok"' in r.stdout, (r.returncode, r.stdout, r.stderr)
            assert took < 1.0, f"sluice admin health took {took:.2f}s behind 40 silent connections"
            print(f"sluice admin health behind 40 silent connections: {took * 1000:.0f} ms")
    finally:
        for s in silent:
            s.close()


def test_silent_client_is_closed_after_its_deadline(server):
    s = socket.socket(socket.AF_UNIX)
    s.connect(server.admin_path)
    s.settimeout(10)
    t0 = time.time()
    data = s.recv(4096)   # an error document or EOF, at the deadline
    took = time.time() - t0
    s.close()
    assert 1.5 < took < 4, took
    assert data in (b"",) or b"error" in data, data


def serve_with_admin(model, path, port_extra=()):
    return subprocess.run([SLUICE, "serve", "-m", str(model), "--port", "0", "--frontends", "1", "--threads", "1",
                           "--kv-memory", "256M", "--admin-socket", str(path), *port_extra],
                          capture_output=True, text=True, timeout=30)


def test_admin_socket_at_a_regular_file_is_refused(chat_model, tmp_path):
    f = tmp_path / "precious.txt"
    f.write_text("keep me\n")
    r = serve_with_admin(chat_model, f)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "not a socket" in r.stderr and str(f) in r.stderr, r.stderr
    assert f.read_text() == "keep me\n"


def test_admin_socket_at_a_directory_or_symlink_is_refused(chat_model, tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    r = serve_with_admin(chat_model, d)
    assert r.returncode == 2 and "not a socket" in r.stderr, r.stderr
    assert d.is_dir()
    target = tmp_path / "target.txt"
    target.write_text("x")
    link = tmp_path / "link.sock"
    link.symlink_to(target)
    r = serve_with_admin(chat_model, link)
    assert r.returncode == 2 and "not a socket" in r.stderr, r.stderr
    assert link.is_symlink() and target.read_text() == "x"


def test_admin_socket_in_use_is_refused_and_a_stale_one_replaced(chat_model, tmp_path, server):
    r = serve_with_admin(chat_model, server.admin_path)
    assert r.returncode == 2 and "in use" in r.stderr, r.stderr
    assert server.admin("health")["status"] == "ok"
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()   # the file stays, nobody listens
    assert stat.S_ISSOCK(os.lstat(stale).st_mode)
    s2 = Server(chat_model, tmp_path, frontends=1, extra=("--admin-socket", str(stale)))
    try:
        s2.admin_path = str(stale)
        assert s2.admin("health")["status"] == "ok"
    finally:
        s2.stop()
