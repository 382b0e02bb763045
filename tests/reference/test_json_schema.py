"""JSON Schema and regex -> GBNF (model/grammar/json_schema.c, regex.c) against
the reference validators: for each schema of the table, 50 random sentences
of its grammar (tools/grammar_sample, a random walk of the real matcher) must
parse with json.loads and validate with the jsonschema package (formats
checked too); for each regex, every sentence must re.fullmatch. Schemas the
compiler refuses must fail with exit status 1 and a message naming the
keyword and the JSON Pointer of the subschema."""
import datetime
import json
import random
import re
import subprocess
import uuid

import jsonschema
import pytest

from paths import tool

SAMPLES = 50

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
}

# A pydantic v2 model's schema as instructor / LangChain send it (OpenAI strict style).
PYDANTIC_ORDER = {
    "$defs": {
        "Item": {
            "properties": {
                "sku": {"title": "Sku", "type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "qty": {"title": "Qty", "type": "integer", "exclusiveMinimum": 0},
                "price": {"title": "Price", "type": "number", "minimum": 0},
            },
            "required": ["sku", "qty", "price"],
            "title": "Item",
            "type": "object",
            "additionalProperties": False,
        },
        "Status": {"enum": ["pending", "shipped", "delivered"], "title": "Status", "type": "string"},
    },
    "properties": {
        "order_id": {"title": "Order Id", "type": "string", "format": "uuid"},
        "items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array", "minItems": 1},
        "status": {"$ref": "#/$defs/Status"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Note"},
    },
    "required": ["order_id", "items", "status", "note"],
    "title": "Order",
    "type": "object",
    "additionalProperties": False,
}

# OpenAI's documented strict example: a recursive UI tree through "#".
UI_TREE = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["div", "button", "header", "section", "field", "form"]},
        "label": {"type": "string", "maxLength": 10},
        "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2},
        "attributes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 8}, "value": {"type": "string", "maxLength": 8}},
                "required": ["name", "value"],
                "additionalProperties": False,
            },
            "maxItems": 2,
        },
    },
    "required": ["type", "label", "children", "attributes"],
    "additionalProperties": False,
}

LINKED_LIST = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"value": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
            "required": ["value", "next"],
        }
    },
    "$ref": "#/$defs/node",
}

