/* SSE framing and OpenAI response JSON.  See sse.h. */
#include "server/sse.h"

#include <string.h>

#include "core/mem.h"
#include "core/utf8.h"

void sse_buf_init(struct sse_buf *b) {
    memset(b, 0, sizeof *b);
}

void sse_buf_deinit(struct sse_buf *b) {
    ci_free(b->data);
    memset(b, 0, sizeof *b);
}

/* Room for n more bytes. */
static bool reserve(struct sse_buf *b, size_t n) {
    if (b->off == b->len) // everything was taken: start over at the front
        b->off = b->len = 0;
    size_t need;
    if (!ci_add_size(b->len, n, &need))
        return false;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < need)
            if (!ci_mul_size(cap, 2, &cap))
                return false;
        char *grown = ci_realloc(b->data, cap);
        if (!grown)
            return false;
        b->data = grown;
        b->cap = cap;
    }
    return true;
}

bool sse_buf_append(struct sse_buf *b, const char *s, size_t n) {
    if (!reserve(b, n))
        return false;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return true;
}

bool sse_buf_data(struct sse_buf *b, const char *s, size_t n) {
    size_t total;
    if (!ci_add_size(n, 8, &total) || !reserve(b, total))
        return false;
    // Cannot fail now: the event goes in whole.
    return sse_buf_append(b, "data: ", 6) && sse_buf_append(b, s, n) && sse_buf_append(b, "\n\n", 2);
}

bool sse_buf_event(struct sse_buf *b, const cJSON *obj) {
    char *json = cJSON_PrintUnformatted(obj);
    if (!json)
        return false;
    bool ok = sse_buf_data(b, json, strlen(json));
    ci_free(json);
    return ok;
}

bool sse_buf_done(struct sse_buf *b) {
    static const char done[] = "data: [DONE]\n\n";
    return sse_buf_append(b, done, sizeof done - 1);
}

size_t sse_buf_take(struct sse_buf *b, char *out, size_t max) {
    size_t n = b->len - b->off;
    if (n > max)
        n = max;
    if (n == 0)
        return 0; // b->data is NULL until the first append: no memcpy from it, not even of 0 bytes
    memcpy(out, b->data + b->off, n);
    b->off += n;
    return n;
}

bool sse_buf_pending(const struct sse_buf *b) {
    return b->off < b->len;
}

/* ---- JSON --------------------------------------------------------------------------------------------- */

char *sse_utf8_clean(const char *s, size_t n, size_t *out_len) {
    size_t cap;
    if (!ci_mul_size(n, 3, &cap) || !ci_add_size(cap, 1, &cap))
        return NULL;
    char *o = ci_malloc(cap);
    if (!o)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        size_t bad;
        bool partial;
        int len = utf8_next_strict((const unsigned char *)s + i, n - i, &bad, &partial);
        if (len > 0 && s[i] != '\0') {
            memcpy(o + j, s + i, (size_t)len);
            j += (size_t)len;
            i += (size_t)len;
        } else { // an invalid byte, or a NUL that would cut the C string cJSON reads
            memcpy(o + j, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN); // one per byte (JSON text is short)
            j += UTF8_REPLACEMENT_LEN;
            i++;
        }
    }
    o[j] = '\0';
    if (out_len)
        *out_len = j;
    return o;
}

cJSON *sse_string(const char *s, size_t n) {
    char *clean = sse_utf8_clean(s ? s : "", s ? n : 0, NULL);
    if (!clean)
        return NULL;
    cJSON *v = cJSON_CreateString(clean);
    ci_free(clean);
    return v;
}

bool sse_add_string(cJSON *obj, const char *key, const char *s, size_t n) {
    cJSON *v = sse_string(s, n);
    if (!v)
        return false;
    if (!cJSON_AddItemToObject(obj, key, v)) {
        cJSON_Delete(v);
        return false;
    }
    return true;
}

cJSON *sse_object(const struct sse_head *h) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "id", h->id) || !cJSON_AddStringToObject(o, "object", h->object) ||
        !cJSON_AddNumberToObject(o, "created", (double)h->created) ||
        !sse_add_string(o, "model", h->model, strlen(h->model))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

bool sse_add_usage(cJSON *obj, long long prompt_tokens, long long completion_tokens) {
    cJSON *u = cJSON_AddObjectToObject(obj, "usage");
    return u && cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt_tokens) &&
           cJSON_AddNumberToObject(u, "completion_tokens", (double)completion_tokens) &&
           cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt_tokens + completion_tokens));
}

cJSON *sse_completion_logprobs_new(void) {
    cJSON *lp = cJSON_CreateObject();
    if (!lp || !cJSON_AddArrayToObject(lp, "tokens") || !cJSON_AddArrayToObject(lp, "token_logprobs") ||
        !cJSON_AddArrayToObject(lp, "top_logprobs") || !cJSON_AddArrayToObject(lp, "text_offset")) {
        cJSON_Delete(lp);
        return NULL;
    }
    return lp;
}

