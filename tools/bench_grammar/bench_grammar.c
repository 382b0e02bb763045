/* tools/bench_grammar: times grammar masks on a real vocabulary.
 *   bench_grammar [-m GGUF] [-n STEPS] [-s SEED] [-l MAXLEN] [-c CHECKS] GRAMMAR.gbnf
 * Loads GGUF's tokenizer (default: the Qwen 2.5 Coder 0.5B file in
 * ~/.cache/sluice/models when present), compiles the grammar, and random-
 * walks STEPS steps: mask, pick a uniformly random allowed token, accept.
 * A walk ends (and a fresh matcher starts, cold, as a new sequence would)
 * when nothing is allowed, when the grammar is accepting (with probability
 * 1/4 per step), or after MAXLEN tokens. Prints the mean, p50 and p99 mask
 * time, the cache hit ratio (and how many misses were built from the mask
 * of the same state at full count, sl_grammar_matcher_shared_masks), and
 * the cold mask time (the first mask of a fresh matcher, and one inside a
 * string when the grammar has one).
 * -c CHECKS: the first CHECKS masks are also compared with brute force
 * (every token replayed on a fresh matcher: seconds per mask), untimed.
 * -S: the walks' grammar shares masks between its matchers
 * (sl_grammar_share_masks, SL_GRAMMAR_SHARE_BYTES), as the worker's does from a text's
 * second request on: a state an earlier walk met is a copy. The cold-mask
 * probes run on a second, non-sharing compilation either way.
 * Exit status 0, or 1 with a message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "model/grammar/grammar.h"
#include "model/tokenizer.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return s;
}

/* Brute force: token t allowed iff a fresh matcher takes the walk's bytes,
 * then t's. */
static bool check_mask(const sl_grammar *g, const sl_grammar_vocab *v, const char *walked, size_t n,
                       const uint32_t *allow)
{
    int32_t n_vocab = sl_grammar_vocab_size(v);
    long bad = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        sl_grammar_matcher *m = NULL;
        if (sl_grammar_matcher_create(g, &m) != SL_OK || sl_grammar_matcher_accept_bytes(m, walked, n) != SL_OK) {
            fprintf(stderr, "bench_grammar: check: the walk does not replay\n");
            return false;
        }
        bool want = sl_grammar_matcher_accept_token(m, v, t) == SL_OK;
        bool got = (allow[t >> 5] >> (t & 31)) & 1;
        if (want != got && bad++ < 5)
            fprintf(stderr, "bench_grammar: check: token %d mask %d, brute force %d\n", t, got, want);
        sl_grammar_matcher_destroy(m);
    }
    if (bad)
        fprintf(stderr, "bench_grammar: check failed: %ld tokens differ\n", bad);
    return bad == 0;
}

