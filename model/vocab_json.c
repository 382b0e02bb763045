/* model/vocab_json.c: tokenizer.json -> tokenizer.ggml.* keys.
 * Runs in: tools, once per conversion.
 * Trade-off: the pre-tokenizer is recognised by its exact regex text (a
 * short table) instead of llama.cpp's hash of a sample tokenization, which
 * needs the reference library; an unknown pattern is refused, naming it,
 * rather than guessed. */
#include "model/vocab_json.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"

/* Known Split patterns -> tokenizer.ggml.pre names. */
static const struct {
    const char *pattern;
    const char *pre;
} k_pre[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"\\p{N}{1,3}", "deepseek-v3"},   /* first of deepseek-v3's three splits */
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
     "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "gpt-4o"},   /* o200k: gpt-oss, GPT-4o */
};

static const char *str_or_content(json_t *v)
{
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

/* llama.cpp's converter marks some non-special added tokens as control. */
static bool looks_special(const char *s)
{
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>"))
        return true;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>"))
        return true;
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>')
        return true;
    return false;
}

/* Does any object in the tree have "type": type? */
static json_t *find_type(json_t *j, const char *type)
{
    if (json_is_object(j)) {
        json_t *ty = json_object_get(j, "type");
        if (json_is_string(ty) && !strcmp(json_string_value(ty), type))
            return j;
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            json_t *r = find_type(v, type);
            if (r)
                return r;
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) {
            json_t *r = find_type(v, type);
            if (r)
                return r;
        }
    }
    return NULL;
}

