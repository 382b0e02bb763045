"""50-level: structured outputs end to end on the shipped 12M model
(models/default), through the official openai client: every constraint form
(response_format json_object and json_schema, grammar, guided_regex,
guided_choice) shapes what the real worker generates, whole and streamed, and
what the front end cannot enforce or does not know is a 400 naming it; the
schema compiler's whole reference table and forced tool calls hold through the
server too.

The model is small and knows nothing of JSON; the grammar alone makes the
output valid, which is the point. Schemas here bound every value (enums,
short strings), so the output ends by itself well before max_tokens."""
import json
import re

import jsonschema
import openai
import pytest

from paths import REPO
from serve import Server

DEFAULT = REPO / "models/default/sluice-default-q8_0.gguf"
MSG = [{"role": "user", "content": "Describe the weather today."}]

SCHEMA = {
    "type": "object",
    "properties": {
        "sky": {"type": "string", "enum": ["clear", "cloudy", "rain"]},
        "windy": {"type": "boolean"},
        "temp": {"enum": [10, 20, 30]},
        "note": {"type": "string", "maxLength": 12},
    },
    "required": ["sky", "windy", "temp", "note"],
    "additionalProperties": False,
}

pytestmark = pytest.mark.skipif(not DEFAULT.exists(), reason="models/default is not there")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(DEFAULT, tmp_path_factory.mktemp("structured"), frontends=1, extra=["--model-alias", "m"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)


def chat(client, stream=False, **kw):
    """The text of one greedy chat completion and its finish_reason."""
    kw.setdefault("max_tokens", 200)
    if not stream:
        r = client.chat.completions.create(model="m", messages=MSG, temperature=0, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason
    chunks = list(client.chat.completions.create(model="m", messages=MSG, temperature=0, stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(fin) == 1, chunks
    return text, fin[0]


def bad_request(call):
    with pytest.raises(openai.BadRequestError) as e:
        call()
    return e.value.body if isinstance(e.value.body, dict) and "message" in e.value.body else e.value.body["error"]


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_validates(client, stream):
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}}
    text, fin = chat(client, stream, response_format=fmt)
    assert fin == "stop", text
    jsonschema.validate(json.loads(text), SCHEMA)


def test_json_schema_strict_false_still_constrains(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA, "strict": False}}
    text, fin = chat(client, response_format=fmt)
    assert fin == "stop", text
    jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize("stream", [False, True])
def test_json_object_output_is_an_object(client, stream):
    text, fin = chat(client, stream, response_format={"type": "json_object"}, max_tokens=400)
    assert text.lstrip().startswith("{"), text
    # Any object may be long; cut by max_tokens it is a prefix, else it parses.
    if fin == "stop":
        assert isinstance(json.loads(text), dict), text


def test_extension_schema_fields(client):
    for field in ("json_schema", "guided_json"):
        text, fin = chat(client, extra_body={field: SCHEMA})
        assert fin == "stop", (field, text)
        jsonschema.validate(json.loads(text), SCHEMA)


def test_grammar_field(client):
    for field in ("grammar", "guided_grammar"):
        text, fin = chat(client, extra_body={field: 'root ::= "yes" | "no" | "maybe " [a-z]{1,5}'})
        assert fin == "stop" and re.fullmatch(r"yes|no|maybe [a-z]{1,5}", text), (field, text)


@pytest.mark.parametrize("stream", [False, True])
def test_guided_regex(client, stream):
    text, fin = chat(client, stream, extra_body={"guided_regex": r"[0-9]{3}-[A-Z]{2}(!|\?)"})
    assert fin == "stop" and re.fullmatch(r"[0-9]{3}-[A-Z]{2}(!|\?)", text), text


def test_guided_choice_chat_and_completions(client):
    choices = ["sunny", "rainy", "snowy and \"cold\""]
    text, fin = chat(client, extra_body={"guided_choice": choices})
    assert fin == "stop" and text in choices, text
    r = client.completions.create(model="m", prompt="The weather is", max_tokens=50, temperature=0,
                                  extra_body={"guided_choice": choices})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text in choices, r
    s = list(client.completions.create(model="m", prompt="The weather is", max_tokens=50, temperature=0,
                                       stream=True, extra_body={"guided_choice": choices}))
    assert "".join(c.choices[0].text for c in s if c.choices) == r.choices[0].text


def test_bad_schema_names_keyword_and_path(client):
    schema = {"type": "object", "properties": {"a": {"type": "string", "if": {"minLength": 1}}}}
    e = bad_request(lambda: chat(client, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
    assert e["param"] == "response_format.json_schema.schema", e
    assert "'if'" in e["message"] and "/properties/a" in e["message"], e
    e = bad_request(lambda: chat(client, extra_body={"guided_json": schema}))
    assert e["param"] == "guided_json" and "'if'" in e["message"], e


def test_bad_constraints_are_400(client):
    e = bad_request(lambda: chat(client, extra_body={"grammar": "root ::= undefined-rule"}))
    assert e["param"] == "grammar", e
    e = bad_request(lambda: chat(client, extra_body={"guided_regex": "(a"}))
    assert e["param"] == "guided_regex", e
    e = bad_request(lambda: chat(client, response_format={"type": "json_schema",
                                                          "json_schema": {"name": "bad name", "schema": {}}}))
    assert e["param"] == "response_format.json_schema.name", e
    e = bad_request(lambda: chat(client, response_format={"type": "yaml"}))
    assert e["param"] == "response_format.type", e
    e = bad_request(lambda: chat(client, response_format={"type": "json_object"},
                                 extra_body={"guided_choice": ["a"]}))
    assert e["param"] == "guided_choice" and "only one" in e["message"], e


def test_unknown_and_refused_fields_are_400(client):
    e = bad_request(lambda: chat(client, extra_body={"bogus_field": 1}))
    assert e["param"] == "bogus_field" and "unrecognized request argument 'bogus_field'" in e["message"], e
    e = bad_request(lambda: chat(client, extra_body={"audio": {"voice": "alloy", "format": "wav"}}))
    assert e["param"] == "audio" and "text only" in e["message"] and e["code"] == "unsupported", e
    e = bad_request(lambda: client.completions.create(model="m", prompt="x", max_tokens=2, best_of=2))
    assert e["param"] == "best_of" and e["code"] == "unsupported", e
    e = bad_request(lambda: client.completions.create(model="m", prompt="x", max_tokens=0))   # 0 needs echo
    assert e["param"] == "max_tokens", e
    # documented no-ops pass
    text, _ = chat(client, max_tokens=2, store=False, metadata={"k": "v"}, user="u", service_tier="auto")
    assert isinstance(text, str)


def test_grammar_past_the_worker_limit_is_400(client):
    # Compiles (under the engine's 256 KiB) but is longer than the grammar
    # text a mailbox carries (64 KiB by default): refused before queueing.
    e = bad_request(lambda: chat(client, extra_body={"grammar": 'root ::= "' + "a" * 70000 + '"'}))
    assert e["param"] == "grammar" and "does not accept" in e["message"], e


def _schema_table():
    """The schema compiler's reference table (tests/reference/test_json_schema.py):
    the same 60-odd schemas, here through the server and the real worker."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("json_schema_table", REPO / "tests/reference/test_json_schema.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SCHEMAS


TABLE = _schema_table()


@pytest.mark.parametrize("stream", [False, True])
def test_schema_table_every_finished_response_validates(client, stream):
    """Each table schema once, sampled (seeded): a response that ended by itself
    parses and validates; one cut by max_tokens is a prefix of a valid document
    (documented), and such cuts stay rare on this table."""
    cut = []
    for name, schema in TABLE.items():
        rf = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}
        kw = dict(response_format=rf, max_tokens=300, temperature=1.0, seed=7)
        if not stream:
            r = client.chat.completions.create(model="m", messages=MSG, **kw)
            text, fin = r.choices[0].message.content, r.choices[0].finish_reason
        else:
            chunks = list(client.chat.completions.create(model="m", messages=MSG, stream=True, **kw))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason][-1]
        if fin == "length":
            cut.append(name)
            continue
        assert fin == "stop", (name, fin)
        jsonschema.validate(json.loads(text), schema if schema is not True else {})
    print(f"{len(TABLE)} schemas, {len(cut)} cut by max_tokens: {cut}")
    assert len(cut) <= len(TABLE) // 10, f"cut by max_tokens: {cut}"


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0}},
        "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "noop"}},
]


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_choice_always_gives_a_valid_call(client, stream):
    """tool_choice required on a model that knows nothing of tools: every
    sampled answer is a call of a declared tool whose arguments validate,
    or runs out of tokens inside one: noop's arguments are any object, so
    a key is a string of any length, and at temperature 1 the 12M model can
    wander inside it (seed 2 does on the 8-bit path: 480 tokens of prose in
    a key). Most seeds must finish their call."""
    params = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in TOOLS}
    finished = 0
    for seed in range(8):
        kw = dict(model="m", messages=MSG, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                  max_tokens=300, temperature=1.0, seed=seed)
        if not stream:
            r = client.chat.completions.create(**kw)
            fin, calls = r.choices[0].finish_reason, [(c.function.name, c.function.arguments)
                                                      for c in r.choices[0].message.tool_calls or []]
        else:
            parts = {}
            fin = None
            for c in client.chat.completions.create(stream=True, **kw):
                if not c.choices:
                    continue
                fin = c.choices[0].finish_reason or fin
                for d in c.choices[0].delta.tool_calls or []:
                    p = parts.setdefault(d.index, ["", ""])
                    p[0] += (d.function.name or "") if d.function else ""
                    p[1] += (d.function.arguments or "") if d.function else ""
            calls = [tuple(parts[i]) for i in sorted(parts)]
        if fin == "length" and not calls:
            continue   # cut inside the call: the budget, never a stop outside the grammar
        assert fin == "tool_calls" and len(calls) == 1, (seed, fin, calls)
        finished += 1
        name, args = calls[0]
        assert name in params, (seed, name)
        jsonschema.validate(json.loads(args), params[name])
    assert finished >= 6, finished
