/* tests/unit/model/grammar/grammars.h: grammars shared by the matcher and
 * mask tests of this folder. */
#ifndef SL_TEST_GRAMMARS_H
#define SL_TEST_GRAMMARS_H

#define G_ARITH                                                                                     \
    "root ::= expr\n"                                                                               \
    "expr ::= term ((\"+\" | \"-\") term)*\n"                                                       \
    "term ::= factor ((\"*\" | \"/\") factor)*\n"                                                   \
    "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n"

#define G_JSON                                                                                      \
    "root   ::= object\n"                                                                           \
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"        \
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"  \
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"                                   \
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt/] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n" \
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n" \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"

#define G_LIST "root ::= \"[\" item (\",\" item){1,3} \"]\"\nitem ::= [a-z]{2,4}\n"

#define G_UTF8 "root ::= [äö€😀a-c]{1,3} \"!\" [^a-z]*\n"

#endif
