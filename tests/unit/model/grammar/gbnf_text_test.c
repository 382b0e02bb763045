/* tests/unit/model/grammar/gbnf_text_test.c: the GBNF writer the schema and
 * regex compilers share (model/grammar/gbnf_text.c): literal and class
 * escaping compile to what they say, UTF-8 decoding refuses what is not
 * UTF-8, and the productivity check finds rules that derive nothing. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/gbnf_text.h"
#include "model/grammar/grammar.h"

static bool matches_rule(const char *rule_body, const char *s, size_t n)
{
    sl_gbnf_buf b = {0};
    sl_gbnf_puts(&b, "root ::= ");
    sl_gbnf_puts(&b, rule_body);
    sl_gbnf_puts(&b, "\n");
    char *text = sl_gbnf_buf_take(&b);
    cr_assert_not_null(text);
    sl_grammar *g = NULL;
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_grammar_create(text, strlen(text), &g, err, sizeof err), SL_OK, "%s: %s", text, err);
    sl_grammar_matcher *m = NULL;
    cr_assert_eq(sl_grammar_matcher_create(g, &m), SL_OK);
    bool ok = sl_grammar_matcher_accept_bytes(m, s, n) == SL_OK && sl_grammar_matcher_accepting(m);
    sl_grammar_matcher_destroy(m);
    sl_grammar_destroy(g);
    free(text);
    return ok;
}

Test(gbnf_text, literal_escapes_every_byte)
{
    char all[256];
    for (int i = 0; i < 255; i++)
        all[i] = (char)(i + 1);
    sl_gbnf_buf b = {0};
    sl_gbnf_literal(&b, "q\"\\\n\x7f\x01\xc3\xa9", 9);
    char *lit = sl_gbnf_buf_take(&b);
    cr_expect(matches_rule(lit, "q\"\\\n\x7f\x01\xc3\xa9", 9), "%s", lit);
    free(lit);
    sl_gbnf_literal(&b, all, 127);   /* every ASCII byte but NUL */
    lit = sl_gbnf_buf_take(&b);
    cr_expect(matches_rule(lit, all, 127), "%s", lit);
    free(lit);
}

Test(gbnf_text, class_escapes_and_merges)
{
    const sl_gbnf_range r[] = {{']', ']'}, {'\\', '\\'}, {'-', '-'}, {'^', '^'}, {'[', '['}, {0, 0x1f}, {'a', 'c'},
                               {'b', 'e'}, {0xe9, 0xe9}, {0x1F600, 0x1F600}};
    sl_gbnf_buf b = {0};
    sl_gbnf_class(&b, r, sizeof r / sizeof r[0]);
    char *cls = sl_gbnf_buf_take(&b);
    const char *yes[] = {"]", "\\", "-", "^", "[", "\n", "\x1f", "a", "e", "\xc3\xa9", "\xf0\x9f\x98\x80"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        cr_expect(matches_rule(cls, yes[i], strlen(yes[i])), "%s should match '%s'", cls, yes[i]);
    cr_expect(matches_rule(cls, "\0", 1), "%s should match NUL", cls);
    const char *no[] = {"f", " ", "\xc3\xa8", "Z"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_expect(!matches_rule(cls, no[i], strlen(no[i])), "%s should not match '%s'", cls, no[i]);
    free(cls);
}

Test(gbnf_text, utf8_decode)
{
    uint32_t cp = 0;
    cr_expect_eq(sl_gbnf_utf8_decode("A", 1, &cp), 1);
    cr_expect_eq(cp, 'A');
    cr_expect_eq(sl_gbnf_utf8_decode("\xf0\x9f\x98\x80", 4, &cp), 4);
    cr_expect_eq(cp, 0x1F600);
    cr_expect_eq(sl_gbnf_utf8_decode("\xc0\x80", 2, &cp), 0);        /* overlong */
    cr_expect_eq(sl_gbnf_utf8_decode("\xed\xa0\x80", 3, &cp), 0);    /* surrogate */
    cr_expect_eq(sl_gbnf_utf8_decode("\xf4\x90\x80\x80", 4, &cp), 0); /* past U+10FFFF */
    cr_expect_eq(sl_gbnf_utf8_decode("\xe2\x82", 2, &cp), 0);        /* truncated */
    cr_expect_eq(sl_gbnf_utf8_decode("\x80", 1, &cp), 0);
    cr_expect_eq(sl_gbnf_utf8_decode("", 0, &cp), 0);
}

Test(gbnf_text, unproductive_rules_are_found)
{
    const char *names[4];
    size_t lens[4];
    cr_expect_eq(sl_gbnf_unproductive("root ::= a | \"x\"\na ::= \"[\" root \"]\"\n", names, lens, 4), 0);
    cr_expect_eq(sl_gbnf_unproductive("root ::= a?\na ::= \"(\" a \")\"\n", names, lens, 4), 1);
    cr_expect_eq(lens[0], 1);
    cr_expect_eq(names[0][0], 'a');
    cr_expect_eq(sl_gbnf_unproductive("root ::= (b \"x\"){0,3} c*\nb ::= b\nc ::= \"\\\"\" [\\]] c\n", names, lens, 4), 2);
    cr_expect_eq(sl_gbnf_unproductive("root ::= missing\n", names, lens, 4), 1);
    cr_expect_eq(sl_gbnf_unproductive("", names, lens, 4), 0);
}

Test(gbnf_text, printf_grows_past_its_small_buffer)
{
    sl_gbnf_buf b = {0};
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    sl_gbnf_printf(&b, "<%s>", big);
    char *s = sl_gbnf_buf_take(&b);
    cr_expect_eq(strlen(s), 1001);
    free(s);
    s = sl_gbnf_buf_take(&b);   /* empty buffer: "" */
    cr_expect_str_eq(s, "");
    free(s);
}
