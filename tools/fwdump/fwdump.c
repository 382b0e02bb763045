/* tools/fwdump/fwdump.c: runs the engine's forward pass on token ids and
 * writes every position's logits, for the reference checks (numpy float64,
 * llama.cpp) and the batch-invariance tests.
 *
 *   fwdump -m MODEL --tokens 1,2,3 [--steps N] [--chunk C] [--threads T]
 *          [--out FILE] [--batch-with M] [--max-ctx P] [--device cpu|cuda]
 *
 * Feeds the prompt in chunks of C tokens (logits for every position), then N
 * greedy decode steps. FILE receives float32 rows, (n_prompt + N) x n_vocab.
 * stdout: the fed token ids, one line. With --batch-with M, every call also
 * carries M unrelated sequences of other lengths (a different prompt each),
 * whose logits are discarded: the output must not change. --max-ctx sets the
 * backend's context size (default 4096, the most it takes), which picks a
 * longrope model's factor table (model.h, sl_model_rope_divisors).
 * --device picks the backend (default cpu; cuda for the GPU machine's
 * checks of real files against the CPU and llama.cpp). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/model.h"

#define MAX_TOKENS 4096
#define BLOCK SL_KV_BLOCK_TOKENS

static int parse_tokens(const char *s, int32_t *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            return -1;
        out[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

typedef struct {
    int32_t tokens[MAX_TOKENS];
    int32_t blocks[MAX_TOKENS / BLOCK];
    int n, done;
} seq;

int main(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_arg = NULL, *out_path = NULL, *device = "cpu";
    int steps = 0, chunk = 512, threads = 1, batch_with = 0, max_ctx = MAX_TOKENS;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) tokens_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) chunk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch-with")) batch_with = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-ctx")) max_ctx = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else {
            fprintf(stderr, "fwdump: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model_path || !tokens_arg || chunk < 1 || steps < 0 || batch_with < 0 || batch_with > 16 ||
        max_ctx < 1 || max_ctx > MAX_TOKENS || (strcmp(device, "cpu") && strcmp(device, "cuda"))) {
        fprintf(stderr, "usage: fwdump -m MODEL --tokens 1,2,3 [--steps N] [--chunk C] [--threads T] "
                        "[--out FILE] [--batch-with M] [--max-ctx P (1-%d)] [--device cpu|cuda]\n", MAX_TOKENS);
        return 2;
    }
    char err[SL_ERR_LEN];
    sl_model *m;
    if (sl_model_load(model_path, &m, err) < 0) {
        fprintf(stderr, "fwdump: %s\n", err);
        return 2;
    }
    int n_seq = 1 + batch_with;
    seq *seqs = calloc((size_t)n_seq, sizeof *seqs);
    int n_prompt = parse_tokens(tokens_arg, seqs[0].tokens, MAX_TOKENS);
    if (n_prompt < 1 || n_prompt + steps > max_ctx) {
        fprintf(stderr, "fwdump: bad --tokens\n");
        return 2;
    }
    seqs[0].n = n_prompt;
    int V = m->hp.n_vocab;
    for (int s = 1; s < n_seq; s++) {   /* distractors: other prompts, other lengths */
        seqs[s].n = 1 + (s * 7) % 23;
        for (int j = 0; j < seqs[s].n; j++)
            seqs[s].tokens[j] = (int32_t)((s * 131 + j * 17) % V);
    }
    int blocks_per_seq = MAX_TOKENS / BLOCK;
    for (int s = 0; s < n_seq; s++)
        for (int b = 0; b < blocks_per_seq; b++)   /* interleave sequences' blocks */
            seqs[s].blocks[b] = b * n_seq + (n_seq - 1 - s);

    int max_batch = chunk * n_seq + n_seq;
    sl_backend_config cfg = {.device = device, .n_threads = threads, .kv_block_size = BLOCK,
                             .n_kv_blocks = (uint32_t)(blocks_per_seq * n_seq),
                             .max_batch_tokens = max_batch, .max_ctx = max_ctx};
    sl_backend *b;
    if (sl_backend_create(m, &cfg, &b, err) < 0) {
        fprintf(stderr, "fwdump: %s\n", err);
        return 1;
    }
    float *logits = malloc((size_t)max_batch * V * sizeof(float));
    FILE *out = out_path ? fopen(out_path, "wb") : NULL;
    sl_batch_seq batch[17];
    int owner[17];
    int fed = 0;   /* tokens of seq 0 fed so far */
    int total = n_prompt + steps;
    while (fed < total) {
        int nb = 0;
        owner[0] = 0;
        int n0 = fed < n_prompt ? (n_prompt - fed < chunk ? n_prompt - fed : chunk) : 1;
        batch[nb++] = (sl_batch_seq){.tokens = seqs[0].tokens + fed, .n_tokens = n0, .pos = fed,
                                     .blocks = seqs[0].blocks, .n_blocks = blocks_per_seq, .logits_all = true,
                                     .prompt = fed < n_prompt};
        for (int s = 1; s < n_seq; s++) {
            seq *q = &seqs[s];
            int left = q->n - q->done;
            if (left <= 0 || q->n >= MAX_TOKENS - 1)
                continue;
            int k = left < chunk ? left : chunk;
            owner[nb] = s;
            batch[nb++] = (sl_batch_seq){.tokens = q->tokens + q->done, .n_tokens = k, .pos = q->done,
                                         .blocks = q->blocks, .n_blocks = blocks_per_seq, .logits_all = false,
                                         .prompt = true};
        }
        if (sl_backend_forward(b, batch, nb, logits) < 0) {
            fprintf(stderr, "fwdump: forward failed\n");
            return 1;
        }
        if (out)
            fwrite(logits, sizeof(float), (size_t)n0 * V, out);
        fed += n0;
        if (fed >= n_prompt && fed < total)
            seqs[0].tokens[fed] = argmax(logits + (size_t)(n0 - 1) * V, V);
        /* distractors: consume what was fed, then extend by their own argmax */
        int row = n0;
        for (int i = 1; i < nb; i++, row++) {
            seq *q = &seqs[owner[i]];
            q->done += batch[i].n_tokens;
            q->tokens[q->n++] = argmax(logits + (size_t)row * V, V);
        }
    }
    for (int i = 0; i < total; i++)
        printf("%s%d", i ? "," : "", seqs[0].tokens[i]);
    printf("\n");
    if (out)
        fclose(out);
    free(logits);
    free(seqs);
    sl_backend_destroy(b);
    sl_model_destroy(m);
    return 0;
}
