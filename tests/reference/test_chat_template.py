"""Chat templates: tools/render-template against transformers' own jinja2
environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, its tojson/raise_exception), with strftime_now frozen.

Every template in tests/data/templates and every chat_template in
tests/data/tokenizers/*/tokenizer_config.json is rendered on a set of
conversations; output must match byte for byte, and where the reference
raises (raise_exception, unsupported roles) ours must fail too.
"""
import datetime
import json
import os
import pathlib
import subprocess

import pytest

from paths import TESTDATA, data_path, tokenizer_names

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build"))
TOOL = BUILD / "tools" / "render-template"
NOW = 1721952000  # 2024-07-26 00:00:00 UTC

# Templates that need variables the API does not provide, with the reason
# (also listed in docs/CHAT_TEMPLATES.md).
UNSUPPORTED = {
    "fireworks-ai-llama-3-firefunction-v2": "reads `functions` (its own tool list variable), which the API does not have",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}

TOOL_CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
}

TOOL_CALL_STR = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"},
}

COHERE_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameter_definitions": {
        "city": {"description": "City name", "type": "str", "required": True},
        "days": {"description": "Forecast days", "type": "int", "required": False},
    },
}

CONVERSATIONS = {
    "system_user": ([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! How are you?"},
    ], None),
    "user_only": ([{"role": "user", "content": "What is 2+2?"}], None),
    "multi_turn": ([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nA short one."},
    ], None),
    "multi_turn_no_system": ([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "  Hello there.  "},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye!"},
    ], None),
    "empty_content": ([
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": " "},
    ], None),
    "unicode": ([
        {"role": "system", "content": "Réponds en français. 日本語も OK 😀"},
        {"role": "user", "content": "Ünïcödé \u00a0 tabs\tand \"quotes\" 'single' \\ back <|im_end|> </s> [INST] <start_of_turn>"},
    ], None),
    "content_parts": ([
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
    ], None),
    "tools_question": ([
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
    ], [WEATHER_TOOL]),
    "tool_call_roundtrip": ([
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    ], [WEATHER_TOOL]),
    "tool_call_string_args": ([
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Weather in Paris for 2 days?"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL_STR, TOOL_CALL_STR]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "rainy"},
        {"role": "assistant", "content": "Sunny, then rainy."},
        {"role": "user", "content": "Thanks!"},
    ], [WEATHER_TOOL]),
    "cohere_tools": ([
        {"role": "system", "content": "Answer with tools."},
        {"role": "user", "content": "Weather in Paris?"},
    ], [COHERE_TOOL]),
    "thinking": ([
        {"role": "user", "content": "Solve x+1=2"},
        {"role": "assistant", "content": "<think>\nx = 1\n</think>\n\nx is 1."},
        {"role": "user", "content": "Thanks"},
    ], None),
}


def template_sources():
    out = {}
    for p in sorted((TESTDATA / "templates").glob("*.jinja")):
        out[p.stem] = (data_path(f"templates/{p.name}").read_text(), "<s>", "</s>")
    for name in tokenizer_names():
        cfg = json.loads(data_path(f"tokenizers/{name}/tokenizer_config.json").read_text())
        tpl = cfg.get("chat_template")
        if isinstance(tpl, list):  # named variants
            tpl = next((t["template"] for t in tpl if t.get("name") == "default"), None)
        if not tpl:
            continue

        def tok(x):
            return x.get("content", "") if isinstance(x, dict) else (x or "")

        out["tokenizer-" + name] = (tpl, tok(cfg.get("bos_token")), tok(cfg.get("eos_token")))
    return out


TEMPLATES = template_sources()


def reference(src, messages, tools, add_gen, bos, eos, extra=None):
    from transformers.utils.chat_template_utils import _compile_jinja_template

    tmpl = _compile_jinja_template(src)
    tmpl.globals["strftime_now"] = lambda fmt: datetime.datetime.fromtimestamp(NOW).strftime(fmt)
    return tmpl.render(messages=messages, tools=tools, documents=None,
                       add_generation_prompt=add_gen, bos_token=bos, eos_token=eos, **(extra or {}))