static const char *detect_pre(json_t *pre_tok, char err[SL_ERR_LEN])
{
    json_t *split = find_type(pre_tok, "Split");
    if (!split) {
        json_t *bl = find_type(pre_tok, "ByteLevel");
        json_t *ur = bl ? json_object_get(bl, "use_regex") : NULL;
        if (bl && (!ur || json_is_true(ur)))
            return "gpt-2";
        snprintf(err, SL_ERR_LEN, "pre_tokenizer: no Split pattern and no ByteLevel regex");
        return NULL;
    }
    const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    for (size_t i = 0; re && i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (!strcmp(re, k_pre[i].pattern))
            return k_pre[i].pre;
    snprintf(err, SL_ERR_LEN, "pre_tokenizer: unrecognised Split pattern \"%.150s\"", re ? re : "?");
    return NULL;
}

/* add_bos/add_eos from the post-processor's TemplateProcessing "single". */
static void template_adds(json_t *post, bool *bos, bool *eos)
{
    json_t *tp = find_type(post, "TemplateProcessing");
    json_t *single = tp ? json_object_get(tp, "single") : NULL;
    size_t n = json_array_size(single);
    if (!n)
        return;
    *bos = json_object_get(json_array_get(single, 0), "SpecialToken") != NULL;
    *eos = n > 1 && json_object_get(json_array_get(single, n - 1), "SpecialToken") != NULL;
}

sl_status sl_vocab_json_to_gguf(const char *tokenizer_json_path, const char *tokenizer_config_path,
                                sl_gguf_writer *w, char err[SL_ERR_LEN])
{
    return sl_vocab_json_to_gguf_min(tokenizer_json_path, tokenizer_config_path, 0, w, err);
}

sl_status sl_vocab_json_to_gguf_min(const char *tokenizer_json_path, const char *tokenizer_config_path,
                                    size_t min_tokens, sl_gguf_writer *w, char err[SL_ERR_LEN])
{
    json_error_t je;
    json_t *tj = json_load_file(tokenizer_json_path, 0, &je), *cfg = NULL;
    sl_status rc = SL_EFORMAT;
    char **texts = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    char **merges = NULL;
    size_t n_merges = 0, n = 0;
    if (!tj) {
        snprintf(err, SL_ERR_LEN, "%s: %s (line %d)", tokenizer_json_path, je.text, je.line);
        return SL_EFORMAT;
    }
    if (tokenizer_config_path && !(cfg = json_load_file(tokenizer_config_path, JSON_DECODE_INT_AS_REAL, &je))) {
        snprintf(err, SL_ERR_LEN, "%s: %s (line %d)", tokenizer_config_path, je.text, je.line);
        json_decref(tj);
        return SL_EFORMAT;
    }
    json_t *model = json_object_get(tj, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(tj, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab)) {
        snprintf(err, SL_ERR_LEN, "%s: model.type must be BPE with a vocab object", tokenizer_json_path);
        rc = SL_EUNSUPPORTED;
        goto out;
    }
    bool byte_level = find_type(json_object_get(tj, "pre_tokenizer"), "ByteLevel") ||
                      find_type(json_object_get(tj, "decoder"), "ByteLevel");

    /* vocabulary size: the largest id + 1, gaps padded as llama.cpp does */
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id > 0x7ffffffe) {
            snprintf(err, SL_ERR_LEN, "model.vocab[\"%.40s\"]: bad id", k);
            goto out;
        }
        if ((size_t)id + 1 > n)
            n = (size_t)id + 1;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (!json_is_string(json_object_get(v, "content")) || id < 0 || id > 0x7ffffffe) {
            snprintf(err, SL_ERR_LEN, "added_tokens[%zu]: bad id or content", i);
            goto out;
        }
        if ((size_t)id + 1 > n)
            n = (size_t)id + 1;
    }
    if (n < min_tokens)
        n = min_tokens;   /* padded below like the gaps */
    texts = calloc(n, sizeof *texts);
    types = malloc(n * sizeof *types);
    scores = malloc(n * sizeof *scores);
    if (!texts || !types || !scores) {
        rc = SL_ENOMEM;
        goto out;
    }
    for (size_t t = 0; t < n; t++) {
        types[t] = SL_TOKEN_ATTR_NORMAL;
        scores[t] = 0.0f;
    }
    json_object_foreach(vocab, k, v) {
        size_t id = (size_t)json_integer_value(v);
        texts[id] = (char *)k;
        if (!byte_level && strlen(k) == 6 && !strncmp(k, "<0x", 3) && k[5] == '>')
            types[id] = SL_TOKEN_ATTR_BYTE;
    }
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    json_array_foreach(added, i, v) {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        texts[id] = (char *)c;
        bool special = json_is_true(json_object_get(v, "special"));
        types[id] = special || looks_special(c) ? SL_TOKEN_ATTR_CONTROL : SL_TOKEN_ATTR_USER_DEFINED;
        if (unk && !strcmp(c, unk))
            types[id] = SL_TOKEN_ATTR_UNKNOWN;
    }
    char pad_name[32];
    for (size_t t = 0; t < n; t++) {
        if (!texts[t]) {
            snprintf(pad_name, sizeof pad_name, "[PAD%zu]", t);
            texts[t] = strdup(pad_name);   /* freed below: marked by UNUSED */
            types[t] = SL_TOKEN_ATTR_UNUSED;
        }
    }

    /* merges: "a b" strings or [a, b] pairs; a token's score is minus the
     * rank of the first merge that makes it (so a score-driven SentencePiece
     * reader merges in the same order) */
    json_t *jm = json_object_get(model, "merges");
    n_merges = json_array_size(jm);
    merges = calloc(n_merges + 1, sizeof *merges);
    if (!merges) {
        rc = SL_ENOMEM;
        goto out;
    }
    json_t *v2;
    json_array_foreach(jm, i, v2) {
        if (json_is_string(v2)) {
            merges[i] = strdup(json_string_value(v2));
        } else if (json_array_size(v2) == 2) {
            const char *a = json_string_value(json_array_get(v2, 0));
            const char *b = json_string_value(json_array_get(v2, 1));
            if (a && b && (merges[i] = malloc(strlen(a) + strlen(b) + 2)))
                sprintf(merges[i], "%s %s", a, b);
        }
        if (!merges[i]) {
            snprintf(err, SL_ERR_LEN, "model.merges[%zu]: not a string or a pair", i);
            goto out;
        }
    }
    if (!byte_level) {
        char *cat = NULL;
        for (size_t r = n_merges; r-- > 0;) {   /* backwards: the first rank wins */
            char *sp = strchr(merges[r], ' ');
            if (!sp)
                continue;
            free(cat);
            cat = malloc(strlen(merges[r]));
            if (!cat)
                break;
            memcpy(cat, merges[r], (size_t)(sp - merges[r]));
            strcpy(cat + (sp - merges[r]), sp + 1);
            json_t *id = json_object_get(vocab, cat);
            if (json_is_integer(id))
                scores[json_integer_value(id)] = -(float)(r + 1);
        }
        free(cat);
    }

    /* special ids and flags */
    bool add_bos = false, add_eos = false;
    template_adds(json_object_get(tj, "post_processor"), &add_bos, &add_eos);
    if (cfg && json_is_boolean(json_object_get(cfg, "add_bos_token")))
        add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
    if (cfg && json_is_boolean(json_object_get(cfg, "add_eos_token")))
        add_eos = json_is_true(json_object_get(cfg, "add_eos_token"));
    static const char *const id_keys[][2] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"},
        {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    for (size_t q = 0; q < 4; q++) {
        const char *name = cfg ? str_or_content(json_object_get(cfg, id_keys[q][0])) : NULL;
        if (!name && q == 2)
            name = unk;
        if (!name)
            continue;
        size_t t;
        for (t = 0; t < n && strcmp(texts[t], name); t++)
            ;
        if (t == n) {
            snprintf(err, SL_ERR_LEN, "%s: \"%.60s\" is not a token", id_keys[q][0], name);
            goto out;
        }
        sl_gguf_writer_set_u32(w, id_keys[q][1], (uint32_t)t);
    }

    const char *pre = NULL;
    if (byte_level && !(pre = detect_pre(json_object_get(tj, "pre_tokenizer"), err))) {
        rc = SL_EUNSUPPORTED;
        goto out;
    }
    sl_gguf_writer_set_str(w, "tokenizer.ggml.model", byte_level ? "gpt2" : "llama");
    if (pre)
        sl_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    else
        sl_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    if ((rc = sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts,
                                         NULL, n)) < 0 ||
        (rc = sl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SL_GGUF_TYPE_INT32, types, n)) < 0 ||
        (!byte_level &&
         (rc = sl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SL_GGUF_TYPE_FLOAT32, scores, n)) < 0) ||
        (rc = sl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges,
                                         NULL, n_merges)) < 0) {
        snprintf(err, SL_ERR_LEN, "gguf writer: %s", sl_status_name(rc));
        goto out;
    }
    sl_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    sl_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", add_eos);
    if (!byte_level) {
        json_t *norm = json_object_get(tj, "normalizer");
        json_t *prep = find_type(norm, "Prepend");
        json_t *meta = find_type(json_object_get(tj, "pre_tokenizer"), "Metaspace");
        const char *scheme = meta ? json_string_value(json_object_get(meta, "prepend_scheme")) : NULL;
        bool asp = prep != NULL || (meta && (!scheme || strcmp(scheme, "never")));
        sl_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", asp);
    }

    /* chat template(s) */
    json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (json_is_string(ct)) {
        sl_gguf_writer_set_str(w, "tokenizer.chat_template", json_string_value(ct));
    } else if (json_is_array(ct)) {
        json_array_foreach(ct, i, v) {
            const char *name = json_string_value(json_object_get(v, "name"));
            const char *tpl = json_string_value(json_object_get(v, "template"));
            if (!name || !tpl)
                continue;
            char key[160];
            if (!strcmp(name, "default"))
                snprintf(key, sizeof key, "tokenizer.chat_template");
            else
                snprintf(key, sizeof key, "tokenizer.chat_template.%.120s", name);
            sl_gguf_writer_set_str(w, key, tpl);
        }
    }
    rc = SL_OK;
out:
    if (texts)
        for (size_t t = 0; t < n; t++)
            if (types[t] == SL_TOKEN_ATTR_UNUSED && texts[t] && !strncmp(texts[t], "[PAD", 4))
                free(texts[t]);
    for (size_t r = 0; merges && r < n_merges; r++)
        free(merges[r]);
    free(merges);
    free(texts);
    free(types);
    free(scores);
    json_decref(tj);
    json_decref(cfg);
    return rc;
}
