/* model/jinja/jinja_methods.c: Jinja tests (`is defined`, ...), the str/dict/
 * list methods templates call, and the global functions (range, dict,
 * namespace, raise_exception, strftime_now); runs in the front end during a
 * render.
 * Trade-off: the immutable sandbox's refusals (list.append, dict.update...)
 * are spelled out by name instead of a general attribute policy; anything
 * not listed is simply not a method here. */
#include "model/jinja/jinja.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENAME(s) (int)((s).n > 40 ? 40 : (s).n), (s).p

/* Every test jj_test() knows (checked at load, like filters). */
static const char *const test_names[] = {
    "!=", "==", "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even",
    "false", "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan",
    "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string",
    "true", "undefined", "upper", NULL
};

bool jj_test_known(jj_str name)
{
    for (size_t i = 0; test_names[i]; i++)
        if (jj_str_eqc(name, test_names[i]))
            return true;
    return false;
}

int jj_test(jj_ctx *c, jj_str name, jj_val v, const jj_args *a, bool *out)
{
    const jj_val *x = jj_arg(a, 0, NULL);
    if (jj_str_eqc(name, "defined")) *out = v.k != JJ_UNDEF;
    else if (jj_str_eqc(name, "undefined")) *out = v.k == JJ_UNDEF;
    else if (jj_str_eqc(name, "none")) *out = v.k == JJ_NONE;
    else if (jj_str_eqc(name, "string")) *out = v.k == JJ_STR;
    else if (jj_str_eqc(name, "number")) *out = v.k == JJ_INT || v.k == JJ_FLOAT || v.k == JJ_BOOL;
    else if (jj_str_eqc(name, "integer")) *out = v.k == JJ_INT;
    else if (jj_str_eqc(name, "float")) *out = v.k == JJ_FLOAT;
    else if (jj_str_eqc(name, "boolean")) *out = v.k == JJ_BOOL;
    else if (jj_str_eqc(name, "true")) *out = v.k == JJ_BOOL && v.b;
    else if (jj_str_eqc(name, "false")) *out = v.k == JJ_BOOL && !v.b;
    else if (jj_str_eqc(name, "mapping")) *out = v.k == JJ_DICT;
    else if (jj_str_eqc(name, "iterable")) *out = v.k == JJ_STR || v.k == JJ_LIST || v.k == JJ_DICT || v.k == JJ_UNDEF;
    else if (jj_str_eqc(name, "sequence")) *out = v.k == JJ_STR || v.k == JJ_LIST || v.k == JJ_DICT || v.k == JJ_UNDEF;
    else if (jj_str_eqc(name, "callable")) *out = v.k == JJ_MACRO || v.k == JJ_FUNC;
    else if (jj_str_eqc(name, "lower") || jj_str_eqc(name, "upper")) {
        /* str(value).islower(): some cased letter, none of the other case */
        jj_str s;
        if (jj_stringify(c, v, &s) < 0)
            return -1;
        bool want_lower = jj_str_eqc(name, "lower"), cased = false, wrong = false;
        for (size_t i = 0; i < s.n; i++) {
            char ch = s.p[i];
            bool lo = ch >= 'a' && ch <= 'z', up = ch >= 'A' && ch <= 'Z';
            cased |= lo || up;
            wrong |= want_lower ? up : lo;
        }
        *out = cased && !wrong;
    } else if (jj_str_eqc(name, "odd") || jj_str_eqc(name, "even")) {
        if (v.k == JJ_FLOAT) { /* value % 2 == 1 / == 0, with Python's float modulo */
            double r = fmod(v.f, 2.0);
            if (r < 0)
                r += 2.0;
            *out = jj_str_eqc(name, "odd") ? r == 1.0 : r == 0.0;
            return 0;
        }
        if (v.k != JJ_INT && v.k != JJ_BOOL)
            return jj_fail(c, SL_EINVAL, "test '%.*s' needs a number", ENAME(name));
        int64_t i = v.k == JJ_INT ? v.i : v.b;
        *out = (i % 2 != 0) == jj_str_eqc(name, "odd");
    } else if (jj_str_eqc(name, "divisibleby")) {
        if (!x || x->k != JJ_INT || x->i == 0 || v.k != JJ_INT)
            return jj_fail(c, SL_EINVAL, "divisibleby needs non-zero integers");
        *out = v.i % x->i == 0;
    } else if (x && (jj_str_eqc(name, "equalto") || jj_str_eqc(name, "eq") || jj_str_eqc(name, "==") ||
                     jj_str_eqc(name, "sameas"))) {
        *out = jj_str_eqc(name, "sameas") ? (v.k == x->k && jj_equal(v, *x)) : jj_equal(v, *x);
    } else if (x && (jj_str_eqc(name, "ne") || jj_str_eqc(name, "!="))) {
        *out = !jj_equal(v, *x);
    } else if (x && (jj_str_eqc(name, "lt") || jj_str_eqc(name, "le") || jj_str_eqc(name, "gt") ||
                     jj_str_eqc(name, "ge") || jj_str_eqc(name, "lessthan") ||
                     jj_str_eqc(name, "greaterthan"))) {
        int r;
        if (jj_compare(c, v, *x, &r) < 0)
            return -1;
        char k0 = name.p[0], k1 = name.n > 1 ? name.p[1] : 0;
        *out = k0 == 'l' ? (k1 == 'e' && name.n == 2 ? r <= 0 : r < 0) : (k1 == 'e' ? r >= 0 : r > 0);
        if (jj_str_eqc(name, "greaterthan")) *out = r > 0;
    } else if (x && jj_str_eqc(name, "in")) {
        *out = false;
        if (x->k == JJ_STR && v.k == JJ_STR)
            *out = v.s.n == 0 || memmem(x->s.p, x->s.n, v.s.p, v.s.n) != NULL;
        else if (x->k == JJ_LIST)
            for (size_t i = 0; i < x->l->n; i++)
                *out |= jj_equal(v, x->l->v[i]);
        else if (x->k == JJ_DICT)
            *out = jj_dict_get(x->d, v) != NULL;
    } else {
        return jj_fail(c, SL_EUNSUPPORTED, "unknown test '%.*s'", ENAME(name));
    }
    return 0;
}