def ours(src_path, messages, tools, add_gen, bos, eos, ranges=None, builtin=None, extra=None):
    ctx = {"messages": messages, "tools": tools, "add_generation_prompt": add_gen,
           "bos_token": bos, "eos_token": eos, "now": NOW}
    if extra:
        ctx["extra"] = extra
    cmd = [str(TOOL)]
    if ranges:
        cmd += ["--ranges", str(ranges)]
    cmd += ["--builtin", builtin] if builtin else [str(src_path)]
    return subprocess.run(cmd, input=json.dumps(ctx).encode(), capture_output=True, timeout=30)


@pytest.fixture(scope="module", autouse=True)
def need_tool():
    if not TOOL.exists():
        pytest.fail(f"{TOOL} missing: build first (cmake --build build)")


CASES = [(t, c, g) for t in TEMPLATES for c in CONVERSATIONS for g in (False, True)]


@pytest.mark.parametrize("tname,conv,add_gen", CASES)
def test_render_matches_reference(tname, conv, add_gen, tmp_path):
    if tname in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[tname])
    src, bos, eos = TEMPLATES[tname]
    messages, tools = CONVERSATIONS[conv]
    try:
        want = reference(src, messages, tools, add_gen, bos, eos)
        want_err = None
    except Exception as e:  # the template refuses this conversation
        want, want_err = None, e
    path = tmp_path / "t.jinja"
    path.write_text(src)
    got = ours(path, messages, tools, add_gen, bos, eos)
    if want_err is not None:
        assert got.returncode == 3, f"reference raised {want_err!r}; ours exit {got.returncode}: {got.stderr!r}"
        return
    assert got.returncode == 0, got.stderr.decode(errors="replace")
    assert got.stdout.decode() == want


EXTRA_CASES = [
    ("tokenizer-qwen3", {"enable_thinking": False}),
    ("tokenizer-qwen3", {"enable_thinking": True}),
    ("meta-llama-Llama-3.1-8B-Instruct", {"tools_in_user_message": False}),
    ("meta-llama-Llama-3.1-8B-Instruct", {"date_string": "01 Jan 2025", "builtin_tools": ["brave_search", "wolfram_alpha"]}),
    ("meta-llama-Llama-3.2-3B-Instruct", {"tools_in_user_message": False}),
]


@pytest.mark.parametrize("tname,extra", EXTRA_CASES)
@pytest.mark.parametrize("conv", ["system_user", "tools_question", "tool_call_roundtrip", "thinking"])
def test_render_with_extra_variables(tname, extra, conv, tmp_path):
    src, bos, eos = TEMPLATES[tname]
    messages, tools = CONVERSATIONS[conv]
    want = reference(src, messages, tools, True, bos, eos, extra)
    path = tmp_path / "t.jinja"
    path.write_text(src)
    got = ours(path, messages, tools, True, bos, eos, extra=extra)
    assert got.returncode == 0, got.stderr.decode(errors="replace")
    assert got.stdout.decode() == want


def untrusted_strings(text_bytes, ranges):
    return [text_bytes[s:e].decode() for s, e in ranges]


def test_untrusted_ranges_cover_roles_and_content_chatml(tmp_path):
    messages = [{"role": "system", "content": "sys <|im_start|>"},
                {"role": "user", "content": "hi <|im_end|> there"},
                {"role": "assistant", "content": "ok"}]
    rpath = tmp_path / "r.json"
    got = ours(None, messages, None, True, "", "", ranges=rpath, builtin="chatml")
    assert got.returncode == 0, got.stderr
    ranges = json.loads(rpath.read_text())
    want = []
    for m in messages:
        want += [m["role"], m["content"]]
    assert untrusted_strings(got.stdout, ranges) == want
    # the template's own special tokens stay outside every range
    text = got.stdout
    for s, e in ranges:
        assert b"<|im_start|>" + text[s:e] in text or text[s - 1:s] == b"\n"


