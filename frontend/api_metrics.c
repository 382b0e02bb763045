/* frontend/api_metrics.c: Prometheus text exposition builder. Runs in the
 * front end answering a scrape. Trade-off: text is appended with snprintf into
 * one growing buffer; a scrape is a few kB and happens every few seconds. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/alloc.h"
#include "frontend/api_metrics.h"

void sl_api_metrics_init(sl_api_metrics *m)
{
    memset(m, 0, sizeof *m);
}

void sl_api_metrics_fini(sl_api_metrics *m)
{
    free(m->_buf);
    memset(m, 0, sizeof *m);
}

void sl_api_metrics_allow_colons(sl_api_metrics *m, bool allow)
{
    m->_colons = allow;
}

const char *sl_api_metrics_text(const sl_api_metrics *m, size_t *len)
{
    if (m->_failed) { if (len) *len = 0; return NULL; }
    if (len) *len = m->_len;
    return m->_buf ? m->_buf : "";
}

static bool reserve(sl_api_metrics *m, size_t more)
{
    if (m->_failed) return false;
    if (m->_len + more + 1 <= m->_cap) return true;
    size_t cap = m->_cap ? m->_cap : 1024;
    while (cap < m->_len + more + 1) cap *= 2;
    char *b = sl_realloc(m->_buf, cap);
    if (!b) { m->_failed = true; return false; }
    m->_buf = b;
    m->_cap = cap;
    return true;
}

static void put(sl_api_metrics *m, const char *s, size_t n)
{
    if (!reserve(m, n)) return;
    memcpy(m->_buf + m->_len, s, n);
    m->_len += n;
    m->_buf[m->_len] = '\0';
}

static void puts_(sl_api_metrics *m, const char *s)
{
    put(m, s, strlen(s));
}

/* Escapes \ and newline (HELP) and also " (label values). */
static void put_escaped(sl_api_metrics *m, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\') put(m, "\\\\", 2);
        else if (*s == '\n') put(m, "\\n", 2);
        else if (quote && *s == '"') put(m, "\\\"", 2);
        else put(m, s, 1);
    }
}

/* Shortest text that reads back as the same double; +Inf/-Inf/NaN as the
 * format spells them. */
static void put_value(sl_api_metrics *m, double v)
{
    char b[40];
    if (isnan(v)) { puts_(m, "NaN"); return; }
    if (isinf(v)) { puts_(m, v > 0 ? "+Inf" : "-Inf"); return; }
    for (int p = 1; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, v);
        if (strtod(b, NULL) == v) break;
    }
    puts_(m, b);
}