SCHEMAS = {
    "any": {},
    "true": True,
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "nullable-string": {"type": ["string", "null"]},
    "multi-type": {"type": ["integer", "boolean", "array"]},
    "object-any": {"type": "object"},
    "object-person": PERSON,
    "object-all-optional": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},
                                                              "c": {"type": "null"}}},
    "object-required-middle": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                                                 "c": {"type": "integer"}}, "required": ["b"]},
    "object-required-undeclared": {"type": "object", "required": ["x"], "properties": {"y": {"type": "null"}}},
    "object-nested": {"type": "object", "properties": {"inner": {"type": "object", "properties": {
        "deep": {"type": "object", "properties": {"v": {"const": 42}}, "required": ["v"]}}, "required": ["deep"]}},
        "required": ["inner"]},
    "object-additional-false": {"type": "object", "properties": {"k": {"type": "string"}}, "additionalProperties": False},
    "object-additional-false-empty": {"type": "object", "additionalProperties": False},
    "object-additional-schema": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}},
    "object-additional-schema-with-props": {"type": "object", "properties": {"a": {"type": "string"}},
                                            "required": ["a"], "additionalProperties": {"type": "number"}},
    "object-additional-schema-near-names": {"type": "object", "properties": {
        "a": {"type": "null"}, "ab": {"type": "null"}, "x-y": {"type": "null"}, "h\u00e9": {"type": "null"}},
        "additionalProperties": {"type": "boolean"}},
    "object-escaped-keys": {"type": "object", "properties": {"quo\"te": {"type": "null"}, "back\\slash": {"type": "null"},
                                                              "h\u00e9": {"type": "null"}},
                            "required": ["quo\"te", "back\\slash", "h\u00e9"]},
    "array-any": {"type": "array"},
    "array-items": {"type": "array", "items": {"type": "integer"}},
    "array-min-max": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
    "array-exact": {"type": "array", "items": {"type": "null"}, "minItems": 3, "maxItems": 3},
    "array-prefix": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
    "array-prefix-closed": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                            "items": False, "minItems": 1},
    "array-prefix-then-items": {"type": "array", "prefixItems": [{"const": "head"}], "items": {"type": "number"},
                                "minItems": 2, "maxItems": 5},
    "enum-mixed": {"enum": ["red", 1, 2.5, None, True, {"a": [1]}, [1, "x"]]},
    "enum-typed": {"type": "string", "enum": ["a", "b", 3]},
    "enum-unicode": {"enum": ["caf\u00e9", "\u65e5\u672c", "tab\there", "quote\"d"]},
    "const": {"const": {"k": [1, 2, {"z": None}]}},
    "anyOf": {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 20}, {"type": "string", "maxLength": 2}]},
    "oneOf-disjoint": {"oneOf": [{"type": "boolean"}, {"type": "object", "properties": {"x": {"type": "integer"}},
                                                        "required": ["x"]}]},
    "allOf-one": {"allOf": [{"type": "integer", "minimum": 5}]},
    "string-lengths": {"type": "string", "minLength": 2, "maxLength": 5},
    "string-min-only": {"type": "string", "minLength": 3},
    "pattern-sku": {"type": "string", "pattern": "^[A-Z]{2,3}-\\d{3}$"},
    "pattern-escapes": {"type": "string", "pattern": "^a\"b\\\\c\\n(x|y)*$"},
    "pattern-dot": {"type": "string", "pattern": "^.{1,4}$"},
    "format-date": {"type": "string", "format": "date"},
    "format-time": {"type": "string", "format": "time"},
    "format-date-time": {"type": "string", "format": "date-time"},
    "format-uuid": {"type": "string", "format": "uuid"},
    "format-email": {"type": "string", "format": "email"},
    "int-range": {"type": "integer", "minimum": -12, "maximum": 345},
    "int-range-negative": {"type": "integer", "minimum": -1000, "maximum": -7},
    "int-exclusive": {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 3},
    "int-lower-only": {"type": "integer", "minimum": 99},
    "int-upper-only": {"type": "integer", "maximum": -5},
    "int-fractional-bounds": {"type": "integer", "minimum": 1.5, "maximum": 7.5},
    "int-big": {"type": "integer", "minimum": 123456789, "maximum": 987654321012},
    "number-unit": {"type": "number", "minimum": 0, "maximum": 1},
    "number-positive": {"type": "number", "exclusiveMinimum": 0},
    "number-negative-range": {"type": "number", "minimum": -5, "exclusiveMaximum": -2},
    "number-span-zero": {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1},
    "number-upper-zero-exclusive": {"type": "number", "exclusiveMaximum": 0},
    "number-decimal-bounds": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 2.25},
    "number-decimal-span-zero": {"type": "number", "exclusiveMinimum": -0.1, "maximum": 0.1},
    "number-decimal-lower-only": {"type": "number", "exclusiveMinimum": 99.99},
    "number-decimal-upper-only": {"type": "number", "maximum": -1.5},
    "defs-ref": {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "object",
                 "properties": {"n": {"$ref": "#/$defs/pos"}}, "required": ["n"]},
    "definitions-ref": {"definitions": {"flag": {"type": "boolean"}}, "type": "array",
                        "items": {"$ref": "#/definitions/flag"}},
    "linked-list": LINKED_LIST,
    "ui-tree": UI_TREE,
    "pydantic-order": PYDANTIC_ORDER,
    "tool-weather": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "Forecast days", "minimum": 1, "maximum": 14}},
        "required": ["city", "unit", "days"], "additionalProperties": False},
    "annotations": {"title": "T", "description": "D", "$comment": "c", "examples": [1], "default": 1,
                    "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "type": "integer"},
    "implicit-object": {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
}

REGEXES = [
    "abc", "a|b|c", "[a-z]+", "[^a-z]{1,3}", "\\d{3}-\\d{4}", "(ab)*c?", "(?:x|yz){2,4}", "colou?r",
    "[A-Za-z_][A-Za-z0-9_]{0,10}", "\\w+@\\w+\\.com", "0x[0-9a-fA-F]{1,8}", "\\.\\*\\+\\?", "[\\-+]?[0-9]+",
    "^(true|false)$", "a{3}", "a{2,}b", "[\u00e9\u00e8-\u00ea]x", "\\u0041\\x42", "(a|)b", "[.]\\t?[\\]]",
]

REFUSED = [
    ({"not": {"type": "string"}}, "unsupported keyword 'not' at root"),
    ({"type": "object", "properties": {"x": {"if": {}, "then": {}}}}, "unsupported keyword 'if' at /properties/x"),
    ({"patternProperties": {"a": {}}}, "unsupported keyword 'patternProperties' at root"),
    ({"type": "array", "uniqueItems": True}, "unsupported keyword 'uniqueItems' at root"),
    ({"type": "array", "items": {"contains": {}}}, "unsupported keyword 'contains' at /items"),
    ({"type": "integer", "multipleOf": 3}, "unsupported keyword 'multipleOf' at root"),
    ({"type": "object", "minProperties": 1}, "unsupported keyword 'minProperties' at root"),
    ({"$ref": "https://example.com/s.json"}, "unsupported keyword '$ref' at root"),
    ({"type": 5}, "invalid keyword 'type' at root"),
    ({"type": "object", "required": "a"}, "invalid keyword 'required' at root"),
    ({"type": "array", "minItems": 3, "maxItems": 2}, "invalid keyword 'minItems' at root"),
    ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "invalid keyword '$ref' at /properties/a"),
    ({"enum": []}, "invalid keyword 'enum' at root"),
    ({"type": "string", "pattern": "(?=a)b"}, "invalid keyword 'pattern' at root"),
    ({"type": "string", "format": "hostname"}, "unsupported keyword 'format' at root"),
    ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "invalid keyword '$ref' at /$defs/a"),
    ({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}, "recursion never ends"),
    ({"type": "number", "minimum": 0.000001}, "invalid keyword 'minimum' at root"),
]


