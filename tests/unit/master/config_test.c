/* tests/unit/master/config_test.c: master/config.c and config_groups.c:
 * every setting is in exactly one --help group (a new setting without one
 * fails here), --help prints the groups in order, and list settings
 * (--model-alias, --cors-origin) collect repeated flags. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/config.h"
#include "master/config_groups.h"

Test(config_groups, every_setting_is_in_exactly_one_group)
{
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_config_groups_check(sl_config_groups, sl_config_n_groups, err), SL_OK, "%s", err);
}

Test(config_groups, a_missing_or_doubled_or_unknown_flag_is_named)
{
    char err[SL_ERR_LEN];
    sl_config_group g[8];
    size_t n = sl_config_n_groups;
    cr_assert_leq(n + 1, sizeof g / sizeof g[0]);

    /* one group dropped: its first flag is in none */
    memcpy(g, sl_config_groups + 1, (n - 1) * sizeof g[0]);
    cr_expect_eq(sl_config_groups_check(g, n - 1, err), SL_EINVAL);
    cr_expect(strstr(err, "in 0 --help groups") != NULL, "%s", err);

    /* a group twice: its flags are in two */
    memcpy(g, sl_config_groups, n * sizeof g[0]);
    g[n] = sl_config_groups[0];
    cr_expect_eq(sl_config_groups_check(g, n + 1, err), SL_EINVAL);
    cr_expect(strstr(err, "in 2 --help groups") != NULL, "%s", err);

    /* a flag that is no setting */
    memcpy(g, sl_config_groups, n * sizeof g[0]);
    g[n] = (sl_config_group){"Extra", {"no-such-flag", NULL}};
    cr_expect_eq(sl_config_groups_check(g, n + 1, err), SL_EINVAL);
    cr_expect(strstr(err, "--no-such-flag, which is no setting") != NULL, "%s", err);
}

static char *usage_text(void)
{
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    sl_config_usage(f);
    long len = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)len + 1);
    cr_assert_eq(fread(s, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return s;
}

Test(config_groups, help_prints_each_group_in_order_and_each_flag_once)
{
    char *s = usage_text();
    const char *at = s;
    for (size_t g = 0; g < sl_config_n_groups; g++) {
        char head[64];
        snprintf(head, sizeof head, "\n%s:\n", sl_config_groups[g].title);
        const char *h = strstr(at, head);
        cr_assert_not_null(h, "group %s missing or out of order", head);
        at = h + strlen(head);
        /* the group's flags follow in its order */
        const char *prev = at;
        for (size_t k = 0; sl_config_groups[g].flags[k] != NULL; k++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s ", sl_config_groups[g].flags[k]);
            const char *p = strstr(prev, flag);
            if (p == NULL) {   /* a switch: no " V" after it */
                snprintf(flag, sizeof flag, "--%s\n", sl_config_groups[g].flags[k]);
                p = strstr(prev, flag);
            }
            cr_assert_not_null(p, "%s not after the previous flag of %s", flag, sl_config_groups[g].title);
            prev = p;
        }
    }
    cr_expect_null(strstr(s, "\nOther:\n"), "a setting is in no group");
    /* each flag appears as a row once */
    cr_expect_eq(strstr(strstr(s, "--model-alias V") + 1, "--model-alias V"), NULL);
    free(s);
}

static void parse_ok(int argc, char **argv, sl_config *cfg)
{
    char err[SL_ERR_LEN] = "";
    cr_assert_eq(sl_config_parse(argc, argv, cfg, err), SL_OK, "%s", err);
}

Test(config_list, repeated_flags_and_comma_lists_collect_names)
{
    static sl_config cfg;
    unsetenv("SLUICE_MODEL_ALIAS");
    unsetenv("SLUICE_CORS_ORIGIN");
    char *argv[] = {"serve", "--model-alias", "main", "--model-alias", " gpt-4o , gpt-4o-mini",
                    "--model-alias=x", "--cors-origin", "http://a.test:3000,https://b.test", NULL};
    parse_ok(8, argv, &cfg);
    cr_expect_str_eq(cfg.model_alias, "main,gpt-4o,gpt-4o-mini,x");
    cr_expect_str_eq(cfg.cors_origin, "http://a.test:3000,https://b.test");
    cr_expect_eq(cfg.source[SL_CFG_MODEL_ALIAS], SL_CONFIG_SOURCE_FLAG);

    size_t pos = 0, len = 0;
    const char *want[] = {"main", "gpt-4o", "gpt-4o-mini", "x"};
    for (int i = 0; i < 4; i++) {
        const char *item = sl_config_list_next(cfg.model_alias, &pos, &len);
        cr_assert_not_null(item);
        cr_expect_eq(len, strlen(want[i]));
        cr_expect_eq(strncmp(item, want[i], len), 0);
    }
    cr_expect_null(sl_config_list_next(cfg.model_alias, &pos, &len));
}

Test(config_list, a_flag_replaces_the_variable_and_the_variable_the_default)
{
    static sl_config cfg;
    setenv("SLUICE_MODEL_ALIAS", "from-env,other", 1);
    char *argv0[] = {"serve", NULL};
    parse_ok(1, argv0, &cfg);
    cr_expect_str_eq(cfg.model_alias, "from-env,other");
    char *argv[] = {"serve", "--model-alias", "a", "--model-alias", "b", NULL};
    parse_ok(5, argv, &cfg);
    cr_expect_str_eq(cfg.model_alias, "a,b");
    unsetenv("SLUICE_MODEL_ALIAS");
    cr_expect_eq(cfg.accept_any_model, 0u);
    char *argv2[] = {"serve", "--accept-any-model", NULL};
    parse_ok(2, argv2, &cfg);
    cr_expect_eq(cfg.accept_any_model, 1u);
    cr_expect_str_eq(cfg.cors_origin, "");
}

Test(config_list, empty_items_and_overlong_lists_are_refused)
{
    static sl_config cfg;
    char err[SL_ERR_LEN];
    unsetenv("SLUICE_MODEL_ALIAS");
    char *bad[][3] = {{"serve", "--model-alias", "a,,b"}, {"serve", "--model-alias", "a,"},
                      {"serve", "--cors-origin", " , "}};
    for (size_t i = 0; i < 3; i++) {
        cr_expect_eq(sl_config_parse(3, bad[i], &cfg, err), SL_EINVAL, "%s", bad[i][2]);
        cr_expect(strstr(err, "has an empty item") != NULL, "%s", err);
    }
    char big[400];
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char *argv[] = {"serve", "--model-alias", big, "--model-alias", big, NULL};
    cr_expect_eq(sl_config_parse(5, argv, &cfg, err), SL_EINVAL);
    cr_expect(strstr(err, "longer than") != NULL, "%s", err);
}
