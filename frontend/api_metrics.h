/* frontend/api_metrics.h: Prometheus text exposition (format 0.0.4) for
 * GET /metrics.
 * Where:     front ends; the numbers come from the shared segment, so any
 *            front end answers for the whole server.
 * Who:       the thread answering the scrape; one builder per scrape.
 * Format:    per family "# HELP name text", "# TYPE name counter|gauge|
 *            histogram", then samples `name{label="v",...} value`. Histograms
 *            write cumulative `name_bucket{le="..."}` lines ending with
 *            le="+Inf", then `name_sum` and `name_count` (= the +Inf bucket).
 *            Names match [a-zA-Z_:][a-zA-Z0-9_:]*; colons are reserved for
 *            recording rules, so sluice's own names are `sluice_*` (counters
 *            end in `_total`) and a name with a colon is refused unless the
 *            builder allows colons (sl_api_metrics_allow_colons: vLLM's names,
 *            `vllm:*`, for dashboards built on vLLM). Label values and HELP
 *            text are escaped.
 *            Series of one family must be written one after another: HELP and
 *            TYPE are written only when the family changes.
 * Lint:      what `promtool check metrics` would flag is refused up front:
 *            missing HELP text, a counter not ending in `_total`, a gauge or
 *            histogram ending in `_total`/`_count`/`_sum`/`_bucket`, upper
 *            case (not snake_case), a family reopened after another one, a
 *            colon unless allowed.
 *            Use base units in names (`_seconds`, `_bytes`).
 * Ownership: the builder owns its text until fini.
 * Errors:    SL_OK; SL_EINVAL (bad or lint-failing name, label or bounds;
 *            nothing written);
 *            SL_ENOMEM (the builder is marked failed; text() then is NULL). */
#ifndef SL_API_METRICS_H
#define SL_API_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/status.h"

typedef struct {
    const char *name;     /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" */
    const char *value;    /* any UTF-8; escaped on output */
} sl_api_metric_label;

typedef struct {
    char *_buf;
    size_t _len, _cap;
    bool _failed;
    bool _colons;         /* names may hold ':' (sl_api_metrics_allow_colons) */
    char _family[128];    /* last family written (HELP/TYPE once per family) */
} sl_api_metrics;

/* An empty builder (allocates on first write). fini frees the text; safe
 * on an initialised or zeroed builder. */
void sl_api_metrics_init(sl_api_metrics *m);
void sl_api_metrics_fini(sl_api_metrics *m);

/* From now on names may (allow) or may not hold ':'; off after init. */
void sl_api_metrics_allow_colons(sl_api_metrics *m, bool allow);

/* True when `name` is a valid metric name of the format (colons included;
 * whether a builder takes them is its own setting). */
bool sl_api_metrics_name_valid(const char *name);

/* A counter or gauge sample (labels may be NULL when n_labels is 0). */
sl_status sl_api_metrics_counter(sl_api_metrics *m, const char *name, const char *help,
                                 const sl_api_metric_label *labels, size_t n_labels, double value);
sl_status sl_api_metrics_gauge(sl_api_metrics *m, const char *name, const char *help,
                               const sl_api_metric_label *labels, size_t n_labels, double value);

/* A histogram from per-bucket (not cumulative) counts: counts[i] observations
 * fell in (bounds[i-1], bounds[i]] for i < n_bounds, counts[n_bounds] above
 * the last bound. bounds must be strictly increasing and finite. */
sl_status sl_api_metrics_histogram(sl_api_metrics *m, const char *name, const char *help,
                                   const sl_api_metric_label *labels, size_t n_labels,
                                   const double *bounds, size_t n_bounds,
                                   const uint64_t *counts, double sum);

/* The text so far (NUL-terminated, owned by m) and its length; NULL after an
 * allocation failure. */
const char *sl_api_metrics_text(const sl_api_metrics *m, size_t *len);

#endif
