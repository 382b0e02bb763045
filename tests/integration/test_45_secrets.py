"""45-level: permissions and secrets on the real `sluice
serve`: the shared-memory segment and the admin socket are 0600; the API key
never appears in the server's log, in the admin socket's effective-config or
in GET /v1/effective-config (right key, wrong key and no key are all tried);
request bodies are logged only with --log-bodies."""
import grp
import json
import os
import stat
import urllib.request

import pytest

from fe_harness import qwen3_model
from serve import Server

KEY = "sk-test-Very-Secret-0123456789abcdef"
WRONG = "sk-test-Wrong-Guess-fedcba9876543210"
MARKER = "zebra-marker-7f3c19d2"


@pytest.fixture(scope="module")
def model(make_model, tmp_path_factory):
    return qwen3_model(make_model, tmp_path_factory)


def call(base, path, body=None, key=None):
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def chat(content):
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 4}


@pytest.fixture(scope="module")
def keyed(model, tmp_path_factory):
    s = Server(model, tmp_path_factory.mktemp("secrets"), frontends=2, extra=("--api-key", KEY))
    yield s
    s.stop()


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_segment_and_admin_socket_are_0600(keyed):
    shm = keyed.admin("effective-config")["master"]["shm"]
    seg = "/dev/shm/" + shm.lstrip("/")
    assert mode(seg) == 0o600, oct(mode(seg))
    assert os.stat(seg).st_uid == os.getuid()
    assert stat.S_ISSOCK(os.stat(keyed.admin_path).st_mode)
    assert mode(keyed.admin_path) == 0o600, oct(mode(keyed.admin_path))


def test_admin_group_makes_the_socket_0660(model, tmp_path):
    group = grp.getgrgid(os.getgid()).gr_name
    s = Server(model, tmp_path, frontends=1, extra=("--admin-group", group))
    try:
        st = os.stat(s.admin_path)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == os.getgid()
        assert s.admin("health")["status"] == "ok"
    finally:
        s.stop()


def test_unknown_admin_group_refuses_to_start(model, tmp_path):
    with pytest.raises(RuntimeError, match="no such group"):
        Server(model, tmp_path, frontends=1, extra=("--admin-group", "no-such-group-sluice"))


def test_key_checked_and_never_shown(keyed):
    for fe_try in range(4):     # 2 front ends: enough tries to reach both
        assert call(keyed.base, "/v1/models", key=KEY)[0] == 200
        assert call(keyed.base, "/v1/models", key=WRONG)[0] == 401
        assert call(keyed.base, "/v1/models")[0] == 401
    assert call(keyed.base, "/v1/chat/completions", chat("hi"), key=KEY)[0] == 200
    assert call(keyed.base, "/v1/chat/completions", chat("hi"), key=WRONG)[0] == 401
    assert call(keyed.base, "/v1/chat/completions", chat("hi"))[0] == 401
    assert call(keyed.base, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, key=WRONG)[0] == 401
    s, b = call(keyed.base, "/v1/effective-config", key=KEY)
    assert s == 200 and json.loads(b)["frontend"]["api_key_set"] is True
    outputs = {
        "GET /v1/effective-config": b.decode(),
        "GET /metrics": call(keyed.base, "/metrics", key=KEY)[1].decode(),
        "admin effective-config": json.dumps(keyed.admin("effective-config")),
        "admin stats": json.dumps(keyed.admin("stats")),
        "admin health": json.dumps(keyed.admin("health")),
        "server log": keyed.log_path.read_text(),
    }
    assert json.loads(outputs["admin effective-config"])["config"]["api-key"]["value"] == "(set)"
    for where, text in outputs.items():
        for secret in (KEY, WRONG, KEY[8:], WRONG[8:]):
            assert secret not in text, f"{secret!r} appears in {where}"


def test_bodies_not_logged_by_default(keyed):
    assert call(keyed.base, "/v1/chat/completions", chat("say " + MARKER), key=KEY)[0] == 200
    assert call(keyed.base, "/v1/completions", {"prompt": MARKER, "max_tokens": 2}, key=KEY)[0] == 200
    assert call(keyed.base, "/tokenize", {"content": MARKER}, key=KEY)[0] == 200
    assert MARKER not in keyed.log_path.read_text()


def test_bodies_logged_with_log_bodies(model, tmp_path):
    s = Server(model, tmp_path, frontends=1, extra=("--log-bodies",))
    try:
        assert call(s.base, "/v1/chat/completions", chat("say " + MARKER))[0] == 200
        log = s.log_path.read_text()
    finally:
        s.stop()
    assert MARKER in log