static int starts_ends(jj_ctx *c, jj_str s, const jj_args *a, bool ends, jj_val *out)
{
    const jj_val *x = jj_arg(a, 0, NULL);
    if (!x)
        return jj_fail(c, SL_EINVAL, "startswith/endswith need an argument");
    const jj_val *opts = x;
    size_t n_opts = 1;
    if (x->k == JJ_LIST) {
        opts = x->l->v;
        n_opts = x->l->n;
    }
    bool r = false;
    for (size_t i = 0; i < n_opts; i++) {
        if (opts[i].k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "startswith/endswith need strings");
        jj_str p = opts[i].s;
        if (p.n <= s.n && (p.n == 0 || memcmp(ends ? s.p + s.n - p.n : s.p, p.p, p.n) == 0))
            r = true;
    }
    *out = jj_bool(r);
    return 0;
}

static int str_method(jj_ctx *c, jj_str s, jj_str name, const jj_args *a, jj_val *out, bool *found)
{
    bool have;
    jj_str s1, s2;
    *found = true;
    bool l = jj_str_eqc(name, "lstrip"), r = jj_str_eqc(name, "rstrip");
    if (l || r || jj_str_eqc(name, "strip")) {
        if (jj_arg_str(c, a, 0, "chars", &s1, &have) < 0)
            return -1;
        *out = jj_strv(jj_text_strip(s, have ? &s1 : NULL, !r, !l));
        return 0;
    }
    if (jj_str_eqc(name, "split")) {
        const jj_val *ms = jj_arg(a, 1, "maxsplit");
        if (jj_arg_str(c, a, 0, "sep", &s1, &have) < 0)
            return -1;
        return jj_text_split(c, s, have ? &s1 : NULL, ms && ms->k == JJ_INT ? ms->i : -1, out);
    }
    if (jj_str_eqc(name, "startswith") || jj_str_eqc(name, "endswith"))
        return starts_ends(c, s, a, jj_str_eqc(name, "endswith"), out);
    if (jj_str_eqc(name, "replace")) {
        bool h2;
        if (jj_arg_str(c, a, 0, NULL, &s1, &have) < 0 || jj_arg_str(c, a, 1, NULL, &s2, &h2) < 0)
            return -1;
        if (!have || !h2)
            return jj_fail(c, SL_EINVAL, "replace needs two strings");
        const jj_val *cnt = jj_arg(a, 2, "count");
        return jj_text_replace(c, s, s1, s2, cnt && cnt->k == JJ_INT ? cnt->i : -1, out);
    }
    if (jj_str_eqc(name, "upper")) return jj_text_case(c, s, JJ_CASE_UPPER, out);
    if (jj_str_eqc(name, "lower")) return jj_text_case(c, s, JJ_CASE_LOWER, out);
    if (jj_str_eqc(name, "title")) return jj_text_case(c, s, JJ_CASE_TITLE, out);
    if (jj_str_eqc(name, "capitalize")) return jj_filter(c, name, jj_strv(s), a, out);
    if (jj_str_eqc(name, "join")) {
        const jj_val *x = jj_arg(a, 0, NULL);
        jj_list *lst;
        if (!x || jj_to_list(c, *x, &lst) < 0)
            return c->rc < 0 ? -1 : jj_fail(c, SL_EINVAL, "join needs an iterable");
        for (size_t i = 0; i < lst->n; i++)
            if (lst->v[i].k != JJ_STR)
                return jj_fail(c, SL_EINVAL, "join: sequence item %zu is not a string", i);
        return jj_text_join(c, lst, s, NULL, out);
    }
    if (jj_str_eqc(name, "find") || jj_str_eqc(name, "count")) {
        if (jj_arg_str(c, a, 0, NULL, &s1, &have) < 0 || !have)
            return c->rc < 0 ? -1 : jj_fail(c, SL_EINVAL, "find/count need a string");
        if (jj_str_eqc(name, "find")) {
            const char *hit = s1.n ? memmem(s.p, s.n, s1.p, s1.n) : s.p;
            *out = jj_int(hit ? (int64_t)jj_utf8_len(s.p, (size_t)(hit - s.p)) : -1);
        } else {
            int64_t n = 0;
            for (size_t i = 0; s1.n && i + s1.n <= s.n;) {
                const char *hit = memmem(s.p + i, s.n - i, s1.p, s1.n);
                if (!hit)
                    break;
                n++;
                i = (size_t)(hit - s.p) + s1.n;
            }
            *out = jj_int(s1.n ? n : (int64_t)jj_utf8_len(s.p, s.n) + 1);
        }
        return 0;
    }
    *found = false;
    return 0;
}

