/* tests/unit/frontend/api_metrics_test.c: frontend/api_metrics.c. The exact
 * text of a small exposition, plus a line-by-line check of a larger one
 * against the text format's grammar (what `promtool check metrics` parses). */
#include <criterion/criterion.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/api_metrics.h"

Test(api_metrics, exact_text_of_counter_gauge_histogram)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    sl_api_metric_label model = {"model_name", "tiny"};
    cr_assert_eq(sl_api_metrics_counter(&m, "sluice_request_success_total", "Finished requests.",
                                        &model, 1, 42), SL_OK);
    cr_assert_eq(sl_api_metrics_gauge(&m, "sluice_num_requests_running", "Requests in the batch.",
                                      NULL, 0, 3), SL_OK);
    double bounds[] = {0.005, 0.1, 1};
    uint64_t counts[] = {1, 2, 0, 4};   /* per bucket; last = above 1 */
    cr_assert_eq(sl_api_metrics_histogram(&m, "sluice_time_to_first_token_seconds", "TTFT.",
                                          &model, 1, bounds, 3, counts, 12.5), SL_OK);
    size_t len;
    const char *t = sl_api_metrics_text(&m, &len);
    const char *want =
        "# HELP sluice_request_success_total Finished requests.\n"
        "# TYPE sluice_request_success_total counter\n"
        "sluice_request_success_total{model_name=\"tiny\"} 42\n"
        "# HELP sluice_num_requests_running Requests in the batch.\n"
        "# TYPE sluice_num_requests_running gauge\n"
        "sluice_num_requests_running 3\n"
        "# HELP sluice_time_to_first_token_seconds TTFT.\n"
        "# TYPE sluice_time_to_first_token_seconds histogram\n"
        "sluice_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.005\"} 1\n"
        "sluice_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.1\"} 3\n"
        "sluice_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"1\"} 3\n"
        "sluice_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 7\n"
        "sluice_time_to_first_token_seconds_sum{model_name=\"tiny\"} 12.5\n"
        "sluice_time_to_first_token_seconds_count{model_name=\"tiny\"} 7\n";
    cr_expect_str_eq(t, want);
    cr_expect_eq(len, strlen(want));
    sl_api_metrics_fini(&m);
}

Test(api_metrics, family_header_once_for_consecutive_series)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    sl_api_metric_label a = {"finished_reason", "stop"}, b = {"finished_reason", "length"};
    sl_api_metrics_counter(&m, "sluice_request_finished_total", "By reason.", &a, 1, 1);
    sl_api_metrics_counter(&m, "sluice_request_finished_total", "By reason.", &b, 1, 2);
    const char *t = sl_api_metrics_text(&m, NULL);
    cr_expect_str_eq(t,
        "# HELP sluice_request_finished_total By reason.\n"
        "# TYPE sluice_request_finished_total counter\n"
        "sluice_request_finished_total{finished_reason=\"stop\"} 1\n"
        "sluice_request_finished_total{finished_reason=\"length\"} 2\n");
    sl_api_metrics_fini(&m);
}

Test(api_metrics, escapes_and_special_values)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    sl_api_metric_label l = {"model_name", "a\"b\\c\nd"};
    sl_api_metrics_gauge(&m, "sluice_x", "line1\nline2 \\ end", &l, 1, INFINITY);
    sl_api_metrics_gauge(&m, "sluice_y", "y", NULL, 0, -INFINITY);
    sl_api_metrics_gauge(&m, "sluice_z", "z", NULL, 0, 0.1);
    sl_api_metrics_gauge(&m, "sluice_w", "w", NULL, 0, NAN);
    cr_expect_str_eq(sl_api_metrics_text(&m, NULL),
        "# HELP sluice_x line1\\nline2 \\\\ end\n"
        "# TYPE sluice_x gauge\n"
        "sluice_x{model_name=\"a\\\"b\\\\c\\nd\"} +Inf\n"
        "# HELP sluice_y y\n# TYPE sluice_y gauge\nsluice_y -Inf\n"
        "# HELP sluice_z z\n# TYPE sluice_z gauge\nsluice_z 0.1\n"
        "# HELP sluice_w w\n# TYPE sluice_w gauge\nsluice_w NaN\n");
    sl_api_metrics_fini(&m);
}

