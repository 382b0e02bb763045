"""The README's first command: `sluice serve` with no model answers a chat
request from the project's trained default model, through the official
openai client."""
import pathlib

import pytest

from paths import REPO
from serve import Server

DEFAULT = REPO / "models/default/sluice-default-q8_0.gguf"


@pytest.mark.skipif(not DEFAULT.exists(), reason="models/default is not there")
def test_serve_without_model_answers_chat(tmp_path):
    openai = pytest.importorskip("openai")
    s = Server(None, tmp_path, frontends=1)
    try:
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
