/* tests/unit/model/grammar/json_schema_test.c: JSON Schema -> GBNF
 * (model/grammar/json_schema.c): every supported keyword produces rules that
 * compile and mean what the keyword says (checked through the matcher on
 * documents that must and must not match), integer ranges exactly (every
 * integer around the bounds), and every refused keyword and malformed value
 * is SL_EINVAL with the keyword and the JSON Pointer in the message. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"

static char *gbnf_of(const char *schema_text)
{
    json_error_t jerr;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &jerr);
    cr_assert_not_null(s, "bad test schema %s: %s", schema_text, jerr.text);
    char *out = NULL, err[SL_ERR_LEN] = "";
    sl_status rc = sl_json_schema_to_gbnf(s, "root", &out, err, sizeof err);
    json_decref(s);
    cr_assert_eq(rc, SL_OK, "%s: %s", schema_text, err);
    cr_assert_not_null(out);
    return out;
}

static sl_grammar *grammar_of(const char *schema_text)
{
    char *text = gbnf_of(schema_text);
    sl_grammar *g = NULL;
    char err[SL_ERR_LEN] = "";
    sl_status rc = sl_grammar_create(text, strlen(text), &g, err, sizeof err);
    cr_assert_eq(rc, SL_OK, "%s -> %s: %s", schema_text, text, err);
    free(text);
    return g;
}

static bool matches(const sl_grammar *g, const char *s)
{
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, s, strlen(s)) == SL_OK && sl_grammar_matcher_accepting(m);
    sl_grammar_matcher_destroy(m);
    return ok;
}

static void expect(const char *schema, const char *const *yes, const char *const *no)
{
    sl_grammar *g = grammar_of(schema);
    for (; yes && *yes; yes++)
        cr_expect(matches(g, *yes), "%s should allow %s", schema, *yes);
    for (; no && *no; no++)
        cr_expect(!matches(g, *no), "%s should refuse %s", schema, *no);
    sl_grammar_destroy(g);
}

static void expect_error(const char *schema_text, const char *want)
{
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(s, "bad test schema %s", schema_text);
    char *out = (char *)1, err[SL_ERR_LEN] = "";
    sl_status rc = sl_json_schema_to_gbnf(s, "root", &out, err, sizeof err);
    json_decref(s);
    cr_expect_eq(rc, SL_EINVAL, "%s compiled", schema_text);
    cr_expect_null(out);
    cr_expect(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", schema_text, err, want);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- types -------------------------------------------------------------------------- */

Test(json_schema, any_value_for_true_and_empty)
{
    const char *const yes[] = {"1", "-2.5e3", "\"x\"", "null", "true", "[1, {\"a\": []}]", "{}", NULL};
    expect("true", yes, L("", "nul", "[1,]", "{\"a\"}", "01"));
    expect("{}", yes, L("tru"));
}

Test(json_schema, simple_types)
{
    expect("{\"type\": \"null\"}", L("null"), L("0", "\"null\""));
    expect("{\"type\": \"boolean\"}", L("true", "false"), L("1", "null"));
    expect("{\"type\": \"string\"}", L("\"\"", "\"a b\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\"",
                                       "\"\xc3\xa9\xe4\xb8\x96\""),
           L("\"", "\"a", "'a'", "\"\n\"", "\"\\x\"", "\"\t\"", "1"));
    expect("{\"type\": \"integer\"}", L("0", "-7", "1234567890123456"), L("01", "-0.5", "1e3", "+1", "12345678901234567"));
    expect("{\"type\": \"number\"}", L("0", "-0.25", "1.5e10", "2E-3", "7e+2"), L("1.", ".5", "01", "1e", "1e100"));
}

Test(json_schema, string_escapes_that_jansson_refuses_are_not_produced)
{
    expect("{\"type\": \"string\"}", L("\"\\u0001\"", "\"\\ud83d\\ude00\"", "\"\\uFFFF\""),
           L("\"\\u0000\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud83d\\u0041\""));
}

Test(json_schema, type_lists_are_alternatives)
{
    expect("{\"type\": [\"string\", \"null\"]}", L("\"a\"", "null"), L("1", "true"));
    expect("{\"type\": [\"integer\", \"boolean\"], \"minimum\": 3}", L("3", "true"), L("2", "null"));
}

