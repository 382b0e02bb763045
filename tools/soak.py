#!/usr/bin/env python3
"""Soak and leak run: many mixed requests against `sluice serve`, then checks
that the server went back to idle and that no process grew.

Starts `sluice serve` itself (the shipped 12M model unless -m; 2 front ends, one
thread, a small KV cache) or drives one already running (--url, with
--admin-socket to read pids and the idle state). The mix: chat and
completions, streaming and not; streams the client abandons after the first
token (the front end must cancel them); malformed JSON and wrong types (must
be 400); tokenize and detokenize. Optionally SIGKILLs the worker partway
(--kill-worker-at): requests in flight then, or sent before it is ready again,
may fail; every other failure counts.

VmRSS, its parts and VmHWM of the master, each front end and the worker are
read twice, both times with the server idle: after the warm-up requests and
at the end. The run fails (exit 1) on any unexpected response, when the
server does not go back to idle (in-flight 0, waiting 0, every KV block and
mailbox free), when a process's RssAnon grew by more than --bound-mb between
the two readings, or when a server it started does not exit 0 on SIGTERM or
logs a sanitizer report.

The bound is on RssAnon (heap, stacks), not VmRSS: VmRSS also counts the
shared segment's pages as each process first touches them (mailboxes are
handed out in turn, so every process's RssShmem climbs by several MiB over
the first ~7,000 requests, then stays flat) and the model's file pages; both
are bounded by their mappings, and a heap leak shows in RssAnon alone. The
default bound, 2 MiB per process, is set from measured runs
(docs/RELIABILITY.md): after the warm-up RssAnon grows by at most
~0.6 MiB, while a 100-byte leak per
request over the default 50,000 requests is 2.5 MB or more in whichever
process leaks (each of two front ends sees 25,000; the worker ~29,000
generating requests). Leaks too small for RSS to show are the leak run's job:
the ASan build under LeakSanitizer (tests/integration/test_95_soak.py).
The worker's bound also allows the KV blocks it first wrote after the
warm-up (the snapshot's kv_blocks_touched, times a block's bytes): the
prefix cache keeps freed blocks, so fresh blocks of the pool keep being
taken, and their pages become resident, until the whole pool has been used.
That growth is bounded by the pool (--kv-memory), and it is not a leak.

Usage: tools/soak.py [-n 50000] [-c 8] [--sluice build/sluice] [-m MODEL]
       [--kill-worker-at 0.5] [--bound-mb 2] [--json OUT]
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[1]

# kind -> weight in the mix
MIX = {"chat": 14, "chat_stream": 14, "completion": 10, "completion_stream": 10, "cancel": 10,
       "bad_json": 8, "bad_type": 10, "tokenize": 12, "detokenize": 12}
GENERATING = {"chat", "chat_stream", "completion", "completion_stream", "cancel"}

BAD_JSON = [b'{"messages": [', b'{"prompt": "x",}', b'not json', b'{"prompt": "\\ud800"}',
            b'{"prompt": "a", "prompt": "b"}', b'[1, 2', b'{"max_tokens": NaN, "prompt": "x"}']
BAD_TYPE = [("/v1/chat/completions", {"messages": "hello"}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": "8"}),
            ("/v1/completions", {"prompt": "x", "temperature": "hot"}),
            ("/v1/completions", {"prompt": "x", "stream": 1}),
            ("/v1/completions", {"prompt": {"a": 1}}),
            ("/v1/completions", {"prompt": "x", "stop": [1, 2]}),
            ("/tokenize", {"content": 17}),
            ("/detokenize", {"tokens": "1,2"})]
WORDS = "the river ran past the old mill where a small boat waited for morning light".split()


class Failure(Exception):
    pass


def proc_mem(pid):
    """VmRSS, VmHWM and VmRSS's parts (RssAnon: heap and stacks, where a leak
    shows; RssFile: the mapped model; RssShmem: the shared segment, whose
    pages count once touched) of a process in KiB, or None when it is gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
        m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
        out[key] = int(m.group(1)) if m else 0
    return out


