/* Checks on raw JSON text that cJSON cannot make after parsing.  cJSON decodes the escape \u0000 into a
 * NUL byte inside a C string, so everything after it would vanish silently ("ab\u0000cd" read as "ab"):
 * the request parsers reject such a string instead, naming where it is. */
#ifndef CINFER_SERVER_JSON_CHECK_H
#define CINFER_SERVER_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* True when a string (key or value) of the JSON text holds the escape \u0000; path[cap] then names the
 * value it is in, as "messages[1].content" (a key: the key's own path).  The text must be valid JSON
 * (checked by the parser before); on anything else it returns false. */
bool json_find_nul_escape(const char *text, size_t len, char *path, size_t cap);

#endif
