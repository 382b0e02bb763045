/* tools/mkvocab: writes a tokenizer-only GGUF (no tensors) from a Hugging
 * Face tokenizer.json and, optionally, its tokenizer_config.json, then
 * loads it back through sl_tokenizer_create to prove it is usable.
 *   mkvocab TOKENIZER_JSON [TOKENIZER_CONFIG_JSON] OUT.gguf
 * Exit status 0, or 1 with one line on stderr. */
#include <stdio.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/vocab_json.h"

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: mkvocab TOKENIZER_JSON [TOKENIZER_CONFIG_JSON] OUT.gguf\n");
        return 1;
    }
    const char *cfg = argc == 4 ? argv[2] : NULL, *out = argv[argc - 1];
    char err[SL_ERR_LEN];
    sl_gguf_writer *w = sl_gguf_writer_create();
    if (!w) {
        fprintf(stderr, "mkvocab: out of memory\n");
        return 1;
    }
    sl_gguf_writer_set_str(w, "general.name", "tokenizer");
    if (sl_vocab_json_to_gguf(argv[1], cfg, w, err) < 0 || sl_gguf_writer_begin(w, out, err) < 0 ||
        sl_gguf_writer_finish(w, err) < 0) {
        fprintf(stderr, "mkvocab: %s\n", err);
        sl_gguf_writer_destroy(w);
        return 1;
    }
    sl_gguf_writer_destroy(w);
    sl_gguf *g;
    sl_tokenizer *t;
    if (sl_gguf_open(out, &g, err) < 0 || sl_tokenizer_create(g, &t, err) < 0) {
        fprintf(stderr, "mkvocab: written file does not load: %s\n", err);
        return 1;
    }
    printf("%s: %d tokens\n", out, sl_tokenizer_n_vocab(t));
    sl_tokenizer_destroy(t);
    sl_gguf_close(g);
    return 0;
}
