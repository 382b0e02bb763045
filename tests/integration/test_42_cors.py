"""40-level, against tools/fe-harness: CORS for browser clients. With
--cors-origin (repeatable, or a comma list; * for any), a request whose Origin
is allowed gets Access-Control-Allow-Origin on every response, errors and
streams included, and a list (not *) says Vary: Origin; OPTIONS on a route is
a 204 preflight with the route's methods, the headers asked for, and a max
age, answered without the API key (browsers send none on a preflight).
Without --cors-origin no CORS header is sent and OPTIONS is a 405 as any
other method a route does not take. A value that is not an origin stops
`sluice serve`."""
import json
import subprocess

import pytest

from fe_harness import Harness, qwen3_model, sse_events
from paths import SLUICE

APP = "http://app.test:3000"
KEY = {"Authorization": "Bearer k-42"}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}]}


@pytest.fixture(scope="module")
def model(make_model):
    return qwen3_model(make_model)


@pytest.fixture(scope="module")
def cors(model):
    h = Harness(model, "--model-alias", "tiny", "--api-key", "k-42", "--cors-origin", APP,
                "--cors-origin", "https://other.test", n=1)
    yield h
    assert h.stop() == 0


def preflight(h, path, origin=APP, asked="authorization, content-type"):
    return h.request("OPTIONS", path, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                               "Access-Control-Request-Headers": asked})


def cors_headers(hdrs):
    return {k: v for k, v in hdrs.items() if k.startswith("access-control-")}


def test_preflight_answers_without_the_key(cors):
    st, h, b = preflight(cors, "/v1/chat/completions", asked="Authorization, Content-Type, X-Stainless-OS")
    assert st == 204 and b == b""
    assert h["access-control-allow-origin"] == APP and h["vary"].lower() == "origin"
    assert h["access-control-allow-methods"] == "POST, OPTIONS" and h["allow"] == "POST, OPTIONS"
    allowed = [x.strip() for x in h["access-control-allow-headers"].split(",")]
    assert {"authorization", "content-type", "x-stainless-os"} <= set(allowed)
    assert h["access-control-max-age"] == "600"
    # Every route, the ones without /v1 too; GET routes name their methods.
    for path in ("/chat/completions", "/v1/completions", "/models", "/v1/models/tiny", "/tokenize", "/health"):
        st, h, _ = preflight(cors, path)
        assert st == 204 and h["access-control-allow-origin"] == APP, path
    assert preflight(cors, "/v1/models")[1]["access-control-allow-methods"] == "GET, HEAD, OPTIONS"


def test_preflight_from_another_origin_gets_no_permission(cors):
    for origin in ("http://evil.test", "http://app.test:3001", "null"):
        st, h, _ = preflight(cors, "/v1/chat/completions", origin=origin)
        assert st == 204 and cors_headers(h) == {}, (origin, h)
        assert h["vary"].lower() == "origin"
    # An unknown path is no route: the usual 401 (no key) or 404.
    assert preflight(cors, "/v1/nothing")[0] == 401


def test_responses_carry_the_origin_streams_and_errors_too(cors):
    hdr = {"Origin": "https://other.test", **KEY}
    st, h, b = cors.post("/v1/chat/completions", CHAT, hdr)
    assert st == 200 and h["access-control-allow-origin"] == "https://other.test"
    assert h["vary"].lower() == "origin" and "x-request-id" in h["access-control-expose-headers"]
    st, h, b = cors.post("/chat/completions", {**CHAT, "stream": True}, hdr)
    assert st == 200 and h["content-type"].startswith("text/event-stream")
    assert h["access-control-allow-origin"] == "https://other.test" and sse_events(b)[-1] == "[DONE]"
    # A browser script can read why it failed: a 401 and a 404 carry the header as well.
    st, h, b = cors.post("/v1/chat/completions", CHAT, {"Origin": APP})
    assert st == 401 and h["access-control-allow-origin"] == APP
    st, h, b = cors.post("/v1/chat/completions", {**CHAT, "model": "nope"}, {"Origin": APP, **KEY})
    assert st == 404 and h["access-control-allow-origin"] == APP
    # An origin not listed: the answer, without permission to read it.
    st, h, _ = cors.post("/v1/chat/completions", CHAT, {"Origin": "http://evil.test", **KEY})
    assert st == 200 and cors_headers(h) == {} and h["vary"].lower() == "origin"
    cfg = json.loads(cors.request("GET", "/v1/effective-config", headers=KEY)[2])["frontend"]
    assert cfg["cors_origins"] == [APP, "https://other.test"]


def test_star_allows_any_origin_without_vary(model):
    h = Harness(model, "--model-alias", "tiny", "--cors-origin", "*", n=1)
    try:
        st, hd, _ = preflight(h, "/v1/completions", origin="https://anywhere.test")
        assert st == 204 and hd["access-control-allow-origin"] == "*" and "vary" not in hd
        st, hd, _ = h.post("/v1/chat/completions", CHAT, {"Origin": "https://anywhere.test"})
        assert st == 200 and hd["access-control-allow-origin"] == "*" and "vary" not in hd
    finally:
        assert h.stop() == 0


def test_without_cors_origin_nothing_changes(model):
    h = Harness(model, "--model-alias", "tiny", "--api-key", "k-42", n=1)
    try:
        st, hd, _ = h.post("/v1/chat/completions", CHAT, {"Origin": APP, **KEY})
        assert st == 200 and cors_headers(hd) == {} and "vary" not in hd
        assert preflight(h, "/v1/chat/completions")[0] == 401          # the key is checked first, as before
        st, hd, b = h.request("OPTIONS", "/v1/chat/completions", headers={"Origin": APP, **KEY})
        assert st == 405 and hd["allow"] == "POST" and json.loads(b)["error"]["code"] == "method_not_allowed"
        assert cors_headers(hd) == {}
    finally:
        assert h.stop() == 0


def test_a_bad_origin_stops_the_server(model, tmp_path):
    r = subprocess.run([SLUICE, "serve", "-m", str(model), "--port", "0", "--frontends", "1", "--threads", "1",
                        "--kv-memory", "64M", "--drain-delay", "0", "--admin-socket", str(tmp_path / "a.sock"),
                        "--cors-origin", "http://ok.test,app.test/path"], capture_output=True, text=True, timeout=60)
    assert "--cors-origin: 'app.test/path' is not an origin" in r.stderr, r.stderr[-2000:]
    assert "not restarting" in r.stderr and r.returncode != 0
