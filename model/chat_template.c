/* model/chat_template.c: the chat-template API over the Jinja engine, and
 * the named built-in templates; runs in the front end (compile at load,
 * render per request).
 * Trade-off: a render converts the request's JSON into engine values up
 * front (one copy, every string marked untrusted) instead of reading jansson
 * objects lazily; the copy is what lets every later operation carry
 * provenance without asking where a value came from. */
#include "shared/alloc.h"
#include "model/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/jinja/jinja.h"

/* Bytes of AST a template may use: far above any real template (~13 KB of
 * source is the largest we know) while bounding a hostile one. */
#define TEMPLATE_ARENA (64u << 20)

struct sl_chat_template {
    jj_arena ar;     /* owns tokens, normalised source and AST */
    jj_node *root;
};

sl_status sl_chat_template_compile(const char *src, size_t len, sl_chat_template **out,
                                   char err[SL_ERR_LEN])
{
    *out = NULL;
    err[0] = 0;
    if (!src && len)
        return snprintf(err, SL_ERR_LEN, "chat template: no source"), SL_EINVAL;
    sl_chat_template *t = sl_calloc(1, sizeof(*t));
    if (!t)
        return snprintf(err, SL_ERR_LEN, "chat template: out of memory"), SL_ENOMEM;
    jj_arena_init(&t->ar, TEMPLATE_ARENA);
    jj_ctx c = {.ar = &t->ar, .err = err};
    jj_tok *toks;
    size_t n;
    if (jj_lex(&c, src ? src : "", len, &toks, &n) < 0 || jj_parse(&c, toks, n, &t->root) < 0) {
        sl_chat_template_destroy(t);
        return c.rc < 0 ? c.rc : SL_EFORMAT;
    }
    *out = t;
    return SL_OK;
}

void sl_chat_template_destroy(sl_chat_template *t)
{
    if (!t)
        return;
    jj_arena_fini(&t->ar);
    free(t);
}

void sl_chat_render_result_fini(sl_chat_render_result *r)
{
    free(r->text);
    free(r->untrusted);
    memset(r, 0, sizeof(*r));
}

/* JSON -> engine value; every string (keys included) is untrusted. */
static int from_json(jj_ctx *c, const json_t *j, int depth, jj_val *out)
{
    if (depth > 256)
        return jj_fail(c, SL_EINVAL, "request JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jj_none(); return 0;
    case JSON_TRUE: *out = jj_bool(true); return 0;
    case JSON_FALSE: *out = jj_bool(false); return 0;
    case JSON_INTEGER: *out = jj_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jj_float(json_real_value(j)); return 0;
    case JSON_STRING: {
        jj_str s;
        if (jj_str_make(c, json_string_value(j), json_string_length(j), true, &s) < 0)
            return -1;
        *out = jj_strv(s);
        return 0;
    }
    case JSON_ARRAY: {
        jj_list *l = jj_list_new(c, json_array_size(j));
        if (!l)
            return -1;
        for (size_t i = 0; i < json_array_size(j); i++)
            if (from_json(c, json_array_get(j, i), depth + 1, &l->v[l->n++]) < 0)
                return -1;
        *out = (jj_val){.k = JJ_LIST, .l = l};
        return 0;
    }
    case JSON_OBJECT: {
        jj_dict *d = jj_dict_new(c, json_object_size(j));
        if (!d)
            return -1;
        const char *key;
        size_t key_len;
        json_t *v;
        /* jansson keeps insertion order, as Python dicts do. Its keys are
         * unique, so they are appended into the room jj_dict_new made:
         * jj_dict_set's linear duplicate check would make an object of n
         * keys cost n^2. A key holding a NUL is cut there by strlen, as
         * before, and may then repeat: only those take jj_dict_set. */
        json_object_keylen_foreach((json_t *)j, key, key_len, v) {
            jj_str k;
            jj_val x;
            size_t len = strlen(key);
            if (jj_str_make(c, key, len, true, &k) < 0 || from_json(c, v, depth + 1, &x) < 0)
                return -1;
            if (len != key_len || d->n == d->cap) {
                if (jj_dict_set(c, d, jj_strv(k), x) < 0)
                    return -1;
            } else {
                d->keys[d->n] = jj_strv(k);
                d->vals[d->n++] = x;
            }
        }
        *out = (jj_val){.k = JJ_DICT, .d = d};
        return 0;
    }
    }
    return jj_fail(c, SL_EINVAL, "unknown JSON type");
}

