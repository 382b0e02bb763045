/* cli/generate.c: `sluice generate`: runs a model on one prompt in this
 * process (no server) and streams the continuation to stdout, then one line
 * with prompt and decode speed on stderr. The shortest path from a GGUF file
 * to text; it uses the same backend step (sl_backend_forward_sample: the
 * forward and the draw) and detokenizer as the server. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "gpu-worker/constraint.h"
#include "gpu-worker/load_progress.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define SL_GRAMMAR_FILE_MAX (1u << 20)   /* --grammar files larger than this are refused */

typedef struct {
    const char *model, *prompt, *tokens, *device, *grammar;
    int n_predict, threads, chunk;
    bool ignore_eos, show_special, print_ids;
    sl_sampling_params sp;
} gen_options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice generate [-m MODEL.gguf] (-p TEXT | --tokens 1,2,3) [options]\n"
        "Runs the model on one prompt and streams the continuation.\n\n"
        "  -m, --model FILE        GGUF model (default: the project's default model)\n"
        "  -p, --prompt TEXT       prompt text (special tokens in it are recognised; BOS added as the model says)\n"
        "      --tokens IDS        prompt as comma-separated token ids instead\n"
        "  -n, --n-predict N       tokens to generate (default 64)\n"
        "      --temp T            temperature, 0 = greedy (default 0.8)\n"
        "      --top-k K           (default 40; 0 = off)\n"
        "      --top-p P           (default 0.95; 1 = off)\n"
        "      --min-p P           (default 0.05; 0 = off)\n"
        "      --repeat-penalty R  (default 1 = off)   --repeat-last-n N (default 64; -1 = all)\n"
        "      --presence-penalty X --frequency-penalty X (default 0)\n"
        "      --seed S            RNG seed (default 0)\n"
        "  -t, --threads N         compute threads (default: all cores)\n"
        "      --device D          auto | cpu | cuda (default auto: the GPU when libsluice_cuda.so loads and finds one)\n"
        "      --chunk N           prefill chunk size in tokens (default 512)\n"
        "      --ignore-eos        do not stop at end-of-generation tokens\n"
        "      --show-special      print control tokens as text\n"
        "      --print-ids         print token ids instead of text\n"
        "      --grammar FILE      constrain the output to the GBNF grammar in FILE (it stops when the grammar\n"
        "                          is complete)\n");
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (*v == 0 || *end || errno || !(x >= lo && x <= hi)) {
        fprintf(stderr, "sluice generate: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_options(int argc, char **argv, gen_options *o)
{
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"tokens", required_argument, 0, 'T'}, {"n-predict", required_argument, 0, 'n'},
        {"temp", required_argument, 0, 1}, {"top-k", required_argument, 0, 2},
        {"top-p", required_argument, 0, 3}, {"min-p", required_argument, 0, 4},
        {"repeat-penalty", required_argument, 0, 5}, {"repeat-last-n", required_argument, 0, 6},
        {"presence-penalty", required_argument, 0, 7}, {"frequency-penalty", required_argument, 0, 8},
        {"seed", required_argument, 0, 9}, {"threads", required_argument, 0, 't'},
        {"chunk", required_argument, 0, 10}, {"ignore-eos", no_argument, 0, 11},
        {"show-special", no_argument, 0, 12}, {"print-ids", no_argument, 0, 13},
        {"device", required_argument, 0, 14}, {"grammar", required_argument, 0, 15},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->n_predict = 64;
    o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    o->chunk = 512;
    o->device = "auto";
    sl_sampling_params_default(&o->sp);
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
    double v;
    int c;
    optind = 1;
    int li = -1;
    while ((c = getopt_long(argc, argv, "m:p:n:t:h", longs, &li)) != -1) {
        char name[32];
        if (li >= 0)
            snprintf(name, sizeof name, "--%s", longs[li].name);
        else
            snprintf(name, sizeof name, "-%c", c);
        li = -1;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'T': o->tokens = optarg; break;
        case 'n': if (parse_num(name, optarg, 0, 1 << 20, &v)) return -1; o->n_predict = (int)v; break;
        case 1: if (parse_num(name, optarg, 0, 100, &v)) return -1; o->sp.temperature = (float)v; break;
        case 2: if (parse_num(name, optarg, 0, 1 << 24, &v)) return -1; o->sp.top_k = (int32_t)v; break;
        case 3: if (parse_num(name, optarg, 1e-6, 1, &v)) return -1; o->sp.top_p = (float)v; break;
        case 4: if (parse_num(name, optarg, 0, 1, &v)) return -1; o->sp.min_p = (float)v; break;
        case 5: if (parse_num(name, optarg, 1e-3, 100, &v)) return -1; o->sp.repetition_penalty = (float)v; break;
        case 6: if (parse_num(name, optarg, -1, 1 << 24, &v)) return -1; o->sp.penalty_last_n = (int32_t)v; break;
        case 7: if (parse_num(name, optarg, -2, 2, &v)) return -1; o->sp.presence_penalty = (float)v; break;
        case 8: if (parse_num(name, optarg, -2, 2, &v)) return -1; o->sp.frequency_penalty = (float)v; break;
        case 9: if (parse_num(name, optarg, 0, 1.8e19, &v)) return -1; o->sp.seed = strtoull(optarg, NULL, 10); break;
        case 't': if (parse_num(name, optarg, 1, 1024, &v)) return -1; o->threads = (int)v; break;
        case 10: if (parse_num(name, optarg, 1, 1 << 16, &v)) return -1; o->chunk = (int)v; break;
        case 11: o->ignore_eos = true; break;
        case 12: o->show_special = true; break;
        case 13: o->print_ids = true; break;
        case 15: o->grammar = optarg; break;
        case 14:
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "sluice generate: --device expects auto, cpu or cuda, got '%s'\n", optarg);
                return -1;
            }
            o->device = optarg;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluice generate: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->prompt == !o->tokens) {
        fprintf(stderr, "sluice generate: give exactly one of -p TEXT or --tokens IDS\n");
        return -1;
    }
    return 0;
}

