/* llama.cpp's grammar-integration cases, run through cinfer's grammar engine: tests/llamacpp/
 * test_grammar_bundle.sh extracts every test_grammar / test_schema case of tests/test-grammar-integration.cpp
 * in the pinned llama.cpp source (a GBNF grammar or a JSON schema, strings it must accept, strings it must
 * refuse) into a JSON file named by $CINFER_GRAMMAR_CASES; each grammar or schema is compiled by cinfer and
 * must accept and refuse the same strings, except where the file marks a string as a difference of cinfer's
 * on purpose ("known": the reason, printed as a NOTE).  Cases with "compiles" instead of strings (the schemas
 * of test-json-schema-to-grammar.cpp) must compile exactly when llama.cpp's do.  Without the variable the
 * test is skipped. */
#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "test_util.h"

static size_t unhex(const char *h, char *out, size_t cap) {
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n && i < cap; i++) {
        unsigned v = 0;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n < cap ? n : cap;
}

static struct grammar *compile(const char *kind, const char *text, struct ci_err *err) {
    struct grammar *g = NULL;
    if (strcmp(kind, "schema") == 0) {
        struct gtext t = {0};
        if (gram_json_schema_to_gbnf(text, strlen(text), &t, err) == CI_OK)
            gram_parse_gbnf(t.s, t.n, &g, err);
        gtext_free(&t);
    } else { // token references by id over the byte vocabulary's 257 tokens
        gram_parse_gbnf_tokens(text, strlen(text), &(struct gram_tokens){257, NULL, NULL}, &g, err);
    }
    return g;
}

/* Feeds a case's string: 0xff and 4 bytes big-endian is a token id (llama.cpp's encoding); any other byte b
 * is the byte vocabulary's token b (test_byte_vocab), so token references (`!<[11]>`) see text as tokens. */
static bool feed(struct gram_matcher *m, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t b = (uint8_t)s[i];
        if (b == 0xff && i + 5 <= n) {
            int32_t id = (int32_t)(((uint32_t)(uint8_t)s[i + 1] << 24) | ((uint32_t)(uint8_t)s[i + 2] << 16) |
                                   ((uint32_t)(uint8_t)s[i + 3] << 8) | (uint8_t)s[i + 4]);
            if (!gram_matcher_accept_token(m, id))
                return false;
            i += 5;
        } else if (!(b ? gram_matcher_accept_token(m, b) : gram_matcher_accept_bytes(m, s + i, 1))) {
            return false;
        } else {
            i++;
        }
    }
    return true;
}

/* One case: a FAIL for each string cinfer judges otherwise than llama.cpp, unless marked as known. */
static void run_case(const cJSON *c, struct gram_vocab *v, int *n_strings, int *n_known, int *n_compiled) {
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(c, "kind"),
                *text = cJSON_GetObjectItemCaseSensitive(c, "text"),
                *desc = cJSON_GetObjectItemCaseSensitive(c, "desc"),
                *known = cJSON_GetObjectItemCaseSensitive(c, "known");
    if (!cJSON_IsString(kind) || !cJSON_IsString(text) || !cJSON_IsString(desc)) {
        TEST_FAILF("a malformed case in the file");
        return;
    }
    struct ci_err err = {0};
    struct grammar *g = compile(kind->valuestring, text->valuestring, &err);
    const cJSON *compiles = cJSON_GetObjectItemCaseSensitive(c, "compiles");
    if (cJSON_IsBool(compiles)) {
        if (cJSON_IsTrue(compiles) && !g)
            TEST_FAILF("[%s] %s: llama.cpp compiles it, cinfer refuses it: %s", kind->valuestring,
                       desc->valuestring, err.msg);
        else if (!cJSON_IsTrue(compiles) && g)
            TEST_FAILF("[%s] %s: llama.cpp refuses it, cinfer compiles it", kind->valuestring,
                       desc->valuestring);
        (*n_compiled)++;
        gram_free(g);
        return;
    }
    if (!g) {
        TEST_FAILF("[%s] %s: cinfer refuses it: %s", kind->valuestring, desc->valuestring, err.msg);
        return;
    }
    for (int want = 1; want >= 0; want--) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, want ? "pass" : "fail")) {
            static char s[1 << 16];
            size_t n = unhex(e->valuestring, s, sizeof s);
            struct gram_matcher *m = NULL;
            if (gram_matcher_create(g, v, &m, &err) != CI_OK) {
                TEST_FAILF("[%s] %s: matcher: %s", kind->valuestring, desc->valuestring, err.msg);
                break;
            }
            int got = feed(m, s, n) && gram_matcher_is_accepting(m);
            gram_matcher_free(m);
            (*n_strings)++;
            const cJSON *why = cJSON_GetObjectItemCaseSensitive(known, e->valuestring);
            if (got == want)
                continue;
            if (cJSON_IsString(why)) {
                printf("NOTE llamacpp_grammar_cases: [%s] %s: '%.*s' %s by cinfer, %s by llama.cpp: %s\n",
                       kind->valuestring, desc->valuestring, (int)n, s, got ? "accepted" : "refused",
                       want ? "accepted" : "refused", why->valuestring);
                (*n_known)++;
            } else {
                TEST_FAILF("[%s] %s: '%.*s' %s by cinfer, %s by llama.cpp", kind->valuestring,
                           desc->valuestring, (int)n, s, got ? "accepted" : "refused",
                           want ? "accepted" : "refused");
            }
        }
    }
    gram_free(g);
}

TEST(llamacpp_grammar_cases) {
    const char *path = getenv("CINFER_GRAMMAR_CASES");
    size_t len = 0;
    char *text = path ? test_read_file(path, &len) : NULL;
    cJSON *cases = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!cJSON_IsArray(cases) || cJSON_GetArraySize(cases) < 30) {
        TEST_FAILF("cannot read at least 30 cases from %s", path ? path : "(unset)");
        cJSON_Delete(cases);
        return;
    }
    struct gram_vocab *v = test_byte_vocab();
    int n_strings = 0, n_known = 0, n_compiled = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) run_case(c, v, &n_strings, &n_known, &n_compiled);
    printf(
        "  %d cases: %d strings (%d known differences), %d schemas compiled or refused as llama.cpp does\n",
        cJSON_GetArraySize(cases), n_strings, n_known, n_compiled);
    gram_vocab_free(v);
    cJSON_Delete(cases);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    if (!getenv("CINFER_GRAMMAR_CASES")) {
        printf(
            "SKIP llamacpp_grammar_cases (CINFER_GRAMMAR_CASES unset: tests/llamacpp/test_grammar_bundle.sh "
            "sets it)\n");
        return 0;
    }
    RUN(llamacpp_grammar_cases);
    return test_exit_code();
}
