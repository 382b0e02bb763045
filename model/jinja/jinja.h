/* model/jinja/jinja.h: internals of the Jinja subset behind chat_template.h.
 * Where:     only the files of model/jinja/ and model/chat_template.c
 *            include this; the public API is model/chat_template.h.
 * Pipeline:  jinja_lexer.c (source -> tokens, whitespace control as jinja2
 *            with trim_blocks + lstrip_blocks), jinja_parser.c (tokens -> AST),
 *            jinja_value.c (arena, values, order), jinja_repr.c (str(), repr(),
 *            json.dumps),
 *            jinja_eval.c (expressions), jinja_interp.c (statements, macros),
 *            jinja_text.c (string operations), jinja_filters.c (filters),
 *            jinja_methods.c (tests, methods, global functions).
 * Provenance: every string carries a per-byte "untrusted" mask (NULL when all
 *            bytes are trusted). Strings built from `messages`/`tools` are
 *            untrusted; template literals and bos/eos are trusted. Every
 *            operation copies the mask along with the bytes, or marks its
 *            whole result untrusted when the byte mapping is unclear.
 * Memory:    everything lives in arenas: one per compiled template (AST),
 *            one per render (values, output). An arena has a byte limit, so a
 *            hostile template runs out of budget, not out of memory.
 * Errors:    functions return 0 or -1; -1 means jj_fail() already recorded
 *            the status and message in the context. */
#ifndef SL_JINJA_H
#define SL_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/status.h"

/* ---- arena -------------------------------------------------------------- */

typedef struct jj_chunk jj_chunk;
typedef struct {
    jj_chunk *head;
    size_t used_total; /* bytes handed out, checked against limit */
    size_t limit;      /* 0: unlimited */
} jj_arena;

void jj_arena_init(jj_arena *a, size_t limit);
void jj_arena_fini(jj_arena *a);
/* Zeroed, 16-aligned memory or NULL when over the limit / out of memory. */
void *jj_alloc(jj_arena *a, size_t n);

/* ---- values ------------------------------------------------------------- */

typedef enum {
    JJ_UNDEF = 0, /* jinja2's default Undefined: falsy, renders as "" */
    JJ_NONE,
    JJ_BOOL,
    JJ_INT,
    JJ_FLOAT,
    JJ_STR,
    JJ_LIST,  /* also tuples: the sandbox makes both immutable */
    JJ_DICT,
    JJ_NS,    /* namespace(): the one mutable object */
    JJ_MACRO,
    JJ_FUNC,  /* a global function (range, dict, namespace, ...) */
} jj_kind;

/* t[i] != 0: byte i came from untrusted data. t == NULL: all trusted. */
typedef struct {
    const char *p;
    const uint8_t *t;
    size_t n;
    bool safe;  /* markupsafe.Markup (from |safe or |escape): `+` escapes the other side */
} jj_str;

typedef struct jj_val jj_val;
typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
typedef struct jj_node jj_node;

struct jj_val {
    jj_kind k;
    union {
        bool b;
        int64_t i;
        double f;
        jj_str s;
        jj_list *l;
        jj_dict *d;             /* JJ_DICT and JJ_NS */
        const jj_node *macro;
        int fn;                 /* JJ_FUNC: index into the builtin table */
    };
};

/* gen: the list stands for a Python generator (what map/select/... return):
 * always truthy, and length/tojson/str refuse it, as in jinja2. */
/* tuple: prints as (a, b) and never equals a list, as in Python. */
struct jj_list { jj_val *v; size_t n, cap; bool gen, tuple; };
struct jj_dict { jj_val *keys, *vals; size_t n, cap; };

/* ---- render context ------------------------------------------------------ */

typedef struct jj_scope jj_scope;
struct jj_scope {
    jj_scope *parent;
    jj_dict vars;
};

/* Output buffer: bytes plus their per-byte untrusted mask. */
typedef struct {
    char *p;
    uint8_t *t;
    size_t n, cap;
} jj_buf;

typedef struct {
    jj_arena *ar;
    jj_scope *globals;
    int64_t now;            /* seconds since the epoch for strftime_now */
    int depth;              /* current recursion depth (expressions, statements, macros) */
    uint64_t iterations;    /* loop iterations so far */
    sl_status rc;
    char *err;              /* SL_ERR_LEN bytes */
    int line;               /* line of the node being run, for messages */
    uint64_t deadline_ns;   /* CLOCK_MONOTONIC end of the render's time budget; 0 = none */
    uint32_t ticks;         /* jj_enter calls, to look at the clock every 16th */
} jj_ctx;

/* Limits: a template is hostile input. */
#define JJ_MAX_DEPTH       400               /* nested expressions/statements/macro frames */
#define JJ_MAX_PARSE_DEPTH 200               /* nesting the parser accepts */
#define JJ_MAX_OUTPUT      (8u << 20)        /* bytes of rendered text and of any one string */
#define JJ_MAX_ITERATIONS  1000000u          /* loop iterations per render */
#define JJ_RENDER_ARENA    (256u << 20)      /* bytes of values per render */
#define JJ_MAX_RENDER_NS   2000000000ull     /* wall time per render (see jj_enter) */

