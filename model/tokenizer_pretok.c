/* model/tokenizer_pretok.c: pre-tokenizers of byte-level BPE vocabularies,
 * named by tokenizer.ggml.pre. Each is a chain of split regexes (the
 * patterns of the models' tokenizer.json files, as llama.cpp lists them);
 * every regex splits every piece of the previous stage into matches and the
 * gaps between them, and the last stage feeds BPE directly.
 * Runs in: the calling thread; match data is created per call.
 * Trade-off: PCRE2 with UTF + UCP gives Unicode categories (\p{L}, \p{N},
 * \s) that are maintained upstream, and its JIT makes it fast enough that a
 * hand-written splitter is not needed yet (docs/PERF.md). Each piece is
 * matched as its own subject, so lookaheads and `$` stop at the piece end,
 * exactly as HF applies a Split to each piece. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <string.h>

#include "model/tokenizer_internal.h"

/* GPT-2's pattern, shared by several vocabularies. */
#define PAT_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3 (the contractions spelled out instead of (?i:) so that caseless
 * Unicode folding cannot widen them). */
#define PAT_LLAMA3 "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
                   "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_QWEN2 "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
                  "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-4o's o200k pattern (gpt-oss, Llama 4): letters split at case
 * changes, digits in threes, '/' kept with the punctuation run before it. */
#define PAT_GPT4O_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
#define PAT_GPT4O "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
                  PAT_GPT4O_CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
                  "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" PAT_GPT4O_CONTR \
                  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    const char *names[6];
    const char *pats[SL_PRETOK_MAX];
} pretok_def;

static const pretok_def k_defs[] = {
    {{"llama-bpe", "llama3", "dbrx", "smaug-bpe"}, {PAT_LLAMA3}},
    {{"qwen2", "deepseek-r1-qwen", "megrez"}, {PAT_QWEN2}},
    {{"gpt-4o", "llama4"}, {PAT_GPT4O}},
    {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "gpt2"}, {PAT_GPT2}},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"},
     {"\\p{N}", PAT_GPT2}},
    {{"falcon"},
     {"[\\p{P}\\$\\+<=>\\^~\\|`]+",
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
      "[0-9][0-9][0-9]"}},
    {{"deepseek-llm"},
     {"[\\r\\n]",
      "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad\xea\x9a\x80-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
      "\\s?[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+",
      "\\s+$",
      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
      "\\p{N}+"}},
    {{"deepseek-coder"},
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+", "\\p{N}"}},
    {{"deepseek-v3", "deepseek3-llm"},
     {"\\p{N}{1,3}",
      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {{"default"},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+",
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
      "\\p{N}+", "[0-9][0-9][0-9]"}},
};

sl_status sl_tok_pretok_init(sl_pretok *p, const char *pre, size_t pre_len, char err[SL_ERR_LEN])
{
    memset(p, 0, sizeof *p);
    const pretok_def *d = NULL;
    for (size_t i = 0; i < sizeof k_defs / sizeof k_defs[0] && !d; i++)
        for (int k = 0; k < 6 && k_defs[i].names[k]; k++)
            if (strlen(k_defs[i].names[k]) == pre_len && memcmp(k_defs[i].names[k], pre, pre_len) == 0)
                d = &k_defs[i];
    if (!d) {
        snprintf(err, SL_ERR_LEN, "tokenizer.ggml.pre: \"%.*s\" is not a supported pre-tokenizer",
                 (int)(pre_len > 40 ? 40 : pre_len), pre);
        return SL_EUNSUPPORTED;
    }
    for (int i = 0; i < SL_PRETOK_MAX && d->pats[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        /* MATCH_INVALID_UTF: any bytes are a valid subject (invalid UTF-8
         * simply matches nothing and falls into a gap); DOLLAR_ENDONLY: `$`
         * is the end of the piece, as in the reference's regex engine */
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)d->pats[i], PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                                          PCRE2_DOLLAR_ENDONLY,
                                      &ec, &eo, NULL);
        if (!c) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(ec, msg, sizeof msg);
            snprintf(err, SL_ERR_LEN, "tokenizer.ggml.pre: pattern %d at %zu: %s", i, (size_t)eo,
                     (const char *)msg);
            sl_tok_pretok_fini(p);
            return SL_EFORMAT;
        }
        pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);   /* falls back to the interpreter if absent */
        p->code[p->n++] = c;
    }
    return SL_OK;
}

