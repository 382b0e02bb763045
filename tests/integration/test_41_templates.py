"""Chat-template failures through the real server: a template that calls
raise_exception gives that request a 400 with the template's message and the
server keeps serving; a template that does not parse stops `sluice serve`
with exit status 2 (bad config: do not restart) and a message naming it."""
import json
import subprocess
import urllib.request

import pytest

from paths import SLUICE
from serve import Server

TEMPLATE = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a "
            "user message') }}{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def model(make_model):
    return make_model("tiny-llama", "Q8_0", n_vocab=1024)


def test_raise_exception_is_a_400_and_the_server_keeps_serving(model, tmp_path):
    t = tmp_path / "raising.jinja"
    t.write_text(TEMPLATE)
    s = Server(model, tmp_path, frontends=1, extra=["--chat-template", str(t)])
    try:
        status, body = post(s.base, {"messages": [{"role": "assistant", "content": "hi"}], "max_tokens": 2})
        assert status == 400, body
        assert "Conversations must start with a user message" in body["error"]["message"]
        assert body["error"]["type"] == "invalid_request_error"
        status, body = post(s.base, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 200, body
        assert body["choices"][0]["finish_reason"] in ("length", "stop")
    finally:
        s.stop()


def test_unparsable_template_is_exit_2(model, tmp_path):
    t = tmp_path / "broken.jinja"
    t.write_text("{% for m in messages %}{{ m['content'] }")
    r = subprocess.run([SLUICE, "serve", "-m", str(model), "--port", "0", "--frontends", "1", "--threads", "1",
                        "--kv-memory", "64M", "--admin-socket", str(tmp_path / "a.sock"), "--chat-template", str(t)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "broken.jinja" in r.stderr or "template" in r.stderr


@pytest.mark.parametrize("preset,builtin", [("tiny-gemma3", "gemma"), ("tiny-gemma2", "gemma"),
                                            ("tiny-llama", "chatml")])
def test_file_without_template_gets_its_architectures_builtin(make_model, tmp_path, preset, builtin):
    """mkmodel files carry no tokenizer.chat_template: a gemma-family one is
    served with the Gemma turn format, any other with chatml; either serves."""
    s = Server(make_model(preset, "Q8_0", n_vocab=1024), tmp_path, frontends=1, extra=["--ctx-size", "1024"])
    try:
        status, body = post(s.base, {"messages": [{"role": "system", "content": "S"},
                                                  {"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 200, body
        assert f"has no chat template; using {builtin}\n" in s.log_path.read_text()
    finally:
        s.stop()
