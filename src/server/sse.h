/* Server-sent events framing ("data: {json}\n\n" ... "data: [DONE]\n\n") and the assembly of OpenAI response
 * JSON (cJSON): response/chunk heads, choices, usage and logprobs in the completions and chat shapes.  All
 * text that goes into JSON passes through sse_utf8_clean, so a response is valid UTF-8 whatever bytes a
 * token holds.
 *
 * Ownership: an sse_buf owns its bytes; the cJSON builders return new objects the caller owns (cJSON_Delete),
 * and sse_choice takes ownership of the logprobs object it is given, even on failure. */
#ifndef CINFER_SERVER_SSE_H
#define CINFER_SERVER_SSE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Bytes waiting to be written to a streaming response. */
struct sse_buf {
    char *data; // [cap]
    size_t len; // bytes held
    size_t off; // bytes already taken
    size_t cap;
};

void sse_buf_init(struct sse_buf *b);
void sse_buf_deinit(struct sse_buf *b);
bool sse_buf_append(struct sse_buf *b, const char *s, size_t n);
/* "data: " + s[0..n) + "\n\n", whole or (false: out of memory) not at all. */
bool sse_buf_data(struct sse_buf *b, const char *s, size_t n);
/* "data: " + obj as compact JSON + "\n\n", whole or (false: out of memory) not at all. */
bool sse_buf_event(struct sse_buf *b, const cJSON *obj);
/* "data: [DONE]\n\n" */
bool sse_buf_done(struct sse_buf *b);
/* Moves up to max pending bytes to out; returns how many. */
size_t sse_buf_take(struct sse_buf *b, char *out, size_t max);
bool sse_buf_pending(const struct sse_buf *b);

/* s[0..n) with every byte that is not part of a valid UTF-8 sequence replaced by U+FFFD; ci_malloc'ed,
 * NUL-terminated (*out_len without the NUL; may be NULL).  NULL when out of memory. */
char *sse_utf8_clean(const char *s, size_t n, size_t *out_len);
/* A cJSON string of s[0..n), cleaned. */
cJSON *sse_string(const char *s, size_t n);
bool sse_add_string(cJSON *obj, const char *key, const char *s, size_t n);

/* The fields every response and chunk starts with. */
struct sse_head {
    const char *id;     // "cmpl-…" / "chatcmpl-…"
    const char *object; // "text_completion", "chat.completion", "chat.completion.chunk"
    long long created;  // Unix seconds
    const char *model;  // the served model name
};
/* {"id","object","created","model"} */
cJSON *sse_object(const struct sse_head *h);
/* Adds "usage": {prompt_tokens, completion_tokens, total_tokens}. */
bool sse_add_usage(cJSON *obj, long long prompt_tokens, long long completion_tokens);

/* One alternative of a token's log-probability list. */
struct sse_top {
    const char *text; // the token's text
    size_t len;
    float logprob;
};

/* Completions' logprobs {"tokens":[], "token_logprobs":[], "top_logprobs":[], "text_offset":[]}; _add
 * appends one token with its top alternatives (a {text: logprob} object). */
cJSON *sse_completion_logprobs_new(void);
bool sse_completion_logprobs_add(cJSON *lp, const struct sse_top *tok, const struct sse_top *top, int n_top,
                                 long long text_offset);
/* Chat's logprobs {"content": [{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}]}. */
cJSON *sse_chat_logprobs_new(void);
bool sse_chat_logprobs_add(cJSON *lp, const struct sse_top *tok, const struct sse_top *top, int n_top);

enum sse_shape {
    SSE_COMPLETION,   // {"index","text","logprobs","finish_reason"}
    SSE_CHAT_MESSAGE, // {"index","message":{"role":"assistant","content"},"logprobs","finish_reason"}
    SSE_CHAT_DELTA,   // {"index","delta":{["role":"assistant",]["content"]},"logprobs","finish_reason"}
};
/* One choice.  text may be NULL (a delta without content); finish_reason NULL gives null; logprobs (taken)
 * NULL gives null; role adds "role":"assistant" to a delta. */
cJSON *sse_choice(enum sse_shape shape, int index, const char *text, size_t len, bool role, cJSON *logprobs,
                  const char *finish_reason);

#endif