static bool push(cJSON *arr, cJSON *item) {
    if (!item)
        return false;
    if (!cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

bool sse_completion_logprobs_add(cJSON *lp, const struct sse_top *tok, const struct sse_top *top, int n_top,
                                 long long text_offset) {
    cJSON *alts = cJSON_CreateObject();
    if (!alts)
        return false;
    for (int i = 0; i < n_top; i++) {
        char *key = sse_utf8_clean(top[i].text, top[i].len, NULL);
        // Two alternatives with the same text (possible with byte tokens) keep the more likely one.
        bool ok = key && (cJSON_GetObjectItemCaseSensitive(alts, key) ||
                          cJSON_AddNumberToObject(alts, key, (double)top[i].logprob));
        ci_free(key);
        if (!ok) {
            cJSON_Delete(alts);
            return false;
        }
    }
    // The sampled token is listed among the alternatives too (vLLM's shape), so logprobs = 0 still shows it.
    char *key = sse_utf8_clean(tok->text, tok->len, NULL);
    bool ok = key && (cJSON_GetObjectItemCaseSensitive(alts, key) ||
                      cJSON_AddNumberToObject(alts, key, (double)tok->logprob));
    ci_free(key);
    if (!ok) {
        cJSON_Delete(alts);
        return false;
    }
    if (!push(cJSON_GetObjectItemCaseSensitive(lp, "tokens"), sse_string(tok->text, tok->len)) ||
        !push(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"), cJSON_CreateNumber(tok->logprob))) {
        cJSON_Delete(alts); // not pushed yet
        return false;
    }
    return push(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), alts) &&
           push(cJSON_GetObjectItemCaseSensitive(lp, "text_offset"), cJSON_CreateNumber((double)text_offset));
}

cJSON *sse_chat_logprobs_new(void) {
    cJSON *lp = cJSON_CreateObject();
    if (!lp || !cJSON_AddArrayToObject(lp, "content")) {
        cJSON_Delete(lp);
        return NULL;
    }
    return lp;
}

/* {"token","logprob","bytes"}: bytes are the token's raw bytes, which may be part of a character. */
static cJSON *chat_entry(const struct sse_top *t) {
    cJSON *e = cJSON_CreateObject();
    cJSON *bytes = e && sse_add_string(e, "token", t->text, t->len) &&
                           cJSON_AddNumberToObject(e, "logprob", (double)t->logprob)
                       ? cJSON_AddArrayToObject(e, "bytes")
                       : NULL;
    for (size_t i = 0; bytes && i < t->len; i++)
        if (!push(bytes, cJSON_CreateNumber((unsigned char)t->text[i])))
            bytes = NULL;
    if (!bytes) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

bool sse_chat_logprobs_add(cJSON *lp, const struct sse_top *tok, const struct sse_top *top, int n_top) {
    cJSON *e = chat_entry(tok);
    cJSON *alts = e ? cJSON_AddArrayToObject(e, "top_logprobs") : NULL;
    for (int i = 0; alts && i < n_top; i++)
        if (!push(alts, chat_entry(&top[i])))
            alts = NULL;
    if (!alts) {
        cJSON_Delete(e);
        return false;
    }
    return push(cJSON_GetObjectItemCaseSensitive(lp, "content"), e);
}

cJSON *sse_choice(enum sse_shape shape, int index, const char *text, size_t len, bool role, cJSON *logprobs,
                  const char *finish_reason) {
    cJSON *c = cJSON_CreateObject();
    if (!c || !cJSON_AddNumberToObject(c, "index", index))
        goto fail;
    if (shape == SSE_COMPLETION) {
        if (!sse_add_string(c, "text", text, text ? len : 0))
            goto fail;
    } else {
        cJSON *m = cJSON_AddObjectToObject(c, shape == SSE_CHAT_DELTA ? "delta" : "message");
        if (!m || ((shape == SSE_CHAT_MESSAGE || role) && !cJSON_AddStringToObject(m, "role", "assistant")) ||
            ((shape == SSE_CHAT_MESSAGE || text) && !sse_add_string(m, "content", text, text ? len : 0)))
            goto fail;
    }
    if (logprobs) {
        if (!cJSON_AddItemToObject(c, "logprobs", logprobs))
            goto fail;
        logprobs = NULL;
    } else if (!cJSON_AddNullToObject(c, "logprobs")) {
        goto fail;
    }
    if (!(finish_reason ? cJSON_AddStringToObject(c, "finish_reason", finish_reason)
                        : cJSON_AddNullToObject(c, "finish_reason")))
        goto fail;
    return c;
fail:
    cJSON_Delete(logprobs);
    cJSON_Delete(c);
    return NULL;
}
