"""The README's first command: `sluice serve` with no model. With the model
cache empty it serves the project's trained 12M model, which answers a chat
request in English through the official openai client; with the real default
model in the cache (tools/fetch-models.py) it serves that one, Qwen2.5-Coder
0.5B Instruct. The log line and the effective config name the file."""
import os
import pathlib
import shutil

import pytest

from paths import REPO
from serve import Server

DEFAULT = REPO / "models/default/sluice-default-q8_0.gguf"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def served_model(s):
    return s.admin("effective-config")["config"]["model"]["value"]


@pytest.mark.skipif(not DEFAULT.exists(), reason="models/default is not there")
def test_serve_without_model_answers_chat(tmp_path):
    openai = pytest.importorskip("openai")
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    s = Server(None, tmp_path, frontends=1, env=dict(os.environ, SLUICE_MODEL_CACHE=str(empty)))
    try:
        assert os.path.samefile(served_model(s), DEFAULT)
        assert "serving" in s.log_path.read_text() and "the shipped 12M model" in s.log_path.read_text()
        client = openai.OpenAI(base_url=s.base + "/v1", api_key="none")
        r = client.chat.completions.create(model=client.models.list().data[0].id,
                                           messages=[{"role": "user", "content": "In the beginning"}],
                                           max_tokens=40, temperature=0)
        text = r.choices[0].message.content
        words = [w.strip(".,;:!?'\"()").lower() for w in text.split()]
        dictionary = set(pathlib.Path("/usr/share/dict/words").read_text().lower().split())
        known = [w for w in words if w in dictionary]
        assert len(words) >= 5 and len(known) >= 0.7 * len(words), text
        assert r.usage.completion_tokens > 0
    finally:
        s.stop()


def test_serve_without_model_prefers_the_cached_real_model(tmp_path, real_model):
    openai = pytest.importorskip("openai")
    cache = tmp_path / "cache"
    cache.mkdir()
    # a link into a cache of its own: the file is 490 MB, and the name and size are what counts
    os.symlink(real_model("qwen2.5-coder-0.5b"), cache / QWEN)
    # --ctx-size: the harness's 256M KV cache does not hold one 32k-token sequence of this model
    s = Server(None, tmp_path, frontends=1, extra=["--ctx-size", "2048"],
               env=dict(os.environ, SLUICE_MODEL_CACHE=str(cache)))
    try:
        assert served_model(s) == str(cache / QWEN)
        assert f"serving {cache / QWEN}, Qwen2.5-Coder 0.5B Instruct" in s.log_path.read_text()
        client = openai.OpenAI(base_url=s.base + "/v1", api_key="none")
        r = client.chat.completions.create(model=client.models.list().data[0].id,
                                           messages=[{"role": "user", "content": "Say hello."}],
                                           max_tokens=4, temperature=0)
        assert r.usage.completion_tokens > 0 and r.choices[0].message.content
    finally:
        s.stop()


def test_a_file_of_the_wrong_size_in_the_cache_is_not_served(tmp_path):
    if not DEFAULT.exists():
        pytest.skip("models/default is not there")
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(DEFAULT, cache / QWEN)      # a GGUF, but not the verified file
    s = Server(None, tmp_path, frontends=1, env=dict(os.environ, SLUICE_MODEL_CACHE=str(cache)))
    try:
        assert os.path.samefile(served_model(s), DEFAULT)
    finally:
        s.stop()
