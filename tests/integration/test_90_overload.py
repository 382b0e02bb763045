"""Overload, made deterministic with the admin `pause`: while paused the
worker runs no forward step, so every request it accepts stays held and the
number the server accepts is exact. With F front ends, queue depth Q and
max_seqs R the server holds F*Q + 2R requests at once: Q waiting in each
front end's submission ring (exactly Q: the ring is a power of two but the
depth the user set is enforced) and 2R in the worker's scheduler (R that may
run plus R waiting, gpu-worker/worker.c); the mailbox pool is sized above
that (master.c), so it never binds first. Everything beyond is a 429 with
Retry-After. Resident memory stays flat through the burst; after `resume`
every accepted request completes with 200."""
import http.client
import json
import threading
import time

import pytest

from serve import Server, wait_for


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_of(server):
    m = server.admin("effective-config")["master"]
    pids = {"master": m["pid"], "worker": m["worker"]["pid"]}
    for i, p in enumerate(m["frontend_pids"]):
        pids[f"frontend{i}"] = p
    return {k: rss_kib(p) for k, p in pids.items()}


BODY = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4, "ignore_eos": True}


def post(port, body, out, timeout=120):
    """One completion on its own connection; appends (status, retry_after, body)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                  headers={"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        out.append((r.status, r.getheader("retry-after"), data))
        c.close()
    except Exception as e:  # noqa: BLE001 - recorded and asserted on
        out.append((None, None, repr(e).encode()))


def worker_snapshot(server):
    return server.admin("effective-config")["worker"] or {}


def pause(server):
    assert server.admin("pause") == {"paused": True}
    assert wait_for(lambda: worker_snapshot(server).get("paused") is True, 10), "worker never saw the pause"


def burst(server, n, results=None):
    results, threads = [] if results is None else results, []
    for _ in range(n):
        t = threading.Thread(target=post, args=(server.port, BODY, results), daemon=True)
        t.start()
        threads.append(t)
    return results, threads


def check_burst(server, n, accepted_max, accepted_min):
    """Pauses, sends n at once, checks the 429s (count, Retry-After) and the
    memory bound, resumes and checks every accepted one completes. Returns
    (accepted, rss before, rss held, rss after)."""
    post(server.port, BODY, warm := [])   # warm-up: pages the first request touches
    assert warm[0][0] == 200, warm
    before = rss_of(server)
    rejected0 = server.admin("stats")["counters"]["requests_rejected_full"]
    pause(server)
    assert server.get("/ready")[0] == 200, "a paused worker is alive: /ready stays 200"
    assert server.admin("stats")["paused"] is True
    assert server.admin("effective-config")["master"]["paused"] is True
    # The worker takes requests in at its 10 ms paused tick (or between steps
    # when running): a burst faster than that would meet a full ring before
    # the worker emptied it into its 2R slots. So the worker's share goes
    # first, then the rest at once: what is refused is then exact.
    r2 = 2 * server.max_seqs
    results, threads = burst(server, r2)
    assert wait_for(lambda: worker_snapshot(server).get("waiting_now") == r2, 10), worker_snapshot(server)
    threads += burst(server, n - r2, results)[1]
    assert wait_for(lambda: len(results) >= n - accepted_max, 30), f"only {len(results)} answers"
    time.sleep(1.0)   # anything that would still be refused would have been by now
    assert len(results) <= n - accepted_min, [r[:2] for r in results]
    rejected = [r for r in results if r[0] == 429]
    assert all(r[0] == 429 for r in results), [r[:2] for r in results if r[0] != 429]
    accepted = n - len(rejected)
    assert accepted_min <= accepted <= accepted_max, (accepted, accepted_min, accepted_max)
    for status, retry_after, body in rejected:
        assert retry_after is not None and int(retry_after) >= 1
        assert json.loads(body)["error"]["type"] == "rate_limit_error"
    st = server.admin("stats")
    assert st["counters"]["requests_rejected_full"] - rejected0 == len(rejected)
    snap = worker_snapshot(server)
    assert snap["in_flight_now"] == 0, "paused: nothing is admitted"
    held = rss_of(server)
    assert server.admin("resume") == {"paused": False}
    for t in threads:
        t.join(120)
    assert len(results) == n
    done = [r for r in results if r[0] != 429]
    assert len(done) == accepted and all(r[0] == 200 for r in done), [r[:2] for r in done if r[0] != 200]
    assert wait_for(lambda: worker_snapshot(server).get("paused") is False, 10)
    after = rss_of(server)
    return accepted, before, held, after, st, snap


# RSS growth allowed per process across the burst: the held requests' state
# is preallocated (mailboxes, rings, scheduler slots); what grows is malloc
# arenas and h2o per-connection pools for ~20 sockets, well under this.
RSS_BOUND_KIB = 8 * 1024


def report(name, accepted, before, held, after):
    print(f"\n{name}: accepted {accepted}; VmRSS KiB before/held/after: " +
          ", ".join(f"{k} {before[k]}/{held[k]}/{after[k]}" for k in before))
    for k in before:
        assert held[k] - before[k] <= RSS_BOUND_KIB, (k, before[k], held[k])
        assert after[k] - before[k] <= RSS_BOUND_KIB, (k, before[k], after[k])


def test_paused_one_frontend_accepts_exactly_q_plus_2r(chat_model, tmp_path):
    Q, R, C = 5, 2, 20   # Q not a power of two: the ring is 8, the depth stays 5
    s = Server(chat_model, tmp_path, frontends=1,
               extra=["--max-seqs", str(R), "--queue-depth", str(Q), "--ctx-size", "256"])
    s.max_seqs = R
    try:
        accepted, before, held, after, st, snap = check_burst(s, C, Q + 2 * R, Q + 2 * R)
        assert accepted == Q + 2 * R
        # where they were held: Q in the ring (SUBMITTED), 2R taken by the worker
        assert st["mailboxes"]["submitted"] == Q, st["mailboxes"]
        assert st["mailboxes"]["running"] == 2 * R, st["mailboxes"]
        assert snap["waiting_now"] == 2 * R
        report("1 front end", accepted, before, held, after)
        # and back to idle
        assert wait_for(lambda: s.admin("stats")["mailboxes"]["free"] == sum(s.admin("stats")["mailboxes"].values()),
                        10), s.admin("stats")
    finally:
        s.stop()


def test_paused_two_frontends_bound(chat_model, tmp_path):
    """SO_REUSEPORT spreads connections by a hash of the 4-tuple, so how many
    land on each front end is random: at least Q + 2R are accepted (one front
    end gets more than Q + 2R of the 2Q + 2R + 10 sent), at most 2Q + 2R."""
    Q, R = 5, 2
    C = 2 * Q + 2 * R + 10
    s = Server(chat_model, tmp_path, frontends=2,
               extra=["--max-seqs", str(R), "--queue-depth", str(Q), "--ctx-size", "256"])
    s.max_seqs = R
    try:
        accepted, before, held, after, st, snap = check_burst(s, C, 2 * Q + 2 * R, Q + 2 * R)
        assert st["mailboxes"]["running"] == 2 * R
        assert st["mailboxes"]["submitted"] == accepted - 2 * R
        report("2 front ends", accepted, before, held, after)
    finally:
        s.stop()


def test_pause_keeps_heartbeat_and_cancellations(chat_model, tmp_path):
    """While paused the master does not call the worker wedged (even past the
    heartbeat timeout), and a client that gives up frees its mailbox whether
    it was queued in the ring or already held by the worker."""
    s = Server(chat_model, tmp_path, frontends=1,
               extra=["--max-seqs", "1", "--queue-depth", "2", "--heartbeat-timeout-ms", "300"])
    try:
        pid0, _ = s.pids()
        pause(s)
        socks = []
        for i in range(3):   # 2 taken by the worker (R running + R waiting), then 1 in the ring
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
            c.request("POST", "/v1/chat/completions", body=json.dumps(BODY),
                      headers={"content-type": "application/json"})
            socks.append(c)
            assert wait_for(lambda: s.admin("stats")["counters"]["requests_submitted"] >= i + 1, 10)
            if i == 1:
                assert wait_for(lambda: worker_snapshot(s).get("waiting_now") == 2, 10), worker_snapshot(s)
        assert wait_for(lambda: s.admin("stats")["mailboxes"]["running"] == 2 and
                        s.admin("stats")["mailboxes"]["submitted"] == 1, 10), json.dumps(s.admin("stats"))
        time.sleep(1.5)   # five heartbeat timeouts
        assert s.pids()[0] == pid0 and s.admin("effective-config")["master"]["worker"]["restarts"] == 0
        assert s.get("/ready")[0] == 200
        for c in socks:
            c.sock.close()
        assert wait_for(lambda: s.admin("stats")["mailboxes"]["free"] == sum(s.admin("stats")["mailboxes"].values()),
                        10), s.admin("stats")
        snap = worker_snapshot(s)
        assert wait_for(lambda: worker_snapshot(s)["waiting_now"] == 0, 5), snap
        assert s.admin("resume") == {"paused": False}
        out = []
        post(s.port, BODY, out)
        assert out[0][0] == 200
    finally:
        s.stop()


def test_sigterm_resumes_a_paused_worker(chat_model, tmp_path):
    """A drain resumes the worker: what it held completes instead of ending
    with an error at the drain timeout."""
    s = Server(chat_model, tmp_path, frontends=1)
    try:
        pause(s)
        out = []
        t = threading.Thread(target=post, args=(s.port, BODY, out), daemon=True)
        t.start()
        assert wait_for(lambda: s.admin("stats")["counters"]["requests_submitted"] >= 1, 10)
    finally:
        s.stop()
    t.join(30)
    assert out and out[0][0] == 200, out
    assert s.proc.returncode == 0
    assert "resuming the paused worker" in s.log_path.read_text()