def admin(path, cmd):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    s.sendall(cmd.encode() + b"\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return json.loads(data)


class Target:
    """The server under test: host/port, admin socket, and (when started
    here) the process and its log."""

    def __init__(self, args):
        self.proc = None
        self.log_path = None
        if args.url:
            u = urllib.parse.urlparse(args.url)
            self.host, self.port = u.hostname, u.port or 80
            self.admin_path = args.admin_socket
            return
        self.tmp = tempfile.mkdtemp(prefix="sluice-soak-")
        self.admin_path = os.path.join(self.tmp, "admin.sock")
        self.log_path = pathlib.Path(args.log or os.path.join(self.tmp, "serve.log"))
        model = args.model or str(pathlib.Path(__file__).resolve().parents[1] / "models/default/sluice-default-q8_0.gguf")
        cmd = [*shlex.split(args.wrap or ""), args.sluice, "serve", "-m", model, "--port", "0",
               "--frontends", str(args.frontends), "--threads", "1", "--kv-memory", args.kv_memory,
               "--admin-socket", self.admin_path, "--drain-delay", "0", "--drain-timeout", "10"]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.host, self.port = "127.0.0.1", None
        deadline = time.time() + args.start_timeout
        while self.port is None:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_path.read_text())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None or time.time() > deadline:
                raise Failure(f"sluice serve did not start: {self.log_path.read_text()[-2000:]}")
            else:
                time.sleep(0.05)
        self.wait_ready(args.start_timeout)

    def get(self, path, timeout=5):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def ready(self):
        try:
            return self.get("/ready", timeout=2)[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout):
        deadline = time.time() + timeout
        while not self.ready():
            if time.time() > deadline:
                raise Failure(f"server not ready within {timeout}s")
            time.sleep(0.05)

    def config(self):
        if self.admin_path:
            return admin(self.admin_path, "effective-config")
        return None

    def stats(self):
        return admin(self.admin_path, "stats") if self.admin_path else None

    def pids(self):
        """{'master': pid, 'frontend0': pid, ..., 'worker': pid}; empty without an admin socket."""
        cfg = self.config()
        if not cfg:
            return {}
        m = cfg["master"]
        out = {"master": m["pid"]}
        for i, p in enumerate(m["frontend_pids"]):
            out[f"frontend{i}"] = p
        out["worker"] = m["worker"]["pid"]
        return out

    def stop(self, timeout):
        """SIGTERM; returns (exit status, sanitizer report lines)."""
        if not self.proc:
            return 0, []
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            rc = "hung (SIGKILL)"
        time.sleep(0.2)   # children print their reports as they exit
        self.log.close()
        text = self.log_path.read_text(errors="replace")
        reports = [ln for ln in text.splitlines()
                   if re.search(r"ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:|SUMMARY: ", ln)]
        return rc, reports


def kv_touched_bytes(t):
    """Bytes of the worker's KV pool it has written so far (0 if unknown)."""
    w = t.config().get("worker") or {}
    total, touched, kv = w.get("kv_blocks_total"), w.get("kv_blocks_touched"), w.get("kv_bytes")
    return touched * kv // total if total and touched is not None and kv else 0


def idle_state(t):
    """(is idle, description) from the admin socket's view."""
    cfg, st = t.config(), t.stats()
    w = cfg.get("worker") or {}
    mb = st.get("mailboxes", {})
    total = sum(v for v in mb.values() if isinstance(v, int))
    parts = {"in_flight": w.get("in_flight_now"), "waiting": w.get("waiting_now"),
             "kv_free": w.get("kv_blocks_free"), "kv_total": w.get("kv_blocks_total"),
             "mailboxes_free": mb.get("free"), "mailboxes_total": total}
    idle = (parts["in_flight"] == 0 and parts["waiting"] in (0, None) and
            parts["kv_free"] == parts["kv_total"] and parts["mailboxes_free"] == total)
    return idle, parts


def wait_idle(t, timeout):
    deadline = time.time() + timeout
    while True:
        idle, parts = idle_state(t)
        if idle or time.time() > deadline:
            return idle, parts
        time.sleep(0.1)


