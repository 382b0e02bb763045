/* model/grammar/json_schema.h: a JSON Schema -> GBNF text (model/grammar/grammar.h)
 * whose sentences are JSON documents that validate: all of them, or a subset
 * where the full set is costly (docs/JSON_SCHEMA.md lists where), never a
 * document that does not validate.
 * Where:     front ends, for response_format json_schema / json_object, the
 *            tools' parameter schemas (tool_choice required or named) and the
 *            extension fields; the worker only ever sees the GBNF text.
 * Subset:    OpenAI's structured-outputs subset and a little more: type (one
 *            or a list, "null" included: nullable types), properties, required,
 *            additionalProperties (false, true or a schema), enum, const, items,
 *            prefixItems, minItems/maxItems, anyOf (oneOf treated as anyOf),
 *            allOf of one schema, $defs/definitions with local $ref ("#/..."),
 *            string minLength/maxLength, pattern (a regex, model/grammar/regex.h),
 *            format date/time/date-time/uuid/email, integer and number minimum/
 *            maximum/exclusiveMinimum/exclusiveMaximum (a number's bounds with at
 *            most 5 decimals); annotations (title, description, default,
 *            examples, $schema, $id, $comment, deprecated, readOnly,
 *            writeOnly, discriminator) are ignored. Any other keyword is
 *            refused, never ignored.
 * Output:    properties in schema order, required ones always present; the
 *            whitespace between tokens is bounded (at most one newline plus a
 *            bounded indent, or one space), so a model cannot pad forever.
 * Errors:    SL_OK; SL_EINVAL with err naming the keyword and the JSON Pointer
 *            of the subschema ("unsupported keyword 'if' at /properties/a";
 *            the top one is "root"); SL_ENOMEM. *out is NULL on failure. */
#ifndef SL_JSON_SCHEMA_H
#define SL_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "shared/status.h"

/* Appends nothing, allocates *out (malloc'd, NUL-terminated, free()): GBNF
 * rules whose start rule is named `root_name` (letters, digits, '-'); every
 * helper rule is named `root_name`-<something>, so the text may be
 * concatenated with other rules under other names. A schema of `true` or {}
 * is any JSON value. */
sl_status sl_json_schema_to_gbnf(const json_t *schema, const char *root_name, char **out, char *err,
                                 size_t err_len);

/* The same for "any JSON object" (response_format json_object). */
sl_status sl_json_object_gbnf(const char *root_name, char **out);

#endif
