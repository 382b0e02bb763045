"""Agent clients against the real Qwen2.5-Coder 0.5B Instruct file
(tools/fetch-models.py) served by `sluice serve`: the official openai
client's tool round trip (a forced call, the tool's result sent back, an
answer), a streamed call assembled from its deltas, LangChain's bind_tools and
with_structured_output (function_calling and json_schema), and instructor's
TOOLS and JSON modes; then reasoning content, split off a <think> block that a
small Qwen3-style template opens, switched off by chat_template_kwargs, left
inline by reasoning_format or --reasoning-format (a bad value stops the
server).

A 0.5B model makes mistakes: every test that needs a parse forces it (tool_choice
required or named, or a schema), and tool_choice auto is only asked where any
answer is acceptable. Skips when the package registry is unreachable (the
real_model fixture) or a client package is not installed."""
import json

import pytest

from serve import Server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                   "required": ["city"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two integers.",
    "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                  "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
                   "required": ["a", "b"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]

# A Qwen3-style template: the generation prompt opens <think> unless
# enable_thinking is false, when it writes an empty block.
THINK_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{%- else %}<think>\n{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def qwen(real_model):
    return real_model("qwen2.5-coder-0.5b")


@pytest.fixture(scope="module")
def server(qwen, tmp_path_factory):
    s = Server(qwen, tmp_path_factory.mktemp("agents"), frontends=1,
               extra=["--threads", "2", "--ctx-size", "2048"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)
    c.served = c.models.list().data[0].id
    return c


# ---------------------------------------------------------------- openai client

def test_openai_tools_round_trip(client):
    r = client.chat.completions.create(model=client.served, messages=ASK, tools=[WEATHER], tool_choice="required",
                                       max_tokens=60, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    call = ch.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_") and len(call.id) == 29
    args = json.loads(call.function.arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str)

    msgs = ASK + [ch.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 18, "sky": "sunny"})}]
    r2 = client.chat.completions.create(model=client.served, messages=msgs, tools=[WEATHER], tool_choice="none",
                                        max_tokens=40, temperature=0)
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content and r2.choices[0].finish_reason in ("stop", "length")


def test_openai_named_tool(client):
    r = client.chat.completions.create(
        model=client.served, messages=[{"role": "user", "content": "What is 2 plus 3?"}], tools=[WEATHER, ADD],
        tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=40, temperature=0)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "add"
    args = json.loads(call.function.arguments)
    assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())


@pytest.mark.parametrize("parallel", [True, False])
def test_openai_parallel_tool_calls(client, parallel):
    # Forced: parallel true allows one or more calls in a row, false exactly one.
    r = client.chat.completions.create(
        model=client.served, messages=[{"role": "user", "content": "Weather in Paris and in Rome?"}],
        tools=[WEATHER], tool_choice="required", parallel_tool_calls=parallel, max_tokens=120, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls and (parallel or len(calls) == 1)
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        assert c.function.name == "get_weather" and "city" in json.loads(c.function.arguments)


def test_openai_stream_tool_call_assembles(client):
    stream = client.chat.completions.create(model=client.served, messages=ASK, tools=[WEATHER],
                                            tool_choice="required", max_tokens=60, temperature=0, stream=True)
    calls, finish, content = {}, None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        assert not (d.content and d.tool_calls), "content and tool_calls never share a delta"
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id:
                assert c["id"] is None
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert content.strip() == ""
    assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert "city" in json.loads(calls[0]["arguments"])


def test_openai_auto_gives_an_answer_or_a_call(client):
    r = client.chat.completions.create(model=client.served, messages=ASK, tools=[WEATHER], max_tokens=60,
                                       temperature=0)
    m = r.choices[0].message
    if m.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls"
        for c in m.tool_calls:
            assert c.function.name == "get_weather"
            json.loads(c.function.arguments)
    else:
        assert m.content and r.choices[0].finish_reason in ("stop", "length")


# ---------------------------------------------------------------- LangChain

@pytest.fixture(scope="module")
def chat_model(server, client):
    lc = pytest.importorskip("langchain_openai")
    return lc.ChatOpenAI(base_url=server.base + "/v1", api_key="none", model=client.served, temperature=0,
                         max_tokens=80, max_retries=0, timeout=120)


def test_langchain_bind_tools(chat_model):
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return "sunny"

    msg = chat_model.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Rome?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather"
    assert isinstance(msg.tool_calls[0]["args"].get("city"), str)


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_langchain_structured_output(chat_model, method):
    pydantic = pytest.importorskip("pydantic")

    class Capital(pydantic.BaseModel):
        """A country and its capital."""
        country: str = pydantic.Field(max_length=40)
        capital: str = pydantic.Field(max_length=40)

    out = chat_model.with_structured_output(Capital, method=method).invoke("What is the capital of France?")
    assert isinstance(out, Capital) and out.country and out.capital


# ---------------------------------------------------------------- instructor

@pytest.mark.parametrize("mode", ["TOOLS", "JSON"])
def test_instructor(client, mode):
    instructor = pytest.importorskip("instructor")
    pydantic = pytest.importorskip("pydantic")

    class User(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=40)
        age: int = pydantic.Field(ge=0, le=150)

    ic = instructor.from_openai(client, mode=getattr(instructor.Mode, mode))
    u = ic.chat.completions.create(model=client.served, response_model=User, max_retries=2, max_tokens=80,
                                   temperature=0,
                                   messages=[{"role": "user", "content": "Extract: Jason is 25 years old."}])
    assert isinstance(u, User) and u.name and 0 <= u.age <= 150


# ---------------------------------------------------------------- reasoning

@pytest.fixture(scope="module")
def think_client(qwen, tmp_path_factory):
    openai = pytest.importorskip("openai")
    d = tmp_path_factory.mktemp("think")
    t = d / "think.jinja"
    t.write_text(THINK_TEMPLATE)
    s = Server(qwen, d, frontends=1, extra=["--threads", "2", "--ctx-size", "512", "--chat-template", str(t)])
    c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=120)
    c.served = c.models.list().data[0].id
    yield c
    s.stop()


