/* tests/unit/model/grammar/parse_test.c: GBNF text -> sl_grammar
 * (model/grammar/gbnf_parse.c, grammar.c): every syntax element compiles
 * and means what it should (checked through the matcher), and every error
 * is SL_EINVAL with a message naming what and where. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"

static sl_grammar *compile(const char *src)
{
    sl_grammar *g = NULL;
    char err[256] = "";
    sl_status rc = sl_grammar_create(src, strlen(src), &g, err, sizeof err);
    cr_assert_eq(rc, SL_OK, "%s: %s", src, err);
    return g;
}

/* Whole-string match: every byte accepted and the end accepting. */
static bool matches(const sl_grammar *g, const char *s, size_t n)
{
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, s, n) == SL_OK && sl_grammar_matcher_accepting(m);
    sl_grammar_matcher_destroy(m);
    return ok;
}

static void expect(const char *src, const char *const *yes, const char *const *no)
{
    sl_grammar *g = compile(src);
    for (; yes && *yes; yes++)
        cr_expect(matches(g, *yes, strlen(*yes)), "%s should match '%s'", src, *yes);
    for (; no && *no; no++)
        cr_expect(!matches(g, *no, strlen(*no)), "%s should not match '%s'", src, *no);
    sl_grammar_destroy(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_error(const char *src, size_t len, const char *want)
{
    sl_grammar *g = (sl_grammar *)1;
    char err[256] = "";
    sl_status rc = sl_grammar_create(src, len, &g, err, sizeof err);
    cr_expect_eq(rc, SL_EINVAL, "'%.*s' compiled", (int)len, src);
    cr_expect_null(g);
    cr_expect(strstr(err, want) != NULL, "'%.*s': error '%s' lacks '%s'", (int)len, src, err, want);
}

Test(grammar_parse, literal_and_sequence)
{
    expect("root ::= \"ab\" \"c\"", L("abc"), L("", "ab", "abcd", "abd"));
    expect("root ::= \"\"", L(""), L("a"));
}

Test(grammar_parse, alternatives_and_groups)
{
    expect("root ::= \"a\" | \"b\" (\"c\" | \"d\" \"e\")", L("a", "bc", "bde"), L("b", "bd", "ac"));
    expect("root ::= ()", L(""), L("x"));
    expect("root ::= \"a\" | ", L("a", ""), L("b"));
}

Test(grammar_parse, rules_span_lines_and_comments)
{
    expect("# top comment\nroot ::= a\n  | b # trailing\nb ::= \"y\"\n\na ::=\n  \"x\" \"z\" # end", L("xz", "y"),
           L("x", "z"));
    expect("root ::= x-y_z\nx-y_z ::= \"q\"", L("q"), L(""));
}

Test(grammar_parse, escapes)
{
    expect("root ::= \"\\n\\t\\r\\\\\\\"\\[\\]\"", L("\n\t\r\\\"[]"), NULL);
    expect("root ::= \"\\x41\\u00e9\\U0001F600\"", L("A\xc3\xa9\xf0\x9f\x98\x80"), L("A\xe9"));
    expect("root ::= [\\x30-\\x39\\-]", L("0", "9", "-"), L("a"));
}

Test(grammar_parse, classes)
{
    expect("root ::= [a-cx]", L("a", "b", "c", "x"), L("d", "", "ab"));
    expect("root ::= [^a-c]", L("d", "\xc3\xa9", "\xe4\xb8\x96", "\xf0\x9f\x98\x80"), L("a", "", "\xc3", "\xed\xa0\x80"));
    expect("root ::= [äöü]", L("\xc3\xa4", "\xc3\xb6", "\xc3\xbc"), L("a", "\xc3\xa5"));
    expect("root ::= [\\u0100-\\U0010FFFF]", L("\xc4\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"), L("\xc3\xbf", "a"));
    expect("root ::= [-a]", L("-", "a"), L("b"));
    expect("root ::= [a-]", L("-", "a"), L("b"));
}

Test(grammar_parse, dot)
{
    expect("root ::= .", L("a", "\x7f", "\xc2\x80", "\xe2\x82\xac", "\xf4\x8f\xbf\xbf"),
           L("", "ab", "\x80", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"));
}

Test(grammar_parse, repetitions)
{
    expect("root ::= \"a\"*", L("", "a", "aaaa"), L("b"));
    expect("root ::= \"ab\"+", L("ab", "abab"), L("", "a", "aba"));
    expect("root ::= \"a\"? \"b\"", L("b", "ab"), L("aab"));
    expect("root ::= \"a\"{3}", L("aaa"), L("aa", "aaaa"));
    expect("root ::= \"a\"{2,}", L("aa", "aaaaaaa"), L("a"));
    expect("root ::= \"a\"{1,3}", L("a", "aa", "aaa"), L("", "aaaa"));
    expect("root ::= \"a\"{0,2} \"b\"", L("b", "ab", "aab"), L("aaab"));
    expect("root ::= (\"a\" | \"bc\"){ 2 , 2 }", L("aa", "abc", "bcbc"), L("a", "aaa"));
    expect("root ::= \"a\"{0}", L(""), L("a"));
    expect("root ::= [0-9]{1,3000}", L("1", "1234567890"), L(""));
}

Test(grammar_parse, nullable_right_recursion_is_fine)
{
    expect("root ::= item*\nitem ::= \"x\" | \"(\" root \")\"", L("", "x", "(x)", "((x)x)x"), L("(", ")"));
}

Test(grammar_parse, error_undefined_rule)
{
    expect_error("root ::= a b\na ::= \"x\"", 22, "undefined rule 'b' at byte 11");
}

Test(grammar_parse, error_no_root)
{
    expect_error("a ::= \"x\"", 9, "no rule 'root'");
}

Test(grammar_parse, error_left_recursion)
{
    const char *direct = "root ::= root \"a\" | \"b\"";
    expect_error(direct, strlen(direct), "rule 'root' is left-recursive");
    const char *indirect = "root ::= a\na ::= b \"x\"\nb ::= a | \"y\"";
    expect_error(indirect, strlen(indirect), "left-recursive");
    const char *nullable = "root ::= e root \"x\" | \"y\"\ne ::= \"z\"?";
    expect_error(nullable, strlen(nullable), "rule 'root' is left-recursive");
    const char *star = "root ::= (\"a\"?)*";
    expect_error(star, strlen(star), "left-recursive");
}

Test(grammar_parse, error_empty_language)
{
    const char *loop = "root ::= a\na ::= \"x\" a";
    expect_error(loop, strlen(loop), "rule 'a' matches nothing at byte 11");
    const char *cls = "root ::= [^\\x00-\\U0010FFFF]";
    expect_error(cls, strlen(cls), "matches nothing");
}

Test(grammar_parse, error_bad_escape)
{
    expect_error("root ::= \"\\q\"", 13, "bad escape \\q at byte 10");
    expect_error("root ::= \"\\x4\"", 14, "needs 2 hex digits");
    expect_error("root ::= \"\\uD800\"", 17, "not a Unicode scalar value");
    expect_error("root ::= \"\\U00110000\"", 21, "not a Unicode scalar value");
    expect_error("root ::= \"\\", 11, "bad escape at the end");
}

Test(grammar_parse, error_unterminated)
{
    expect_error("root ::= \"abc", 13, "unterminated literal at byte 9 (rule 'root')");
    expect_error("root ::= [abc", 13, "unterminated character class at byte 9");
    expect_error("root ::= (\"a\" | \"b\"", 19, "unterminated group");
    expect_error("root ::= \"a\" )", 14, "unbalanced ')'");
}

Test(grammar_parse, error_repetition)
{
    expect_error("root ::= \"a\"{3,2}", 17, "max < min");
    expect_error("root ::= \"a\"{x}", 15, "expected a number");
    expect_error("root ::= \"a\"{1", 14, "expected '}'");
    expect_error("root ::= \"a\"{10001}", 19, "bound over 10000");
    expect_error("root ::= * \"a\"", 14, "without an element");
    const char *many = "root ::= [0-9]{1,10000}";   /* each optional copy is a rule */
    expect_error(many, strlen(many), "more than 4096 rules");
}

Test(grammar_parse, error_syntax)
{
    expect_error("root = \"a\"", 10, "expected '::='");
    expect_error("::= \"a\"", 7, "expected a rule name");
    expect_error("root ::= \"a\" ; \"b\"", 18, "unexpected character ';'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", 25, "defined twice");
    expect_error("root ::= [z-a]", 14, "out of order");
}

Test(grammar_parse, error_nul_and_utf8)
{
    expect_error("root ::= \"a\0\"", 13, "NUL byte at byte 11");
    expect_error("root ::= \"\xc3\"", 12, "invalid UTF-8 at byte 10");
    expect_error("root ::= \"\xc0\xaf\"", 13, "invalid UTF-8");
    expect_error("root ::= \"\xed\xa0\x80\"", 14, "invalid UTF-8");
    expect_error("root ::= [\xff]", 12, "invalid UTF-8");
    expect_error("root ::= \xc3\xa9", 11, "unexpected byte 0xC3");
}

Test(grammar_parse, error_text_too_long)
{
    size_t n = SL_GRAMMAR_TEXT_MAX + 1;
    char *s = malloc(n);
    memset(s, ' ', n);
    memcpy(s, "root ::= \"a\"", 12);
    expect_error(s, n, "longer than");
    free(s);
}

Test(grammar_parse, error_buffer_optional)
{
    sl_grammar *g = (sl_grammar *)1;
    cr_expect_eq(sl_grammar_create("root ::= x", 10, &g, NULL, 0), SL_EINVAL);
    cr_expect_null(g);
    char err[8];
    cr_expect_eq(sl_grammar_create("root ::= x", 10, &g, err, sizeof err), SL_EINVAL);
    cr_expect_eq(strlen(err), 7);
    cr_expect_eq(sl_grammar_create(NULL, 0, &g, err, sizeof err), SL_EINVAL);   /* empty text: no root */
}

Test(grammar_parse, nesting_limit)
{
    char s[2048] = "root ::= ";
    for (int i = 0; i < 300; i++)
        strcat(s, "(");
    expect_error(s, strlen(s), "nested");
}

Test(grammar_parse, long_rule_chain_compiles)
{
    /* 4000 rules each starting with the next (defined top-down, the order
     * that made a pass-per-rule fixpoint quadratic) plus one big literal */
    size_t cap = 4000 * 40 + 70000;
    char *s = malloc(cap);
    size_t n = 0;
    n += (size_t)snprintf(s + n, cap - n, "root ::= r1 \"x\"\n");
    for (int i = 1; i < 4000; i++)
        n += (size_t)snprintf(s + n, cap - n, "r%d ::= r%d \"x\"\n", i, i + 1);
    n += (size_t)snprintf(s + n, cap - n, "r4000 ::= \"");
    for (int i = 0; i < 60000; i++)
        s[n++] = 'a' + i % 26;
    n += (size_t)snprintf(s + n, cap - n, "\"\n");
    sl_grammar *g = NULL;
    char err[256] = "";
    cr_assert_eq(sl_grammar_create(s, n, &g, err, sizeof err), SL_OK, "%s", err);
    sl_grammar_destroy(g);
    free(s);
}