int jj_method(jj_ctx *c, jj_val obj, jj_str name, const jj_args *a, jj_val *out, bool *found)
{
    *found = false;
    if (obj.k == JJ_STR)
        return str_method(c, obj.s, name, a, out, found);
    if (obj.k == JJ_DICT) {
        *found = true;
        if (jj_str_eqc(name, "items"))
            return jj_filter(c, name, obj, a, out);
        if (jj_str_eqc(name, "keys") || jj_str_eqc(name, "values")) {
            jj_list *l = jj_list_new(c, obj.d->n);
            if (!l)
                return -1;
            for (size_t i = 0; i < obj.d->n; i++)
                l->v[l->n++] = jj_str_eqc(name, "keys") ? obj.d->keys[i] : obj.d->vals[i];
            *out = jj_list_val(l);
            return 0;
        }
        if (jj_str_eqc(name, "get")) {
            const jj_val *k = jj_arg(a, 0, NULL), *d = jj_arg(a, 1, NULL);
            if (!k)
                return jj_fail(c, SL_EINVAL, "get needs a key");
            jj_val *v = jj_dict_get(obj.d, *k);
            *out = v ? *v : d ? *d : jj_none();
            return 0;
        }
        if (jj_str_eqc(name, "update") || jj_str_eqc(name, "pop") || jj_str_eqc(name, "setdefault") ||
            jj_str_eqc(name, "clear") || jj_str_eqc(name, "popitem"))
            return jj_fail(c, SL_EINVAL, "access to '%.*s' of a dict is unsafe (immutable sandbox)",
                           ENAME(name));
        *found = false;
        return 0;
    }
    if (obj.k == JJ_LIST) {
        if (jj_str_eqc(name, "append") || jj_str_eqc(name, "pop") || jj_str_eqc(name, "extend") ||
            jj_str_eqc(name, "insert") || jj_str_eqc(name, "remove") || jj_str_eqc(name, "sort") ||
            jj_str_eqc(name, "reverse") || jj_str_eqc(name, "clear"))
            return jj_fail(c, SL_EINVAL, "access to '%.*s' of a list is unsafe (immutable sandbox)",
                           ENAME(name));
        if (jj_str_eqc(name, "index") || jj_str_eqc(name, "count")) {
            const jj_val *x = jj_arg(a, 0, NULL);
            if (!x)
                return jj_fail(c, SL_EINVAL, "%.*s needs an argument", ENAME(name));
            int64_t cnt = 0, at = -1;
            for (size_t i = 0; i < obj.l->n; i++)
                if (jj_equal(obj.l->v[i], *x)) {
                    cnt++;
                    if (at < 0)
                        at = (int64_t)i;
                }
            if (jj_str_eqc(name, "index") && at < 0)
                return jj_fail(c, SL_EINVAL, "value is not in list");
            *out = jj_int(jj_str_eqc(name, "index") ? at : cnt);
            *found = true;
        }
        return 0;
    }
    return 0;
}

