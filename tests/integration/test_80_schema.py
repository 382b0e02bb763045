"""80-level: docs/openapi.yaml against the real `sluice serve`.

schemathesis generates requests from the description (its examples, boundary
values of every constraint, random valid and invalid bodies, wrong methods)
and fails on any 5xx, any status, content type or body the description does
not list, including each server-sent event's JSON. A second pass reads every
recorded 200 of the two generation routes, whole or streamed, into the
`openai` package's own types, so what the description allows is also what
OpenAI clients accept. Then regressions the run found."""
import json
import subprocess
import sys
import time

import openai
import pytest
import yaml
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_choice import CompletionChoice

from paths import REPO, data_path
from serve import Server

SPEC = REPO / "docs" / "openapi.yaml"
KEY = "sk-schema-test"
ALIAS = "tiny"
SEED = 20261130
MAX_EXAMPLES = 20   # per operation and phase; about a minute here on a loaded 2-core VM
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


class CompletionChunkChoice(CompletionChoice):
    """openai's CompletionChoice requires finish_reason, yet OpenAI's own
    stream sends null until the last chunk (the SDK builds stream objects
    without validating them). Only that field is relaxed."""
    finish_reason: str | None = None


class CompletionChunk(Completion):
    choices: list[CompletionChunkChoice]


