/* The structured-output front ends (src/grammar/json_schema.c, regex.c): JSON Schemas and regular
 * expressions compiled to GBNF text.
 *
 * Input: a mode byte, then the schema (JSON text) or the pattern.  Mode bit 0: a regex (else a schema); bits
 * 1 and 2: the regex flags GRAM_REGEX_SEARCH and GRAM_REGEX_JSON_STRING.
 *
 * Properties checked:
 *   - the front end either succeeds or fails with a message (never empty), without leaking;
 *   - what it writes is GBNF the parser accepts: never a syntax error, an undefined or twice-defined rule
 *     (a schema that matches nothing may still give a left-recursive or empty grammar, and size limits
 *     apply);
 *   - a second compile of the same input writes the same text (the cache keys on the input). */
#include "fuzz.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static enum ci_status compile(int mode, const char *text, size_t len, struct gtext *t, struct ci_err *err) {
    if (mode & 1)
        return gram_regex_to_gbnf(text, len, (mode >> 1) & 3, t, err);
    return gram_json_schema_to_gbnf(text, len, t, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 16))
        return 0;
    FUZZ_MEM_BEGIN();
    int mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct gtext t = {0}, t2 = {0};
    struct ci_err err = {0}, err2 = {0};
    enum ci_status s = compile(mode, text, len, &t, &err);
    enum ci_status s2 = compile(mode, text, len, &t2, &err2);
    FUZZ_CHECK(s == s2, "two compiles disagree: %d %d", s, s2);
    if (s != CI_OK) {
        FUZZ_CHECK(err.msg[0] != 0, "an error without a message");
        FUZZ_CHECK(!strcmp(err.msg, err2.msg), "two messages: %s / %s", err.msg, err2.msg);
    } else {
        FUZZ_CHECK(t.n == t2.n && !memcmp(t.s, t2.s, t.n), "two compiles wrote different grammars");
        struct grammar *g = NULL;
        struct ci_err pe = {0};
        enum ci_status ps = gram_parse_gbnf(t.s, t.n, &g, &pe);
        FUZZ_CHECK(ps == CI_OK || ps == CI_ERR_LIMIT || strstr(pe.msg, "left-recursive") ||
                       strstr(pe.msg, "language is empty") || strstr(pe.msg, "never be completed"),
                   "the front end wrote GBNF the parser refuses: %s\n%.2000s", pe.msg, t.s);
        gram_free(g);
    }
    gtext_free(&t);
    gtext_free(&t2);
    FUZZ_MEM_END();
    return 0;
}