static int set_var(jj_ctx *c, const char *name, jj_val v)
{
    return jj_dict_set(c, &c->globals->vars, jj_strv(jj_lit(name)), v);
}

static int set_str(jj_ctx *c, const char *name, const char *s)
{
    jj_str v;
    if (jj_str_make(c, s ? s : "", s ? strlen(s) : 0, false, &v) < 0)
        return -1;
    return set_var(c, name, jj_strv(v));
}

/* Copies the rendered buffer out of the arena into malloc'd storage, turning
 * the per-byte mask into spans. */
static sl_status finish(const jj_buf *b, sl_chat_render_result *out, char *err)
{
    size_t n_spans = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->t[i] && (i == 0 || !b->t[i - 1]))
            n_spans++;
    out->text = sl_malloc(b->n + 1);
    out->untrusted = n_spans ? sl_malloc(n_spans * sizeof(sl_span)) : NULL;
    if (!out->text || (n_spans && !out->untrusted)) {
        sl_chat_render_result_fini(out);
        snprintf(err, SL_ERR_LEN, "chat template: out of memory");
        return SL_ENOMEM;
    }
    if (b->n)
        memcpy(out->text, b->p, b->n);
    out->text[b->n] = 0;
    out->len = b->n;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->t[i])
            continue;
        size_t e = i;
        while (e < b->n && b->t[e])
            e++;
        out->untrusted[out->n_untrusted++] = (sl_span){i, e};
        i = e;
    }
    return SL_OK;
}

sl_status sl_chat_template_render(const sl_chat_template *t, const json_t *messages,
                                  const json_t *tools, bool add_generation_prompt,
                                  const char *bos, const char *eos,
                                  const sl_chat_render_opts *opts, sl_chat_render_result *out,
                                  char err[SL_ERR_LEN])
{
    memset(out, 0, sizeof(*out));
    err[0] = 0;
    if (!t || !messages || !json_is_array(messages)) {
        snprintf(err, SL_ERR_LEN, "chat template: messages must be a JSON array");
        return SL_EINVAL;
    }
    if (tools && !json_is_array(tools) && !json_is_null(tools)) {
        snprintf(err, SL_ERR_LEN, "chat template: tools must be a JSON array");
        return SL_EINVAL;
    }
    jj_arena ar;
    jj_arena_init(&ar, JJ_RENDER_ARENA);
    jj_ctx c = {.ar = &ar, .err = err};
    c.now = opts && opts->has_now ? opts->now : (int64_t)time(NULL);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c.deadline_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + JJ_MAX_RENDER_NS;
    jj_buf b = {0};
    jj_val v;
    sl_status rc = SL_OK;
    c.globals = jj_alloc(&ar, sizeof(jj_scope));
    if (!c.globals) {
        jj_fail(&c, SL_ENOMEM, "out of memory");
        goto fail;
    }
    if (opts && opts->extra_vars && json_is_object(opts->extra_vars)) {
        const char *key;
        json_t *x;
        json_object_foreach((json_t *)opts->extra_vars, key, x) {
            jj_str k;
            if (jj_str_make(&c, key, strlen(key), false, &k) < 0 || from_json(&c, x, 0, &v) < 0 ||
                jj_dict_set(&c, &c.globals->vars, jj_strv(k), v) < 0)
                goto fail;
        }
    }
    if (from_json(&c, messages, 0, &v) < 0 || set_var(&c, "messages", v) < 0)
        goto fail;
    v = jj_none();
    if (tools && json_is_array(tools) && from_json(&c, tools, 0, &v) < 0)
        goto fail;
    if (set_var(&c, "tools", v) < 0 || set_var(&c, "documents", jj_none()) < 0 ||
        set_var(&c, "add_generation_prompt", jj_bool(add_generation_prompt)) < 0 ||
        set_str(&c, "bos_token", bos) < 0 || set_str(&c, "eos_token", eos) < 0)
        goto fail;
    if (jj_render(&c, t->root, &b) < 0)
        goto fail;
    rc = finish(&b, out, err);
    jj_arena_fini(&ar);
    return rc;
fail:
    rc = c.rc < 0 ? c.rc : SL_EINVAL;
    if (!err[0])
        snprintf(err, SL_ERR_LEN, "chat template: render failed");
    jj_arena_fini(&ar);
    return rc;
}

