/* JSON Schema into GBNF text (grammar.h), which the GBNF parser then compiles like any grammar.
 *
 * The grammar generates a subset of the JSON texts the schema accepts, never a text it rejects: where the
 * schema allows more than the grammar produces (keys other than the listed ones unless additionalProperties is
 * true or a schema: then they follow the listed ones, never repeating one; key orders other than the listed
 * one; numbers of more digits) the grammar produces less; where a constraining keyword cannot be
 * honoured exactly (multipleOf, not, if/then/else, patternProperties, dependencies, ...) the compile fails
 * naming it.  An optional property whose schema matches nothing is left out.  Pure annotations (title, description, examples, default, $comment, ...) are ignored.
 *
 * Supported: type (and type lists), enum, const, properties / required / additionalProperties (false,
 * true or a schema), items / prefixItems (and draft 4's array-form items with additionalItems), minItems /
 * maxItems, uniqueItems (by producing at most one item), minLength / maxLength, pattern (regex.h, search
 * semantics), format (date, time, date-time, uuid, email, ipv4, hostname, uri: fixed well-formed shapes),
 * integer and number minimum / maximum / exclusiveMinimum / exclusiveMaximum (integer bounds exactly,
 * non-integer ones rounded inward), anyOf, oneOf (when the alternatives provably exclude one another),
 * allOf (merged), $ref to "#..." JSON pointers ($defs, definitions, recursion), OpenAPI's nullable ignored (as
 * JSON Schema validators do),
 * minProperties / maxProperties (by choosing which properties to produce), dependencies /
 * dependentRequired / dependentSchemas (optional properties whose dependencies are not produced are left
 * out), patternProperties (merged into the listed properties whose names match; no other keys produced).
 *
 * Output shape: compact JSON with optional bounded whitespace after `{ [ , :`; properties in `properties`
 * order, optional ones may be omitted.  Bounded work: the schema's nesting, the rules made and the text
 * produced are limited (CI_ERR_LIMIT). */
#ifndef CINFER_GRAMMAR_JSON_SCHEMA_H
#define CINFER_GRAMMAR_JSON_SCHEMA_H

#include <stddef.h>

#include "core/status.h"
#include "grammar/regex.h"

#define GRAM_SCHEMA_MAX_BYTES        (1u << 20) // bytes of schema text
#define GRAM_SCHEMA_MAX_DEPTH        64         // schemas nested inside one another (refs aside)
#define GRAM_SCHEMA_MAX_RULES        4000       // rules the compiler makes
#define GRAM_SCHEMA_MAX_JSON_NESTING 128        // JSON nesting of the schema text
#define GRAM_SCHEMA_MAX_COPIED       200000 // schema nodes merges may copy (allOf, anyOf/oneOf siblings, $ref)

/* The GBNF grammar for the schema text[0..len) (JSON).  Errors (CI_ERR_INVALID: not a schema;
 * CI_ERR_UNSUPPORTED: a keyword that cannot be honoured; CI_ERR_LIMIT) begin "json_schema: " and name the
 * keyword and where (a JSON pointer into the schema). */
enum ci_status gram_json_schema_to_gbnf(const char *text, size_t len, struct gtext *out, struct ci_err *err);

/* Several schemas in one grammar, for a caller that writes its own root around them (a tool call whose
 * arguments follow one of the tools' schemas): schema i's value is rule "schema<i>"; no "root" rule is
 * written.  Errors as gram_json_schema_to_gbnf's, for the first schema that fails. */
enum ci_status gram_json_schemas_gbnf(const char *const *texts, const size_t *lens, int n, struct gtext *out,
                                      struct ci_err *err);

/* Any JSON object (OpenAI's response_format json_object). */
enum ci_status gram_json_object_gbnf(struct gtext *out, struct ci_err *err);

#endif