HELLO = [{"role": "user", "content": "Say hello."}]


def test_reasoning_from_an_open_think(think_client):
    # The prompt ends inside <think>: what the model writes is reasoning
    # until it closes the block (this model never does, so it all is).
    r = think_client.chat.completions.create(model=think_client.served, messages=HELLO, max_tokens=12,
                                             temperature=0)
    m = r.choices[0].message
    rc = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get("reasoning_content")
    assert rc, m
    assert m.content is None or "</think>" not in m.content


def test_reasoning_streams_as_reasoning_content(think_client):
    stream = think_client.chat.completions.create(model=think_client.served, messages=HELLO, max_tokens=12,
                                                  temperature=0, stream=True)
    reasoning = ""
    for chunk in stream:
        if chunk.choices:
            d = chunk.choices[0].delta
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
    assert reasoning


def test_enable_thinking_false_reaches_the_template(think_client):
    # The template then writes an empty block itself: the prompt is longer
    # and no longer ends inside <think>, so nothing is reasoning (this model,
    # not trained on the empty block, may answer with nothing at all).
    on = think_client.chat.completions.create(model=think_client.served, messages=HELLO, max_tokens=12,
                                              temperature=0)
    off = think_client.chat.completions.create(model=think_client.served, messages=HELLO, max_tokens=12,
                                               temperature=0,
                                               extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens > on.usage.prompt_tokens
    assert not (off.choices[0].message.model_extra or {}).get("reasoning_content")


def test_reasoning_format_inline_leaves_text_alone(think_client):
    r = think_client.chat.completions.create(model=think_client.served, messages=HELLO, max_tokens=12,
                                             temperature=0, extra_body={"reasoning_format": "inline"})
    m = r.choices[0].message
    assert m.content
    assert not (m.model_extra or {}).get("reasoning_content")


def test_server_reasoning_format_inline(qwen, tmp_path):
    openai = pytest.importorskip("openai")
    t = tmp_path / "think.jinja"
    t.write_text(THINK_TEMPLATE)
    s = Server(qwen, tmp_path, frontends=1, extra=["--threads", "2", "--ctx-size", "512", "--chat-template", str(t),
                                                   "--reasoning-format", "inline"])
    try:
        status, body = s.get("/v1/effective-config")
        front = json.loads(body)["frontend"]
        assert front["reasoning_format"] == "inline" and front["tool_format"] == "none"
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=120)
        r = c.chat.completions.create(model=c.models.list().data[0].id, messages=HELLO, max_tokens=12, temperature=0)
        assert r.choices[0].message.content
        assert not (r.choices[0].message.model_extra or {}).get("reasoning_content")
        # the request's own setting wins over the server's
        r = c.chat.completions.create(model=c.models.list().data[0].id, messages=HELLO, max_tokens=12, temperature=0,
                                      extra_body={"reasoning_format": "separate"})
        assert (r.choices[0].message.model_extra or {}).get("reasoning_content")
    finally:
        s.stop()


