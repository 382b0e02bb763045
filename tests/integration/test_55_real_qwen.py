"""The real Qwen2.5-Coder 0.5B Instruct file (tools/fetch-models.py) served
by `sluice serve` and asked through the official openai client: a chat
request's usage.prompt_tokens is llama.cpp's token count of the same
chat-formatted prompt (the file's own template, rendered by jinja2 as HF
does); a completion's prompt count is llama.cpp's, its first token is
llama.cpp's greedy pick with a logprob within 0.1, and its text is the
concatenation of its logprob tokens. Skips only when the package registry is
unreachable (the real_model fixture)."""
import numpy as np
import pytest

from serve import Server

MESSAGES = [{"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Name three sorting algorithms."}]
PROMPT = "def is_prime(n):"


@pytest.fixture(scope="module")
def qwen(real_model):
    return real_model("qwen2.5-coder-0.5b")


@pytest.fixture(scope="module")
def server(qwen, tmp_path_factory):
    s = Server(qwen, tmp_path_factory.mktemp("qwen"), frontends=1, extra=["--threads", "2", "--ctx-size", "512"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def llm(qwen):
    llama_cpp = pytest.importorskip("llama_cpp")
    m = llama_cpp.Llama(model_path=str(qwen), n_ctx=256, n_threads=2, logits_all=True, verbose=False)
    yield m
    m.close()


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="none")
    c.served = c.models.list().data[0].id
    return c


def test_chat_prompt_tokens_are_llamacpps(client, llm):
    jinja2 = pytest.importorskip("jinja2.sandbox")
    tmpl = jinja2.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        llm.metadata["tokenizer.chat_template"])
    rendered = tmpl.render(messages=MESSAGES, add_generation_prompt=True)
    want = len(llm.tokenize(rendered.encode(), add_bos=True, special=True))
    r = client.chat.completions.create(model=client.served, messages=MESSAGES, max_tokens=8, temperature=0)
    assert r.usage.prompt_tokens == want
    assert r.usage.completion_tokens > 0 and r.choices[0].message.content


def test_completion_matches_llamacpp(client, llm):
    ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
    llm.reset()
    llm.eval(ids)
    row = np.asarray(llm.scores[len(ids) - 1], dtype=np.float64)
    first = int(np.argmax(row))
    first_lp = float(row[first] - np.logaddexp.reduce(row))
    r = client.completions.create(model=client.served, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=1)
    c = r.choices[0]
    assert r.usage.prompt_tokens == len(ids)
    assert c.logprobs.tokens[0] == llm.detokenize([first], prev_tokens=ids).decode()
    assert abs(c.logprobs.token_logprobs[0] - first_lp) <= 0.1, (c.logprobs.token_logprobs[0], first_lp)
    assert "".join(c.logprobs.tokens) == c.text