Test(json_schema, keywords_without_type_imply_it)
{
    expect("{\"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}", L("{\"a\": 1}"), L("{}", "1"));
    expect("{\"minLength\": 2}", L("\"ab\""), L("\"a\""));
    expect("{\"maxItems\": 1}", L("[]", "[3]"), L("[1, 2]"));
    expect("{\"minimum\": 1, \"maximum\": 2}", L("1", "1.5", "2"), L("0", "2.5"));
}

/* ---- whitespace --------------------------------------------------------------------- */

Test(json_schema, whitespace_is_bounded)
{
    char twenty[64], twenty_one[64];
    snprintf(twenty, sizeof twenty, "[\n%20s1]", "");
    snprintf(twenty_one, sizeof twenty_one, "[\n%21s1]", "");
    const char *yes[] = {"[1]", "[ 1 ]", "[\n\t1\n]", twenty, NULL};
    const char *no[] = {twenty_one, "[  1]", "[\n\n1]", "[ \n1]", NULL};
    expect("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}", yes, no);
}

/* ---- objects ------------------------------------------------------------------------ */

Test(json_schema, properties_in_order_required_present_optional_omittable)
{
    const char *s = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"},"
                    " \"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}";
    expect(s, L("{\"b\": \"x\"}", "{\"a\": 1, \"b\": \"x\"}", "{\"b\": \"x\", \"c\": true}", "{\"a\":1,\"b\":\"\",\"c\":false}",
                "{ \"b\" : \"x\" }"),
           L("{}", "{\"a\": 1}", "{\"b\": \"x\", \"a\": 1}", "{\"b\": 1}", "{\"b\": \"x\",}", "{\"b\": \"x\", \"d\": 1}",
             "{\"b\": \"x\" \"c\": true}"));
}

Test(json_schema, all_optional_allows_any_ordered_subset)
{
    const char *s = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"null\"}, \"b\": {\"type\": \"null\"}}}";
    expect(s, L("{}", "{\"a\": null}", "{\"b\": null}", "{\"a\": null, \"b\": null}"),
           L("{\"b\": null, \"a\": null}", "{,\"b\": null}", "{\"a\": null,}"));
}

Test(json_schema, additional_properties)
{
    expect("{\"type\": \"object\"}", L("{}", "{\"x\": [1]}", "{\"x\": 1, \"y\": null}"), L("[]"));
    expect("{\"type\": \"object\", \"additionalProperties\": true}", L("{\"k\": \"v\"}"), NULL);
    expect("{\"type\": \"object\", \"additionalProperties\": false}", L("{}", "{ }"), L("{\"x\": 1}"));
    expect("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}", L("{}", "{\"x\": 1, \"y\": 2}"),
           L("{\"x\": \"s\"}"));
    /* with properties: no other keys when absent or true */
    expect("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"null\"}}, \"additionalProperties\": true}",
           L("{}", "{\"a\": null}"), L("{\"z\": 1}"));
    /* a schema: extra keys after the declared ones, never a declared name */
    expect("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"null\"}}, \"additionalProperties\": {\"type\": "
           "\"integer\"}}",
           L("{}", "{\"a\": null}", "{\"z\": 1}", "{\"a\": null, \"ab\": 2, \"b\": 3}", "{\"A\": 1}"),
           L("{\"z\": \"s\"}", "{\"a\": 1}", "{\"z\": 1, \"a\": null}", "{\"\": 1}", "{\"a b\": 1}"));
    expect("{\"type\": \"object\", \"properties\": {\"ab\": {\"type\": \"null\"}, \"a\": {\"type\": \"null\"}, "
           "\"x-y\": {\"type\": \"null\"}, \"h\u00e9\": {\"type\": \"null\"}}, \"required\": [\"ab\"], "
           "\"additionalProperties\": {\"type\": \"boolean\"}}",
           L("{\"ab\": null, \"abc\": true}", "{\"ab\": null, \"x\": true, \"x-\": false, \"x-yz\": true, \"b\": true}"),
           L("{\"ab\": null, \"ab\": true}", "{\"ab\": null, \"a\": true}", "{\"ab\": null, \"x-y\": true}",
             "{\"abc\": true}"));
    expect("{\"type\": \"object\", \"properties\": {}}", L("{}"), L("{\"a\": 1}"));
}

