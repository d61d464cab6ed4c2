/* Tool-call and reasoning parsing (server/tool_parse.c) over arbitrary generated text, in every format.
 *
 * Input: byte 0: the format (bits 0-2, modulo the number of formats) and the options (bit 3: tools, bit 4:
 * reasoning, bit 5: the text starts inside <think>); then the text (at most 2048 bytes are used).
 *
 * Properties checked:
 *   - the final parse succeeds, with content and reasoning NUL-terminated at their lengths, every call
 *     with a non-empty name and arguments that parse as a JSON object, and no more content than text;
 *   - the streaming contract: for every prefix of the text, the partial parse is a prefix of the final one
 *     (content and reasoning byte prefixes, the calls a prefix of the list with equal names and arguments);
 *   - a second final parse gives the same result (no hidden state), and nothing leaks. */
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "server/openai.h"
#include "server/tool_parse.h"

#define MAX_TEXT 2048

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    openai_init();
    return 0;
}

static void check_result(const struct tool_parse_result *r, size_t len) {
    FUZZ_CHECK(r->content && strlen(r->content) <= r->content_len && r->content[r->content_len] == '\0',
               "content");
    FUZZ_CHECK(r->reasoning && r->reasoning[r->reasoning_len] == '\0', "reasoning");
    FUZZ_CHECK(r->content_len <= len && r->reasoning_len <= len, "more text out than in");
    for (int i = 0; i < r->n_calls; i++) {
        FUZZ_CHECK(r->calls[i].name && r->calls[i].name[0], "call %d has no name", i);
        cJSON *a = cJSON_Parse(r->calls[i].arguments);
        FUZZ_CHECK(cJSON_IsObject(a), "call %d's arguments are not an object: %s", i, r->calls[i].arguments);
        cJSON_Delete(a);
    }
}

static bool prefix(const struct tool_parse_result *p, const struct tool_parse_result *f) {
    if (p->content_len > f->content_len || memcmp(p->content, f->content, p->content_len) != 0 ||
        p->reasoning_len > f->reasoning_len || memcmp(p->reasoning, f->reasoning, p->reasoning_len) != 0 ||
        p->n_calls > f->n_calls)
        return false;
    for (int i = 0; i < p->n_calls; i++)
        if (strcmp(p->calls[i].name, f->calls[i].name) != 0 ||
            strcmp(p->calls[i].arguments, f->calls[i].arguments) != 0)
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    FUZZ_MEM_BEGIN();
    struct tool_parse_opts o = {.format = (enum tool_format)((data[0] & 7) % (TOOL_FORMAT_DEEPSEEK + 1)),
                                .tools = data[0] & 8,
                                .reasoning = data[0] & 16,
                                .in_reasoning = data[0] & 32};
    const char *text = (const char *)data + 1;
    size_t len = size - 1 < MAX_TEXT ? size - 1 : MAX_TEXT;
    struct tool_parse_result f, again;
    FUZZ_CHECK(tool_parse(&o, text, len, &f) == CI_OK, "final parse failed");
    check_result(&f, len);
    FUZZ_CHECK(tool_parse(&o, text, len, &again) == CI_OK && prefix(&again, &f) && prefix(&f, &again),
               "two parses differ");
    tool_parse_result_free(&again);
    o.partial = true;
    for (size_t n = 0; n <= len; n++) {
        struct tool_parse_result p;
        FUZZ_CHECK(tool_parse(&o, text, n, &p) == CI_OK, "partial parse of %zu bytes failed", n);
        check_result(&p, n);
        FUZZ_CHECK(prefix(&p, &f), "the partial result of %zu of %zu bytes is not a prefix of the final one",
                   n, len);
        tool_parse_result_free(&p);
    }
    tool_parse_result_free(&f);
    FUZZ_MEM_END();
    return 0;
}