void sl_tok_pretok_fini(sl_pretok *p)
{
    for (int i = 0; i < p->n; i++)
        pcre2_code_free(p->code[i]);
    p->n = 0;
}

void sl_tok_pretok_release(sl_tok_sink *s)
{
    if (s->md)
        pcre2_match_data_free(s->md);
    s->md = NULL;
}

/* Calls emit on every match and gap of code over text[0..len). */
typedef sl_status (*piece_fn)(const sl_tokenizer *t, sl_tok_sink *s, const char *base,
                              size_t off, size_t len, int list);

static sl_status split_one(const sl_tokenizer *t, sl_tok_sink *s, pcre2_code *code,
                           const char *base, size_t off, size_t len, piece_fn fn, int list)
{
    const char *subj = base + off;
    size_t start = 0, gap = 0;
    while (start < len) {
        int rc = pcre2_match(code, (PCRE2_SPTR)subj, len, start, 0, s->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   /* the interpreter keeps its frames on the heap */
            rc = pcre2_match(code, (PCRE2_SPTR)subj, len, start, PCRE2_NO_JIT, s->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc == PCRE2_ERROR_NOMEMORY)
            return SL_ENOMEM;
        if (rc < 0)   /* a match or depth limit: the rest becomes one piece, never a failure */
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {   /* an empty match splits nothing: step one character */
            start = ms + sl_tok_utf8_len(subj + ms, len - ms);
            continue;
        }
        sl_status st;
        if (ms > gap && (st = fn(t, s, base, off + gap, ms - gap, list)) < 0)
            return st;
        if ((st = fn(t, s, base, off + ms, me - ms, list)) < 0)
            return st;
        gap = start = me;
    }
    if (len > gap)
        return fn(t, s, base, off + gap, len - gap, list);
    return SL_OK;
}

static sl_status to_bpe(const sl_tokenizer *t, sl_tok_sink *s, const char *base, size_t off,
                        size_t len, int list)
{
    (void)list;
    return sl_tok_bpe_word(t, s, base + off, len);
}

static sl_status to_list(const sl_tokenizer *t, sl_tok_sink *s, const char *base, size_t off,
                         size_t len, int list)
{
    (void)t;
    (void)base;
    size_t n = s->pieces[list] ? s->pieces[list][0] : 0;
    if (sl_tok_grow((void **)&s->pieces[list], &s->pieces_cap[list], 2 * n + 3, sizeof(size_t)) < 0)
        return SL_ENOMEM;
    s->pieces[list][0] = n + 1;
    s->pieces[list][1 + 2 * n] = off;
    s->pieces[list][2 + 2 * n] = len;
    return SL_OK;
}

sl_status sl_tok_pretok_split(const sl_tokenizer *t, sl_tok_sink *s, const char *text, size_t len)
{
    const sl_pretok *p = &t->pretok;
    if (!s->md && !(s->md = pcre2_match_data_create(4, NULL)))
        return SL_ENOMEM;
    if (p->n == 1)
        return split_one(t, s, p->code[0], text, 0, len, to_bpe, 0);
    /* stages 0..n-2 build piece lists (slot 0 holds the count), the last
     * stage streams into BPE */
    int cur = 0;
    sl_status st;
    if (sl_tok_grow((void **)&s->pieces[0], &s->pieces_cap[0], 3, sizeof(size_t)) < 0)
        return SL_ENOMEM;
    s->pieces[0][0] = 1;
    s->pieces[0][1] = 0;
    s->pieces[0][2] = len;
    for (int k = 0; k < p->n; k++) {
        size_t *in = s->pieces[cur];
        size_t n = in[0];
        bool last = k == p->n - 1;
        if (!last) {
            if (sl_tok_grow((void **)&s->pieces[!cur], &s->pieces_cap[!cur], 1, sizeof(size_t)) < 0)
                return SL_ENOMEM;
            s->pieces[!cur][0] = 0;
        }
        for (size_t i = 0; i < n; i++) {
            in = s->pieces[cur];   /* never moves while we only append to !cur */
            st = split_one(t, s, p->code[k], text, in[1 + 2 * i], in[2 + 2 * i],
                           last ? to_bpe : to_list, !cur);
            if (st < 0)
                return st;
        }
        cur = !cur;
    }
    return SL_OK;
}
