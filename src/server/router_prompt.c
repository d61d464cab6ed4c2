/* A request's block keys for routing (router_prompt.h). */
#include "server/router_prompt.h"

#include <limits.h>
#include <string.h>

#include "core/hash.h"
#include "core/mem.h"
#include "server/anthropic.h"
#include "server/chat_prompt.h"
#include "server/openai.h"

/* Keys over text: its bytes as tokens, 4 to a token (blocks of 4 * block_size bytes). */
static int text_keys(const struct router_prompt *rp, const char *text, size_t n, uint64_t *keys) {
    size_t max = (size_t)ROUTER_MAX_KEYS * 4 * (size_t)rp->block_size;
    if (n > max)
        n = max;
    int32_t *t = ci_malloc((n ? n : 1) * sizeof *t);
    if (!t)
        return 0;
    for (size_t i = 0; i < n; i++)
        t[i] = (unsigned char)text[i];
    int k = (int)ci_hash_chain(t, n, 4 * rp->block_size, keys, ROUTER_MAX_KEYS);
    ci_free(t);
    return k;
}

static int token_keys(const struct router_prompt *rp, const char *text, uint64_t *keys) {
    cinfer_token *ids = NULL;
    int n = 0;
    struct cinfer_error ce = {0};
    if (cinfer_tokenize(rp->m, text, strlen(text), true, &ids, &n, &ce) != CINFER_OK)
        return 0;
    int k = (int)ci_hash_chain(ids, (size_t)n, rp->block_size, keys, ROUTER_MAX_KEYS);
    cinfer_free(ids);
    return k;
}

/* Messages one after the other ("role\ncontent\n"), for keys over bytes. */
static char *join_messages(const struct cinfer_chat_message *msgs, int n) {
    size_t total = 1;
    for (int i = 0; i < n; i++)
        total += strlen(msgs[i].role) + strlen(msgs[i].content) + 2;
    char *s = ci_malloc(total), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < n; i++) {
        size_t a = strlen(msgs[i].role), b = strlen(msgs[i].content);
        memcpy(p, msgs[i].role, a);
        p[a] = '\n';
        memcpy(p + a + 1, msgs[i].content, b);
        p[a + 1 + b] = '\n';
        p += a + b + 2;
    }
    *p = '\0';
    return s;
}

/* The prompt text of a chat (or Anthropic) request: rendered as the replica renders it, else joined. */
static int chat_keys(const struct router_prompt *rp, const char *ctx_body, size_t ctx_len,
                     const struct cinfer_chat_message *msgs, int n, const char *prefill, uint64_t *keys) {
    char *prompt = NULL;
    if (rp->m) {
        struct openai_error oe;
        const struct chat_prompt cp = {rp->m, rp->tmpl, rp->jinja, rp->object_arguments};
        if (chat_prompt_render(&cp, ctx_body, ctx_len, msgs, n, true, &prompt, &oe) != CINFER_OK)
            return 0;
    } else if (!(prompt = join_messages(msgs, n))) {
        return 0;
    }
    if (prefill) { // /v1/messages: the answer's start is part of the prompt
        size_t a = strlen(prompt), b = strlen(prefill);
        char *both = ci_malloc(a + b + 1);
        if (!both) {
            ci_free(prompt);
            return 0;
        }
        memcpy(both, prompt, a);
        memcpy(both + a, prefill, b + 1);
        ci_free(prompt);
        prompt = both;
    }
    int k = rp->m ? token_keys(rp, prompt, keys) : text_keys(rp, prompt, strlen(prompt), keys);
    ci_free(prompt);
    return k;
}

int router_prompt_keys(const struct router_prompt *rp, enum router_endpoint ep, const char *body, size_t len,
                       uint64_t *keys) {
    // The replica checks the limits; here anything the parser accepts is worth routing.
    struct openai_limits lim = {INT_MAX, INT_MAX};
    struct openai_error oe;
    int k = 0;
    if (ep == ROUTER_EP_CHAT || ep == ROUTER_EP_COMPLETIONS) {
        struct openai_request q;
        if (openai_parse(ep == ROUTER_EP_CHAT ? OPENAI_CHAT : OPENAI_COMPLETIONS, body, len, &lim, &q, &oe) !=
            CI_OK)
            return 0;
        if (ep == ROUTER_EP_CHAT) {
            k = chat_keys(rp, body, len, q.messages, q.n_messages, NULL, keys);
        } else if (q.n_prompts > 0 && q.prompts[0].text) { // several prompts: the first one decides
            const char *t = q.prompts[0].text;
            k = rp->m ? token_keys(rp, t, keys) : text_keys(rp, t, strlen(t), keys);
        } else if (q.n_prompts > 0) { // token ids, used as given
            k = (int)ci_hash_chain(q.prompts[0].ids, (size_t)q.prompts[0].n_ids, rp->block_size, keys,
                                   ROUTER_MAX_KEYS);
        }
        openai_request_deinit(&q);
    } else if (ep == ROUTER_EP_MESSAGES) {
        struct anthropic_request a;
        if (anthropic_parse(body, len, false, &lim, &a, &oe) != CI_OK)
            return 0;
        k = chat_keys(rp, a.chat_json, a.chat_json_len, a.q.messages, a.q.n_messages, a.prefill, keys);
        anthropic_request_deinit(&a);
    }
    return k;
}
