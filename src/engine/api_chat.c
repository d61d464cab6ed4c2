/* The chat-template part of include/cinfer.h, over tokenizer/chat.c. */
#include <stddef.h>
#include <string.h>

#include "cinfer.h"
#include "engine/api_model.h"
#include "tokenizer/chat.h"

_Static_assert(sizeof(struct cinfer_chat_message) == sizeof(struct chat_message) &&
                   offsetof(struct cinfer_chat_message, content) == offsetof(struct chat_message, content),
               "cinfer_chat_message is passed to chat_apply as is");

int cinfer_chat_n_templates(void) {
    return CHAT_TEMPLATE_COUNT - 1;
}

const char *cinfer_chat_template_name(int i) {
    return chat_template_name((enum chat_template_id)(i + 1));
}

const char *cinfer_chat_template_lookup(const char *name) {
    enum chat_template_id t = chat_template_from_name(name);
    return t == CHAT_TEMPLATE_UNKNOWN ? NULL : chat_template_name(t);
}

const char *cinfer_chat_template_detect(const struct cinfer_model *m) {
    size_t len = 0;
    const char *jinja = cinfer_model_chat_template(m, &len);
    enum chat_template_id t = jinja ? chat_template_detect(jinja, len) : CHAT_TEMPLATE_UNKNOWN;
    if (t == CHAT_TEMPLATE_ZEPHYR || t == CHAT_TEMPLATE_ZEPHYR_HF) {
        // The Zephyr layout ends turns with the EOS text: find it among the end-of-generation tokens.
        for (int i = 0; i < m->n_eog; i++) {
            size_t n = 0;
            const char *piece = cinfer_token_piece(m, m->eog[i], &n);
            enum chat_template_id e = piece ? chat_template_for_eos(t, piece, n) : t;
            if (e != t) {
                t = e;
                break;
            }
        }
    }
    return t == CHAT_TEMPLATE_UNKNOWN ? NULL : chat_template_name(t);
}

enum cinfer_status cinfer_chat_apply(const char *template_name, const struct cinfer_chat_message *msgs, int n,
                                     bool add_generation_prompt, char **out, size_t *len,
                                     struct cinfer_error *err) {
    struct ci_err e = {0};
    enum chat_template_id t = chat_template_from_name(template_name);
    if (t == CHAT_TEMPLATE_UNKNOWN)
        ci_err_set(&e, CI_ERR_INVALID, "unknown chat template '%s'",
                   template_name ? template_name : "(none)");
    else if (chat_apply(t, (const struct chat_message *)msgs, n, add_generation_prompt, out, len, &e) ==
             CI_OK)
        return CINFER_OK;
    return api_fail(err, &e);
}
