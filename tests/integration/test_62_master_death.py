"""The master dies (SIGKILL) or a second instance asks for a port already
served: every child exits within 1 s of the master's death (no orphan front
end keeps the port, answering /health 200 with no one to restart its
worker), the next start of the same configuration succeeds and leaves no
stale segment behind, and a second `sluice serve` on a served port is
refused with exit status 2 while the first keeps serving."""
import glob
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from paths import SLUICE
from serve import Server, wait_for

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid):
    """The pids whose parent is `pid`, from /proc (every thread's list)."""
    out = set()
    for f in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            out.update(int(x) for x in open(f).read().split())
        except OSError:
            pass
    return out


def running(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def post(base, body=CHAT, timeout=30):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Instances:
    """Servers started by a test; teardown kills each one's process group
    (children included, also when the master is already dead) and removes
    every segment and port lock file they made."""

    def __init__(self):
        self.servers, self.pgids, self.segments, self.ports = [], set(), set(), set()

    def start(self, model, tmp_path, port, **kw):
        s = Server(model, tmp_path, extra=("--port", str(port), *kw.pop("extra", ())), **kw)
        self.servers.append(s)
        self.pgids.add(s.proc.pid)
        self.ports.add(port)
        self.segments.add("/dev/shm/" + s.admin("effective-config")["master"]["shm"].lstrip("/"))
        return s

    def close(self):
        for s in self.servers:
            s.stop()
        for g in self.pgids:
            try:
                os.killpg(g, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for path in [*self.segments, *(f"/tmp/sluice-{p}.lock" for p in self.ports)]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


@pytest.fixture
def instances():
    i = Instances()
    yield i
    i.close()


def test_master_sigkill_takes_every_child_and_next_start_is_clean(chat_model, tmp_path, instances):
    port = free_port()
    s = instances.start(chat_model, tmp_path, port, frontends=2)
    worker, fes = s.pids()
    kids = children(s.proc.pid)
    assert kids == {worker, *fes}, (kids, worker, fes)
    segment = "/dev/shm/" + s.admin("effective-config")["master"]["shm"].lstrip("/")
    assert os.path.exists(segment)

    os.kill(s.proc.pid, signal.SIGKILL)
    t0 = time.time()
    gone = wait_for(lambda: not any(running(p) for p in kids), 1.0, step=0.01)
    took = time.time() - t0
    s.proc.wait()
    left = [p for p in kids if running(p)]
    assert gone, f"children still running {took:.2f}s after the master's SIGKILL: {left}"
    print(f"{len(kids)} children gone {took * 1000:.0f} ms after the master's SIGKILL")
    with pytest.raises(OSError):   # nobody is left on the port
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    s2 = instances.start(chat_model, tmp_path, port, frontends=2)
    assert s2.get("/health")[0] == 200 and post(s2.base)[0] == 200
    assert not os.path.exists(segment), f"the dead instance's segment {segment} is still there"
    mine = "/dev/shm/" + s2.admin("effective-config")["master"]["shm"].lstrip("/")
    assert os.path.exists(mine)
    s2.stop()
    assert not os.path.exists(mine)


def test_second_instance_on_a_served_port_exits_2(chat_model, tmp_path, instances):
    port = free_port()
    first = instances.start(chat_model, tmp_path, port, frontends=2)
    other_admin = str(tmp_path / "second.sock")
    try:
        r = subprocess.run([SLUICE, "serve", "-m", str(chat_model), "--port", str(port), "--frontends", "1",
                            "--threads", "1", "--kv-memory", "256M", "--admin-socket", other_admin,
                            "--drain-delay", "0", "--drain-timeout", "2"],
                           capture_output=True, text=True, timeout=20, start_new_session=True)
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:   # it started and served: the split
        code, err = None, (e.stderr or b"").decode()
    finally:
        for p in glob.glob("/proc/[0-9]*/cmdline"):   # a second instance that did start
            try:
                if other_admin.encode() in open(p, "rb").read():
                    pid = int(p.split("/")[2])
                    os.kill(pid, signal.SIGKILL)
                    for seg in glob.glob(f"/dev/shm/sluice-{pid}") + glob.glob(f"/dev/shm/sluice-*-{pid}"):
                        os.unlink(seg)
            except OSError:
                pass
    assert code == 2, f"second instance: exit {code}, stderr {err!r}"
    assert f"port {port}" in err and "already" in err, err
    assert not os.path.exists(other_admin)
    # the first keeps serving, every connection its own
    for _ in range(8):
        assert post(first.base)[0] == 200
    assert first.admin("health")["status"] == "ok"


def test_restart_after_drain_on_the_same_port(chat_model, tmp_path, instances):
    """The port lock goes with the master: a clean stop frees it at once."""
    port = free_port()
    s = instances.start(chat_model, tmp_path, port, frontends=1)
    s.stop()
    s2 = instances.start(chat_model, tmp_path, port, frontends=1)
    assert post(s2.base)[0] == 200