def test_effective_config_names_the_tool_format(server):
    status, body = server.get("/v1/effective-config")
    front = json.loads(body)["frontend"]
    assert front["tool_format"] == "hermes" and front["reasoning_format"] == "separate"


def test_bad_reasoning_format_stops_the_server(qwen, tmp_path):
    import subprocess
    from paths import SLUICE
    r = subprocess.run([SLUICE, "serve", "-m", str(qwen), "--port", "0", "--frontends", "1", "--threads", "1",
                        "--kv-memory", "64M", "--drain-delay", "0", "--admin-socket", str(tmp_path / "a.sock"),
                        "--reasoning-format", "hidden"], capture_output=True, text=True, timeout=120)
    assert "--reasoning-format: 'hidden' is not separate or inline" in r.stderr, r.stderr[-2000:]
    assert r.returncode != 0


def test_logprobs_survive_the_call_parser(client):
    # Tokens held back while a call was decided still get their logprobs,
    # on a later chunk: every generated token is covered once.
    kw = dict(model=client.served, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=60,
              temperature=0, logprobs=True)
    whole = client.chat.completions.create(**kw)
    n_whole = len(whole.choices[0].logprobs.content)
    n_stream, usage = 0, None
    for chunk in client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            n_stream += len(chunk.choices[0].logprobs.content)
    assert n_stream == n_whole and 0 < n_whole <= usage.completion_tokens


# ---------------------------------------------------------------- parallel_tool_calls false, tool_choice auto
# A model free to call (tool_choice auto) may write two calls; parallel_tool_calls
# false makes the front end end the answer at the first complete one. A small
# model cannot be made to write two calls on demand, so this runs on
# tools/fe-harness, whose echo worker "generates" the rendered prompt: a user
# message holding two calls is an answer holding two calls (the template's
# own <tool_call> example in its tools section is not JSON, so it stays content).

TWO_CALLS = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\nAfter the calls.')


@pytest.fixture(scope="module")
def echo_harness(make_model):
    from fe_harness import Harness, qwen3_model
    h = Harness(qwen3_model(make_model), n=1)
    yield h
    assert h.stop() == 0


def echo_chat(h, stream, parallel, n=1):
    from fe_harness import sse_events
    body = {"messages": [{"role": "user", "content": TWO_CALLS}], "tools": [WEATHER], "tool_choice": "auto",
            "parallel_tool_calls": parallel, "stream": stream, "n": n}
    s, _, b = h.post("/v1/chat/completions", body)
    assert s == 200, b
    if not stream:
        o = json.loads(b)
        return [(c["message"].get("tool_calls") or [], c["message"]["content"] or "", c["finish_reason"])
                for c in o["choices"]], o["usage"]
    calls = [dict() for _ in range(n)]
    content = [""] * n
    fins = [None] * n
    for ev in sse_events(b):
        if ev == "[DONE]":
            continue
        for c in json.loads(ev)["choices"]:
            i, d = c["index"], c["delta"]
            content[i] += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                e = calls[i].setdefault(tc["index"], {"function": {"name": "", "arguments": ""}})
                e["function"]["name"] += tc.get("function", {}).get("name") or ""
                e["function"]["arguments"] += tc.get("function", {}).get("arguments") or ""
            fins[i] = c["finish_reason"] or fins[i]
    return [([calls[i][k] for k in sorted(calls[i])], content[i], fins[i]) for i in range(n)], None


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_false_under_auto_ends_at_the_first_call(echo_harness, stream):
    both, u2 = echo_chat(echo_harness, stream, True)
    calls, content, fin = both[0]
    assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Paris", "Rome"]
    assert "After the calls." in content and fin == "tool_calls"
    for calls, content, fin in echo_chat(echo_harness, stream, False, n=2)[0]:
        assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris"}]
        assert fin == "tool_calls"
        assert "After the calls." not in content and "Rome" not in content   # what came after is dropped
    if not stream:
        one, u1 = echo_chat(echo_harness, False, False)
        assert u1["completion_tokens"] < u2["completion_tokens"]            # the sequence was stopped there