/* ======================================================================== */
/* built-in templates                                                       */
/* ======================================================================== */

/* Each is written from the format's documented layout. They accept content
 * as a string or a list of text parts, and put the system prompt where the
 * format wants it. */

#define CONTENT_MACRO                                                                     \
    "{%- macro content(m) -%}"                                                           \
    "{%- if m.content is string -%}{{ m.content }}"                                      \
    "{%- elif m.content is iterable -%}"                                                 \
    "{%- for part in m.content if part.type == 'text' -%}{{ part.text }}{%- endfor -%}"  \
    "{%- endif -%}"                                                                      \
    "{%- endmacro -%}\n"

static const char chatml_src[] = CONTENT_MACRO
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message.role + '\\n' + content(message) + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}";

/* Llama 2 chat: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s> */
static const char llama2_src[] = CONTENT_MACRO
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system = content(messages[0]) -%}{%- set msgs = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- set msgs = messages -%}{%- endif -%}"
    "{%- for message in msgs -%}"
    "{%- if message.role == 'user' -%}"
    "{{ bos_token + '[INST] ' }}"
    "{%- if loop.first and system -%}{{ '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}{%- endif -%}"
    "{{ content(message) | trim + ' [/INST]' }}"
    "{%- elif message.role == 'assistant' -%}"
    "{{ ' ' + content(message) | trim + ' ' + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}";

/* Llama 3: <|start_header_id|>role<|end_header_id|>\n\n{content}<|eot_id|> */
static const char llama3_src[] = CONTENT_MACRO
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{ '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + content(message) | trim + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}";

/* Mistral instruct: <s>[INST] {system}\n\n{user} [/INST]{answer}</s> */
static const char mistral_src[] = CONTENT_MACRO
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system = content(messages[0]) -%}{%- set msgs = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- set msgs = messages -%}{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for message in msgs -%}"
    "{%- if message.role == 'user' -%}"
    "{%- if loop.first and system -%}{{ '[INST] ' + system + '\\n\\n' + content(message) + ' [/INST]' }}"
    "{%- else -%}{{ '[INST] ' + content(message) + ' [/INST]' }}{%- endif -%}"
    "{%- elif message.role == 'assistant' -%}{{ content(message) + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}";

/* Gemma: <start_of_turn>user\n{content}<end_of_turn>\n, assistant is "model";
 * the system prompt is prepended to the first user turn. */
static const char gemma_src[] = CONTENT_MACRO
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system = content(messages[0]) + '\\n\\n' -%}{%- set msgs = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- set msgs = messages -%}{%- endif -%}"
    "{{- bos_token -}}"
    "{%- for message in msgs -%}"
    "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (system if loop.first else '') + content(message) | trim + '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}";

/* Phi-3: <|role|>\n{content}<|end|>\n ... <|assistant|>\n */
static const char phi3_src[] = CONTENT_MACRO
    "{%- for message in messages -%}"
    "{{ '<|' + message.role + '|>\\n' + content(message) + '<|end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- else -%}{{ eos_token }}{%- endif -%}";

const char *sl_chat_template_builtin(const char *name)
{
    static const struct { const char *name, *src; } table[] = {
        {"chatml", chatml_src}, {"llama2", llama2_src}, {"llama3", llama3_src},
        {"mistral", mistral_src}, {"gemma", gemma_src}, {"phi3", phi3_src},
    };
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(name, table[i].name) == 0)
            return table[i].src;
    return NULL;
}

const char *sl_chat_template_default_name(const char *arch, size_t len)
{
    static const char *const gemmas[] = {"gemma", "gemma2", "gemma3"};
    for (size_t i = 0; arch && i < sizeof gemmas / sizeof gemmas[0]; i++)
        if (len == strlen(gemmas[i]) && memcmp(arch, gemmas[i], len) == 0)
            return "gemma";
    return "chatml";
}