int jj_fail(jj_ctx *c, sl_status rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* constructors */
jj_val jj_undef(void);
jj_val jj_none(void);
jj_val jj_bool(bool b);
jj_val jj_int(int64_t i);
jj_val jj_float(double f);
jj_val jj_strv(jj_str s);
/* A string copied from p[0..n) with every byte marked untrusted or not. */
int jj_str_make(jj_ctx *c, const char *p, size_t n, bool untrusted, jj_str *out);
jj_str jj_lit(const char *cstr); /* trusted, points at static storage */
bool jj_str_eq(jj_str a, jj_str b);
bool jj_str_eqc(jj_str a, const char *cstr);
bool jj_str_untrusted(jj_str s); /* any byte untrusted */

jj_list *jj_list_new(jj_ctx *c, size_t cap);
int jj_list_push(jj_ctx *c, jj_list *l, jj_val v);
jj_dict *jj_dict_new(jj_ctx *c, size_t cap);
int jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v);
jj_val *jj_dict_get(const jj_dict *d, jj_val k);
jj_val *jj_dict_getc(const jj_dict *d, const char *key);

/* string builder over the render arena */
int jj_buf_put(jj_ctx *c, jj_buf *b, const char *p, size_t n, bool untrusted);
int jj_buf_puts(jj_ctx *c, jj_buf *b, jj_str s);
int jj_buf_putc(jj_ctx *c, jj_buf *b, const char *cstr);
jj_str jj_buf_str(const jj_buf *b);

bool jj_truthy(jj_val v);
bool jj_equal(jj_val a, jj_val b);
/* <0, 0, >0; -1 result with rc set when the types do not order */
int jj_compare(jj_ctx *c, jj_val a, jj_val b, int *out);
const char *jj_kind_name(jj_kind k);

/* Python str(v) / repr(v) appended to b. */
int jj_to_str(jj_ctx *c, jj_buf *b, jj_val v);
int jj_repr(jj_ctx *c, jj_buf *b, jj_val v, int depth);
int jj_stringify(jj_ctx *c, jj_val v, jj_str *out);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). indent < 0: none. */
int jj_tojson(jj_ctx *c, jj_buf *b, jj_val v, int indent, jj_str item_sep, jj_str key_sep,
              bool sort_keys, int depth);
int jj_float_repr(char out[40], double f);

/* UTF-8 helpers: code point count, byte offset of code point index. */
size_t jj_utf8_len(const char *p, size_t n);
size_t jj_utf8_decode(const char *p, size_t n, uint32_t *cp);

/* ---- lexer -------------------------------------------------------------- */

typedef enum {
    JJ_T_EOF, JJ_T_TEXT, JJ_T_VBEGIN, JJ_T_VEND, JJ_T_BBEGIN, JJ_T_BEND,
    JJ_T_NAME, JJ_T_STR, JJ_T_INT, JJ_T_FLOAT, JJ_T_OP,
} jj_ttype;

typedef struct {
    jj_ttype t;
    int line;
    jj_str s;      /* TEXT, NAME, STR (decoded), OP (spelling) */
    int64_t i;
    double f;
} jj_tok;

int jj_lex(jj_ctx *c, const char *src, size_t len, jj_tok **out, size_t *n_out);

/* ---- AST ---------------------------------------------------------------- */

typedef enum {
    /* expressions */
    JJ_N_LIT, JJ_N_NAME, JJ_N_LIST, JJ_N_TUPLE, JJ_N_DICT, JJ_N_ATTR, JJ_N_ITEM, JJ_N_SLICE,
    JJ_N_CALL, JJ_N_FILTER, JJ_N_TEST, JJ_N_NEG, JJ_N_POS, JJ_N_NOT, JJ_N_BIN, JJ_N_AND,
    JJ_N_OR, JJ_N_CMP, JJ_N_COND,
    /* statements */
    JJ_N_BODY, JJ_N_TEXT, JJ_N_OUTPUT, JJ_N_IF, JJ_N_FOR, JJ_N_SET, JJ_N_SETATTR,
    JJ_N_SETBLOCK, JJ_N_MACRO, JJ_N_CALLBLOCK, JJ_N_FILTERBLOCK, JJ_N_BREAK, JJ_N_CONTINUE,
} jj_ntype;

/* Binary and comparison operators (jj_node.op). */
enum {
    JJ_OP_ADD = 1, JJ_OP_SUB, JJ_OP_MUL, JJ_OP_DIV, JJ_OP_FLOORDIV, JJ_OP_MOD, JJ_OP_POW,
    JJ_OP_CONCAT, JJ_OP_EQ, JJ_OP_NE, JJ_OP_LT, JJ_OP_LE, JJ_OP_GT, JJ_OP_GE, JJ_OP_IN,
    JJ_OP_NOTIN,
};

/* One node type for every construct; the comment on each jj_ntype user in
 * jinja_parser.c says which fields it fills. */
