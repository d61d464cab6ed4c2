/* Chat templates (see chat.h).  The formats and the detection order follow llama.cpp's src/llama-chat.cpp;
 * the expected outputs in tests/unit/test_chat.c come from llama.cpp's tests/test-chat-template.cpp.
 *
 * chat_apply renders twice through one writer: a counting pass that sizes the prompt with overflow-checked
 * additions, then a writing pass into one exact allocation, so no realloc growth and no partial output. */
#include "tokenizer/chat.h"

#include <string.h>

#include "core/check.h"
#include "core/mem.h"

static const char *const template_names[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_UNKNOWN] = "unknown",
    [CHAT_TEMPLATE_CHATML] = "chatml",
    [CHAT_TEMPLATE_LLAMA2] = "llama2",
    [CHAT_TEMPLATE_LLAMA2_SYS] = "llama2-sys",
    [CHAT_TEMPLATE_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_TEMPLATE_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [CHAT_TEMPLATE_MISTRAL_V1] = "mistral-v1",
    [CHAT_TEMPLATE_MISTRAL_V3] = "mistral-v3",
    [CHAT_TEMPLATE_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_TEMPLATE_MISTRAL_V7] = "mistral-v7",
    [CHAT_TEMPLATE_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [CHAT_TEMPLATE_PHI3] = "phi3",
    [CHAT_TEMPLATE_ZEPHYR] = "zephyr",
    [CHAT_TEMPLATE_ZEPHYR_HF] = "zephyr-hf",
    [CHAT_TEMPLATE_GEMMA] = "gemma",
    [CHAT_TEMPLATE_LLAMA3] = "llama3",
};

const char *chat_template_name(enum chat_template_id id) {
    if ((int)id <= (int)CHAT_TEMPLATE_UNKNOWN || (int)id >= (int)CHAT_TEMPLATE_COUNT)
        return template_names[CHAT_TEMPLATE_UNKNOWN];
    return template_names[id];
}

static enum chat_template_id from_exact_name(const char *s, size_t len) {
    for (int i = CHAT_TEMPLATE_UNKNOWN + 1; i < CHAT_TEMPLATE_COUNT; i++) {
        if (strlen(template_names[i]) == len && memcmp(template_names[i], s, len) == 0)
            return (enum chat_template_id)i;
    }
    return CHAT_TEMPLATE_UNKNOWN;
}

enum chat_template_id chat_template_from_name(const char *name) {
    if (!name)
        return CHAT_TEMPLATE_UNKNOWN;
    enum chat_template_id id = from_exact_name(name, strlen(name));
    if (id != CHAT_TEMPLATE_UNKNOWN)
        return id;
    // llama.cpp sends any template text starting with "mistral" down its [INST] branch; with no further
    // markers in a bare name that branch ends at plain llama2.
    if (strncmp(name, "mistral", 7) == 0)
        return CHAT_TEMPLATE_LLAMA2;
    return CHAT_TEMPLATE_UNKNOWN;
}

/* ---- detection ---------------------------------------------------------------------------------------- */

struct haystack {
    const char *p;
    size_t n;
};

static bool has(const struct haystack *h, const char *needle) {
    size_t m = strlen(needle);
    if (m == 0)
        return true;
    if (m > h->n)
        return false;
    for (size_t i = 0; i + m <= h->n; i++) {
        if (h->p[i] == needle[0] && memcmp(h->p + i, needle, m) == 0)
            return true;
    }
    return false;
}

/* llama.cpp's llm_chat_detect_template, branch for branch and in its order.  Branches that end in a
 * template cinfer lacks return UNKNOWN rather than falling through, because falling through could reach a
 * later branch and pick a format the model was not trained on. */
enum chat_template_id chat_template_detect(const char *jinja, size_t len) {
    const enum chat_template_id none = CHAT_TEMPLATE_UNKNOWN;
    if (!jinja || len == 0)
        return none;
    enum chat_template_id by_name = from_exact_name(jinja, len);
    if (by_name != CHAT_TEMPLATE_UNKNOWN)
        return by_name;
    const struct haystack hs = {jinja, len}, *h = &hs;

    if (has(h, "<|im_start|>")) {
        if (has(h, "<|im_sep|>") || has(h, "<end_of_utterance>"))
            return none; // phi4, smolvlm
        return CHAT_TEMPLATE_CHATML;
    }
    if ((len >= 7 && memcmp(jinja, "mistral", 7) == 0) || has(h, "[INST]")) {
        if (has(h, "[SYSTEM_PROMPT]"))
            return CHAT_TEMPLATE_MISTRAL_V7;
        // Mistral's official v1 / v3 / v3-tekken templates.
        if (has(h, "' [INST] ' + system_message") || has(h, "[AVAILABLE_TOOLS]")) {
            if (has(h, " [INST]"))
                return CHAT_TEMPLATE_MISTRAL_V1;
            if (has(h, "\"[INST]\""))
                return CHAT_TEMPLATE_MISTRAL_V3_TEKKEN;
            return CHAT_TEMPLATE_MISTRAL_V3;
        }
        if (has(h, "content.strip()"))
            return CHAT_TEMPLATE_LLAMA2_SYS_STRIP;
        if (has(h, "bos_token + '[INST]"))
            return CHAT_TEMPLATE_LLAMA2_SYS_BOS;
        if (has(h, "<<SYS>>"))
            return CHAT_TEMPLATE_LLAMA2_SYS;
        return CHAT_TEMPLATE_LLAMA2;
    }
    if (has(h, "<|assistant|>") && has(h, "<|end|>"))
        return CHAT_TEMPLATE_PHI3;
    if (has(h, "[gMASK]<sop>"))
        return none; // chatglm4
    if (has(h, "<|assistant|>") && has(h, "<|user|>")) {
        // cinfer's addition: HuggingFaceH4's Zephyr template (also TinyLlama-Chat's) ends every turn with
        // eos_token; llama.cpp would call it glmedge and lose the turn ends.
        if (has(h, "eos_token") && !has(h, "</s>"))
            return CHAT_TEMPLATE_ZEPHYR_HF;
        return none; // falcon3 (with "</s>"), glmedge
    }
    if (has(h, "<|{{ item['role'] }}|>") && has(h, "<|begin_of_image|>"))
        return none; // glmedge
    if (has(h, "<|user|>") && has(h, "<|endoftext|>"))
        return CHAT_TEMPLATE_ZEPHYR;
    if (has(h, "bos_token + message['role']"))
        return none; // monarch
    if (has(h, "<start_of_turn>"))
        return CHAT_TEMPLATE_GEMMA;
    if (has(h, "'\\n\\nAssistant: ' + eos_token") || has(h, "GPT4 Correct ") ||
        (has(h, "USER: ") && has(h, "ASSISTANT: ")) || (has(h, "### Instruction:") && has(h, "<|EOT|>")) ||
        (has(h, "<|START_OF_TURN_TOKEN|>") && has(h, "<|USER_TOKEN|>")))
        return none; // orion, openchat, vicuna, deepseek, command-r
    if (has(h, "<|start_header_id|>") && has(h, "<|end_header_id|>"))
        return CHAT_TEMPLATE_LLAMA3;
    // Every later llama.cpp branch names a template cinfer does not implement.
    return none;
}

static bool bytes_eq(const char *s, size_t len, const char *lit) {
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

enum chat_template_id chat_template_for_eos(enum chat_template_id id, const char *eos_text, size_t len) {
    if ((id != CHAT_TEMPLATE_ZEPHYR && id != CHAT_TEMPLATE_ZEPHYR_HF) || !eos_text)
        return id;
    if (bytes_eq(eos_text, len, "<|endoftext|>"))
        return CHAT_TEMPLATE_ZEPHYR;
    if (bytes_eq(eos_text, len, "</s>"))
        return CHAT_TEMPLATE_ZEPHYR_HF;
    return id;
}

/* ---- rendering ---------------------------------------------------------------------------------------- */

/* Counts (buf == NULL) or writes.  The writing pass runs only after the counting pass fitted in size_t,
 * so only the counting pass can overflow. */
struct writer {
    char *buf; // [len of the counting pass + 1] or NULL
    size_t len;
    bool overflow;
};

static void put(struct writer *w, const char *s, size_t n) {
    if (w->overflow)
        return;
    size_t end;
    if (!ci_add_size(w->len, n, &end)) {
        w->overflow = true;
        return;
    }
    if (w->buf && n)
        memcpy(w->buf + w->len, s, n);
    w->len = end;
}

static void puts_(struct writer *w, const char *s) {
    put(w, s, strlen(s));
}

/* llama.cpp trims with isspace in the C locale: space, \t, \n, \v, \f, \r. */
static bool is_space(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static void put_trimmed(struct writer *w, const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && is_space((unsigned char)s[a]))
        a++;
    while (b > a && is_space((unsigned char)s[b - 1]))
        b--;
    put(w, s + a, b - a);
}

static void put_content(struct writer *w, const char *s, bool trim) {
    if (trim)
        put_trimmed(w, s);
    else
        puts_(w, s);
}

static size_t trimmed_len(const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && is_space((unsigned char)s[a]))
        a++;
    while (b > a && is_space((unsigned char)s[b - 1]))
        b--;
    return b - a;
}

static bool role_is(const struct chat_message *m, const char *role) {
    return strcmp(m->role, role) == 0;
}

static void render_mistral_v7(const struct chat_message *msgs, int n, bool tekken, struct writer *w) {
    const char *sp = tekken ? "" : " ";
    for (int i = 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (role_is(m, "system")) {
            puts_(w, "[SYSTEM_PROMPT]");
            puts_(w, sp);
            puts_(w, m->content);
            puts_(w, "[/SYSTEM_PROMPT]");
        } else if (role_is(m, "user")) {
            puts_(w, "[INST]");
            puts_(w, sp);
            puts_(w, m->content);
            puts_(w, "[/INST]");
        } else {
            puts_(w, sp);
            puts_(w, m->content);
            puts_(w, "</s>");
        }
    }
}

/* v1, v3 and v3-tekken differ only in the spaces around [INST]/[/INST] and in v3 trimming answers. */
static void render_mistral_v1_v3(const struct chat_message *msgs, int n, enum chat_template_id t,
                                 struct writer *w) {
    const char *lead = t == CHAT_TEMPLATE_MISTRAL_V1 ? " " : "";
    const char *trail = t == CHAT_TEMPLATE_MISTRAL_V3_TEKKEN ? "" : " ";
    bool trim_answer = t == CHAT_TEMPLATE_MISTRAL_V3;
    bool in_turn = false;
    for (int i = 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (!in_turn) {
            puts_(w, lead);
            puts_(w, "[INST]");
            puts_(w, trail);
            in_turn = true;
        }
        if (role_is(m, "system")) {
            puts_(w, m->content);
            puts_(w, "\n\n");
        } else if (role_is(m, "user")) {
            puts_(w, m->content);
            puts_(w, lead);
            puts_(w, "[/INST]");
        } else {
            puts_(w, trail);
            put_content(w, m->content, trim_answer);
            puts_(w, "</s>");
            in_turn = false;
        }
    }
}

static void render_llama2(const struct chat_message *msgs, int n, enum chat_template_id t, struct writer *w) {
    bool sys_block = t != CHAT_TEMPLATE_LLAMA2;
    bool bos_in_history = t == CHAT_TEMPLATE_LLAMA2_SYS_BOS;
    bool strip = t == CHAT_TEMPLATE_LLAMA2_SYS_STRIP;
    // The first turn's BOS comes from the tokenizer, so the prompt opens with a bare "[INST] ".
    bool in_turn = true;
    puts_(w, "[INST] ");
    for (int i = 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (!in_turn) {
            in_turn = true;
            puts_(w, bos_in_history ? "<s>[INST] " : "[INST] ");
        }
        if (role_is(m, "system")) {
            if (sys_block) {
                puts_(w, "<<SYS>>\n");
                put_content(w, m->content, strip);
                puts_(w, "\n<</SYS>>\n\n");
            } else {
                // A template without a system block still gets the text, ahead of the first user message.
                puts_(w, m->content);
                puts_(w, "\n");
            }
        } else if (role_is(m, "user")) {
            put_content(w, m->content, strip);
            puts_(w, " [/INST]");
        } else {
            put_content(w, m->content, strip);
            puts_(w, "</s>");
            in_turn = false;
        }
    }
}

/* phi3, zephyr and zephyr-hf: "<|role|>\n" content end-of-turn "\n". */
static void render_role_tags(const struct chat_message *msgs, int n, const char *eot, bool add_gen,
                             struct writer *w) {
    for (int i = 0; i < n; i++) {
        puts_(w, "<|");
        puts_(w, msgs[i].role);
        puts_(w, "|>\n");
        puts_(w, msgs[i].content);
        puts_(w, eot);
        puts_(w, "\n");
    }
    if (add_gen)
        puts_(w, "<|assistant|>\n");
}

static void render_gemma(const struct chat_message *msgs, int n, bool add_gen, struct writer *w) {
    // Gemma has no system role: system texts (trimmed, concatenated) open the next user turn.  pending is
    // where the not-yet-emitted system messages start.
    int pending = 0;
    for (int i = 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (role_is(m, "system"))
            continue;
        bool model = role_is(m, "assistant");
        puts_(w, "<start_of_turn>");
        puts_(w, model ? "model" : m->role);
        puts_(w, "\n");
        if (!model) {
            bool any = false;
            for (int j = pending; j < i; j++) {
                if (role_is(&msgs[j], "system") && trimmed_len(msgs[j].content) > 0)
                    any = true;
            }
            if (any) {
                for (int j = pending; j < i; j++) {
                    if (role_is(&msgs[j], "system"))
                        put_trimmed(w, msgs[j].content);
                }
                puts_(w, "\n\n");
            }
            pending = i + 1;
        }
        put_trimmed(w, m->content);
        puts_(w, "<end_of_turn>\n");
    }
    if (add_gen)
        puts_(w, "<start_of_turn>model\n");
}

static void render(enum chat_template_id t, const struct chat_message *msgs, int n, bool add_gen,
                   struct writer *w) {
    switch (t) {
    case CHAT_TEMPLATE_CHATML:
        for (int i = 0; i < n; i++) {
            puts_(w, "<|im_start|>");
            puts_(w, msgs[i].role);
            puts_(w, "\n");
            puts_(w, msgs[i].content);
            puts_(w, "<|im_end|>\n");
        }
        if (add_gen)
            puts_(w, "<|im_start|>assistant\n");
        break;
    case CHAT_TEMPLATE_LLAMA2:
    case CHAT_TEMPLATE_LLAMA2_SYS:
    case CHAT_TEMPLATE_LLAMA2_SYS_BOS:
    case CHAT_TEMPLATE_LLAMA2_SYS_STRIP:
        render_llama2(msgs, n, t, w);
        break;
    case CHAT_TEMPLATE_MISTRAL_V1:
    case CHAT_TEMPLATE_MISTRAL_V3:
    case CHAT_TEMPLATE_MISTRAL_V3_TEKKEN:
        render_mistral_v1_v3(msgs, n, t, w);
        break;
    case CHAT_TEMPLATE_MISTRAL_V7:
    case CHAT_TEMPLATE_MISTRAL_V7_TEKKEN:
        render_mistral_v7(msgs, n, t == CHAT_TEMPLATE_MISTRAL_V7_TEKKEN, w);
        break;
    case CHAT_TEMPLATE_PHI3:
        render_role_tags(msgs, n, "<|end|>", add_gen, w);
        break;
    case CHAT_TEMPLATE_ZEPHYR:
        render_role_tags(msgs, n, "<|endoftext|>", add_gen, w);
        break;
    case CHAT_TEMPLATE_ZEPHYR_HF:
        render_role_tags(msgs, n, "</s>", add_gen, w);
        break;
    case CHAT_TEMPLATE_GEMMA:
        render_gemma(msgs, n, add_gen, w);
        break;
    case CHAT_TEMPLATE_LLAMA3:
        for (int i = 0; i < n; i++) {
            puts_(w, "<|start_header_id|>");
            puts_(w, msgs[i].role);
            puts_(w, "<|end_header_id|>\n\n");
            put_trimmed(w, msgs[i].content);
            puts_(w, "<|eot_id|>");
        }
        if (add_gen)
            puts_(w, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_TEMPLATE_UNKNOWN:
    case CHAT_TEMPLATE_COUNT:
        CI_UNREACHABLE(); // chat_apply validated t
    }
}

enum ci_status chat_apply(enum chat_template_id t, const struct chat_message *msgs, int n,
                          bool add_generation_prompt, char **out, size_t *len, struct ci_err *err) {
    CI_ASSERT(out && len);
    char *buf = NULL;
    enum ci_status st = CI_OK;

    if ((int)t <= (int)CHAT_TEMPLATE_UNKNOWN || (int)t >= (int)CHAT_TEMPLATE_COUNT) {
        st = ci_err_set(err, CI_ERR_INVALID, "chat template %d is not a built-in template", (int)t);
        goto fail;
    }
    if (!msgs || n < 1) {
        st = ci_err_set(err, CI_ERR_INVALID, "a chat needs at least one message");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        const struct chat_message *m = &msgs[i];
        if (!m->role) {
            st = ci_err_set(err, CI_ERR_INVALID, "message %d has no role", i);
            goto fail;
        }
        if (!role_is(m, "system") && !role_is(m, "user") && !role_is(m, "assistant")) {
            st = ci_err_set(err, CI_ERR_INVALID,
                            "message %d: role '%.40s' is not supported (use system, user or assistant)", i,
                            m->role);
            goto fail;
        }
        if (!m->content) {
            st = ci_err_set(err, CI_ERR_INVALID, "message %d (%s) has no content", i, m->role);
            goto fail;
        }
    }

    struct writer w = {0};
    render(t, msgs, n, add_generation_prompt, &w);
    size_t total = w.len, alloc;
    if (w.overflow || !ci_add_size(total, 1, &alloc)) {
        st = ci_err_set(err, CI_ERR_LIMIT, "chat prompt is too large to format");
        goto fail;
    }
    buf = ci_malloc(alloc);
    if (!buf) {
        st = ci_err_set(err, CI_ERR_NOMEM, "out of memory formatting a %zu-byte chat prompt", total);
        goto fail;
    }
    w = (struct writer){.buf = buf};
    render(t, msgs, n, add_generation_prompt, &w);
    CI_ASSERT(!w.overflow && w.len == total);
    buf[total] = '\0';
    *out = buf;
    *len = total;
    return CI_OK;

fail:
    ci_free(buf);
    return st;
}
