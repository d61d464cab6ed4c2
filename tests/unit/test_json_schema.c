/* grammar/regex.c and grammar/json_schema.c: what the compiled grammars accept and reject, on strings chosen
 * by hand from ECMAScript's and JSON Schema's rules (1: a whole match, 0: rejected, 2: a valid prefix only),
 * the errors naming unsupported constructs and keywords, and the limits. */
#include "grammar/json_schema.h" // first: the headers must compile on their own
#include "grammar/regex.h"

#include "core/clock.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "test_util.h"

#define CHECKF(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            TEST_FAILF(__VA_ARGS__);                                                                         \
    } while (0)

/* The grammar of a regex (flags) or, with schema set, of a JSON Schema; NULL with the error in err. */
static struct grammar *compile(const char *text, int flags, bool schema, struct ci_err *err) {
    struct gtext t = {0};
    struct grammar *g = NULL;
    enum ci_status s = schema ? gram_json_schema_to_gbnf(text, strlen(text), &t, err)
                              : gram_regex_to_gbnf(text, strlen(text), flags, &t, err);
    if (s == CI_OK && gram_parse_gbnf(t.s, t.n, &g, err) != CI_OK)
        TEST_FAILF("the GBNF of '%s' does not parse: %s\n%s", text, err->msg, t.s);
    gtext_free(&t);
    return g;
}

static int judge(const struct grammar *g, const struct gram_vocab *v, const char *s) {
    struct gram_matcher *m = NULL;
    struct ci_err err = {0};
    if (gram_matcher_create(g, v, &m, &err) != CI_OK) {
        TEST_FAILF("matcher: %s", err.msg);
        return -1;
    }
    int r = !gram_matcher_accept_bytes(m, s, strlen(s)) ? 0 : gram_matcher_is_accepting(m) ? 1 : 2;
    gram_matcher_free(m);
    return r;
}

struct kase {
    const char *pattern; // regex or schema
    int flags;
    const char *s;
    int want;
};

static void run_cases(const struct kase *c, size_t n, bool schema) {
    struct gram_vocab *v = test_byte_vocab();
    for (size_t i = 0; i < n; i++) {
        struct ci_err err = {0};
        struct grammar *g = compile(c[i].pattern, c[i].flags, schema, &err);
        if (!g) {
            TEST_FAILF("'%s' does not compile: %s", c[i].pattern, err.msg);
            continue;
        }
        int r = judge(g, v, c[i].s);
        CHECKF(r == c[i].want, "'%s' on '%s': got %d want %d", c[i].pattern, c[i].s, r, c[i].want);
        gram_free(g);
    }
    gram_vocab_free(v);
}

#define S GRAM_REGEX_SEARCH
#define J GRAM_REGEX_JSON_STRING

TEST(regex_language) {
    static const struct kase cases[] = {
        {"abc", 0, "abc", 1},
        {"abc", 0, "ab", 2},
        {"abc", 0, "abd", 0},
        {"^abc$", 0, "abc", 1},
        {"a|bc|", 0, "", 1},
        {"a|bc|", 0, "bc", 1},
        {"(ab)+c?", 0, "ababc", 1},
        {"(?:ab)+c?", 0, "abac", 0},
        {"a{2,3}", 0, "aaa", 1},
        {"a{2,3}", 0, "aaaa", 0},
        {"a{2}", 0, "a", 2},
        {"a{2,}", 0, "aaaaaaa", 1},
        {"a*?b+?c??", 0, "aabbc", 1},
        {"[a-c]x", 0, "bx", 1},
        {"[^a-c]x", 0, "bx", 0},
        {"[^a-c]x", 0, "dx", 1},
        {"[-a]", 0, "-", 1},
        {"[a-]", 0, "-", 1},
        {"[\\]]", 0, "]", 1},
        {"[^\\n]", 0, "\n", 0},
        {".", 0, "\n", 0},
        {".", 0, "\r", 0},
        {".", 0, "\xe2\x80\xa8", 0}, // U+2028
        {".", 0, "\xc3\xa9", 1},
        {"\\d\\w\\s", 0, "5_ ", 1},
        {"\\d", 0, "\xd9\xa3", 0}, // ARABIC-INDIC DIGIT THREE: only [0-9]
        {"\\D", 0, "a", 1},
        {"\\D", 0, "5", 0},
        {"\\D", 0, "\xd9\xa3", 0},     // a digit to Python: never produced by \D
        {"\\W", 0, "\xc3\xa9", 0},     // a word character to Python
        {"\\S", 0, "\x1c", 0},         // whitespace to Python's str.isspace
        {"\\s", 0, "\xef\xbb\xbf", 0}, // U+FEFF: whitespace to ECMAScript, not to Python
        {"[^\\d]", 0, "x", 1},
        {"[^\\d]", 0, "7", 0},
        {"\\x41\\u0042\\u{1F600}\\cJ\\t", 0, "AB\xf0\x9f\x98\x80\n\t", 1},
        {"\\uD83D\\uDE00", 0, "\xf0\x9f\x98\x80", 1},
        {"\\.\\*\\/", 0, ".*/", 1},
        {"a{,2}", 0, "a{,2}", 1}, // not a quantifier: literal (Annex B)
        {"[\\^x]", 0, "^", 1},
        {"[x^]", 0, "^", 1},
        // search: anywhere, unless anchored
        {"b", S, "abc", 1},
        {"^b", S, "abc", 0},
        {"^a", S, "abc", 1},
        {"c$", S, "abc", 1},
        {"b$", S, "abc", 2}, // "abcb" would match
        {"^ab$", S, "abc", 0},
        {"^x$|y", S, "zyz", 1},
        // inside a JSON string: escaped
        {"a\"b", J, "a\\\"b", 1},
        {"a\"b", J, "a\"b", 0},
        {"\\\\", J, "\\\\", 1},
        {"\\n", J, "\\u000a", 1},
        {"\\n", J, "\n", 0},
        {"[^a]", J, "\\\"", 1},
        {"[^a]", J, "\\u001f", 1},
        {"[^a]", J, "\"", 0},
        {".", J, "\x01", 0},
        {"[\\x00-\\x7f]{2}", J, "\\u0000\\\\", 1},
    };
    run_cases(cases, sizeof cases / sizeof *cases, false);
}