struct jj_node {
    jj_ntype t;
    int line;
    int op;               /* operator, or 1 = negated test */
    jj_node *a, *b, *c, *d;
    jj_node **kids;       /* body, list items, positional args */
    size_t n_kids;
    jj_str *names;        /* kwarg names, macro params, loop/set targets */
    jj_node **name_vals;  /* kwarg values, macro defaults (entries may be NULL) */
    size_t n_names;
    jj_str name;          /* variable, attribute, filter or test name; TEXT data */
    jj_val lit;
};

int jj_parse(jj_ctx *c, const jj_tok *toks, size_t n, jj_node **root);

/* ---- interpreter and builtins ------------------------------------------- */

int jj_render(jj_ctx *c, const jj_node *root, jj_buf *out);
int jj_eval(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val *out);
/* Counts one recursion level (and records n's line for messages); false with
 * rc set past JJ_MAX_DEPTH or past c->deadline_ns. The caller decrements
 * c->depth when done. */
bool jj_enter(jj_ctx *c, const jj_node *n);
jj_val *jj_scope_lookup(jj_scope *s, jj_str name);
/* Applies the filter chain of a filter block or block set to `input`. */
int jj_eval_filter_chain(jj_ctx *c, jj_scope *s, const jj_node *n, jj_val input, jj_val *out);
int jj_call_macro(jj_ctx *c, jj_val macro, const jj_val *args, size_t n_args,
                  const jj_str *kw_names, const jj_val *kw_vals, size_t n_kw, jj_val *out);

/* Evaluated arguments of a call: positional then keyword. */
typedef struct {
    jj_val *pos;
    size_t n_pos;
    const jj_str *kw_names;
    jj_val *kw;
    size_t n_kw;
} jj_args;

/* Argument i, or keyword `kw` (which wins), or NULL. */
static inline const jj_val *jj_arg(const jj_args *a, size_t i, const char *kw)
{
    if (!a)
        return NULL;
    if (kw)
        for (size_t k = 0; k < a->n_kw; k++)
            if (jj_str_eqc(a->kw_names[k], kw))
                return &a->kw[k];
    return i < a->n_pos ? &a->pos[i] : NULL;
}

static inline bool jj_arg_bool(const jj_args *a, size_t i, const char *kw, bool def)
{
    const jj_val *v = jj_arg(a, i, kw);
    return v ? jj_truthy(*v) : def;
}

/* A string argument: *have=false when absent or none; an error if not a string. */
static inline int jj_arg_str(jj_ctx *c, const jj_args *a, size_t i, const char *kw, jj_str *out,
                             bool *have)
{
    const jj_val *v = jj_arg(a, i, kw);
    *have = v && v->k != JJ_NONE && v->k != JJ_UNDEF;
    if (!*have)
        return 0;
    if (v->k != JJ_STR)
        return jj_fail(c, SL_EINVAL, "argument '%s' must be a string", kw ? kw : "?");
    *out = v->s;
    return 0;
}

static inline jj_str jj_str_sub(jj_str s, size_t from, size_t to)
{
    jj_str r = {.p = s.p + from, .t = s.t ? s.t + from : NULL, .n = to - from};
    return r;
}

static inline jj_val jj_list_val(jj_list *l) { return (jj_val){.k = JJ_LIST, .l = l}; }

/* jinja_text.c: Python string operations that keep the untrusted mask. */
enum { JJ_CASE_UPPER, JJ_CASE_LOWER, JJ_CASE_CAPITALIZE_FIRST, JJ_CASE_TITLE, JJ_CASE_TITLE_WORDS };
jj_str jj_text_strip(jj_str s, const jj_str *chars, bool left, bool right); /* chars NULL: whitespace */
int jj_text_case(jj_ctx *c, jj_str s, int mode, jj_val *out);
int jj_text_replace(jj_ctx *c, jj_str s, jj_str old, jj_str neu, int64_t count, jj_val *out);
int jj_text_split(jj_ctx *c, jj_str s, const jj_str *sep, int64_t maxsplit, jj_val *out);
int jj_text_join(jj_ctx *c, jj_list *l, jj_str sep, const jj_str *attr, jj_val *out);
int jj_text_escape(jj_ctx *c, jj_str s, jj_val *out); /* HTML escape; result is Markup */

/* jinja_filters.c: iteration as jinja2 does it (dict -> keys, str -> code
 * points, Undefined -> nothing), and dotted attribute lookup ("a.b.0"). */
int jj_to_list(jj_ctx *c, jj_val v, jj_list **out);
jj_val jj_attr_path(jj_val v, jj_str path);

int jj_filter(jj_ctx *c, jj_str name, jj_val v, const jj_args *a, jj_val *out);
bool jj_filter_known(jj_str name);
bool jj_test_known(jj_str name);
int jj_test(jj_ctx *c, jj_str name, jj_val v, const jj_args *a, bool *out);
/* Method call obj.name(args); *found=false when obj has no such method. */
int jj_method(jj_ctx *c, jj_val obj, jj_str name, const jj_args *a, jj_val *out, bool *found);
/* Global function by name: index >= 0 or -1. */
int jj_func_lookup(jj_str name);
int jj_func_call(jj_ctx *c, int fn, const jj_args *a, jj_val *out);

#endif