bool sl_api_metrics_name_valid(const char *name)
{
    if (!name || !*name || strlen(name) >= sizeof ((sl_api_metrics *)0)->_family - 8) return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                  (p != name && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

static bool label_name_valid(const char *name)
{
    if (!name || !*name || (name[0] == '_' && name[1] == '_')) return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (p != name && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* True when `name`'s family was written before, not as the current one. */
static bool reopened(const sl_api_metrics *m, const char *name)
{
    if (!m->_buf || strcmp(m->_family, name) == 0) return false;
    size_t n = strlen(name);
    for (const char *p = m->_buf; (p = strstr(p, "# TYPE ")) != NULL; p += 7) {
        if ((p == m->_buf || p[-1] == '\n') && strncmp(p + 7, name, n) == 0 && p[7 + n] == ' ')
            return true;
    }
    return false;
}

static sl_status check(const sl_api_metrics *m, const char *name, const char *help, const char *type,
                       const sl_api_metric_label *labels, size_t n)
{
    if (!sl_api_metrics_name_valid(name)) return SL_EINVAL;
    if (!m->_colons && strchr(name, ':')) return SL_EINVAL;   /* reserved for recording rules */
    if (!help || !*help) return SL_EINVAL;
    for (const char *p = name; *p; p++)
        if (*p >= 'A' && *p <= 'Z') return SL_EINVAL;
    bool counter = strcmp(type, "counter") == 0;
    if (counter != ends_with(name, "_total")) return SL_EINVAL;
    if (!counter && (ends_with(name, "_count") || ends_with(name, "_sum") || ends_with(name, "_bucket")))
        return SL_EINVAL;
    if (reopened(m, name)) return SL_EINVAL;
    bool histo = strcmp(type, "histogram") == 0;
    for (size_t i = 0; i < n; i++) {
        if (!label_name_valid(labels[i].name) || !labels[i].value) return SL_EINVAL;
        if (histo && strcmp(labels[i].name, "le") == 0) return SL_EINVAL;
    }
    return SL_OK;
}

static void family(sl_api_metrics *m, const char *name, const char *help, const char *type)
{
    if (strcmp(m->_family, name) == 0) return;
    snprintf(m->_family, sizeof m->_family, "%s", name);
    puts_(m, "# HELP ");
    puts_(m, name);
    puts_(m, " ");
    put_escaped(m, help ? help : "", false);
    puts_(m, "\n# TYPE ");
    puts_(m, name);
    puts_(m, " ");
    puts_(m, type);
    puts_(m, "\n");
}

/* name[suffix]{labels[,le="x"]} value */
static void sample(sl_api_metrics *m, const char *name, const char *suffix,
                   const sl_api_metric_label *labels, size_t n, const char *le, double v)
{
    puts_(m, name);
    puts_(m, suffix);
    if (n || le) {
        puts_(m, "{");
        for (size_t i = 0; i < n; i++) {
            if (i) puts_(m, ",");
            puts_(m, labels[i].name);
            puts_(m, "=\"");
            put_escaped(m, labels[i].value, true);
            puts_(m, "\"");
        }
        if (le) {
            if (n) puts_(m, ",");
            puts_(m, "le=\"");
            puts_(m, le);
            puts_(m, "\"");
        }
        puts_(m, "}");
    }
    puts_(m, " ");
    put_value(m, v);
    puts_(m, "\n");
}

static sl_status simple(sl_api_metrics *m, const char *type, const char *name, const char *help,
                        const sl_api_metric_label *labels, size_t n, double v)
{
    if (check(m, name, help, type, labels, n) < 0) return SL_EINVAL;
    family(m, name, help, type);
    sample(m, name, "", labels, n, NULL, v);
    return m->_failed ? SL_ENOMEM : SL_OK;
}

sl_status sl_api_metrics_counter(sl_api_metrics *m, const char *name, const char *help,
                                 const sl_api_metric_label *labels, size_t n_labels, double value)
{
    return simple(m, "counter", name, help, labels, n_labels, value);
}

sl_status sl_api_metrics_gauge(sl_api_metrics *m, const char *name, const char *help,
                               const sl_api_metric_label *labels, size_t n_labels, double value)
{
    return simple(m, "gauge", name, help, labels, n_labels, value);
}

sl_status sl_api_metrics_histogram(sl_api_metrics *m, const char *name, const char *help,
                                   const sl_api_metric_label *labels, size_t n_labels,
                                   const double *bounds, size_t n_bounds,
                                   const uint64_t *counts, double sum)
{
    if (check(m, name, help, "histogram", labels, n_labels) < 0) return SL_EINVAL;
    for (size_t i = 0; i < n_bounds; i++)
        if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1])) return SL_EINVAL;
    family(m, name, help, "histogram");
    uint64_t cum = 0;
    char le[40];
    for (size_t i = 0; i <= n_bounds; i++) {
        cum += counts[i];
        if (i < n_bounds) {
            /* le uses the same shortest round-trip spelling as values. */
            for (int p = 1; p <= 17; p++) {
                snprintf(le, sizeof le, "%.*g", p, bounds[i]);
                if (strtod(le, NULL) == bounds[i]) break;
            }
        } else {
            snprintf(le, sizeof le, "+Inf");
        }
        sample(m, name, "_bucket", labels, n_labels, le, (double)cum);
    }
    sample(m, name, "_sum", labels, n_labels, NULL, sum);
    sample(m, name, "_count", labels, n_labels, NULL, (double)cum);
    return m->_failed ? SL_ENOMEM : SL_OK;
}
