"""Fairness under slow and long clients, against the real `sluice serve`
(2 front ends, CPU worker, the default --max-seqs):
  - 32 clients that never read stream long answers with 20 top logprobs
    each; their token rings fill and their sequences park (out of the
    batch, docs/SCHEDULER.md section 5);
  - 32 clients that read stream long answers;
  - then one short request (max_tokens 4) must be answered within 2 s.
The non-readers ask for a small receive window and a small MSS, so the
kernel holds only tens of KB for each before the server's writes stall
(not the ~3 MB a loopback socket takes otherwise); --write-timeout-ms is
long, so they stay connected and parked for the whole test. A second case
sets --max-seqs 33: the 32 readers and the short request fit only because
the parked sequences do not count against it."""
import http.client
import json
import os
import socket
import threading
import time

import pytest

from serve import Server, wait_for

N_SLOW = 32
N_LONG = 32
LONG_TOKENS = 3000
SHORT_WITHIN_S = 2.0
# How long the short request is waited for, to report its latency (raise it
# to measure a server that fails: docs/RELIABILITY.md)
SHORT_TIMEOUT_S = float(os.environ.get("SLUICE_FAIRNESS_SHORT_TIMEOUT_S", "30"))


@pytest.fixture(scope="module")
def model(make_model):
    return make_model("tiny-llama", "Q8_0", n_vocab=1024, n_ctx=4096)


def request_bytes(body):
    data = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    return head + data


def never_reads(port, socks):
    """Sends a long streaming request with 20 top logprobs and never reads."""
    s = socket.socket()
    socks.append(s)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    s.connect(("127.0.0.1", port))
    s.sendall(request_bytes({"messages": [{"role": "user", "content": "go"}], "stream": True,
                             "max_tokens": LONG_TOKENS, "ignore_eos": True, "logprobs": True,
                             "top_logprobs": 20}))


def reads(port, socks, got, stop):
    """Streams a long answer and reads it all, counting bytes, until stop."""
    s = socket.socket()
    socks.append(s)
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(request_bytes({"messages": [{"role": "user", "content": "tell me a long story"}],
                                 "stream": True, "max_tokens": LONG_TOKENS, "ignore_eos": True}))
        while not stop.is_set():
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            got.append(len(chunk))
    except OSError:
        pass


def short_request(port):
    """POSTs max_tokens 4 (not streamed); its latency in s, or None if it did
    not finish within SHORT_TIMEOUT_S."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=SHORT_TIMEOUT_S)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    t0 = time.time()
    try:
        c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        assert r.status == 200, data[:300]
        return time.time() - t0
    except socket.timeout:
        return None
    finally:
        c.close()


def worker_snapshot(server):
    return server.admin("effective-config")["worker"] or {}


def run_case(server):
    socks, threads, stop = [], [], threading.Event()
    got = [[] for _ in range(N_LONG)]
    try:
        for _ in range(N_SLOW):
            never_reads(server.port, socks)
        for i in range(N_LONG):
            t = threading.Thread(target=reads, args=(server.port, socks, got[i], stop), daemon=True)
            t.start()
            threads.append(t)
        t0 = time.time()
        # The moment under test: every non-reader parked (a server without
        # parking never reports it: then the short request goes after the
        # same wait, when the non-readers hold their slots just the same).
        parked = wait_for(lambda: worker_snapshot(server).get("parked_now", 0) >= N_SLOW, 60, step=0.2)
        settle = time.time() - t0
        snap = worker_snapshot(server)
        latency = short_request(server.port)
        shown = f"{latency:.2f} s" if latency is not None else f"> {SHORT_TIMEOUT_S:.0f} s"
        print(f"\nshort request: {shown} (all {N_SLOW} non-readers parked: {parked}, after {settle:.1f} s; "
              f"max_in_flight {snap.get('max_in_flight')}, in_flight_now {snap.get('in_flight_now')}, "
              f"parked_now {snap.get('parked_now')}, waiting_now {snap.get('waiting_now')})")
        readers = sum(1 for g in got if g)
        assert latency is not None and latency < SHORT_WITHIN_S, shown
        assert parked, snap
        assert readers == N_LONG, f"only {readers} readers got data"
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        for s in socks:
            s.close()
    # every long stream is cancelled once its client is gone: nothing held
    assert wait_for(lambda: (lambda w: w.get("in_flight_now") == 0 and w.get("waiting_now") == 0
                             and w.get("parked_now", 0) == 0
                             and w.get("kv_blocks_free") == w.get("kv_blocks_total"))(worker_snapshot(server)),
                    30, step=0.2), worker_snapshot(server)


@pytest.mark.parametrize("max_seqs", [None, 33], ids=["default-max-seqs", "max-seqs-33"])
def test_short_request_is_served_beside_slow_and_long_streams(model, tmp_path, max_seqs):
    extra = ["--write-timeout-ms", "120000", "--ctx-size", "4096"]
    if max_seqs:
        extra += ["--max-seqs", str(max_seqs)]
    s = Server(model, tmp_path, frontends=2, extra=extra)
    try:
        w = worker_snapshot(s)
        if max_seqs is None:
            assert w["max_in_flight"]["source"] == "computed"
        run_case(s)
    finally:
        s.stop()
