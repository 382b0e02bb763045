/* tools/tokcheck: drives the tokenizer from the command line so the Python
 * reference tests can compare many strings in one process, and measures
 * throughput.
 *   tokcheck encode GGUF [plain|special|prompt|special-bos]
 *                                          stdin: one JSON string per line;
 *                                          stdout: the ids, space-separated.
 *                                          prompt: as /v1/completions does (all
 *                                          plain text, BOS as the model says);
 *                                          special-bos: special, with BOS
 *   tokcheck rendered GGUF                 stdin: {"text": s, "untrusted": [[off, len], ...]}
 *                                          (offsets in UTF-8 bytes); stdout: ids
 *   tokcheck decode GGUF [show|hide]       stdin: one JSON array of ids per line;
 *                                          stdout: the text as a JSON string; the
 *                                          streaming decoder is checked against the
 *                                          one-shot one on every line
 *   tokcheck bench GGUF FILE [REPEAT]      single-threaded encode of FILE; prints MB/s
 *                                          of process CPU time (per core, robust to a busy machine)
 * Exit status 0, or 1 with a message on stderr. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "model/tokenizer.h"

static int32_t *ids_buf;
static size_t ids_cap;

static int64_t encode_grow(const sl_tokenizer *t, int mode, const char *s, size_t n,
                           const sl_tok_span *sp, size_t nsp)
{
    for (;;) {
        sl_tok_span all = {0, n};
        int64_t r = mode == 0   ? sl_tokenize(t, s, n, ids_buf, ids_cap)
                    : mode == 1 ? sl_tokenize_special(t, s, n, false, ids_buf, ids_cap)
                    : mode == 3 ? sl_tokenize_rendered(t, s, n, &all, 1, true, ids_buf, ids_cap)
                    : mode == 4 ? sl_tokenize_special(t, s, n, true, ids_buf, ids_cap)
                                : sl_tokenize_rendered(t, s, n, sp, nsp, false, ids_buf, ids_cap);
        if (r < 0 || (size_t)r <= ids_cap)
            return r;
        ids_cap = (size_t)r * 2;
        ids_buf = realloc(ids_buf, ids_cap * sizeof(int32_t));
        if (!ids_buf)
            return SL_ENOMEM;
    }
}

static void print_ids(int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids_buf[i]);
    putchar('\n');
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tokcheck encode|rendered|decode|bench GGUF [...]\n");
        return 1;
    }
    char err[SL_ERR_LEN];
    sl_gguf *g;
    sl_tokenizer *t;
    if (sl_gguf_open(argv[2], &g, err) < 0 || sl_tokenizer_create(g, &t, err) < 0) {
        fprintf(stderr, "tokcheck: %s\n", err);
        return 1;
    }
    sl_gguf_close(g);
    const char *cmd = argv[1];
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    int rc = 0;
    if (!strcmp(cmd, "bench")) {
        size_t len;
        char *text = argc > 3 ? read_file(argv[3], &len) : NULL;
        int rep = argc > 4 ? atoi(argv[4]) : 5;
        if (!text) {
            fprintf(stderr, "tokcheck: cannot read input file\n");
            return 1;
        }
        int64_t n = encode_grow(t, 0, text, len, NULL, 0);   /* warm-up, sizes the buffer */
        struct timespec a, b;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        for (int i = 0; i < rep; i++)
            n = encode_grow(t, 0, text, len, NULL, 0);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        printf("%zu bytes, %lld tokens, %.2f MB/s\n", len, (long long)n,
               (double)len * rep / s / 1e6);
        free(text);
    }
    while (strcmp(cmd, "bench") && (got = getline(&line, &line_cap, stdin)) > 0) {
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!j) {
            fprintf(stderr, "tokcheck: bad JSON line: %s\n", je.text);
            rc = 1;
            break;
        }
        if (!strcmp(cmd, "encode") && json_is_string(j)) {
            const char *m = argc > 3 ? argv[3] : "plain";
            int mode = !strcmp(m, "special") ? 1 : !strcmp(m, "prompt") ? 3 : !strcmp(m, "special-bos") ? 4 : 0;
            int64_t n = encode_grow(t, mode, json_string_value(j), json_string_length(j), NULL, 0);
            if (n < 0) {
                fprintf(stderr, "tokcheck: encode failed: %lld\n", (long long)n);
                rc = 1;
            }
            print_ids(n < 0 ? 0 : n);
        } else if (!strcmp(cmd, "rendered") && json_is_object(j)) {
            json_t *tx = json_object_get(j, "text"), *un = json_object_get(j, "untrusted");
            size_t nsp = json_array_size(un);
            sl_tok_span *sp = calloc(nsp + 1, sizeof *sp);
            for (size_t i = 0; i < nsp; i++) {
                sp[i].off = (size_t)json_integer_value(json_array_get(json_array_get(un, i), 0));
                sp[i].len = (size_t)json_integer_value(json_array_get(json_array_get(un, i), 1));
            }
            int64_t n = encode_grow(t, 2, json_string_value(tx), json_string_length(tx), sp, nsp);
            free(sp);
            print_ids(n < 0 ? 0 : n);
        } else if (!strcmp(cmd, "decode") && json_is_array(j)) {
            bool show = !(argc > 3 && !strcmp(argv[3], "hide"));
            size_t n = json_array_size(j);
            int32_t *ids = malloc((n + 1) * sizeof(int32_t));
            for (size_t i = 0; i < n; i++)
                ids[i] = (int32_t)json_integer_value(json_array_get(j, i));
            size_t need = sl_detokenize(t, ids, n, show, NULL, 0);
            char *txt = malloc(need + 1);
            sl_detokenize(t, ids, n, show, txt, need);
            /* the streaming decoder must produce the same bytes */
            size_t mp = sl_detok_max_piece(t), m = 0;
            char *st = malloc(need + mp + 1), *piece = malloc(mp);
            sl_detok d;
            sl_detok_init(&d);
            for (size_t i = 0; i < n; i++) {
                size_t k = sl_detok_push(&d, t, ids[i], show, piece, mp);
                if (m + k <= need)
                    memcpy(st + m, piece, k);
                m += k;
            }
            size_t k = sl_detok_flush(&d, t, piece, mp);
            if (m + k <= need)
                memcpy(st + m, piece, k);
            m += k;
            if (m != need || memcmp(st, txt, need) != 0) {
                fprintf(stderr, "tokcheck: streaming decode differs from one-shot\n");
                rc = 1;
            }
            json_t *js = json_stringn(txt, need);
            char *dump = json_dumps(js ? js : json_null(), JSON_ENCODE_ANY);
            printf("%s\n", dump ? dump : "null");
            free(dump);
            json_decref(js);
            free(ids); free(txt); free(st); free(piece);
        } else {
            fprintf(stderr, "tokcheck: unexpected input for %s\n", cmd);
            rc = 1;
        }
        json_decref(j);
        fflush(stdout);
        if (rc)
            break;
    }
    free(line);
    free(ids_buf);
    sl_tokenizer_destroy(t);
    return rc;
}
