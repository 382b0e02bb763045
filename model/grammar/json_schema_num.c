/* model/grammar/json_schema_num.c: integer and number bounds -> GBNF, for
 * the schema compiler. An integer range becomes exact digit rules: split by
 * digit count, then per leading digit, the way one writes a range as a
 * regex (e.g. -12..345 is "-" (1-9 | 1[0-2]) | 0-9 | 1-9 d | 1-2 dd | 3 (0-3 d
 * | 4 0-5)); no leading zero, no "-0". A bounded number is an integer part
 * in range with a fraction: only whole-number bounds within +-1e9 are
 * supported, and fractions have at most 5 digits, so integer part plus
 * fraction is at most 15 significant digits and never rounds onto an
 * exclusive bound when parsed as a double. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/grammar/json_schema_internal.h"

/* Digits of the n-digit strings from x to y inclusive (x <= y, same length). */
static void digits_between(sl_gbnf_buf *b, const char *x, const char *y, size_t n)
{
    if (n == 1) {
        if (x[0] == y[0])
            sl_gbnf_printf(b, "\"%c\"", x[0]);
        else
            sl_gbnf_printf(b, "[%c-%c]", x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        sl_gbnf_printf(b, "\"%c\" ", x[0]);
        digits_between(b, x + 1, y + 1, n - 1);
        return;
    }
    bool low_zero = strspn(x + 1, "0") == n - 1, high_nine = strspn(y + 1, "9") == n - 1;
    char lo = x[0], hi = y[0];
    char nines[32], zeros[32];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    nines[n - 1] = zeros[n - 1] = 0;
    sl_gbnf_puts(b, "(");
    bool first = true;
    if (!low_zero) {
        sl_gbnf_printf(b, "\"%c\" ", x[0]);
        digits_between(b, x + 1, nines, n - 1);
        lo++;
        first = false;
    }
    if (!high_nine)
        hi--;
    if (lo <= hi) {
        if (!first)
            sl_gbnf_puts(b, " | ");
        if (lo == hi)
            sl_gbnf_printf(b, "\"%c\" [0-9]{%zu}", lo, n - 1);
        else
            sl_gbnf_printf(b, "[%c-%c] [0-9]{%zu}", lo, hi, n - 1);
        first = false;
    }
    if (!high_nine) {
        if (!first)
            sl_gbnf_puts(b, " | ");
        sl_gbnf_printf(b, "\"%c\" ", y[0]);
        digits_between(b, zeros, y + 1, n - 1);
    }
    sl_gbnf_puts(b, ")");
}

/* The decimal numerals (no sign, no leading zero) of a..b; b < 0 unbounded
 * (up to JS_INT_DIGITS digits). Writes one parenthesised group. */
static void naturals(sl_gbnf_buf *b, long long a, long long hi)
{
    char as[32], bs[32];
    int la = snprintf(as, sizeof as, "%lld", a);
    int lb = hi >= 0 ? snprintf(bs, sizeof bs, "%lld", hi) : JS_INT_DIGITS;
    sl_gbnf_puts(b, "(");
    bool first = true;
    for (int len = la; len <= lb; len++) {
        char lo_s[32], hi_s[32];
        if (len == la)
            snprintf(lo_s, sizeof lo_s, "%s", as);
        else {
            memset(lo_s, '0', (size_t)len);
            lo_s[0] = '1';
            lo_s[len] = 0;
        }
        if (hi >= 0 && len == lb)
            snprintf(hi_s, sizeof hi_s, "%s", bs);
        else {
            memset(hi_s, '9', (size_t)len);
            hi_s[len] = 0;
        }
        if (!first)
            sl_gbnf_puts(b, " | ");
        first = false;
        if (hi < 0 && len > la) {   /* every longer length at once */
            sl_gbnf_printf(b, "[1-9] [0-9]{%d,%d}", la, JS_INT_DIGITS - 1);
            break;
        }
        digits_between(b, lo_s, hi_s, (size_t)len);
    }
    sl_gbnf_puts(b, ")");
}

typedef struct {
    bool has_lo, has_hi, lo_excl, hi_excl;
    double lo, hi;
} js_bounds;

static bool read_bounds(js_ctx *c, const json_t *s, js_bounds *r)
{
    *r = (js_bounds){0};
    const char *kws[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    const json_t *v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = json_object_get(s, kws[i]);
        if (v[i] && !json_is_number(v[i]) && !(i >= 2 && json_is_boolean(v[i])))
            return sl_js_bad_value(c, kws[i], "must be a number"), false;
        if (v[i] && json_is_number(v[i]) && !isfinite(json_number_value(v[i])))
            return sl_js_bad_value(c, kws[i], "must be finite"), false;
    }
    if (v[0]) {
        r->has_lo = true;
        r->lo = json_number_value(v[0]);
        r->lo_excl = json_is_true(v[2]);   /* draft 4: exclusiveMinimum true */
    }
    if (v[1]) {
        r->has_hi = true;
        r->hi = json_number_value(v[1]);
        r->hi_excl = json_is_true(v[3]);
    }
    if (v[2] && json_is_number(v[2]) && (!r->has_lo || json_number_value(v[2]) >= r->lo)) {
        r->has_lo = true;
        r->lo = json_number_value(v[2]);
        r->lo_excl = true;
    }
    if (v[3] && json_is_number(v[3]) && (!r->has_hi || json_number_value(v[3]) <= r->hi)) {
        r->has_hi = true;
        r->hi = json_number_value(v[3]);
        r->hi_excl = true;
    }
    if ((v[2] && json_is_boolean(v[2]) && !v[0]) || (v[3] && json_is_boolean(v[3]) && !v[1]))
        return sl_js_bad_value(c, v[2] && json_is_boolean(v[2]) && !v[0] ? "exclusiveMinimum" : "exclusiveMaximum",
                         "a boolean needs minimum/maximum beside it"), false;
    return true;
}

sl_status sl_js_integer_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    js_bounds r;
    if (!read_bounds(c, s, &r))
        return c->rc;
    const double far = 1e16;
    long long lo = 0, hi = 0;
    bool has_lo = r.has_lo && r.lo > -far, has_hi = r.has_hi && r.hi < far;
    if (r.has_lo && r.lo >= far)
        return sl_js_bad_value(c, "minimum", "beyond 1e16 is not supported");
    if (r.has_hi && r.hi <= -far)
        return sl_js_bad_value(c, "maximum", "beyond -1e16 is not supported");
    if (has_lo)
        lo = r.lo_excl ? (long long)floor(r.lo) + 1 : (long long)ceil(r.lo);
    if (has_hi)
        hi = r.hi_excl ? (long long)ceil(r.hi) - 1 : (long long)floor(r.hi);
    if (!has_lo && !has_hi) {
        sl_js_ref_common(c, b, USE_INTEGER, "integer");
        return SL_OK;
    }
    if (has_lo && has_hi && lo > hi)
        return sl_js_fail(c, "invalid keyword 'minimum' at %s: no integer lies within the bounds", sl_js_path_text(c));
    sl_gbnf_puts(b, "(");
    bool first = true;
    if (!has_lo || lo < 0) {   /* negative part: "-" then the magnitude, never -0 */
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        sl_gbnf_puts(b, "\"-\" ");
        naturals(b, mlo, mhi);
        first = false;
    }
    if (!has_hi || hi >= 0) {
        if (!first)
            sl_gbnf_puts(b, " | ");
        naturals(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    sl_gbnf_puts(b, ")");
    return SL_OK;
}

#define FRAC_ANY "(\".\" [0-9]{1,5})?"
#define FRAC_NONZERO "\".\" [0-9]{0,4} [1-9]"
#define FRAC_ZERO "\".0\"?"

/* Unsigned decimals (no exponent) of values between whole numbers a and b
 * (b < 0: unbounded), each end inclusive or not. Returns false when empty. */
static bool decimals(sl_gbnf_buf *b, long long a, bool a_excl, long long hi, bool hi_excl)
{
    if (hi >= 0 && a == hi) {
        if (a_excl || hi_excl)
            return false;
        sl_gbnf_printf(b, "(\"%lld\" " FRAC_ZERO ")", a);
        return true;
    }
    sl_gbnf_printf(b, "(\"%lld\" %s", a, a_excl ? FRAC_NONZERO : FRAC_ANY);
    if (hi < 0 || a + 1 <= hi - 1) {
        sl_gbnf_puts(b, " | ");
        naturals(b, a + 1, hi < 0 ? -1 : hi - 1);
        sl_gbnf_puts(b, " " FRAC_ANY);
    }
    if (hi >= 0 && !hi_excl)
        sl_gbnf_printf(b, " | \"%lld\" " FRAC_ZERO, hi);
    sl_gbnf_puts(b, ")");
    return true;
}

sl_status sl_js_number_expr(js_ctx *c, const json_t *s, sl_gbnf_buf *b)
{
    js_bounds r;
    if (!read_bounds(c, s, &r))
        return c->rc;
    if (!r.has_lo && !r.has_hi) {
        sl_js_ref_common(c, b, USE_NUMBER, "number");
        return SL_OK;
    }
    const char *kw = NULL;
    if (r.has_lo && (r.lo != floor(r.lo) || fabs(r.lo) > JS_NUM_BOUND))
        kw = r.lo_excl && json_is_number(json_object_get(s, "exclusiveMinimum")) ? "exclusiveMinimum" : "minimum";
    else if (r.has_hi && (r.hi != floor(r.hi) || fabs(r.hi) > JS_NUM_BOUND))
        kw = r.hi_excl && json_is_number(json_object_get(s, "exclusiveMaximum")) ? "exclusiveMaximum" : "maximum";
    if (kw)
        return sl_js_bad_value(c, kw, "a bound of a number must be a whole number within +-1e9");
    long long lo = (long long)r.lo, hi = (long long)r.hi;
    if (r.has_lo && r.has_hi && (lo > hi || (lo == hi && (r.lo_excl || r.hi_excl))))
        return sl_js_fail(c, "invalid keyword 'minimum' at %s: no number lies within the bounds", sl_js_path_text(c));
    sl_gbnf_puts(b, "(");
    bool first = true;
    if (!r.has_hi || hi > 0 || (hi == 0 && !r.hi_excl)) {
        bool pos_lo = r.has_lo && lo >= 0;
        if (decimals(b, pos_lo ? lo : 0, pos_lo && r.lo_excl, r.has_hi ? hi : -1, r.hi_excl))
            first = false;
    }
    if (!r.has_lo || lo < 0) {
        /* -y with y from max(-hi, 0) to -lo */
        bool neg_hi = r.has_hi && hi < 0;
        sl_gbnf_buf t = {0};
        if (decimals(&t, neg_hi ? -hi : 0, neg_hi ? r.hi_excl : (r.has_hi && hi == 0 && r.hi_excl),
                     r.has_lo ? -lo : -1, r.lo_excl)) {
            if (!first)
                sl_gbnf_puts(b, " | ");
            sl_gbnf_puts(b, "\"-\" ");
            sl_gbnf_putn(b, t.p, t.len);
            first = false;
        }
        b->oom |= t.oom;
        sl_gbnf_buf_fini(&t);
    }
    sl_gbnf_puts(b, ")");
    return SL_OK;
}