int main(int argc, char **argv)
{
    char def[4096];
    const char *home = getenv("HOME");
    snprintf(def, sizeof def, "%s/.cache/sluice/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", home ? home : "");
    const char *model = def, *gpath = NULL;
    long steps = 2000, maxlen = 200, checks = 0;
    bool share = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            steps = atol(argv[++i]);
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            rng = (uint64_t)atoll(argv[++i]) * 2654435761u + 1;
        else if (strcmp(argv[i], "-l") == 0 && i + 1 < argc)
            maxlen = atol(argv[++i]);
        else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
            checks = atol(argv[++i]);
        else if (strcmp(argv[i], "-S") == 0)
            share = true;
        else if (argv[i][0] != '-')
            gpath = argv[i];
        else {
            fprintf(stderr, "usage: bench_grammar [-m GGUF] [-n STEPS] [-s SEED] [-l MAXLEN] [-c CHECKS] [-S] GRAMMAR.gbnf\n");
            return 1;
        }
    }
    if (gpath == NULL || steps <= 0) {
        fprintf(stderr, "usage: bench_grammar [-m GGUF] [-n STEPS] [-s SEED] [-l MAXLEN] [-c CHECKS] [-S] GRAMMAR.gbnf\n");
        return 1;
    }
    char err[SL_ERR_LEN];
    sl_gguf *gg = NULL;
    sl_tokenizer *tok = NULL;
    if (sl_gguf_open(model, &gg, err) != SL_OK || sl_tokenizer_create(gg, &tok, err) != SL_OK) {
        fprintf(stderr, "bench_grammar: %s: %s\n", model, err);
        return 1;
    }
    double t0 = now_us();
    sl_grammar_vocab *v = NULL;
    if (sl_grammar_vocab_from_tokenizer(tok, &v) != SL_OK) {
        fprintf(stderr, "bench_grammar: vocabulary trie failed\n");
        return 1;
    }
    double t_vocab = now_us() - t0;
    size_t glen;
    char *gtext = read_file(gpath, &glen);
    if (gtext == NULL) {
        fprintf(stderr, "bench_grammar: cannot read %s\n", gpath);
        return 1;
    }
    sl_grammar *g = NULL;
    char gerr[512];
    t0 = now_us();
    if (sl_grammar_create(gtext, glen, &g, gerr, sizeof gerr) != SL_OK) {
        fprintf(stderr, "bench_grammar: %s: %s\n", gpath, gerr);
        return 1;
    }
    double t_compile = now_us() - t0;
    /* the cold probes below run on their own compilation, so -S leaves them cold */
    sl_grammar *g_cold = NULL;
    if (sl_grammar_create(gtext, glen, &g_cold, gerr, sizeof gerr) != SL_OK ||
        (share && sl_grammar_share_masks(g, SL_GRAMMAR_SHARE_BYTES) != SL_OK)) {
        fprintf(stderr, "bench_grammar: %s: second compilation or sharing failed\n", gpath);
        return 1;
    }
    int32_t n_vocab = sl_grammar_vocab_size(v);
    uint32_t words = ((uint32_t)n_vocab + 31) / 32;
    uint32_t *allow = malloc(words * sizeof *allow);
    int32_t *pick = malloc((size_t)n_vocab * sizeof *pick);
    double *t_mask = malloc((size_t)steps * sizeof *t_mask);
    double cold_sum = 0;
    long cold_n = 0, walks = 0;
    uint64_t hits = 0, misses = 0, shared = 0, cross = 0, h, mi;
    sl_grammar_matcher *m = NULL;
    long len = 0;
    char *walked = malloc(1 << 20);   /* this walk's bytes, for the checks */
    size_t walked_n = 0;
    for (long s = 0; s < steps; s++) {
        if (m == NULL) {
            if (sl_grammar_matcher_create(g, &m) != SL_OK) {
                fprintf(stderr, "bench_grammar: matcher failed\n");
                return 1;
            }
            walks++;
            len = 0;
            walked_n = 0;
        }
        double a = now_us();
        sl_status rc = sl_grammar_matcher_mask(m, v, allow);
        t_mask[s] = now_us() - a;
        if (len == 0) {
            cold_sum += t_mask[s];
            cold_n++;
        }
        if (rc != SL_OK) {
            fprintf(stderr, "bench_grammar: mask: %s\n", sl_status_name(rc));
            return 1;
        }
        int32_t n = 0;
        for (int32_t t = 0; t < n_vocab; t++)
            if ((allow[t >> 5] >> (t & 31)) & 1)
                pick[n++] = t;
        if (s < checks && !check_mask(g, v, walked, walked_n, allow))
            return 1;
        bool end = n == 0 || len >= maxlen || (sl_grammar_matcher_accepting(m) && next_rand() % 4 == 0);
        if (!end) {
            int32_t t = pick[next_rand() % (uint64_t)n];
            if (sl_grammar_matcher_accept_token(m, v, t) != SL_OK) {
                fprintf(stderr, "bench_grammar: an allowed token was refused\n");
                return 1;
            }
            int32_t tl;
            const char *tb = sl_grammar_vocab_token(v, t, &tl);
            if (walked_n + (size_t)tl <= (1u << 20)) {
                memcpy(walked + walked_n, tb, (size_t)tl);
                walked_n += (size_t)tl;
            }
        }
        len++;
        if (end) {
            sl_grammar_matcher_cache_stats(m, &h, &mi);
            hits += h;
            misses += mi;
            shared += sl_grammar_matcher_shared_masks(m);
            cross += sl_grammar_matcher_cross_masks(m);
            sl_grammar_matcher_destroy(m);
            m = NULL;
        }
    }
    if (m) {
        sl_grammar_matcher_cache_stats(m, &h, &mi);
        hits += h;
        misses += mi;
        shared += sl_grammar_matcher_shared_masks(m);
        cross += sl_grammar_matcher_cross_masks(m);
    }
    sl_grammar_matcher_destroy(m);

    /* cold masks of chosen states, each on a fresh matcher */
    double cold_root = 0, cold_str = -1;
    sl_grammar_matcher_create(g_cold, &m);
    t0 = now_us();
    sl_grammar_matcher_mask(m, v, allow);
    cold_root = now_us() - t0;
    sl_grammar_matcher_destroy(m);
    const char *probe[] = {"{\"name\": \"", "{\"", "\""};
    for (size_t i = 0; i < 3 && cold_str < 0; i++) {
        sl_grammar_matcher_create(g_cold, &m);
        if (sl_grammar_matcher_accept_bytes(m, probe[i], strlen(probe[i])) == SL_OK) {
            t0 = now_us();
            sl_grammar_matcher_mask(m, v, allow);
            cold_str = now_us() - t0;
        }
        sl_grammar_matcher_destroy(m);
    }

    double sum = 0;
    for (long s = 0; s < steps; s++)
        sum += t_mask[s];
    qsort(t_mask, (size_t)steps, sizeof *t_mask, cmp_d);
    printf("vocab %d tokens (trie %.1f ms), grammar %s compiled in %.1f ms\n", n_vocab, t_vocab / 1e3, gpath,
           t_compile / 1e3);
    printf("steps %ld in %ld walks: mask mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n", steps, walks,
           sum / (double)steps, t_mask[steps / 2], t_mask[(size_t)((double)steps * 0.99)], t_mask[steps - 1]);
    printf("cache hit ratio %.3f (%llu hits, %llu walks of the trie, %llu of them shared with a bounded "
           "repetition's full-count mask)\n",
           (double)hits / (double)(hits + misses), (unsigned long long)hits, (unsigned long long)misses,
           (unsigned long long)shared);
    if (share)
        printf("masks shared between walks (-S): %llu of the walks of the trie were copies of another walk's\n",
               (unsigned long long)cross);
    printf("cold mask: first of a walk mean %.1f us; root state %.1f us; inside a string %.1f us\n",
           cold_sum / (double)cold_n, cold_root, cold_str);
    sl_grammar_destroy(g_cold);
    free(allow);
    free(walked);
    free(pick);
    free(t_mask);
    free(gtext);
    sl_grammar_destroy(g);
    sl_grammar_vocab_destroy(v);
    sl_tokenizer_destroy(tok);
    sl_gguf_close(gg);
    return 0;
}
