/* model/grammar/json_schema_num.c: integer and number bounds -> GBNF, for
 * the schema compiler. An integer range becomes exact digit rules: split by
 * digit count, then per leading digit, the way one writes a range as a
 * regex (e.g. -12..345 is "-" (1-9 | 1[0-2]) | 0-9 | 1-9 d | 1-2 dd | 3 (0-3 d
 * | 4 0-5)); no leading zero, no "-0". A bounded number is counted in
 * units of 1e-5: its bounds must have at most 5 decimals and lie within
 * +-1e9, and it is written without exponent as the partial unit at each end
 * (an integer part with the fractions in range) plus the whole units
 * between (any fraction). Integer part plus fraction is then at most 15
 * significant digits, so a value never rounds onto an exclusive bound when
 * parsed as a double. */
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

/* Bounded numbers are counted in units of 1e-5 (JS_FRAC_DIGITS fraction
 * digits): a bound with more decimals is refused, and every value written
 * has at most that many, so the unit count of a written value is exact. */
#define JS_FRAC_DIGITS 5
#define JS_UNIT 100000LL

/* `"." digits` for the fractions (1..5 digits, trailing zeros allowed)
 * whose value in units lies in [flo, fhi], 0 <= flo <= fhi < JS_UNIT.
 * Returns false when there is none. */
static bool fractions(sl_gbnf_buf *b, long long flo, long long fhi)
{
    sl_gbnf_buf t = {0};
    bool any = false;
    long long scale = JS_UNIT;
    for (int f = 1; f <= JS_FRAC_DIGITS; f++) {
        scale /= 10;   /* units per step of the last of f digits */
        long long lo = (flo + scale - 1) / scale, hi = fhi / scale;
        if (lo > hi)
            continue;
        char ls[24], hs[24];
        snprintf(ls, sizeof ls, "%0*lld", f, lo);
        snprintf(hs, sizeof hs, "%0*lld", f, hi);
        if (any)
            sl_gbnf_puts(&t, " | ");
        digits_between(&t, ls, hs, (size_t)f);
        any = true;
    }
    if (any)
        sl_gbnf_printf(b, "\".\" (%s)", t.p);
    b->oom |= t.oom;
    sl_gbnf_buf_fini(&t);
    return any;
}

/* One integer part `ip` with the fractions [flo, fhi] (units); no fraction
 * at all when flo is 0. */
static void unit_part(sl_gbnf_buf *b, long long ip, long long flo, long long fhi)
{
    sl_gbnf_printf(b, "\"%lld\" ", ip);
    if (flo == 0)
        sl_gbnf_puts(b, "(");
    if (!fractions(b, flo, fhi))
        sl_gbnf_puts(b, "\"\"");
    if (flo == 0)
        sl_gbnf_puts(b, ")?");
}

/* Unsigned decimals (no exponent) whose value in units lies in [nl, nh]
 * (nh_inf: no upper end), 0 <= nl. Writes one group. */
static void fixed_range(sl_gbnf_buf *b, long long nl, long long nh, bool nh_inf)
{
    long long first_whole = (nl + JS_UNIT - 1) / JS_UNIT, last_whole = nh_inf ? 0 : nh / JS_UNIT;
    bool any = false;
    sl_gbnf_puts(b, "(");
    if (nl % JS_UNIT != 0) {   /* the unit nl falls inside, from nl on */
        long long ip = nl / JS_UNIT;
        long long top = !nh_inf && nh < (ip + 1) * JS_UNIT ? nh - ip * JS_UNIT : JS_UNIT - 1;
        unit_part(b, ip, nl - ip * JS_UNIT, top);
        any = true;
    }
    if (nh_inf || first_whole <= last_whole - 1) {   /* whole units: any fraction */
        if (any)
            sl_gbnf_puts(b, " | ");
        naturals(b, first_whole, nh_inf ? -1 : last_whole - 1);
        sl_gbnf_puts(b, " (\".\" [0-9]{1,5})?");
        any = true;
    }
    if (!nh_inf && last_whole >= first_whole) {   /* the unit nh falls in, up to nh */
        if (any)
            sl_gbnf_puts(b, " | ");
        unit_part(b, last_whole, 0, nh - last_whole * JS_UNIT);
    }
    sl_gbnf_puts(b, ")");
}

/* A bound in units, or false when it has more than 5 decimals or is too large. */
static bool to_units(double v, long long *u)
{
    if (fabs(v) > JS_NUM_BOUND)
        return false;
    double x = v * (double)JS_UNIT, r = nearbyint(x);
    if (fabs(x - r) > 1e-6 * (fabs(x) > 1 ? fabs(x) : 1))
        return false;
    *u = (long long)r;
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
    long long nl = 0, nh = 0;
    const char *kw = NULL;
    if (r.has_lo && !to_units(r.lo, &nl))
        kw = r.lo_excl && json_is_number(json_object_get(s, "exclusiveMinimum")) ? "exclusiveMinimum" : "minimum";
    else if (r.has_hi && !to_units(r.hi, &nh))
        kw = r.hi_excl && json_is_number(json_object_get(s, "exclusiveMaximum")) ? "exclusiveMaximum" : "maximum";
    if (kw)
        return sl_js_bad_value(c, kw, "a bound of a number must have at most 5 decimals and lie within +-1e9");
    nl += r.has_lo && r.lo_excl;
    nh -= r.has_hi && r.hi_excl;
    if (r.has_lo && r.has_hi && nl > nh)
        return sl_js_fail(c, "invalid keyword 'minimum' at %s: no number lies within the bounds", sl_js_path_text(c));
    sl_gbnf_puts(b, "(");
    bool first = true;
    if (!r.has_hi || nh >= 0) {
        fixed_range(b, r.has_lo && nl > 0 ? nl : 0, nh, !r.has_hi);
        first = false;
    }
    if (!r.has_lo || nl < 0) {   /* "-" and the magnitude, from max(-nh, 0) to -nl */
        if (!first)
            sl_gbnf_puts(b, " | ");
        sl_gbnf_puts(b, "\"-\" ");
        fixed_range(b, r.has_hi && nh < 0 ? -nh : 0, -nl, !r.has_lo);
    }
    sl_gbnf_puts(b, ")");
    return SL_OK;
}
