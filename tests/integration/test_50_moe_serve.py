"""50-level: `sluice serve` on a mixture-of-experts model (tiny-qwen3moe with
Qwen3's tokenizer and chat template, CPU worker): a chat completion through
the openai client, greedy stream equal to non-stream."""
import openai
import pytest

from test_51_serve import Serve


@pytest.fixture(scope="module")
def serve(make_model, qwen3_tokenizer):
    s = Serve(make_model("tiny-qwen3moe", "Q8_0", peak=4, **qwen3_tokenizer))
    yield s
    assert s.stop() == 0, "".join(s.lines[-30:])


def test_moe_chat_greedy_stream_equals_non_stream(serve):
    client = openai.OpenAI(base_url=serve.base + "/v1", api_key="none", max_retries=0, timeout=120)
    msg = [{"role": "user", "content": "Count to five."}]
    r = client.chat.completions.create(model="tiny", messages=msg, max_tokens=8, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
    s = client.chat.completions.create(model="tiny", messages=msg, max_tokens=8, temperature=0, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
    assert text == r.choices[0].message.content