def sample(args, count=SAMPLES, seed=7):
    r = subprocess.run([tool("grammar_sample"), *args, "--count", str(count), "--seed", str(seed)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")[:-1]   # not splitlines(): U+2028 may appear raw inside a line
    assert len(lines) == count
    return [json.loads(line) for line in lines]


def check_formats(schema, doc):
    """The formats jsonschema skips without optional packages, checked by hand."""
    if isinstance(schema, dict) and isinstance(doc, str):
        fmt = schema.get("format")
        if fmt == "date":
            datetime.date.fromisoformat(doc)
        elif fmt == "time":
            assert re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", doc), doc
            datetime.time.fromisoformat(doc.replace("Z", "+00:00"))
        elif fmt == "date-time":
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", doc), doc
            datetime.datetime.fromisoformat(doc.replace("Z", "+00:00"))
        elif fmt == "uuid":
            uuid.UUID(doc)
        elif fmt == "email":
            assert re.fullmatch(r"[^@\s]+@[^@\s]+\.[A-Za-z]+", doc), doc


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_samples_validate(name, tmp_path):
    schema = SCHEMAS[name]
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for text in sample(["--schema", str(path)]):
        doc = json.loads(text)
        errors = list(validator.iter_errors(doc))
        assert not errors, f"{text!r}: {errors[0].message}"
        check_formats(schema, doc)


def test_json_schema_draft4_exclusive_bounds_validate(tmp_path):
    schema = {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    for text in sample(["--schema", str(path)]):
        jsonschema.Draft4Validator(schema).validate(json.loads(text))


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_samples_fullmatch(pattern):
    for text in sample(["--regex", pattern]):
        assert re.fullmatch(pattern, text, re.ASCII), f"{pattern!r} does not match {text!r}"


@pytest.mark.parametrize("schema,message", REFUSED, ids=[m for _, m in REFUSED])
def test_refused_schema_names_keyword_and_path(schema, message, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    r = subprocess.run([tool("grammar_sample"), "--schema", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "SL_EINVAL" in r.stderr and message in r.stderr, r.stderr


def test_gbnf_file_and_print_gbnf(tmp_path):
    path = tmp_path / "g.gbnf"
    path.write_text('root ::= "x" [0-9]{2} ("!" | "?")\n')
    for text in sample(["--gbnf", str(path)], count=20):
        assert re.fullmatch(r"x[0-9]{2}[!?]", text), text
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "integer", "minimum": 1, "maximum": 3}))
    r = subprocess.run([tool("grammar_sample"), "--schema", str(schema), "--print-gbnf"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("root ::= "), r.stdout + r.stderr


def test_usage_and_bad_inputs(tmp_path):
    exe = tool("grammar_sample")
    assert subprocess.run([exe], capture_output=True, timeout=60).returncode == 2
    assert subprocess.run([exe, "--regex", "a", "--gbnf", "x"], capture_output=True, timeout=60).returncode == 2
    r = subprocess.run([exe, "--regex", "(?=a)"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "lookahead is not supported at offset 0" in r.stderr, r.stderr
    bad = tmp_path / "bad.gbnf"
    bad.write_text("root ::= undefined-rule\n")
    r = subprocess.run([exe, "--gbnf", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "grammar_sample: grammar:" in r.stderr, r.stderr
    r = subprocess.run([exe, "--schema", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1


def random_schema(rng, depth=0):
    """A schema mixing the supported keywords (nested up to depth 3), for
    the seeded random sweep: the table above covers each keyword; this
    covers their combinations."""
    def scalar():
        kind = rng.choice(["string", "integer", "number", "boolean", "null", "enum", "const", "format", "pattern"])
        if kind == "string":
            s = {"type": "string"}
            if rng.random() < .5:
                s["minLength"] = rng.randint(0, 5)
                if rng.random() < .5:
                    s["maxLength"] = s["minLength"] + rng.randint(0, 5)
            return s
        if kind in ("integer", "number"):
            s = {"type": kind}
            if kind == "number" and rng.random() < .5:
                lo = round(rng.uniform(-20, 20), rng.randint(0, 5))
                s[rng.choice(["minimum", "exclusiveMinimum"])] = lo
                if rng.random() < .7:
                    s[rng.choice(["maximum", "exclusiveMaximum"])] = round(lo + rng.uniform(0.00002, 5), rng.randint(0, 5))
            elif rng.random() < .7:
                lo = rng.randint(-2000, 2000)
                s[rng.choice(["minimum", "exclusiveMinimum"])] = lo
                if rng.random() < .7:
                    s[rng.choice(["maximum", "exclusiveMaximum"])] = lo + rng.randint(2, 100000)
            elif rng.random() < .5:
                s[rng.choice(["maximum", "exclusiveMaximum"])] = rng.randint(-5000, 5000)
            return s
        if kind == "enum":
            return {"enum": rng.sample(["a", "b", 1, 2.5, None, True, [1], {"x": 1}, "\u00e9\n\"q"], rng.randint(1, 4))}
        if kind == "const":
            return {"const": rng.choice(["z", 0, -3, {"k": [None]}])}
        if kind == "format":
            return {"type": "string", "format": rng.choice(["date", "time", "date-time", "uuid", "email"])}
        if kind == "pattern":
            return {"type": "string", "pattern": rng.choice(["^[a-f0-9]{2,6}$", "x(y|z)*", "[^\"\\\\]{0,3}",
                                                             "\\d+\\.\\d{2}", "(ab|c)?d\\n"])}
        return {"type": kind}

    if depth > 3 or rng.random() < .4:
        return scalar()
    kind = rng.choice(["object", "array", "tuple", "dict", "anyOf", "nullable"])
    if kind == "object":
        props = {f"p{i}": random_schema(rng, depth + 1) for i in range(rng.randint(0, 5))}
        s = {"type": "object", "properties": props, "required": [p for p in props if rng.random() < .5]}
        if rng.random() < .3:
            s["additionalProperties"] = False
        elif rng.random() < .3:
            s["additionalProperties"] = random_schema(rng, depth + 1)
        return s
    if kind == "array":
        s = {"type": "array", "items": random_schema(rng, depth + 1)}
        if rng.random() < .5:
            s["minItems"] = rng.randint(0, 3)
            if rng.random() < .5:
                s["maxItems"] = s["minItems"] + rng.randint(0, 3)
        return s
    if kind == "tuple":
        s = {"type": "array", "prefixItems": [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
        if rng.random() < .5:
            s["items"] = False
        if rng.random() < .5:
            s["minItems"] = rng.randint(0, len(s["prefixItems"]))
        return s
    if kind == "dict":
        return {"type": "object", "additionalProperties": random_schema(rng, depth + 1)}
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    s = scalar()
    if isinstance(s.get("type"), str) and s["type"] != "null":
        s["type"] = [s["type"], "null"]
    return s


@pytest.mark.parametrize("seed", range(4))
def test_random_schemas_validate(seed, tmp_path):
    rng = random.Random(seed)
    path = tmp_path / "schema.json"
    for k in range(25):
        schema = random_schema(rng)
        path.write_text(json.dumps(schema))
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        for text in sample(["--schema", str(path)], count=20, seed=seed * 100 + k):
            errors = list(validator.iter_errors(json.loads(text)))
            assert not errors, f"{json.dumps(schema)}: {text!r}: {errors[0].message}"