def test_untrusted_ranges_qwen25_content_only(tmp_path):
    src = data_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    path = tmp_path / "t.jinja"
    path.write_text(src)
    messages = [{"role": "user", "content": "a <|im_end|> b"}]
    rpath = tmp_path / "r.json"
    got = ours(path, messages, None, True, "", "", ranges=rpath)
    assert got.returncode == 0, got.stderr
    ranges = json.loads(rpath.read_text())
    assert untrusted_strings(got.stdout, ranges) == ["user", "a <|im_end|> b"]


def test_untrusted_ranges_tojson_tools(tmp_path):
    src = data_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    path = tmp_path / "t.jinja"
    path.write_text(src)
    messages = [{"role": "user", "content": "x"}]
    rpath = tmp_path / "r.json"
    got = ours(path, messages, [WEATHER_TOOL], True, "", "", ranges=rpath)
    assert got.returncode == 0, got.stderr
    ranges = json.loads(rpath.read_text())
    pieces = untrusted_strings(got.stdout, ranges)
    assert "get_weather" in pieces and "City name, e.g. Paris" in pieces
    # JSON punctuation the filter wrote is trusted
    assert all('"' not in p for p in pieces)


@pytest.mark.parametrize("name", ["chatml", "llama2", "llama3", "mistral", "gemma", "phi3"])
def test_builtin_renders(name):
    messages, _ = CONVERSATIONS["multi_turn"]
    got = ours(None, messages, None, True, "<s>", "</s>", builtin=name)
    assert got.returncode == 0, got.stderr
    text = got.stdout.decode()
    for m in messages:
        assert m["content"] in text


GEMMA_CONVS = ["system_user", "user_only", "multi_turn", "multi_turn_no_system", "unicode", "content_parts"]


@pytest.mark.parametrize("add_gen", [False, True])
@pytest.mark.parametrize("conv", GEMMA_CONVS)
def test_gemma_builtin_matches_gemma3_official_template(conv, add_gen):
    """The "gemma" built-in (what a gemma-family file without a template
    gets) renders byte for byte as Gemma 3's own template under jinja2:
    system folded into the first user turn, assistant as "model"."""
    src, bos, eos = TEMPLATES["tokenizer-gemma3"]
    messages, _ = CONVERSATIONS[conv]
    want = reference(src, messages, None, add_gen, bos, eos)
    got = ours(None, messages, None, add_gen, bos, eos, builtin="gemma")
    assert got.returncode == 0, got.stderr
    assert got.stdout.decode() == want


def test_gemma_builtin_turn_format():
    got = ours(None, CONVERSATIONS["system_user"][0], None, True, "<bos>", "<eos>", builtin="gemma")
    assert got.stdout.decode() == ("<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello! How are you?"
                                   "<end_of_turn>\n<start_of_turn>model\n")


