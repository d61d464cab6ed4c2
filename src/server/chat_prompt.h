/* A chat request's prompt text: its messages rendered with the model's Jinja chat template (the variables
 * built from the request body as Hugging Face's apply_chat_template sees them), or with a built-in template
 * of tokenizer/chat.c.  One function for `cinfer serve` and `cinfer router`, so the router's prompt (and so
 * its prefix-cache block keys) is the replica's own.  The returned text is the caller's (ci_free). */
#ifndef CINFER_SERVER_CHAT_PROMPT_H
#define CINFER_SERVER_CHAT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer.h"
#include "server/openai.h"

struct chat_prompt {
    const struct cinfer_model *m;        // the model (its BOS/EOS texts; a vocabulary-only load is enough)
    const char *tmpl;                    // a built-in template's name, used when jinja is NULL
    const struct cinfer_template *jinja; // the Jinja template, or NULL
    bool object_arguments; // the template reads tool-call arguments as objects (chat_prompt_object_arguments)
};

/* The prompt of messages msgs[0..n) (as validated from body, which the Jinja template's context is built
 * from: tools, chat_template_kwargs, the messages' other fields).  On failure oe says why (400 naming
 * "messages", or 500). */
enum cinfer_status chat_prompt_render(const struct chat_prompt *cp, const char *body, size_t body_len,
                                      const struct cinfer_chat_message *msgs, int n,
                                      bool add_generation_prompt, char **out, struct openai_error *oe);

/* Whether the Jinja template reads tool-call arguments as an object (llama.cpp's supports_object_arguments):
 * then chat_prompt_render gives it the JSON value of OpenAI's arguments text, else the text as sent. */
bool chat_prompt_object_arguments(const struct cinfer_model *m, const struct cinfer_template *jinja);

#endif
