/* Jinja chat templates: any template text with any JSON context.
 *
 * Input: the template source up to the first NUL byte, then the context's JSON text (when it is not a JSON
 * object, a fixed conversation is used instead, so the template still renders something real).
 *
 * Properties checked:
 *   - parsing either succeeds or fails with a message; rendering either succeeds or fails with a message
 *     (a syntax or type error, raise_exception, or a bound: the limits here are small, so loops, recursion
 *     and blow-ups stop quickly);
 *   - a rendered text is NUL-terminated at its reported length and within the output bound;
 *   - rendering is deterministic and leaves the template unchanged: a second render gives the same bytes
 *     (or the same error);
 *   - nothing leaks (cinfer's counted heap is back where it was). */
#include <cjson/cJSON.h>

#include "chat/jinja.h"
#include "fuzz.h"

static const char *const conversation =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"}, "
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"content\": \"42\"}], "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t src_len = nul ? (size_t)(nul - data) : size;
    cJSON *ctx = NULL;
    if (nul) {
        char *json = fuzz_strndup(nul + 1, size - src_len - 1);
        ctx = cJSON_Parse(json);
        free(json);
        if (!cJSON_IsObject(ctx)) {
            cJSON_Delete(ctx);
            ctx = NULL;
        }
    }
    if (!ctx)
        ctx = cJSON_Parse(conversation);
    struct jinja_template *t = NULL;
    struct ci_err err = {0};
    enum ci_status s = jinja_template_parse(src, src_len, &t, &err);
    if (s != CI_OK) {
        FUZZ_CHECK(t == NULL && err.msg[0], "parse failed with no message");
    } else {
        struct jinja_limits lim = {
            .max_output = 1 << 16, .max_memory = 16u << 20, .max_steps = 20000, .max_depth = 200};
        char *out[2] = {NULL, NULL};
        size_t len[2] = {0, 0};
        enum ci_status rs[2];
        char msg[2][256];
        for (int k = 0; k < 2; k++) {
            struct ci_err e = {0};
            rs[k] = jinja_render(t, ctx, &lim, &out[k], &len[k], &e);
            snprintf(msg[k], sizeof msg[k], "%s", e.msg);
            if (rs[k] == CI_OK) {
                FUZZ_CHECK(out[k] && out[k][len[k]] == '\0' && len[k] <= lim.max_output,
                           "bad output, length %zu", len[k]);
            } else {
                FUZZ_CHECK(out[k] == NULL && msg[k][0], "render failed with no message");
            }
        }
        FUZZ_CHECK(rs[0] == rs[1], "two renders: status %d then %d", (int)rs[0], (int)rs[1]);
        if (rs[0] == CI_OK)
            FUZZ_CHECK(len[0] == len[1] && memcmp(out[0], out[1], len[0]) == 0, "two renders differ");
        else
            FUZZ_CHECK(strcmp(msg[0], msg[1]) == 0 || strstr(msg[0], "memory"),
                       "two errors differ: '%s' / '%s'", msg[0], msg[1]);
        ci_free(out[0]);
        ci_free(out[1]);
        jinja_template_free(t);
    }
    cJSON_Delete(ctx);
    FUZZ_MEM_END();
    return 0;
}
