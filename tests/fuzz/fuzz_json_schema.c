/* tests/fuzz/fuzz_json_schema.c: libFuzzer target `json_schema`: the schema
 * and regex compilers (model/grammar/json_schema.c, regex.c).
 * Input: byte 0 even: the rest is a JSON document used as a schema
 * (sl_json_schema_to_gbnf); when it compiles, the GBNF must compile with
 * sl_grammar_create (a schema we accept always yields a usable grammar) and
 * a matcher at its start must exist; the rest of the input, fed byte by
 * byte, must never crash it. Byte 0 odd: the rest is a regex
 * (sl_regex_to_gbnf, JSON string mode when bit 1 is set); its GBNF may
 * exceed the engine's limits (a refusal with a reason), never crash it.
 * Checks beyond "no crash": a failure is negative with a message and no
 * output; a success has text whose every line is a rule. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"
#include "tests/fuzz/fuzz_common.h"

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "fuzz_json_schema: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

static void check_rules(const char *text)
{
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        CHECK(eol != NULL);
        const char *def = strstr(line, " ::= ");
        CHECK(def != NULL && def < eol);
        line = eol + 1;
    }
}

static void drive(const sl_grammar *g, const uint8_t *p, size_t n)
{
    sl_grammar_matcher *m = NULL;
    CHECK(sl_grammar_matcher_create(g, &m) == SL_OK);
    for (size_t i = 0; i < n && i < 256; i++) {
        sl_status rc = sl_grammar_matcher_accept_bytes(m, (const char *)&p[i], 1);
        CHECK(rc == SL_OK || rc == SL_EINVAL || rc == SL_ERANGE);
    }
    (void)sl_grammar_matcher_accepting(m);
    (void)sl_grammar_matcher_can_continue(m);
    sl_grammar_matcher_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    char *text = (char *)1, err[SL_ERR_LEN] = "";
    if ((data[0] & 1) == 0) {
        json_t *schema = json_loadb(p, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        if (schema == NULL)
            return 0;
        sl_status rc = sl_json_schema_to_gbnf(schema, (data[0] & 2) ? "tool-1" : "root", &text, err, sizeof err);
        json_decref(schema);
        if (rc != SL_OK) {
            CHECK(rc < 0 && text == NULL);
            CHECK(rc == SL_ENOMEM || err[0] != 0);
            return 0;
        }
        CHECK(text != NULL);
        check_rules(text);
        size_t len = strlen(text);
        char *full = malloc(len + 32);
        CHECK(full != NULL);
        int k = (data[0] & 2) ? snprintf(full, len + 32, "root ::= tool-1\n") : 0;
        memcpy(full + k, text, len + 1);
        sl_grammar *g = NULL;
        rc = sl_grammar_create(full, strlen(full), &g, err, sizeof err);
        if (rc != SL_OK)
            fprintf(stderr, "fuzz_json_schema: compiled schema does not compile: %s\n%s", err, full);
        CHECK(rc == SL_OK);
        drive(g, data, size);
        sl_grammar_destroy(g);
        free(full);
        free(text);
        return 0;
    }
    sl_status rc = sl_regex_to_gbnf(p, n, "root", (data[0] & 2) != 0, &text, err, sizeof err);
    if (rc != SL_OK) {
        CHECK(rc < 0 && text == NULL);
        CHECK(rc == SL_ENOMEM || err[0] != 0);
        return 0;
    }
    check_rules(text);
    sl_grammar *g = NULL;
    rc = sl_grammar_create(text, strlen(text), &g, err, sizeof err);
    CHECK(rc == SL_OK || (rc < 0 && g == NULL));
    if (g)
        drive(g, data, size);
    sl_grammar_destroy(g);
    free(text);
    return 0;
}
