/* model/grammar/json_schema_rules.c: the schema compiler's shared rules,
 * named <root>-ws, <root>-string, <root>-number, <root>-date..., written once
 * at the end of a grammar and only when a subschema used them. Trade-off:
 * each is a strict subset of its JSON (or format) syntax where the full one
 * would let a model run on (whitespace, digits) or let jansson refuse what
 * the grammar allowed (\u0000, lone surrogates). */
#include "model/grammar/json_schema_internal.h"

void sl_js_common_rules(js_ctx *c)
{
    sl_gbnf_buf *o = &c->rules;
    const char *r = c->rn;
    unsigned u = c->used;
    if (u & USE_WS)
        sl_gbnf_printf(o, "%s-ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n", r);
    if (u & USE_VALUE)
        sl_gbnf_printf(o, "%s-value ::= %s-object | %s-array | %s-string | %s-number | \"true\" | \"false\" | \"null\"\n",
                       r, r, r, r, r);
    if (u & USE_OBJECT)
        sl_gbnf_printf(o, "%s-object ::= \"{\" %s-ws (%s-string %s-ws \":\" %s-ws %s-value %s-ws (\",\" %s-ws %s-string "
                          "%s-ws \":\" %s-ws %s-value %s-ws)*)? \"}\"\n",
                       r, r, r, r, r, r, r, r, r, r, r, r, r);
    if (u & USE_ARRAY)
        sl_gbnf_printf(o, "%s-array ::= \"[\" %s-ws (%s-value %s-ws (\",\" %s-ws %s-value %s-ws)*)? \"]\"\n", r, r, r,
                       r, r, r, r);
    if (u & USE_STRING)
        sl_gbnf_printf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", r, r);
    if (u & USE_CHAR) {
        static const sl_gbnf_range raw[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, 0x10FFFF}};
        sl_gbnf_printf(o, "%s-char ::= ", r);
        sl_gbnf_class(o, raw, 4);
        sl_gbnf_printf(o, " | \"\\\\\" [\"\\\\/bfnrt] | \"\\\\u\" %s-ucode\n", r);
        /* \uXXXX but not \u0000 (jansson refuses it) nor a lone surrogate */
        sl_gbnf_printf(o, "%s-ucode ::= \"00\" ([1-9a-fA-F] %s-hex | \"0\" [1-9a-fA-F]) | \"0\" [1-9a-fA-F] %s-hex{2}"
                          " | [1-9a-cA-CeEfF] %s-hex{3} | [dD] [0-7] %s-hex{2}"
                          " | [dD] [89abAB] %s-hex{2} \"\\\\u\" [dD] [c-fC-F] %s-hex{2}\n",
                       r, r, r, r, r, r, r);
    }
    if (u & USE_HEX)
        sl_gbnf_printf(o, "%s-hex ::= [0-9a-fA-F]\n", r);
    if (u & USE_NUMBER)
        sl_gbnf_printf(o, "%s-number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,%d}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n",
                       r, JS_INT_DIGITS - 1);
    if (u & USE_INTEGER)
        sl_gbnf_printf(o, "%s-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,%d})\n", r, JS_INT_DIGITS - 1);
    if (u & USE_DATE)
        sl_gbnf_printf(o, "%s-date ::= [1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | "
                          "\"3\" [01]) | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" "
                          "[1-9] | \"1\" [0-9] | \"2\" [0-8]))\n",
                       r);
    if (u & USE_TIME)
        sl_gbnf_printf(o, "%s-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                          "(\"Z\" | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n",
                       r);
    if (u & USE_DATETIME)
        sl_gbnf_printf(o, "%s-date-time ::= %s-date \"T\" %s-time\n", r, r, r);
    if (u & USE_UUID)
        sl_gbnf_printf(o, "%s-uuid ::= %s-hex{8} \"-\" %s-hex{4} \"-\" %s-hex{4} \"-\" %s-hex{4} \"-\" %s-hex{12}\n", r, r,
                       r, r, r, r);
    if (u & USE_EMAIL)
        sl_gbnf_printf(o, "%s-email ::= [a-zA-Z0-9_%%+-]{1,32} (\".\" [a-zA-Z0-9_%%+-]{1,32}){0,3} \"@\" "
                          "[a-zA-Z0-9]{1,20} (\"-\" [a-zA-Z0-9]{1,20}){0,2} (\".\" [a-zA-Z0-9]{1,20} (\"-\" "
                          "[a-zA-Z0-9]{1,20}){0,2}){0,3} \".\" [a-zA-Z]{2,10}\n",
                       r);
}
