/* tools/grammar_sample: random sentences of a grammar, to check the schema and
 * regex compilers against reference validators (tests/reference/test_json_schema.py).
 *   grammar_sample --schema FILE | --gbnf FILE | --regex RE
 *                  [--count N] [--seed S] [--max-bytes M] [--print-gbnf]
 * Compiles the input to GBNF (model/grammar/json_schema.h, regex.h), builds a
 * matcher (grammar.h) and prints N sentences, one per line, each as a JSON
 * string. A sentence is a random byte walk: at each step, when the matcher is
 * accepting, stop with probability 1/2 (always once past M bytes, or when no
 * byte may follow); else take the first byte the matcher accepts from a
 * random permutation of the 256 (uniform among the allowed ones, and a
 * refused byte leaves the state as it was, so no copy is needed). Closing
 * bytes (" } ]) are tried first with a probability that grows with length,
 * which keeps JSON sentences short; a walk past 8*M bytes starts over.
 * Exit status: 0; 1 the input does not compile (the reason on stderr) or no
 * walk ended; 2 usage. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    for (size_t r; p && (r = fread(p + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *q = realloc(p, cap *= 2);
            if (q == NULL) {
                free(p);
                p = NULL;
            } else {
                p = q;
            }
        }
    }
    fclose(f);
    if (p) {
        p[n] = 0;
        *len = n;
    }
    return p;
}

static int usage(void)
{
    fprintf(stderr, "usage: grammar_sample --schema FILE | --gbnf FILE | --regex RE [--count N] [--seed S] "
                    "[--max-bytes M] [--print-gbnf]\n");
    return 2;
}

/* One walk into buf; returns its length, or -1 when it ran too long or got stuck. */
static long walk(const sl_grammar *g, char *buf, size_t cap, size_t max_bytes)
{
    sl_grammar_matcher *m = NULL;
    if (sl_grammar_matcher_create(g, &m) != SL_OK)
        return -1;
    size_t n = 0;
    long result = -1;
    for (;;) {
        bool acc = sl_grammar_matcher_accepting(m);
        if (acc && (n >= max_bytes || !sl_grammar_matcher_can_continue(m) || (rng_next() & 1))) {
            result = (long)n;
            break;
        }
        if (n + 1 >= cap)
            break;
        bool moved = false;
        double closing = n < max_bytes / 4 ? 0.05 : n < max_bytes ? 0.3 : 0.9;
        if (rng_unit() < closing) {
            static const char close[] = {'"', '}', ']'};
            unsigned start = (unsigned)(rng_next() % 3);
            for (unsigned k = 0; k < 3 && !moved; k++) {
                char c = close[(start + k) % 3];
                if (sl_grammar_matcher_accept_bytes(m, &c, 1) == SL_OK) {
                    buf[n++] = c;
                    moved = true;
                }
            }
        }
        if (!moved) {
            unsigned char perm[256];
            for (int i = 0; i < 256; i++)
                perm[i] = (unsigned char)i;
            for (int i = 255; i > 0; i--) {
                int j = (int)(rng_next() % (uint64_t)(i + 1));
                unsigned char t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int i = 0; i < 256 && !moved; i++) {
                char c = (char)perm[i];
                if (sl_grammar_matcher_accept_bytes(m, &c, 1) == SL_OK) {
                    buf[n++] = c;
                    moved = true;
                }
            }
        }
        if (!moved)
            break;   /* stuck before accepting: a grammar bug */
    }
    sl_grammar_matcher_destroy(m);
    return result;
}

int main(int argc, char **argv)
{
    const char *schema_path = NULL, *gbnf_path = NULL, *regex = NULL;
    long count = 10, max_bytes = 256;
    unsigned long long seed = 1;
    bool print_gbnf = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (strcmp(a, "--schema") == 0 && has_val)
            schema_path = argv[++i];
        else if (strcmp(a, "--gbnf") == 0 && has_val)
            gbnf_path = argv[++i];
        else if (strcmp(a, "--regex") == 0 && has_val)
            regex = argv[++i];
        else if (strcmp(a, "--count") == 0 && has_val)
            count = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "--seed") == 0 && has_val)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(a, "--max-bytes") == 0 && has_val)
            max_bytes = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "--print-gbnf") == 0)
            print_gbnf = true;
        else
            return usage();
    }
    if ((schema_path != NULL) + (gbnf_path != NULL) + (regex != NULL) != 1 || count < 0 || max_bytes < 1)
        return usage();
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    char err[SL_ERR_LEN] = "";
    char *text = NULL;
    size_t len = 0;
    sl_status rc = SL_OK;
    if (gbnf_path) {
        text = read_file(gbnf_path, &len);
        if (text == NULL) {
            fprintf(stderr, "grammar_sample: cannot read %s\n", gbnf_path);
            return 1;
        }
    } else if (schema_path) {
        json_error_t jerr;
        json_t *schema = json_load_file(schema_path, JSON_DECODE_ANY, &jerr);
        if (schema == NULL) {
            fprintf(stderr, "grammar_sample: %s: %s (line %d)\n", schema_path, jerr.text, jerr.line);
            return 1;
        }
        rc = sl_json_schema_to_gbnf(schema, "root", &text, err, sizeof err);
        json_decref(schema);
    } else {
        rc = sl_regex_to_gbnf(regex, strlen(regex), "root", false, &text, err, sizeof err);
    }
    if (rc != SL_OK) {
        fprintf(stderr, "grammar_sample: %s: %s\n", sl_status_name(rc), err);
        return 1;
    }
    len = strlen(text);
    if (print_gbnf) {
        fputs(text, stdout);
        free(text);
        return 0;
    }
    sl_grammar *g = NULL;
    rc = sl_grammar_create(text, len, &g, err, sizeof err);
    free(text);
    if (rc != SL_OK) {
        fprintf(stderr, "grammar_sample: grammar: %s: %s\n", sl_status_name(rc), err);
        return 1;
    }
    size_t cap = (size_t)max_bytes * 8 + 1;
    char *buf = malloc(cap);
    int status = 0;
    for (long i = 0; i < count && status == 0; i++) {
        long n = -1;
        for (int tries = 0; tries < 200 && n < 0; tries++)
            n = walk(g, buf, cap, (size_t)max_bytes);
        if (n < 0) {
            fprintf(stderr, "grammar_sample: no walk ended within %zu bytes\n", cap - 1);
            status = 1;
            break;
        }
        json_t *s = json_stringn(buf, (size_t)n);
        char *line = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        if (line == NULL) {
            fprintf(stderr, "grammar_sample: a sentence is not valid UTF-8\n");
            status = 1;
        } else {
            puts(line);
        }
        free(line);
        json_decref(s);
    }
    free(buf);
    sl_grammar_destroy(g);
    return status;
}