Test(json_schema, required_names_without_a_schema_take_any_value)
{
    expect("{\"type\": \"object\", \"required\": [\"x\"]}", L("{\"x\": 1}", "{\"x\": {\"y\": []}}"), L("{}"));
    expect("{\"type\": \"object\", \"required\": [\"x\"], \"additionalProperties\": {\"type\": \"string\"}}",
           L("{\"x\": \"s\"}"), L("{\"x\": 1}"));
}

Test(json_schema, keys_are_json_escaped)
{
    expect("{\"type\": \"object\", \"properties\": {\"a\\\"b\": {\"type\": \"null\"}, \"\xc3\xa9\": {\"type\": \"null\"}},"
           " \"required\": [\"a\\\"b\", \"\xc3\xa9\"]}",
           L("{\"a\\\"b\": null, \"\xc3\xa9\": null}"), L("{\"a\"b\": null, \"\xc3\xa9\": null}"));
}

Test(json_schema, property_false_is_never_present)
{
    expect("{\"type\": \"object\", \"properties\": {\"a\": false, \"b\": {\"type\": \"null\"}}}", L("{}", "{\"b\": null}"),
           L("{\"a\": null}"));
}

/* ---- arrays ------------------------------------------------------------------------- */

Test(json_schema, items_min_max)
{
    expect("{\"type\": \"array\"}", L("[]", "[1, \"a\", null]"), L("[1,]"));
    expect("{\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"minItems\": 1, \"maxItems\": 3}",
           L("[true]", "[true, false, true]"), L("[]", "[true, true, true, true]", "[1]"));
    expect("{\"type\": \"array\", \"minItems\": 2, \"maxItems\": 2, \"items\": {\"type\": \"null\"}}", L("[null, null]"),
           L("[null]", "[null, null, null]"));
    expect("{\"type\": \"array\", \"minItems\": 2}", L("[1, 2]", "[1, 2, 3]"), L("[1]"));
    expect("{\"type\": \"array\", \"maxItems\": 0}", L("[]"), L("[1]"));
}

Test(json_schema, prefix_items)
{
    const char *open = "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}";
    expect(open, L("[]", "[1]", "[1, \"a\"]", "[1, \"a\", null, 5]"), L("[\"a\"]", "[1, 2]"));
    const char *closed = "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], "
                         "\"items\": false, \"minItems\": 1}";
    expect(closed, L("[1]", "[1, \"a\"]"), L("[]", "[1, \"a\", 2]"));
    const char *tail = "{\"type\": \"array\", \"prefixItems\": [{\"const\": 0}], \"items\": {\"type\": \"boolean\"}, "
                       "\"minItems\": 2, \"maxItems\": 3}";
    expect(tail, L("[0, true]", "[0, true, false]"), L("[0]", "[0, true, true, true]", "[true, true]"));
}

/* ---- enum, const, combinators -------------------------------------------------------- */

Test(json_schema, enum_and_const)
{
    expect("{\"enum\": [\"a\", 1, null, [1, 2], {\"k\": true}]}", L("\"a\"", "1", "null", "[1,2]", "{\"k\":true}"),
           L("\"b\"", "2", "[1, 2]", "true"));
    expect("{\"type\": \"string\", \"enum\": [\"a\", 1]}", L("\"a\""), L("1"));
    expect("{\"const\": \"x\\\"y\"}", L("\"x\\\"y\""), L("\"x\"y\""));
    expect("{\"const\": 2, \"enum\": [1, 2]}", L("2"), L("1"));
}

Test(json_schema, any_of_one_of_all_of)
{
    expect("{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", \"maxLength\": 1}]}", L("5", "\"a\""),
           L("\"ab\"", "null"));
    expect("{\"oneOf\": [{\"type\": \"null\"}, {\"type\": \"boolean\"}], \"description\": \"d\"}", L("null", "true"),
           L("1"));
    expect("{\"allOf\": [{\"type\": \"integer\", \"maximum\": 3}]}", L("3"), L("4"));
}

/* ---- $ref --------------------------------------------------------------------------- */

Test(json_schema, local_refs)
{
    expect("{\"$defs\": {\"p\": {\"type\": \"integer\", \"minimum\": 1}}, \"type\": \"array\", \"items\": {\"$ref\": "
           "\"#/$defs/p\"}}",
           L("[1, 2]"), L("[0]"));
    expect("{\"definitions\": {\"a/b\": {\"const\": 1}, \"t~\": {\"const\": 2}}, \"prefixItems\": [{\"$ref\": "
           "\"#/definitions/a~1b\"}, {\"$ref\": \"#/definitions/t~0\"}], \"type\": \"array\"}",
           L("[1, 2]"), L("[2, 1]"));
    expect("{\"type\": \"array\", \"prefixItems\": [{\"const\": 7}, {\"$ref\": \"#/prefixItems/0\"}]}", L("[7, 7]"),
           L("[7, 8]"));
}