Test(api_metrics, bad_names_and_bounds_are_refused)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    cr_expect(sl_api_metrics_name_valid("sluice_a:b_1"));
    cr_expect(!sl_api_metrics_name_valid("1abc"));
    cr_expect(!sl_api_metrics_name_valid("a-b"));
    cr_expect(!sl_api_metrics_name_valid(""));
    cr_expect(!sl_api_metrics_name_valid("sluice.x"));
    cr_expect_eq(sl_api_metrics_gauge(&m, "bad name", "h", NULL, 0, 1), SL_EINVAL);
    sl_api_metric_label reserved = {"__name", "x"}, dash = {"a-b", "x"}, le = {"le", "1"};
    cr_expect_eq(sl_api_metrics_gauge(&m, "ok", "h", &reserved, 1, 1), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_gauge(&m, "ok", "h", &dash, 1, 1), SL_EINVAL);
    double b[] = {1, 1};
    uint64_t c[] = {0, 0, 0};
    cr_expect_eq(sl_api_metrics_histogram(&m, "h_seconds", "h", NULL, 0, b, 2, c, 0), SL_EINVAL);
    double ok[] = {1, 2};
    cr_expect_eq(sl_api_metrics_histogram(&m, "h_seconds", "h", &le, 1, ok, 2, c, 0), SL_EINVAL);
    /* promtool's lint rules */
    cr_expect_eq(sl_api_metrics_gauge(&m, "ok", "", NULL, 0, 1), SL_EINVAL);            /* no HELP */
    cr_expect_eq(sl_api_metrics_gauge(&m, "ok", NULL, NULL, 0, 1), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_counter(&m, "requests", "h", NULL, 0, 1), SL_EINVAL);  /* no _total */
    cr_expect_eq(sl_api_metrics_gauge(&m, "running_total", "h", NULL, 0, 1), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_gauge(&m, "queue_count", "h", NULL, 0, 1), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_histogram(&m, "lat_sum", "h", NULL, 0, ok, 2, c, 0), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_gauge(&m, "queueDepth", "h", NULL, 0, 1), SL_EINVAL);  /* camelCase */
    size_t len;
    cr_expect_str_eq(sl_api_metrics_text(&m, &len), "");   /* nothing written */
    sl_api_metrics_fini(&m);
}

Test(api_metrics, colons_only_when_allowed)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    sl_api_metric_label model = {"model_name", "tiny"};
    cr_expect_eq(sl_api_metrics_gauge(&m, "vllm:num_requests_running", "r", &model, 1, 1), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_counter(&m, "sluice:x_total", "x", NULL, 0, 1), SL_EINVAL);
    cr_expect_str_eq(sl_api_metrics_text(&m, NULL), "");   /* refused before anything was written */
    sl_api_metrics_allow_colons(&m, true);
    cr_expect_eq(sl_api_metrics_gauge(&m, "vllm:num_requests_running", "r", &model, 1, 1), SL_OK);
    double b[] = {1, 2};
    uint64_t c[] = {1, 0, 1};
    cr_expect_eq(sl_api_metrics_histogram(&m, "vllm:request_prompt_tokens", "p", &model, 1, b, 2, c, 4), SL_OK);
    /* the other rules still hold with colons on */
    cr_expect_eq(sl_api_metrics_counter(&m, "vllm:prompt_tokens", "p", &model, 1, 1), SL_EINVAL);
    cr_expect_eq(sl_api_metrics_gauge(&m, "vllm:Running", "r", &model, 1, 1), SL_EINVAL);
    sl_api_metrics_allow_colons(&m, false);
    cr_expect_eq(sl_api_metrics_gauge(&m, "vllm:num_requests_waiting", "w", &model, 1, 0), SL_EINVAL);
    cr_expect_str_eq(sl_api_metrics_text(&m, NULL),
        "# HELP vllm:num_requests_running r\n"
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running{model_name=\"tiny\"} 1\n"
        "# HELP vllm:request_prompt_tokens p\n"
        "# TYPE vllm:request_prompt_tokens histogram\n"
        "vllm:request_prompt_tokens_bucket{model_name=\"tiny\",le=\"1\"} 1\n"
        "vllm:request_prompt_tokens_bucket{model_name=\"tiny\",le=\"2\"} 1\n"
        "vllm:request_prompt_tokens_bucket{model_name=\"tiny\",le=\"+Inf\"} 2\n"
        "vllm:request_prompt_tokens_sum{model_name=\"tiny\"} 4\n"
        "vllm:request_prompt_tokens_count{model_name=\"tiny\"} 2\n");
    sl_api_metrics_fini(&m);
}

Test(api_metrics, a_family_cannot_be_reopened)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    cr_expect_eq(sl_api_metrics_gauge(&m, "sluice_a", "a", NULL, 0, 1), SL_OK);
    cr_expect_eq(sl_api_metrics_gauge(&m, "sluice_a", "a", NULL, 0, 2), SL_OK);   /* consecutive: fine */
    cr_expect_eq(sl_api_metrics_gauge(&m, "sluice_ab", "b", NULL, 0, 1), SL_OK);  /* a prefix is not a match */
    cr_expect_eq(sl_api_metrics_gauge(&m, "sluice_a", "a", NULL, 0, 3), SL_EINVAL);
    sl_api_metrics_fini(&m);
}