TEST(regex_errors) {
    static const struct {
        const char *re;
        const char *needle;
    } cases[] = {
        {"(a)\\1", "backreferences"},
        {"(?<n>a)\\k<n>", "backreferences"},
        {"(?=a)", "lookahead"},
        {"(?!a)", "lookahead"},
        {"(?<=a)b", "lookbehind"},
        {"(?<!a)b", "lookbehind"},
        {"\\bx", "word boundary"},
        {"\\Bx", "non-word-boundary"},
        {"\\p{L}", "Unicode property"},
        {"(?i)a", "inline flags"},
        {"a^b", "anchor '^'"},
        {"a$b", "anchor '$'"},
        {"(ab", "missing ')'"},
        {"ab)", "unmatched ')'"},
        {"[ab", "unterminated"},
        {"*a", "nothing to repeat"},
        {"a**", "nothing to repeat"},
        {"a{3,2}", "out of order"},
        {"[z-a]", "out of order"},
        {"a{10001}", "above"},
        {"\\", "lone"},
        {"[]", "empty class"},
        {"\\e", "'\\e'"},
        {"\\uD800", "surrogate"},
        {"\\0123", "octal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct gtext t = {0};
        struct ci_err err = {0};
        enum ci_status s = gram_regex_to_gbnf(cases[i].re, strlen(cases[i].re), 0, &t, &err);
        CHECKF(s != CI_OK && strstr(err.msg, cases[i].needle) && strstr(err.msg, "regex: "),
               "'%s': status %d message '%s' (want '%s')", cases[i].re, s, err.msg, cases[i].needle);
        gtext_free(&t);
    }
    char deep[200];
    memset(deep, '(', 40);
    memset(deep + 40, ')', 40);
    deep[80] = 0;
    struct gtext t = {0};
    struct ci_err err = {0};
    CHECKF(gram_regex_to_gbnf(deep, 80, 0, &t, &err) == CI_ERR_LIMIT && strstr(err.msg, "nested"), "%s",
           err.msg);
    gtext_free(&t);
}

#define ADDL_TRUE                                                                                            \
    "{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"additionalProperties\":"  \
    "true}"
#define ADDL_SCHEMA                                                                                          \
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"],"          \
    "\"additionalProperties\":{\"type\":\"integer\"}}"
#define ADDL_ABSENT "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}"

TEST(schema_language) {
    static const struct kase cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "-12", 1},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "-13", 0},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "305", 1},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "306", 0},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "0", 1},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "-0", 0},
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", 0, "07", 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":99}", 0, "99", 2}, // 990 is allowed
        {"{\"type\":\"integer\",\"exclusiveMinimum\":99}", 0, "-5", 0},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":99}", 0, "100", 1},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":99}", 0, "12345678", 1},
        {"{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":2.5}", 0, "0", 0},
        {"{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":2.5}", 0, "2", 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "0", 2}, // 0.5 is allowed
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "0.0", 2},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "-0.5", 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "0.25", 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "1", 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "1.5", 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "1e0", 0},
        {"{\"type\":\"number\",\"maximum\":-1}", 0, "-1", 1},
        {"{\"type\":\"number\",\"maximum\":-1}", 0, "-0.5", 0},
        {"{\"type\":\"number\"}", 0, "-12.5e-3", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 0, "\"ab\"", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 0, "\"a\"", 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 0, "\"a\\u00e9\\n\"", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 0, "\"abcd\"", 0},
        {"{\"type\":\"string\"}", 0, "\"\\ud800\"", 0}, // a lone surrogate escape is not one character
        {"{\"type\":\"string\",\"format\":\"date\"}", 0, "\"2024-02-28\"", 1},
        {"{\"type\":\"string\",\"format\":\"date\"}", 0, "\"2024-02-30\"", 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", 0, "\"2024-13-01\"", 0},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", 0, "\"2024-04-30T23:59:59.5+01:00\"", 1},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", 0, "\"123e4567-e89b-12d3-a456-426614174000\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", 0, "\"256.1.1.1\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^a+$\"}", 0, "\"aaa\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"b\"}", 0, "\"abc\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"b\"}", 0, "\"ac\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^[a-c]{2,4}$\",\"minLength\":2,\"maxLength\":4}", 0, "\"abca\"",
         1},
        {"{\"type\":\"string\",\"pattern\":\"^(x|yy)?z+$\",\"minLength\":1}", 0, "\"yyzz\"", 1},
        {"{\"enum\":[\"a\\\"b\",1.5,null,[1]]}", 0, "\"a\\\"b\"", 1},
        {"{\"enum\":[\"a\\\"b\",1.5,null,[1]]}", 0, "[1]", 1},
        {"{\"enum\":[\"a\\\"b\",1.5,null,[1]]}", 0, "1", 2},
        {"{\"enum\":[\"a\\\"b\",1.5,null,[1]]}", 0, "2", 0},
        {"{\"type\":\"string\",\"enum\":[\"x\",2]}", 0, "2", 0},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         0, "{\"a\":1,\"b\":true}", 1},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         0, "{\"b\":false}", 1},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         0, "{\"a\":1}", 0},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         0, "{\"b\":true,\"c\":1}", 0},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"null\"}}", 0, "{\"k\": null, \"j\":null}",
         1},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"null\"}}", 0, "{\"k\": 1}", 0},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", 0, "[1, 2]",
         1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", 0, "[1]", 0},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", 0,
         "[1,2,3,4]", 0},
        {"{\"type\":\"array\",\"uniqueItems\":true}", 0, "[1,2]", 0},
        {"{\"type\":\"array\",\"uniqueItems\":true}", 0, "[1]", 1},
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", 0, "[1,\"x\"]",
         1},
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", 0, "[1,\"x\",2]",
         0},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"$ref\":\"#/$defs/"
         "n\"}}}},\"$ref\":\"#/$defs/n\"}",
         0, "{\"c\":{\"c\":{}}}", 1},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}", 0, "null", 1},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", 0, "\"s\"", 1},
        {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":5},{\"maximum\":6}]}", 0, "7", 0},
        {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":5},{\"maximum\":6}]}", 0, "6", 1},
        {"{\"type\":[\"string\",\"null\"]}", 0, "null", 1},
        {"{\"type\":\"string\",\"nullable\":true}", 0, "null", 0}, // OpenAPI's: no JSON Schema keyword
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"dependentRequired\":{\"a\":[\"b\"]}}", 0,
         "{\"a\":1}", 0},
        {"{}", 0, "{\"x\": [1, \"a\", {\"y\": null}]}", 1},
        // number bounds beyond 1e9 (rounded inward, never dropped)
        {"{\"type\":\"number\",\"maximum\":5000000000}", 0, "99999999999", 0},
        {"{\"type\":\"number\",\"maximum\":5000000000}", 0, "12.5", 1},
        {"{\"type\":\"number\",\"minimum\":-5000000000,\"maximum\":0}", 0, "-99999999999", 0},
        {"{\"type\":\"number\",\"minimum\":-5000000000,\"maximum\":0}", 0, "-3.25", 1},
        // not {"type": ...}: those types removed
        {"{\"not\":{\"type\":\"null\"}}", 0, "null", 0},
        {"{\"not\":{\"type\":\"null\"}}", 0, "1", 1},
        {"{\"not\":{\"type\":\"null\"}}", 0, "[true]", 1},
        {"{\"type\":[\"string\",\"null\"],\"not\":{\"type\":\"string\"}}", 0, "null", 1},
        {"{\"type\":[\"string\",\"null\"],\"not\":{\"type\":\"string\"}}", 0, "\"a\"", 0},
        {"{\"not\":{\"type\":[\"number\",\"boolean\"]}}", 0, "3", 0},
        {"{\"not\":{\"type\":[\"number\",\"boolean\"]}}", 0, "true", 0},
        {"{\"not\":{\"type\":[\"number\",\"boolean\"]}}", 0, "{}", 1},
        // multipleOf: the divisibility automaton (unbounded) and the listed multiples (bounded); 2: a prefix
        // of a valid value but not one (15 -> 154, 55 -> 550, 3 -> 30, 8 -> 84, 18 -> 180)
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "1001", 0},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "-96", 0},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "5.", 0},
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "0", 1},
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "-21", 1},
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "700000000007", 1},
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "700000000008", 2},
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "15", 2},
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "7000000000000000", 1},  // 16 digits: the most
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "70000000000000007", 0}, // 17: too long
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "100000000000000", 2},   // -> 1000000000000001
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "1000000000000002", 0},  // 16 digits, remainder 1
        {"{\"type\":\"integer\",\"multipleOf\":7}", 0, "014", 0},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "-90", 1},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "-100", 0},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "1000", 1},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "1010", 0},
        {"{\"type\":\"integer\",\"multipleOf\":10,\"minimum\":-95,\"maximum\":1000}", 0, "55", 2},
        {"{\"type\":\"number\",\"multipleOf\":2,\"minimum\":0.5}", 0, "2", 1},
        {"{\"type\":\"number\",\"multipleOf\":2,\"minimum\":0.5}", 0, "0", 0},
        {"{\"type\":\"number\",\"multipleOf\":2,\"minimum\":0.5}", 0, "-2", 0},
        {"{\"type\":\"number\",\"multipleOf\":2,\"minimum\":0.5}", 0, "3", 2},
        {"{\"type\":\"integer\",\"allOf\":[{\"multipleOf\":4},{\"multipleOf\":6}]}", 0, "36", 1},
        {"{\"type\":\"integer\",\"allOf\":[{\"multipleOf\":4},{\"multipleOf\":6}]}", 0, "8", 2},
        {"{\"type\":\"integer\",\"allOf\":[{\"multipleOf\":4},{\"multipleOf\":6}]}", 0, "18", 2},
        // a bounded number's fraction may end in zeros (llama.cpp's integration cases: "12.50")
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", 0, "12.50", 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", 0, "0.500", 1},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", 0, "0.00", 2}, // 0.001 is allowed
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, "1.0", 0},
        // additionalProperties true or a schema beside properties: other keys after the listed ones, never a
        // listed key again (it would take the other schema), prefixes and extensions of listed keys allowed
        {ADDL_TRUE, 0, "{\"a\": 1, \"c\": \"x\"}", 1},
        {ADDL_TRUE, 0, "{\"c\": \"x\", \"d\": [1]}", 1},
        {ADDL_TRUE, 0, "{\"a\": 1, \"b\": 2, \"a_\": null}", 1},
        {ADDL_TRUE, 0, "{\"\": 0, \"ab\": 0, \"\u00e9\": 0}", 1},
        {ADDL_TRUE, 0, "{\"a\": \"x\"}", 0},
        {ADDL_TRUE, 0, "{\"c\": 1, \"a\": 1}", 0},
        {ADDL_TRUE, 0, "{\"b\": 2, \"b\": 2}", 0},
        {ADDL_TRUE, 0, "{\"\\u0061\": 1}", 0}, // an escaped key could be a listed one: not produced
        {ADDL_SCHEMA, 0, "{\"name\": \"n\", \"x\": 3}", 1},
        {ADDL_SCHEMA, 0, "{\"name\": \"n\", \"x\": \"3\"}", 0},
        {ADDL_SCHEMA, 0, "{\"name\": \"n\", \"nam\": 3, \"names\": 4}", 1},
        {ADDL_SCHEMA, 0, "{\"x\": 3}", 0},           // name is required
        {ADDL_ABSENT, 0, "{\"a\": 1, \"c\": 2}", 0}, // absent: only the listed keys (as llama.cpp)
        // prefixItems given a schema (not 2020-12's array): items of that schema, as llama.cpp reads it
        {"{\"type\":\"array\",\"prefixItems\":{\"type\":\"string\"}}", 0, "[\"a\", \"b\"]", 1},
        {"{\"type\":\"array\",\"prefixItems\":{\"type\":\"string\"}}", 0, "[1]", 0},
        {"{\"type\":\"array\",\"items\":{},\"prefixItems\":{\"type\":\"string\"}}", 0, "[1, \"a\"]", 1},
    };
    run_cases(cases, sizeof cases / sizeof *cases, true);
}

