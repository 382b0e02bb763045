/* tests/unit/frontend/json_expect.c: see json_expect.h. */
#include "tests/unit/frontend/json_expect.h"

#include <criterion/criterion.h>

json_t *json_expect_load(const char *s)
{
    cr_assert_not_null(s);
    json_error_t je;
    json_t *v = json_loads(s, 0, &je);
    cr_assert_not_null(v, "not JSON: %s (%s)", s, je.text);
    return v;
}

void json_expect_keys(json_t *o, const char *const *keys)
{
    size_t n = 0;
    for (; keys[n]; n++)
        cr_expect_not_null(json_object_get(o, keys[n]), "missing key %s", keys[n]);
    cr_expect_eq(json_object_size(o), n, "object has %zu keys, want %zu", json_object_size(o), n);
}
