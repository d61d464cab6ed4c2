/* Chat templates: every built-in template renders arbitrary messages; template detection and names.
 *
 * Input: byte 0: bit 0 add_generation_prompt; the rest is split at NUL bytes into messages, the first
 * byte of each picking the role (system, user, assistant, or now and then an invalid role or a NULL
 * field) and the remaining bytes being the content.  The whole input is also given to
 * chat_template_detect and, as a name, to chat_template_from_name.
 *
 * Properties checked, for every template:
 *   - chat_apply succeeds exactly when there is a message and every role and content is valid (the
 *     server validated them), and then returns a NUL-terminated string of the length it reports;
 *   - no message is lost or reordered: each one's content, trimmed of surrounding whitespace, appears
 *     in the prompt after the previous one's (gemma folds system text into the next user turn and drops
 *     it when none follows, so its system messages are skipped);
 *   - valid UTF-8 contents give a valid UTF-8 prompt;
 *   - detection returns a known id, names round-trip, and chat_template_for_eos keeps the id's family. */
#include "fuzz.h"
#include "tokenizer/chat.h"

#define MAX_MESSAGES 64

static bool is_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static void check_template(enum chat_template_id t, const struct chat_message *m, int n, bool valid,
                           bool add_gen, bool utf8) {
    char *out = NULL;
    size_t len = 0;
    struct ci_err err = {0};
    enum ci_status s = chat_apply(t, m, n, add_gen, &out, &len, &err);
    if (!valid) {
        FUZZ_CHECK(s == CI_ERR_INVALID && out == NULL && err.msg[0], "%s: invalid messages: status %d",
                   chat_template_name(t), (int)s);
        return;
    }
    FUZZ_CHECK(s == CI_OK, "%s: %s", chat_template_name(t), err.msg);
    FUZZ_CHECK(out && strlen(out) == len, "%s: length %zu, strlen %zu", chat_template_name(t), len,
               strlen(out));
    if (utf8)
        FUZZ_CHECK(fuzz_utf8_valid(out, len), "%s: prompt is not UTF-8", chat_template_name(t));
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (t == CHAT_TEMPLATE_GEMMA && strcmp(m[i].role, "system") == 0)
            continue;
        const char *c = m[i].content;
        size_t a = 0, b = strlen(c);
        while (a < b && is_space(c[a]))
            a++;
        while (b > a && is_space(c[b - 1]))
            b--;
        if (a == b)
            continue;
        const char *hit = memmem(out + pos, len - pos, c + a, b - a);
        FUZZ_CHECK(hit != NULL, "%s: message %d (%s, %zu bytes) is missing or out of order",
                   chat_template_name(t), i, m[i].role, b - a);
        pos = (size_t)(hit - out) + (b - a);
    }
    ci_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    static const char *const roles[8] = {"system",    "user",      "assistant", "user",
                                         "assistant", "developer", NULL,        "tool"};
    char *copy = fuzz_strndup(data, size);
    // Detection and names over the raw input.
    enum chat_template_id det = chat_template_detect(copy, size);
    FUZZ_CHECK(det >= CHAT_TEMPLATE_UNKNOWN && det < CHAT_TEMPLATE_COUNT, "detected %d", (int)det);
    enum chat_template_id by_name = chat_template_from_name(copy);
    FUZZ_CHECK(by_name >= CHAT_TEMPLATE_UNKNOWN && by_name < CHAT_TEMPLATE_COUNT, "named %d", (int)by_name);
    for (int t = CHAT_TEMPLATE_UNKNOWN + 1; t < CHAT_TEMPLATE_COUNT; t++) {
        const char *name = chat_template_name((enum chat_template_id)t);
        FUZZ_CHECK((int)chat_template_from_name(name) == t &&
                       (int)chat_template_detect(name, strlen(name)) == t,
                   "name '%s' does not round-trip", name);
        enum chat_template_id e = chat_template_for_eos((enum chat_template_id)t, copy, size);
        bool zephyr = t == CHAT_TEMPLATE_ZEPHYR || t == CHAT_TEMPLATE_ZEPHYR_HF;
        FUZZ_CHECK(zephyr ? e == CHAT_TEMPLATE_ZEPHYR || e == CHAT_TEMPLATE_ZEPHYR_HF : (int)e == t,
                   "for_eos changed %d to %d", t, (int)e);
    }

    // Messages: NUL-separated segments after the flags byte.
    bool add_gen = size > 0 && (data[0] & 1);
    struct chat_message m[MAX_MESSAGES];
    char *contents[MAX_MESSAGES];
    int n = 0;
    bool valid = true, utf8 = true;
    size_t off = size > 0 ? 1 : 0;
    while (off < size && n < MAX_MESSAGES) {
        const char *seg = copy + off;
        size_t l = strlen(seg); // up to the next NUL (or the end)
        unsigned r = l ? (unsigned char)seg[0] : 0;
        contents[n] = l ? fuzz_strndup(seg + 1, l - 1) : fuzz_strndup("", 0);
        m[n].role = roles[r & 7];
        m[n].content = (r & 0xf8) == 0xf8 ? NULL : contents[n]; // now and then a NULL content
        if (!m[n].role || !m[n].content ||
            (strcmp(m[n].role, "system") && strcmp(m[n].role, "user") && strcmp(m[n].role, "assistant")))
            valid = false;
        else if (!fuzz_utf8_valid(m[n].content, strlen(m[n].content)))
            utf8 = false;
        n++;
        off += l + 1;
    }
    if (n == 0)
        valid = false;
    for (int t = CHAT_TEMPLATE_UNKNOWN + 1; t < CHAT_TEMPLATE_COUNT; t++)
        check_template((enum chat_template_id)t, m, n, valid, add_gen, utf8);
    // Not a template: always refused.
    char *out = NULL;
    size_t len = 0;
    FUZZ_CHECK(chat_apply(CHAT_TEMPLATE_UNKNOWN, m, n, add_gen, &out, &len, NULL) == CI_ERR_INVALID,
               "unknown template accepted");
    FUZZ_CHECK(chat_apply(CHAT_TEMPLATE_COUNT, m, n, add_gen, &out, &len, NULL) == CI_ERR_INVALID,
               "template COUNT accepted");
    for (int i = 0; i < n; i++)
        free(contents[i]);
    free(copy);
    FUZZ_MEM_END();
    return 0;
}