/* A checker for the text format: comment lines are HELP/TYPE of the family
 * that follows; samples are name{labels} value; histogram buckets are
 * cumulative and end with +Inf equal to _count. */
Test(api_metrics, larger_exposition_passes_a_format_check)
{
    sl_api_metrics m;
    sl_api_metrics_init(&m);
    sl_api_metric_label lab[] = {{"model_name", "qwen \"3\""}, {"role", "frontend"}};
    static const char *const hist[] = {"sluice_time_to_first_token_seconds",
                                       "sluice_time_per_output_token_seconds",
                                       "sluice_request_queue_time_seconds",
                                       "sluice_e2e_request_latency_seconds"};
    double bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
    uint64_t counts[20];
    for (int i = 0; i < 20; i++) counts[i] = (uint64_t)(i * 7 % 5);
    sl_api_metrics_counter(&m, "sluice_prompt_tokens_total", "Prefill tokens.", lab, 2, 123456789);
    sl_api_metrics_counter(&m, "sluice_generation_tokens_total", "Generated tokens.", lab, 2, 987654321);
    sl_api_metrics_gauge(&m, "sluice_num_requests_waiting", "Queued.", lab, 2, 0);
    sl_api_metrics_gauge(&m, "sluice_kv_cache_usage_perc", "KV usage 0..1.", lab, 2, 0.375);
    for (int h = 0; h < 4; h++)
        sl_api_metrics_histogram(&m, hist[h], "Seconds.", lab, 2, bounds, 19, counts, 3.25 * h);
    size_t len;
    const char *t = sl_api_metrics_text(&m, &len);
    cr_assert_not_null(t);

    regex_t help, type, sample;
    cr_assert_eq(regcomp(&help, "^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$", REG_EXTENDED), 0);
    cr_assert_eq(regcomp(&type, "^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$",
                         REG_EXTENDED), 0);
    cr_assert_eq(regcomp(&sample,
                         "^([a-zA-Z_:][a-zA-Z0-9_:]*)"
                         "(\\{([a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\[\\\\n\"])*\")"
                         "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\[\\\\n\"])*\")*\\})? "
                         "([-+]?[0-9.eE+-]+|[+-]Inf|NaN)$", REG_EXTENDED), 0);
    char *copy = strdup(t);
    char family[128] = "", ftype[16] = "";
    double last_bucket = -1;
    int n_lines = 0, n_types = 0;
    cr_assert_eq(copy[len - 1], '\n');
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n"), n_lines++) {
        regmatch_t g[8];
        if (line[0] == '#') {
            if (regexec(&help, line, 2, g, 0) == 0) {
                snprintf(family, sizeof family, "%.*s", (int)(g[1].rm_eo - g[1].rm_so), line + g[1].rm_so);
                continue;
            }
            cr_assert_eq(regexec(&type, line, 3, g, 0), 0, "bad comment: %s", line);
            cr_assert(strncmp(line + 7, family, strlen(family)) == 0, "TYPE for another family: %s", line);
            snprintf(ftype, sizeof ftype, "%.*s", (int)(g[2].rm_eo - g[2].rm_so), line + g[2].rm_so);
            n_types++;
            last_bucket = -1;
            continue;
        }
        cr_assert_eq(regexec(&sample, line, 8, g, 0), 0, "bad sample: %s", line);
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)(g[1].rm_eo - g[1].rm_so), line);
        cr_assert(strncmp(name, family, strlen(family)) == 0, "sample %s outside family %s", name, family);
        if (strcmp(ftype, "histogram") == 0) {
            double v = strtod(strrchr(line, ' ') + 1, NULL);
            const char *suffix = name + strlen(family);
            if (strcmp(suffix, "_bucket") == 0) {
                cr_assert_not_null(strstr(line, "le=\""));
                cr_assert_geq(v, last_bucket, "buckets not cumulative: %s", line);
                last_bucket = v;
            } else if (strcmp(suffix, "_count") == 0) {
                cr_assert_eq(v, last_bucket, "_count differs from the +Inf bucket");
            } else {
                cr_assert_str_eq(suffix, "_sum");
            }
        } else {
            cr_assert_str_eq(name, family);
        }
    }
    cr_expect_eq(n_types, 8);
    cr_expect_eq(n_lines, 4 * 3 + 4 * (2 + 20 + 2));
    regfree(&help);
    regfree(&type);
    regfree(&sample);
    free(copy);
    sl_api_metrics_fini(&m);
}