/* The whole of `path` into a malloc'd buffer (*len bytes), or NULL with a
 * message on stderr. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "sluice generate: --grammar %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *nb = cap < SL_GRAMMAR_FILE_MAX ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                fprintf(stderr, "sluice generate: --grammar %s: larger than %u bytes\n", path, SL_GRAMMAR_FILE_MAX);
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        fprintf(stderr, "sluice generate: --grammar %s: %s\n", path, strerror(errno));
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Parses "1,2,3" into a new array; returns the count or -1. */
static int64_t parse_ids(const char *s, int32_t n_vocab, int32_t **out)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *ids = malloc(cap * sizeof *ids);
    int64_t n = 0;
    while (ids && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= n_vocab || (*end && *end != ',')) {
            fprintf(stderr, "sluice generate: --tokens: '%s' is not a token id below %d\n", s, n_vocab);
            free(ids);
            return -1;
        }
        ids[n++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    *out = ids;
    return n;
}

int sl_cli_generate(int argc, char **argv)
{
    gen_options o;
    if (parse_options(argc, argv, &o) < 0)
        return 2;
    char default_path[4096];
    if (!o.model) {
        const char *what;
        if (sl_cli_default_model(default_path, sizeof default_path, &what) < 0) {
            fprintf(stderr, "sluice generate: no -m given and the default model is missing "
                            "(tools/setup.sh creates it)\n");
            return 2;
        }
        fprintf(stderr, "sluice generate: no -m given: using %s, %s\n", default_path, what);
        o.model = default_path;
    }
    char err[SL_ERR_LEN];
    sl_model *m;
    sl_load_progress lp;
    sl_load_progress_init(&lp, stderr, isatty(STDERR_FILENO), "sluice generate");
    sl_load_progress_stage(&lp, "opening %.140s", o.model);
    if (sl_model_load(o.model, &m, err) < 0) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice generate: %s\n", err);
        return 2;
    }
    sl_tokenizer *tok = NULL;
    if (sl_tokenizer_create(m->gguf, &tok, err) < 0) {
        if (o.prompt || !o.print_ids) {
            sl_load_progress_abort(&lp);
            fprintf(stderr, "sluice generate: %s\n", err);
            sl_model_destroy(m);
            return 2;
        }
    }
    int32_t *prompt = NULL;
    int64_t n_prompt;
    if (o.tokens) {
        n_prompt = parse_ids(o.tokens, m->hp.n_vocab, &prompt);
    } else {
        size_t len = strlen(o.prompt);
        n_prompt = sl_tokenize_special(tok, o.prompt, len, true, NULL, 0);
        if (n_prompt >= 0 && (prompt = malloc((size_t)(n_prompt ? n_prompt : 1) * sizeof *prompt)))
            n_prompt = sl_tokenize_special(tok, o.prompt, len, true, prompt, (size_t)n_prompt);
    }
    if (n_prompt < 1) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice generate: the prompt is empty\n");
        return 2;
    }
    int64_t n_ctx = n_prompt + o.n_predict;
    if (n_ctx > m->hp.n_ctx_train) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice generate: prompt (%lld) + n-predict (%d) exceeds the model's context (%d)\n",
                (long long)n_prompt, o.n_predict, m->hp.n_ctx_train);
        return 2;
    }
    const char *why;
    if (sl_sampling_validate(&o.sp, m->hp.n_vocab, &why) < 0) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice generate: invalid %s\n", why);
        return 2;
    }
    /* --grammar: the same constraint the worker runs for a request with one */
    sl_constraint_vocab *gv = NULL;
    sl_constraint *con = NULL;
    if (o.grammar) {
        size_t glen;
        char *text = tok ? read_file(o.grammar, &glen) : NULL;
        int32_t *eog = text ? malloc((size_t)m->hp.n_vocab * sizeof *eog) : NULL;
        int32_t n_eog = 0;
        for (int32_t id = 0; eog && id < m->hp.n_vocab; id++)
            if (sl_tokenizer_is_eog(tok, id))
                eog[n_eog++] = id;
        char gerr[SL_ERR_LEN] = "out of memory";
        if (!tok)
            snprintf(gerr, sizeof gerr, "--grammar needs the model's tokenizer");
        sl_status grc = !eog ? SL_ENOMEM
                             : sl_constraint_vocab_create(m->hp.n_vocab, eog, n_eog, sl_constraint_tokenizer_trie, tok,
                                                          &gv);
        if (grc == SL_OK)
            grc = sl_constraint_create(gv, text, glen, &con, gerr, sizeof gerr);
        bool had_text = text != NULL;   /* read_file said why it has none */
        free(eog);
        free(text);
        if (grc < 0) {
            sl_load_progress_abort(&lp);
            if (had_text || !tok)
                fprintf(stderr, "sluice generate: %s\n", gerr);
            sl_constraint_vocab_destroy(gv);
            return 2;
        }
    }

    int32_t n_blocks = (int32_t)((n_ctx + SL_KV_BLOCK_TOKENS - 1) / SL_KV_BLOCK_TOKENS);
    int chunk = o.chunk < n_prompt ? o.chunk : (int)n_prompt;
    sl_backend_config cfg = {.device = o.device, .n_threads = o.threads, .kv_block_size = SL_KV_BLOCK_TOKENS,
                             .n_kv_blocks = (uint32_t)n_blocks, .max_batch_tokens = chunk,
                             .max_ctx = (int32_t)n_ctx, .max_batch_seqs = 1};
    sl_load_progress_read_weights(&lp, m);
    sl_load_progress_stage(&lp, "creating the %s backend", cfg.device);
    sl_backend *be;
    if (sl_backend_create(m, &cfg, &be, err) < 0) {
        sl_load_progress_abort(&lp);
        fprintf(stderr, "sluice generate: %s\n", err);
        return 1;
    }
    sl_load_progress_done(&lp, "loaded %s (%.0f MiB of weights) on %s", m->name,
                          (double)m->weight_bytes / (1024.0 * 1024.0), be->ops->name);
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    int32_t *history = malloc((size_t)n_ctx * sizeof *history);
    if (!blocks || !history) {
        fprintf(stderr, "sluice generate: out of memory\n");
        return 1;
    }
    for (int32_t i = 0; i < n_blocks; i++)
        blocks[i] = i;
    memcpy(history, prompt, (size_t)n_prompt * sizeof *prompt);

    /* Each call feeds tokens and draws the next from the last row: the k-th
     * token (k from 0) from the history so far, seeded by k. The prompt's
     * chunks draw nothing but the last. */
    double t0 = now_ms();
    int rc = 0;
    int32_t next = -1;
    for (int64_t done = 0; done < n_prompt; done += chunk) {
        int32_t n = (int32_t)(n_prompt - done < chunk ? n_prompt - done : chunk);
        sl_batch_seq s = {.tokens = prompt + done, .n_tokens = n, .pos = (int32_t)done, .blocks = blocks,
                          .n_blocks = n_blocks, .logits_all = false, .prompt = true};
        bool last = done + n == n_prompt && o.n_predict > 0;
        sl_sample_req r = {.params = last ? &o.sp : NULL, .history = history, .n_history = (int32_t)n_prompt,
                           .allow = last && con ? sl_constraint_mask(con, !o.ignore_eos) : NULL};
        if (sl_backend_forward_sample(be, &s, 1, &r, &next) < 0) {
            fprintf(stderr, "sluice generate: forward pass failed\n");
            return 1;
        }
    }
    double t_prompt = now_ms() - t0;

    size_t piece_cap = tok ? sl_detok_max_piece(tok) : 0;
    char *piece = malloc(piece_cap + 1);
    sl_detok dt;
    sl_detok_init_continuation(&dt);   /* the output continues the prompt: its leading space stays */
    int64_t n_gen = 0, n_hist = n_prompt;
    double t1 = now_ms();
    while (n_gen < o.n_predict) {
        int32_t id = next;
        if (id < 0) {
            fprintf(stderr, "sluice generate: %s\n", con ? sl_constraint_error(con) : "sampling failed");
            rc = 1;
            break;
        }
        if (con && sl_constraint_accept(con, id) < 0) {
            fprintf(stderr, "sluice generate: grammar: the drawn token does not match\n");
            rc = 1;
            break;
        }
        n_gen++;
        history[n_hist++] = id;
        if (o.print_ids || !tok) {
            printf("%s%d", n_gen > 1 ? "," : "", id);
        } else {
            size_t k = sl_detok_push(&dt, tok, id, o.show_special, piece, piece_cap);
            fwrite(piece, 1, k, stdout);
        }
        fflush(stdout);
        if (!o.ignore_eos && tok && sl_tokenizer_is_eog(tok, id))
            break;
        if (con && sl_constraint_finished(con))
            break;   /* the grammar is complete: nothing more may follow */
        if (n_gen == o.n_predict)
            break;
        sl_batch_seq s = {.tokens = &id, .n_tokens = 1, .pos = (int32_t)(n_hist - 1), .blocks = blocks,
                          .n_blocks = n_blocks, .logits_all = false};
        sl_sample_req r = {.params = &o.sp, .history = history, .n_history = (int32_t)n_hist,
                           .draw_index = (uint64_t)n_gen, .allow = con ? sl_constraint_mask(con, !o.ignore_eos) : NULL};
        if (sl_backend_forward_sample(be, &s, 1, &r, &next) < 0) {
            fprintf(stderr, "sluice generate: forward pass failed\n");
            rc = 1;
            break;
        }
    }
    if (tok && !o.print_ids) {
        size_t k = sl_detok_flush(&dt, tok, piece, piece_cap);
        fwrite(piece, 1, k, stdout);
    }
    double t_decode = now_ms() - t1;
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prompt: %lld tokens in %.1f ms (%.1f tok/s); decode: %lld tokens in %.1f ms (%.1f tok/s); "
            "%d threads, %s\n", (long long)n_prompt, t_prompt, n_prompt * 1e3 / (t_prompt > 0 ? t_prompt : 1),
            (long long)n_gen, t_decode, n_gen > 1 ? (n_gen - 1) * 1e3 / (t_decode > 0 ? t_decode : 1) : 0.0,
            o.threads, sl_backend_describe(be));
    sl_constraint_destroy(con);
    sl_constraint_vocab_destroy(gv);
    free(piece);
    free(prompt);
    free(blocks);
    free(history);
    sl_backend_destroy(be);
    sl_tokenizer_destroy(tok);
    sl_model_destroy(m);
    return rc;
}