def test_raise_exception_is_a_render_error(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{{ raise_exception('Conversation roles must alternate') }}")
    got = ours(path, [], None, False, "", "")
    assert got.returncode == 3
    assert b"Conversation roles must alternate" in got.stderr


def test_parse_error_is_a_compile_error(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{% for x in %}")
    got = ours(path, [], None, False, "", "")
    assert got.returncode == 2
    assert b"line 1" in got.stderr


def random_whitespace_template(rnd, depth=0):
    """Text with spaces, tabs, CRLF and newlines around block, variable and
    comment tags carrying every combination of -/+ modifiers."""
    pieces = [" ", "  ", "\t", "\n", "\n\n", " \n", "x", "y z", "\r\n"]
    mods = ["", "-", "+"]
    out = []
    for _ in range(rnd.randint(1, 6)):
        c = rnd.random()
        if c < 0.5:
            out.append("".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 3))))
        elif c < 0.62:
            out.append("{{%s 'v' %s}}" % (rnd.choice(["", "-"]), rnd.choice(["", "-"])))
        elif c < 0.75:
            out.append("{#%s c %s#}" % (rnd.choice(mods), rnd.choice(mods)))
        elif depth < 2:
            l1, r1, l2, r2 = (rnd.choice(mods) for _ in range(4))
            kind = rnd.choice(["if true", "if false", "for i in range(2)", "set x = 1"])
            if kind.startswith("set"):
                out.append("{%%%s %s %s%%}" % (l1, kind, r1))
            else:
                end = "endif" if kind.startswith("if") else "endfor"
                inner = random_whitespace_template(rnd, depth + 1)
                out.append("{%%%s %s %s%%}%s{%%%s %s %s%%}" % (l1, kind, r1, inner, l2, end, r2))
    return "".join(out)


def test_whitespace_control_random(tmp_path):
    """trim_blocks, lstrip_blocks, -/+ modifiers and newline handling on 300
    random templates, against jinja2 as transformers configures it."""
    import random

    from transformers.utils.chat_template_utils import _compile_jinja_template

    rnd = random.Random(20240726)
    path = tmp_path / "ws.jinja"
    bad = []
    for _ in range(300):
        src = random_whitespace_template(rnd)
        want = _compile_jinja_template(src).render(messages=[])
        path.write_bytes(src.encode())
        got = subprocess.run([str(TOOL), str(path)], input=b'{"messages": []}', capture_output=True)
        if got.returncode != 0 or got.stdout.decode() != want:
            bad.append((src, want, got.stdout, got.stderr))
    assert not bad, bad[:3]


def special_token_texts(name):
    tj = json.loads(data_path(f"tokenizers/{name}/tokenizer.json").read_bytes())
    return [t["content"] for t in tj.get("added_tokens", []) if t.get("special")]


def trusted_special_count(text, ranges, specials):
    """Occurrences of special-token text that lie outside every untrusted range."""
    mask = bytearray(len(text))
    for s, e in ranges:
        mask[s:e] = b"\x01" * (e - s)
    count = 0
    for sp in set(specials):
        needle = sp.encode()
        at = text.find(needle)
        while at >= 0:
            if not any(mask[at:at + len(needle)]):
                count += 1
            at = text.find(needle, at + 1)
    return count


@pytest.mark.parametrize("tok", ["deepseek_v3", "gemma3", "llama3", "llama3_1", "qwen3", "mistral"])
def test_injected_special_tokens_stay_untrusted(tok, tmp_path):
    """Content holding every special token's text adds no trusted special
    token to the prompt: the template's own tokens are the same as for plain
    content, and every injected byte lies in an untrusted range."""
    specials = special_token_texts(tok)
    inject = " ".join(specials[:300])
    name = "tokenizer-" + tok
    builtin = None
    if name in TEMPLATES:
        src, bos, eos = TEMPLATES[name]
        path = tmp_path / "t.jinja"
        path.write_text(src)
    else:  # no template in the config: the built-in for the family
        path, bos, eos, builtin = None, "<s>", "</s>", "mistral"

    def run(content):
        messages = [{"role": "user", "content": content},
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": content}]
        rpath = tmp_path / "r.json"
        got = ours(path, messages, None, True, bos, eos, ranges=rpath, builtin=builtin)
        assert got.returncode == 0, got.stderr
        return got.stdout, json.loads(rpath.read_text())

    plain_text, plain_ranges = run("plain")
    text, ranges = run(inject)
    assert trusted_special_count(text, ranges, specials) == trusted_special_count(plain_text, plain_ranges, specials)
    covered = b"".join(text[s:e] for s, e in ranges)
    assert covered.count(b"<") >= inject.count("<")
