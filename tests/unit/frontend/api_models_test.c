/* tests/unit/frontend/api_models_test.c: frontend/api_models.c: the names
 * a request's `model` may give (the list, the fallback, absent and ""),
 * --accept-any-model, and the system_fingerprint's shape and stability. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "frontend/api_models.h"
#include "model/ggml_types.h"
#include "shared/config.h"

Test(api_models, the_list_names_the_model_and_the_first_is_primary)
{
    sl_api_models m;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_api_models_init(&m, "main,gpt-4o,main,gpt-4o-mini", "file.gguf", false, err), SL_OK);
    cr_expect_eq(m.n_names, 3u);   /* "main" twice is kept once */
    cr_expect_str_eq(m.names[0], "main");
    cr_expect_str_eq(m.names[1], "gpt-4o");
    cr_expect_str_eq(m.names[2], "gpt-4o-mini");
    cr_expect(sl_api_models_accepts(&m, "gpt-4o"));
    cr_expect(sl_api_models_accepts(&m, "main"));
    cr_expect_not(sl_api_models_accepts(&m, "gpt-4"));
    cr_expect_not(sl_api_models_accepts(&m, "MAIN"));        /* exact, as OpenAI compares */
    cr_expect_not(sl_api_models_accepts(&m, "file.gguf"));   /* the fallback only without a list */
    cr_expect(sl_api_models_accepts(&m, NULL));              /* absent or null: the served model */
    cr_expect(sl_api_models_accepts(&m, ""));
    cr_expect(sl_api_models_has(&m, "gpt-4o-mini!", 11));
}

Test(api_models, no_list_means_the_fallback_name)
{
    sl_api_models m;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_api_models_init(&m, "", "tiny.gguf", false, err), SL_OK);
    cr_expect_eq(m.n_names, 1u);
    cr_expect_str_eq(m.names[0], "tiny.gguf");
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cr_assert_eq(sl_api_models_init(&m, "", longname, false, err), SL_OK);
    cr_expect_eq(strlen(m.names[0]), SL_API_MODEL_NAME_LEN - 1u);
}

Test(api_models, accept_any_takes_every_name)
{
    sl_api_models m;
    char err[SL_ERR_LEN];
    cr_assert_eq(sl_api_models_init(&m, "main", "f", true, err), SL_OK);
    cr_expect(sl_api_models_accepts(&m, "anything at all"));
    cr_expect_not(sl_api_models_has(&m, "anything at all", 15));   /* but it is not one of the names */
}

Test(api_models, too_many_or_too_long_names_are_refused)
{
    sl_api_models m;
    char err[SL_ERR_LEN] = "";
    char list[SL_CONFIG_LIST_MAX] = "";
    for (int i = 0; i <= SL_API_MODEL_NAMES_MAX; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%sm%d", i ? "," : "", i);
    cr_expect_eq(sl_api_models_init(&m, list, "f", false, err), SL_EINVAL);
    cr_expect(strstr(err, "more than 16 names") != NULL, "%s", err);
    char big[200];
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_expect_eq(sl_api_models_init(&m, big, "f", false, err), SL_EINVAL);
    cr_expect(strstr(err, "longer than 127 bytes") != NULL, "%s", err);
}

/* A two-tensor GGUF whose first tensor holds `fill`; returns it opened. */
static sl_gguf *write_model(char *path, float fill)
{
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    char err[SL_ERR_LEN];
    sl_gguf_writer *w = sl_gguf_writer_create();
    cr_assert_eq(sl_gguf_writer_set_str(w, "general.architecture", "llama"), SL_OK);
    uint64_t ne[2] = {8, 4}, ne2[1] = {16};
    cr_assert_eq(sl_gguf_writer_add_tensor(w, "a", SL_GGML_TYPE_F32, 2, ne), 0);
    cr_assert_eq(sl_gguf_writer_add_tensor(w, "b", SL_GGML_TYPE_F32, 1, ne2), 1);
    float a[32], b[16];
    for (int i = 0; i < 32; i++)
        a[i] = fill + (float)i;
    for (int i = 0; i < 16; i++)
        b[i] = (float)-i;
    cr_assert_eq(sl_gguf_writer_begin(w, path, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_write_tensor(w, 0, a, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_write_tensor(w, 1, b, err), SL_OK, "%s", err);
    cr_assert_eq(sl_gguf_writer_finish(w, err), SL_OK, "%s", err);
    sl_gguf_writer_destroy(w);
    sl_gguf *g = NULL;
    cr_assert_eq(sl_gguf_open(path, &g, err), SL_OK, "%s", err);
    return g;
}

static bool fingerprint_shaped(const char *fp)
{
    if (strlen(fp) != 15 || strncmp(fp, "fp_", 3) != 0)
        return false;
    for (int i = 3; i < 15; i++)
        if (!strchr("0123456789abcdef", fp[i]))
            return false;
    return true;
}

Test(api_models, fingerprint_is_stable_per_build_and_weights)
{
    char p1[] = "/tmp/sl_fp_test_XXXXXX", p2[] = "/tmp/sl_fp_test_XXXXXX", p3[] = "/tmp/sl_fp_test_XXXXXX";
    sl_gguf *g1 = write_model(p1, 1.0f), *g2 = write_model(p2, 1.0f), *g3 = write_model(p3, 2.0f);
    char f1[SL_API_FINGERPRINT_LEN], f2[SL_API_FINGERPRINT_LEN], f3[SL_API_FINGERPRINT_LEN],
        f4[SL_API_FINGERPRINT_LEN], f5[SL_API_FINGERPRINT_LEN];
    sl_api_models_fingerprint(g1, "1.0.0", "abc123", f1);
    sl_api_models_fingerprint(g2, "1.0.0", "abc123", f2);   /* a copy of the same file */
    sl_api_models_fingerprint(g3, "1.0.0", "abc123", f3);   /* other weights */
    sl_api_models_fingerprint(g1, "1.0.1", "abc123", f4);   /* another build */
    sl_api_models_fingerprint(g1, "1.0.0", "abc124", f5);
    cr_expect(fingerprint_shaped(f1), "%s", f1);
    cr_expect_str_eq(f1, f2);
    cr_expect_str_neq(f1, f3);
    cr_expect_str_neq(f1, f4);
    cr_expect_str_neq(f1, f5);
    sl_gguf_close(g1);
    sl_gguf_close(g2);
    sl_gguf_close(g3);
    unlink(p1);
    unlink(p2);
    unlink(p3);
}
