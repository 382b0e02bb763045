/* tests/unit/frontend/json_expect.h: what the frontend tests that read back
 * the JSON the API layer writes share: parse it (or fail the test), and
 * check an object's set of keys. */
#ifndef SL_TEST_JSON_EXPECT_H
#define SL_TEST_JSON_EXPECT_H

#include <jansson.h>

/* s parsed by jansson; fails the test if s is NULL or not JSON. The caller
 * owns the result (json_decref). */
json_t *json_expect_load(const char *s);

/* Expects the keys of object o to be exactly keys (NULL-terminated), in any
 * order. */
void json_expect_keys(json_t *o, const char *const *keys);

#endif
