"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

The seeds are committed; this script says where they came from and remakes
them (python tests/fuzz/make_seeds.py). Regression inputs for fixed crashes
are added by hand as corpus/<target>/regress-*, and this script leaves them.
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TESTDATA = os.path.join(REPO, "tests", "data")


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- request: bodies for both endpoints ----------------------------------
def request_seeds():
    bodies = {
        "chat-min": {"messages": [{"role": "user", "content": "Hi"}]},
        "chat-full": {
            "model": "sluice-default", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris? <|im_end|>"}]},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                 "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "18 C"}],
            "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
            "tool_choice": "auto", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
            "min_p": 0.05, "seed": 7, "stop": ["\n\n", "END"], "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 3,
            "presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1,
            "logit_bias": {"13": -100, "29": 5}, "user": "u1", "n": 1, "ignore_eos": False,
            "min_tokens": 2},
        "completion-text": {"prompt": "Once upon a time", "max_tokens": 8, "stop": "\n", "echo": False},
        "completion-tokens": {"prompt": [1, 15043, 29892, 3186], "max_tokens": 4, "logprobs": 2},
        "completion-batch": {"prompt": ["a", "b"]},
        "chat-structured": {
            "messages": [{"role": "user", "content": "JSON"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": True, "schema": {
                "type": "object", "properties": {"n": {"type": "integer"}, "s": {"enum": ["x", "y"]}},
                "required": ["n"]}}},
            "parallel_tool_calls": False, "chat_template_kwargs": {"enable_thinking": False},
            "reasoning_format": "separate", "metadata": {"k": "v"}, "store": False},
        "chat-tools-forced": {
            "messages": [{"role": "user", "content": "Weather?"}],
            "functions": [{"name": "w", "parameters": {"type": "object"}}], "function_call": {"name": "w"}},
        "completion-choice": {"prompt": "Pick", "guided_choice": ["yes", "no \"maybe\""], "best_of": 1,
                              "suffix": ""},
        "bad-unknown": {"prompt": "x", "n_predict": 3},
        "bad-n": {"prompt": "x", "n": 2},
        "bad-depth": "{\"prompt\": " + "[" * 80 + "]" * 80 + "}",
        "bad-utf8": b"{\"prompt\": \"\xff\xfe\"}",
        "bad-dup": "{\"prompt\": \"a\", \"prompt\": \"b\"}",
        "bad-number": "{\"prompt\": \"a\", \"max_tokens\": 1e400}",
    }
    for name, b in bodies.items():
        put("request", name, b if isinstance(b, (str, bytes)) else json.dumps(b))