@pytest.fixture(scope="module")
def server(make_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("schema")
    model = make_model("tiny-qwen3", "Q8_0", tokenizer=str(data_path("tokenizers/qwen3/tokenizer.json")),
                       tokenizer_config=str(data_path("tokenizers/qwen3/tokenizer_config.json")), peak=4)
    # A small context and default max_tokens keep each generated request to a
    # few decode steps; an API key makes the 401 paths reachable.
    s = Server(model, d, frontends=1, extra=["--ctx-size", "64", "--default-max-tokens", "4",
                                             "--model-alias", ALIAS, "--api-key", KEY])
    yield s
    s.stop()


def sse_payloads(text):
    """The data of each event, in order ([DONE] included); comments skipped."""
    out = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = [ln[5:].removeprefix(" ") for ln in event.split("\n") if ln.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out


def unscored_to_typed(obj):
    """An echo's logprobs open with the prompt's first token, which nothing
    predicts: its token_logprobs and top_logprobs entries are null, as OpenAI
    sends them. openai's Logprobs type has no null entries (the client reads
    the nulls all the same, unvalidated: test_71_echo), so for validation the
    nulls become a typed stand-in; any other null still fails."""
    for c in obj.get("choices") or []:
        lp = c.get("logprobs") or {}
        if lp.get("token_logprobs") and lp["token_logprobs"][0] is None:
            lp["token_logprobs"][0] = 0.0
        if lp.get("top_logprobs") and lp["top_logprobs"][0] is None:
            lp["top_logprobs"][0] = {}
    return obj


def check_openai_types(path, content_type, body, echo=False):
    """Reads one 200 of a generation route into openai's types; returns
    "stream" or "whole". echo: the request asked for echo (completions)."""
    chat = path == "/v1/chat/completions"
    fix = unscored_to_typed if echo and not chat else (lambda o: o)
    if content_type.startswith("text/event-stream"):
        events = sse_payloads(body)
        assert events and events[-1] == "[DONE]", f"stream did not end with [DONE]: {body[-300:]!r}"
        for data in events[:-1]:
            obj = json.loads(data)
            assert "error" not in obj, data
            (ChatCompletionChunk if chat else CompletionChunk).model_validate(fix(obj))
        return "stream"
    assert content_type.startswith("application/json"), content_type
    (ChatCompletion if chat else Completion).model_validate(fix(json.loads(body)))
    return "whole"


def test_schemathesis_finds_nothing(server, tmp_path):
    report = tmp_path / "report"
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", str(SPEC), "--url", server.base,
           "-H", f"Authorization: Bearer {KEY}", "--checks", CHECKS, "--max-examples", str(MAX_EXAMPLES),
           # No example database: it would replay earlier runs' cases and break the fixed seed.
           "--seed", str(SEED), "--generation-database", "none", "--workers", "1", "--request-timeout", "60",
           "--no-color",
           "--report", "vcr", "--report-dir", str(report)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    took = time.time() - t0
    assert r.returncode == 0, f"schemathesis (rc {r.returncode}):\n{r.stdout[-12000:]}\n{r.stderr[-3000:]}"

    cassette = yaml.load(next(report.glob("vcr-*.yaml")).read_text(), Loader=getattr(yaml, "CSafeLoader",
                                                                                        yaml.SafeLoader))
    interactions = [i for i in cassette["http_interactions"] if i.get("response")]
    seen = {}
    for it in interactions:
        req, res = it["request"], it["response"]
        path = "/" + req["uri"].split("/", 3)[3].split("?")[0]
        if path in ("/chat/completions", "/completions"):
            path = "/v1" + path   # the same route without /v1
        if req["method"] != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            continue
        if res["status"]["code"] != "200":
            continue
        body = res["body"]
        text = body["string"] if "string" in body else __import__("base64").b64decode(body["base64_string"]).decode()
        ctype = res["headers"].get("content-type", [""])[0]
        try:
            try:
                echo = json.loads(req["body"].get("string", "") or "{}").get("echo") is True
            except (ValueError, AttributeError):
                echo = False
            kind = check_openai_types(path, ctype, text, echo)
        except Exception as e:  # noqa: BLE001 - name the case that failed
            pytest.fail(f"{path} 200 does not parse into openai's types: {e}\nrequest: "
                        f"{req['body'].get('string', '')[:2000]}\nresponse: {text[:2000]}")
        seen[(path, kind)] = seen.get((path, kind), 0) + 1
    print(f"schemathesis: {len(interactions)} requests in {took:.0f}s; 200s read into openai types: {seen}")
    # The run must have reached the worker on both routes, whole and streamed
    # (the description's examples guarantee one of each).
    for key in [(p, k) for p in ("/v1/chat/completions", "/v1/completions") for k in ("whole", "stream")]:
        assert seen.get(key, 0) >= 1, (key, seen)


def test_description_lists_every_route(server):
    """Every route the server answers is described, and nothing else."""
    spec = yaml.safe_load(SPEC.read_text())
    v1 = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{model}", "/v1/effective-config"}
    assert set(spec["paths"]) == v1 | {p[3:] for p in v1} | {"/health", "/ready", "/metrics", "/tokenize",
                                                             "/detokenize", "/", "/index.html", "/webui/app.js",
                                                             "/webui/style.css"}
    # A route without /v1 is its /v1 twin's operation, under its own operationId.
    for p in v1:
        (method, op), = spec["paths"][p].items()
        twin = spec["paths"][p[3:]][method]
        assert twin["operationId"] == op["operationId"] + "NoV1" and twin["responses"] == op["responses"]
    assert server.get("/v1/nope")[0] in (401, 404)


def test_regressions_openai_client(server):
    """Requests the schemathesis run found refused with 400 though OpenAI
    (and the description) accept them."""
    client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=60)
    # A tool-call round trip as OpenAI clients send it: the assistant turn has
    # content null; Qwen3's template cannot take None (it tests
    # `'</think>' in content`), nor an absent content.
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
    for assistant in ({"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "assistant", "tool_calls": [call]}):
        r = client.chat.completions.create(model=ALIAS, max_tokens=2, messages=[
            {"role": "user", "content": "Weather in Paris?"}, assistant,
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])
        assert r.choices[0].finish_reason in ("stop", "length")
    # Content as text parts: Qwen3's template calls content.startswith().
    r = client.chat.completions.create(model=ALIAS, max_tokens=2, messages=[
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Count"}, {"type": "text", "text": "to ten"}]}])
    assert r.usage.completion_tokens >= 1
    # A positive value too small for a float used to round to 0 and be refused.
    r = client.completions.create(model=ALIAS, prompt="Once", max_tokens=2, top_p=5e-324,
                                  extra_body={"repetition_penalty": 5e-324})
    assert r.choices[0].finish_reason in ("stop", "length")
