/* OpenAI request parsing and error bodies (server/openai.c): the error body a rejected request gets must be
 * valid JSON and valid UTF-8 whatever bytes the request held, including in the parameter it names. */
#include "server/openai.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "core/mem.h"
#include "test.h"

/* Strict UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
static bool utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (len == 0 || n - i < len)
            return false;
        unsigned char lo = c == 0xe0   ? 0xa0
                           : c == 0xf0 ? 0x90
                                       : 0x80,
                      hi = c == 0xed   ? 0x9f
                           : c == 0xf4 ? 0x8f
                                       : 0xbf;
        if (len > 1 && (u[i + 1] < lo || u[i + 1] > hi))
            return false;
        for (size_t k = 2; k < len; k++)
            if ((u[i + k] & 0xc0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

/* Parses body as a chat request that must fail; returns the error body (ci_free) and its param. */
static char *error_body(const char *body, char *param, size_t cap) {
    struct openai_limits lim = {32000, 2048};
    struct openai_request r;
    struct openai_error e;
    memset(&e, 0, sizeof e);
    if (openai_parse(OPENAI_CHAT, body, strlen(body), &lim, &r, &e) != CI_ERR_INVALID) {
        TEST_FAILF("request accepted: %s", body);
        return NULL;
    }
    snprintf(param, cap, "%s", e.param);
    size_t len = 0;
    char *json = openai_error_json(&e, &len);
    if (!json || strlen(json) != len)
        TEST_FAILF("no error body");
    return json;
}

/* The error body's JSON parses, is valid UTF-8, and error.param is a string starting with prefix. */
static void check_body(const char *json, const char *prefix) {
    if (!utf8_valid(json, strlen(json)))
        TEST_FAILF("error body is not valid UTF-8: %s", json);
    cJSON *j = cJSON_Parse(json);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "param");
    if (!cJSON_IsString(p) || strncmp(p->valuestring, prefix, strlen(prefix)) != 0)
        TEST_FAILF("error.param is not '%s...': %s", prefix, json);
    cJSON_Delete(j);
}

/* A key of raw bytes that are not UTF-8 holding an escaped NUL: the error names that key as its param (found
 * by fuzz_openai: the body was not UTF-8). */
TEST(error_param_with_raw_key_bytes) {
    char param[64];
    char *json = error_body("{\"messages\": [{\"role\": \"user\", \"con\x01\x10\xff\xff\": \"a\\u0000b\"}]}",
                            param, sizeof param);
    ASSERT(json);
    ASSERT(strncmp(param, "messages[0].con", 15) == 0);
    check_body(json, "messages[0].con");
    ci_free(json);
}

/* A long UTF-8 key cut to fit the param field may end inside a character. */
TEST(error_param_cut_inside_a_character) {
    char body[512], key[256] = "";
    for (int i = 0; i < 40; i++)
        strcat(key, "\xc3\xa9"); // é
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"%s\": \"\\u0000\"}]}", key);
    char param[64];
    char *json = error_body(body, param, sizeof param);
    ASSERT(json);
    check_body(json, "messages[0].\xc3\xa9");
    ci_free(json);
}

/* The parameter names of ordinary errors stay as they are. */
TEST(error_param_plain) {
    char param[64];
    char *json =
        error_body("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", param, sizeof param);
    ASSERT(json);
    ASSERT(strcmp(param, "messages[0].role") == 0);
    check_body(json, "messages[0].role");
    ci_free(json);
}

int main(void) {
    openai_init();
    RUN(error_param_with_raw_key_bytes);
    RUN(error_param_cut_inside_a_character);
    RUN(error_param_plain);
    return test_exit_code();
}