class Client:
    """One load thread's keep-alive connection and request kinds."""

    def __init__(self, host, port, max_tokens, token_ids, timeout):
        self.host, self.port, self.max_tokens, self.token_ids, self.timeout = host, port, max_tokens, token_ids, timeout
        self.conn = None
        self.retries = 0

    def _connect(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def post(self, path, body, stream_reader=None):
        """POSTs on the kept-alive connection (one retry on a fresh one when the
        server had closed an idle connection); returns (status, body bytes)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = self._connect()
            try:
                self.conn.request("POST", path, data, {"content-type": "application/json"})
                r = self.conn.getresponse()
                payload = stream_reader(r) if stream_reader and r.status == 200 else r.read()
                if r.will_close:
                    self.conn.close()
                    self.conn = None
                return r.status, payload
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.conn.close()
                self.conn = None
                if fresh or attempt:
                    raise Failure(f"{type(e).__name__}: {e}") from e
                self.retries += 1
            except Exception:
                self.conn.close()
                self.conn = None
                raise

    def gen_body(self, rng, chat, stream, max_tokens=None):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        body = {"max_tokens": max_tokens or rng.randint(1, self.max_tokens), "temperature": rng.choice([0, 0.7, 1]),
                "seed": rng.randint(0, 1 << 30)}
        if chat:
            body["messages"] = [{"role": "user", "content": words}]
        else:
            body["prompt"] = words
        if stream:
            body["stream"] = True
            if rng.random() < 0.5:
                body["stream_options"] = {"include_usage": True}
        return body

    def run(self, kind, rng):
        """Sends one request of `kind`; raises Failure on a wrong answer."""
        if kind in ("chat", "completion"):
            path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
            status, data = self.post(path, self.gen_body(rng, kind == "chat", False))
            if status != 200:
                raise Failure(f"{status} {data[:200]!r}")
            j = json.loads(data)
            if j["usage"]["completion_tokens"] < 1 or not j["choices"]:
                raise Failure(f"empty answer {data[:200]!r}")
        elif kind in ("chat_stream", "completion_stream"):
            path = "/v1/chat/completions" if kind == "chat_stream" else "/v1/completions"

            def read_events(r):
                events = []
                for line in r:
                    if line.startswith(b"data: "):
                        events.append(line[6:].strip())
                return events
            status, events = self.post(path, self.gen_body(rng, kind == "chat_stream", True), read_events)
            if status != 200:
                raise Failure(f"{status} {events[:200]!r}")
            if not events or events[-1] != b"[DONE]" or any(e.startswith(b'{"error"') for e in events):
                raise Failure(f"stream did not end with [DONE]: {events[-2:]!r}")
        elif kind == "cancel":
            # A fresh connection, closed for real after the first content event.
            body = self.gen_body(rng, rng.random() < 0.5, True, max_tokens=400)
            body["ignore_eos"] = True
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            c = self._connect()
            try:
                c.request("POST", path, json.dumps(body).encode(), {"content-type": "application/json"})
                r = c.getresponse()
                if r.status != 200:
                    raise Failure(f"{r.status} {r.read()[:200]!r}")
                got = b""
                while b'"content":"' not in got and b'"text":"' not in got:
                    line = r.readline()
                    if not line:
                        raise Failure(f"stream ended before any content: {got[-200:]!r}")
                    got += line
                c.sock.shutdown(socket.SHUT_RDWR)
                r.close()
            finally:
                c.close()
        elif kind == "bad_json":
            status, data = self.post(rng.choice(["/v1/chat/completions", "/v1/completions"]), rng.choice(BAD_JSON))
            if status != 400 or b'"error"' not in data:
                raise Failure(f"malformed JSON gave {status} {data[:200]!r}")
        elif kind == "bad_type":
            path, body = rng.choice(BAD_TYPE)
            status, data = self.post(path, body)
            if status != 400 or b'"error"' not in data:
                raise Failure(f"wrong type gave {status} {data[:200]!r}")
        elif kind == "tokenize":
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30)))
            status, data = self.post("/tokenize", {"content": text, "with_pieces": rng.random() < 0.3})
            if status != 200 or "tokens" not in json.loads(data):
                raise Failure(f"{status} {data[:200]!r}")
        elif kind == "detokenize":
            ids = [rng.choice(self.token_ids) for _ in range(rng.randint(0, 30))]
            status, data = self.post("/detokenize", {"tokens": ids})
            if status != 200 or "content" not in json.loads(data):
                raise Failure(f"{status} {data[:200]!r}")
        else:
            raise ValueError(kind)


class Load:
    """Runs request indexes [start, stop) over `concurrency` threads."""

    def __init__(self, t, args, token_ids):
        self.t, self.args, self.token_ids = t, args, token_ids
        rng = random.Random(args.seed)
        kinds, weights = zip(*MIX.items())
        self.schedule = rng.choices(kinds, weights, k=args.requests)
        self.count = {k: 0 for k in MIX}
        self.failures = []          # (kind, start, end, message)
        self.lock = threading.Lock()
        self.done = 0
        self.retries = 0
        self.kill = None            # (time killed, time ready again)

    def phase(self, start, stop):
        idx = iter(range(start, stop))
        threads = [threading.Thread(target=self._thread, args=(idx, n), daemon=True)
                   for n in range(self.args.concurrency)]
        kill_at = int(self.args.kill_worker_at * self.args.requests) if self.args.kill_worker_at else -1
        for th in threads:
            th.start()
        killed = False
        while any(th.is_alive() for th in threads):
            if not killed and start <= kill_at < stop and self.done >= kill_at:
                killed = True
                self._kill_worker()
            time.sleep(0.05)

    def _kill_worker(self):
        pid = self.t.pids()["worker"]
        t0, done = time.time(), self.done
        os.kill(pid, signal.SIGKILL)
        while self.t.pids().get("worker") in (pid, 0):
            time.sleep(0.02)
        self.t.wait_ready(60)
        self.kill = (t0, time.time())
        print(f"killed the worker (pid {pid}) after {done} requests; ready again in "
              f"{self.kill[1] - t0:.2f}s", flush=True)

    def _thread(self, idx, n):
        client = Client(self.t.host, self.t.port, self.args.max_tokens, self.token_ids, self.args.request_timeout)
        rng = random.Random(self.args.seed * 1000 + n)
        while True:
            with self.lock:
                i = next(idx, None)
            if i is None:
                break
            kind = self.schedule[i]
            t0 = time.time()
            try:
                client.run(kind, rng)
            except (Failure, OSError, ValueError, KeyError, http.client.HTTPException) as e:
                with self.lock:
                    self.failures.append((kind, t0, time.time(), f"{type(e).__name__}: {e}"[:300]))
            with self.lock:
                self.count[kind] += 1
                self.done += 1
        with self.lock:
            self.retries += client.retries

    def unexpected(self):
        """Failures not explained by the worker kill: a generating request in
        flight at the kill may fail any way, and any request sent before the
        worker is ready again may get 503 worker_unavailable (the front end
        answers that before it parses the body)."""
        out = []
        for kind, t0, t1, msg in self.failures:
            if self.kill and t0 <= self.kill[1] + 0.5 and t1 >= self.kill[0] and (
                    kind in GENERATING or "worker_unavailable" in msg):
                continue
            out.append((kind, msg))
        return out


def trace(t, load, every):
    """Prints the requests done and each process's VmRSS (MiB) periodically."""
    while True:
        time.sleep(every)
        try:
            pids = t.pids()
        except OSError:
            return
        mem = {name: proc_mem(pid) or {} for name, pid in pids.items()}
        cols = " ".join(f"{name}={m.get('VmRSS', 0) / 1024:.1f}(anon {m.get('RssAnon', 0) / 1024:.1f}, "
                        f"shm {m.get('RssShmem', 0) / 1024:.1f})" for name, m in mem.items())
        print(f"trace: {load.done:6d} requests  {cols}", flush=True)


def fmt_kib(v):
    return f"{v / 1024:8.1f}" if v is not None else "       -"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--requests", type=int, default=50000)
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=None, help="requests before the first reading (default: min(2000, n/10))")
    ap.add_argument("--max-tokens", type=int, default=4, help="max_tokens of the generating requests (1..this)")
    ap.add_argument("--url", help="drive a server already running (http://host:port) instead of starting one")
    ap.add_argument("--admin-socket", help="with --url: its admin socket (pids, idle state)")
    ap.add_argument("--sluice", default=str(REPO / "build" / "sluice"))
    ap.add_argument("-m", "--model", help="GGUF model (default: the shipped 12M model, models/default/; "
                                          "the real 0.5B default is ~100x slower per request)")
    ap.add_argument("--frontends", type=int, default=2)
    ap.add_argument("--kv-memory", default="64M")
    ap.add_argument("--wrap", help="command line the server runs under (e.g. 'valgrind --leak-check=full')")
    ap.add_argument("--log", help="where the started server's output goes (default: a temporary file)")
    ap.add_argument("--kill-worker-at", type=float, default=0.0, help="SIGKILL the worker after this fraction of the requests")
    ap.add_argument("--bound-mb", type=float, default=2.0, help="max RssAnon growth per process, MiB (0: not checked)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--request-timeout", type=float, default=60)
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--stop-timeout", type=float, default=30)
    ap.add_argument("--trace", type=float, default=0, help="print every process's VmRSS every this many seconds")
    ap.add_argument("--json", help="write the figures here as JSON")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else min(2000, args.requests // 10)

    problems = []
    t = Target(args)
    try:
        if not t.admin_path:
            print("no admin socket: pids, memory and idle state are not checked")
        c = Client(t.host, t.port, 1, [], 10)
        status, data = c.post("/tokenize", {"content": " ".join(WORDS)})
        token_ids = json.loads(data)["tokens"] if status == 200 else [1, 2, 3]
        load = Load(t, args, token_ids)
        if args.trace and t.admin_path:
            threading.Thread(target=trace, args=(t, load, args.trace), daemon=True).start()
        t_start = time.time()
        load.phase(0, warmup)
        rss, kv_warm, kv_late = {}, 0, 0
        if t.admin_path:
            idle, parts = wait_idle(t, 30)
            if not idle:
                problems.append(f"not idle after the warm-up: {parts}")
            pids_warm = t.pids()
            rss["warm"] = {name: proc_mem(pid) for name, pid in pids_warm.items()}
            kv_warm = kv_touched_bytes(t)
        t_warm = time.time()
        load.phase(warmup, args.requests)
        t_end = time.time()
        if t.admin_path:
            idle, parts = wait_idle(t, 30)
            if not idle:
                problems.append(f"not idle at the end: {parts}")
            print(f"idle state at the end: {parts}")
            pids_end = t.pids()
            rss["end"] = {name: proc_mem(pid) for name, pid in pids_end.items()}
            kv_late = kv_touched_bytes(t) - kv_warm
            restarts = t.config()["master"]["frontend_restarts"]
            if restarts:
                problems.append(f"{restarts} front-end restart(s)")
    finally:
        rc, reports = t.stop(args.stop_timeout)

    n_done = sum(load.count.values())
    print(f"\n{n_done} requests ({warmup} warm-up) at concurrency {args.concurrency}, max_tokens 1..{args.max_tokens}: "
          f"{t_end - t_start:.1f}s ({n_done / (t_end - t_start):.0f} req/s); after the warm-up {t_end - t_warm:.1f}s")
    print("requests by kind: " + ", ".join(f"{k} {v}" for k, v in load.count.items()))
    print(f"keep-alive retries: {load.retries}; failures: {len(load.failures)}")
    bad = load.unexpected()
    if bad:
        problems.append(f"{len(bad)} unexpected failure(s)")
        for kind, msg in bad[:10]:
            print(f"  {kind}: {msg}")
    if rss:
        print(f"\n{'process':10} {'RSS warm':>9} {'RSS end':>9} {'anon warm':>9} {'anon end':>9} {'anon grew':>9} "
              f"{'shm end':>9} {'HWM end':>9}   (MiB; anon = RssAnon, shm = RssShmem)")
        for name in rss["end"]:
            w, e = rss["warm"].get(name), rss["end"][name]
            same = pids_warm.get(name) == pids_end[name] and w and e
            growth = (e["RssAnon"] - w["RssAnon"]) if same else None
            print(f"{name:10} {fmt_kib(w and w['VmRSS'])} {fmt_kib(e and e['VmRSS'])} {fmt_kib(w and w['RssAnon'])} "
                  f"{fmt_kib(e and e['RssAnon'])} {fmt_kib(growth)} {fmt_kib(e and e['RssShmem'])} "
                  f"{fmt_kib(e and e['VmHWM'])}" + ("" if same else "   (restarted: not compared)"))
            bound_kib = args.bound_mb * 1024 + (kv_late // 1024 if name == "worker" else 0)
            if args.bound_mb and growth is not None and growth > bound_kib:
                problems.append(f"{name}'s RssAnon grew {growth / 1024:.1f} MiB (bound {bound_kib / 1024:.1f} MiB)")
        if kv_late:
            print(f"the worker first wrote {kv_late / 2**20:.1f} MiB of KV blocks after the warm-up "
                  f"(allowed on top of its bound)")
    if t.proc:
        print(f"\nserver exit status after SIGTERM: {rc}")
        if rc != 0:
            problems.append(f"server exit status {rc}")
        if reports:
            problems.append(f"{len(reports)} sanitizer report line(s) in {t.log_path}")
            for ln in reports[:20]:
                print("  " + ln)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "requests": n_done, "warmup": warmup, "concurrency": args.concurrency, "seconds": t_end - t_start,
            "by_kind": load.count, "failures": len(load.failures), "unexpected": bad, "rss_kib": rss,
            "kv_late_kib": kv_late // 1024,
            "worker_killed": bool(load.kill), "exit": rc, "sanitizer_reports": reports, "problems": problems}, indent=1))
    if problems:
        print("\nFAIL: " + "; ".join(problems))
        return 1
    print("\nOK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