# ---- gguf: tiny files the loader accepts ---------------------------------
def gguf_seeds():
    import gguf

    def spm_vocab(w, n):
        toks = ["<unk>", "<s>", "</s>", "\u2581", "\u2581a", "b", "\u2581ab"]
        toks += ["<0x%02X>" % i for i in range(n - len(toks))]
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(toks)
        w.add_token_types([2, 3, 3, 1, 1, 1, 1] + [6] * (n - 7))
        w.add_token_scores([0.0] * 3 + [-1.0, -2.0, -3.0, -4.0] + [0.0] * (n - 7))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")

    def tiny_llama(path, n_vocab=24, n_embd=32, n_ff=32, qtype=np.float16):
        w = gguf.GGUFWriter(path, "llama")
        w.add_name("fuzz-tiny")
        w.add_context_length(64)
        w.add_embedding_length(n_embd)
        w.add_block_count(1)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(2)
        w.add_head_count_kv(1)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        w.add_rope_dimension_count(n_embd // 2)
        spm_vocab(w, n_vocab)
        rng = np.random.default_rng(0)
        hd = n_embd // 2

        def t(name, shape, dtype=qtype):
            w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(dtype))

        t("token_embd.weight", (n_vocab, n_embd))
        t("output_norm.weight", (n_embd,), np.float32)
        t("blk.0.attn_norm.weight", (n_embd,), np.float32)
        t("blk.0.ffn_norm.weight", (n_embd,), np.float32)
        t("blk.0.attn_q.weight", (n_embd, n_embd))
        t("blk.0.attn_k.weight", (hd, n_embd))
        t("blk.0.attn_v.weight", (hd, n_embd))
        t("blk.0.attn_output.weight", (n_embd, n_embd))
        t("blk.0.ffn_gate.weight", (n_ff, n_embd))
        t("blk.0.ffn_up.weight", (n_ff, n_embd))
        t("blk.0.ffn_down.weight", (n_embd, n_ff))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    def gpt2_vocab(path):
        w = gguf.GGUFWriter(path, "llama")
        toks = ["a", "b", "c", "\u0120", "ab", "\u0120a", "<|endoftext|>"]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe")
        w.add_token_list(toks)
        w.add_token_types([1] * 6 + [3])
        w.add_token_merges(["a b", "\u0120 a"])
        w.add_bos_token_id(6)
        w.add_eos_token_id(6)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    def all_types(path):
        w = gguf.GGUFWriter(path, "llama")
        w.add_uint8("t.u8", 1)
        w.add_int8("t.i8", -1)
        w.add_uint16("t.u16", 2)
        w.add_int16("t.i16", -2)
        w.add_uint32("t.u32", 3)
        w.add_int32("t.i32", -3)
        w.add_float32("t.f32", 0.5)
        w.add_bool("t.bool", True)
        w.add_string("t.str", "h\u00e9llo")
        w.add_array("t.arr_i", [1, 2, 3])
        w.add_array("t.arr_s", ["x", "yz"])
        w.add_uint64("t.u64", 2**63)
        w.add_int64("t.i64", -(2**62))
        w.add_float64("t.f64", 1e300)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in [("tiny-llama-f16", lambda p: tiny_llama(p)),
                         ("tiny-llama-f32", lambda p: tiny_llama(p, qtype=np.float32, n_vocab=16)),
                         ("vocab-gpt2", gpt2_vocab), ("all-types", all_types)]:
            p = os.path.join(tmp, name + ".gguf")
            fn(p)
            with open(p, "rb") as f:
                put("gguf", name, f.read())


# ---- tokenizer: mode byte + text or ids ------------------------------------
def tokenizer_seeds():
    texts = ["Hello, world!", " leading space\n\nand newlines\t", "\u00e9\u4e16\U0001f600 emoji",
             "<s>special</s><|begin_of_text|>x<|eot_id|>", "123456 3.14 don't I'M", "\xff\xfe invalid"]
    for i, t in enumerate(texts):
        b = t.encode("utf-8", "surrogateescape") if "\xff" not in t else b"\xff\xfe invalid"
        for vocab in (0, 1):
            put("tokenizer", "text-%d-v%d" % (i, vocab), bytes([vocab | ((i % 3) << 1)]) + b)
    ids = struct.pack("<8i", 1, 15043, 29892, 3186, 2, -1, 2**31 - 1, 128000)
    put("tokenizer", "ids-raw", bytes([3 << 1]) + ids)
    put("tokenizer", "ids-raw-bpe", bytes([1 | (4 << 1)]) + ids)
    put("tokenizer", "ids-near", bytes([6 << 1]) + bytes(range(64)))
    put("tokenizer", "ids-near-bpe", bytes([1 | (7 << 1)]) + bytes(range(255, 191, -1)))


