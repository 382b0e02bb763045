/* tests/unit/model/grammar/regex_test.c: regex -> GBNF (model/grammar/regex.c):
 * each construct of the subset compiles and matches what the regex matches
 * in full (checked through the matcher), the JSON string mode spells
 * escaped characters escaped, and each refused construct is SL_EINVAL
 * naming the construct and its offset. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "model/grammar/regex.h"

static sl_grammar *grammar_of(const char *re, bool json)
{
    char *text = NULL, err[SL_ERR_LEN] = "";
    sl_status rc = sl_regex_to_gbnf(re, strlen(re), "root", json, &text, err, sizeof err);
    cr_assert_eq(rc, SL_OK, "%s: %s", re, err);
    sl_grammar *g = NULL;
    rc = sl_grammar_create(text, strlen(text), &g, err, sizeof err);
    cr_assert_eq(rc, SL_OK, "%s -> %s: %s", re, text, err);
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

static void expect_mode(const char *re, bool json, const char *const *yes, const char *const *no)
{
    sl_grammar *g = grammar_of(re, json);
    for (; yes && *yes; yes++)
        cr_expect(matches(g, *yes), "/%s/ should match '%s'", re, *yes);
    for (; no && *no; no++)
        cr_expect(!matches(g, *no), "/%s/ should not match '%s'", re, *no);
    sl_grammar_destroy(g);
}

static void expect(const char *re, const char *const *yes, const char *const *no) { expect_mode(re, false, yes, no); }

static void expect_error(const char *re, const char *want)
{
    char *text = (char *)1, err[SL_ERR_LEN] = "";
    sl_status rc = sl_regex_to_gbnf(re, strlen(re), "root", false, &text, err, sizeof err);
    cr_expect_eq(rc, SL_EINVAL, "/%s/ compiled", re);
    cr_expect_null(text);
    cr_expect(strstr(err, want) != NULL, "/%s/: error '%s' lacks '%s'", re, err, want);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(regex, literals_and_alternation)
{
    expect("abc", L("abc"), L("", "ab", "abcd", "xabc"));
    expect("a|bc|", L("a", "bc", ""), L("b", "abc"));
    expect("", L(""), L("a"));
    expect("caf\xc3\xa9", L("caf\xc3\xa9"), L("cafe"));
}

Test(regex, anchors_at_the_ends)
{
    expect("^ab$", L("ab"), L("xab", "abx"));
    expect("^a", L("a"), L("ab"));
    expect("a$", L("a"), L("ba"));
}

Test(regex, escapes)
{
    expect("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/\\^\\$", L(".*+?()[]{}|\\/^$"), NULL);
    expect("\\n\\t\\r\\f\\v", L("\n\t\r\f\v"), NULL);
    sl_grammar *g = grammar_of("a\\0", false);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    cr_expect_eq(sl_grammar_matcher_accept_bytes(m, "a\0", 2), SL_OK);
    cr_expect(sl_grammar_matcher_accepting(m));
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
    expect("\\x41\\u00e9", L("A\xc3\xa9"), L("Ae"));
    expect("\\d\\w\\s", L("0_ ", "9a\t", "5Z\xc2\xa0"), L("a0 ", "00x"));
    expect("\\D\\W\\S", L("a-x", "\xc3\xa9 .", "x!y"), L("0-x", "aax", "a- "));
}

Test(regex, classes)
{
    expect("[a-c]", L("a", "b", "c"), L("d", "", "ab"));
    expect("[^a-c]", L("d", "\xc3\xa9", "\n"), L("a", "b"));
    expect("[-a]", L("-", "a"), L("b"));
    expect("[a-]", L("-", "a"), L("b"));
    expect("[\\d.]", L("1", "."), L("a"));
    expect("[\\]\\\\^]", L("]", "\\", "^"), L("a"));
    expect("[\xc3\xa0-\xc3\xa9x]", L("\xc3\xa0", "\xc3\xa5", "\xc3\xa9", "x"), L("\xc3\xaa", "a"));
    expect("[^\\d\\s]", L("a", "-"), L("1", " "));
}

Test(regex, dot_is_any_but_line_terminators)
{
    expect(".", L("a", "\xc3\xa9", "\xf0\x9f\x98\x80", "\t"), L("\n", "\r", "\xe2\x80\xa8", ""));
}

Test(regex, quantifiers)
{
    expect("a*", L("", "a", "aaaa"), L("b"));
    expect("a+", L("a", "aaa"), L(""));
    expect("ab?c", L("ac", "abc"), L("abbc"));
    expect("a{3}", L("aaa"), L("aa", "aaaa"));
    expect("a{2,}", L("aa", "aaaaa"), L("a"));
    expect("a{1,2}b", L("ab", "aab"), L("b", "aaab"));
    expect("a{0}b", L("b"), L("ab"));
    expect("[0-9]{2,3}", L("12", "123"), L("1", "1234"));
}

Test(regex, groups)
{
    expect("(ab)+", L("ab", "abab"), L("", "aba"));
    expect("(?:x|yz){2}", L("xx", "xyz", "yzyz"), L("x", "xxx"));
    expect("((a|b)c)?d", L("d", "acd", "bcd"), L("cd", "abcd"));
}

Test(regex, json_string_mode_spells_escapes)
{
    expect_mode("a\"b\\\\c", true, L("a\\\"b\\\\c"), L("a\"b\\c"));
    expect_mode("x\\ny\\t", true, L("x\\ny\\t"), L("x\ny\t"));
    expect_mode("\\x01", true, L("\\u0001"), L("\x01"));
    expect_mode(".", true, L("a", "\\\"", "\\\\", "\\t", "\\u001f", "\xc3\xa9"), L("\"", "\\", "\t", "\\n", "\\r"));
    expect_mode("[^a]", true, L("b", "\\n", "\\\""), L("a", "\n"));
    expect_mode("[\"a]", true, L("a", "\\\""), L("\""));
    expect_mode(".", true, NULL, L("\\u0000"));   /* jansson refuses \u0000 */
    char *text = (char *)1, err[SL_ERR_LEN] = "";
    cr_expect_eq(sl_regex_to_gbnf("a\\x00", 5, "root", true, &text, err, sizeof err), SL_EINVAL);
    cr_expect_null(text);
    cr_expect(strstr(err, "U+0000 cannot be written in a JSON string at offset 1") != NULL, "%s", err);
    cr_expect_eq(sl_regex_to_gbnf("a\\x00", 5, "root", false, &text, err, sizeof err), SL_OK, "%s", err);
    free(text);
}