enum { FN_RANGE, FN_DICT, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_COUNT };

static const char *const fn_names[FN_COUNT] = {"range", "dict", "namespace", "raise_exception",
                                               "strftime_now"};

int jj_func_lookup(jj_str name)
{
    for (int i = 0; i < FN_COUNT; i++)
        if (jj_str_eqc(name, fn_names[i]))
            return i;
    return -1;
}

int jj_func_call(jj_ctx *c, int fn, const jj_args *a, jj_val *out)
{
    switch (fn) {
    case FN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->n_pos < 1 || a->n_pos > 3)
            return jj_fail(c, SL_EINVAL, "range takes 1 to 3 arguments");
        for (size_t i = 0; i < a->n_pos; i++) {
            if (a->pos[i].k != JJ_INT && a->pos[i].k != JJ_BOOL)
                return jj_fail(c, SL_EINVAL, "range needs integers");
            v[a->n_pos == 1 ? 1 : i] = a->pos[i].k == JJ_INT ? a->pos[i].i : a->pos[i].b;
        }
        if (v[2] == 0)
            return jj_fail(c, SL_EINVAL, "range step must not be zero");
        jj_list *l = jj_list_new(c, 0);
        if (!l)
            return -1;
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) {
            if (l->n >= 100000) /* jinja2's sandbox MAX_RANGE */
                return jj_fail(c, SL_ERANGE, "range too big (more than 100000 items)");
            if (jj_list_push(c, l, jj_int(x)) < 0)
                return -1;
            if ((v[2] > 0 && x > INT64_MAX - v[2]) || (v[2] < 0 && x < INT64_MIN - v[2]))
                break;
        }
        *out = jj_list_val(l);
        return 0;
    }
    case FN_DICT:
    case FN_NAMESPACE: {
        jj_dict *d = jj_dict_new(c, a->n_kw);
        if (!d)
            return -1;
        for (size_t i = 0; i < a->n_pos; i++) { /* dict(mapping) / namespace(mapping) */
            if (a->pos[i].k != JJ_DICT)
                return jj_fail(c, SL_EINVAL, "%s() positional argument must be a mapping",
                               fn_names[fn]);
            for (size_t k = 0; k < a->pos[i].d->n; k++)
                if (jj_dict_set(c, d, a->pos[i].d->keys[k], a->pos[i].d->vals[k]) < 0)
                    return -1;
        }
        for (size_t i = 0; i < a->n_kw; i++)
            if (jj_dict_set(c, d, jj_strv(a->kw_names[i]), a->kw[i]) < 0)
                return -1;
        *out = (jj_val){.k = fn == FN_DICT ? JJ_DICT : JJ_NS, .d = d};
        return 0;
    }
    case FN_RAISE: {
        jj_str msg = jj_lit("raise_exception called");
        if (a->n_pos >= 1 && jj_stringify(c, a->pos[0], &msg) < 0)
            return -1;
        int line = c->line;
        c->line = 0; /* the message is the template author's: pass it as is */
        jj_fail(c, SL_EINVAL, "%.*s", (int)(msg.n > SL_ERR_LEN ? SL_ERR_LEN : msg.n), msg.p);
        c->line = line;
        return -1;
    }
    case FN_STRFTIME: {
        if (a->n_pos < 1 || a->pos[0].k != JJ_STR)
            return jj_fail(c, SL_EINVAL, "strftime_now needs a format string");
        char fmt[128], buf[256];
        jj_str f = a->pos[0].s;
        if (f.n >= sizeof(fmt))
            return jj_fail(c, SL_EINVAL, "strftime_now format too long");
        memcpy(fmt, f.p, f.n);
        fmt[f.n] = 0;
        time_t t = (time_t)c->now;
        struct tm tm;
        if (!localtime_r(&t, &tm))
            return jj_fail(c, SL_EINVAL, "strftime_now: bad time");
        size_t n = strftime(buf, sizeof(buf), fmt, &tm);
        jj_str s;
        /* the format's literal text passes through: a user-supplied format
         * makes the whole result untrusted */
        if (jj_str_make(c, buf, n, jj_str_untrusted(f), &s) < 0)
            return -1;
        *out = jj_strv(s);
        return 0;
    }
    default:
        return jj_fail(c, SL_EINVAL, "bad function");
    }
}