Test(json_schema, recursive_refs_become_recursive_rules)
{
    const char *tree = "{\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"kids\": {\"type\": "
                       "\"array\", \"items\": {\"$ref\": \"#\"}}}, \"required\": [\"v\"]}";
    expect(tree, L("{\"v\": 1}", "{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": [{\"v\": 3}]}, {\"v\": 4}]}"),
           L("{\"v\": 1, \"kids\": [{}]}"));
    const char *list = "{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"next\": {\"anyOf\": [{\"$ref\": "
                       "\"#/$defs/n\"}, {\"type\": \"null\"}]}}, \"required\": [\"next\"]}}, \"$ref\": \"#/$defs/n\"}";
    expect(list, L("{\"next\": null}", "{\"next\": {\"next\": {\"next\": null}}}"), L("{}", "{\"next\": {}}"));
}

/* ---- strings ------------------------------------------------------------------------ */

Test(json_schema, string_lengths_count_code_points)
{
    expect("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
           L("\"ab\"", "\"abc\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\n\\t\"", "\"\\ud83d\\ude00x\""), L("\"a\"", "\"abcd\"", "\"\""));
    expect("{\"type\": \"string\", \"maxLength\": 0}", L("\"\""), L("\"a\""));
}

Test(json_schema, pattern_constrains_the_decoded_value)
{
    expect("{\"type\": \"string\", \"pattern\": \"^[a-c]{2}-\\\\d$\"}", L("\"ab-1\""), L("\"ab-x\"", "\"abc-1\"", "\"ab-1"));
    expect("{\"type\": \"string\", \"pattern\": \"a\\\"b\\\\\\\\c\"}", L("\"a\\\"b\\\\c\""), L("\"a\"b\\c\""));
    expect("{\"type\": \"string\", \"pattern\": \"x\\\\ny\"}", L("\"x\\ny\""), L("\"x\ny\""));
}

Test(json_schema, formats)
{
    expect("{\"type\": \"string\", \"format\": \"date\"}", L("\"2024-02-28\"", "\"1999-12-31\"", "\"2024-04-30\""),
           L("\"2024-02-30\"", "\"2024-13-01\"", "\"2024-04-31\"", "\"24-01-01\"", "\"2024-1-01\""));
    expect("{\"type\": \"string\", \"format\": \"time\"}", L("\"23:59:59Z\"", "\"00:00:00.123+05:30\""),
           L("\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\""));
    expect("{\"type\": \"string\", \"format\": \"date-time\"}", L("\"2024-07-26T12:00:00Z\"", "\"2024-07-26T12:00:00-08:00\""),
           L("\"2024-07-26 12:00:00Z\"", "\"2024-07-26\""));
    expect("{\"type\": \"string\", \"format\": \"uuid\"}", L("\"123e4567-e89b-12d3-a456-426614174000\""),
           L("\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""));
    expect("{\"type\": \"string\", \"format\": \"email\"}", L("\"a.b+c@example.co.uk\"", "\"x@y-z.io\""),
           L("\"a@b\"", "\"@b.com\"", "\"a b@c.com\"", "\"a@@b.com\""));
}

/* ---- numbers ------------------------------------------------------------------------ */

static void check_integer_range(const char *bounds, long long lo, long long hi)
{
    char schema[256];
    snprintf(schema, sizeof schema, "{\"type\": \"integer\", %s}", bounds);
    sl_grammar *g = grammar_of(schema);
    for (long long x = lo - 120; x <= hi + 120; x++) {
        char num[32];
        snprintf(num, sizeof num, "%lld", x);
        cr_expect_eq(matches(g, num), x >= lo && x <= hi, "%s: %s", schema, num);
    }
    cr_expect(!matches(g, "-0"), "%s: -0", schema);
    sl_grammar_destroy(g);
}

Test(json_schema, integer_ranges_are_exact)
{
    check_integer_range("\"minimum\": -12, \"maximum\": 345", -12, 345);
    check_integer_range("\"minimum\": 0, \"maximum\": 0", 0, 0);
    check_integer_range("\"minimum\": -1000, \"maximum\": -7", -1000, -7);
    check_integer_range("\"minimum\": 99, \"maximum\": 1001", 99, 1001);
    check_integer_range("\"exclusiveMinimum\": -3, \"exclusiveMaximum\": 3", -2, 2);
    check_integer_range("\"minimum\": 1.5, \"maximum\": 7.5", 2, 7);
    check_integer_range("\"minimum\": 0, \"exclusiveMinimum\": true, \"maximum\": 10, \"exclusiveMaximum\": true", 1, 9);
    check_integer_range("\"minimum\": 100, \"maximum\": 199", 100, 199);
    check_integer_range("\"minimum\": 190, \"maximum\": 2010", 190, 2010);
}

Test(json_schema, integer_half_bounded)
{
    expect("{\"type\": \"integer\", \"minimum\": 99}", L("99", "100", "123456789"), L("98", "-1", "0", "099"));
    expect("{\"type\": \"integer\", \"maximum\": -5}", L("-5", "-6", "-1000000"), L("-4", "0", "5"));
    expect("{\"type\": \"integer\", \"exclusiveMinimum\": 0}", L("1", "10"), L("0", "-1"));
    expect("{\"type\": \"integer\", \"minimum\": -1e20}", L("5", "-5"), L("1.5"));
}

Test(json_schema, number_bounds_are_exact)
{
    expect("{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}", L("0", "0.5", "1", "1.0", "0.99999"),
           L("-0.1", "1.01", "1.1", "2", "-1", "1e0"));
    expect("{\"type\": \"number\", \"exclusiveMinimum\": 0}", L("0.00001", "0.1", "5", "12.5"), L("0", "0.0", "-1", "0.00"));
    expect("{\"type\": \"number\", \"minimum\": -5, \"exclusiveMaximum\": -2}", L("-5", "-5.0", "-2.5", "-3"),
           L("-2", "-2.0", "-5.1", "-6", "0"));
    expect("{\"type\": \"number\", \"exclusiveMinimum\": -1, \"exclusiveMaximum\": 1}", L("0", "-0.5", "0.5", "-0"),
           L("1", "-1", "1.0", "-1.0"));
    expect("{\"type\": \"number\", \"exclusiveMaximum\": 0}", L("-0.5", "-100"), L("0", "0.5", "-0"));
}

Test(json_schema, number_decimal_bounds_are_exact)
{
    expect("{\"type\": \"number\", \"minimum\": 0.5, \"exclusiveMaximum\": 2.25}",
           L("0.5", "0.50", "0.5001", "0.9", "1", "1.99999", "2", "2.2", "2.24999", "2.249"),
           L("0.49999", "0.4", "0", "2.25", "2.250", "2.3", "3", "-1"));
    expect("{\"type\": \"number\", \"exclusiveMinimum\": -0.1, \"maximum\": 0.1}",
           L("-0.09999", "-0.05", "0", "-0", "0.1", "0.10000", "0.00001"), L("-0.1", "-0.10", "0.10001", "0.2", "-1"));
    expect("{\"type\": \"number\", \"minimum\": 99.99}", L("99.99", "99.995", "100", "123456.7"), L("99.98999", "99", "-5"));
    expect("{\"type\": \"number\", \"maximum\": -1.5}", L("-1.5", "-1.50001", "-2", "-1000.25"), L("-1.49999", "-1", "0"));
    expect("{\"type\": \"number\", \"minimum\": 0.25, \"maximum\": 0.25}", L("0.25", "0.250"), L("0.2", "0.251"));
    expect_error("{\"type\": \"number\", \"exclusiveMinimum\": 0.25, \"maximum\": 0.25}", "no number lies within");
}

/* ---- errors ------------------------------------------------------------------------- */

Test(json_schema, refused_keywords_name_keyword_and_path)
{
    expect_error("{\"not\": {}}", "unsupported keyword 'not' at root");
    expect_error("{\"type\": \"object\", \"properties\": {\"x\": {\"not\": {}}}}", "unsupported keyword 'not' at /properties/x");
    expect_error("{\"if\": {}, \"then\": {}}", "unsupported keyword 'if' at root");
    expect_error("{\"properties\": {\"a/b\": {\"else\": {}}}}", "unsupported keyword 'else' at /properties/a~1b");
    expect_error("{\"patternProperties\": {}}", "unsupported keyword 'patternProperties' at root");
    expect_error("{\"dependentRequired\": {}}", "unsupported keyword 'dependentRequired' at root");
    expect_error("{\"unevaluatedProperties\": false}", "unsupported keyword 'unevaluatedProperties' at root");
    expect_error("{\"items\": {\"contains\": {}}}", "unsupported keyword 'contains' at /items");
    expect_error("{\"uniqueItems\": true}", "unsupported keyword 'uniqueItems' at root");
    expect_error("{\"multipleOf\": 2}", "unsupported keyword 'multipleOf' at root");
    expect_error("{\"minProperties\": 1}", "unsupported keyword 'minProperties' at root");
    expect_error("{\"anyOf\": [{\"type\": \"null\"}, {\"maxProperties\": 1}]}", "unsupported keyword 'maxProperties' at /anyOf/1");
    expect_error("{\"prefixItems\": [{}, {\"nullable\": true}]}", "unsupported keyword 'nullable' at /prefixItems/1");
    expect_error("{\"$ref\": \"other.json#/x\"}", "unsupported keyword '$ref' at root: remote reference 'other.json#/x'");
    expect_error("{\"type\": \"string\", \"format\": \"uri\"}", "unsupported keyword 'format' at root: format 'uri'");
    expect_error("{\"$defs\": {\"d\": {\"not\": {}}}, \"$ref\": \"#/$defs/d\"}", "unsupported keyword 'not' at /$defs/d");
}

Test(json_schema, refused_combinations)
{
    expect_error("{\"$ref\": \"#/$defs/a\", \"type\": \"string\", \"$defs\": {\"a\": {}}}", "keyword 'type' beside '$ref' at root");
    expect_error("{\"anyOf\": [{}], \"type\": \"string\"}", "keyword 'type' beside 'anyOf' at root");
    expect_error("{\"enum\": [1], \"minimum\": 0}", "keyword 'minimum' beside 'enum' at root");
    expect_error("{\"type\": \"string\", \"pattern\": \"a\", \"maxLength\": 2}", "keyword 'maxLength' beside 'pattern' at root");
    expect_error("{\"type\": \"string\", \"format\": \"date\", \"minLength\": 2}", "keyword 'minLength' beside 'format' at root");
    expect_error("{\"type\": \"string\", \"format\": \"date\", \"pattern\": \"a\"}", "keyword 'format' beside 'pattern' at root");
    expect_error("{\"allOf\": [{}, {}]}", "invalid keyword 'allOf' at root: only one schema is supported");
}

Test(json_schema, malformed_values_name_keyword_and_path)
{
    expect_error("{\"type\": 5}", "invalid keyword 'type' at root");
    expect_error("{\"type\": \"float\"}", "invalid keyword 'type' at root");
    expect_error("{\"type\": []}", "invalid keyword 'type' at root");
    expect_error("{\"type\": [\"null\", \"null\"]}", "invalid keyword 'type' at root");
    expect_error("{\"type\": \"object\", \"required\": \"a\"}", "invalid keyword 'required' at root");
    expect_error("{\"type\": \"object\", \"required\": [1]}", "invalid keyword 'required' at root");
    expect_error("{\"type\": \"object\", \"properties\": []}", "invalid keyword 'properties' at root");
    expect_error("{\"type\": \"object\", \"additionalProperties\": 1}", "invalid keyword 'additionalProperties' at root");
    expect_error("{\"type\": \"object\", \"properties\": {\"a\": false}, \"required\": [\"a\"]}", "invalid keyword 'required' at root");
    expect_error("{\"type\": \"object\", \"required\": [\"z\"], \"additionalProperties\": false}", "invalid keyword 'required' at root");
    expect_error("{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "invalid keyword 'minItems' at root: greater than maxItems");
    expect_error("{\"type\": \"array\", \"minItems\": -1}", "invalid keyword 'minItems' at root");
    expect_error("{\"type\": \"array\", \"maxItems\": 1.5}", "invalid keyword 'maxItems' at root");
    expect_error("{\"type\": \"array\", \"maxItems\": 100000}", "invalid keyword 'maxItems' at root: over 1000");
    expect_error("{\"type\": \"array\", \"items\": [{}]}", "invalid keyword 'items' at root");
    expect_error("{\"type\": \"array\", \"items\": 3}", "invalid keyword 'items' at root");
    expect_error("{\"type\": \"array\", \"prefixItems\": {}}", "invalid keyword 'prefixItems' at root");
    expect_error("{\"type\": \"array\", \"prefixItems\": [{}], \"items\": false, \"minItems\": 2}",
                 "invalid keyword 'minItems' at root");
    expect_error("{\"type\": \"string\", \"minLength\": \"1\"}", "invalid keyword 'minLength' at root");
    expect_error("{\"type\": \"string\", \"minLength\": 3, \"maxLength\": 2}", "invalid keyword 'minLength' at root");
    expect_error("{\"type\": \"string\", \"pattern\": 1}", "invalid keyword 'pattern' at root");
    expect_error("{\"type\": \"string\", \"pattern\": \"(?=a)\"}", "invalid keyword 'pattern' at root: regex: lookahead");
    expect_error("{\"type\": \"string\", \"format\": 1}", "invalid keyword 'format' at root");
    expect_error("{\"enum\": []}", "invalid keyword 'enum' at root");
    expect_error("{\"enum\": 1}", "invalid keyword 'enum' at root");
    expect_error("{\"type\": \"string\", \"enum\": [1]}", "invalid keyword 'enum' at root: no value");
    expect_error("{\"const\": 1, \"enum\": [2]}", "invalid keyword 'const' at root");
    expect_error("{\"anyOf\": []}", "invalid keyword 'anyOf' at root");
    expect_error("{\"oneOf\": {}}", "invalid keyword 'oneOf' at root");
    expect_error("{\"$ref\": 1}", "invalid keyword '$ref' at root");
    expect_error("{\"properties\": {\"a\": {\"$ref\": \"#/$defs/missing\"}}}", "invalid keyword '$ref' at /properties/a: unknown target");
    expect_error("{\"$ref\": \"#/~2\"}", "invalid keyword '$ref' at root: unknown target");
    expect_error("{\"$defs\": []}", "invalid keyword '$defs' at root");
    expect_error("{\"type\": \"integer\", \"minimum\": \"0\"}", "invalid keyword 'minimum' at root");
    expect_error("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "invalid keyword 'minimum' at root");
    expect_error("{\"type\": \"integer\", \"exclusiveMinimum\": true}", "invalid keyword 'exclusiveMinimum' at root");
    expect_error("{\"type\": \"number\", \"minimum\": 0.123456}", "invalid keyword 'minimum' at root: a bound of a number");
    expect_error("{\"type\": \"number\", \"exclusiveMaximum\": 1e12}", "invalid keyword 'exclusiveMaximum' at root");
    expect_error("{\"type\": \"number\", \"minimum\": 1, \"exclusiveMaximum\": 1}", "invalid keyword 'minimum' at root");
    expect_error("false", "invalid schema at root: false matches nothing");
    expect_error("3", "invalid schema at root: not an object or a boolean");
    expect_error("{\"properties\": {\"a\": \"x\"}}", "invalid schema at /properties/a");
}

Test(json_schema, recursion_that_cannot_end_is_refused)
{
    expect_error("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/a\"}}, \"$ref\": \"#/$defs/a\"}",
                 "invalid keyword '$ref' at /$defs/a: '#/$defs/a' refers back to itself");
    expect_error("{\"anyOf\": [{\"$ref\": \"#\"}, {\"type\": \"null\"}]}", "invalid keyword '$ref' at /anyOf/0");
    expect_error("{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#\"}}, \"required\": [\"a\"]}",
                 "invalid schema at root: its recursion never ends");
    expect_error("{\"$defs\": {\"n\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}, \"minItems\": 1}},"
                 " \"type\": \"object\", \"properties\": {\"x\": {\"$ref\": \"#/$defs/n\"}}}",
                 "invalid schema at /$defs/n: its recursion never ends");
}

Test(json_schema, deep_nesting_is_refused_not_overflowed)
{
    char s[8192] = "";
    for (int i = 0; i < 100; i++)
        strcat(s, "{\"items\":");
    strcat(s, "{}");
    for (int i = 0; i < 100; i++)
        strcat(s, "}");
    expect_error(s, "nested more than 64 deep");
}

Test(json_schema, ref_chains_count_toward_the_depth)
{
    /* a0 -> a1 -> ... -> a199, each an array of the next: the walk's depth
     * counts through $ref targets, so the stack stays bounded */
    size_t cap = 64 * 1024, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"$ref\": \"#/$defs/a0\", \"$defs\": {");
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"a%d\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/a%d\"}}",
                              i ? ", " : "", i, i + 1);
    n += (size_t)snprintf(s + n, cap - n, ", \"a200\": {\"type\": \"null\"}}}");
    expect_error(s, "nested more than 64 deep");
    free(s);
}

Test(json_schema, bad_arguments)
{
    json_t *s = json_object();
    char *out = (char *)1, err[SL_ERR_LEN] = "";
    cr_expect_eq(sl_json_schema_to_gbnf(NULL, "root", &out, err, sizeof err), SL_EINVAL);
    cr_expect_null(out);
    cr_expect(strstr(err, "no schema") != NULL, "%s", err);
    out = (char *)1;
    cr_expect_eq(sl_json_schema_to_gbnf(s, "bad name", &out, err, sizeof err), SL_EINVAL);
    cr_expect_null(out);
    cr_expect_eq(sl_json_schema_to_gbnf(s, "", &out, err, sizeof err), SL_EINVAL);
    cr_expect_eq(sl_json_schema_to_gbnf(s, NULL, &out, err, sizeof err), SL_EINVAL);
    cr_expect_eq(sl_json_schema_to_gbnf(s, "root", NULL, err, sizeof err), SL_EINVAL);
    cr_expect_eq(sl_json_schema_to_gbnf(s, "root", &out, NULL, 0), SL_OK);   /* no err buffer is fine */
    free(out);
    json_t *bad = json_pack("{s:i}", "not", 1);
    cr_expect_eq(sl_json_schema_to_gbnf(bad, "root", &out, NULL, 0), SL_EINVAL);
    cr_expect_eq(sl_json_schema_to_gbnf(bad, "root", &out, err, 1), SL_EINVAL);
    cr_expect_eq(err[0], 0);
    json_decref(bad);
    json_decref(s);
}

Test(json_schema, helper_rules_carry_the_root_name)
{
    json_t *s = json_loads("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"format\": \"date-time\"},"
                           " \"b\": {\"pattern\": \"x+\"}, \"c\": {}}}", 0, NULL);
    char *out = NULL, err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_json_schema_to_gbnf(s, "tool-3", &out, err, sizeof err), SL_OK, "%s", err);
    json_decref(s);
    bool root_seen = false;
    for (char *line = out; *line;) {
        char *eol = strchr(line, '\n');
        cr_assert_not_null(eol);
        cr_expect(strncmp(line, "tool-3-", 7) == 0 || strncmp(line, "tool-3 ::= ", 11) == 0, "%.*s", (int)(eol - line), line);
        root_seen |= strncmp(line, "tool-3 ::= ", 11) == 0;
        line = eol + 1;
    }
    cr_expect(root_seen);
    /* concatenated with another grammar under another name, it still compiles */
    char *both = malloc(strlen(out) + 64);
    sprintf(both, "root ::= \"<\" tool-3 \">\"\n%s", out);
    sl_grammar *g = NULL;
    cr_expect_eq(sl_grammar_create(both, strlen(both), &g, err, sizeof err), SL_OK, "%s", err);
    cr_expect(matches(g, "<{\"c\": 1}>"));
    sl_grammar_destroy(g);
    free(both);
    free(out);
}

Test(json_schema, json_object)
{
    char *out = NULL;
    cr_assert_eq(sl_json_object_gbnf("obj", &out), SL_OK);
    cr_expect(strncmp(out, "obj ::= obj-object\n", 19) == 0, "%s", out);
    free(out);
    cr_assert_eq(sl_json_object_gbnf("root", &out), SL_OK);
    sl_grammar *g = NULL;
    cr_assert_eq(sl_grammar_create(out, strlen(out), &g, NULL, 0), SL_OK);
    cr_expect(matches(g, "{}"));
    cr_expect(matches(g, "{\"a\": [1, {\"b\": null}]}"));
    cr_expect(!matches(g, "[]"));
    cr_expect(!matches(g, "1"));
    sl_grammar_destroy(g);
    free(out);
    out = (char *)1;
    cr_expect_eq(sl_json_object_gbnf("no good", &out), SL_EINVAL);
    cr_expect_null(out);
    cr_expect_eq(sl_json_object_gbnf("root", NULL), SL_EINVAL);
}