Test(regex, refused_constructs_name_construct_and_offset)
{
    expect_error("(a)\\1", "regex: backreference is not supported at offset 3");
    expect_error("(?<n>a)\\k<n>", "named group is not supported at offset 0");
    expect_error("a(?=b)", "lookahead is not supported at offset 1");
    expect_error("a(?!b)", "lookahead is not supported at offset 1");
    expect_error("(?<=a)b", "lookbehind is not supported at offset 0");
    expect_error("(?<!a)b", "lookbehind is not supported at offset 0");
    expect_error("(?i)a", "inline flags");
    expect_error("a*?", "lazy quantifier is not supported at offset 2");
    expect_error("a+?", "lazy quantifier is not supported at offset 2");
    expect_error("a{2}?", "lazy quantifier is not supported at offset 4");
    expect_error("a*+", "possessive quantifier is not supported at offset 2");
    expect_error("a**", "quantifier after a quantifier at offset 2");
    expect_error("*a", "quantifier with nothing to repeat at offset 0");
    expect_error("a|*", "quantifier with nothing to repeat at offset 2");
    expect_error("\\bword", "word boundary");
    expect_error("\\p{L}", "unicode property escape");
    expect_error("\\q", "unknown escape \\q at offset 0");
    expect_error("a\\", "trailing backslash at offset 1");
    expect_error("\\x4", "\\x needs two hex digits");
    expect_error("\\u12", "\\u needs four hex digits");
    expect_error("\\ud800", "\\u surrogate");
    expect_error("\\01", "octal escape");
    expect_error("(ab", "unterminated group at offset 0");
    expect_error("ab)", "unmatched ')' at offset 2");
    expect_error("[ab", "unterminated class at offset 0");
    expect_error("[]a]", "']' at the start of a class");
    expect_error("[z-a]", "range out of order in class at offset 1");
    expect_error("[\\d-z]", "class escape as a range bound at offset 1");
    expect_error("[^\\s\\S]", "class matches no character at offset 0");
    expect_error("a{x}", "'{' that is not a quantifier");
    expect_error("a{3,1}", "repetition {m,n} with n < m at offset 1");
    expect_error("a{1001}", "repetition bound over 1000");
    expect_error("a^b", "'^' is only supported at the start at offset 1");
    expect_error("a$b", "'$' is only supported at the end at offset 1");
    expect_error("(a$)", "'$' is only supported at the end at offset 2");
    expect_error("\xff", "invalid UTF-8 at offset 0");
}

Test(regex, deep_nesting_is_refused_not_overflowed)
{
    char re[400] = "";
    for (int i = 0; i < 100; i++)
        strcat(re, "(");
    strcat(re, "a");
    for (int i = 0; i < 100; i++)
        strcat(re, ")");
    expect_error(re, "groups nested too deeply");
}

Test(regex, bad_arguments)
{
    char *text = (char *)1, err[SL_ERR_LEN] = "";
    cr_expect_eq(sl_regex_to_gbnf("a", 1, "bad name", false, &text, err, sizeof err), SL_EINVAL);
    cr_expect_null(text);
    cr_expect(strstr(err, "bad rule name") != NULL, "%s", err);
    cr_expect_eq(sl_regex_to_gbnf("a", 1, NULL, false, &text, err, sizeof err), SL_EINVAL);
    cr_expect_eq(sl_regex_to_gbnf("a", 1, "root", false, NULL, err, sizeof err), SL_EINVAL);
    cr_expect_eq(sl_regex_to_gbnf(NULL, 3, "root", false, &text, err, sizeof err), SL_EINVAL);
    cr_expect_eq(sl_regex_to_gbnf(NULL, 0, "root", false, &text, NULL, 0), SL_OK);   /* the empty regex */
    free(text);
    /* the length bounds the pattern: bytes after it are not read */
    cr_expect_eq(sl_regex_to_gbnf("ab(", 2, "r-1", false, &text, err, sizeof err), SL_OK, "%s", err);
    cr_expect(strncmp(text, "r-1 ::= ", 8) == 0, "%s", text);
    free(text);
    cr_expect_eq(sl_regex_to_gbnf("(", 1, "root", false, &text, err, 1), SL_EINVAL);
    cr_expect_eq(err[0], 0);
}