TEST(schema_errors) {
    static const struct {
        const char *schema;
        const char *needle;
    } cases[] = {
        {"{\"type\":\"number\",\"multipleOf\":0.5}", "'multipleOf'"},
        {"{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":0,\"maximum\":3000}", "'multipleOf'"},
        {"{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":4}", "'multipleOf'"},
        {"{\"type\":\"integer\",\"multipleOf\":0}", "'multipleOf'"},
        {"{\"not\":{}}", "'not'"},
        {"{\"not\":{\"type\":\"string\",\"maxLength\":2}}", "'not'"},
        {"{\"type\":\"number\",\"not\":{\"type\":\"integer\"}}", "'not'"},
        {"{\"enum\":[1,\"a\"],\"not\":{\"type\":\"string\"}}", "'not'"},
        {"{\"if\":{},\"then\":{}}", "'if'"},
        {"{\"type\":\"object\",\"propertyNames\":{}}", "'propertyNames'"},
        {"{\"contains\":{}}", "'contains'"},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "'ipv6'"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "'pattern'"},
        {"{\"type\":\"string\",\"pattern\":\"^a{2,5}$\",\"maxLength\":4}", "'pattern'"},
        {"{\"type\":\"string\",\"pattern\":\"^a*$\",\"minLength\":1}", "'pattern'"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookahead"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "'oneOf'"},
        {"{\"properties\":{\"a\":{\"items\":{\"not\":{}}}}}", "#/properties/a/items"},
        {"{\"$ref\":\"#/definitions/x\"}", "does not resolve"},
        {"{\"$ref\":\"other.json\"}", "within the schema"},
        {"{\"type\":7}", "'type'"},
        {"{\"type\":\"strin\"}", "no known type"},
        {"{\"required\":[1]}", "'required'"},
        {"{\"minItems\":-1}", "'minItems'"},
        {"{\"type\":", "not valid JSON"},
        {"false", "false"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":"
         "false}",
         "'b'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct gtext t = {0};
        struct ci_err err = {0};
        enum ci_status s = gram_json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &t, &err);
        CHECKF(s != CI_OK && strstr(err.msg, cases[i].needle) && strstr(err.msg, "json_schema: "),
               "'%s': status %d message '%s' (want '%s')", cases[i].schema, s, err.msg, cases[i].needle);
        gtext_free(&t);
    }
    // limits: nesting and size
    char *deep = malloc(40000);
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        n += (size_t)sprintf(deep + n, "{\"items\":");
    n += (size_t)sprintf(deep + n, "{}");
    for (int i = 0; i < 100; i++)
        deep[n++] = '}';
    deep[n] = 0;
    struct gtext t = {0};
    struct ci_err err = {0};
    CHECKF(gram_json_schema_to_gbnf(deep, n, &t, &err) == CI_ERR_LIMIT && strstr(err.msg, "deeper"), "%s",
           err.msg);
    gtext_free(&t);
    free(deep);
    // merges that would copy a large sibling schema into each of 256 alternatives: refused, quickly
    size_t cap = 1u << 20;
    char *wide = malloc(cap);
    n = (size_t)sprintf(wide, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 20000; i++)
        n += (size_t)sprintf(wide + n, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
    n += (size_t)sprintf(wide + n, "},\"anyOf\":[");
    for (int i = 0; i < 256; i++)
        n += (size_t)sprintf(wide + n, "%s{\"required\":[\"p%d\"]}", i ? "," : "", i);
    n += (size_t)sprintf(wide + n, "]}");
    int64_t t0 = ci_now_ns();
    CHECKF(gram_json_schema_to_gbnf(wide, n, &t, &err) == CI_ERR_LIMIT && strstr(err.msg, "copies"), "%s",
           err.msg);
    CHECKF(ci_now_ns() - t0 < 2000000000, "took %.1f s", (double)(ci_now_ns() - t0) / 1e9);
    gtext_free(&t);
    free(wide);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(regex_language);
    RUN(regex_errors);
    RUN(schema_language);
    RUN(schema_errors);
    return test_exit_code();
}
