/* The prefix-cache block keys of a request, as `cinfer router` computes them to route it.  With the model's
 * vocabulary (a vocabulary-only load of the replicas' model file), the prompt is built exactly as `cinfer
 * serve` builds it (the chat template through chat_prompt.c, then the tokenizer with BOS as the vocabulary
 * asks) and the keys are the engine prefix cache's own chain (core/hash.h) over its tokens, so two requests
 * share leading keys exactly when they share cached blocks on a replica.  Without a vocabulary, the keys are
 * the same chain over the prompt's bytes (chat: each message's role and content, one after the other),
 * 4 bytes standing for a token: an approximation that still sends prompts with a common prefix to the same
 * replica.
 *
 * A body the router cannot read gets no keys (the request is routed by load; the replica answers its
 * error). */
#ifndef CINFER_SERVER_ROUTER_PROMPT_H
#define CINFER_SERVER_ROUTER_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer.h"

enum router_endpoint { ROUTER_EP_CHAT, ROUTER_EP_COMPLETIONS, ROUTER_EP_MESSAGES, ROUTER_EP_OTHER };

#define ROUTER_MAX_KEYS 4096 // blocks of a prompt looked at (65536 tokens at block size 16)

struct router_prompt {
    const struct cinfer_model *m;        // a vocabulary, or NULL (keys over bytes)
    const char *tmpl;                    // the built-in chat template's name (when jinja is NULL)
    const struct cinfer_template *jinja; // the model's Jinja chat template, or NULL
    int block_size;                      // the replicas' KV block size (--block-size of serve)
    bool object_arguments;               // as serve decides it (chat_prompt_object_arguments)
};

/* Writes the keys of the request body (len bytes, body[len] == NUL) into keys[0..ROUTER_MAX_KEYS);
 * returns how many. */
int router_prompt_keys(const struct router_prompt *rp, enum router_endpoint ep, const char *body, size_t len,
                       uint64_t *keys);

#endif