# ---- jinja: template sources (byte 0 even), conversations (odd) -------------
def jinja_seeds():
    srcs = {
        "loop": "{% for m in messages %}{{ loop.index }}:{{ m.role | upper }} {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "macro": "{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{{ f(3) }}{{ f(x=1, y='a') }}"
                 "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
        "filters": "{{ messages | map(attribute='role') | join(',') }}{{ tools | tojson(indent=2) }}"
                   "{{ 'a,b' .split(',') | reverse | list }}{{ '%s-%d' % ('x', 3) }}{{ messages[-1].content | trim }}",
        "strftime": "{{ strftime_now('%Y-%m-%d') }}{{ bos_token }}{{ eos_token }}{% raw %}{{x}}{% endraw %}",
        "raise": "{% if messages | length > 2 %}{{ raise_exception('too many') }}{% endif %}",
        "deep": "{{ " + "(" * 50 + "1" + ")" * 50 + " }}{% for a in [1,2] %}{% for b in [3] %}{{ a+b }}{% endfor %}{% endfor %}",
        "slice-dict": "{{ messages[1:3] }}{{ {'a': 1, 'b': [1, 2.5, none, true]} | dictsort }}{{ 'abc'[::-1] }}",
    }
    for i, (name, s) in enumerate(srcs.items()):
        put("jinja", "src-" + name, bytes([(i % 4) << 1]) + s.encode())
    tdir = os.path.join(TESTDATA, "templates")
    n = len([f for f in os.listdir(tdir) if f.endswith(".jinja")])
    convs = [
        [{"role": "user", "content": "hi <|im_end|> {{ x }}"}],
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
         {"role": "assistant", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "t"}]}],
        [{"role": "user", "content": "w?"}, {"role": "assistant", "tool_calls": [{"type": "function",
          "function": {"name": "w", "arguments": {"c": "P"}}}]}, {"role": "tool", "content": "18"}],
    ]
    for k in range(n):
        put("jinja", "conv-%02d" % k, bytes([1 | ((k % 4) << 1), k]) + json.dumps(convs[k % 3]).encode())
    put("jinja", "conv-text", bytes([1, 0]) + "first\n\nsecond \u00e9\n\nthird".encode())


# ---- admin: [line length][line][config snapshot] ---------------------------
def admin_seeds():
    snap = json.dumps({"model": "m", "max_seqs": 4, "nested": {"a": [1, 2, None]}}).encode()
    for cmd in (b"health\n", b"stats\r\n", b"effective-config\n", b"bogus\n", b"stats\x00junk"):
        put("admin", "cmd-" + cmd.split(b"\n")[0].split(b"\r")[0].split(b"\x00")[0].decode(),
            bytes([len(cmd)]) + cmd)
        put("admin", "cmd-snap-" + cmd[:5].decode(errors="replace").strip("\r\n\x00"), bytes([len(cmd)]) + cmd + snap)
    put("admin", "cmd-snap-bad", bytes([17]) + b"effective-config\n" + b"{\"a\": \xff")


# ---- shm: patch lists ----------------------------------------------------------
def shm_seeds():
    def patch(region, off, data):
        return bytes([region]) + struct.pack("<I", off) + bytes([len(data)]) + data

    def word(idx, state, owner, inc):
        return bytes([9, idx, state, owner]) + struct.pack("<I", inc)

    tail = struct.pack("<II", 2, 1)
    put("shm", "none", b"\x00" * 8 + tail)
    put("shm", "ring-garbage", patch(2, 0, b"\xff" * 32) + tail)
    put("shm", "ring-head-tail", patch(1, 0, struct.pack("<QQ", 3, 1000)) + tail)
    put("shm", "mailbox-states", word(0, 3, 0, 1) + word(1, 2, 1, 1) + word(2, 3, 0xff, 1) + word(5, 7, 0, 3) + tail)
    put("shm", "block-tables", patch(4, 0, struct.pack("<8I", *([0xffffffff] * 4 + [1, 1, 2, 3]))) + tail)
    put("shm", "block-owners", patch(7, 0, struct.pack("<4Q", 1 | (1 << 32), 9 | (5 << 32), 2**64 - 1, 0)) + tail)
    put("shm", "tokens-records", patch(5, 0, b"\x80" * 64) + patch(6, 0, b"\xff" * 200) + tail)
    put("shm", "header-limits", patch(0, 24, struct.pack("<8I", 300, 0, 3, 1, 0, 0, 0, 9)) + tail)
    put("shm", "header-config", patch(0, 512, b"\xff" * 255) + tail)
    put("shm", "mailbox-bytes", patch(3, 0, b"\x41" * 255) + patch(3, 300, b"\xff" * 100) + tail)


