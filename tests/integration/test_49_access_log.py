"""40-level, against the real `sluice serve`: the access log. One line per
request with a timestamp (ISO 8601 UTC, milliseconds), the client address,
method, path, status, request id, token counts, the finish reason, the error
(a failed request's OpenAI error code, else its type), and ms; `--log-format text` (logfmt, the default) or `json` (one
object per line, the same fields); `--log-health 0` leaves /health and
/ready out. Both formats are parsed back here."""
import datetime
import json
import re
import socket
import urllib.request

import pytest

from serve import Server, wait_for

FIELDS = ["ts", "slot", "client", "method", "path", "status", "request_id", "prompt_tokens",
          "completion_tokens", "finish", "error", "ms"]
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def post(srv, path, obj, rid):
    req = urllib.request.Request(srv.base + path, data=json.dumps(obj).encode(),
                                 headers={"content-type": "application/json", "x-request-id": rid})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def traffic(srv):
    """Requests whose log lines the tests look for, by request id."""
    msg = [{"role": "user", "content": "hi"}]
    assert post(srv, "/v1/chat/completions", {"messages": msg, "max_tokens": 3, "ignore_eos": True}, "r-len")[0] == 200
    assert post(srv, "/v1/chat/completions", {"messages": msg, "max_tokens": 3, "ignore_eos": True, "stream": True},
                "r-stream")[0] == 200
    assert post(srv, "/v1/chat/completions", {"messages": "nope"}, "r-bad")[0] == 400
    assert post(srv, "/v1/nothing", {}, "r-404")[0] == 404
    assert post(srv, "/v1/completions", {"model": "no-such-model", "prompt": "hi"}, "r-model")[0] == 404
    req = urllib.request.Request(srv.base + "/health", headers={"x-request-id": "r-health"})
    urllib.request.urlopen(req, timeout=5).read()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx")
    while s.recv(4096):
        pass
    s.close()
    # A client that leaves mid-stream: 499, still with its address.
    body = json.dumps({"messages": msg, "max_tokens": 2000, "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-ID: r-gone\r\nContent-Type: "
              b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.recv(4096)
    s.close()
    assert wait_for(lambda: "r-gone" in srv.log_path.read_text(), 5)


def parse_text(log):
    out = []
    for line in log.splitlines():
        if not line.startswith("sluice-fe ts="):
            continue
        pairs = re.findall(r'(\w+)=("(?:[^"]*)"|\S+)', line[len("sluice-fe "):])
        rec = {k: v[1:-1] if v.startswith('"') else v for k, v in pairs}
        assert [k for k, _ in pairs] == FIELDS, line
        out.append(rec)
    return out


def parse_json(log):
    out = []
    for line in log.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            assert list(rec) == FIELDS, line
            out.append(rec)
    return out


def check(recs, health_logged):
    by_id = {str(r["request_id"]): r for r in recs}
    for r in recs:
        assert TS.match(str(r["ts"])), r
        t = datetime.datetime.strptime(r["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
        assert abs((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds()) < 120
        assert re.match(r"^127\.0\.0\.1:\d+$", str(r["client"])), r
    none = (None, "-")   # json null, text "-"
    assert str(by_id["r-len"]["finish"]) == "length" and str(by_id["r-len"]["status"]) == "200"
    assert by_id["r-len"]["error"] in none
    assert int(by_id["r-len"]["completion_tokens"]) == 3
    assert str(by_id["r-stream"]["finish"]) == "length" and by_id["r-stream"]["error"] in none
    # A failed request: its status, and the code (else the type) its error body had.
    for rid, status, error in (("r-bad", 400, "invalid_type"), ("r-404", 404, "not_found_error"),
                               ("r-model", 404, "model_not_found"), ("r-gone", 499, "client_closed")):
        assert (str(by_id[rid]["status"]), by_id[rid]["error"]) == (str(status), error), by_id[rid]
        assert by_id[rid]["finish"] in none, by_id[rid]
    assert ("r-health" in by_id) == health_logged
    refused = [r for r in recs if str(r["error"]) == "bad_http_framing"]
    assert len(refused) == 1 and str(refused[0]["status"]) == "400" and str(refused[0]["method"]) == "-"
    # Every line but a 2xx without an error names one.
    for r in recs:
        assert (r["error"] in none) == (str(r["status"]).startswith("2")), r


def test_text_log_without_probes(chat_model, tmp_path):
    srv = Server(chat_model, tmp_path, frontends=1, extra=["--log-health", "0"])
    try:
        traffic(srv)
        assert wait_for(lambda: "r-404" in srv.log_path.read_text(), 5)
        recs = parse_text(srv.log_path.read_text())
        check(recs, health_logged=False)
        assert not [r for r in recs if r["path"] in ("/health", "/ready")]
        assert all(r["finish"] == "-" or r["status"] != "200" or r["path"].startswith("/v1/") for r in recs)
    finally:
        srv.stop()


def test_json_log_with_probes(chat_model, tmp_path):
    srv = Server(chat_model, tmp_path, frontends=1, extra=["--log-format", "json"])
    try:
        traffic(srv)
        assert wait_for(lambda: "r-404" in srv.log_path.read_text(), 5)
        recs = parse_json(srv.log_path.read_text())
        check(recs, health_logged=True)
        h = [r for r in recs if r["request_id"] == "r-health"][0]
        assert h["finish"] is None and h["error"] is None and h["status"] == 200 and isinstance(h["ms"], float)
        assert not parse_text(srv.log_path.read_text())
    finally:
        srv.stop()


def test_bad_log_format_stops_the_server(chat_model, tmp_path):
    # A front end that cannot start for a bad setting exits 2: the master
    # does not restart it and stops.
    import subprocess
    from paths import SLUICE
    r = subprocess.run([SLUICE, "serve", "-m", str(chat_model), "--port", "0", "--frontends", "1", "--threads", "1",
                        "--kv-memory", "64M", "--drain-delay", "0", "--admin-socket", str(tmp_path / "a.sock"),
                        "--log-format", "xml"], capture_output=True, text=True, timeout=60)
    assert "--log-format: 'xml' is not text or json" in r.stderr, r.stderr[-2000:]
    assert "not restarting" in r.stderr