# ---- grammar: GBNF texts -------------------------------------------------------
def grammar_seeds():
    for name in ("person", "person-bounded"):
        with open(os.path.join(REPO, "tools", "bench_grammar", name + ".gbnf")) as f:
            put("grammar", "schema-" + name, f.read())
    put("grammar", "arith", 'root ::= expr\nexpr ::= term (("+" | "-") term)*\n'
        'term ::= factor (("*" | "/") factor)*\nfactor ::= [0-9]+ | "(" expr ")" | "-" factor')
    put("grammar", "json", 'root   ::= object\n'
        'value  ::= object | array | string | number | ("true" | "false" | "null") ws\n'
        'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws\n'
        'array  ::= "[" ws ( value ("," ws value)* )? "]" ws\n'
        'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\bfnrt/] | "u" [0-9a-fA-F]{4}) )* "\\"" ws\n'
        'number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n'
        'ws ::= | " " | "\\n" [ \\t]{0,20}')
    put("grammar", "utf8", 'root ::= [äö€😀a-c]{1,3} "!" [^a-z]* # utf-8 classes\n')
    put("grammar", "lists", 'root ::= "[" item ("," item){1,3} "]"\n'
        'item ::= [a-z]{2,4} | "\\x41\\u00e9\\U0001F600" | .')
    put("grammar", "ambiguous", 'root ::= s\ns ::= "a" s "b"? | ""')
    put("grammar", "left-recursive", 'root ::= a\na ::= b "x"\nb ::= a | "y"')


def tools_seeds():
    """Byte 0: format (0 hermes, 1 llama3, 2 mistral; +0x80 starts inside
    <think>), bytes 1-2: the split offset, then the answer."""
    def seed(name, fmt, cut, text):
        put("tools", name, bytes([fmt, cut & 0xff, cut >> 8]) + text.encode())
    seed("hermes-one", 0, 5, '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>')
    seed("hermes-two-text", 0, 30, 'Sure.\n<tool_call>{"name": "add", "arguments": {}}</tool_call>\n'
         '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call> done')
    seed("hermes-bad", 0, 12, '<tool_call>{"name": "nope", "arguments": {}}</tool_call><tool_call>{"name"')
    seed("llama3-tagged", 1, 3, '<|python_tag|>{"name": "add", "parameters": {}}; '
         '{"name": "get_weather", "parameters": {"city": "x"}}')
    seed("llama3-bare", 1, 1, '\n{"name": "add", "parameters": {"a": [1, 2]}}\n')
    seed("mistral-array", 2, 7, '[TOOL_CALLS][{"name": "add", "arguments": {}}]')
    seed("mistral-args", 2, 9, '[TOOL_CALLS]add[ARGS]{"a": 2}[TOOL_CALLS]get_weather[ARGS]{}')
    seed("think-then-call", 0, 2, '<think>\nhmm</think>\n\nText <tool_call>{"name": "get_weather", '
         '"arguments": {}}</tool_call>')
    seed("think-open", 0x80, 4, "still thinking</think>answer")


# ---- json_schema: schemas (byte 0 even), regexes (odd) ---------------------
def json_schema_seeds():
    sys.path.insert(0, os.path.join(REPO, "tests"))
    sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
    from test_json_schema import REFUSED, REGEXES, SCHEMAS  # the reference test's tables

    for i, name in enumerate(sorted(SCHEMAS)):
        put("json_schema", "schema-" + name, bytes([(i % 2) << 1]) + json.dumps(SCHEMAS[name]).encode())
    for i, (schema, _) in enumerate(REFUSED):
        put("json_schema", "refused-%02d" % i, b"\0" + json.dumps(schema).encode())
    for i, pattern in enumerate(REGEXES):
        put("json_schema", "regex-%02d" % i, bytes([1 | ((i % 2) << 1)]) + pattern.encode())


if __name__ == "__main__":
    request_seeds()
    gguf_seeds()
    tokenizer_seeds()
    jinja_seeds()
    admin_seeds()
    shm_seeds()
    grammar_seeds()
    tools_seeds()
    json_schema_seeds()
    print("seeds written under", os.path.join(HERE, "corpus"), file=sys.stderr)
